"""The documented commands under scripts/ run, not only parse: each on a tiny model and a few sentences, in seconds
(``--help`` of every benchmark is tests/tooling/test_benchmark_commands.py).

The benchmarks that start worker processes of their own (and the few that do not) run through their ``main(argv)``
in this process, what ``python -m scripts.benchmarks.NAME`` calls; their workers, the servers and the bash scripts
run as processes. The data is a mirror folder of random sentences (``$SIMCSE_DATA_MIRROR``, where the commands
look for wiki1m_for_simcse.txt and nli_for_simcse.csv) and a small SentEval folder (``$SIMCSE_SENTEVAL_DIR``).
Each test checks what the command prints (its result line, with finite numbers) or writes.

Not run here: scripts/setup_env.sh, scripts/check_min_versions.sh and scripts/check_newest_versions.sh create a
venv and install from the package index (CI's ``.ci/run`` runs setup_env.sh and check_newest_versions.sh);
scripts/methods_figure.sh trains eight runs of the embedded model (its commands are checked by
test_benchmark_commands.py, and run_unsup_example.sh, which it repeats, runs here). ``TINY=1 bash
scripts/reproduce_raw.sh`` is tests/research/test_reproduce.py, ``TINY=1 bash scripts/gpu_check.sh``
tests/tooling/test_gpu_check.py; ``python -m scripts.benchmarks.methods`` (with an objective from an entry point)
tests/training/test_objective_packages.py::test_the_ablation_runner_and_the_methods_benchmark_train_it.
"""
from __future__ import annotations

import csv
import importlib
import io
import json
import math
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import free_port, load_script, random_sentences

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_profile_train_step_profiles_a_step(tiny_bert_dir, tmp_path):
    """docs/performance.md, "Where the time goes": ``python -m scripts.benchmarks.profile_train_step`` on a tiny
    model (its options through ``--ours-args``, as documented), one profiled step after two warm-up steps."""
    data = tmp_path / "sentences.txt"
    data.write_text("\n".join(random_sentences(256)) + "\n")
    cmd = [sys.executable, "-m", "scripts.benchmarks.profile_train_step", "--data", str(data), "--precisions", "fp32",
           "--warmup", "2", "--steps", "1", "--threads", "1", "--top", "3", "--products", "--allow_busy", "--ours-args", "--model_name_or_path",
           str(tiny_bert_dir), "--max_seq_length", "16", "--per_device_train_batch_size", "8"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "fp32: profiled 1 step(s) after 2 warm-up" in r.stdout and "| kind | ms/step | share |" in r.stdout
    assert "| weight gradient |" in r.stdout and "products: " in r.stdout  # --products


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
    args, says = SMOKE[module]
    env = {**os.environ, "SIMCSE_SENTEVAL_DIR": str(senteval)}
    extra = ["--data_dir", str(senteval)] if module.endswith(".evaluation") else []
    cmd = [sys.executable, "-m", module, "--model_name_or_path", str(tiny_bert_dir), *args, *extra]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and says in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]


# ------------------------------------------------------------------------------ the data the commands find
@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """A data mirror: wiki1m_for_simcse.txt (1,100 random sentences over the tiny vocabulary) and
    nli_for_simcse.csv (sent0, sent1, hard_neg)."""
    root = tmp_path_factory.mktemp("mirror")
    sentences = random_sentences(1100, seed=5)
    (root / "wiki1m_for_simcse.txt").write_text("\n".join(sentences) + "\n")
    with open(root / "nli_for_simcse.csv", "w", newline="") as f:
        csv.writer(f).writerows([["sent0", "sent1", "hard_neg"], *zip(sentences[:200], sentences[200:400],
                                                                       sentences[400:600])])
    return root


@pytest.fixture
def data_env(mirror, senteval, monkeypatch):
    """``$SIMCSE_DATA_MIRROR`` and ``$SIMCSE_SENTEVAL_DIR`` set here and for every process started from here."""
    for key, value in (("SIMCSE_DATA_MIRROR", mirror), ("SIMCSE_SENTEVAL_DIR", senteval),
                       ("TOKENIZERS_PARALLELISM", "false")):
        monkeypatch.setenv(key, str(value))
    from scripts.benchmarks.common import checkout_env

    # the bash scripts: this checkout first on PYTHONPATH, this Python's `python` first on PATH
    return checkout_env(PYTHON=sys.executable, PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                                                     os.environ.get("PATH", "")]))


