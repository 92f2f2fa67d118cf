"""RankCSE (Liu et al., ACL 2023, arXiv 2305.16726): SimCSE plus listwise ranking distillation from teacher
models and ranking consistency between the two dropout views.

The authors released no code. This follows the most-used public implementation, the *community* repository
perceptiveshawty/RankCSE (its README: "a community implementation ... I am not affiliated with the authors"),
``rankcse/models.py: cl_forward, ListNet, ListMLE, Divergence`` and ``rankcse/trainers.py`` (teacher scores):

    L = L_infoNCE + beta * L_consistency + gamma * L_rank

* ``L_infoNCE``: SimCSE's loss on ``S = cos(z1, z2) / temp`` (B, B).
* teachers (frozen, eval mode) embed the same token ids; their lists are ``cos(t1, t2) / tau2``, two teachers
  mixed ``alpha * T_1 + (1 - alpha) * T_2``.
* ``L_rank``: ListNet (cross-entropy between the teacher's and the student's top-1 distributions over each row,
  the positive excluded: the code fills both diagonals with -inf) or ListMLE (the negative log-likelihood of the
  teacher's permutation under the student's Plackett-Luce model, over the whole row; columns are shuffled first
  to break ties at random, here with a generator seeded by (seed, step, rank), so a resumed run draws the same).
* ``L_consistency``: the paper's Jensen-Shannon divergence between ``softmax(S)`` rows and
  ``softmax(cos(z2, z1) / temp)`` rows (``consistency="js"``, default). ``consistency="community"`` is the
  community code's ``Divergence`` exactly: it clamps the *log* of the mixture at 1e-7 (a constant), so the term
  is ``0.5 * (sum p log p + sum q log q) / B`` minus a constant: a negative entropy, not a divergence.

Teachers are not submodules: they are loaded at :meth:`RankCSE.setup` from their names, never trained, never
saved in a checkpoint or in the inference folder; each checkpoint records their fingerprints
(:func:`simcse.models.folder.model_fingerprint`) and a resume with other teachers is refused. Their scores are
a deterministic function of the batch (no dropout), so a resumed run sees the same scores.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from simcse.training.losses import cosine_logits
from simcse.training.objectives import register_objective
from simcse.training.objectives.base import LossContext, Objective

DISTILLATIONS = ("listnet", "listmle")
CONSISTENCIES = ("js", "community")
_EPS = 1e-7  # the community code's clamp / log epsilon


def _wide(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32, or float64 when it is float64."""
    return x if x.dtype == torch.float64 else x.float()


