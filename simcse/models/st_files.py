"""The sentence-transformers module files of a saved :class:`simcse.SimCSEModel` folder.

:meth:`SimCSEModel.save_pretrained` adds them to every saved folder (Transformer in the folder root,
``1_Pooling``, and a ``2_Dense`` Linear+Tanh module holding the ``cls`` MLP when the MLP is used at inference),
so ``SentenceTransformer(folder)`` loads it and encodes like our model. sentence-transformers is not needed to
write them; the formats are the ones its ``models.Transformer`` / ``models.Pooling`` / ``models.Dense`` read
(checked in the tests with the installed package).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

# our pooler -> sentence-transformers pooling mode
ST_POOLING_MODES = {"cls": "cls", "cls_before_pooler": "cls", "avg": "mean", "last_token": "lasttoken"}

def mlp_at_inference(model) -> bool:
    """Whether ``model`` (a :class:`simcse.SimCSEModel`) applies its ``cls`` MLP when encoding."""
    return model.mlp is not None and not model.mlp_only_train

def write_sentence_transformers_files(model, folder: str | os.PathLike, max_seq_length: int = 128) -> bool:
    """Write the sentence-transformers module files into a saved model folder; True when ST can load it.

    Modules: ``0`` Transformer (the folder root, written by :meth:`SimCSEModel.save_pretrained`), ``1`` Pooling
    (``cls`` for ``cls``/``cls_before_pooler``, ``mean`` for ``avg``), and for ``cls`` with the MLP used at
    inference (``mlp_only_train=False``) ``2`` Dense(H, H, Tanh) holding the MLP's weights. No Normalize module:
    like :meth:`SimCSEModel.encode` without ``normalize``, embeddings are not unit length.

    The Pooling config records ``include_prompt`` (False: sentence-transformers leaves the prompt's tokens out
    of the mean, as :meth:`SimCSEModel.encode` does). ``avg_top2`` / ``avg_first_last`` have no Pooling mode; their Pooling config names the pooler as its mode,
    so ``SentenceTransformer(folder)`` stops with ``Invalid pooling mode: 'simcse pooler avg_top2 ...'``
    rather than silently pooling differently (without ``modules.json`` it would fall back to mean pooling).
    Returns False for them.
    """
    from safetensors.torch import save_file

    out = Path(folder)
    hidden = model.hidden_size
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": min(max_seq_length, model.max_input_tokens), "do_lower_case": False}, indent=2)
        + "\n")
    from simcse.models.lora import is_lora

    adapter_only = is_lora(model.encoder) and not getattr(model, "_merging_lora", False)
    supported = model.pooler_type in ST_POOLING_MODES and not adapter_only
    mode = ST_POOLING_MODES.get(model.pooler_type) or (
        f"simcse pooler {model.pooler_type} (not expressible in sentence-transformers; load this folder with "
        "simcse.SimCSE or transformers, see README.md)")
    if adapter_only:  # the base model's own config would load without this run's switches (bidirectional attention)
        mode = ("simcse LoRA adapter folder (sentence-transformers would rebuild the base model without this run's "
                "settings; load it with simcse.SimCSE, or train with --merge_lora true for a folder it loads)")
    pooling_dir = out / "1_Pooling"
    pooling_dir.mkdir(exist_ok=True)
    pooling_cfg = {
        "word_embedding_dimension": hidden,  # the name every sentence-transformers version reads
        "pooling_mode": mode,
        "pooling_mode_cls_token": mode == "cls",
        "pooling_mode_mean_tokens": mode == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_lasttoken": mode == "lasttoken",
        "include_prompt": bool(getattr(model, "include_prompt", True)),  # False: the prompt's tokens not averaged
    }
    (pooling_dir / "config.json").write_text(json.dumps(pooling_cfg, indent=2) + "\n")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    dense_dir = out / "2_Dense"
    if mlp_at_inference(model):
        dense_dir.mkdir(exist_ok=True)
        dense_cfg = {"in_features": hidden, "out_features": hidden, "bias": True,
                     "activation_function": "torch.nn.modules.activation.Tanh"}
        (dense_dir / "config.json").write_text(json.dumps(dense_cfg, indent=2) + "\n")
        weights = {"linear.weight": model.mlp.dense.weight, "linear.bias": model.mlp.dense.bias}
        save_file({k: v.detach().float().contiguous().cpu() for k, v in weights.items()},
                  str(dense_dir / "model.safetensors"))
        modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    elif dense_dir.exists():
        shutil.rmtree(dense_dir)  # a stale Dense module from an earlier export would be loaded
    (out / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    import transformers

    (out / "config_sentence_transformers.json").write_text(json.dumps({
        "__version__": {"transformers": transformers.__version__, "pytorch": torch.__version__},
        "prompts": dict(getattr(model, "prompts", {}) or {}),
        "default_prompt_name": getattr(model, "default_prompt_name", None),
        "similarity_fn_name": "cosine",
    }, indent=2) + "\n")
    return supported

ST_FILES = ("sentence_bert_config.json", "modules.json", "config_sentence_transformers.json", "1_Pooling", "2_Dense")
