"""Decoder LLMs as sentence encoders: which checkpoints are decoders, the bidirectional-attention switch, and the
EOS token a last-token pooler reads.

LLM2Vec (BehnamGhader et al., COLM 2024, arXiv 2404.05961) turns a decoder into an encoder in three steps:
bidirectional attention, masked next-token prediction, unsupervised SimCSE. The first step here uses
transformers' own switch: a config whose ``is_causal`` is False makes the models' mask builder
(``transformers.masking_utils.create_causal_mask``) return a bidirectional mask, for every family that builds
its mask there (Llama, Mistral, Qwen2/3, Gemma, GPT-2 and the other transformers 5 decoders); no model class is
copied or patched. The setting is part of the model's ``config.json``, so ``AutoModel``, sentence-transformers
and the ONNX export load the switched model as it was trained.

Last-token pooling reads the state of a row's last token, which for E5-mistral, GTE-Qwen and LLM2Vec is the EOS
token; most decoder tokenizers do not add one (Llama, Mistral and Gemma add a BOS only; Qwen2/3 and GPT-2 add
nothing). :func:`append_eos` makes the tokenizer itself append it (in its post-processor, saved in
``tokenizer.json``), so training, ``encode``, the ONNX backend and sentence-transformers all tokenise alike.
"""
from __future__ import annotations


