"""Models from the reference code: its trainer's checkpoint folders and its 8 published models.

**Trainer folders.** The reference's ``BertForCL`` / ``RobertaForCL`` save one ``pytorch_model.bin`` (or
``model.safetensors``) whose keys are ``bert.*`` / ``roberta.*`` (the encoder, without BERT's NSP pooler),
``mlp.dense.{weight,bias}`` (the ``cls`` pooler's MLP) and, when trained with ``--do_mlm``, ``lm_head.*``; there
is no ``simcse_config.json``. ``transformers.AutoModel`` strips the ``bert.``/``roberta.`` prefix by itself;
:func:`read_reference_mlp` supplies the MLP, which :meth:`simcse.SimCSEModel.from_pretrained` then loads as the
``cls`` pooler's head. The reference's own ``simcse_to_huggingface.py`` did the same by renaming ``mlp`` to
``bert.pooler``. The pooler the folder was trained for is not recorded in it, so the user must name it
(``cls`` for supervised runs, ``cls_before_pooler`` for unsupervised ``--mlp_only_train`` runs).

**Published models.** The 8 models of the reference README's table were converted to plain HF folders (MLP in
BERT's pooler) and their model cards name the pooler: :data:`PUBLISHED_POOLERS`, used only for exactly those ids.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

# the reference README's model table: unsupervised models are evaluated with cls_before_pooler, supervised with cls
PUBLISHED_POOLERS = {
    f"princeton-nlp/{kind}-simcse-{model}": ("cls_before_pooler" if kind == "unsup" else "cls")
    for kind in ("unsup", "sup")
    for model in ("bert-base-uncased", "bert-large-uncased", "roberta-base", "roberta-large")
}
MLP_KEYS = ("mlp.dense.weight", "mlp.dense.bias")
ENCODER_PREFIXES = ("bert.", "roberta.")


def published_pooler(name: str) -> str | None:
    """The documented pooler of one of the reference's 8 published model ids (exact match), else None."""
    return PUBLISHED_POOLERS.get(str(name))


