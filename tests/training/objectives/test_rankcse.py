"""RankCSE's objective (simcse.training.objectives.rankcse) against an independent forward of the community code
it follows (perceptiveshawty/RankCSE, not the authors': ``rankcse/models.py: cl_forward, ListNet, ListMLE,
Divergence`` and the teacher scores of ``rankcse/trainers.py``), transcribed here: same loss (1e-6) and gradients
(2e-5 relative) on a tiny BERT with dropout off and two tiny random teachers, and a different loss when a key
hyperparameter (tau2, alpha, gamma, temp, the list loss) changes."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import SENTENCES, make_tiny_model, write_corpus
from fidelity_harness import ReferenceBase
from simcse.models.modeling import SimCSEModel
from simcse.training.objectives import build_objective
from simcse.training.objectives.base import LossContext

TEMP, TAU2, ALPHA = 0.05, 0.05, 0.33


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("rank")
    return {name: make_tiny_model(root / name, "bert", seed=seed, dropout=0.0)
            for name, seed in (("student", 0), ("t1", 1), ("t2", 2))}


# ----------------------------------------------------------------------------- the community code, transcribed
def _sim(x, y, temp):
    return nn.CosineSimilarity(dim=-1)(x, y) / temp


def _community_listnet(teacher, student, gamma):
    p = F.log_softmax(student.fill_diagonal_(float("-inf")), dim=-1)
    q = F.softmax(teacher.fill_diagonal_(float("-inf")), dim=-1)
    return gamma * (-(q * p).nansum() / q.nansum())


def _community_listmle(teacher, student, gamma, random_indices):
    y_pred, y_true = student[:, random_indices], teacher[:, random_indices]
    y_true_sorted, indices = y_true.sort(descending=True, dim=-1)
    mask = y_true_sorted == -1
    preds = torch.gather(y_pred, dim=1, index=indices)
    preds[mask] = float("-inf")
    preds = preds - preds.max(dim=1, keepdim=True)[0]
    cumsums = torch.cumsum(preds.exp().flip(dims=[1]), dim=1).flip(dims=[1])
    obs = torch.log(cumsums + 1e-7) - preds
    obs[mask] = 0.0
    return gamma * torch.mean(torch.sum(obs, dim=1))


def _community_divergence(p, q):
    kl = nn.KLDivLoss(reduction="batchmean", log_target=True)
    m = (0.5 * (p + q)).log().clamp(min=1e-7)
    return 0.5 * (kl(m, p.log()) + kl(m, q.log()))


def _teacher_embeddings(encoder, pooler, ids, mask):
    out = encoder(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state
    if pooler == "cls_before_pooler":
        return out[:, 0]
    m = mask.unsqueeze(-1).float()
    return (out * m).sum(1) / m.sum(1).clamp(min=1e-7)


def _community_loss(encoder, mlp, teachers, batch, distillation, perm, temp=TEMP, tau2=TAU2, alpha=ALPHA, gamma=1.0):
    ids, mask = batch["input_ids"], batch["attention_mask"]
    bsz, num_sent = ids.shape[:2]
    flat_ids, flat_mask = ids.view(-1, ids.size(-1)), mask.view(-1, mask.size(-1))
    with torch.no_grad():  # trainers.py: the teachers' lists
        sims = []
        for enc, pooler in teachers:
            e = _teacher_embeddings(enc, pooler, flat_ids, flat_mask).view(bsz, num_sent, -1)
            sims.append(_sim(e[:, 0].unsqueeze(1), e[:, 1].unsqueeze(0), tau2))
        teacher = alpha * sims[0] + (1.0 - alpha) * sims[1]
    pooled = mlp(encoder(input_ids=flat_ids, attention_mask=flat_mask).last_hidden_state[:, 0]).view(bsz, num_sent, -1)
    z1, z2 = pooled[:, 0], pooled[:, 1]
    cos_sim = _sim(z1.unsqueeze(1), z2.unsqueeze(0), temp)
    loss = nn.CrossEntropyLoss()(cos_sim, torch.arange(bsz))
    student = cos_sim.clone()
    kd = (_community_listnet(teacher.clone(), student, gamma) if distillation == "listnet"
          else _community_listmle(teacher, student, gamma, perm))
    z2_z1 = _sim(z2.unsqueeze(1), z1.unsqueeze(0), temp)
    sd = _community_divergence(cos_sim.clone().softmax(dim=-1).clamp(min=1e-7), z2_z1.softmax(dim=-1).clamp(min=1e-7))
    return loss + sd + kd


# ----------------------------------------------------------------------------- ours
def _ours(folders, **loss_args):
    args = {"teachers": [str(folders["t1"]), str(folders["t2"])], "teacher_poolers": ["cls_before_pooler", "avg"],
            "alpha": ALPHA, "temp": TEMP, "tau2": TAU2, "consistency": "community", **loss_args}
    model = SimCSEModel.from_pretrained(str(folders["student"]), pooler_type="cls", mlp_only_train=True,
                                        new_mlp_init="random")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    objective = build_objective("rankcse", args)
    objective.setup(model, None)
    for i, t in enumerate(objective._teachers):  # spread the tiny teachers too (the reference copies them below)
        gt = torch.Generator().manual_seed(10 + i)
        with torch.no_grad():
            for p in t.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gt))
        t.double()
    model.double().train()  # float64: the comparison sees the formulas, not float32 rounding (the loss is ~26)
    enc = model.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    batch = {k: v[:, None].expand(-1, 2, -1).contiguous() for k, v in enc.items()}
    context = LossContext(model=model, seed=7, global_step=3)
    parts = objective.loss(model(**{k: v.reshape(-1, v.shape[-1]) for k, v in batch.items()}).view(len(SENTENCES), 2, -1),
                           batch, context)
    return model, objective, batch, parts


def _reference(model, objective):
    from transformers import BertModel

    def copy(m):
        ref = BertModel(m.encoder.config, add_pooling_layer=False).double()
        ref.config._attn_implementation = "eager"
        ref.load_state_dict(m.encoder.state_dict())
        return ref

    enc = copy(model).train()
    mlp = nn.Sequential(nn.Linear(model.hidden_size, model.hidden_size), nn.Tanh()).double()
    mlp[0].load_state_dict(model.mlp.dense.state_dict())
    teachers = [(copy(t).eval(), p) for t, p in zip(objective._teachers, objective.teacher_poolers)]
    return enc, mlp, teachers


def _perm(n, seed=7, step=3, rank=0):
    import numpy as np

    s = np.random.SeedSequence([seed, step, rank]).generate_state(1)[0]
    return torch.randperm(n, generator=torch.Generator().manual_seed(int(s)))


@pytest.mark.parametrize("distillation", ["listnet", "listmle"])
def test_rankcse_equals_the_community_forward(folders, distillation):
    model, objective, batch, parts = _ours(folders, distillation=distillation)
    loss = sum(parts.values())
    loss.backward()
    enc, mlp, teachers = _reference(model, objective)
    ref = _community_loss(enc, mlp, teachers, batch, distillation, _perm(len(SENTENCES)))
    ref.backward()
    assert parts["distillation"].item() > 0.1 and abs(parts["infonce"].item() - math.log(len(SENTENCES))) > 0.1
    assert abs(loss.item() - ref.item()) < 1e-6
    ours = dict(model.encoder.named_parameters())
    for name, p in enc.named_parameters():
        assert (ours[name].grad - p.grad).norm() <= 2e-5 * p.grad.norm() + 1e-9, name
    assert (model.mlp.dense.weight.grad - mlp[0].weight.grad).norm() <= 2e-5 * mlp[0].weight.grad.norm()


@pytest.mark.parametrize("distillation, changed", [
    ("listnet", {"tau2": 0.1}),  # ListMLE reads only the teacher's order, which tau2 does not change
    ("listnet", {"alpha": 0.9}), ("listmle", {"alpha": 0.9}), ("listmle", {"gamma": 0.5}), ("listmle", {"temp": 0.1}),
    ("listmle", {"distillation": "listnet"}), ("listmle", {"consistency": "js"}), ("listmle", {"beta": 0.5})])
def test_a_changed_hyperparameter_changes_the_loss(folders, distillation, changed):
    model, objective, batch, parts = _ours(folders, **{"distillation": distillation, **changed})
    enc, mlp, teachers = _reference(model, objective)
    ref = _community_loss(enc, mlp, teachers, batch, distillation, _perm(len(SENTENCES)))
    assert abs(sum(parts.values()).item() - ref.item()) > 1e-4, changed


def test_js_consistency_is_the_jensen_shannon_divergence(folders):
    _, _, _, parts = _ours(folders, consistency="js")
    model, objective, batch, community = _ours(folders, consistency="community")
    with torch.no_grad():
        z = model(**{k: v.reshape(-1, v.shape[-1]) for k, v in batch.items()}).view(len(SENTENCES), 2, -1)
        a = F.normalize(z[:, 0], dim=-1) @ F.normalize(z[:, 1], dim=-1).T / TEMP
        p, q = a.softmax(-1), a.T.softmax(-1)
        m = (p + q) / 2
        js = 0.5 * ((p * (p / m).log()).sum(1) + (q * (q / m).log()).sum(1)).mean()
    assert abs(parts["consistency"].item() - js.item()) < 1e-5
    assert parts["consistency"].item() >= 0 > community["consistency"].item()  # the community term is a negative entropy


def test_listmle_ties_are_broken_by_the_seeded_generator(folders):
    """Duplicate sentences tie in the teacher's lists: the loss depends on the draw, which (seed, step, rank) fixes."""
    from simcse.training.objectives.rankcse import listmle

    teacher = torch.tensor([[3.0, 1.0, 1.0, 0.0]])
    student = torch.tensor([[0.5, 2.0, -1.0, 0.0]])
    draws = {round(listmle(teacher, student, torch.Generator().manual_seed(s)).item(), 6) for s in range(8)}
    assert len(draws) == 2  # the two orders of the tied pair
    same = [listmle(teacher, student, torch.Generator().manual_seed(5)).item() for _ in range(2)]
    assert same[0] == same[1]


