"""The GPU check's three parts: ``a`` correctness on the device, ``b`` speed against sentence-transformers,
``c`` the paper's central claim on an encoder MLM-pretrained on the spot. Each runs in a child process of
:mod:`scripts.gpu_check.check` and writes its JSON after every step, so a part cut at its cap still reports.
"""
from __future__ import annotations

import csv
import gzip
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from scripts.benchmarks.common import checkout_env
from scripts.gpu_check.bundle import BUNDLE_NLI, BUNDLE_SENTEVAL, BUNDLE_WIKI, _read_json, _write_json, bundle_problems
from simcse.models.modeling import SimCSEModel
from simcse.models.pooling import POOLERS, PROMPT_POOLERS
from simcse.models.testing import WORDS, tiny_encoder
from simcse.research.pretrain import PretrainArguments, pretrain, time_budget_callback
from simcse.research.reproduce import STS_TASKS, sts_scores
from simcse.training.gradcache import grad_cache_step, split_chunks
from simcse.training.losses import info_nce
from simcse.training import build_trainer, training_arguments

# 7-task STS averages (Spearman x 100) of SimCSE on Google's fully pretrained small BERTs, as published in
# ConGen (Limkonchotiwat et al., Findings of EMNLP 2022), its repository's result tables
PUBLISHED = {"unsup BERT-Tiny (2 layers, 128)": 64.47, "unsup BERT-Mini (4 layers, 256)": 65.94,
             "unsup BERT-Small (4 layers, 512)": 69.13, "sup BERT-Mini (4 layers, 256)": 76.52}

RAW_POOLERS = ("avg", "avg_first_last", "cls_before_pooler")

# part c settings: GPU (BERT-Mini shape, large MLM batch) and tiny (CPU smoke run)
C_SETTINGS = {
    "gpu": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, vocab_size=16384, tokenizer_lines=200_000,
                wiki_lines=0, mlm_batch=1024, mlm_lr=1e-3, probe_steps=40, max_seq_length=32,
                unsup_batch=64, unsup_lr=5e-5, unsup_steps=1000, unsup_s=50.0,
                sup_batch=128, sup_lr=5e-5, sup_epochs=3, sup_rows=0, sup_s=35.0, eval_reserve_s=45.0,
                encode_batch=512, sts_lines=0, pretrain_max_s=0.0, pretrain_setup_s=15.0, mlm_workers=8),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, vocab_size=1000, tokenizer_lines=5000,
                 wiki_lines=5000, mlm_batch=32, mlm_lr=1e-3, probe_steps=6, max_seq_length=32,
                 unsup_batch=16, unsup_lr=1e-4, unsup_steps=6, unsup_s=8.0,
                 sup_batch=16, sup_lr=1e-4, sup_epochs=1, sup_rows=64, sup_s=8.0, eval_reserve_s=12.0,
                 encode_batch=128, sts_lines=40, pretrain_max_s=6.0, pretrain_setup_s=2.0, mlm_workers=0),
}

# ------------------------------------------------------------------------------------------ shared model bits
def _random_encoder(folder: Path, layers: int, hidden: int, heads: int, seed: int = 0) -> Path:
    """A random BERT (:func:`simcse.models.testing.tiny_encoder`: vocabulary :data:`WORDS`, 64 positions, FFN
    ``4 * hidden``) with weights drawn with std 0.2 (BERT: 0.02), so that sentences get clearly different
    embeddings and the contrastive loss and its gradients are far from the degenerate all-equal case."""
    return tiny_encoder(folder, layers=layers, hidden=hidden, heads=heads, intermediate=4 * hidden, init_std=0.2,
                        seed=seed)

