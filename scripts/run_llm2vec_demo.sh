#!/usr/bin/env bash
# The decoder recipe (LLM2Vec: bidirectional attention, masked next-token prediction, unsupervised SimCSE, with
# LoRA) end to end on the CPU, on a tiny random Llama built from a config: three commands, a few minutes.
# On GPUs the same steps run with configs/llm2vec_llama3_mntp.json and configs/llm2vec_llama3_simcse.json.
set -euo pipefail
cd "$(dirname "$0")/.."
python scripts/make_tiny_decoder.py result/tiny-llama --family llama
python scripts/train.py --config configs/llm2vec_cpu_tiny_mntp.json --overwrite_output_dir true "$@"
python scripts/train.py --config configs/llm2vec_cpu_tiny_simcse.json --overwrite_output_dir true "$@"