def test_teachers_are_not_submodules_and_resume_checks_them(folders):
    model, objective, _, _ = _ours(folders, distillation="listmle")
    assert not any(k.startswith("_teachers") for k in objective.state_dict())
    state = objective.get_extra_state()
    assert len(state["teacher_fingerprints"]) == 2
    other = build_objective("rankcse", {"teachers": [str(folders["t2"]), str(folders["t1"])]})
    other.set_extra_state(state)
    with pytest.raises(ValueError, match="not the ones this checkpoint was trained with"):
        other.setup(model, None)


@pytest.mark.parametrize("args, key", [({"tau2": 0}, "tau2"), ({"distillation": "lambda"}, "distillation"),
                                       ({"teachers": []}, "teachers"), ({"consistency": "kl"}, "consistency"),
                                       ({"teachers": ["a"], "teacher_poolers": ["avg", "cls"]}, "teacher_poolers")])
def test_bad_loss_args_are_named(args, key):
    with pytest.raises(ValueError, match=key):
        build_objective("rankcse", args)


@pytest.mark.parametrize("distillation", ["listnet", "listmle"])
def test_gathered_lists_equal_one_big_batch(folders, distillation):
    """Two simulated processes (keys and teacher keys gathered, local queries, averaged) give the one-process loss
    and gradient: every list runs over all processes' sentences."""
    from conftest import simulated_ranks

    model, objective, batch, _ = _ours(folders, distillation=distillation)
    e = torch.randn(12, 2, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64, requires_grad=True)
    one = sum(objective.loss(e, batch, LossContext(model=model)).values())
    (g_one,) = torch.autograd.grad(one, e)
    two = simulated_ranks(objective, e, batch, teacher_views=lambda b: objective.teacher_embeddings(b, 1))
    (g_two,) = torch.autograd.grad(two, e)
    assert abs(one.item() - two.item()) < 1e-9 and torch.allclose(g_one, g_two, atol=1e-10)


