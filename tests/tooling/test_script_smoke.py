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


@pytest.fixture(scope="module")
def senteval(tmp_path_factory):
    from conftest import write_senteval

    return write_senteval(tmp_path_factory.mktemp("senteval"))


SMOKE = {  # module -> (arguments after the tiny model's option, what its output must say)
    "scripts.benchmarks.cosine_rounding": (["--n", "16"], "NumpyIndex: raw self-scores above 1"),
    "scripts.benchmarks.evaluation": (["--repeats", "1", "--allow_busy"], "STS suite (--task_set sts --mode test)"),
    "scripts.benchmarks.gradcache": (["--batch", "8", "--max_seq_length", "16", "--chunk", "4", "--allow_busy"],
                                     "ratio cached/uncached"),
}


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(SMOKE))
def test_documented_benchmark_runs_on_a_tiny_model(module, tiny_bert_dir, senteval):
    """The command as the docs print it, with a tiny model and the SentEval folder where the evaluator finds it
    (``$SIMCSE_SENTEVAL_DIR``): exit 0 and its result line."""
    import os

    args, says = SMOKE[module]
    env = {**os.environ, "SIMCSE_SENTEVAL_DIR": str(senteval)}
    extra = ["--data_dir", str(senteval)] if module.endswith(".evaluation") else []
    cmd = [sys.executable, "-m", module, "--model_name_or_path", str(tiny_bert_dir), *args, *extra]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and says in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
