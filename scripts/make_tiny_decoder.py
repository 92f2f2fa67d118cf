"""Build a tiny random decoder LLM (Llama, Mistral, Qwen2, Qwen3, Gemma or GPT-2 layout) with a word-level
tokenizer, from a config alone (no weights are downloaded), for the CPU demo of the decoder recipe
(docs/llm.md) and the tests. Random weights: nothing trained on it says anything about quality.

    python scripts/make_tiny_decoder.py result/tiny-llama --family llama
"""
from __future__ import annotations

import argparse
from pathlib import Path

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gpt2")
SPECIAL = ["<pad>", "<unk>", "<s>", "</s>", "<mask>"]
DEMO_WORDS = ("the a an of to and in is was for on that with as by at it from his her he she they are be this "
              "which or had not were but have one their its also first new has been who after two more an when there "
              "all other into time year years only made over can would than some most up used such city world "
              "man woman people school war national team part later known many state united being film season "
              "music game may where during played about during between early out born both high three under").split()


def make_word_tokenizer(folder: Path, words=DEMO_WORDS):
    """A fast word-level tokenizer (whitespace and punctuation split) over ``words`` plus <pad> <unk> <s> </s>
    <mask>; saved into ``folder`` and returned."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(dict.fromkeys([*SPECIAL, *words]))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                                  eos_token="</s>", mask_token="<mask>", model_max_length=64)
    tok.save_pretrained(folder)
    return tok


def make_tiny_decoder(folder, family: str = "llama", seed: int = 0, dropout: float = 0.1, words=DEMO_WORDS) -> Path:
    """Save a tiny random ``family`` causal LM (``*ForCausalLM``: base model and LM head; hidden size 32, 2
    layers) and the word tokenizer into ``folder``; return it.

    Raises:
        ValueError: an unknown family (lists :data:`FAMILIES`).
    """
    import torch
    import transformers as tf

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {list(FAMILIES)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = make_word_tokenizer(folder, words)
    ids = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
               eos_token_id=tok.eos_token_id)
    torch.manual_seed(seed)
    if family == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, resid_pdrop=dropout,
                                                 embd_pdrop=dropout, attn_pdrop=dropout, **ids))
    else:
        name = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma": "Gemma"}[family]
        cfg = getattr(tf, f"{name}Config")(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                            max_position_embeddings=64, attention_dropout=dropout, **ids)
        model = getattr(tf, f"{name}ForCausalLM")(cfg)
    model.save_pretrained(folder)
    return folder


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python scripts/make_tiny_decoder.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("folder", help="where to save the model and tokenizer")
    parser.add_argument("--family", choices=FAMILIES, default="llama", help="the decoder layout")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args(argv)
    print(f"[simcse] tiny random {args.family} decoder: {make_tiny_decoder(args.folder, args.family, args.seed)}")


if __name__ == "__main__":
    main()