def is_decoder_config(config) -> bool:
    """Whether ``config`` (a transformers ``PretrainedConfig``) is a decoder-only language model: its model type
    has a causal-LM class and no masked-LM class (BERT and RoBERTa have both and are encoders)."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_MASKED_LM_MAPPING_NAMES)

    kind = getattr(config, "model_type", None)
    return kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def is_bidirectional(config) -> bool:
    """Whether a decoder ``config`` has been switched to bidirectional attention (``is_causal`` False)."""
    return is_decoder_config(config) and getattr(config, "is_causal", True) is False


def set_bidirectional(config, enabled: bool, name: str = "the model"):
    """Switch a decoder ``config`` to bidirectional (``enabled``) or causal attention, in place; returns it.

    Raises:
        ValueError: ``enabled`` for a config that is not a decoder (encoders already attend both ways), naming
            the model and its type.
    """
    if not is_decoder_config(config):
        if enabled:
            raise ValueError(f"--bidirectional true applies to decoder LLMs; {name} is a "
                             f"{getattr(config, 'model_type', '?')!r} model, which already attends in both directions")
        return config
    config.is_causal = not enabled
    return config


APPEND_EOS_CHOICES = ("auto", "true", "false")


def resolve_append_eos(setting, config, pooler_type: str) -> bool:
    """Whether rows must end with the EOS token: ``setting`` True/False (or ``"true"``/``"false"``) as given,
    ``"auto"`` (or None) for a decoder ``config`` pooled with ``last_token`` (its last token then reads the whole
    sentence, as E5-mistral, GTE-Qwen and LLM2Vec encode).

    Raises:
        ValueError: another value (names ``append_eos`` and :data:`APPEND_EOS_CHOICES`).
    """
    if setting is None or setting == "auto":
        return is_decoder_config(config) and pooler_type == "last_token"
    value = {"true": True, "false": False}.get(setting, setting) if isinstance(setting, str) else setting
    if not isinstance(value, bool):
        raise ValueError(f"append_eos must be one of {list(APPEND_EOS_CHOICES)}, got {setting!r}")
    return value


def ends_with_eos(tokenizer) -> bool:
    """Whether ``tokenizer`` already ends every tokenised text with its EOS token."""
    eos = getattr(tokenizer, "eos_token_id", None)
    return eos is not None and tokenizer("a")["input_ids"][-1:] == [eos]


def append_eos(tokenizer, name: str = "the model") -> bool:
    """Make ``tokenizer`` end every text with its EOS token, in place; True when it was changed (False: it did
    already). The token is added by the tokenizer's own post-processor (its ``TemplateProcessing`` gets
    ``</s>`` after the text; a ``ByteLevel`` or missing post-processor gets one), which ``save_pretrained`` writes
    into ``tokenizer.json``: every loader of the saved folder (``AutoTokenizer``, sentence-transformers, the ONNX
    backend) tokenises the same, and truncation cuts the text and keeps the EOS.

    Raises:
        ValueError: the tokenizer has no EOS token, is not a ``tokenizers``-backed (fast) tokenizer, has another
            kind of post-processor, or does not end with exactly one more token, the EOS, afterwards (one line
            naming ``append_eos`` and ``name``).
    """
    import json

    from tokenizers import Tokenizer

    eos, eos_id = getattr(tokenizer, "eos_token", None), getattr(tokenizer, "eos_token_id", None)
    if eos is None or eos_id is None:
        raise ValueError(f"append_eos: the tokenizer of {name} has no eos_token; give --append_eos false or a "
                         "tokenizer with one")
    if ends_with_eos(tokenizer):
        return False
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"append_eos: the tokenizer of {name} ({type(tokenizer).__name__}) is not a fast "
                         "(tokenizers) tokenizer whose post-processor can add the EOS; give --append_eos false")
    spec = json.loads(backend.to_str())
    new = _with_eos(spec.get("post_processor"), eos, eos_id)
    if new is None:
        raise ValueError(f"append_eos: the tokenizer of {name} has a {spec['post_processor'].get('type')} "
                         "post-processor, which cannot take an EOS; give --append_eos false")
    before = tokenizer("a")["input_ids"]
    old = backend.post_processor
    backend.post_processor = Tokenizer.from_str(json.dumps({**spec, "post_processor": new})).post_processor
    if tokenizer("a")["input_ids"] != before + [eos_id]:
        backend.post_processor = old
        raise ValueError(f"append_eos: the tokenizer of {name} does not end with one EOS after the change; "
                         "give --append_eos false")
    return True


def _with_eos(processor: dict | None, eos: str, eos_id: int) -> dict | None:
    """The JSON of a ``tokenizers`` post-processor that also appends ``eos`` after each sequence, or None for a
    kind that cannot (``BertProcessing``, ``RobertaProcessing``...)."""
    def seq(name, type_id):
        return {"Sequence": {"id": name, "type_id": type_id}}

    def end(type_id):
        return {"SpecialToken": {"id": eos, "type_id": type_id}}

    def template(t):
        return {**t, "single": [*t["single"], end(0)], "pair": [*t["pair"], end(1)],
                "special_tokens": {**t.get("special_tokens", {}), eos: {"id": eos, "ids": [eos_id], "tokens": [eos]}}}

    fresh = {"type": "TemplateProcessing", "single": [seq("A", 0)], "pair": [seq("A", 0), end(0), seq("B", 1)],
             "special_tokens": {}}
    kind = None if processor is None else processor.get("type")
    if kind is None:
        return template(fresh)
    if kind == "TemplateProcessing":
        return template(processor)
    if kind == "ByteLevel":
        return {"type": "Sequence", "processors": [processor, template(fresh)]}
    if kind == "Sequence":
        parts = processor["processors"]
        at = [i for i, p in enumerate(parts) if p.get("type") == "TemplateProcessing"]
        if len(at) > 1 or any(p.get("type") not in ("TemplateProcessing", "ByteLevel") for p in parts):
            return None
        parts = [template(p) if i in at else p for i, p in enumerate(parts)] + ([] if at else [template(fresh)])
        return {**processor, "processors": parts}
    return None


def apply_append_eos(model, setting, name: str = "the model") -> bool:
    """Resolve ``setting`` for a :class:`simcse.SimCSEModel` (:func:`resolve_append_eos` with its encoder config
    and pooler) and, when on, make its tokenizer append the EOS (:func:`append_eos`; ``"auto"`` leaves a tokenizer
    without an EOS token as it is). Sets and returns ``model.append_eos``: whether its rows now end with the EOS
    (also when the tokenizer adds it by itself; ``False`` never removes an EOS the tokenizer adds).

    Raises:
        ValueError: as :func:`resolve_append_eos` and :func:`append_eos`.
    """
    tok = model.tokenizer
    on = resolve_append_eos(setting, model.encoder.config, model.pooler_type)
    if on and tok is not None and (getattr(tok, "eos_token_id", None) is not None or setting not in (None, "auto")):
        append_eos(tok, name)
    model.append_eos = tok is not None and ends_with_eos(tok)
    return model.append_eos


FIRST_TOKEN_POOLERS = ("cls", "cls_before_pooler")


def check_decoder_pooler(config, pooler_type: str, name: str = "the model") -> None:
    """Refuse a pooler that reads the first token of a *causal* decoder: with causal attention that token's state
    is computed from itself alone, so every sentence starting with the same token (the BOS) gets the same vector.

    Raises:
        ValueError: a causal decoder ``config`` with a pooler in :data:`FIRST_TOKEN_POOLERS` (one line naming the
            pooler, ``name`` and what to use instead).
    """
    if is_decoder_config(config) and not is_bidirectional(config) and pooler_type in FIRST_TOKEN_POOLERS:
        raise ValueError(f"pooler_type {pooler_type!r} reads the first token, which the causal decoder {name} "
                         "computes from that token alone (every sentence would get the same vector); use "
                         "'last_token' or 'avg', or train with --bidirectional true")


def default_decoder_pooler(config) -> str | None:
    """The pooler a decoder folder that records none is read with: ``last_token`` (sentence-transformers'
    ``lasttoken``, as E5-mistral and GTE-Qwen); None for an encoder."""
    return "last_token" if is_decoder_config(config) else None


def read_model_config(path: str, trust_remote_code: bool, hf_kwargs: dict):
    """The model's transformers config (cheap: ``config.json`` alone), read before any weight is loaded; None
    when it cannot be read here (the weight loading then reports the problem)."""
    from transformers import AutoConfig

    hub = {k: hf_kwargs[k] for k in ("cache_dir", "revision", "token", "local_files_only") if k in hf_kwargs}
    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, **hub)
    except (OSError, ValueError):
        return None