@pytest.mark.slow
def test_trains_resumes_exactly_and_saves_no_teacher(tmp_path):
    from conftest import assert_resume_is_exact, objective_argv
    from simcse import SimCSE

    model_dir, corpus = make_tiny_model(tmp_path / "m", "bert"), write_corpus(tmp_path)
    args = {"teachers": [str(model_dir)], "distillation": "listmle"}
    full = assert_resume_is_exact(lambda out, *extra: objective_argv(
        model_dir, corpus, out, "rankcse", args, "--pooler_type", "cls", "--mlp_only_train", "true", *extra), tmp_path)
    assert all("loss_distillation" in h for h in full.state.log_history if "loss" in h)
    saved = torch.load(tmp_path / "full" / "checkpoint-2" / "objective_state.pt", weights_only=True)
    assert not any("teacher" in k and torch.is_tensor(v) for k, v in saved.items())  # fingerprints only
    from safetensors import safe_open

    with safe_open(str(tmp_path / "full" / "model.safetensors"), "pt") as f:
        assert not any("teacher" in k or k.startswith("objective") for k in f.keys())
    tool = SimCSE(str(tmp_path / "full"))
    assert tool.encode(SENTENCES[:2]).shape == (2, 32)


@pytest.mark.slow
def test_gradient_caching_equals_the_whole_batch(tmp_path):
    from conftest import objective_argv, run_training, trainer_state

    model_dir, corpus = make_tiny_model(tmp_path / "m", "bert", dropout=0.0), write_corpus(tmp_path)
    args = {"teachers": [str(model_dir)], "distillation": "listnet"}
    runs = [run_training(objective_argv(model_dir, corpus, tmp_path / f"o{i}", "rankcse", args, "--pooler_type", "cls",
                                        "--mlp_only_train", "true", "--max_steps", "2", "--save_strategy", "no",
                                        "--optim", "sgd", *extra))
            for i, extra in enumerate([(), ("--gradient_cache_chunk_size", "3")])]
    a, b = (trainer_state(r) for r in runs)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k


