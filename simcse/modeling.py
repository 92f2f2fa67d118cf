"""SimCSEModel: any HF ``AutoModel`` encoder composed with a pooler (and the ``cls`` MLP head).

A saved SimCSE model is a plain HF encoder folder plus two small files::

    config.json, model.safetensors, tokenizer files   # the encoder: AutoModel.from_pretrained(dir) works
    simcse_config.json                                 # pooler_type, mlp_only_train, hidden_size, format version
    simcse_mlp.safetensors                             # the MLP head (only for pooler_type "cls")

so loading never guesses the pooler from the model's name (the reference's tool did).

Related concepts live in their own modules and are re-exported here for old imports: the padding-free forward
(:mod:`simcse.unpadded`), CPU dropout masks and config dropout (:mod:`simcse.dropout`) and the two-encoder
ablation model (:mod:`simcse.dual_encoder`).
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .dropout import (  # re-exported (see __all__): simcse.modeling.keep_mask etc. keep working
    DROPOUT_SUFFIXES,
    CPUDropout,
    cpu_dropout,
    encoder_config_with_dropout,
    keep_mask,
    set_config_dropout,
)
from .pooling import MLPHead, get_pooler, recorded_pooler
from .reference_checkpoints import missing_pooler_message, published_pooler, read_reference_mlp
from .unpadded import UNPADDED_ATTENTION, encode_unpadded, register_unpadded_attention

logger = logging.getLogger(__name__)

__all__ = [
    "SimCSEModel", "SIMCSE_CONFIG_NAME", "MLP_WEIGHTS_NAME", "FORMAT_VERSION", "UNPADDED_ATTENTION",
    # re-exported from simcse.dropout (DualEncoderModel and SECOND_ENCODER_DIR: lazily, see __getattr__)
    "DROPOUT_SUFFIXES", "CPUDropout", "cpu_dropout", "keep_mask", "set_config_dropout", "encoder_config_with_dropout",
]

SIMCSE_CONFIG_NAME = "simcse_config.json"
MLP_WEIGHTS_NAME = "simcse_mlp.safetensors"
MLM_HEAD_WEIGHTS_NAME = "simcse_mlm_head.safetensors"  # the auxiliary MLM head (training with do_mlm)
FORMAT_VERSION = 1
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def __getattr__(name: str):
    """Lazy re-export of :mod:`simcse.dual_encoder` (which imports this module) for ``from simcse.modeling import ...``."""
    if name in ("DualEncoderModel", "SECOND_ENCODER_DIR"):
        from . import dual_encoder

        return getattr(dual_encoder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_model_dir(path: str, hf_kwargs: dict | None = None) -> bool:
    """True when ``path`` is a local folder (checked for weights); False for a hub name.

    Raises:
        FileNotFoundError: ``path`` looks like a local path but does not exist, or has no weight file.
    """
    p = Path(path)
    if p.is_dir():
        if not any((p / f).is_file() for f in _WEIGHT_FILES):
            raise FileNotFoundError(
                f"model folder {path!r} has no weights: expected one of {list(_WEIGHT_FILES)}"
            )
        return True
    if p.exists() or path.startswith((".", "/", "~")) or os.sep + os.sep in path or path.count("/") > 1:
        raise FileNotFoundError(f"model path {path!r} is not a folder with a saved model")
    _check_hub_name(path, hf_kwargs)
    return False  # a hub name such as "bert-base-uncased"; transformers resolves it (needs the hub)


def _check_hub_name(name: str, hf_kwargs: dict | None = None, timeout: float = 3.0) -> None:
    """Fail at once, saying what was looked for, when hub name ``name`` cannot be loaded here.

    Passes when the name is in the local HF cache or the hub answers a TCP connection within ``timeout``
    seconds; otherwise (``HF_HUB_OFFLINE=1``, or no route to the hub) transformers would spend its retries
    (~25 s) before a generic message.

    Raises:
        FileNotFoundError: not a local folder, not cached, and the hub is off or unreachable.
    """
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    looked = f"{name!r} is not a local folder (no {str(Path(name).resolve())!r})"
    try:
        cache = {k: v for k, v in (hf_kwargs or {}).items() if k in ("cache_dir", "revision")}
        if isinstance(try_to_load_from_cache(name, "config.json", **cache), str):
            return
    except ValueError:  # not a valid hub repo id either
        raise FileNotFoundError(f"{looked} and not a valid hub model id") from None
    where = f"and not in the HF cache ({(hf_kwargs or {}).get('cache_dir') or constants.HF_HUB_CACHE})"
    if constants.HF_HUB_OFFLINE:
        raise FileNotFoundError(f"{looked} {where}; HF_HUB_OFFLINE is set, so the hub was not asked: "
                                "give a local model folder, or download the model where the hub is reachable")
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as e:
        raise FileNotFoundError(f"{looked} {where}, and the hub ({host}) cannot be reached from this machine ({e}); "
                                "give a local model folder, or download the model where the hub is reachable") from None


_HUB_KWARGS = ("cache_dir", "revision", "token", "local_files_only", "force_download")


def _hub_file(repo_id: str, filename: str, hf_kwargs: dict) -> Path | None:
    """``filename`` of Hub model ``repo_id`` (downloaded, or from the Hub cache when offline), or None when the
    repository (or, offline, its cached snapshot) has no such file. ``hf_kwargs``: the hub options of
    :meth:`SimCSEModel.from_pretrained` (``cache_dir``, ``revision``, ``token``...)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        return Path(hf_hub_download(repo_id, filename, **{k: v for k, v in hf_kwargs.items() if k in _HUB_KWARGS}))
    except EntryNotFoundError:  # remote: no such file; offline: not in the cached snapshot
        return None


