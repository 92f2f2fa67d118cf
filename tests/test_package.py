"""The package as a whole: importing it has no side effects (no network, no heavy imports)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest




_NO_NETWORK_SCRIPT = r"""
import os, socket, sys
attempts = []
def refuse(*args, **kwargs):
    attempts.append(args[1:2] or args[:1])
    raise OSError("network access attempted")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse

import simcse, simcse.retrieval.tool                          # light imports: the hub library is not loaded yet
assert "huggingface_hub" not in sys.modules and "transformers" not in sys.modules, sorted(
    m for m in sys.modules if m.split(".")[0] in ("huggingface_hub", "transformers"))
os.environ["HF_HUB_OFFLINE"] = "1"                  # so setting it after `import simcse` still counts

import importlib, pkgutil
names = [m.name for m in pkgutil.walk_packages(simcse.__path__, "simcse.")]
for name in names:
    importlib.import_module(name)
import huggingface_hub.constants
assert huggingface_hub.constants.HF_HUB_OFFLINE, "HF_HUB_OFFLINE not honoured"
try:
    simcse.retrieval.tool.SimCSE("some-org/some-model-not-cached", pooler="avg", device="cpu")
except OSError as e:
    print("offline error:", str(e).splitlines()[0])
else:
    raise SystemExit("a hub name loaded without network")
assert not attempts, attempts
print("imported", len(names), "modules; connection attempts:", len(attempts))
"""


@pytest.mark.slow
def test_import_opens_no_network_connection_and_honours_offline_mode(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_HOME=str(tmp_path / "hf_home"), OMP_NUM_THREADS="1")  # an empty cache: nothing to fall back on
    r = subprocess.run([sys.executable, "-c", _NO_NETWORK_SCRIPT], env=env, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "connection attempts: 0" in r.stdout and "offline error:" in r.stdout
