#!/usr/bin/env bash
# nli_for_simcse.csv: supervised SimCSE triplets (sent0 premise, sent1 entailment, hard_neg contradiction)
# from SNLI + MNLI. Downloads from the reference project's public location, or links $SIMCSE_DATA_MIRROR/nli_for_simcse.csv.
exec bash "$(dirname "$0")/fetch_file.sh" nli_for_simcse.csv