def listnet(teacher: torch.Tensor, student: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """ListNet top-1 cross-entropy, each query's own positive (column ``labels[i]``) left out.

    teacher, student: (B, M) scores; labels: (B,) int64. Returns the mean over rows (float32 scalar)."""
    rows = torch.arange(len(labels), device=labels.device)
    keep = torch.ones_like(student, dtype=torch.bool)
    keep[rows, labels] = False
    log_p = F.log_softmax(_wide(student).masked_fill(~keep, float("-inf")), dim=-1)
    q = F.softmax(_wide(teacher).masked_fill(~keep, float("-inf")), dim=-1)
    return -(q * log_p.masked_fill(~keep, 0.0)).sum() / q.sum()


def listmle(teacher: torch.Tensor, student: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """ListMLE: -log P(teacher's order | student's scores) under Plackett-Luce, mean over rows.

    Columns are permuted first (``torch.randperm`` with ``generator``) so that ties in the teacher's scores are
    broken at random; ``log`` of each tail sum gets 1e-7 as in the community code. A teacher score of exactly -1
    marks a padded item (allRank's convention, kept by the community code, ``rankcse/models.py`` ListMLE
    ``mask = y_true_sorted == -1``): it leaves every tail sum (its student score is set to -inf) and its own term
    is 0. teacher, student: (B, M)."""
    perm = torch.randperm(student.shape[-1], generator=generator).to(student.device)
    s, t = _wide(student)[:, perm], _wide(teacher)[:, perm]
    t_sorted, order = t.sort(dim=-1, descending=True)
    padded = t_sorted == -1
    ranked = s.gather(1, order).masked_fill(padded, float("-inf"))
    shifted = ranked - ranked.max(dim=1, keepdim=True).values
    tails = shifted.exp().flip(1).cumsum(1).flip(1)  # sum over the items ranked at or below each position
    return (torch.log(tails + _EPS) - shifted).masked_fill(padded, 0.0).sum(1).mean()


def consistency_loss(p_logits: torch.Tensor, q_logits: torch.Tensor, kind: str = "js") -> torch.Tensor:
    """Ranking consistency between ``softmax(p_logits)`` and ``softmax(q_logits)`` rows (each clamped at 1e-7, as
    the community code), mean over rows: ``"js"`` the Jensen-Shannon divergence (paper), ``"community"`` that
    code's ``Divergence`` (see the module)."""
    p = _wide(p_logits).softmax(-1).clamp(min=_EPS)
    q = _wide(q_logits).softmax(-1).clamp(min=_EPS)
    rows = p.shape[0]
    if kind == "community":
        return 0.5 * ((p * (p.log() - _EPS)).sum() + (q * (q.log() - _EPS)).sum()) / rows
    log_m = (0.5 * (p + q)).log()
    return 0.5 * ((p * (p.log() - log_m)).sum() + (q * (q.log() - log_m)).sum()) / rows


@register_objective
class RankCSE(Objective):
    """RankCSE's objective (see the module for the equations and the community code it follows).

    Hyperparameters (``--loss_args``):
        teachers: one or two teacher models (folders or hub names; ``all-MiniLM-L6-v2`` is the embedded one).
            They must share the student's vocabulary (the community code feeds them the student's token ids).
        teacher_poolers: their poolers (None each: what the folder records; the community code used
            ``cls_before_pooler`` for SimCSE/DiffCSE checkpoints, ``avg`` otherwise).
        alpha: weight of the first teacher's list (``--alpha_``), ignored with one teacher.
        distillation: ``"listnet"`` or ``"listmle"`` (``--distillation_loss``).
        temp: student temperature for InfoNCE and the student's lists (``--temp``).
        tau2: teacher temperature (``--tau2``).
        beta: weight of the consistency term (``--beta_``; the community code ignores it and uses 1).
        gamma: weight of the distillation term (``--gamma_``).
        consistency: ``"js"`` (paper) or ``"community"`` (that code's term, see the module).

    Returns ``{"infonce", "consistency", "distillation"}`` float32 scalars.
    """

    name = "rankcse"
    input_columns = ("sent0",)
    optional_columns = ("sent1",)
    supports_gather = True  # lists run over all processes' keys; teacher keys gathered without gradients
    supports_grad_cache = True  # teachers are a detached function of the batch's ids

    def __init__(self, teachers: list[str] | str = ("all-MiniLM-L6-v2",), teacher_poolers: list | None = None,
                 alpha: float = 0.33, distillation: str = "listmle", temp: float = 0.05, tau2: float = 0.05,
                 beta: float = 1.0, gamma: float = 1.0, consistency: str = "js"):
        super().__init__()
        teachers = [teachers] if isinstance(teachers, str) else list(teachers)
        if not 1 <= len(teachers) <= 2 or not all(isinstance(t, str) and t for t in teachers):
            raise ValueError(f"--loss_args teachers must be one or two model names, got {teachers!r}")
        poolers = list(teacher_poolers) if teacher_poolers is not None else [None] * len(teachers)
        if len(poolers) != len(teachers):
            raise ValueError(f"--loss_args teacher_poolers must name one pooler per teacher ({len(teachers)}), got {poolers!r}")
        if distillation not in DISTILLATIONS:
            raise ValueError(f"--loss_args distillation must be one of {list(DISTILLATIONS)}, got {distillation!r}")
        if consistency not in CONSISTENCIES:
            raise ValueError(f"--loss_args consistency must be one of {list(CONSISTENCIES)}, got {consistency!r}")
        for key, value, positive in (("temp", temp, True), ("tau2", tau2, True), ("alpha", alpha, False),
                                     ("beta", beta, False), ("gamma", gamma, False)):
            bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            if bad or (value <= 0 if positive else value < 0):
                raise ValueError(f"--loss_args {key} must be a {'positive' if positive else 'non-negative'} number, "
                                 f"got {value!r}")
        self.teacher_names, self.teacher_poolers = teachers, poolers
        self.alpha, self.distillation, self.consistency = float(alpha), distillation, consistency
        self.temp, self.tau2, self.beta, self.gamma = float(temp), float(tau2), float(beta), float(gamma)
        self._teachers: list = []  # a plain list: teachers are not submodules (not trained, not checkpointed)
        self._fingerprints: list[str] = []
        self._expected: list[str] | None = None

    # ------------------------------------------------------------------------------------------ teachers
    def setup(self, model, args) -> None:
        """Load the teachers (frozen, eval mode) and check they share the student's vocabulary.

        Raises:
            ValueError: a teacher's vocabulary differs from the student's, or (on resume) the teachers are not
                the ones the checkpoint was trained with.
        """
        from simcse.models.folder import model_fingerprint
        from simcse.models.modeling import SimCSEModel
        from simcse.training.config import resolve_model_name

        student_vocab = model.tokenizer.get_vocab() if getattr(model, "tokenizer", None) is not None else None
        self._teachers = []
        for name, pooler in zip(self.teacher_names, self.teacher_poolers):
            teacher = SimCSEModel.from_pretrained(resolve_model_name(name), pooler_type=pooler).eval()
            if student_vocab is not None and teacher.tokenizer.get_vocab() != student_vocab:
                raise ValueError(f"--loss rankcse: teacher {name!r} has another vocabulary than the student; the "
                                 "teachers read the student's token ids (as the community code): use teachers of the "
                                 "student's tokenizer")
            teacher.requires_grad_(False)
            self._teachers.append(teacher)
        self._fingerprints = [model_fingerprint(t) for t in self._teachers]
        self._check_resume()

    def get_extra_state(self) -> dict:
        return {"teacher_fingerprints": list(self._fingerprints)}

    def set_extra_state(self, state) -> None:
        self._expected = list(state.get("teacher_fingerprints", [])) or None
        if self._fingerprints:
            self._check_resume()

    def _check_resume(self) -> None:
        if self._expected is not None and self._fingerprints and self._expected != self._fingerprints:
            raise ValueError(f"--loss rankcse: the teachers {self.teacher_names} are not the ones this checkpoint was "
                             "trained with (their fingerprints differ); resume with the run's own --loss_args teachers")

    @torch.no_grad()
    def teacher_embeddings(self, batch, view: int) -> list[torch.Tensor]:
        """Each teacher's (B, H_t) float32 (float64 for a float64 teacher) embeddings of view ``view`` of
        ``batch``'s (B, V, L) ids."""
        keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch]
        inputs = {k: batch[k][:, view] for k in keys}
        out = []
        for t in self._teachers:
            if t.device != inputs["input_ids"].device:
                t.to(inputs["input_ids"].device)
            out.append(_wide(t(**inputs)))
        return out

    def teacher_scores(self, batch, context: LossContext) -> torch.Tensor:
        """The teachers' (B, W*B) lists ``cos(t1_i, t2_j) / tau2`` (mixed by ``alpha`` for two teachers), detached."""
        if not self._teachers:
            raise ValueError("--loss rankcse: no teachers loaded; call setup(model, args) first")
        first = self.teacher_embeddings(batch, 0)
        same = all(torch.equal(batch[k][:, 0], batch[k][:, 1]) for k in ("input_ids", "attention_mask") if k in batch)
        second = first if same else self.teacher_embeddings(batch, 1)
        lists = [cosine_logits(a, context.gather_nograd(b), self.tau2) for a, b in zip(first, second)]
        if len(lists) == 1:
            return lists[0]
        return self.alpha * lists[0] + (1.0 - self.alpha) * lists[1]

    # ------------------------------------------------------------------------------------------ loss
    def loss(self, embeddings: torch.Tensor, batch, context: LossContext) -> dict[str, torch.Tensor]:
        """Raises ValueError for rows with more than 2 views (a hard negative has no teacher list)."""
        if embeddings.shape[1] != 2:
            raise ValueError(f"--loss rankcse takes 2 views per row (sent0 and its positive), got {embeddings.shape[1]}")
        z1, z2 = embeddings[:, 0], embeddings[:, 1]
        labels = torch.arange(len(z1), device=z1.device) + context.rank * len(z1)
        s12 = cosine_logits(z1, context.gather(z2), self.temp)  # (B, W*B)
        s21 = cosine_logits(z2, context.gather(z1), self.temp)
        teacher = self.teacher_scores(batch, context)
        if self.distillation == "listnet":
            rank = listnet(teacher, s12, labels)
        else:
            rank = listmle(teacher, s12, torch.Generator().manual_seed(context.draw_seed()))
        return {"infonce": F.cross_entropy(s12, labels),
                "consistency": self.beta * consistency_loss(s12, s21, self.consistency),
                "distillation": self.gamma * rank}

    def get_config_dict(self) -> dict:
        return {"teachers": self.teacher_names, "teacher_poolers": self.teacher_poolers, "alpha": self.alpha,
                "distillation": self.distillation, "temp": self.temp, "tau2": self.tau2, "beta": self.beta,
                "gamma": self.gamma, "consistency": self.consistency}
