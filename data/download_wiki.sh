#!/usr/bin/env bash
# Fetch wiki1m_for_simcse.txt (unsupervised SimCSE corpus: 10^6 English Wikipedia sentences) into data/.
# Source: the reference project's public location. With SIMCSE_DATA_MIRROR=<folder> the file is linked
# from <folder>/wiki1m_for_simcse.txt instead (offline machines, CI).
set -euo pipefail
cd "$(dirname "$0")"
name=wiki1m_for_simcse.txt
if [ -s "$name" ]; then echo "data/$name already present"; exit 0; fi
if [ -n "${SIMCSE_DATA_MIRROR:-}" ]; then
  src="$(cd "$SIMCSE_DATA_MIRROR" && pwd)/$name"
  [ -s "$src" ] || { echo "error: SIMCSE_DATA_MIRROR=$SIMCSE_DATA_MIRROR has no $name" >&2; exit 1; }
  ln -sf "$src" "$name"
  echo "linked data/$name -> $src"
else
  url=https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/$name
  wget -O "$name.part" "$url" && mv "$name.part" "$name"
fi