def test_hard_negatives_are_refused_at_setup():
    objective = build_objective("rankcse")
    objective.check_columns(["sent0", "sent1"], "pairs.csv")
    with pytest.raises(ValueError, match=r"does not use the column\(s\) \['hard_neg'\]"):
        objective.check_columns(["sent0", "sent1", "hard_neg"], "nli.csv")


# ----------------------------------------------------------------------------- several steps, dropout on
@pytest.fixture(scope="module")
def dropout_folders(tmp_path_factory):
    """Student and teachers with dropout 0.1 (the teachers' is off in eval mode, as in the community code)."""
    root = tmp_path_factory.mktemp("rank_dropout")
    return {name: make_tiny_model(root / name, "bert", seed=seed) for name, seed in (("student", 0), ("t1", 1), ("t2", 2))}


class CommunityRankCSE(ReferenceBase):
    """The community code trained over several steps: the student and MLP from the start checkpoint, the teachers
    loaded from their checkpoints (``from_pretrained``, eval mode unless ``teachers_train``, a negative control).
    ListMLE's column permutation is the objective's recorded draw (a seeded ``randperm`` of the batch; the
    community code draws it from the global generator)."""

    def __init__(self, model, start, folders, distillation, seed, teachers_train=False, **kw):
        from transformers import BertModel

        from fidelity_harness import OfficialBertForCL

        self.cl = OfficialBertForCL(model.encoder.config, start)
        self.teachers = [(BertModel.from_pretrained(str(folders[n]), attn_implementation="eager",
                                                    add_pooling_layer=False).double().train(teachers_train), pooler)
                         for n, pooler in (("t1", "cls_before_pooler"), ("t2", "avg"))]
        self.distillation, self.seed, self.kw = distillation, seed, kw

    def parameters(self):
        return self.cl.parameters()

    def step_loss(self, step, batch):
        self.cl.bert.train()
        perm = _perm(batch["input_ids"].shape[0], seed=self.seed, step=step)
        return _community_loss(self.cl.bert, self.cl.mlp, self.teachers, batch, self.distillation, perm, **self.kw)

    def weights(self):
        return self.cl.weights()

    def state(self):
        return {f"teacher{i}.{k}": p for i, (t, _) in enumerate(self.teachers) for k, p in t.named_parameters()}


