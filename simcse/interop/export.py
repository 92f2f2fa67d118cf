"""Other libraries' folder layouts for a :class:`SimCSEModel`.

* :func:`write_sentence_transformers_files`: the sentence-transformers modules (Transformer in the folder root,
  ``1_Pooling``, and a ``2_Dense`` Linear+Tanh module holding the ``cls`` MLP when the MLP is used at inference)
  that :meth:`SimCSEModel.save_pretrained` adds to every saved folder, so ``SentenceTransformer(folder)``
  loads it and encodes like our model.
* :func:`export_sentence_transformers`: save + those files with a chosen ``max_seq_length``.
* :func:`export_huggingface`: a plain HF folder (``AutoModel.from_pretrained``) whose pooler holds the
  ``cls`` MLP, so ``outputs.pooler_output`` is the SimCSE ``cls`` embedding; what the reference project's
  ``simcse_to_huggingface.py`` produced. It has no simcse or sentence-transformers files.
* ONNX: :mod:`simcse.interop.onnx`.

sentence-transformers is not needed to export; the file formats written here are the ones its
``models.Transformer`` / ``models.Pooling`` / ``models.Dense`` modules read (checked in the tests with the
installed package).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch

from simcse.files.storage import writing
from simcse.models.folder import MLP_WEIGHTS_NAME, SIMCSE_CONFIG_NAME
from simcse.models.modeling import SimCSEModel
from simcse.models.dense import DENSE_WEIGHTS_NAME
from simcse.models.st_files import (ST_FILES, ST_POOLING_MODES, is_st_module_folder, mlp_at_inference, st_modes_of,
                                    write_sentence_transformers_files)
from simcse.files.checks import check_int


def source_folder(model: SimCSEModel) -> Path | None:
    """The local folder ``model`` was loaded from (its encoder config's ``_name_or_path``), or None."""
    name = getattr(getattr(model.encoder, "config", None), "_name_or_path", "") or ""
    return Path(name).resolve() if name and Path(name).is_dir() else None


def check_not_source(model: SimCSEModel, output_dir: str | os.PathLike, what: str) -> None:
    """The rule of every export: it never changes the model it exports. ValueError when ``output_dir`` is the
    folder ``model`` was loaded from (only the ONNX export, which adds ``onnx/`` and nothing else, may go there).
    """
    src = source_folder(model)
    if src is not None and Path(output_dir).resolve() == src:
        raise ValueError(f"the output {str(output_dir)!r} is the folder the model was loaded from; {what} would "
                         "rewrite that model's files: give a new folder (an ONNX export may go into the model's "
                         "own folder: it only adds onnx/)")


def _as_model(model: SimCSEModel | str | os.PathLike) -> SimCSEModel:
    if isinstance(model, SimCSEModel):
        return model
    if isinstance(model, (str, os.PathLike)):
        return SimCSEModel.from_pretrained(model)
    raise TypeError(f"model must be a SimCSEModel or a model folder, got {type(model).__name__}")


def export_sentence_transformers(model: SimCSEModel | str | os.PathLike, output_dir: str | os.PathLike,
                                 max_seq_length: int = 128) -> Path:
    """Write ``model`` as a sentence-transformers model folder; return the folder.

    Every folder :meth:`SimCSEModel.save_pretrained` writes is already one (see
    :func:`write_sentence_transformers_files`); this saves the model and sets ``max_seq_length``.

    Args:
        model: a :class:`SimCSEModel` or a folder it loads from.
        output_dir: created if needed; files of the same names are replaced. Not the folder ``model`` was
            loaded from (:func:`check_not_source`).
        max_seq_length: truncation (tokens) that sentence-transformers will use; capped at the model's limit.

    The dense head (sentence-transformers ``Dense`` modules) and unit-length output (``Normalize``) of a model
    read from a sentence-transformers folder are written as those modules, so the folder encodes the same there.

    Raises:
        ValueError: the pooler (``avg_top2``, ``avg_first_last``) has no sentence-transformers equivalent;
            ``output_dir`` is the model's own folder.
    """
    model = _as_model(model)
    if st_modes_of(model.pooler_type) is None:
        raise ValueError(
            f"pooler {model.pooler_type!r} has no sentence-transformers equivalent (its Pooling module reads the last "
            f"layer's token states, and cannot insert a prompt template's tokens); exportable poolers: "
            f"{sorted(ST_POOLING_MODES)}, alone or joined by '+'"
        )
    check_int(max_seq_length, "max_seq_length")
    out = Path(output_dir)
    check_not_source(model, out, "a sentence-transformers export")
    with writing("the sentence-transformers export", out.parent):  # save_pretrained is atomic
        model.save_pretrained(out)  # encoder + tokenizer + simcse files + sentence-transformers modules
        write_sentence_transformers_files(model, out, max_seq_length=max_seq_length)
    return out


def _saved_tensor(folder: Path, key: str) -> torch.Tensor | None:
    from safetensors import safe_open

    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            if key in st.keys():
                return st.get_tensor(key)
    return None


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


_HF_READING = {
    "cls_before_pooler": "last_hidden_state[:, 0] (pooler_output is NOT this model's embedding)",
    "avg": "the mean of last_hidden_state over the tokens of attention_mask",
    "avg_top2": "the mean over tokens (attention_mask) of the average of the last two hidden_states",
    "avg_first_last": "the mean over tokens (attention_mask) of the average of hidden_states[1] and hidden_states[-1]",
    "avg_first_last_embeddings": "the mean over tokens (attention_mask) of the average of hidden_states[0] and "
                                 "hidden_states[-1]",
    "last_token": "last_hidden_state at each row's last position where attention_mask is 1",
    "max": "the maximum of last_hidden_state over the tokens of attention_mask, per dimension",
    "weighted_avg": "the mean of last_hidden_state over the tokens of attention_mask, token j (from 0) weighted j + 1",
    "avg_sqrt_len": "the sum of last_hidden_state over the tokens of attention_mask, divided by the square root of "
                    "their number",
}


def huggingface_reading(model: SimCSEModel) -> tuple[str, str]:
    """How a plain HF user gets ``model``'s embedding from the exported folder, and the pooler that loads the
    folder back with ``SimCSE(folder, pooler=...)`` to the same embeddings: ``(reading, pooler)``.

    A ``cls`` model with ``mlp_only_train`` encodes without its MLP (paper Section 3): its embedding is
    ``last_hidden_state[:, 0]``, not ``pooler_output`` (which holds the MLP). A concatenation (``"avg+max"``)
    reads each part in order, concatenated; a model that encodes unit vectors adds that step."""
    pooler = model.inference_pooler
    if mlp_at_inference(model):
        reading = "pooler_output (the encoder's pooler holds the cls MLP)"
        pooler = "cls"
    elif "+" in pooler:
        reading = "the concatenation of " + "; ".join(_HF_READING[p] for p in pooler.split("+"))
    else:
        reading = _HF_READING[pooler]
    return reading + (", made unit length" if getattr(model, "pipeline_normalize", False) else ""), pooler


def export_huggingface(model: SimCSEModel | str | os.PathLike, output_dir: str | os.PathLike) -> Path:
    """Write a plain HF encoder folder (config, safetensors weights, tokenizer); return the folder.

    For the ``cls`` pooler with the MLP used at inference, the encoder's pooler (``pooler.dense``, Linear +
    Tanh in BERT/RoBERTa) holds the MLP, so ``AutoModel.from_pretrained(folder)(**batch).pooler_output``
    equals our embedding. For other poolers the HF pooler keeps the encoder's own weights: pool the
    ``last_hidden_state`` yourself (``[:, 0]`` for ``cls_before_pooler``/``cls`` with ``mlp_only_train``,
    a masked mean for ``avg``).

    Raises:
        ValueError: the ``cls`` MLP is used at inference but the encoder has no pooler of shape (H, H) to
            hold it (e.g. DistilBERT); use our format or :func:`export_sentence_transformers`; the model has a
            dense head (Dense layers after pooling, which a plain HF folder cannot hold); ``output_dir``
            is the model's own folder (:func:`check_not_source`).
    """
    model = _as_model(model)
    if len(getattr(model, "dense_head", ())):
        raise ValueError(f"this model applies {len(model.dense_head)} Dense layer(s) after pooling, which a plain HF "
                         "folder cannot hold (its embeddings would differ); export to sentence-transformers or ONNX, "
                         "or save with save_pretrained")
    out = Path(output_dir)
    check_not_source(model, out, "a Hugging Face export")
    with writing("the Hugging Face export", out.parent):  # written in a temporary sibling, moved in
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        try:
            model.save_pretrained(tmp / "m")
            saved = tmp / "m"
            if mlp_at_inference(model):
                w = _saved_tensor(saved, "pooler.dense.weight")
                if w is None or not torch.equal(w.float(), model.mlp.dense.weight.detach().float().cpu()):
                    raise ValueError(
                        f"{type(model.encoder).__name__} has no pooler that can hold the cls MLP; a plain HF folder "
                        "cannot reproduce this model's embeddings (save with save_pretrained, or export to "
                        "sentence-transformers)"
                    )
            simcse_files = (SIMCSE_CONFIG_NAME, MLP_WEIGHTS_NAME, DENSE_WEIGHTS_NAME) + ST_FILES
            out.mkdir(exist_ok=True)
            for folder in (saved, out):  # ours: the card would describe loading this folder lacks; out's: stale
                for f in list(folder.iterdir()):  # simcse / sentence-transformers files would override the plain one
                    if f.name in simcse_files or is_st_module_folder(f.name) or (
                            folder is saved and f.name in ("README.md", "simcse_training_args.json")):
                        _remove(f)
            for f in sorted(saved.iterdir()):
                dest = out / f.name
                if dest.is_dir():
                    shutil.rmtree(dest)
                os.replace(f, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out
