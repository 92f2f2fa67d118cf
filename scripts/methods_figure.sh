#!/usr/bin/env bash
# The alignment-uniformity figure of docs/methods.md: unsupervised SimCSE's CPU default and each method's CPU config,
# trained for the same 5 steps, beside the untrained all-MiniLM-L6-v2, coloured by STS-B dev Spearman computed
# from the same embeddings. Trains 8 short runs into result/fig-*, then plots.
#   bash scripts/methods_figure.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
# the figure computes its own STS-B numbers: no evaluation before, during or after training
NO_EVAL=(--eval_before_training false --test_after_training false --eval_strategy no --load_best_model_at_end false)
CONFIG=configs/unsup_cpu_minilm.json      MAX_STEPS=5 OUTPUT_DIR=result/fig-simcse     bash scripts/run_unsup_example.sh "${NO_EVAL[@]}"
CONFIG=configs/esimcse_cpu_minilm.json    MAX_STEPS=5 OUTPUT_DIR=result/fig-esimcse    bash scripts/run_unsup_example.sh "${NO_EVAL[@]}"
CONFIG=configs/simcse_pp_cpu_minilm.json  MAX_STEPS=5 OUTPUT_DIR=result/fig-simcse_pp  bash scripts/run_unsup_example.sh "${NO_EVAL[@]}"
CONFIG=configs/mixcse_cpu_minilm.json     MAX_STEPS=5 OUTPUT_DIR=result/fig-mixcse     bash scripts/run_unsup_example.sh "${NO_EVAL[@]}"
CONFIG=configs/diffcse_cpu_minilm.json    MAX_STEPS=5 OUTPUT_DIR=result/fig-diffcse    bash scripts/run_unsup_example.sh "${NO_EVAL[@]}"
CONFIG=configs/infocse_cpu_minilm.json    MAX_STEPS=5 OUTPUT_DIR=result/fig-infocse    bash scripts/run_unsup_example.sh "${NO_EVAL[@]}"
CONFIG=configs/promptbert_cpu_minilm.json MAX_STEPS=5 OUTPUT_DIR=result/fig-promptbert bash scripts/run_unsup_example.sh "${NO_EVAL[@]}"
CONFIG=configs/rankcse_cpu_minilm.json    MAX_STEPS=5 OUTPUT_DIR=result/fig-rankcse    bash scripts/run_unsup_example.sh "${NO_EVAL[@]}"
"$PYTHON" scripts/plot_figures.py --figure align_uniform --color_by_stsb --legend \
  --models all-MiniLM-L6-v2 result/fig-simcse result/fig-esimcse result/fig-simcse_pp result/fig-mixcse \
           result/fig-diffcse result/fig-infocse result/fig-promptbert result/fig-rankcse \
  --labels all-MiniLM-L6-v2 SimCSE ESimCSE SimCSE++ MixCSE DiffCSE InfoCSE PromptBERT RankCSE \
  --out docs/figures/methods_align_uniform.png --json docs/figures/methods_align_uniform.json