def _weight_file_for(folder: Path, key: str) -> Path | None:
    """The file of ``folder`` holding ``key``: the single weight file, or the shard an index names."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = folder / index_name
        if index.is_file():
            shard = json.loads(index.read_text()).get("weight_map", {}).get(key)
            return folder / shard if shard else None
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return folder / name
    return None


def _read_tensors(path: Path, keys: tuple[str, ...]) -> tuple[dict[str, torch.Tensor], bool]:
    """(the tensors of ``keys`` found in ``path``, whether any key has a reference encoder prefix).

    Pickled ``.bin`` files are read with ``torch.load(weights_only=True)``: only tensors, never code; a file
    holding anything else gives ``({}, False)`` here and is refused by the encoder loader.

    Raises:
        OSError: a ``.safetensors`` file that cannot be read (truncated or corrupt); the message names it.
    """
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                names = list(f.keys())
                found = {k: f.get_tensor(k) for k in keys if k in names}
        except SafetensorError as e:
            raise OSError(f"cannot read the weights in {str(path.parent)!r}: {str(e).splitlines()[0]} (a truncated "
                          f"or corrupt {path.name}? save or copy the model again)") from None
    else:
        import pickle

        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except pickle.UnpicklingError:  # not only tensors: the encoder loader refuses the file with its message
            return {}, False
        names = list(state)
        found = {k: state[k] for k in keys if k in state}
    return found, any(n.startswith(ENCODER_PREFIXES) for n in names)


def read_reference_mlp(path: str | Path) -> dict[str, torch.Tensor] | None:
    """The ``cls`` MLP of a reference trainer folder as ``{"dense.weight": (H, H), "dense.bias": (H,)}``
    (the keys of :class:`simcse.models.pooling.MLPHead`), or None when ``path`` is not such a folder (a hub name, a
    simcse folder, a plain HF encoder).

    Raises:
        ValueError: the folder has only one of ``mlp.dense.weight`` / ``mlp.dense.bias``.
    """
    folder = Path(path)
    if not folder.is_dir() or (folder / "simcse_config.json").is_file():
        return None
    weights = _weight_file_for(folder, MLP_KEYS[0])
    if weights is None or not weights.is_file():
        return None
    found, prefixed = _read_tensors(weights, MLP_KEYS)
    if not found or not prefixed:
        return None
    if len(found) != len(MLP_KEYS):
        raise ValueError(f"{weights} has {sorted(found)} but not both of {list(MLP_KEYS)}: an incomplete MLP")
    return {k[len("mlp."):]: v for k, v in found.items()}


def missing_pooler_message(path: str) -> str:
    """The error for a reference trainer folder loaded without a pooler (it is never guessed)."""
    return (f"{path!r} is a reference SimCSE trainer checkpoint (mlp.dense.* keys, no simcse_config.json), which "
            "does not record its pooler: pass it (--pooler / pooler_type): 'cls' for a supervised model, "
            "'cls_before_pooler' for an unsupervised one trained with --mlp_only_train")


def conversion_pooler(pooler: str, mlp_only_train: bool, has_mlp: bool) -> tuple[str, bool, str | None]:
    """How a reference trainer checkpoint is converted for ``pooler`` / ``mlp_only_train``:
    ``(pooler_type, mlp_only_train, note)``.

    The rule: a checkpoint's trained MLP (``mlp.dense.*``) is kept whenever the run asked for it. The reference's
    unsupervised recipe trains with ``--pooler_type cls --mlp_only_train`` and evaluates ``cls_before_pooler``;
    so ``cls_before_pooler`` with ``mlp_only_train`` becomes ``cls`` with ``mlp_only_train``, which encodes
    exactly as ``cls_before_pooler`` (the MLP is used in training only, paper Section 3) and keeps the MLP for
    further training. A pooler without an MLP and no ``mlp_only_train`` drops it; ``note`` then says so (None
    when nothing needs saying).
    """
    if pooler == "cls_before_pooler" and mlp_only_train:
        return "cls", True, ("pooler cls_before_pooler with mlp_only_train is recorded as pooler cls with "
                             "mlp_only_train: it encodes as cls_before_pooler and keeps the checkpoint's MLP "
                             "(mlp.dense.*) for further training" if has_mlp else None)
    if has_mlp and pooler != "cls":
        return pooler, mlp_only_train, (f"the checkpoint's MLP (mlp.dense.*) is not kept: pooler {pooler} has none; "
                                        "pass --pooler cls --mlp_only_train to keep it (it then encodes as "
                                        "cls_before_pooler)")
    return pooler, mlp_only_train, None


# The reference's public names that have no same-shaped counterpart here, with what replaces each
# (``simcse.tool.SimCSE`` is kept as an alias: :mod:`simcse.tool`).
_ENCODE = "SimCSE(path) (from simcse import SimCSE) to encode, SimCSEModel.from_pretrained(path, pooler_type=...) " \
          "(simcse.models.modeling) for the torch module"
_TRAIN = "'simcse train' (simcse.training.train) to train, 'simcse convert' for a checkpoint the reference wrote"
REFERENCE_REPLACEMENTS = {
    "simcse.models": {
        "BertForCL": f"{_ENCODE}; {_TRAIN}",
        "RobertaForCL": f"{_ENCODE}; {_TRAIN}",
        "Pooler": "simcse.models.pooling.get_pooler(pooler_type) (the same pooler names)",
        "MLPLayer": "the cls pooler's MLP inside SimCSEModel (simcse.models.modeling)",
        "Similarity": "simcse.training.losses.cosine_logits(z1, z2, temp)",
        "cl_init": "SimCSEModel.from_pretrained(path, pooler_type=...) (simcse.models.modeling)",
        "cl_forward": "simcse.training.losses.info_nce (the contrastive loss) and SimCSETrainer (simcse.training.trainer)",
        "sentemb_forward": _ENCODE,
    },
    "simcse.trainers": {
        "CLTrainer": "SimCSETrainer (simcse.training.trainer), built by 'simcse train' (simcse.training.build.build)",
    },
}


def reference_name_error(module: str, name: str) -> AttributeError | ImportError:
    """The error for ``from <module> import <name>``: an ``ImportError`` naming the replacement when ``name`` is one
    of the reference's public names (:data:`REFERENCE_REPLACEMENTS`), else the plain ``AttributeError`` Python
    raises (for a module ``__getattr__``)."""
    replacement = REFERENCE_REPLACEMENTS.get(module, {}).get(name)
    if replacement is None:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    return ImportError(f"{module}.{name} is the reference SimCSE code's and is not part of this simcse; "
                       f"use {replacement}", name=module)
