"""Decoder LLMs as sentence encoders: which checkpoints are decoders, and the bidirectional-attention switch.

LLM2Vec (BehnamGhader et al., COLM 2024, arXiv 2404.05961) turns a decoder into an encoder in three steps:
bidirectional attention, masked next-token prediction, unsupervised SimCSE. The first step here uses
transformers' own switch: a config whose ``is_causal`` is False makes the models' mask builder
(``transformers.masking_utils.create_causal_mask``) return a bidirectional mask, for every family that builds
its mask there (Llama, Mistral, Qwen2/3, Gemma, GPT-2 and the other transformers 5 decoders); no model class is
copied or patched. The setting is part of the model's ``config.json``, so ``AutoModel``, sentence-transformers
and the ONNX export load the switched model as it was trained.
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
