"""One prepared GPU check: correctness on CUDA, training speed against sentence-transformers, and the paper's
central claim (unsupervised SimCSE improves a raw pretrained encoder) on an encoder pretrained on the spot.

    bash scripts/gpu_check.sh --prepare    # here, with the data: STS/SICK + NLI + wiki, cut to 40 MiB -> gpu_bundle/data
    bash scripts/gpu_check.sh --bundle     # here, with PyPI: the pure-Python wheels the target lacks -> gpu_bundle/wheels
    bash scripts/gpu_check.sh              # on the GPU machine: install (--no-deps), then parts a, b, c
    TINY=1 bash scripts/gpu_check.sh       # CPU smoke run of every part on a tiny model (= --device cpu --tiny)

The run needs no network: everything it reads is in the checkout and ``gpu_bundle/``. Parts, in order:

* ``a`` correctness: the padding-free forward and backward equal the padded one for every pooler (fp32 and
  bf16 autocast, relative-norm tolerances), the GradCache step's gradients equal the plain step's, one bf16
  step and one fp16 step with ``torch.amp.GradScaler`` stay finite, and InfoNCE (loss and gradients) on the
  device equals CPU.
* ``b`` speed: ``python -m scripts.benchmarks.gpu`` (random BERT-base shape, unsupervised SimCSE, bf16, batch 64 and
  512): our trainer padding-free and padded, and sentence-transformers' trainer, each in its own process on
  the same device; sentences/s, peak memory and MFU against the bf16 GEMM rate measured in the same run.
* ``c`` central claim: MLM-pretrain a BERT-Mini-shaped encoder (4 layers, hidden 256) from scratch on the
  bundled wiki text for the time left (:mod:`simcse.research.pretrain`, bf16, ``max_position_embeddings`` = the
  training length, 32), score its raw read-outs (``avg``, ``avg_first_last``, ``cls_before_pooler``), train
  unsupervised SimCSE (wiki sentences, ``cls`` + ``mlp_only_train``, temp 0.05) and supervised SimCSE (NLI
  triplets, hard negatives) from it with :mod:`simcse.training.train`, and print the 7-task STS table (Spearman x 100).

A hard budget (``--budget-s``, default 540 s = 9 min) bounds the parts together; each part also has its own
cap (``--caps``) and runs in its own process group, killed at its cap, so a part cut short still reports what
it finished (every part rewrites its JSON after each step). ``<out>/gpu_check.json`` and ``<out>/gpu_check.md``
are rewritten after every part; the last printed line is machine-readable and starts with ``gpu_check``. The exit
status is 0 when every part asked for reports ``ok``, 1 when any failed, was cut at its cap or skipped for the
budget (the report and the last line say which), 2 for a bad argument, no device, or a data bundle that part c
cannot run from (said before part a starts).

The packing (``--prepare``, ``--bundle``, ``--install``) is :mod:`scripts.gpu_check.bundle`; the parts run in
child processes (``--worker a|b|c``) from :mod:`scripts.gpu_check.parts`; this module holds the budget, the
caps, the report and the entry point (``python -m scripts.gpu_check`` from the checkout's root, or
``bash scripts/gpu_check.sh``). Default paths are under the checkout this file is in.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from scripts.benchmarks.common import checkout_env
from scripts.gpu_check.bundle import (DATA_BUDGET_BYTES, REPO, WIKI_LINES, _read_json, _write_json, bundle_problems,
                                      download_wheels, install, installed_versions, prepare_data)
from scripts.gpu_check.parts import PUBLISHED, STS_TASKS, part_a, part_b, part_c
from simcse.files.storage import write_text_atomic

PARTS = ("a", "b", "c")
BUDGET_S = 540.0
CAPS = {"a": 45.0, "b": 230.0, "c": 240.0}  # + about 25 s of start-up and reporting = the 9-minute budget
TINY_BUDGET_S = 115.0
TINY_CAPS = {"a": 15.0, "b": 62.0, "c": 33.0}
MIN_PART_S = 5.0  # a part with less time than this left is skipped, not started


def parse_caps(text: str, defaults: dict[str, float]) -> dict[str, float]:
    """``"a=45,b=170"`` -> the caps in seconds (parts not named keep ``defaults``).

    Raises:
        ValueError: an unknown part, a missing ``=``, or a value that is not a positive number.
    """
    caps = dict(defaults)
    for item in filter(None, (x.strip() for x in text.split(","))):
        part, eq, value = item.partition("=")
        if part not in PARTS or not eq:
            raise ValueError(f"--caps: expected PART=SECONDS with PART in {','.join(PARTS)}, got {item!r}")
        try:
            caps[part] = float(value)
        except ValueError:
            raise ValueError(f"--caps: {part}={value!r} is not a number of seconds") from None
        if not caps[part] > 0:
            raise ValueError(f"--caps: {part} must be > 0 seconds, got {value}")
    return caps


# ------------------------------------------------------------------------------------------ report
def _fmt(x, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def summary_markdown(report: dict) -> str:
    """The markdown summary of a (possibly partial) ``gpu_check.json`` report."""
    pre = report.get("preflight", {})
    lines = [f"# GPU check: {pre.get('device_name', '?')}", "",
             f"Command: `{report.get('command', '')}` · budget {report.get('budget_s')} s · wall {report.get('wall_s')} s"
             + (" · tiny smoke run" if report.get("tiny") else ""), "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in pre.get("versions", {}).items() if v), ""]
    if pre.get("datasets_importable") not in (None, True):
        lines += [f"`datasets` is not importable ({pre['datasets_importable']}): parts b and c cannot train.", ""]
    inst = report.get("install") or {}
    if inst.get("below_floors"):
        lines += [f"Installed with `pip install --no-deps` over the version floors ({inst.get('floors_from', '?')}): "
                  + "; ".join(inst["below_floors"]) + ".", ""]
    parts = report.get("parts", {})
    a = parts.get("a", {})
    lines += [f"## a. Correctness on {a.get('device', '?')}: {a.get('status', 'not run')}", "",
              "| check | value | tolerance | ok |", "| --- | --- | --- | --- |"]
    lines += [f"| {c['name']} | {c['value']:.2e} | {c['tol']:.0e} | {'yes' if c['ok'] else 'NO'} |" for c in a.get("checks", [])]
    b = parts.get("b", {})
    lines += ["", f"## b. Training speed: {b.get('status', 'not run')}", "", f"`{b.get('command', '')}`", ""]
    bench = b.get("bench") or {}
    if bench:
        lines += ["MFU against the bf16 GEMM ceiling measured at the model's own shapes around each batch size's runs.", "",
                  "| batch | side | sentences/s | s/step | peak GPU MiB | GEMM ceiling TFLOP/s | MFU |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for batch, by_variant in bench.get("variants", {}).items():
            for variant, r in by_variant.items():
                lines.append(f"| {batch} | {variant} | {r['sent_s']:.1f} | {r['s_step']:.4f} | "
                             f"{_fmt(r.get('peak_gpu_mib'), '.0f')} | {_fmt((r.get('ceiling') or 0) / 1e12)} | "
                             f"{100 * r['mfu']:.1f}% |")
    c = parts.get("c", {})
    lines += ["", f"## c. Unsupervised SimCSE from an encoder pretrained here: {c.get('status', 'not run')}", ""]
    pt = c.get("stages", {}).get("pretrain")
    if pt:
        lines += [f"MLM pretraining: {pt['steps']} steps of batch {pt['batch']} in {pt['s']} s, about "
                  f"{pt['tokens_seen'] / 1e6:.1f}M tokens, loss {_fmt(pt['mlm_loss_first'])} -> {_fmt(pt['mlm_loss_last'])}, "
                  f"{pt['n_parameters']} parameters, position table {pt['max_position_embeddings']}.", ""]
    for stage in ("unsup", "sup"):
        s = c.get("stages", {}).get(stage)
        if s:
            lines.append(f"{stage} SimCSE: {s['steps']} steps of batch {s['batch']}, lr {s['lr']}, {s['s']} s, "
                         f"loss {_fmt(s['loss_first'], '.4f')} -> {_fmt(s['loss_last'], '.4f')}.")
    rows = c.get("rows", {})
    if rows:
        lines += ["", "| model | " + " | ".join(STS_TASKS) + " | Avg. | STS-B dev |",
                  "| --- " * (len(STS_TASKS) + 3) + "|"]
        for label, r in rows.items():
            lines.append(f"| {label} | " + " | ".join(_fmt(r.get(t)) for t in STS_TASKS)
                         + f" | {_fmt(r.get('Avg.'))} | {_fmt(r.get('STSBenchmark_dev'))} |")
        for label, avg in PUBLISHED.items():
            lines.append(f"| published: {label}, fully pretrained | " + " | ".join("" for _ in STS_TASKS) + f" | {avg} | |")
    if c.get("claim"):
        cl = c["claim"]
        lines += ["", f"Unsupervised SimCSE {'beats' if cl['unsup_beats_raw'] else 'does not beat'} the best raw "
                  f"read-out: {cl['unsup_avg']:.2f} against {cl['raw_best_avg']:.2f} (7-task STS average)."]
    return "\n".join(lines) + "\n"


def _token(status: str) -> str:
    """A status as one whitespace-free token (``"timeout, partial"`` -> ``timeout,partial``)."""
    return re.sub(r"\s+", "_", status.replace(", ", ","))


def last_line(report: dict) -> str:
    """The machine-readable last line: ``gpu_check device=... a=... b=... c=... <numbers>`` (space-separated
    ``key=value`` fields; a status never holds a space)."""
    parts = report.get("parts", {})
    name = str(report.get("preflight", {}).get("device_name", "?")).replace(" ", "_")
    fields = [f"device={name}", f"wall_s={report.get('wall_s')}"]
    a = parts.get("a", {})
    checks = a.get("checks", [])
    fields.append(f"a={_token(a.get('status', 'not_run'))}({sum(c['ok'] for c in checks)}/{len(checks)})")
    b = parts.get("b", {})
    fields.append(f"b={_token(b.get('status', 'not_run'))}")
    for batch, by_variant in (b.get("bench") or {}).get("variants", {}).items():
        if "ours" in by_variant:
            fields.append(f"batch{batch}_sent_s={by_variant['ours']['sent_s']:.1f}")
            fields.append(f"batch{batch}_mfu={by_variant['ours']['mfu']:.3f}")
        if "ours" in by_variant and "st" in by_variant:
            fields.append(f"batch{batch}_speedup_vs_st={by_variant['st']['s_step'] / by_variant['ours']['s_step']:.2f}")
        if "ours" in by_variant and "padded" in by_variant:
            fields.append(f"batch{batch}_speedup_vs_padded={by_variant['padded']['s_step'] / by_variant['ours']['s_step']:.2f}")
        if "ours" in by_variant and "compiled" in by_variant:
            fields.append(f"batch{batch}_compiled_vs_eager={by_variant['ours']['s_step'] / by_variant['compiled']['s_step']:.2f}")
    c = parts.get("c", {})
    fields.append(f"c={_token(c.get('status', 'not_run'))}")
    pt = c.get("stages", {}).get("pretrain")
    if pt:
        fields.append(f"pretrain_tokens={pt['tokens_seen']}")
    for label, key in (("raw, avg", "raw_avg"), ("raw, avg_first_last", "raw_first_last"),
                       ("raw, cls_before_pooler", "raw_cls"), ("unsup SimCSE", "unsup"), ("sup SimCSE", "sup")):
        if label in c.get("rows", {}):
            fields.append(f"{key}_avg={c['rows'][label]['Avg.']:.2f}")
    if c.get("claim"):
        fields.append(f"unsup_beats_raw={'yes' if c['claim']['unsup_beats_raw'] else 'no'}")
    return "gpu_check " + " ".join(fields)


# ------------------------------------------------------------------------------------------ orchestration
def _preflight(device: str) -> dict:
    info = {"versions": installed_versions(), "device": device, "python": sys.version.split()[0]}
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"--device {device}: torch {torch.__version__} sees no CUDA device "
                               "(for a CPU smoke run use --device cpu --tiny, or TINY=1)")
        info["device_name"] = torch.cuda.get_device_name(device)
        info["bf16_supported"] = torch.cuda.is_bf16_supported()
    else:
        info["device_name"] = "cpu"
    try:
        import datasets  # noqa: F401  (parts b and c train through simcse.training.train, which reads data with it)

        info["datasets_importable"] = True
    except ImportError as e:
        info["datasets_importable"] = f"no: {e}"
    return info


def _run_part(part: str, args, out: Path, seconds: float) -> tuple[str, float]:
    """Run one part in its own process group for at most ``seconds``; returns (status, wall seconds)."""
    cmd = [sys.executable, "-m", "scripts.gpu_check", "--worker", part, "--device", args.device,
           "--out", str(out), "--bundle-dir", str(args.bundle_dir), "--deadline", str(time.time() + seconds)]
    if args.tiny:
        cmd.append("--tiny")
    t0 = time.time()
    with open(out / f"part_{part}.log", "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=checkout_env())
        try:
            rc = proc.wait(timeout=seconds)
            status = "finished" if rc == 0 else f"error (exit {rc})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = "timeout"
    return status, round(time.time() - t0, 1)


def _collect(part: str, out: Path, status: str, wall: float) -> dict:
    data = _read_json(out / f"part_{part}.json") or {}
    if part == "b":
        data["bench"] = _read_json(out / "part_b_bench.json")
    if status != "finished":
        data["status"] = f"{status}, partial" if data else status
        try:
            tail = (out / f"part_{part}.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
            data["log_tail"] = tail[-15:]
        except OSError:
            pass
    data["wall_s"] = wall
    return data


def run_check(args) -> dict:
    """Preflight, then parts ``args.parts`` within the budget; writes gpu_check.json/.md after every part."""
    start = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("part_*.json"), *out.glob("part_*.log")]:  # an earlier run's parts must not be read
        stale.unlink()
    budget = args.budget_s
    report = {"command": args.command_line, "budget_s": budget, "tiny": args.tiny, "caps": args.caps, "parts": {},
              "install": _read_json(Path(args.bundle_dir) / "install.json")}
    report["preflight"] = _preflight(args.device)
    print(f"gpu check on {report['preflight']['device_name']} ({args.device}), budget {budget:.0f} s, parts "
          f"{','.join(args.parts)}", flush=True)

    def flush():
        report["wall_s"] = round(time.time() - start, 1)
        _write_json(out / "gpu_check.json", report)
        write_text_atomic(out / "gpu_check.md", summary_markdown(report))

    for part in args.parts:
        left = budget - (time.time() - start) - 3.0  # 3 s to write the reports
        seconds = min(args.caps[part], left)
        if seconds < MIN_PART_S:
            report["parts"][part] = {"status": f"skipped (budget: {max(0.0, left):.0f} s left)"}
            flush()
            continue
        status, wall = _run_part(part, args, out, seconds)
        report["parts"][part] = _collect(part, out, status, wall)
        print(f"part {part}: {report['parts'][part].get('status')} in {wall} s (cap {seconds:.0f} s)", flush=True)
        flush()
    flush()
    print(summary_markdown(report))
    print(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}")
    print(last_line(report), flush=True)
    return report


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scripts.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--prepare", action="store_true", help="build the data bundle from $SIMCSE_DATA_MIRROR and exit")
    p.add_argument("--bundle", action="store_true", help="download the bundled wheels (pip) and exit")
    p.add_argument("--install", action="store_true", help="pip install --no-deps the bundled wheels and this checkout, and exit")
    p.add_argument("--bundle-dir", type=Path, default=REPO / "gpu_bundle")
    p.add_argument("--wiki-lines", type=int, default=None,
                   help=f"--prepare: wiki sentences in the bundle (default {WIKI_LINES}, fewer when the budget has less room)")
    p.add_argument("--nli-rows", type=int, default=None,
                   help="--prepare: NLI triplets in the bundle (default: all, cut to half the room the SentEval files leave)")
    p.add_argument("--data-mib", type=float, default=DATA_BUDGET_BYTES / 2**20, help="--prepare: the bundle's size budget")
    p.add_argument("--python-version", default="3.12", help="--bundle: the target's Python (wheel tags)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny models and data: a CPU smoke run of every part")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--budget-s", type=float, default=None, help=f"total seconds (default {BUDGET_S:.0f}; tiny {TINY_BUDGET_S:.0f})")
    p.add_argument("--caps", default="", help="per-part caps in seconds, e.g. a=45,b=230,c=240")
    p.add_argument("--out", type=Path, default=REPO / "gpu_check_out")
    p.add_argument("--worker", choices=PARTS, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring); returns the exit status: 0 when every part asked for is ``ok``, 1
    when any is not (failed, cut at its cap, skipped for the budget), 2 for a bad argument, a device that is not
    there, or a data bundle part c cannot run from (argparse's usage errors exit with 2 too)."""
    p = _parser()
    args = p.parse_args(argv)
    args.bundle_dir, args.out = args.bundle_dir.resolve(), args.out.resolve()
    if args.worker:
        if args.tiny:
            torch.set_num_threads(1)  # tiny models gain nothing from more threads; other jobs keep theirs
        out, deadline = args.out.resolve(), args.deadline or time.time() + 3600
        if args.worker == "a":
            part_a(out, args.device, args.tiny)
        elif args.worker == "b":
            part_b(out, args.device, args.tiny, deadline)
        else:
            part_c(out, args.device, args.tiny, deadline, args.bundle_dir)
        return 0
    if args.prepare:
        mirror = os.environ.get("SIMCSE_DATA_MIRROR")
        if not mirror:
            p.error("--prepare reads the data mirror: set SIMCSE_DATA_MIRROR to its folder")
        if not args.data_mib > 0:
            p.error(f"--data-mib must be > 0, got {args.data_mib}")
        try:
            m = prepare_data(args.bundle_dir, Path(mirror), args.wiki_lines, args.nli_rows, int(args.data_mib * 2**20))
        except (FileNotFoundError, ValueError) as e:
            p.error(str(e))
        for cut in m["cuts"]:
            print(f"note: {cut}")
        print(f"prepared {args.bundle_dir / 'data'}: {len(m['files'])} files, {m['bytes'] / 2**20:.1f} of "
              f"{m['budget_bytes'] / 2**20:.0f} MiB: SentEval {m['parts_bytes']['senteval'] / 2**20:.1f} MiB, "
              f"{m['nli_rows']} NLI rows {m['parts_bytes']['nli'] / 2**20:.1f} MiB, {m['wiki_lines']} wiki lines "
              f"{m['parts_bytes']['wiki'] / 2**20:.1f} MiB")
        return 0
    if args.bundle:
        try:
            rows = download_wheels(args.bundle_dir, args.python_version)
        except RuntimeError as e:
            p.error(str(e))
        print((args.bundle_dir / "wheels.txt").read_text(encoding="utf-8"), end="")
        print(f"downloaded {len(rows)} wheels, {sum(r['bytes'] for r in rows) / 2**20:.2f} MiB")
        return 0
    if args.install:
        rep = install(args.bundle_dir)
        _write_json(args.bundle_dir / "install.json", rep)
        where = f" into {rep['wheels_target']}" if rep.get("wheels_target") and not rep.get("wheels_error") else ""
        print(f"installed with pip --no-deps{where}: {', '.join(rep['wheels']) or 'no bundled wheels'}; this checkout "
              f"{'editable' if rep['editable'] else 'NOT installed (used from PYTHONPATH): ' + rep.get('editable_error', '')[-200:]}")
        for line in rep["below_floors"]:
            print(f"below the floor in {rep['floors_from']}, installed over it knowingly: {line}")
        if rep.get("wheels_error"):  # part a needs none of them: go on, the report says what is missing
            print(f"error installing the bundled wheels (parts b and c train through datasets): {rep['wheels_error']}",
                  file=sys.stderr)
        return 0
    args.parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    if not args.parts or any(x not in PARTS for x in args.parts):
        p.error(f"--parts: expected a comma-separated subset of {','.join(PARTS)}")
    if args.tiny and args.device.startswith("cuda") and not torch.cuda.is_available():
        args.device = "cpu"
    args.budget_s = args.budget_s or (TINY_BUDGET_S if args.tiny else BUDGET_S)
    if args.budget_s <= 0:
        p.error(f"--budget-s must be > 0, got {args.budget_s}")
    try:
        args.caps = parse_caps(args.caps, TINY_CAPS if args.tiny else CAPS)
    except ValueError as e:
        p.error(str(e))
    args.command_line = " ".join(["python -m scripts.gpu_check", *(argv if argv is not None else sys.argv[1:])])
    if "c" in args.parts:  # said now, not after parts a and b ran
        problems = bundle_problems(args.bundle_dir / "data")
        if problems:
            print(f"error: part c: the data bundle {str(args.bundle_dir / 'data')!r} lacks {'; '.join(problems)}: run "
                  "`bash scripts/gpu_check.sh --prepare` with the data mirror first, or leave part c out (--parts a,b)",
                  file=sys.stderr)
            print("gpu_check device=none status=error reason=no_data_bundle")
            return 2
    try:
        report = run_check(args)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        reason = "no_cuda_device" if "no CUDA device" in str(e) else "setup"
        print(f"gpu_check device=none status=error reason={reason}")
        return 2
    return 0 if all(report["parts"][x].get("status") == "ok" for x in args.parts) else 1


if __name__ == "__main__":
    sys.exit(main())
