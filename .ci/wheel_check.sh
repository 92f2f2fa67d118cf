#!/usr/bin/env bash
# The installed wheel is the whole product: build it, check that it holds the library only (no benchmark or
# GPU-check module), install it into a fresh venv in a temporary folder outside the checkout, and run `simcse
# download`, `evaluate` (dev mode, tiny model), a 3-step `train` from a packaged config, `encode` and
# `python -m simcse` there. Run by .ci/run with the CI venv active.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=$(command -v python)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/simcse-wheel.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
start=$(date +%s)
# only the wheel may provide simcse in the fresh venv: a checkout on PYTHONPATH would make pip skip the install
unset PYTHONPATH
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$TMP/dist" "$ROOT"
# the wheel is the library only: no benchmark, GPU-check or other script module, no GEMM-ceiling measurement
"$PY" - "$TMP"/dist/simcse-*.whl <<'EOF'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = z.namelist()
    flops = z.read("simcse/research/flops.py").decode()
bad = [n for n in names if re.search(r"(^|/)(scripts|benchmarks?|gpu_check|tests)/|bench|gpu_(check|parts|bundle)", n)]
assert not bad, f"benchmark / GPU-check / script files in the wheel: {bad}"
assert "gemm_ceiling" not in flops and "repeat_until_stable" not in flops, "the GEMM-ceiling measurement is in the wheel"
outside = [n for n in names if n.split("/")[0] != "simcse" and not n.split("/")[0].endswith(".dist-info")]
assert not outside, f"files outside simcse/ in the wheel: {outside}"
print(f"[wheel] {len(names)} files, all under simcse/ (+ dist-info): no benchmark or GPU-check module")
EOF
"$PY" -m venv --without-pip "$TMP/venv"
# The dependencies (torch, transformers...) come from the CI venv through one .pth path line instead of a second
# download. Only that folder is added: the .pth files inside it (the CI venv's editable simcse) are not run, so
# `import simcse` below can only find the wheel's copy.
site_new=$("$TMP/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site_new/simcse_ci_dependencies.pth"
"$PY" -m pip --python "$TMP/venv/bin/python" install -q --no-deps --no-index "$TMP"/dist/simcse-*.whl

cd "$TMP"
export PATH="$TMP/venv/bin:$PATH" HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
python - <<'EOF'
import sys, simcse
assert simcse.__file__.startswith(sys.prefix), f"simcse imported from {simcse.__file__}, not the fresh venv"
print(f"[wheel] simcse {simcse.__version__} from {simcse.__file__}")
EOF
python -m simcse --help > /dev/null
simcse download senteval
simcse download wiki
unset SIMCSE_DATA_MIRROR SIMCSE_SENTEVAL_DIR  # from here on the downloaded data/ is what is read
python - <<'EOF'
# a tiny random BERT with its own vocabulary (the CI has no model hub), from the wheel's own builder
from simcse.models.testing import tiny_encoder
tiny_encoder("tiny", positions=128)
EOF
simcse evaluate --model_name_or_path tiny --mode dev --task_set sts --quiet --batch_size 256 | tail -4
simcse train --config unsup_cpu_minilm --model_name_or_path tiny --output_dir out --max_steps 3 --eval_steps 3 \
  --save_steps 3 --logging_steps 1 --max_train_samples 512 --per_device_train_batch_size 16 --use_cpu true \
  --test_after_training false 2>&1 | grep '^\[simcse\]'
test -f out/simcse_config.json
printf 'a man is playing the guitar .\nthe dog runs in the park .\n' > s.txt
simcse encode --model out --input s.txt --output emb.npy
python -c 'import numpy as np; e = np.load("emb.npy"); assert e.shape == (2, 32), e.shape; print("[wheel] encode:", e.shape)'
echo "[wheel] wheel check passed in $(( $(date +%s) - start )) s"
