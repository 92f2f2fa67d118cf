#!/usr/bin/env bash
# The SimCSE paper's central findings on a raw encoder: MLM-pretrain a small BERT from scratch on the wiki
# text, then run every reproduction part on it (docs/reproduction.md).
#
#   bash scripts/reproduce_raw.sh              # the documented CPU run: 12,000 pretraining steps (~1 h idle), then ~40 min of rows
#   TINY=1 bash scripts/reproduce_raw.sh       # smoke test of the whole pipeline in a minute or two
#
# Environment: OUT (default result/reproduce-raw), THREADS (torch threads, default 2), WIKI / NLI (data
# files; default data/ or $SIMCSE_DATA_MIRROR), PRETRAIN_MINUTES (time cap, default 150), STEPS (SimCSE
# steps of every run, default 500), STS_TASKS (test sets of the raw/unsup/sup rows, default the seven of the
# 7-task average), SEED (default 42). Finished work is kept: rerunning resumes the
# pretraining from its last checkpoint and skips finished reproduction parts.
set -euo pipefail
cd "$(dirname "$0")/.."
pick() { if [ -e "data/$1" ] || [ -z "${SIMCSE_DATA_MIRROR:-}" ]; then echo "data/$1"; else echo "$SIMCSE_DATA_MIRROR/$1"; fi; }
OUT=${OUT:-result/reproduce-raw}
THREADS=${THREADS:-2}
WIKI=${WIKI:-$(pick wiki1m_for_simcse.txt)}
NLI=${NLI:-$(pick nli_for_simcse.csv)}
SEED=${SEED:-42}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS TOKENIZERS_PARALLELISM=false
if [ -n "${TINY:-}" ]; then
  PRETRAIN=(--max_lines 2000 --tokenizer_lines 2000 --vocab_size 2000 --hidden_size 64 --num_hidden_layers 2
            --num_attention_heads 2 --max_steps 30 --save_steps 15 --logging_steps 5)
  REPRO=(--steps "${STEPS:-4}" --batch_size 16 --bf16 --align_every 2 --whitening_sentences 500
         --table3_rows p0.0 p0.1 fixed0.1 --sts_tasks STSBenchmark SICKRelatedness)
else
  PRETRAIN=(--max_lines 800000 --tokenizer_lines 250000 --vocab_size 8192 --hidden_size 256 --num_hidden_layers 4
            --num_attention_heads 4 --max_seq_length 32 --batch_size 64 --learning_rate 5e-4 --max_steps 12000
            --max_minutes "${PRETRAIN_MINUTES:-150}" --save_steps 500 --logging_steps 100)
  REPRO=(--steps "${STEPS:-500}" --batch_size 64 --learning_rate 1e-4 --bf16 --align_every 50
         --whitening_sentences 10000 --sts_tasks ${STS_TASKS:-STS12 STS13 STS14 STS15 STS16 STSBenchmark SICKRelatedness})
fi
python scripts/pretrain_mlm.py --train_file "$WIKI" --output_dir "$OUT/raw-bert" --seed "$SEED" \
  --torch_threads "$THREADS" "${PRETRAIN[@]}"
python -m simcse.research.reproduce --model_name_or_path "$OUT/raw-bert" --output_dir "$OUT" --train_file "$WIKI" \
  --sup_train_file "$NLI" --seed "$SEED" --num_threads "$THREADS" "${REPRO[@]}"
