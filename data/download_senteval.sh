#!/usr/bin/env bash
# Fetch SentEval's evaluation data (STS12-16, STS-B, SICK, MR, CR, SUBJ, MPQA, SST2, TREC, MRPC) into
# data/downstream, the folder simcse.evaluation reads by default.
#
#   bash data/download_senteval.sh            # -> data/downstream
#   bash data/download_senteval.sh DEST       # -> DEST
#
# With $SIMCSE_DATA_MIRROR set, copies $SIMCSE_DATA_MIRROR/senteval/downstream (no network).
# Otherwise downloads the preprocessed SentEval archive the SimCSE reference uses
# (SentEval/data/downstream/download_dataset.sh there): the official SentEval task files, already
# tokenized as SentEval's get_transfer_data.bash leaves them.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEST="${1:-$HERE/downstream}"
URL="https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/senteval.tar"

REQUIRED=(
  STS/STS12-en-test/STS.input.MSRpar.txt STS/STS13-en-test/STS.input.FNWN.txt
  STS/STS14-en-test/STS.input.images.txt STS/STS15-en-test/STS.input.belief.txt
  STS/STS16-en-test/STS.input.headlines.txt STS/STSBenchmark/sts-test.csv
  SICK/SICK_test_annotated.txt MR/rt-polarity.pos CR/custrev.pos SUBJ/subj.objective MPQA/mpqa.pos
  SST/binary/sentiment-train TREC/train_5500.label MRPC/msr_paraphrase_train.txt
)

complete() {
  local f
  for f in "${REQUIRED[@]}"; do [ -f "$1/$f" ] || return 1; done
}

if complete "$DEST"; then
  echo "SentEval data already present in $DEST"
  exit 0
fi

if [ -n "${SIMCSE_DATA_MIRROR:-}" ]; then
  SRC="$SIMCSE_DATA_MIRROR/senteval/downstream"
  if ! complete "$SRC"; then
    echo "error: \$SIMCSE_DATA_MIRROR is set but $SRC is missing or incomplete" >&2
    exit 1
  fi
  mkdir -p "$DEST"
  cp -R "$SRC/." "$DEST/"
  chmod -R u+w "$DEST"
  echo "copied SentEval data from $SRC to $DEST"
else
  TMP="$(mktemp -d)"
  trap 'rm -rf "$TMP"' EXIT
  echo "downloading $URL"
  if command -v curl >/dev/null 2>&1; then
    curl -fL --retry 3 -o "$TMP/senteval.tar" "$URL"
  else
    wget -O "$TMP/senteval.tar" "$URL"
  fi
  tar -xf "$TMP/senteval.tar" -C "$TMP"
  # the archive's top folder name has varied; find the folder that holds STS/STSBenchmark
  STSB="$(find "$TMP" -type d -name STSBenchmark -print -quit)"
  if [ -z "$STSB" ]; then
    echo "error: $URL did not contain STS/STSBenchmark" >&2
    exit 1
  fi
  ROOT="$(dirname "$(dirname "$STSB")")"
  mkdir -p "$DEST"
  cp -R "$ROOT/." "$DEST/"
  echo "extracted SentEval data to $DEST"
fi

if ! complete "$DEST"; then
  echo "error: $DEST is still missing files; expected e.g. ${REQUIRED[*]}" >&2
  exit 1
fi
