"""scripts/gpu_check.sh / scripts.gpu_check: the CPU smoke run of every part (the GPU check's CI), the
budget (a part cut at its cap still reports), the exit status, the data bundle (inputs checked and every part
fitted to the budget at prepare time; a missing bundle said before part a), the version-floor report, and the
GPU path importing without ``datasets``."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA_MIRROR, write_senteval
from scripts.gpu_check import bundle as B
from scripts.gpu_check import check as G
from scripts.gpu_check import parts as P

REPO = Path(__file__).resolve().parents[2]
MIRROR = str(DATA_MIRROR) if DATA_MIRROR else None  # $SIMCSE_DATA_MIRROR, or where setup linked data/ from
needs_mirror = pytest.mark.skipif(not (MIRROR and (Path(MIRROR) / "wiki1m_for_simcse.txt").is_file()),
                                  reason="needs SIMCSE_DATA_MIRROR (the project's data mirror)")


def _env() -> dict:
    env = {**os.environ, "GPU_CHECK_INSTALL": "0", "TINY": "1", "PYTHON": sys.executable}
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(REPO), env.get("PYTHONPATH")) if x)
    return env


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    if not (MIRROR and (Path(MIRROR) / "wiki1m_for_simcse.txt").is_file()):
        pytest.skip("needs SIMCSE_DATA_MIRROR (the project's data mirror)")
    folder = tmp_path_factory.mktemp("bundle")
    B.prepare_data(folder, Path(MIRROR), wiki_lines=6000)
    return folder


@pytest.fixture(scope="module")
def tiny_run(bundle, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    # the default tiny budget (TINY_BUDGET_S) is met on an idle machine; the test allows more, so that a
    # loaded machine does not cut parts short
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--bundle-dir", str(bundle), "--out", str(out),
                           "--budget-s", "400", "--caps", "a=100,b=150,c=150"],
                          capture_output=True, text=True, env=_env(), cwd=REPO, timeout=600)
    return proc, out


@pytest.mark.slow
def test_tiny_run_passes_every_part_and_reports(tiny_run):
    proc, out = tiny_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("gpu_check device=cpu ") and " a=ok(" in last and " b=ok " in last and " c=ok " in last, last
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["tiny"] and report["budget_s"] == 400 and report["caps"] == {"a": 100, "b": 150, "c": 150}
    assert report["wall_s"] < 400 + 10
    md = (out / "gpu_check.md").read_text()
    assert "## a. Correctness" in md and "## b. Training speed" in md and "## c. Unsupervised SimCSE" in md


@pytest.mark.slow
def test_tiny_run_part_a_checks(tiny_run):
    _, out = tiny_run
    a = json.loads((out / "gpu_check.json").read_text())["parts"]["a"]
    names = [c["name"] for c in a["checks"]]
    # every pooler x {fp32, bf16} x {embeddings, gradients}, GradCache, bf16 and fp16 steps, InfoNCE loss/grads
    assert len(names) == 4 * len([p for p in P.POOLERS if p not in P.PROMPT_POOLERS]) + 1 + 2 + 2, names
    assert all(c["ok"] and c["value"] <= c["tol"] for c in a["checks"]), a["checks"]
    assert any(n.startswith("fp16 training step finite") for n in names)


@pytest.mark.slow
def test_tiny_run_part_b_has_every_side(tiny_run):
    _, out = tiny_run
    bench = json.loads((out / "gpu_check.json").read_text())["parts"]["b"]["bench"]
    rows = bench["variants"]["4"]
    assert set(rows) == {"ours", "padded", "st"}
    assert rows["ours"]["padding_free"] is True and rows["padded"]["padding_free"] is False
    for r in rows.values():
        assert r["sent_s"] > 0 and 0 < r["mfu"] < 1


@pytest.mark.slow
def test_tiny_run_part_c_table(tiny_run):
    _, out = tiny_run
    c = json.loads((out / "gpu_check.json").read_text())["parts"]["c"]
    assert list(c["rows"]) == ["raw, avg", "raw, avg_first_last", "raw, cls_before_pooler", "unsup SimCSE", "sup SimCSE"]
    for label, row in c["rows"].items():
        values = [row[t] for t in P.STS_TASKS]
        assert all(math.isfinite(v) and -100 <= v <= 100 for v in values), (label, row)
        assert row["Avg."] == pytest.approx(sum(values) / len(values), abs=0.01)
    pt = c["stages"]["pretrain"]
    assert pt["max_position_embeddings"] == P.C_SETTINGS["tiny"]["max_seq_length"]  # position table = training length
    assert pt["steps"] >= P.C_SETTINGS["tiny"]["probe_steps"] and pt["tokens_seen"] > 0
    assert c["stages"]["unsup"]["steps"] == P.C_SETTINGS["tiny"]["unsup_steps"]
    assert c["claim"]["unsup_beats_raw"] == (c["rows"]["unsup SimCSE"]["Avg."] > max(
        c["rows"][f"raw, {p}"]["Avg."] for p in P.RAW_POOLERS))


@needs_mirror
@pytest.mark.slow
def test_budget_cuts_a_part_and_skips_the_rest(bundle, tmp_path):
    # part c capped at 6 s (it needs several times that), then no budget left for part a; the report and the
    # last line still come, with what c finished. Budget 12 s: c starts with its 6 s whenever start-up takes under
    # 3 s (a loaded machine), and after it less than the 5 s a part needs are left for a.
    proc = subprocess.run([sys.executable, "-m", "scripts.gpu_check", "--device", "cpu", "--tiny", "--parts",
                           "c,a", "--caps", "c=6", "--budget-s", "12", "--bundle-dir", str(bundle), "--out", str(tmp_path)],
                          capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]  # a part cut short and one skipped: not a pass
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    c = report["parts"]["c"]
    assert c["status"].startswith("timeout") and c["wall_s"] < 9 and "b" not in report["parts"]
    assert c["status"] == "timeout" or "data" in c["stages"]  # partial: the stages it finished
    assert report["parts"]["a"]["status"].startswith("skipped (budget")
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("gpu_check device=cpu") and " a=skipped" in last and " c=timeout" in last
    assert all("=" in field for field in last.split()[1:])  # space-separated key=value fields
    assert report["wall_s"] < 15


@pytest.mark.slow
def test_gpu_path_imports_and_runs_part_a_without_datasets(tmp_path):
    code = ("import sys; sys.modules['datasets'] = None\n"
            "from scripts.gpu_check.parts import part_a\n"
            f"r = part_a(__import__('pathlib').Path({str(tmp_path)!r}), 'cpu', tiny=True)\n"
            "assert r['status'] == 'ok', r\nprint('ok', len(r['checks']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=REPO, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("ok "), proc.stderr[-2000:]


def test_cuda_asked_on_a_machine_without_one(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert G.main(["--device", "cuda", "--parts", "a", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "sees no CUDA device" in captured.err and "--device cpu --tiny" in captured.err
    assert captured.out.strip().splitlines()[-1].startswith("gpu_check device=none status=error")


@needs_mirror
def test_prepare_writes_the_bundle_with_a_manifest(bundle):
    data = bundle / "data"
    manifest = json.loads((data / "MANIFEST.json").read_text())
    assert manifest["wiki_lines"] == 6000 and manifest["bytes"] < B.DATA_BUDGET_BYTES
    import gzip

    with gzip.open(data / "wiki.txt.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    with open(Path(MIRROR) / "wiki1m_for_simcse.txt", encoding="utf-8") as f:
        first = [next(f).rstrip("\n") for _ in range(3)]
    assert len(lines) == 6000 and lines[:3] == first
    assert (data / "senteval" / "STS" / "STSBenchmark" / "sts-test.csv").is_file()
    assert (data / "senteval" / "SICK" / "SICK_test_annotated.txt").is_file()
    assert manifest["files"]["nli_for_simcse.csv"]["sha256"] == B._sha256(Path(MIRROR) / "nli_for_simcse.csv")


def test_prepare_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="wiki1m_for_simcse.txt"):
        B.prepare_data(tmp_path / "b", tmp_path, wiki_lines=10)
    with pytest.raises(ValueError, match="wiki_lines must be >= 1"):
        B.prepare_data(tmp_path / "b", tmp_path, wiki_lines=0)
    with pytest.raises(ValueError, match="nli_rows must be >= 1"):
        B.prepare_data(tmp_path / "b", tmp_path, nli_rows=0)


def _mirror(root: Path, nli_rows: int = 3000, wiki_lines: int = 6000) -> Path:
    """A small data mirror: SentEval from conftest (complete), an NLI file and a wiki file of distinct lines."""
    write_senteval(root / "senteval" / "downstream")
    with open(root / "nli_for_simcse.csv", "w", encoding="utf-8") as f:
        f.write("sent0,sent1,hard_neg\n")
        f.writelines(f"premise number {i} about a man,hypothesis {i} of a man,contradiction {i} with no man\n"
                     for i in range(nli_rows))
    (root / "wiki1m_for_simcse.txt").write_text("".join(f"wiki sentence {i} with {i * 7919 % 1000} words\n"
                                                        for i in range(wiki_lines)), encoding="utf-8")
    return root


def _senteval_bytes(mirror: Path) -> int:
    return sum(p.stat().st_size for name in ("STS", "SICK")
               for p in (mirror / "senteval" / "downstream" / name).rglob("*") if p.is_file())


def test_prepare_names_every_missing_input_before_writing(tmp_path):
    import shutil

    mirror = _mirror(tmp_path / "m")
    for year in ("STS12", "STS16"):  # a mirror missing STS test sets: refused now, not after minutes on the GPU
        shutil.rmtree(mirror / "senteval" / "downstream" / "STS" / f"{year}-en-test")
    (mirror / "nli_for_simcse.csv").write_text("sent0,sent1\na,b\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError) as e:
        B.prepare_data(tmp_path / "b", mirror)
    msg = str(e.value)
    assert "STS12" in msg and "STS16" in msg and "STS13" not in msg, msg
    assert "nli_for_simcse.csv has no column hard_neg" in msg, msg
    assert not (tmp_path / "b").exists()  # nothing written


def test_prepare_cuts_a_large_nli_file_to_the_budget_and_says_so(tmp_path):
    mirror = _mirror(tmp_path / "m", nli_rows=5000)
    senteval = _senteval_bytes(mirror)
    budget = senteval + (mirror / "nli_for_simcse.csv").stat().st_size  # the NLI file and the wiki text do not both fit
    m = B.prepare_data(tmp_path / "b", mirror, budget_bytes=budget)
    assert m["bytes"] <= budget and m["parts_bytes"]["senteval"] == senteval
    assert 0 < m["nli_rows"] < 5000 and m["parts_bytes"]["nli"] <= (budget - senteval) // 2
    assert m["cuts"] == [f"NLI cut to {m['nli_rows']} of 5000 rows to fit the budget (--nli-rows)"]
    assert m["wiki_lines"] == 6000  # the small wiki text is whole: only the part that did not fit is cut
    with open(tmp_path / "b" / "data" / "nli_for_simcse.csv", encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert lines[0] == "sent0,sent1,hard_neg" and len(lines) == m["nli_rows"] + 1
    assert lines[1] == "premise number 0 about a man,hypothesis 0 of a man,contradiction 0 with no man"


def test_prepare_names_the_part_that_does_not_fit(tmp_path):
    mirror = _mirror(tmp_path / "m", nli_rows=5000, wiki_lines=60000)
    senteval = _senteval_bytes(mirror)
    with pytest.raises(ValueError, match="SentEval STS and SICK files alone .* cannot be cut"):
        B.prepare_data(tmp_path / "b", mirror, budget_bytes=senteval - 1)
    with pytest.raises(ValueError, match=r"--nli-rows 5000: only \d+ NLI rows fit"):
        B.prepare_data(tmp_path / "b", mirror, nli_rows=5000, budget_bytes=senteval + 20_000)
    with pytest.raises(ValueError, match=r"--wiki-lines 60000: only about \d+ wiki lines fit"):
        B.prepare_data(tmp_path / "b", mirror, wiki_lines=60000, nli_rows=10, budget_bytes=senteval + 60_000)
    assert not (tmp_path / "b" / "data").exists() and not (tmp_path / "b" / "data.partial").exists()
    # the default wiki size is cut to fit instead, and said
    m = B.prepare_data(tmp_path / "b", mirror, nli_rows=10, budget_bytes=senteval + 60_000)
    assert 1000 <= m["wiki_lines"] < 60000 and m["bytes"] <= senteval + 60_000
    assert m["cuts"] == [f"wiki cut to {m['wiki_lines']} of {B.WIKI_LINES} lines to fit the budget (--wiki-lines)"]


def test_run_without_a_bundle_stops_before_part_a(tmp_path, capsys):
    assert G.main(["--device", "cpu", "--tiny", "--bundle-dir", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    captured = capsys.readouterr()
    assert "part c: the data bundle" in captured.err and "--prepare" in captured.err and "--parts a,b" in captured.err
    assert "wiki.txt.gz" in captured.err and "STS12" in captured.err
    assert captured.out.strip().splitlines()[-1] == "gpu_check device=none status=error reason=no_data_bundle"
    assert not (tmp_path / "o").exists()  # no part started


@pytest.mark.slow
def test_tiny_smoke_run_without_prepare_exits_non_zero(tmp_path):
    # the wrapper as documented, with no bundle: the run stops before part a with a non-zero exit status
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--bundle-dir", str(tmp_path), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and "--prepare" in proc.stderr, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.strip().splitlines()[-1].endswith("reason=no_data_bundle")


@pytest.mark.parametrize("statuses, code", [({"a": "ok", "b": "ok"}, 0), ({"a": "ok", "b": "fail"}, 1),
                                            ({"a": "error (exit 1)", "b": "ok"}, 1), ({"a": "ok", "b": "timeout"}, 1)])
def test_exit_status_is_non_zero_when_a_part_is_not_ok(tmp_path, monkeypatch, capsys, statuses, code):
    def fake_run_part(part, args, out, seconds):  # the part writes its JSON (as a worker does), then ends
        finished = statuses[part] in ("ok", "fail")
        if finished:
            (out / f"part_{part}.json").write_text(json.dumps({"status": statuses[part], "checks": []}))
        (out / f"part_{part}.log").write_text("log\n")
        return ("finished" if finished else statuses[part]), 0.1

    monkeypatch.setattr(G, "_run_part", fake_run_part)
    assert G.main(["--device", "cpu", "--tiny", "--parts", "a,b", "--out", str(tmp_path)]) == code
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("gpu_check device=cpu") and f" b={G._token(statuses['b'])}" in last


def test_part_c_without_a_bundle_says_prepare(tmp_path):
    with pytest.raises(FileNotFoundError, match="gpu_check.sh --prepare"):
        P.part_c(tmp_path, "cpu", True, deadline=0.0, bundle=tmp_path / "none")


def test_floors_report_what_is_installed_below_them():
    floors = {"torch": "2.13.0", "transformers": "5.24.0", "numpy": "2.4.6"}
    installed = {"torch": "2.11.0+cu130", "transformers": "5.17.0", "numpy": "2.5.2", "scipy": "1.0"}
    assert B.below_floors(installed, floors) == ["torch 2.11.0+cu130 < 2.13.0", "transformers 5.17.0 < 5.24.0"]
    assert B.below_floors({"torch": None}, floors) == []


def test_version_floors_read_requirements_not_setup_py_text():
    reqs = ["torch>=2.13.0", "transformers<6,>=5.24.0", "tqdm", 'faiss-cpu>=1.7.4; extra == "faiss"',
            "numpy==2.4.6  # pinned", "# a comment", "", "not a requirement !!"]
    assert B.version_floors(reqs) == {"torch": "2.13.0", "transformers": "5.24.0", "numpy": "2.4.6"}


def test_floors_come_from_the_editable_install_metadata_else_requirements_txt(tmp_path, monkeypatch):
    from importlib import metadata

    (tmp_path / "requirements.txt").write_text("torch==2.13.0\n")
    assert B.checkout_requirements(tmp_path / "nothing") == ([], "none")

    class Dist:  # an editable install of tmp_path
        requires = ["torch>=2.0", 'pytest>=7; extra == "dev"']

        def read_text(self, name):
            return json.dumps({"url": tmp_path.as_uri(), "dir_info": {"editable": True}}) if name == "direct_url.json" else None

    monkeypatch.setattr(metadata, "distribution", lambda name: Dist())
    assert B.checkout_requirements(tmp_path) == (Dist.requires, "the installed package's metadata")
    assert B.checkout_requirements(tmp_path / "nothing") == ([], "none")  # another checkout's install: not its floors

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    assert B.checkout_requirements(tmp_path) == (["torch==2.13.0"], "requirements.txt")


def test_default_paths_are_in_this_checkout():
    assert B.REPO == REPO and (B.REPO / "setup.py").is_file()
    args = G._parser().parse_args([])
    assert args.bundle_dir == REPO / "gpu_bundle" and args.out == REPO / "gpu_check_out"
    assert args.budget_s is None and args.caps == ""  # main applies BUDGET_S and CAPS
    assert (G.BUDGET_S, G.CAPS) == (540.0, {"a": 45.0, "b": 230.0, "c": 240.0})


@pytest.mark.parametrize("text, match", [("d=3", "PART=SECONDS"), ("a3", "PART=SECONDS"), ("a=x", "not a number"),
                                         ("b=0", "must be > 0")])
def test_caps_errors(text, match):
    with pytest.raises(ValueError, match=match):
        G.parse_caps(text, G.CAPS)


def test_default_budgets_fit_the_promises():
    assert G.BUDGET_S <= 9 * 60 and G.TINY_BUDGET_S < 120  # 9 minutes on a GPU, under 2 minutes tiny
    assert set(G.CAPS) == set(G.TINY_CAPS) == set(G.PARTS)


def test_caps_override_only_the_named_parts():
    assert G.parse_caps("b=30, c=12.5", G.CAPS) == {"a": G.CAPS["a"], "b": 30.0, "c": 12.5}


def test_report_of_a_partial_run():
    report = {"preflight": {"device_name": "NVIDIA H200"}, "wall_s": 12.0,
              "parts": {"a": {"status": "ok", "device": "cuda",
                              "checks": [{"name": "x", "value": 1e-6, "tol": 1e-4, "ok": True}]}}}
    assert G.last_line(report) == "gpu_check device=NVIDIA_H200 wall_s=12.0 a=ok(1/1) b=not_run c=not_run"
    md = G.summary_markdown(report)
    assert "| x | 1.00e-06 | 1e-04 | yes |" in md and "## c. Unsupervised SimCSE from an encoder pretrained here: not run" in md


@pytest.mark.parametrize("target_ok", [True, False])
def test_install_falls_back_to_a_target_folder(tmp_path, monkeypatch, target_ok):
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "x-1.0-py3-none-any.whl").write_bytes(b"")
    calls = []

    def fake_run(cmd, **kw):  # the environment refuses the wheels (read-only); --target works or not
        calls.append(cmd)
        rc = 1 if len(calls) == 1 or (len(calls) == 2 and not target_ok) else 0
        return subprocess.CompletedProcess(cmd, rc, "", "ERROR: read-only" if rc else "")

    monkeypatch.setattr(B.subprocess, "run", fake_run)
    rep = B.install(tmp_path)
    assert all("--no-deps" in c and "--no-index" in c for c in calls)
    assert "--target" not in calls[0] and calls[1][calls[1].index("--target") + 1] == str(tmp_path / "site")
    assert calls[2][-2:] == ["-e", str(G.REPO)] and rep["editable"] is True
    if target_ok:
        assert rep["wheels_target"] == str(tmp_path / "site") and "wheels_error" not in rep
    else:
        assert "read-only" in rep["wheels_error"] and not (tmp_path / "site").exists()
