"""SimCSEModel: any HF ``AutoModel`` encoder composed with a pooler (and the ``cls`` MLP head), as an
``nn.Module``: the forward pass (padded or padding-free), pooling, the auxiliary MLM head, activation
checkpointing and the switches training uses.

Beside it: the saved-folder format and ``save_pretrained`` / ``from_pretrained`` (:mod:`simcse.models.folder`),
the inference loop behind ``encode`` (:mod:`simcse.models.inference`), the padding-free forward
(:mod:`simcse.models.unpadded`), CPU dropout masks and config dropout (:mod:`simcse.models.dropout`, re-exported
here for old imports) and the two-encoder ablation model (:mod:`simcse.models.dual_encoder`).
"""
from __future__ import annotations

import contextlib

import logging

import torch
from torch import nn

from simcse.models.dropout import (  # re-exported (see __all__): simcse.models.modeling.keep_mask etc. keep working
    DROPOUT_SUFFIXES,
    CPUDropout,
    cpu_dropout,
    encoder_config_with_dropout,
    keep_mask,
    set_config_dropout,
)
from simcse.models.folder import (FORMAT_VERSION, MLP_WEIGHTS_NAME, SIMCSE_CONFIG_NAME, SavedFolder, _check_tokenizer_fits,
                                  quiet_transformers_bars)
from simcse.models.checkpointing import ActivationCheckpointing
from simcse.models.after_pooling import AfterPooling
from simcse.models.inference import Encoding
from simcse.models.pooling import PROMPT_POOLERS, MLPHead, get_pooler
from simcse.models.prompt import PromptConfig, Prompting, prompt_forward
from simcse.models.prompt_pooling import check_include_prompt, exclude_prompt
from simcse.models.speed_switches import SpeedSwitches
from simcse.models.unpadded import UNPADDED_ATTENTION

logger = logging.getLogger(__name__)

__all__ = [
    "SimCSEModel", "SIMCSE_CONFIG_NAME", "MLP_WEIGHTS_NAME", "FORMAT_VERSION", "UNPADDED_ATTENTION",
    # re-exported from simcse.models.folder and simcse.models.dropout
    "DROPOUT_SUFFIXES", "CPUDropout", "cpu_dropout", "keep_mask", "set_config_dropout", "encoder_config_with_dropout",
]



@contextlib.contextmanager
def quiet_load_report():
    """Within the block, transformers logs errors only: its load report (a table of MISSING / UNEXPECTED weights)
    is not printed, for loads whose outcome the caller checks itself and reports in one line. The previous
    verbosity is restored on exit."""
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)

