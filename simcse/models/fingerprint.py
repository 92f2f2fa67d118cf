"""The identity of what a model computes: :func:`model_fingerprint` (weights, pooler, MLP use and the
tokenizer's whole settings), recorded by indexes and shard runs and checked before they are reused."""
from __future__ import annotations

import json

import torch
from torch import nn

__all__ = ["tokenizer_settings", "model_fingerprint"]

_TOKENIZER_LOCATION_KEYS = ("name_or_path", "is_local", "local_files_only", "cache_dir", "padding_side")


def tokenizer_settings(tok) -> dict:
    """Everything of a tokenizer that decides the ids it gives a text, as JSON-ready data without locations.

    The class; for a ``tokenizers``-backed tokenizer its whole pipeline (``backend_tokenizer.to_str()``: the
    normaliser with lower-casing and accent stripping, the pre-tokeniser, the model and its vocabulary, the
    post-processor, the added tokens; without the per-call truncation/padding state), else the vocabulary; and
    the plain options it was made with (``do_lower_case``, ``strip_accents``, ``model_max_length``, ...; not
    file names or locations). Two tokenizers with equal settings give every text the same ids.
    """
    out: dict = {"class": type(tok).__name__}
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "to_str"):
        spec = json.loads(backend.to_str())
        spec.pop("truncation", None)
        spec.pop("padding", None)
        out["pipeline"] = spec
    else:
        out["vocab"] = sorted(tok.get_vocab().items())
    options = {}
    for key, value in sorted(getattr(tok, "init_kwargs", {}).items()):
        if key in _TOKENIZER_LOCATION_KEYS or key.endswith(("_file", "_dir", "_path")):
            continue
        if value is None or isinstance(value, (bool, int, float, str)):
            options[key] = value
    out["options"] = options
    return out


def model_fingerprint(model, legacy: bool = False) -> str:
    """What a model computes, as ``"sha256:<hex>"``: the one identity of a model for every record that ties
    vectors to the model that made them (shard runs of ``simcse encode``, indexes built from shards, saved
    indexes).

    It hashes the content, not the location: every weight tensor and buffer that encoding uses (name, dtype,
    shape, bytes, in name order; not an MLM head, nor the MLP of an ``mlp_only_train`` model), the pooler,
    ``mlp_only_train``, a dense head's activations and the tokenizer's settings (:func:`tokenizer_settings`: its pipeline with the
    vocabulary, lower-casing and the other options that decide the ids). So the same folder spelled ``./model``
    or by its absolute path, or copied elsewhere, has one fingerprint, and a model retrained in place into the
    same folder, or whose tokenizer now lower-cases, has another. Cost: one SHA-256 pass over the weights (the
    ``SimCSE`` tool computes it once, when first needed). An object with its own ``fingerprint()`` (the ONNX
    encoder) gives that.

    Args:
        model: a :class:`simcse.SimCSEModel` (any ``nn.Module`` with ``pooler_type``) or an object with a
            ``fingerprint()`` method.
        legacy: the fingerprint of earlier versions (tokenizer class and vocabulary only), which records written
            before tokenizer settings were covered hold.

    Raises:
        TypeError: ``model`` is neither.
    """
    import hashlib

    own = getattr(model, "fingerprint", None)
    if callable(own):
        return own()
    if not isinstance(model, nn.Module):
        raise TypeError(f"model_fingerprint takes a SimCSEModel, got {type(model).__name__}")
    h = hashlib.sha256()
    prompt = getattr(model, "prompt", None)  # a PromptBERT template is part of what the model computes
    h.update(json.dumps({"pooler_type": getattr(model, "pooler_type", None),
                         "mlp_only_train": bool(getattr(model, "mlp_only_train", False)),
                         **({"prompt": prompt.to_dict()} if prompt is not None else {}),
                         **({} if getattr(model, "include_prompt", True) else {"include_prompt": False}),
                         # a dense head's activations (its weights are in the state dict)
                         **({"dense": [layer.activation for layer in model.dense_head]}
                            if len(getattr(model, "dense_head", ())) else {})},
                        sort_keys=True).encode())
    state = model.state_dict()
    unused = ("mlm_head.",) + (("mlp.",) if getattr(model, "mlp_only_train", False) else ())  # not in encode()
    for name in sorted(k for k in state if not k.startswith(unused)):
        t = state[name].detach()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    tok = getattr(model, "tokenizer", None)
    if tok is not None:
        h.update(type(tok).__name__.encode())
        h.update(json.dumps(sorted(tok.get_vocab().items())).encode("utf-8", "surrogatepass"))
        if not legacy:
            h.update(b"tokenizer settings|")
            h.update(json.dumps(tokenizer_settings(tok), sort_keys=True).encode("utf-8", "surrogatepass"))
    return "sha256:" + h.hexdigest()
