"""Build a tiny random decoder LLM (Llama, Mistral, Qwen2, Qwen3, Gemma or GPT-2 layout) with a word-level
tokenizer from a config alone (nothing is downloaded), for the CPU demo of the decoder recipe (docs/llm.md).
Random weights: nothing trained on it says anything about quality.

    python scripts/make_tiny_decoder.py result/tiny-llama --family llama
"""
from __future__ import annotations

import argparse

from simcse.models.testing import DECODER_FAMILIES, WORDS, tiny_decoder

# frequent English words, so that wiki sentences are not all <unk> for the demo's tokenizer
DEMO_WORDS = tuple(dict.fromkeys(WORDS + (
    "of to and in was for that with as by at it from his her he she they be this which or had not were but have "
    "one their its also first new has been who after two more when there all other into time year years only made "
    "over can would than some most up used such city world people school war national team part later known many "
    "state united being film season game may where during played about between early out born both high three "
    "under").split()))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python scripts/make_tiny_decoder.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("folder", help="where to save the model and its tokenizer")
    parser.add_argument("--family", choices=DECODER_FAMILIES, default="llama", help="the decoder layout")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args(argv)
    from pathlib import Path

    if (Path(args.folder) / "simcse_config.json").exists():  # a trained model: never mix its files with new ones
        parser.exit(2, f"error: {args.folder} holds a trained simcse model (simcse_config.json); choose another "
                       "folder for the tiny decoder\n")
    folder = tiny_decoder(args.folder, args.family, seed=args.seed, words=DEMO_WORDS)
    print(f"[simcse] tiny random {args.family} decoder: {folder}")


if __name__ == "__main__":
    main()