class SimCSEModel(SavedFolder, Encoding, Prompting, ActivationCheckpointing, AfterPooling, SpeedSwitches, nn.Module):
    """Encoder + pooler mapping token ids to sentence embeddings.

    Args:
        encoder: an HF ``PreTrainedModel`` returning ``last_hidden_state`` (and ``hidden_states`` on request).
        pooler_type: one of :data:`simcse.models.pooling.POOLERS` (``ValueError`` otherwise).
        mlp_only_train: apply the ``cls`` MLP in training only, not when encoding (paper's unsupervised
            default, Section 3 / reference ``--mlp_only_train``).
        tokenizer: the matching HF tokenizer (needed by :meth:`encode` and saved by :meth:`save_pretrained`);
            its ``padding_side`` is set to ``"right"`` (a left-padding tokenizer would move [CLS] and shift
            absolute positions with the batch's longest sentence).
        prompt: the prompt template(s) of a ``prompt_mask`` pooler (:class:`simcse.models.prompt.PromptConfig` or
            its dict); may be set later with :meth:`set_prompt` (a ``prompt_mask`` model without one cannot encode).
        include_prompt: False leaves an instruction prompt's tokens out of a mean pooler's average
            (sentence-transformers' ``Pooling(include_prompt=False)``, :mod:`simcse.models.prompt_pooling`);
            ``ValueError`` with a pooler that is not a mean.

    ``forward`` returns (N, D) embeddings in the encoder's dtype, D = :attr:`hidden_size` (H; k*H for k poolers
    concatenated; a dense head's size: :mod:`simcse.models.after_pooling`); dropout is whatever ``self.training`` says.
    """

    def __init__(self, encoder: nn.Module, pooler_type: str = "cls", mlp_only_train: bool = False, tokenizer=None,
                 hf_pooler: nn.Module | None = None, prompt: PromptConfig | dict | None = None,
                 include_prompt: bool = True):
        super().__init__()
        self.dense_head = nn.ModuleList()  # Linear(+activation) layers after pooling (set_dense_head)
        self.prompt: PromptConfig | None = None
        self._bound = None
        # The encoder's own pooler, detached (see _load_encoder); kept in a list so it is not a submodule.
        self._hf_pooler = [hf_pooler] if hf_pooler is not None else []
        self.pooler = get_pooler(pooler_type)
        self.include_prompt = check_include_prompt(include_prompt, pooler_type)
        self.append_eos = False  # rows end with the EOS token (simcse.models.decoder.apply_append_eos)
        self.encoder = encoder
        if tokenizer is not None and getattr(tokenizer, "padding_side", "right") != "right":
            # Right padding everywhere (encode, saved folders, sentence-transformers loading them): the cls
            # poolers read position 0 and positions count from the first token.
            logger.info("tokenizer padding_side %r -> 'right'", tokenizer.padding_side)
            tokenizer.padding_side = "right"
        self.tokenizer = tokenizer
        self.mlp_only_train = bool(mlp_only_train)
        self.unpadded = False  # padding-free forward, see set_unpadded
        _check_tokenizer_fits(tokenizer, encoder)
        hidden = encoder.config.hidden_size
        self.mlp = MLPHead(hidden) if self.pooler.uses_mlp else None
        if self.mlp is not None:
            std = getattr(encoder.config, "initializer_range", 0.02)
            nn.init.normal_(self.mlp.dense.weight, mean=0.0, std=std)
            nn.init.zeros_(self.mlp.dense.bias)
            self.mlp.to(dtype=next(encoder.parameters()).dtype)
        if prompt is not None:
            self.set_prompt(prompt)

    def attach_mlm_head(self, path: str, trust_remote_code: bool = False) -> None:
        """Load the masked-LM head of checkpoint ``path`` for the auxiliary MLM loss (Appendix D).

        The head comes from ``AutoModelForMaskedLM``; its output embedding stays tied to this encoder's input
        embeddings when the architecture ties them.

        Raises:
            ValueError: the checkpoint has no (or an incomplete) MLM head; the message lists missing weights.
        """
        from transformers import AutoModelForMaskedLM

        with quiet_transformers_bars(), quiet_load_report():  # a missing head is reported below, in one line
            mlm, info = AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=trust_remote_code,
                                                             output_loading_info=True)
        base = mlm.base_model
        heads = [m for _, m in mlm.named_children() if m is not base]
        prefix = mlm.base_model_prefix + "."
        missing = [k for k in info.get("missing_keys", []) if not k.startswith(prefix) and "pooler" not in k]
        if len(heads) != 1 or missing:
            raise ValueError(
                f"--do_mlm needs a masked-LM head, but checkpoint {path!r} has none "
                f"(missing: {sorted(missing)[:4]}); use a checkpoint trained with MLM such as bert-base-uncased or roberta-base"
            )
        head = heads[0]
        # Re-tie the head's decoder to *this* encoder's word embeddings (the head was loaded with its own copy).
        out_emb = mlm.get_output_embeddings()
        in_emb = self.encoder.get_input_embeddings()
        if out_emb is not None and out_emb.weight is mlm.get_input_embeddings().weight:
            out_emb.weight = in_emb.weight
        self.mlm_head = head.to(self.device)

    def mlm_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **encoder_kwargs) -> torch.Tensor:
        """(N, L) ids -> (N, L, vocab) MLM logits from the attached head (see :meth:`attach_mlm_head`)."""
        if getattr(self, "mlm_head", None) is None:
            raise ValueError("no MLM head attached; call attach_mlm_head(path) (train with --do_mlm)")
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, **encoder_kwargs).last_hidden_state
        return self.mlm_head(hidden)

    @property
    def pooler_type(self) -> str:
        return self.pooler.name

    @property
    def inference_pooler(self) -> str:
        """What :meth:`encode` (eval mode) computes: ``cls_before_pooler`` for a ``cls`` model trained with
        ``mlp_only_train`` (the MLP is used in training only, paper Section 3), else :attr:`pooler_type`."""
        if self.pooler_type in ("cls", "prompt_mask") and self.mlp_only_train:
            return f"{self.pooler_type}_before_pooler"
        return self.pooler_type

    @property
    def max_input_tokens(self) -> int:
        """The longest input (tokens) the encoder takes: its position table (less RoBERTa's padding offset)
        and the tokenizer's ``model_max_length``, whichever is smaller."""
        cap = getattr(self.encoder.config, "max_position_embeddings", None) or 10**9
        emb = getattr(self.encoder, "embeddings", None)
        if getattr(emb, "padding_idx", None) is not None:
            cap -= int(emb.padding_idx) + 1  # RoBERTa-style positions start after padding_idx
        tok_max = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(tok_max, int) and 0 < tok_max < cap:
            cap = tok_max
        if self.prompt is not None and self.tokenizer is not None:  # room for the template's tokens
            cap -= max(b.extra_tokens for b in self.bound_prompts())
        return max(1, cap)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # ----------------------------------------------------------------------------------------- forward
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_length=None,
                **encoder_kwargs) -> torch.Tensor:
        """input_ids, attention_mask: (N, L) int64 -> embeddings (N, H).

        ``prompt_length`` (an int, or (N,) / (N, 1) int64: tokens of each row's instruction prompt, counted by
        :func:`simcse.models.prompt_pooling.prompt_token_count`) leaves those tokens out of the pooled mean when
        :attr:`include_prompt` is False (they are encoded and attended to all the same); otherwise it is ignored.
        Extra keyword tensors the tokenizer produced (e.g. ``token_type_ids`` (N, L)) go to the encoder.
        With :meth:`set_unpadded` on, the encoder runs on the real tokens only (same result, less work).
        A ``prompt_mask`` model wraps the rows in its template (:func:`simcse.models.prompt.prompt_forward`) and
        also takes (B, V, L) views, returning (B, V, H).
        """
        if self.pooler.name in PROMPT_POOLERS:
            self.bound_prompts()  # the error for a missing template
            pooled = prompt_forward(self, input_ids, attention_mask)
        elif self.unpadded and attention_mask is not None:
            last, hidden = self._encode_unpadded(input_ids, attention_mask, **encoder_kwargs)
        else:
            out = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                output_hidden_states=self.pooler.needs_hidden_states,
                return_dict=True,
                **encoder_kwargs,
            )
            last, hidden = out.last_hidden_state, out.hidden_states
        if self.pooler.name not in PROMPT_POOLERS:
            pooled = self.pooler.fn(last, self.pooling_mask(attention_mask, prompt_length), hidden)  # (N, k*H)
        return self._after_pooling(pooled)

    def pooling_mask(self, attention_mask: torch.Tensor, prompt_length=None) -> torch.Tensor:
        """The (N, L) mask the pooler averages over: ``attention_mask``, less each row's first ``prompt_length``
        real tokens when :attr:`include_prompt` is False (:func:`simcse.models.prompt_pooling.exclude_prompt`)."""
        if self.include_prompt or prompt_length is None:
            return attention_mask
        return exclude_prompt(attention_mask, prompt_length)

    def layer_embeddings(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, layers: list[int],
                         prompt_length=None, **encoder_kwargs) -> torch.Tensor:
        """Sentence embeddings read at intermediate layers: (N, L) ids/mask -> (N, len(layers), H).

        ``layers`` index the encoder's ``hidden_states`` (0 the embedding output, ``n_layers`` the last layer).
        Each layer's token states go through this model's pooler (and, as in :meth:`forward`, the ``cls`` MLP
        while training, then the dense head), as sentence-transformers' ``AdaptiveLayerLoss`` runs every layer
        through the model's modules after the Transformer. One encoder pass (padded, ``output_hidden_states``), with gradients.

        Raises:
            ValueError: a layer outside ``0..n_layers``.
        """
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                           return_dict=True, **encoder_kwargs)
        hidden = out.hidden_states
        bad = [i for i in layers if not 0 <= i < len(hidden)]
        if bad:
            raise ValueError(f"layers {bad} outside the encoder's hidden states 0..{len(hidden) - 1}")
        pooled = []
        pool_mask = self.pooling_mask(attention_mask, prompt_length)
        for i in layers:
            pooled.append(self._after_pooling(self.pooler.fn(hidden[i], pool_mask, hidden)))
        return torch.stack(pooled, dim=1)

    @property
    def num_hidden_layers(self) -> int:
        """The encoder's transformer layers (its ``hidden_states`` count is one more)."""
        return int(self.encoder.config.num_hidden_layers)


