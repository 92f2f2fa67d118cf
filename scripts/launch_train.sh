#!/usr/bin/env bash
# Shared launcher of run_unsup_example.sh and run_sup_example.sh (not meant to be called directly).
# Inputs (set by the caller): GPU_CONFIG, CPU_CONFIG, DEFAULT_TRAIN_FILE, DOWNLOAD_SCRIPT. User overrides: CONFIG, MODEL, TRAIN_FILE, OUTPUT_DIR,
# MAX_STEPS (a short run: written to the config's output_dir + "-steps$MAX_STEPS" unless OUTPUT_DIR is set), MAX_TRAIN_SAMPLES,
# NUM_GPU, PYTHON, plus any scripts/train.py option as arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
NUM_GPU=${NUM_GPU:-$($PYTHON -c "import torch; print(torch.cuda.device_count())")}
TRAIN_FILE=${TRAIN_FILE:-$DEFAULT_TRAIN_FILE}
[ -s "$TRAIN_FILE" ] || [ "$TRAIN_FILE" != "$DEFAULT_TRAIN_FILE" ] || bash "$DOWNLOAD_SCRIPT"

args=()
if [ "$NUM_GPU" -gt 0 ]; then
  CONFIG=${CONFIG:-$GPU_CONFIG}
  [ -n "${MODEL:-}" ] && args+=(--model_name_or_path "$MODEL")
  # the config's global_batch_size gives the per-device batch (scripts/train.py divides it by WORLD_SIZE) and its
  # precision key the dtype; a GPU without bf16 falls back to the reference's fp16
  $PYTHON -c "import sys, torch; sys.exit(not torch.cuda.is_bf16_supported())" || args+=(--precision fp16)
else
  CONFIG=${CONFIG:-$CPU_CONFIG}
  [ -n "${MODEL:-}" ] && args+=(--model_name_or_path "$MODEL")
  args+=(--use_cpu true)
fi
[ -n "${MAX_STEPS:-}" ] && args+=(--max_steps "$MAX_STEPS")
if [ -n "${MAX_STEPS:-}" ] && [ -z "${OUTPUT_DIR:-}" ]; then
  # a short run gets its own folder (the config's output_dir + "-steps$MAX_STEPS"), so it never replaces the full run
  base_out=$($PYTHON -c "import sys; from simcse.training.config import load_config; print(load_config(sys.argv[1]).get('output_dir', ''))" "$CONFIG")
  [ -n "$base_out" ] && OUTPUT_DIR="${base_out%/}-steps$MAX_STEPS"
fi
[ -n "${MAX_TRAIN_SAMPLES:-}" ] && args+=(--max_train_samples "$MAX_TRAIN_SAMPLES")
[ -n "${OUTPUT_DIR:-}" ] && args+=(--output_dir "$OUTPUT_DIR")
args+=(--train_file "$TRAIN_FILE" --overwrite_output_dir true)  # as the reference scripts

if [ "$NUM_GPU" -gt 1 ]; then
  launcher=(torchrun --nproc_per_node="$NUM_GPU" scripts/train.py)
else
  launcher=("$PYTHON" scripts/train.py)
fi
start=$(date +%s)
"${launcher[@]}" "$CONFIG" "${args[@]}" "$@"
echo "[simcse] wall time: $(( $(date +%s) - start )) s"
