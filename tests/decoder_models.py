"""Tiny random decoder LLMs (built from configs, no weights needed) for the decoder-backbone tests: Llama,
Mistral, Qwen2, Qwen3, Gemma and GPT-2 layouts with a word-level tokenizer over the test vocabulary."""
from __future__ import annotations

from pathlib import Path

import torch

from conftest import WORDS

DECODER_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gpt2")
SPECIAL = ["<pad>", "<unk>", "<s>", "</s>", "<mask>"]


def make_word_tokenizer(folder: Path):
    """A fast word-level tokenizer (whitespace split) with <pad> <unk> <s> </s> <mask>; saved into ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                  eos_token="</s>", mask_token="<mask>", model_max_length=64)
    tok.save_pretrained(folder)
    return tok


def make_tiny_decoder(folder: Path, family: str = "llama", seed: int = 0, dropout: float = 0.1) -> Path:
    """Save a tiny random ``family`` causal LM (``*ForCausalLM``: the base model plus its LM head) and the word
    tokenizer into ``folder``; return ``folder``."""
    import transformers as tf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = make_word_tokenizer(folder)
    ids = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
               eos_token_id=tok.eos_token_id)
    torch.manual_seed(seed)
    if family == "gpt2":
        cfg = tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, resid_pdrop=dropout, embd_pdrop=dropout,
                            attn_pdrop=dropout, **ids)
        model = tf.GPT2LMHeadModel(cfg)
    else:
        names = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma": "Gemma"}[family]
        cfg = getattr(tf, f"{names}Config")(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                             max_position_embeddings=64, attention_dropout=dropout, **ids)
        model = getattr(tf, f"{names}ForCausalLM")(cfg)
    model.save_pretrained(folder)
    return folder