def _load_encoder(path: str, trust_remote_code: bool = False, **kwargs):
    """Load ``AutoModel`` from ``path``; return (encoder, its detached pooler module or None).

    The encoder's own pooler (BERT's NSP pooler: Linear + Tanh) is detached: SimCSE never runs it inside the
    encoder, and an unused module would break DDP's gradient bookkeeping. It is returned so that a plain HF
    checkpoint evaluated with ``cls`` can use its weights (as the reference evaluation's ``pooler_output``)
    and so that saving can put it back, holding the MLP (as the reference's ``simcse_to_huggingface``).
    """
    from transformers import AutoModel

    if kwargs.get("weights_only", True) is not True:
        raise ValueError("weights_only=False is refused: simcse loads pickle-based weight files (pytorch_model.bin) "
                         "only with torch.load(weights_only=True); convert the checkpoint to safetensors instead")
    import pickle

    try:
        encoder = AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code, **kwargs)
    except pickle.UnpicklingError as e:  # torch.load(weights_only=True) met an object that is not a tensor
        detail = next((line for line in str(e).splitlines() if "GLOBAL" in line), "").strip()
        raise ValueError(
            f"refusing to load the pickle-based weights of {path!r}: they hold objects other than tensors, which "
            f"only an unsafe torch.load(weights_only=False) would run{f' ({detail})' if detail else ''}; "
            "expected model.safetensors (convert trusted weights with safetensors)"
        ) from None
    hf_pooler = getattr(encoder, "pooler", None)
    if not isinstance(hf_pooler, nn.Module):
        return encoder, None
    encoder.pooler = None
    return encoder, hf_pooler


def _check_tokenizer_fits(tokenizer, encoder) -> None:
    """ValueError when ``tokenizer`` makes token ids the encoder's embedding matrix has no row for.

    Without this check a mismatched tokenizer fails deep inside torch ("index out of range in self").
    """
    emb = encoder.get_input_embeddings() if hasattr(encoder, "get_input_embeddings") else None
    rows = getattr(emb, "num_embeddings", None)
    if tokenizer is None or not isinstance(rows, int):
        return
    n = len(tokenizer)
    if n > rows:
        raise ValueError(
            f"tokenizer ({type(tokenizer).__name__}, {n} tokens) does not match the encoder: its embedding matrix "
            f"has {rows} rows, so token ids {rows}..{n - 1} would be out of range; expected the tokenizer saved "
            "with this model (or resize the embeddings with encoder.resize_token_embeddings(len(tokenizer)))"
        )


def _pooler_dense(hf_pooler) -> nn.Linear | None:
    dense = getattr(hf_pooler, "dense", None)
    return dense if isinstance(dense, nn.Linear) else None


