"""InfoCSE (Wu et al., Findings of EMNLP 2022, arXiv 2210.06432): SimCSE's contrastive loss plus an auxiliary
masked-LM reconstruction that must go through the sentence's [CLS] state, as the official code computes it
(caskcsg/sentemb ``InfoCSE/infocse/models_cls_mlm.py`` ``cl_forward``, ``train_cls_mlm.py``,
``Infocse-bert-base.sh``).

Per micro-batch every view (B*V rows) is masked with the 80/10/10 rule at ``mlm_probability``. A frozen copy of
the encoder's embeddings and first ``skip_from`` layers (official: ``BertForMaskedLM`` with
``num_hidden_layers = skip_from``, loaded from the same checkpoint, run under ``no_grad``, in eval mode with
``--mlm_eval``) reads the masked sentence; its layer-``skip_from`` token states, detached, replace every
position but 0, where the trained encoder's last-layer [CLS] state of the *unmasked* sentence goes (with its
gradient). ``n_head_layers`` trained transformer layers (Condenser's head) and a trained MLM prediction head
then predict the masked tokens; their cross-entropy (mean over the batch's masked tokens) is added with weight
``mlm_weight``:

    loss = InfoNCE(head(h_cls^1), head(h_cls^2); temp) + mlm_weight * CE_mlm

``head`` is the official ``ProjectionMLP`` with ``batchnorm`` (its scripts' ``--batchnorm``), else SimCSE's
Linear + Tanh; both are training-only (evaluation uses ``cls_before_pooler``), so they live here, not in the
saved model.
"""
from __future__ import annotations

import copy
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from simcse.training.objectives import register_objective
from simcse.training.objectives.base import BatchSeeds, LossContext, Objective
from simcse.training.objectives.heads import ProjectionMLP, official_init_std
from simcse.training.objectives.infonce import InfoNCE

__all__ = ["InfoCSE"]

LM_HEADS = ("pretrained", "embeddings")


