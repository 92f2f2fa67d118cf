#!/usr/bin/env bash
# wiki1m_for_simcse.txt: the unsupervised SimCSE corpus (10^6 English Wikipedia sentences, one per line).
# Downloads from the reference project's public location, or links $SIMCSE_DATA_MIRROR/wiki1m_for_simcse.txt.
exec bash "$(dirname "$0")/fetch_file.sh" wiki1m_for_simcse.txt
