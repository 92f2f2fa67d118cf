#!/usr/bin/env bash
# fetch_file.sh NAME: put NAME from the reference project's public data location into data/, or link it from
# $SIMCSE_DATA_MIRROR/NAME when that variable names a folder (offline machines, CI). Used by download_*.sh.
set -euo pipefail
name=$1
mirror=""
if [ -n "${SIMCSE_DATA_MIRROR:-}" ]; then
  mirror=$(cd "$SIMCSE_DATA_MIRROR" 2>/dev/null && pwd) || { echo "error: SIMCSE_DATA_MIRROR=$SIMCSE_DATA_MIRROR is not a folder" >&2; exit 1; }
fi
cd "$(dirname "$0")"
if [ -s "$name" ]; then echo "data/$name already present"; exit 0; fi
if [ -n "$mirror" ]; then
  src="$mirror/$name"
  [ -s "$src" ] || { echo "error: SIMCSE_DATA_MIRROR=$SIMCSE_DATA_MIRROR has no $name" >&2; exit 1; }
  ln -sf "$src" "$name"
  echo "linked data/$name -> $src"
else
  url=https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/$name
  wget -O "$name.part" "$url" && mv "$name.part" "$name"
fi