def _sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 3 to 28 words from :data:`WORDS` (lengths vary, so a padded batch has padding)."""
    import random

    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 28))) + " ." for _ in range(n)]

def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """Relative error ``|a - b| / |b|`` (Frobenius norms, float64)."""
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))

def _worst_grad(got: dict, want: dict, noise: float = 1e-4) -> float:
    """The largest :func:`_rel` over the gradient tensors of ``want``, leaving out the attention key biases:
    softmax ignores a shift shared by every key, so their true gradient is 0 and both sides hold rounding
    noise (checked instead to be below ``noise`` times the largest gradient norm; ``inf`` when not)."""
    scale = max(float(g.norm()) for g in want.values())
    worst = 0.0
    for k, g in want.items():
        if k.endswith("attention.self.key.bias"):
            if max(float(g.norm()), float(got[k].norm())) > noise * scale:
                return float("inf")
        elif float(g.norm()) > 0:
            worst = max(worst, _rel(got[k], g))
    return worst

# ------------------------------------------------------------------------------------------ part a
def part_a(out: Path, device: str, tiny: bool) -> dict:
    """Correctness checks on ``device``; writes ``<out>/part_a.json`` after every check and returns its content."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 comparisons in true fp32
        torch.backends.cudnn.allow_tf32 = False
    layers, hidden, heads, n = (2, 64, 4, 16) if tiny else (4, 256, 4, 64)
    folder = _random_encoder(out / "a_model", layers, hidden, heads)
    result = {"status": "running", "device": device, "shape": f"{layers} layers, hidden {hidden}", "checks": []}
    path = out / "part_a.json"

    def record(name: str, value: float, tol: float, also: bool = True):
        """One check: passes when ``value <= tol`` (finite) and ``also`` holds."""
        ok = bool(also and math.isfinite(value) and value <= tol)
        result["checks"].append({"name": name, "value": value, "tol": tol, "ok": ok})
        _write_json(path, result)

    texts = _sentences(n)
    for pooler in [p for p in POOLERS if p not in PROMPT_POOLERS]:  # a prompt pooler needs a template
        padded = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler).to(dev).eval()
        free = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler).to(dev).eval()
        free.load_state_dict(padded.state_dict())
        on = free.set_unpadded(True)
        batch = {k: v.to(dev) for k, v in padded.tokenizer(texts, return_tensors="pt", padding=True).items()}
        for precision, (tol_out, tol_grad) in (("fp32", (1e-4, 1e-3)), ("bf16", (5e-2, 1e-1))):
            outs, grads = [], []
            for model in (padded, free):
                model.zero_grad(set_to_none=True)
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                    z = model(**batch)
                info_nce(z[: n // 2], z[n // 2:], temp=0.05).backward()
                outs.append(z.detach().float())
                grads.append({k: p.grad.detach().float() for k, p in model.named_parameters() if p.grad is not None})
            record(f"padding-free = padded, {pooler}, {precision}, embeddings", _rel(outs[1], outs[0]), tol_out, also=on)
            same_keys = on and grads[0].keys() == grads[1].keys()
            if precision == "fp32":
                exact = grads[0]
            if precision == "bf16" and "max" in pooler.split("+"):
                # max sends each dimension's gradient to one token; bf16 rounding flips near-ties between the two
                # paths, so the paths are held to the same distance from the fp32 gradient instead of each other
                got, want = _worst_grad(grads[1], exact, noise=1.0), _worst_grad(grads[0], exact, noise=1.0)
                record(f"padding-free = padded, {pooler}, bf16, gradients' error from fp32 (worst tensor; tol: "
                       f"1.5x padded's {want:.3g})", got, max(1.5 * want, tol_grad / 10), also=same_keys)
                continue
            worst = _worst_grad(grads[1], grads[0], noise=tol_grad / 10)
            record(f"padding-free = padded, {pooler}, {precision}, gradients (worst tensor)", worst, tol_grad,
                   also=same_keys)

    # GradCache (4 chunks) against the plain step, fp32, dropout off
    model = SimCSEModel.from_pretrained(str(folder), pooler_type="cls").to(dev).eval()
    model.set_unpadded(True)
    batch = {k: v.to(dev) for k, v in model.tokenizer(texts, return_tensors="pt", padding=True).items()}

    def loss_fn(z):
        return info_nce(z[: n // 2], z[n // 2:], temp=0.05)

    loss_fn(model(**batch)).backward()
    plain = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    grad_cache_step(split_chunks(batch, n // 4), lambda c: model(**c), loss_fn, lambda s: s.backward())
    cached = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    record("GradCache step = plain step, gradients (worst tensor)", _worst_grad(cached, plain), 1e-4,
           also=cached.keys() == plain.keys())

    # one bf16 step and one fp16 step with GradScaler, dropout on: finite loss, gradients and weights
    for precision in ("bf16", "fp16"):
        model = SimCSEModel.from_pretrained(str(folder), pooler_type="cls", mlp_only_train=True).to(dev).train()
        model.set_unpadded(True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16")
        with torch.autocast(dev.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16):
            z = model(**{k: torch.cat([v, v]) for k, v in batch.items()})
        loss = info_nce(z[:n], z[n:], temp=0.05)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        finite = bool(torch.isfinite(loss)) and all(bool(torch.isfinite(p).all()) for p in model.parameters())
        record(f"{precision} training step finite (loss {loss.item():.4f})", 0.0 if finite else float("inf"), 0.0, also=finite)

    # InfoNCE on the device against CPU (loss and input gradients, with hard negatives)
    g = torch.Generator().manual_seed(0)
    zs = [torch.randn(n, hidden, generator=g, dtype=torch.float32) for _ in range(3)]
    got = []
    for where in ("cpu", dev):
        leaves = [z.clone().to(where).requires_grad_(True) for z in zs]
        loss = info_nce(*leaves, temp=0.05, hard_negative_alpha=1.0)
        loss.backward()
        got.append((loss.detach().cpu(), [z.grad.cpu() for z in leaves]))
    record("InfoNCE on device = CPU, loss", abs(float(got[1][0] - got[0][0])), 1e-5)
    record("InfoNCE on device = CPU, gradients (worst input)", max(_rel(a, b) for a, b in zip(got[1][1], got[0][1])), 1e-5)
    result["status"] = "ok" if all(c["ok"] for c in result["checks"]) else "fail"
    _write_json(path, result)
    return result

# ------------------------------------------------------------------------------------------ part b
def part_b(out: Path, device: str, tiny: bool, deadline: float) -> dict:
    """Run ``python -m scripts.benchmarks.gpu`` (this checkout's, :func:`scripts.benchmarks.common.checkout_env`); its
    rows land in ``<out>/part_b_bench.json`` as they finish."""
    bench = out / "part_b_bench.json"
    if tiny:
        argv = ["--device", device, "--shape", "tiny", "--batch-sizes", "4", "--warmup", "1", "--steps", "1", "--threads", "1"]
    else:
        argv = ["--device", device, "--shape", "base", "--batch-sizes", "64,512", "--warmup", "3", "--steps", "10",
                "--threads", "4", "--variants", "ours,compiled,padded,st"]
    cmd = [sys.executable, "-m", "scripts.benchmarks.gpu", *argv, "--json", str(bench)]
    result = {"status": "running", "command": " ".join(["python -m scripts.benchmarks.gpu", *argv]), "bench_json": str(bench)}
    _write_json(out / "part_b.json", result)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, deadline - time.time()), env=checkout_env())
    lines = proc.stdout.strip().splitlines()
    result.update(status="ok" if proc.returncode == 0 else f"error (exit {proc.returncode})",
                  stdout_tail=lines[-12:], stderr_tail=proc.stderr.strip().splitlines()[-8:] if proc.returncode else [],
                  last_line=next((x for x in reversed(lines) if x.startswith("gpu_train")), None))
    _write_json(out / "part_b.json", result)
    return result

# ------------------------------------------------------------------------------------------ part c
def _cut_senteval(src: Path, dst: Path, lines: int) -> Path:
    """Copy SentEval's STS/SICK layout keeping the first ``lines`` lines of every data file (aligned across
    a subset's input and gold files; headers count as a line) -- the tiny run's small test sets."""
    for path in src.rglob("*"):
        if not path.is_file():
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb") as f:
            head = [f.readline() for _ in range(lines + 1)]
        target.write_bytes(b"".join(head))
    return dst

def _train(options: dict, seconds: float):
    """:func:`simcse.training.build_trainer` on ``options`` (the training options by name) + train for at most
    ``seconds`` -> (the unwrapped model in eval mode, info)."""
    from transformers import set_seed

    model_args, data_args, training_args = training_arguments(None, **options)
    set_seed(training_args.seed)
    trainer = build_trainer(model_args, data_args, training_args)
    trainer.add_callback(time_budget_callback(seconds / 60.0))
    t0 = time.time()
    res = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    info = {"steps": res.global_step, "s": round(time.time() - t0, 1), "examples": len(trainer.train_dataset),
            "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None}
    return trainer.accelerator.unwrap_model(trainer.model).eval(), info

def _step_clock(record: list):
    """A ``TrainerCallback`` appending ``time.perf_counter()`` at every step end (CUDA synchronised)."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            record.append(time.perf_counter())

    return StepClock()

def part_c(out: Path, device: str, tiny: bool, deadline: float, bundle: Path) -> dict:
    """Pretrain, score the raw read-outs, train unsupervised and supervised SimCSE, score them; rows are
    written to ``<out>/part_c.json`` as they finish."""
    cfg = C_SETTINGS["tiny" if tiny else "gpu"]
    data = bundle / "data"
    problems = bundle_problems(data)
    if problems:
        raise FileNotFoundError(f"data bundle {str(data)!r} lacks {'; '.join(problems)}: run scripts/gpu_check.sh --prepare first")
    work = out / "c"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    path = out / "part_c.json"
    result = {"status": "running", "device": device, "settings": cfg, "stages": {}, "rows": {}}
    save = lambda: _write_json(path, result)  # noqa: E731

    t0 = time.time()
    wiki = work / "wiki.txt"
    n_lines = 0
    with gzip.open(data / BUNDLE_WIKI, "rt", encoding="utf-8") as src, open(wiki, "w", encoding="utf-8") as dst:
        for line in src:
            dst.write(line)
            n_lines += 1
            if cfg["wiki_lines"] and n_lines >= cfg["wiki_lines"]:
                break
    nli = data / BUNDLE_NLI
    if cfg["sup_rows"]:
        nli = work / "nli.csv"
        with open(data / BUNDLE_NLI, encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))[: cfg["sup_rows"] + 1]
        with open(nli, "w", encoding="utf-8", newline="") as f:
            csv.writer(f).writerows(rows)
    senteval = data / BUNDLE_SENTEVAL
    if cfg["sts_lines"]:
        senteval = _cut_senteval(senteval, work / "senteval", cfg["sts_lines"])
    result["stages"]["data"] = {"wiki_lines": n_lines, "s": round(time.time() - t0, 1)}
    save()

    bf16 = device.startswith("cuda")
    common_pt = dict(train_file=str(wiki), hidden_size=cfg["hidden_size"], num_hidden_layers=cfg["num_hidden_layers"],
                     num_attention_heads=cfg["num_attention_heads"], vocab_size=cfg["vocab_size"],
                     tokenizer_lines=cfg["tokenizer_lines"], max_seq_length=cfg["max_seq_length"],
                     batch_size=cfg["mlm_batch"], learning_rate=cfg["mlm_lr"], bf16=bf16, seed=42,
                     dataloader_num_workers=cfg["mlm_workers"])
    # a short probe run trains the WordPiece vocabulary and measures steps/s, so that the real run's linear
    # schedule (warm-up, decay to 0) fits the time left
    t0 = time.time()
    clock: list[float] = []
    probe = pretrain(PretrainArguments(output_dir=str(work / "probe"), max_steps=cfg["probe_steps"],
                                       max_lines=max(cfg["tokenizer_lines"], cfg["mlm_batch"] * cfg["probe_steps"]),
                                       save_steps=cfg["probe_steps"], logging_steps=cfg["probe_steps"], **common_pt),
                     callbacks=[_step_clock(clock)])
    probe_res = _read_json(probe / "train_result.json") or {}
    skip = len(clock) // 3  # steady state: leave out the first steps (CUDA start-up, allocator warm-up)
    steps_per_s = (len(clock) - 1 - skip) / max(1e-3, clock[-1] - clock[skip])
    result["stages"]["tokenizer_and_probe"] = {"s": round(time.time() - t0, 1), "probe_steps_per_s": round(steps_per_s, 2),
                                               "vocab_size": probe_res.get("vocab_size")}
    save()

    reserve = cfg["unsup_s"] + cfg["sup_s"] + cfg["eval_reserve_s"]
    pretrain_s = max(2.0, deadline - time.time() - reserve - cfg["pretrain_setup_s"])
    if cfg["pretrain_max_s"]:
        pretrain_s = min(pretrain_s, cfg["pretrain_max_s"])
    max_steps = max(cfg["probe_steps"], int(0.95 * steps_per_s * pretrain_s))
    t0 = time.time()
    raw = pretrain(PretrainArguments(output_dir=str(work / "raw"), tokenizer_name_or_path=str(probe),
                                     max_steps=max_steps, save_steps=max_steps, max_minutes=pretrain_s / 60.0,
                                     logging_steps=max(10, max_steps // 20), **common_pt))
    pre = _read_json(raw / "train_result.json") or {}
    curve = list(csv.reader(open(raw / "loss_curve.csv", encoding="utf-8")))[1:]
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(raw)
    sample = [line for _, line in zip(range(2000), open(wiki, encoding="utf-8"))]
    mean_len = sum(len(x) for x in tok(sample, truncation=True, max_length=cfg["max_seq_length"])["input_ids"]) / len(sample)
    steps = int(pre.get("global_step", 0))
    result["stages"]["pretrain"] = {
        "s": round(time.time() - t0, 1), "planned_steps": max_steps, "steps": steps, "batch": cfg["mlm_batch"],
        "tokens_seen": int(steps * cfg["mlm_batch"] * mean_len), "mean_tokens_per_line": round(mean_len, 1),
        "mlm_loss_first": float(curve[0][1]) if curve else None, "mlm_loss_last": float(curve[-1][1]) if curve else None,
        "max_position_embeddings": json.loads((raw / "config.json").read_text())["max_position_embeddings"],
        "n_parameters": pre.get("n_parameters")}
    save()

    def score(label: str, model) -> None:
        t = time.time()
        model = model.to(device).eval()
        scores = sts_scores(lambda s: model.encode(s, batch_size=cfg["encode_batch"], max_length=cfg["max_seq_length"]),
                            STS_TASKS, str(senteval))
        result["rows"][label] = {**scores, "s": round(time.time() - t, 1)}
        save()

    for pooler in RAW_POOLERS:
        score(f"raw, {pooler}", SimCSEModel.from_pretrained(str(raw), pooler_type=pooler))

    common = dict(model_name_or_path=str(raw), max_seq_length=cfg["max_seq_length"], temp=0.05, seed=42,
                  report_to="none", save_strategy="no", eval_strategy="no", eval_before_training=False,
                  test_after_training=False, logging_first_step=True, disable_tqdm=True, senteval_dir=str(senteval),
                  dataloader_num_workers=0, bf16=bool(bf16), use_cpu=not bf16, overwrite_output_dir=True)
    unsup_file = work / "unsup.txt"  # only the sentences the run reads: the whole file would be read into Arrow
    with open(wiki, encoding="utf-8") as src, open(unsup_file, "w", encoding="utf-8") as dst:
        for _, line in zip(range(cfg["unsup_steps"] * cfg["unsup_batch"]), src):
            dst.write(line)
    unsup_options = dict(common, train_file=str(unsup_file), output_dir=str(work / "unsup"), pooler_type="cls",
                      mlp_only_train=True, per_device_train_batch_size=cfg["unsup_batch"], learning_rate=cfg["unsup_lr"],
                      max_steps=cfg["unsup_steps"], logging_steps=max(1, min(50, cfg["unsup_steps"] // 10)))
    model, info = _train(unsup_options, cfg["unsup_s"])
    result["stages"]["unsup"] = {**info, "batch": cfg["unsup_batch"], "lr": cfg["unsup_lr"]}
    score("unsup SimCSE", model)
    del model
    sup_options = dict(common, train_file=str(nli), output_dir=str(work / "sup"), pooler_type="cls",
                    mlp_only_train=False, per_device_train_batch_size=cfg["sup_batch"], learning_rate=cfg["sup_lr"],
                    num_train_epochs=cfg["sup_epochs"], logging_steps=1 if tiny else 25)
    model, info = _train(sup_options, cfg["sup_s"])
    result["stages"]["sup"] = {**info, "batch": cfg["sup_batch"], "lr": cfg["sup_lr"]}
    score("sup SimCSE", model)
    raw_best = max(result["rows"][f"raw, {p}"]["Avg."] for p in RAW_POOLERS)
    result["claim"] = {"raw_best_avg": raw_best, "unsup_avg": result["rows"]["unsup SimCSE"]["Avg."],
                       "unsup_beats_raw": result["rows"]["unsup SimCSE"]["Avg."] > raw_best}
    result["status"] = "ok"
    save()
    return result