def _layers(encoder: nn.Module) -> nn.ModuleList:
    layers = getattr(getattr(encoder, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"--loss infocse needs a BERT-style encoder (encoder.layer list); got {type(encoder).__name__}")
    return layers


@register_objective
class InfoCSE(Objective):
    """Unsupervised SimCSE + the [CLS]-conditioned MLM reconstruction (see the module docstring).

    Args:
        temp: contrastive temperature (official ``--temp 0.05``).
        mlm_weight: weight of the MLM term (official ``--mlm_weight``; Infocse-bert-base.sh 1e-5).
        mlm_probability: masking ratio (official ``--mlm_probability``; 0.4 for bert-base, 0.3 for bert-large).
        skip_from: layers of the frozen network whose top states feed the head (official ``--skip_from 6``).
        n_head_layers: trained transformer layers of the head (official ``--n_head_layers 2``).
        batchnorm: the ``ProjectionMLP`` contrastive head (official ``--batchnorm``, on in its scripts).
        mlm_eval: run the frozen network in eval mode (official ``--mlm_eval``, on for bert-base); off: in
            training mode, its dropout drawn from a seed of (seed, step, rank, micro-batch).
        lm_head: ``"pretrained"``: the MLM prediction head of the encoder's checkpoint, trained from there
            (official); ``"embeddings"``: for a checkpoint without one, a new BERT prediction head whose decoder
            starts as a copy of the encoder's word embeddings (as BERT ties them) and whose transform is at
            BERT's initialisation.

    Raises:
        ValueError: a hyperparameter out of range (names it).
    """

    name = "infocse"
    supports_grad_cache = False  # the trained contrastive head runs in loss(), on the whole batch (see docs)
    prefix_embeddings = False  # the head is of the hidden size

    def __init__(self, temp: float = 0.05, mlm_weight: float = 1e-5, mlm_probability: float = 0.4, skip_from: int = 6,
                 n_head_layers: int = 2, batchnorm: bool = True, mlm_eval: bool = True, lm_head: str = "pretrained"):
        super().__init__()
        if not (isinstance(mlm_weight, (int, float)) and math.isfinite(mlm_weight) and mlm_weight >= 0):
            raise ValueError(f"infocse mlm_weight must be a finite number >= 0, got {mlm_weight!r}")
        if not (isinstance(mlm_probability, (int, float)) and 0 < mlm_probability < 1):
            raise ValueError(f"infocse mlm_probability must be in (0, 1), got {mlm_probability!r}")
        for key, value in (("skip_from", skip_from), ("n_head_layers", n_head_layers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"infocse {key} must be an integer >= 1, got {value!r}")
        if lm_head not in LM_HEADS:
            raise ValueError(f"infocse lm_head must be one of {list(LM_HEADS)}, got {lm_head!r}")
        self.contrastive = InfoNCE(temp=temp)
        self.temp, self.mlm_weight, self.mlm_probability = float(temp), float(mlm_weight), float(mlm_probability)
        self.skip_from, self.n_head_layers = int(skip_from), int(n_head_layers)
        self.batchnorm, self.mlm_eval, self.lm_head_init = bool(batchnorm), bool(mlm_eval), lm_head
        self._seeds = BatchSeeds()

    def get_config_dict(self) -> dict:
        return {"temp": self.temp, "mlm_weight": self.mlm_weight, "mlm_probability": self.mlm_probability,
                "skip_from": self.skip_from, "n_head_layers": self.n_head_layers, "batchnorm": self.batchnorm,
                "mlm_eval": self.mlm_eval, "lm_head": self.lm_head_init}

    # ------------------------------------------------------------------ setup
    def setup(self, model: nn.Module, args) -> None:
        """Build the frozen network (a copy of the encoder as loaded, cut to ``skip_from`` layers), the trained
        head layers (BERT initialisation, or a Condenser checkpoint's ``c_head`` from its ``model.pt``), the MLM
        prediction head and the contrastive head.

        Raises:
            ValueError: a pooler other than ``cls_before_pooler``; ``skip_from`` above the encoder's depth; a
                tokenizer without [MASK]; ``lm_head: pretrained`` on a checkpoint without an MLM head.
        """
        from simcse.models.unpadded import UNPADDED_ATTENTION

        encoder, tok = getattr(model, "encoder", None), getattr(model, "tokenizer", None)
        if encoder is None or tok is None:
            raise ValueError("--loss infocse needs a SimCSEModel with an encoder and a tokenizer")
        if getattr(model, "pooler_type", None) != "cls_before_pooler":
            raise ValueError("--loss infocse reads the encoder's [CLS] state and owns its training head: use "
                             f"--pooler_type cls_before_pooler (got {getattr(model, 'pooler_type', None)!r})")
        depth = len(_layers(encoder))
        if self.skip_from > depth:
            raise ValueError(f"infocse skip_from {self.skip_from} exceeds the encoder's {depth} layers")
        if tok.mask_token_id is None:
            raise ValueError("--loss infocse needs a tokenizer with a mask token")
        self.mask_token_id, self.vocab_size = int(tok.mask_token_id), len(tok)
        self.special_ids = sorted(int(i) for i in tok.all_special_ids)
        config = copy.deepcopy(encoder.config)
        if getattr(config, "_attn_implementation", None) == UNPADDED_ATTENTION:
            config._attn_implementation = getattr(model, "_padded_attn_implementation", None) or "sdpa"
        frozen = copy.deepcopy(encoder)
        frozen.config = config
        frozen.encoder.layer = nn.ModuleList(list(_layers(frozen))[: self.skip_from])
        frozen.config.num_hidden_layers = self.skip_from
        if getattr(frozen, "pooler", None) is not None:
            frozen.pooler = None
        self.frozen = frozen.requires_grad_(False)
        layer_cls = type(_layers(encoder)[0])
        self.c_head = nn.ModuleList([layer_cls(config) for _ in range(self.n_head_layers)])
        self.c_head.apply(encoder._init_weights)
        path = getattr(encoder.config, "_name_or_path", "") or ""
        self._load_condenser_head(path)
        hidden = encoder.config.hidden_size
        dtype = next(encoder.parameters()).dtype
        self.c_head.to(dtype)  # the encoder's dtype (the frozen states they read are in it)
        self.lm_head = self._make_lm_head(encoder, path).to(dtype)
        if self.batchnorm:
            self.head = ProjectionMLP(hidden, init_std=official_init_std(encoder)).to(dtype)  # cl_init's init_weights
        else:
            from simcse.models.pooling import MLPHead

            self.head = MLPHead(hidden).to(dtype)
            nn.init.normal_(self.head.dense.weight, mean=0.0, std=official_init_std(encoder))  # official MLPLayer,
            nn.init.zeros_(self.head.dense.bias)  # built before cl_init's init_weights
        self.to(next(encoder.parameters()).device)

    def _load_condenser_head(self, path: str) -> None:
        """Condenser checkpoints keep their head layers in ``model.pt`` (keys ``c_head.*``); the official code
        loads them when the file exists (``load_state_dict(..., strict=False)``)."""
        file = os.path.join(path, "model.pt") if path else ""
        if file and os.path.isfile(file):
            state = torch.load(file, map_location="cpu", weights_only=True)
            head = {k.removeprefix("c_head."): v for k, v in state.items() if k.startswith("c_head.")}
            if head:
                self.c_head.load_state_dict(head, strict=False)

    def _make_lm_head(self, encoder, path: str) -> nn.Module:
        if self.lm_head_init == "embeddings":
            from transformers.models.bert.modeling_bert import BertLMPredictionHead

            head = BertLMPredictionHead(encoder.config)
            head.apply(encoder._init_weights)
            head.decoder.weight = nn.Parameter(encoder.get_input_embeddings().weight.detach().clone())
            nn.init.zeros_(head.bias)
            head.decoder.bias = head.bias  # one output bias, as BERT ties them (no parameter left unused)
            return head
        from transformers import AutoModelForMaskedLM

        from simcse.models.folder import quiet_transformers_bars

        with quiet_transformers_bars():
            mlm, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
        prefix = mlm.base_model_prefix + "."
        missing = [k for k in info.get("missing_keys", []) if not k.startswith(prefix) and "pooler" not in k]
        heads = [m for _, m in mlm.named_children() if m is not mlm.base_model]
        if len(heads) != 1 or missing:
            raise ValueError(f"infocse lm_head 'pretrained': checkpoint {path!r} has no masked-LM head (missing "
                             f"{sorted(missing)[:3]}); pass --loss_args '{{\"lm_head\": \"embeddings\"}}'")
        head = getattr(heads[0], "predictions", heads[0])  # BERT: cls.predictions (official); others: the head
        return copy.deepcopy(head)  # untied from the discarded model's embeddings (official: a separate copy)

    # ------------------------------------------------------------------ the masked copy (once per micro-batch)
    def prepare_batch(self, batch, context: LossContext):
        """Add ``infocse_skip`` (B, V, L, H) float (the frozen network's layer-``skip_from`` states of the masked
        copy, detached) and ``infocse_labels`` (B, V, L) int64 (-100 where nothing was masked), drawn once per
        micro-batch from (seed, step, rank, micro-batch)."""
        from simcse.training.data import mask_tokens

        ids, mask = batch["input_ids"], batch["attention_mask"]
        b, v, length = ids.shape
        seed = self._seeds(context)
        masked, labels = mask_tokens(ids.reshape(b * v, length).cpu(), mask.reshape(b * v, length).cpu(),
                                     mask_token_id=self.mask_token_id, vocab_size=self.vocab_size,
                                     special_ids=self.special_ids, mlm_probability=self.mlm_probability,
                                     generator=torch.Generator().manual_seed(seed))
        kwargs = {"token_type_ids": batch["token_type_ids"].reshape(b * v, length)} if "token_type_ids" in batch else {}
        self.frozen.train(not self.mlm_eval)
        device = ids.device
        devices = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices, enabled=not self.mlm_eval):
            if not self.mlm_eval:
                torch.random.default_generator.manual_seed(seed)
                for d in devices:
                    torch.cuda.default_generators[d].manual_seed(seed)
            skip = self.frozen(input_ids=masked.to(device), attention_mask=mask.reshape(b * v, length),
                               return_dict=True, **kwargs).last_hidden_state
        return {**batch, "infocse_skip": skip.view(b, v, length, -1),
                "infocse_labels": labels.to(device).view(b, v, length)}

    # ------------------------------------------------------------------ losses
    def _project(self, z: torch.Tensor) -> torch.Tensor:
        b, v, h = z.shape
        return self.head(z.reshape(b * v, h)).view(b, v, h)

    def loss(self, embeddings: torch.Tensor, batch, context: LossContext):
        """Unsupervised SimCSE InfoNCE on the head's output of views 0 and 1 (keys gathered over processes)."""
        return {"contrastive": self.contrastive.loss(self._project(embeddings), batch, context)}

    def chunk_loss(self, embeddings: torch.Tensor, batch, context: LossContext):
        """``mlm_weight`` x the MLM cross-entropy through the [CLS] state: the chunk's masked tokens summed and
        divided by the whole micro-batch's count (official: the batch mean)."""
        if self.mlm_weight == 0:
            return None
        if "infocse_skip" not in batch:
            raise ValueError("--loss infocse: the batch has no masked copy (prepare_batch was not called)")
        skip, labels, mask = batch["infocse_skip"], batch["infocse_labels"], batch["attention_mask"]
        b, v, length, h = skip.shape
        hidden = torch.cat([embeddings.reshape(b * v, 1, h).to(skip.dtype), skip.reshape(b * v, length, h)[:, 1:]], 1)
        ext = (1.0 - mask.reshape(b * v, 1, 1, length).to(hidden.dtype)) * torch.finfo(hidden.dtype).min
        for layer in self.c_head:
            out = layer(hidden, attention_mask=ext)
            hidden = out[0] if isinstance(out, tuple) else out
        logits = self.lm_head(hidden).float()  # (b*V, L, vocab)
        flat = labels.reshape(-1)
        full = context.full_batch if "infocse_labels" in context.full_batch else batch
        n_masked = int((full["infocse_labels"] != -100).sum())
        if n_masked == 0:
            return {"mlm": logits.sum() * 0.0}
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), flat, ignore_index=-100, reduction="sum")
        return {"mlm": self.mlm_weight * ce / n_masked}