class SimCSEModel(nn.Module):
    """Encoder + pooler mapping token ids to sentence embeddings.

    Args:
        encoder: an HF ``PreTrainedModel`` returning ``last_hidden_state`` (and ``hidden_states`` on request).
        pooler_type: one of :data:`simcse.pooling.POOLERS` (``ValueError`` otherwise).
        mlp_only_train: apply the ``cls`` MLP in training only, not when encoding (paper's unsupervised
            default, Section 3 / reference ``--mlp_only_train``).
        tokenizer: the matching HF tokenizer (needed by :meth:`encode` and saved by :meth:`save_pretrained`);
            its ``padding_side`` is set to ``"right"`` (a left-padding tokenizer would move [CLS] and shift
            absolute positions with the batch's longest sentence).

    ``forward`` returns (N, H) embeddings in the encoder's dtype; dropout is whatever ``self.training`` says.
    """

    def __init__(self, encoder: nn.Module, pooler_type: str = "cls", mlp_only_train: bool = False, tokenizer=None,
                 hf_pooler: nn.Module | None = None):
        super().__init__()
        # The encoder's own pooler, detached (see _load_encoder); kept in a list so it is not a submodule.
        self._hf_pooler = [hf_pooler] if hf_pooler is not None else []
        self.pooler = get_pooler(pooler_type)
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

    def attach_mlm_head(self, path: str, trust_remote_code: bool = False) -> None:
        """Load the masked-LM head of checkpoint ``path`` for the auxiliary MLM loss (Appendix D).

        The head comes from ``AutoModelForMaskedLM``; its output embedding stays tied to this encoder's input
        embeddings when the architecture ties them.

        Raises:
            ValueError: the checkpoint has no (or an incomplete) MLM head; the message lists missing weights.
        """
        from transformers import AutoModelForMaskedLM

        mlm, info = AutoModelForMaskedLM.from_pretrained(path, trust_remote_code=trust_remote_code, output_loading_info=True)
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
        if self.pooler_type == "cls" and self.mlp_only_train:
            return "cls_before_pooler"
        return self.pooler_type

    @property
    def hidden_size(self) -> int:
        return self.encoder.config.hidden_size

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
        return max(1, cap)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # ----------------------------------------------------------------------------------------- forward
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **encoder_kwargs) -> torch.Tensor:
        """input_ids, attention_mask: (N, L) int64 -> embeddings (N, H).

        Extra keyword tensors the tokenizer produced (e.g. ``token_type_ids`` (N, L)) go to the encoder.
        With :meth:`set_unpadded` on, the encoder runs on the real tokens only (same result, less work).
        """
        if self.unpadded and attention_mask is not None:
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
        pooled = self.pooler.fn(last, attention_mask, hidden)  # (N, H)
        if self.mlp is not None and (self.training or not self.mlp_only_train):
            pooled = self.mlp(pooled)
        return pooled

    # ------------------------------------------------------------------------- activation checkpointing
    def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict | None = None,
                                        every_n_layers: int = 1, offload: bool = False) -> None:
        """Recompute the encoder layers' activations in the backward pass (``--gradient_checkpointing true``).

        Called by HF Trainer with the keywords of transformers' ``PreTrainedModel.activation_checkpointing_enable``
        (``every_n_layers``: checkpoint every n-th layer; ``offload``: keep the saved layer inputs in host
        memory; ``activation_checkpointing_kwargs``: passed to ``torch.utils.checkpoint.checkpoint``) and
        handed to the encoder. torch's checkpoint restores the random state before recomputing a layer, so the
        dropout masks (also :mod:`simcse.dropout`'s, which draw from the default generator) are replayed
        exactly: the gradients equal those without checkpointing.
        """
        enable = getattr(self.encoder, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs=activation_checkpointing_kwargs, every_n_layers=every_n_layers,
                   offload=offload)
        else:  # an encoder class of an older transformers
            self.encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs=activation_checkpointing_kwargs)

    def activation_checkpointing_disable(self) -> None:
        """Undo :meth:`activation_checkpointing_enable`."""
        disable = getattr(self.encoder, "activation_checkpointing_disable", None)
        (disable or self.encoder.gradient_checkpointing_disable)()

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None, **kwargs) -> None:
        """The older name of :meth:`activation_checkpointing_enable` (same keywords)."""
        self.activation_checkpointing_enable(gradient_checkpointing_kwargs, **kwargs)

    def gradient_checkpointing_disable(self) -> None:
        """The older name of :meth:`activation_checkpointing_disable`."""
        self.activation_checkpointing_disable()

    # ------------------------------------------------------------------------------ padding-free forward
    def _encode_unpadded(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **encoder_kwargs):
        """:func:`simcse.unpadded.encode_unpadded` of this model's encoder -> ((N, L, H), hidden states or None)."""
        return encode_unpadded(self.encoder, input_ids, attention_mask, self.pooler.needs_hidden_states, **encoder_kwargs)

    def set_unpadded(self, enabled: bool = True) -> bool:
        """Turn the padding-free ("unpadded") encoder forward on or off; returns whether it is on.

        On, :meth:`forward` drops the padding tokens of the batch before the encoder, so embeddings, linear
        layers, LayerNorm and dropout cost the real tokens only (the share of real tokens and the timings are in
        docs/performance.md); attention runs per sentence. Outputs equal the padded forward up to float
        rounding (dropout draws its masks over the real tokens only: same distribution, different stream).
        Turning it on checks that on a small batch, in eval mode; an encoder that does not route attention
        through transformers' attention-function registry (or numbers positions differently) fails the check,
        and then a warning is logged and the padded forward is kept (returns False).
        """
        config = self.encoder.config
        if not enabled:
            if self.unpadded:
                config._attn_implementation = self._padded_attn_implementation
            self.unpadded = False
            return False
        if self.unpadded:
            return True
        register_unpadded_attention()
        self._padded_attn_implementation = config._attn_implementation
        config._attn_implementation = UNPADDED_ATTENTION
        self.unpadded = True
        problem = self._check_unpadded()
        if problem is not None:
            self.set_unpadded(False)
            logger.warning("padding-free forward is off for this %s encoder: %s", type(self.encoder).__name__, problem)
        return self.unpadded

    def set_cpu_dropout(self, enabled: bool = True) -> int:
        """Swap every ``nn.Dropout`` module of this model to :class:`CPUDropout` (``enabled``) or back.

        Training-mode dropout on CPU then draws its masks at half the random-number cost (:func:`keep_mask`);
        the attention-probability dropout of the padding-free forward follows the same switch. Same dropout
        law (p rounded to 1/65536), different random stream; eval mode and non-CPU devices are unaffected.
        Returns the number of modules switched.
        """
        src, dst = (nn.Dropout, CPUDropout) if enabled else (CPUDropout, nn.Dropout)
        switched = 0
        for m in self.modules():
            if type(m) is src:
                m.__class__ = dst
                switched += 1
        return switched

    def _check_unpadded(self) -> str | None:
        """None when the unpadded forward equals the padded one on a small random batch, else why not."""
        config = self.encoder.config
        vocab = int(getattr(config, "vocab_size", 100) or 100)
        pad = getattr(config, "pad_token_id", None)
        pad = 0 if pad is None else int(pad)
        gen = torch.Generator().manual_seed(0)
        lengths = [7, 4, 2]
        ids = torch.randint(min(vocab, 1000), (len(lengths), max(lengths)), generator=gen)
        ids[ids == pad] = (pad + 1) % vocab
        mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
        ids = ids.masked_fill(mask == 0, pad).to(self.device)
        mask = mask.to(self.device)
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                got, _ = self._encode_unpadded(ids, mask)
                self.unpadded = False
                ref = self.encoder(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state
        except Exception as e:  # an architecture whose forward does not take packed inputs
            return f"{type(e).__name__}: {e}"
        finally:
            self.unpadded = True
            self.train(was_training)
        keep = mask.bool()
        err = (got[keep].float() - ref[keep].float()).abs().max().item()
        tol = 1e-3 * (1.0 + ref[keep].float().abs().max().item())
        return None if err <= tol else f"its outputs differ from the padded forward by {err:.3g} (> {tol:.3g})"

    # ------------------------------------------------------------------------------------------ encode
    @torch.inference_mode()
    def encode(
        self,
        sentences: list[str],
        batch_size: int = 64,
        max_length: int = 128,
        device: str | torch.device | None = None,
        show_progress: bool = False,
        normalize: bool = False,
        dtype: torch.dtype | None = None,
    ) -> np.ndarray:
        """Embed ``sentences`` in eval mode (no dropout); returns float32 (N, H) in input order.

        All sentences are tokenised up front (:meth:`_tokenize_flat`), then batches of ``batch_size`` are cut
        from the list sorted by *token* length (:meth:`_padded_batch`), so a batch carries almost no padding.
        ``max_length`` truncates (tokens, special tokens included; capped at :attr:`max_input_tokens`, the
        encoder's position table); when any sentence is cut, one ``UserWarning`` gives how many. ``dtype``
        (e.g. ``torch.bfloat16``) runs the encoder under autocast for speed.

        Raises:
            TypeError: ``sentences`` is not a list/tuple of str (the message gives the bad position).
            ValueError: the model has no tokenizer, or ``batch_size``/``max_length`` is not a positive int.
        """
        self._check_encode_args(sentences, batch_size, max_length)
        max_length = min(max_length, self.max_input_tokens)  # longer would index past the position table
        n = len(sentences)
        if n == 0:
            return np.zeros((0, self.hidden_size), dtype=np.float32)
        if device is not None:
            self.to(device)
        flat, lengths, offsets = self._tokenize_flat(sentences, max_length)

        # Batches over the token-length order (longest first, so an out-of-memory shows up at once).
        order = np.argsort(-lengths, kind="stable")
        out = np.empty((n, self.hidden_size), dtype=np.float32)
        starts = range(0, n, batch_size)
        if show_progress:
            from tqdm.auto import tqdm

            starts = tqdm(starts, desc="encoding", unit="batch")
        dev = self.device
        was_training = self.training
        self.eval()
        try:
            for start in starts:
                idx = order[start : start + batch_size]
                batch = {k: torch.from_numpy(v).to(dev) for k, v in self._padded_batch(flat, lengths, offsets, idx).items()}
                with torch.autocast(device_type=dev.type, dtype=dtype, enabled=dtype is not None):
                    emb = self(**batch).float()  # (B, H)
                if normalize:
                    emb = torch.nn.functional.normalize(emb, dim=-1)
                out[idx] = emb.cpu().numpy()
        finally:
            self.train(was_training)
        return out

    def _check_encode_args(self, sentences, batch_size, max_length) -> None:
        """The argument checks of :meth:`encode` (errors: see there)."""
        if isinstance(sentences, str) or not isinstance(sentences, (list, tuple)):
            raise TypeError(f"sentences must be a list of str, got {type(sentences).__name__}")
        for i, s in enumerate(sentences):
            if not isinstance(s, str):
                raise TypeError(f"sentences[{i}] must be str, got {type(s).__name__}")
        for name, v in (("batch_size", batch_size), ("max_length", max_length)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.tokenizer is None:
            raise ValueError("this SimCSEModel has no tokenizer; pass one to the constructor or load with from_pretrained")

    def _tokenize_flat(self, sentences, max_length: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Tokenise all ``sentences`` once, unpadded (one fast-tokenizer call per 8,192 sentences).

        Returns ``(flat, lengths, offsets)``: per input key (``input_ids``, ``token_type_ids``...) one flat int32
        array of all rows' ids, row i at ``offsets[i]:offsets[i+1]``; ``lengths`` (N,) int64 token counts;
        ``offsets`` (N+1,) int64. Warns (``UserWarning``, once) when ``max_length`` cut any sentence.
        """
        import itertools

        tok = self.tokenizer
        n = len(sentences)
        keys = [k for k in getattr(tok, "model_input_names", ["input_ids", "attention_mask"]) if k != "attention_mask"]
        parts: dict[str, list[np.ndarray]] = {}
        lengths = np.empty(n, dtype=np.int64)
        chunk = 8192
        for start in range(0, n, chunk):
            enc = tok(list(sentences[start : start + chunk]), truncation=True, max_length=max_length, padding=False,
                      return_attention_mask=False)
            ids = enc["input_ids"]
            lengths[start : start + len(ids)] = [len(x) for x in ids]
            for k in keys:
                if k in enc:
                    parts.setdefault(k, []).append(np.fromiter(itertools.chain.from_iterable(enc[k]), dtype=np.int32))
        flat = {k: np.concatenate(v) for k, v in parts.items()}
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])

        # A row at exactly max_length may have been cut: re-tokenise those few with one more token to tell.
        full = np.flatnonzero(lengths >= max_length)
        if len(full):
            longer = tok([sentences[i] for i in full], truncation=True, max_length=max_length + 1,
                         return_attention_mask=False)["input_ids"]
            n_cut = sum(len(x) > max_length for x in longer)
            if n_cut:
                import warnings

                # stacklevel: this method, encode, inference_mode's wrapper, the caller of encode
                warnings.warn(f"{n_cut} of {n} sentences are longer than max_length={max_length} tokens and were "
                              "truncated", UserWarning, stacklevel=4)
        return flat, lengths, offsets

    def _padded_batch(self, flat: dict[str, np.ndarray], lengths: np.ndarray, offsets: np.ndarray,
                      idx: np.ndarray) -> dict[str, np.ndarray]:
        """Rows ``idx`` (B,) of :meth:`_tokenize_flat`'s arrays padded to their longest: (B, W) int64 arrays.

        Rows are always padded on the right, whatever the tokenizer's ``padding_side``: the ``cls`` poolers read
        position 0 and the encoder numbers positions from the first token, so a sentence's embedding never
        depends on the other sentences of its batch. Pad values follow the tokenizer (``pad_token_id``,
        ``pad_token_type_id``); the result holds every flat key plus ``attention_mask``.
        """
        tok = self.tokenizer
        pad_values = {"input_ids": tok.pad_token_id if tok.pad_token_id is not None else 0,
                      "token_type_ids": getattr(tok, "pad_token_type_id", 0) or 0}
        lens = lengths[idx]  # (B,)
        width = int(lens.max())
        cols = np.arange(width)
        mask = cols[None, :] < lens[:, None]  # (B, W) bool, real tokens first
        pos = offsets[idx][:, None] + cols[None, :]
        batch = {}
        for k, arr in flat.items():
            vals = np.full(mask.shape, pad_values.get(k, 0), dtype=np.int64)
            vals[mask] = arr[pos[mask]]
            batch[k] = vals
        batch["attention_mask"] = mask.astype(np.int64)
        return batch

    # ----------------------------------------------------------------------------------- save / load
    def simcse_config(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "pooler_type": self.pooler_type,
            "mlp_only_train": self.mlp_only_train,
            "hidden_size": self.hidden_size,
        }

    def save_pretrained(self, save_directory: str | os.PathLike, state_dict: dict | None = None,
                        is_main_process: bool = True) -> None:
        """Write the encoder, tokenizer, ``simcse_config.json`` and MLP weights (safetensors), the
        sentence-transformers module files (:func:`simcse.export.write_sentence_transformers_files`) and the
        model card ``README.md`` (:func:`simcse.model_card.write_model_card`).

        Files are first written to a temporary folder next to ``save_directory`` and then moved in one
        rename each (:func:`simcse.storage.atomic_folder`), so an interrupted save never leaves a half-written
        weight file in place; a failed write raises :class:`simcse.storage.WriteError`. With
        ``is_main_process=False`` (HF's keyword for the other processes of a distributed run) nothing is written.
        ``state_dict`` (HF's keyword) is ignored: the model's own weights are written.
        """
        from safetensors.torch import save_file

        from .storage import atomic_folder, writing

        if not is_main_process:
            return
        with atomic_folder(save_directory, "the model") as tmp:
            self._save_encoder(tmp)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(tmp)
            if self.mlp is not None:
                save_file({k: v.detach().contiguous().cpu() for k, v in self.mlp.state_dict().items()}, str(tmp / MLP_WEIGHTS_NAME))
            if getattr(self, "mlm_head", None) is not None:
                save_file(self._mlm_head_state(), str(tmp / MLM_HEAD_WEIGHTS_NAME))
            (tmp / SIMCSE_CONFIG_NAME).write_text(json.dumps(self.simcse_config(), indent=2) + "\n")
            from .export import write_sentence_transformers_files

            write_sentence_transformers_files(self, tmp)  # the folder is a sentence-transformers folder too
        from .model_card import write_model_card

        with writing("the model card", save_directory):
            write_model_card(Path(save_directory), simcse_config=self.simcse_config())  # keeps results/training info

    def _mlm_head_state(self) -> dict[str, torch.Tensor]:
        """The MLM head's own tensors (transform, LayerNorm, bias), each storage once; the decoder weight tied to
        the encoder's word embeddings is left out (it is saved with the encoder)."""
        seen = {self.encoder.get_input_embeddings().weight.data_ptr()}
        out = {}
        for k, v in self.mlm_head.state_dict().items():
            if v.data_ptr() not in seen:
                seen.add(v.data_ptr())
                out[k] = v.detach().contiguous().cpu()
        return out

    def _save_encoder(self, folder: Path) -> None:
        # Put the detached HF pooler back for the save so the folder is a complete HF model; when this model
        # has an MLP of the same shape, the pooler holds the MLP, so HF's ``pooler_output`` equals our ``cls``.
        hf_pooler = self._hf_pooler[0] if self._hf_pooler else None
        dense = _pooler_dense(hf_pooler)
        if dense is not None and self.mlp is not None and dense.weight.shape == self.mlp.dense.weight.shape:
            with torch.no_grad():
                dense.weight.copy_(self.mlp.dense.weight)
                dense.bias.copy_(self.mlp.dense.bias)
        if hf_pooler is not None:
            self.encoder.pooler = hf_pooler.to(self.device)
        try:
            self.encoder.save_pretrained(folder, safe_serialization=True)
        finally:
            if hf_pooler is not None:
                self.encoder.pooler = None

    @staticmethod
    def read_simcse_config(path: str | os.PathLike) -> dict | None:
        """The parsed ``simcse_config.json`` of a local folder, or None when it has none."""
        f = Path(path) / SIMCSE_CONFIG_NAME
        if not f.is_file():
            return None
        cfg = json.loads(f.read_text())
        if cfg.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError(f"{f} has format_version {cfg['format_version']}; this simcse reads <= {FORMAT_VERSION}")
        return cfg

    @classmethod
    def from_pretrained(
        cls,
        model_name_or_path: str | os.PathLike,
        pooler_type: str | None = None,
        mlp_only_train: bool | None = None,
        new_mlp_init: str = "encoder_pooler",
        trust_remote_code: bool = False,
        **hf_kwargs,
    ) -> "SimCSEModel":
        """Load a folder saved by :meth:`save_pretrained`, a plain HF encoder folder, a folder written by the
        reference code's trainer (:mod:`simcse.reference_checkpoints`; its ``mlp.dense.*`` becomes the ``cls``
        MLP), or a hub name.

        For a hub name, ``simcse_config.json`` and ``simcse_mlp.safetensors`` are read from the repository (or
        the Hub cache offline) like the encoder, so a pushed model comes back with its pooler and MLP.

        Args:
            pooler_type: overrides the saved pooler. Without one: the saved one, else the one a
                sentence-transformers folder's ``1_Pooling`` records (:func:`simcse.pooling.recorded_pooler`);
                a reference trainer folder is an error (its pooler is not recorded); the reference's 8 published
                model ids get their documented pooler (one log line); anything else gets ``cls`` with a warning.
            mlp_only_train: overrides the saved flag (default False for a plain encoder).
            new_mlp_init: how a ``cls`` MLP absent from the folder starts: ``"encoder_pooler"`` copies the
                encoder's own pretrained pooler (BERT's, as the reference evaluation's ``pooler_output``),
                ``"random"`` draws N(0, initializer_range) like the reference trainer's fresh ``MLPLayer``.
            trust_remote_code: passed to transformers; off by default.
            hf_kwargs: more ``AutoModel.from_pretrained`` options (``torch_dtype``, ``attn_implementation``...).

        Raises:
            FileNotFoundError: a local path that is missing or holds no weights.
            ValueError: an unknown pooler name or ``new_mlp_init``; a reference trainer folder without a pooler.
        """
        from transformers import AutoTokenizer

        path = str(model_name_or_path)
        if new_mlp_init not in ("encoder_pooler", "random"):
            raise ValueError(f"new_mlp_init must be 'encoder_pooler' or 'random', got {new_mlp_init!r}")
        is_local = _check_model_dir(path, hf_kwargs)
        hub_cfg = None if is_local else _hub_file(path, SIMCSE_CONFIG_NAME, hf_kwargs)
        cfg = cls.read_simcse_config(path if is_local else hub_cfg.parent) if is_local or hub_cfg else None
        ref_mlp = read_reference_mlp(path) if is_local and cfg is None else None
        if pooler_type is None:
            pooler_type = cls._default_pooler(path, cfg, ref_mlp is not None, is_local)
        get_pooler(pooler_type)  # fail on a bad name before loading weights
        if mlp_only_train is None:
            mlp_only_train = bool(cfg["mlp_only_train"]) if cfg is not None else False
        encoder, hf_pooler = _load_encoder(path, trust_remote_code=trust_remote_code, **hf_kwargs)
        hf_dense = _pooler_dense(hf_pooler)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code,
                                                  **{k: v for k, v in hf_kwargs.items() if k in _HUB_KWARGS})
        model = cls(encoder, pooler_type=pooler_type, mlp_only_train=mlp_only_train, tokenizer=tokenizer, hf_pooler=hf_pooler)
        if model.mlp is not None:
            mlp_file = Path(path) / MLP_WEIGHTS_NAME if is_local else _hub_file(path, MLP_WEIGHTS_NAME, hf_kwargs)
            if mlp_file is not None and mlp_file.is_file():
                from safetensors.torch import load_file

                model.mlp.load_state_dict(load_file(str(mlp_file)))
            elif ref_mlp is not None:
                model.mlp.load_state_dict(ref_mlp)
                logger.info("%s: the cls MLP is the reference checkpoint's mlp.dense.*", path)
            elif new_mlp_init == "encoder_pooler" and hf_dense is not None and hf_dense.weight.shape == model.mlp.dense.weight.shape:
                model.mlp.dense.load_state_dict(hf_dense.state_dict())
            elif new_mlp_init == "encoder_pooler" and not mlp_only_train:
                logger.warning("%s has no MLP weights for pooler 'cls'; the MLP is randomly initialised", path)
        return model

    @staticmethod
    def _default_pooler(path: str, cfg: dict | None, reference_folder: bool, is_local: bool) -> str:
        """The pooler when none is given: the saved one; the one a sentence-transformers folder records; none for
        a reference trainer folder (ValueError); for the reference's 8 published ids their documented one (one log
        line); else ``cls`` with a warning."""
        if cfg is not None:
            return cfg["pooler_type"]
        recorded = recorded_pooler(path) if is_local else None
        if recorded is not None:  # a sentence-transformers folder's pooling
            logger.info("%s: pooler_type=%r, read from %s", path, recorded[0], recorded[1])
            return recorded[0]
        if reference_folder:
            raise ValueError(missing_pooler_message(path))
        documented = published_pooler(path)
        if documented is not None:
            logger.warning("%s is one of the reference's published models: using its documented pooler %r "
                           "(pass pooler_type to choose)", path, documented)
            return documented
        logger.warning("%s has no %s; using pooler_type='cls' (pass pooler_type to choose)", path, SIMCSE_CONFIG_NAME)
        return "cls"

    def load_weights(self, path: str | os.PathLike) -> None:
        """Load encoder and MLP weights saved by :meth:`save_pretrained` into this model, in place; with an
        attached MLM head (``do_mlm``) also the head's weights when the folder has them (training checkpoints).

        Raises:
            FileNotFoundError: no weights, or no MLP file for pooler ``cls``. ValueError: an incomplete head file.
        """
        from safetensors.torch import load_file

        _check_model_dir(str(path))
        fresh, _ = _load_encoder(str(path), torch_dtype=next(self.encoder.parameters()).dtype)
        self.encoder.load_state_dict(fresh.state_dict())
        if self.mlp is not None:
            mlp_file = Path(path) / MLP_WEIGHTS_NAME
            if not mlp_file.is_file():
                raise FileNotFoundError(f"{mlp_file} is missing: the checkpoint has no MLP for pooler 'cls'")
            self.mlp.load_state_dict(load_file(str(mlp_file)))
        head_file = Path(path) / MLM_HEAD_WEIGHTS_NAME
        if getattr(self, "mlm_head", None) is not None and head_file.is_file():  # a checkpoint of a do_mlm run
            state = load_file(str(head_file))
            missing = set(self._mlm_head_state()) - set(state)
            if missing:
                raise ValueError(f"{head_file} lacks MLM head weights {sorted(missing)}")
            self.mlm_head.load_state_dict(state, strict=False)
