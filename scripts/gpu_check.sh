#!/usr/bin/env bash
# One GPU check (scripts.gpu_check): correctness on CUDA, speed against sentence-transformers, and
# unsupervised SimCSE from an encoder pretrained on the spot, in at most 9 minutes, with no network.
#
#   bash scripts/gpu_check.sh --prepare   # with the data mirror: data bundle -> gpu_bundle/data (< 40 MiB)
#   bash scripts/gpu_check.sh --bundle    # with PyPI: pure-Python wheels the target lacks -> gpu_bundle/wheels
#   bash scripts/gpu_check.sh [OPTIONS]   # on the GPU machine: pip install --no-deps (wheels + this checkout), run
#   TINY=1 bash scripts/gpu_check.sh      # CPU smoke run of every part on a tiny model (--device cpu --tiny)
#
# OPTIONS go to `python -m scripts.gpu_check` (--budget-s, --caps, --parts, --out, --bundle-dir, ...).
# GPU_CHECK_INSTALL=0 skips the install step (an environment that already has the package, e.g. CI).
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
PY="${PYTHON:-python3}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
case "${1:-}" in
  --prepare|--bundle|--install) exec "$PY" -m scripts.gpu_check "$@" ;;
esac
ARGS=("$@")
if [ "${TINY:-0}" = 1 ]; then
  ARGS=(--device cpu --tiny "${ARGS[@]}")
fi
BUNDLE="$REPO/gpu_bundle"
for ((i = 0; i < ${#ARGS[@]}; i++)); do
  if [ "${ARGS[$i]}" = --bundle-dir ]; then BUNDLE="${ARGS[$((i + 1))]}"; fi
done
if [ "${GPU_CHECK_INSTALL:-1}" = 1 ]; then
  # --no-deps: over the machine's own torch/transformers, below the package's floors if need be (it says which)
  "$PY" -m scripts.gpu_check --install --bundle-dir "$BUNDLE"
fi
if [ -d "$BUNDLE/site" ]; then  # the wheels went there (a read-only environment): see scripts.gpu_check.bundle.install
  export PYTHONPATH="$BUNDLE/site:$PYTHONPATH"
fi
exec "$PY" -m scripts.gpu_check "${ARGS[@]}"