def numbers_in(text: str, patterns: list[str]) -> list[float]:
    """Every pattern (a line of ``text``, ``re.M``) matches; the numbers it captures, each checked finite."""
    found = []
    for pattern in patterns:
        m = re.search(pattern, text, re.M)
        assert m, f"no line matches {pattern!r} in:\n{text[-3000:]}"
        found += [float(x) for x in m.groups()]
    assert all(math.isfinite(x) for x in found), found
    return found


N = r"([-+]?[0-9.]+(?:e[-+]?\d+)?)"  # a number the scripts print

TINY_TRAIN = ["--batch-size", "8", "--max-seq-length", "16", "--warmup", "1", "--steps", "1", "--threads", "1"]

# name -> (arguments, lines its output must hold); {model}: the tiny BERT, {data}: the mirror's wiki file,
# {senteval}: the SentEval folder, {tmp}: an empty folder, {old}: an extract of this checkout's HEAD
COMMANDS = {
    # docs/performance.md
    "against_checkout": (["--checkout", "{old}", "--model", "{model}", "--data", "{data}", "--precision", "fp32",
                          *TINY_TRAIN, "--rounds", "1", "--max-extra", "0", "--gemm-square", "128", "--allow_busy"],
                         [rf"^train_speedup_vs_checkout precision=fp32 old_sent_s={N} new_sent_s={N} speedup={N} "
                          rf"cpu_time_ratio={N} mfu_old={N} mfu_new={N}$"]),
    "train": (["--quick", "--model", "{model}", "--data", "{data}", "--precisions", "fp32", "--batch-size", "8",
               "--max-seq-length", "16", "--threads", "1", "--max-extra", "0", "--gemm-square", "128", "--allow_busy"],
              [rf"^\| fp32 \| sentence-transformers \| {N} \| {N} \|", rf"^fp32: ours/theirs sentences/s {N} ",
               r"^train_speedup_vs_sentence_transformers fp32=([0-9.]+) bf16=nan mfu_bf16=nan$"]),
    "train_options": (["--model", "{model}", "--data", "{data}", "--precisions", "fp32", "--rounds", "1", "--warmup", "1",
                       "--steps", "1", "--threads", "1", "--allow_busy", "--variants", "{variants}"],
                      [rf"^\| fp32 \| baseline \| {N} \| {N} \| {N} \| 1.00x \|$",
                       rf"^\| fp32 \| default \| {N} \| {N} \| {N} \| {N}x \|$"]),
    "scaling": (["--model", "{model}", "--data", "{data}", "--batch-sizes", "4", "--lengths", "16", "--warmup", "1",
                 "--steps", "1", "--loss-batch", "8", "--threads", "1", "--allow_busy"],
                [rf"^\| 4 \| 32 \| {N} \| {N} \| {N} \| {N} \|$", rf"^\| 64 \| 16 \| {N} \| {N} \| {N} \| {N} \|$",
                 rf"^loss only \(info_nce forward \+ backward, B=8, H=32, float32\): {N} ms$"]),
    "encode": (["--quick", "--model", "{model}", "--data", "{data}", "-n", "64", "--rounds", "1", "--batch-size", "16",
                "--max-length", "16", "--threads", "1", "--allow_busy"],
               [rf"^encode_speedup_vs_sentence_transformers fp32={N} bf16={N}$",
                rf"^encode_speedup_vs_best_sentence_transformers fp32={N} reduced={N}$"]),
    # docs/training.md, docs/methods.md, docs/experiments.md, docs/evaluation.md
    "train_sources": (["--quick", "--model", "{model}", "--data", "{data}", "--allow_busy"],
                      [rf"^train_dataset_vs_train_file wall_ratio={N} cpu_ratio={N} data_path_cpu_ratio={N} "
                       r"same_losses=True$"]),
    "dev_eval": (["--model", "{model}", "--repeats", "1", "--threads", "1", "--senteval_dir", "{senteval}",
                  "--allow_busy"], [rf"^dev_eval_ratio_vs_command trainer_batch_\d+={N} trainer_batch_8={N}$"]),
    "experiment_overhead": (["--model", "{model}", "--train_file", "{data}", "--max_steps", "2", "--repeats", "1",
                             "--allow_busy"],
                            [rf"^bare commands: median {N} s; through the runner: median {N} s; overhead per run {N} s"]),
    "interval_calibration": (["--experiments", "2", "--resamples", "2", "--seeds", "3", "--regimes", "1", "--pairs", "10",
                              "--null_only", "--workers", "1"],
                             [rf"^headline, worst cell: mean covered {N}%, difference covered {N}%, false positives "
                              rf"{N}%"]),
    # docs/scaling.md, docs/ecosystem.md, docs/serve.md
    "encode_memory": (["--sizes", "40", "--shard-size", "16", "--tokenizer", "{model}", "--cache", "{tmp}",
                       "--allow_busy"], [rf"^encode_memory sizes=40 shards_peak_mib={N} npy_peak_mib={N} "
                                         rf"shards_growth=1.000$"]),
    "index": (["--model", "{model}", "--n", "1000", "--real", "1000", "--queries", "10", "--kinds", "exact", "--cache",
               "{tmp}", "--threads", "1", "--allow_busy"],
              [rf"^index_benchmark n=1000 exact_recall@10={N} exact_qps={N} exact_memory_vs_exact=1.0000 "
               rf"exact_build_s={N}$"]),
    "onnx_quality": (["--model_name_or_path", "{model}", "--data_dir", "{senteval}", "--threads", "1", "--max_loss", "100"],
                     [rf"^stsb_test_spearman torch={N} bf16={N} onnx={N} onnx-int8={N} max_loss_points={N}$"]),
    "serve": (["--serve-args", "--model_name_or_path {model} --input {data} --max_lines 32", "--query-file", "{data}",
               "--queries", "4", "--clients", "2", "--requests", "8", "--allow_busy"],
              [rf"^serve_load clients=2 requests=8 errors=0 mismatches=0 throughput_rps={N} p50_ms={N} p99_ms={N}$"]),
    "run_mteb": (["--model_name_or_path", "{model}", "--local_senteval", "STSBenchmark:test", "--data_dir", "{senteval}",
                  "--output_json", "{tmp}/scores.json"], [rf"main_score={N}$"]),
}


