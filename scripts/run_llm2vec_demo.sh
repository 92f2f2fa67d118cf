#!/usr/bin/env bash
# The decoder recipe (LLM2Vec: bidirectional attention, masked next-token prediction, unsupervised SimCSE, with
# LoRA) end to end on the CPU, on a tiny random Llama built from a config: three commands, a few minutes.
# On GPUs the same steps run with configs/llm2vec_llama3_mntp.json and configs/llm2vec_llama3_simcse.json.
#   bash scripts/run_llm2vec_demo.sh                                # into result/tiny-llama{,-mntp,-simcse}
#   OUT=/tmp/demo bash scripts/run_llm2vec_demo.sh --max_steps 2    # another folder; options go to both trainings
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-result}
python scripts/make_tiny_decoder.py "$OUT/tiny-llama" --family llama
python scripts/train.py --config configs/llm2vec_cpu_tiny_mntp.json --model_name_or_path "$OUT/tiny-llama" \
  --output_dir "$OUT/tiny-llama-mntp" --overwrite_output_dir true "$@"
python scripts/train.py --config configs/llm2vec_cpu_tiny_simcse.json --model_name_or_path "$OUT/tiny-llama-mntp" \
  --output_dir "$OUT/tiny-llama-simcse" --overwrite_output_dir true "$@"
