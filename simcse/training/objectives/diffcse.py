"""DiffCSE (Chuang et al., NAACL 2022, arXiv 2204.10298): SimCSE's contrastive loss plus conditional
replaced-token detection (RTD), as the official code voidism/DiffCSE computes it (``diffcse/models.py``
``cl_forward``, ``train.py``, ``run_diffcse.sh``).

Per micro-batch, every view of every sentence (B*V rows) is masked with the 80/10/10 rule at
``masking_ratio``; a frozen masked-LM generator takes the argmax token at *every* position (masked or not);
position 0 is set back to [CLS]; a token counts as replaced where the generator's token differs from the
original (padding excluded). A discriminator (a copy of the pretrained encoder, trained) reads the edited
sentence with its position-0 embedding output replaced by the sentence embedding ``h`` and a Linear(H, 2) head
predicts replaced / original per position; its cross-entropy, averaged over *all* B*V*L positions (padding
included, with label "original"), is added with weight ``lambda_weight``:

    loss = InfoNCE(z1, z2; temp) + lambda_weight * CE_rtd

The contrastive part is the unsupervised SimCSE loss on views 0 and 1 (keys gathered over processes). With
``batchnorm`` (the official script's ``--batchnorm``) ``z`` and ``h`` are the :class:`ProjectionMLP` of the
[CLS] states (train with ``--pooler_type cls_before_pooler``); without it the model's own pooler output
(e.g. ``cls`` with its MLP) is used for both.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from simcse.training.objectives import register_objective
from simcse.training.objectives.base import BatchSeeds, LossContext, Objective
from simcse.training.objectives.heads import ProjectionMLP, official_init_std
from simcse.training.objectives.infonce import InfoNCE

__all__ = ["DiffCSE", "TiedEncoderMLM", "ENCODER_TIED"]

ENCODER_TIED = "encoder-tied"
_GEN_BLOCK = 256  # rows per generator forward (bounds the (rows, L, vocab) logits)


class TiedEncoderMLM(nn.Module):
    """A stand-in generator for encoders shipped without an MLM head: a frozen copy of the encoder whose token
    states are scored against its own input word embeddings, ``logits = h_t . E^T`` (no transform, no bias).

    It is *not* a trained masked LM: its edits are not the plausible replacements of the paper's generator
    (the CPU config uses it to run the method's code path, docs/methods.md).
    ``forward(input_ids (N, L), attention_mask (N, L)) -> (N, L, vocab)`` float.
    """

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state
        return hidden @ self.encoder.get_input_embeddings().weight.T


def _padded_copy(encoder: nn.Module, model: nn.Module) -> nn.Module:
    """A deep copy of ``encoder`` with the padded attention implementation (the padding-free forward of the
    training model is not used by the copies, whose losses read every position)."""
    from simcse.models.unpadded import UNPADDED_ATTENTION

    clone = copy.deepcopy(encoder)
    if getattr(clone.config, "_attn_implementation", None) == UNPADDED_ATTENTION:
        clone.config._attn_implementation = getattr(model, "_padded_attn_implementation", None) or "sdpa"
    return clone


@register_objective
class DiffCSE(Objective):
    """Unsupervised SimCSE + conditional replaced-token detection (see the module docstring).

    Args:
        temp: contrastive temperature (official ``--temp 0.05``).
        lambda_weight: weight of the RTD loss (official ``--lambda_weight``; run_diffcse.sh 0.005 for BERT).
        masking_ratio: fraction of non-special tokens masked before the generator (official ``--masking_ratio``;
            run_diffcse.sh 0.30).
        generator_name: a masked-LM checkpoint sharing the encoder's vocabulary (official ``--generator_name``,
            default distilbert-base-uncased), or ``"encoder-tied"`` (:class:`TiedEncoderMLM`).
        batchnorm: use the :class:`ProjectionMLP` head (official ``--batchnorm``, on in run_diffcse.sh).
        before_mlp: condition the discriminator on the [CLS] state before that head (official ``--before_mlp``,
            off by default); needs ``batchnorm``.
        generator_dropout: run the generator in training mode, as the official code does (its generator is a
            submodule of the trained model); its dropout is then drawn from a seed of (seed, step, rank,
            micro-batch). False: eval mode.

    Raises:
        ValueError: a hyperparameter out of range (names it).
    """

    name = "diffcse"
    min_batch = 2

    def __init__(self, temp: float = 0.05, lambda_weight: float = 0.005, masking_ratio: float = 0.30,
                 generator_name: str = "distilbert-base-uncased", batchnorm: bool = True, before_mlp: bool = False,
                 generator_dropout: bool = True):
        super().__init__()
        if not (isinstance(lambda_weight, (int, float)) and math.isfinite(lambda_weight) and lambda_weight >= 0):
            raise ValueError(f"diffcse lambda_weight must be a finite number >= 0, got {lambda_weight!r}")
        if not (isinstance(masking_ratio, (int, float)) and 0 < masking_ratio < 1):
            raise ValueError(f"diffcse masking_ratio must be in (0, 1), got {masking_ratio!r}")
        if not isinstance(generator_name, str) or not generator_name:
            raise ValueError(f"diffcse generator_name must be a masked-LM checkpoint or {ENCODER_TIED!r}, got {generator_name!r}")
        if before_mlp and not batchnorm:
            raise ValueError("diffcse before_mlp: true needs batchnorm: true (the head it conditions before)")
        self.contrastive = InfoNCE(temp=temp)  # SimCSE's loss, its gather rule and its checks
        self.temp, self.lambda_weight, self.masking_ratio = float(temp), float(lambda_weight), float(masking_ratio)
        self.generator_name, self.batchnorm, self.before_mlp = generator_name, bool(batchnorm), bool(before_mlp)
        self.generator_dropout = bool(generator_dropout)
        self._seeds = BatchSeeds()
        # BatchNorm statistics over a chunk are not the batch's, and GradCache differentiates the loss of the
        # whole batch's embeddings only, so the head's own gradients would be lost: refused at setup.
        self.supports_grad_cache = not self.batchnorm
        self.prefix_embeddings = not self.batchnorm  # the batchnorm head is of the hidden size

    def get_config_dict(self) -> dict:
        return {"temp": self.temp, "lambda_weight": self.lambda_weight, "masking_ratio": self.masking_ratio,
                "generator_name": self.generator_name, "batchnorm": self.batchnorm, "before_mlp": self.before_mlp,
                "generator_dropout": self.generator_dropout}

    # ------------------------------------------------------------------ setup
    def setup(self, model: nn.Module, args) -> None:
        """Build the generator (frozen), the discriminator (a copy of the encoder as loaded, as the official
        code loads the pretrained weights into it), the RTD head and, with ``batchnorm``, the projection head.

        Raises:
            ValueError: ``batchnorm`` with a pooler other than ``cls_before_pooler``; a tokenizer without
                [MASK]/[CLS]; a generator whose vocabulary differs. (``batchnorm`` with
                ``--gradient_cache_chunk_size`` is refused by the trainer: ``supports_grad_cache`` is False.)
        """
        tok = getattr(model, "tokenizer", None)
        encoder = getattr(model, "encoder", None)
        if encoder is None or tok is None:
            raise ValueError("--loss diffcse needs a SimCSEModel with an encoder and a tokenizer")
        if self.batchnorm and getattr(model, "pooler_type", None) != "cls_before_pooler":
            raise ValueError("--loss diffcse with batchnorm: true (the official ProjectionMLP head) needs "
                             f"--pooler_type cls_before_pooler, got {getattr(model, 'pooler_type', None)!r}; "
                             "or pass --loss_args '{\"batchnorm\": false}' to use the model's own pooler")
        if tok.mask_token_id is None or tok.cls_token_id is None:
            raise ValueError("--loss diffcse needs a tokenizer with a mask token and a [CLS] token")
        self.mask_token_id, self.cls_token_id = int(tok.mask_token_id), int(tok.cls_token_id)
        self.vocab_size, self.special_ids = len(tok), sorted(int(i) for i in tok.all_special_ids)
        self.generator = self._load_generator(model, encoder)
        self.discriminator = _padded_copy(encoder, model)
        hidden = encoder.config.hidden_size
        dtype = next(encoder.parameters()).dtype
        self.electra_head = nn.Linear(hidden, 2).to(dtype)  # official: torch.nn.Linear(768, 2), default init
        # the official ProjectionMLP is built before cl_init's init_weights: Linear weights N(0, 0.02)
        self.mlp = ProjectionMLP(hidden, init_std=official_init_std(encoder)).to(dtype) if self.batchnorm else None
        self.to(next(encoder.parameters()).device)

    def _load_generator(self, model, encoder) -> nn.Module:
        if self.generator_name == ENCODER_TIED:
            gen = TiedEncoderMLM(_padded_copy(encoder, model))
            vocab = gen.encoder.get_input_embeddings().weight.shape[0]
        else:
            from transformers import AutoModelForMaskedLM

            from simcse.training.config import resolve_model_name

            gen = AutoModelForMaskedLM.from_pretrained(resolve_model_name(self.generator_name))
            vocab = gen.config.vocab_size
        if vocab != self.vocab_size:
            raise ValueError(f"diffcse generator_name {self.generator_name!r} has a vocabulary of {vocab} tokens, the "
                             f"encoder's tokenizer {self.vocab_size}: the generator must share the encoder's vocabulary")
        gen.requires_grad_(False)
        return gen

    # ------------------------------------------------------------------ the edits (once per micro-batch)
    @torch.no_grad()
    def edit(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked copy -> generator argmax -> (edited ids, replaced labels), both (N, L) int64 on the input's device.

        Masks and the generator's dropout are drawn from ``seed`` (CPU generator for the masks; the default
        CPU/CUDA generators re-seeded inside ``torch.random.fork_rng`` for dropout, so the global random stream
        is untouched). Edited ids are 0 at padding (official ``g_pred * attention_mask``).
        """
        from simcse.training.data import mask_tokens

        device = input_ids.device
        masked, _ = mask_tokens(input_ids.cpu(), attention_mask.cpu(), mask_token_id=self.mask_token_id,
                                vocab_size=self.vocab_size, special_ids=self.special_ids,
                                mlm_probability=self.masking_ratio, generator=torch.Generator().manual_seed(seed))
        masked = masked.to(device)
        self.generator.train(self.generator_dropout)
        devices = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
        preds = []
        with torch.random.fork_rng(devices=devices, enabled=self.generator_dropout):
            if self.generator_dropout:
                torch.random.default_generator.manual_seed(seed)
                for d in devices:
                    torch.cuda.default_generators[d].manual_seed(seed)
            for s in range(0, masked.shape[0], _GEN_BLOCK):
                out = self.generator(input_ids=masked[s:s + _GEN_BLOCK], attention_mask=attention_mask[s:s + _GEN_BLOCK])
                logits = out if isinstance(out, torch.Tensor) else out.logits
                preds.append(logits.argmax(-1))
        g_pred = torch.cat(preds)
        g_pred[:, 0] = self.cls_token_id
        replaced = (g_pred != input_ids).long() * attention_mask
        return g_pred * attention_mask, replaced

    def prepare_batch(self, batch, context: LossContext):
        """Add ``diffcse_input_ids`` (the edited sentences) and ``diffcse_labels`` (1 = replaced) (B, V, L) int64,
        drawn once per micro-batch from (seed, step, rank, micro-batch): gradient-caching chunks carry their rows."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        b, v, length = ids.shape
        e_ids, replaced = self.edit(ids.reshape(b * v, length), mask.reshape(b * v, length), self._seeds(context))
        return {**batch, "diffcse_input_ids": e_ids.view(b, v, length), "diffcse_labels": replaced.view(b, v, length)}

    # ------------------------------------------------------------------ losses
    def _project(self, z: torch.Tensor) -> torch.Tensor:
        """(b, V, H) -> the head's (b, V, H) over all b*V rows at once (official ``pooler_output`` flattening)."""
        if self.mlp is None:
            return z
        b, v, h = z.shape
        return self.mlp(z.reshape(b * v, h)).view(b, v, h)

    def loss(self, embeddings: torch.Tensor, batch, context: LossContext):
        """Unsupervised SimCSE InfoNCE on the (projected) views 0 and 1; keys gathered over processes."""
        return {"contrastive": self.contrastive.loss(self._project(embeddings), batch, context)}

    def chunk_loss(self, embeddings: torch.Tensor, batch, context: LossContext):
        """``lambda_weight`` x the RTD cross-entropy of this chunk's rows, summed and divided by the whole
        batch's B*V*L positions (so chunks add up to the official batch mean)."""
        if self.lambda_weight == 0:
            return None
        if "diffcse_input_ids" not in batch:
            raise ValueError("--loss diffcse: the batch has no edited sentences (prepare_batch was not called)")
        e_ids, replaced, mask = batch["diffcse_input_ids"], batch["diffcse_labels"], batch["attention_mask"]
        b, v, length = e_ids.shape
        cond = embeddings if self.before_mlp else self._project(embeddings)  # (b, V, H)
        extra = {"token_type_ids": batch["token_type_ids"].reshape(b * v, length)} if "token_type_ids" in batch else {}
        hidden = self._discriminate(e_ids.reshape(b * v, length), mask.reshape(b * v, length),
                                    cond.reshape(b * v, -1), **extra)  # (b*V, L, H)
        logits = self.electra_head(hidden).float().reshape(-1, 2)
        labels = replaced.reshape(-1)
        ce = F.cross_entropy(logits, labels, reduction="sum")
        n_total = (context.full_batch or batch)["input_ids"].numel()  # B*V*L of the whole micro-batch
        return {"rtd": self.lambda_weight * ce / n_total}

    def _discriminate(self, input_ids, attention_mask, cond, **kwargs) -> torch.Tensor:
        """The discriminator on (N, L) ids with its embedding output at position 0 replaced by ``cond`` (N, H)
        (the official patched ``BertModel.forward(cls_input=...)``) -> (N, L, H) last hidden states."""
        def replace_first(module, args, output):
            return torch.cat([cond.unsqueeze(1).to(output.dtype), output[:, 1:]], dim=1)

        handle = self.discriminator.embeddings.register_forward_hook(replace_first)
        try:
            return self.discriminator(input_ids=input_ids, attention_mask=attention_mask, return_dict=True,
                                      **kwargs).last_hidden_state
        finally:
            handle.remove()
