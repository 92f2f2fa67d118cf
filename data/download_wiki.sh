#!/usr/bin/env bash
# wiki1m_for_simcse.txt: the unsupervised SimCSE corpus (10^6 English Wikipedia sentences, one per line), into
# data/. Same as `simcse download wiki`: links $SIMCSE_DATA_MIRROR/wiki1m_for_simcse.txt when set, else downloads.
exec "${PYTHON:-python3}" "$(dirname "$0")/../simcse/files/download.py" wiki --dest "$(dirname "$0")/wiki1m_for_simcse.txt"
