"""LoRA adapters (Hu et al. 2021) on the encoder through peft, as LLM2Vec trains its decoders: only the
adapters are trained and checkpointed; the saved folder is the base model's reference plus the adapter, or
(``merge_lora``) the merged weights.

A folder with an adapter holds peft's ``adapter_config.json`` (with ``base_model_name_or_path``) and
``adapter_model.safetensors`` beside simcse's files, and no encoder weights; :func:`load_lora_encoder` rebuilds
the encoder from the base model (with the attention recorded in ``simcse_config.json``) and the adapter.
"""
from __future__ import annotations

import copy
from pathlib import Path

ADAPTER_CONFIG_NAME = "adapter_config.json"
# LLM2Vec's target modules for Llama/Mistral/Gemma/Qwen2 (experiments/run_mntp.py: initialize_peft); GPT-2's
# fused projections
DEFAULT_TARGETS = {
    "llama": ["q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "mistral": ["q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "gemma": ["q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "qwen2": ["q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "qwen3": ["q_proj", "v_proj", "k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "bert": ["query", "key", "value", "dense"],
    "roberta": ["query", "key", "value", "dense"],
}


def is_lora(encoder) -> bool:
    """Whether ``encoder`` is a peft model (LoRA adapters on a base model)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(encoder, PeftModel)


def apply_lora(encoder, r: int, alpha: float | None = None, dropout: float = 0.05, target_modules=None,
               base_model: str | None = None):
    """``encoder`` wrapped with LoRA adapters (rank ``r``, scale ``alpha / r``; ``alpha`` default ``2 r`` as
    LLM2Vec's runs); the base weights are frozen, only the adapters train.

    An ``encoder`` that already carries an adapter (loaded from an adapter folder: LLM2Vec's chain, MNTP then
    SimCSE) has it merged into its weights first, so the new adapter sits on one plain base.

    Args:
        target_modules: module names (a list, or a comma-separated string); default: LLM2Vec's list for the
            model type (:data:`DEFAULT_TARGETS`).
        base_model: what the saved adapter records as its base (``base_model_name_or_path``): the folder or Hub id
            the run loaded (an absolute path for a folder; an adapter folder, whose own base
            :func:`load_lora_encoder` then loads first). None: peft's guess (the encoder's ``name_or_path``).

    Raises:
        ValueError: ``r`` not a positive integer, ``dropout`` outside [0, 1), no default target modules for the
            model type, or target names that match no module (peft's message); ImportError text when peft is
            missing (``pip install peft``).
    """
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(f"--lora_r must be a positive integer, got {r!r}")
    if not 0 <= dropout < 1:
        raise ValueError(f"--lora_dropout must be in [0, 1), got {dropout!r}")
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ValueError("--lora_r needs peft: pip install peft (or pip install 'simcse[llm]')") from e
    if is_lora(encoder):
        encoder = encoder.merge_and_unload()
    kind = getattr(encoder.config, "model_type", None)
    if isinstance(target_modules, str):
        target_modules = [t.strip() for t in target_modules.split(",") if t.strip()]
    if not target_modules:
        if kind not in DEFAULT_TARGETS:
            raise ValueError(f"--lora_target_modules: no default for model type {kind!r}; name the linear layers "
                             "to adapt, e.g. --lora_target_modules q_proj,v_proj")
        target_modules = DEFAULT_TARGETS[kind]
    config = LoraConfig(r=r, lora_alpha=2 * r if alpha is None else alpha, lora_dropout=dropout,
                        target_modules=list(target_modules), bias="none", task_type=None)
    try:
        model = get_peft_model(encoder, config)
    except ValueError as e:
        raise ValueError(f"--lora_target_modules {','.join(target_modules)}: {e}") from e
    if base_model is not None:
        for cfg in model.peft_config.values():
            cfg.base_model_name_or_path = str(base_model)
    return model


def base_reference(name_or_path: str) -> str:
    """What an adapter records as its base: the absolute path of a local folder (a relative one would not be
    found from another working directory), else the Hub id as given."""
    import os

    return os.path.abspath(name_or_path) if os.path.isdir(name_or_path) else name_or_path


def merged_copy(encoder):
    """A plain transformers model with the adapters of ``encoder`` merged into its weights (``encoder`` itself
    is left as it is)."""
    return copy.deepcopy(encoder).merge_and_unload()


def load_lora_encoder(path: str | Path, config_overrides: dict | None = None, **hf_kwargs):
    """The encoder of an adapter folder: the base model of ``adapter_config.json`` (its config updated with
    ``config_overrides``, e.g. ``{"is_causal": False}`` for a bidirectional decoder) with the folder's adapter.

    Raises:
        ValueError: peft is not installed (the folder cannot be read without it).
    """
    import json

    try:
        from peft import PeftModel
    except ImportError as e:
        raise ValueError(f"{str(path)!r} holds a LoRA adapter: reading it needs peft (pip install peft)") from e
    from transformers import AutoConfig, AutoModel

    base = json.loads((Path(path) / ADAPTER_CONFIG_NAME).read_text())["base_model_name_or_path"]
    if not base:
        raise ValueError(f"{str(path)!r} holds a LoRA adapter whose adapter_config.json names no base model "
                         "(base_model_name_or_path); set it to the folder or Hub id the adapter was trained on")
    if (Path(base) / ADAPTER_CONFIG_NAME).is_file():  # a chain (MNTP then SimCSE): the base is an adapter folder
        encoder = load_lora_encoder(base, config_overrides, **hf_kwargs).merge_and_unload()
    else:
        config = AutoConfig.from_pretrained(base)
        for key, value in (config_overrides or {}).items():
            setattr(config, key, value)
        encoder = AutoModel.from_pretrained(base, config=config, **hf_kwargs)
    return PeftModel.from_pretrained(encoder, str(path), is_trainable=True)
