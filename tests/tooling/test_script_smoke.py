"""The documented commands under scripts/ run, not only parse: each on a tiny model and a few sentences, in seconds
(``--help`` of every benchmark is tests/tooling/test_benchmark_commands.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import random_sentences

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_profile_train_step_profiles_a_step(tiny_bert_dir, tmp_path):
    """docs/performance.md, "Where the time goes": ``python -m scripts.benchmarks.profile_train_step`` on a tiny
    model (its options through ``--ours-args``, as documented), one profiled step after two warm-up steps."""
    data = tmp_path / "sentences.txt"
    data.write_text("\n".join(random_sentences(256)) + "\n")
    cmd = [sys.executable, "-m", "scripts.benchmarks.profile_train_step", "--data", str(data), "--precisions", "fp32",
           "--warmup", "2", "--steps", "1", "--threads", "1", "--top", "3", "--allow_busy", "--ours-args", "--model_name_or_path",
           str(tiny_bert_dir), "--max_seq_length", "16", "--per_device_train_batch_size", "8"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "fp32: profiled 1 step(s) after 2 warm-up" in r.stdout and "| kind | ms/step | share |" in r.stdout
