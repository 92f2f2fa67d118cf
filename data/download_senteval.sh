#!/usr/bin/env bash
# SentEval's evaluation data (STS12-16, STS-B, SICK, MR, CR, SUBJ, MPQA, SST2, TREC, MRPC) into data/downstream
# (or DEST), the folder simcse.evaluation reads by default. Same as `simcse download senteval`:
#
#   bash data/download_senteval.sh            # -> data/downstream
#   bash data/download_senteval.sh DEST       # -> DEST
#
# With $SIMCSE_DATA_MIRROR set, copies $SIMCSE_DATA_MIRROR/senteval/downstream (no network). Otherwise downloads
# the preprocessed SentEval archive the SimCSE reference uses (already tokenized as SentEval's scripts leave it).
exec "${PYTHON:-python3}" "$(dirname "$0")/../simcse/files/download.py" senteval --dest "${1:-$(dirname "$0")/downstream}"