@pytest.mark.parametrize("distillation", ["listnet", "listmle"])
def test_rankcse_trains_as_the_community_code_with_dropout(dropout_folders, distillation):
    """3 SGD steps in the trainer's order (the shared harness), dropout on in the student (matched masks), the
    teachers in eval mode, float64: loss and every weight agree after each step; a changed tau2 (ListNet) or
    alpha, gamma, temperature, or the teachers in train mode, does not match."""
    from fidelity_harness import (assert_steps_match, assert_told_apart, project_steps, reference_steps,
                                  sentence_batches)

    f = dropout_folders
    model = SimCSEModel.from_pretrained(str(f["student"]), pooler_type="cls", mlp_only_train=True, new_mlp_init="random")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    model.encoder.config._attn_implementation = "eager"
    objective = build_objective("rankcse", {"teachers": [str(f["t1"]), str(f["t2"])],
                                            "teacher_poolers": ["cls_before_pooler", "avg"], "alpha": ALPHA,
                                            "temp": TEMP, "tau2": TAU2, "consistency": "community",
                                            "distillation": distillation})
    objective.setup(model, None)
    for t in objective._teachers:
        t.double()
    model.double()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    data = sentence_batches(model.tokenizer, n_batches=3, bs=8)
    seed = 7
    teachers = lambda obj: {f"teacher{i}.{k}": p for i, t in enumerate(obj._teachers)  # noqa: E731
                            for k, p in t.encoder.named_parameters()}  # frozen: never moved
    ours = project_steps(model, objective, data, seed=seed, set_up=False, state=teachers)
    assert all(not t.training for t in objective._teachers)

    def community(**kw):
        return reference_steps(CommunityRankCSE(model, start, f, distillation, seed, **kw), data)

    assert_steps_match(ours, community())
    # alpha 1.0: the first teacher alone (ListMLE reads only the mixed lists' order, which the second, mean-pooled
    # tiny teacher decides at alpha 0.33 as at 0)
    changes = [{"alpha": 1.0}, {"gamma": 0.5}, {"temp": 0.1}, {"teachers_train": True}]
    if distillation == "listnet":
        changes.append({"tau2": 0.1})  # ListMLE reads only the teacher's order, which tau2 does not change
    for changed in changes:
        assert_told_apart(ours, community(**changed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_listmle_masks_padded_teacher_items_as_the_community_code(dtype):
    """Teacher scores of exactly -1 (allRank's padding marker; also a teacher cosine that rounds to -1 in fp16)
    leave the tail sums and add no term, as the community ListMLE's ``y_true_sorted == -1`` mask does."""
    from simcse.training.objectives.rankcse import listmle

    g = torch.Generator().manual_seed(0)
    teacher = torch.rand(6, 7, generator=g, dtype=dtype) * 2 - 0.9
    teacher[0, 2] = teacher[3, 5] = teacher[3, 6] = -1.0  # padded items
    student = torch.randn(6, 7, generator=g, dtype=dtype)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(11))
    ours = listmle(teacher, student, torch.Generator().manual_seed(11))
    ref = _community_listmle(teacher.clone(), student.clone(), 1.0, perm)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-6)
    unmasked = _community_listmle(teacher.clone().clamp(min=-0.999), student.clone(), 1.0, perm)
    assert abs(ours.item() - unmasked.item()) > 1e-3  # the mask matters on this input
