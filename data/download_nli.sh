#!/usr/bin/env bash
# nli_for_simcse.csv: supervised SimCSE triplets (sent0 premise, sent1 entailment, hard_neg contradiction) from
# SNLI + MNLI, into data/. Same as `simcse download nli` (links from $SIMCSE_DATA_MIRROR when set).
exec "${PYTHON:-python3}" "$(dirname "$0")/../simcse/files/download.py" nli --dest "$(dirname "$0")/nli_for_simcse.csv"