def checkout_extract(folder: Path) -> Path:
    """This checkout's committed ``scripts/`` and ``simcse/`` (HEAD) in ``folder``: the "other checkout" of
    ``against_checkout`` (its docstring's ``git archive <commit> | tar -x``)."""
    r = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", "HEAD", "scripts", "simcse"],
                       capture_output=True, timeout=120)
    if r.returncode:
        pytest.skip(f"not a git checkout: {r.stderr.decode()[-300:]}")
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
        tar.extractall(folder, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_documented_command_runs_on_a_tiny_model(name, tiny_bert_dir, mirror, senteval, data_env, tmp_path, capsys):
    """``python -m scripts.benchmarks.NAME`` (``python scripts/run_mteb.py``) with the tiny model, few steps and few
    sentences: it finishes (a result of 0 where it returns an exit status) and prints its result lines."""
    if name == "run_mteb":
        pytest.importorskip("mteb")
    from scripts.benchmarks.train_options import DEFAULT_VARIANTS

    args, lines = COMMANDS[name]
    values = {"model": tiny_bert_dir, "data": mirror / "wiki1m_for_simcse.txt", "senteval": senteval, "tmp": tmp_path,
              "old": "", "variants": json.dumps({k: DEFAULT_VARIANTS[k] for k in ("baseline", "default")})}
    if "{old}" in args:
        values["old"] = checkout_extract(tmp_path / "old")
    argv = [a.format(**values) for a in args]
    main = load_script(name).main if name == "run_mteb" else importlib.import_module(f"scripts.benchmarks.{name}").main
    result = main(argv)
    assert result in (0, None) or isinstance(result, dict), result
    numbers_in(capsys.readouterr().out, lines)
    if name == "run_mteb":
        assert all(math.isfinite(v) for v in json.loads((tmp_path / "scores.json").read_text()).values())


@pytest.mark.slow
def test_screenshot_command_drives_the_page_or_says_what_is_missing(tiny_bert_dir, mirror, tmp_path, capsys):
    """``python -m scripts.benchmarks.screenshot_serve`` against a `simcse serve` of the tiny model: the page's results
    equal the API's, no request leaves the server, and the PNG is written; without playwright or Chromium, one
    line says which is missing and nothing is written."""
    from scripts.benchmarks import screenshot_serve as shot

    out = tmp_path / "serve_demo.png"
    argv = ["--serve-args", f"--model_name_or_path {tiny_bert_dir} --input {mirror / 'wiki1m_for_simcse.txt'} "
            "--max_lines 32", "--out", str(out)]
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        playwright = False
    else:
        playwright = True
    if not playwright or shot.find_chromium() is None:
        with pytest.raises(SystemExit, match=r"^error: (the playwright package is missing|no Chromium found)"):
            shot.main(argv)
        assert not out.exists()
        return
    assert shot.main(argv) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    numbers_in(capsys.readouterr().out, [rf"^page results equal the API's: True; similarity shown: {N}; requests leaving "
                                         rf"the server: 0; wrote {re.escape(str(out))}$"])


# ------------------------------------------------------------------------------------------ bash scripts
def run_bash(script: str, args: list[str], env: dict, cwd: Path = REPO, timeout: int = 1800) -> str:
    """``bash scripts/SCRIPT ARGS``; exit status 0; its stdout."""
    r = subprocess.run(["bash", str(REPO / "scripts" / script), *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("script, data", [("run_unsup_example.sh", "wiki1m_for_simcse.txt"),
                                          ("run_sup_example.sh", "nli_for_simcse.csv")])
def test_example_script_trains_and_evaluates(script, data, tiny_bert_dir, mirror, data_env, tmp_path):
    """The README's first command and its supervised twin, with their documented overrides (MODEL, TRAIN_FILE,
    OUTPUT_DIR, MAX_STEPS, NUM_GPU) and a ``scripts/train.py`` option appended: two steps of the CPU config on the
    tiny model, evaluated before, after and on test; the model and simcse_results.json written."""
    out = tmp_path / "out"
    env = {**data_env, "MODEL": str(tiny_bert_dir), "TRAIN_FILE": str(mirror / data), "OUTPUT_DIR": str(out),
           "MAX_STEPS": "2", "NUM_GPU": "0"}
    printed = run_bash(script, ["--per_device_train_batch_size", "16"], env)
    numbers_in(printed, [r"^\[simcse\] trained 2 steps in ", rf"^\[simcse\] after training \(test\): "
                         rf"test_stsb_spearman={N} test_sickr_spearman={N}", rf"^\[simcse\] wall time: {N} s$"])
    results = json.loads((out / "simcse_results.json").read_text())
    assert math.isfinite(results["test"]["test_stsb_spearman"]), results
    assert (out / "model.safetensors").is_file()


@pytest.mark.slow
def test_llm2vec_demo_runs_its_three_steps(mirror, data_env, tmp_path):
    """docs/llm.md's ``bash scripts/run_llm2vec_demo.sh`` with ``OUT`` in a temporary folder and its options for
    both trainings (2 steps, the mirror's sentences): the tiny decoder, MNTP, then SimCSE with its dev and test lines."""
    printed = run_bash("run_llm2vec_demo.sh", ["--max_steps", "2", "--max_train_samples", "64", "--train_file",
                                               str(mirror / "wiki1m_for_simcse.txt")], {**data_env, "OUT": str(tmp_path)})
    assert f"[simcse] tiny random llama decoder: {tmp_path}/tiny-llama" in printed
    numbers_in(printed, [rf"^\[simcse\] after training \(dev\): final_stsb_spearman={N} ",
                         rf"^\[simcse\] after training \(test\): test_stsb_spearman={N} "])
    assert printed.count("[simcse] trained 2 steps in ") == 2
    for step in ("tiny-llama-mntp", "tiny-llama-simcse"):
        assert (tmp_path / step / "model.safetensors").is_file(), sorted(p.name for p in (tmp_path / step).iterdir())


@pytest.mark.slow
def test_serve_first_minute_reports_the_page_health_and_a_search(tiny_bert_dir, mirror, data_env, tmp_path):
    """docs/serve.md's ``bash scripts/benchmarks/serve_first_minute.sh`` with a free port, `simcse serve` options for
    the tiny model and 32 sentences, and ``LATER=3``: the page's time, then health and a search answered (200, or 503
    while indexing), and health ``ok`` at the end; the server's stderr in the working folder."""
    port = str(free_port())
    printed = run_bash("benchmarks/serve_first_minute.sh", [port, "--model_name_or_path", str(tiny_bert_dir), "--input",
                                                           str(mirror / "wiki1m_for_simcse.txt"), "--max_lines", "32"],
                       {**data_env, "LATER": "3"}, cwd=tmp_path)
    numbers_in(printed, [rf"^page after {N} s$"])
    answers = [x for x in printed.splitlines() if re.search(r" \(HTTP \d+\)$", x)]  # the three curl lines
    assert len(answers) == 3 and all(re.search(r" \(HTTP (200|503)\)$", x) for x in answers[:2]), printed
    assert re.fullmatch(r'\{"status": ?"ok"\} \(HTTP 200\)', answers[2]), printed
    assert (tmp_path / "serve_first_minute.err").is_file()
