"""The names of the files in a saved :class:`simcse.SimCSEModel` folder (:mod:`simcse.models.folder`), and which
of them a save into a folder that already holds a model replaces.

A save writes the files of the model it holds and nothing else: full encoder weights (``model.safetensors``,
``config.json``) or a LoRA adapter (``adapter_config.json``, ``adapter_model.safetensors``), the MLP, MLM or dense head
when the model has one, the sentence-transformers modules, the tokenizer. Saving over an earlier model (an
overwritten training output folder) first writes the new files, then removes the files of those names
(:func:`written_by_a_save`) that the new save did not write (:func:`simcse.files.storage.atomic_folder`), so the
folder never holds the earlier model's weights beside the new one's. Files of other names (the user's own) are
kept, and so is ``README.md`` (the card keeps a card simcse did not write, :mod:`simcse.models.card`).
"""
from __future__ import annotations

import re

from simcse.models.dense import DENSE_WEIGHTS_NAME
from simcse.models.lora import ADAPTER_CONFIG_NAME
from simcse.models.st_files import ST_FILES, is_st_module_folder

SIMCSE_CONFIG_NAME = "simcse_config.json"

MLP_WEIGHTS_NAME = "simcse_mlp.safetensors"

MLM_HEAD_WEIGHTS_NAME = "simcse_mlm_head.safetensors"  # the auxiliary MLM head (training with do_mlm)

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json", "adapter_model.safetensors")

# the files an HF tokenizer reads its vocabulary from (fast tokenizers; WordPiece; BPE; SentencePiece)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model", "source.spm")

_MODEL_NAMES = frozenset((*WEIGHT_FILES, *ST_FILES, SIMCSE_CONFIG_NAME, MLP_WEIGHTS_NAME, MLM_HEAD_WEIGHTS_NAME, DENSE_WEIGHTS_NAME,
                          ADAPTER_CONFIG_NAME, "adapter_model.bin", "config.json", "generation_config.json"))
_TOKENIZER_NAMES = frozenset((*TOKENIZER_FILES, "tokenizer_config.json", "special_tokens_map.json",
                              "added_tokens.json", "merges.txt", "chat_template.jinja", "chat_template.json"))
_SHARD = re.compile(r"(model|pytorch_model)-\d{5}-of-\d{5}\.(safetensors|bin)")  # HF's sharded weights


def written_by_a_save(name: str, tokenizer: bool = True) -> bool:
    """Whether a top-level entry ``name`` of a model folder is one a save writes (one that an overwriting save
    which did not write it removes); with ``tokenizer`` False (a save of a model without a tokenizer) the
    tokenizer's files are not among them, so the folder keeps the tokenizer it has."""
    return (name in _MODEL_NAMES or (tokenizer and name in _TOKENIZER_NAMES) or _SHARD.fullmatch(name) is not None
            or is_st_module_folder(name))
