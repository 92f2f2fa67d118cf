"""Reliability (issue 8): resume after SIGKILL, atomic checkpoints and model folders, safe loading, numerics.

The tests train the tiny random BERT of ``conftest.make_tiny_model`` (pooler ``avg``, dropout 0.1) on CPU.
Runs compared for equality are single-threaded (``OMP_NUM_THREADS=1``) with a fixed ``--seed``; on CPU that
is enough for bitwise-equal results (docs/reliability.md).
"""
from __future__ import annotations

import glob
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import WORDS, make_tiny_model, random_sentences

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------ helpers
def write_sts_dev(root: Path, seed: int = 0) -> Path:
    """A SentEval ``downstream`` folder with only STS-B and SICK (all three splits), 16 pairs each."""
    rng = random.Random(seed)

    def sent():
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))

    (root / "STS" / "STSBenchmark").mkdir(parents=True)
    (root / "SICK").mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (root / "STS" / "STSBenchmark" / f"sts-{split}.csv").write_text(
            "".join(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{rng.uniform(0, 5):.2f}\t{sent()}\t{sent()}\n"
                    for i in range(16)))
    for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        (root / "SICK" / name).write_text(
            "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
            + "".join(f"{i}\t{sent()}\t{sent()}\t{rng.uniform(1, 5):.2f}\tNEUTRAL\n" for i in range(16)))
    return root


def train_argv(model_dir, train_file, out, senteval_dir, *extra) -> list[str]:
    return [
        "--model_name_or_path", str(model_dir), "--pooler_type", "avg", "--train_file", str(train_file),
        "--output_dir", str(out), "--senteval_dir", str(senteval_dir),
        "--per_device_train_batch_size", "8", "--learning_rate", "1e-4", "--seed", "0",
        "--logging_steps", "1", "--report_to", "none", "--use_cpu", "true", "--dataloader_pin_memory", "false",
        "--eval_before_training", "false", "--test_after_training", "false", "--disable_tqdm", "true", *extra,
    ]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("reliability")
    model = make_tiny_model(root / "model", "bert", dropout=0.1)
    train = root / "train.txt"
    train.write_text("\n".join(random_sentences(64)) + "\n")
    return {"model": model, "train": train, "senteval": write_sts_dev(root / "senteval")}


def build_trainer(setup, out, *extra):
    """The SimCSETrainer that ``scripts/train.py`` would build (in this process)."""
    from transformers import set_seed

    from simcse.train import build, parse_args

    args = parse_args(train_argv(setup["model"], setup["train"], out, setup["senteval"], *extra))
    set_seed(args[2].seed)
    return build(*args)


def weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / "model.safetensors"))


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs by {(a[k] - b[k]).abs().max().item()}"


def hidden_entries(folder) -> list[str]:
    return sorted(p.name for p in Path(folder).iterdir() if p.name.startswith("."))


# ------------------------------------------------------------------------------- 1. resume after kill
def test_resume_after_sigkill_matches_uninterrupted_run(setup, tmp_path):
    """Kill ``scripts/train.py`` with SIGKILL once checkpoint-5 exists, resume, compare with a run never killed.

    Weights (bitwise), the per-step losses and dev metrics of the log, the best-metric record and the final
    STS-B/SICK-R dev numbers must be identical.
    """
    extra = ("--max_steps", "30", "--save_strategy", "steps", "--save_steps", "5", "--eval_strategy", "steps",
             "--eval_steps", "5", "--metric_for_best_model", "stsb_spearman")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", PYTHONHASHSEED="0")

    def launch(out, *more):
        cmd = [sys.executable, str(REPO / "scripts" / "train.py"), *train_argv(setup["model"], setup["train"], out,
                                                                             setup["senteval"], *extra, *more)]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    full_dir, killed_dir = tmp_path / "full", tmp_path / "killed"
    full = launch(full_dir)
    victim = launch(killed_dir)
    deadline = time.monotonic() + 300
    while not (killed_dir / "checkpoint-5").is_dir():
        assert victim.poll() is None, f"run ended before checkpoint-5: {victim.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "no checkpoint-5 after 300 s"
        time.sleep(0.005)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    victim.stderr.close()
    assert victim.returncode == -signal.SIGKILL
    assert not (killed_dir / "model.safetensors").exists(), "the killed run finished before the kill"
    # every folder that carries a checkpoint name is complete (atomic save); a save cut short is hidden
    checkpoints = sorted(glob.glob(str(killed_dir / "checkpoint-*")), key=lambda p: int(p.rsplit("-", 1)[1]))
    for ck in checkpoints:
        assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"} <= set(
            os.listdir(ck)), ck
    last = checkpoints[-1]
    assert int(last.rsplit("-", 1)[1]) < 30

    resumed = launch(killed_dir, "--resume_from_checkpoint", last)
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err[-3000:]
    _, err = full.communicate(timeout=600)
    assert full.returncode == 0, err[-3000:]

    assert_same_weights(weights(full_dir), weights(killed_dir))
    res_full = json.loads((full_dir / "simcse_results.json").read_text())
    res_resumed = json.loads((killed_dir / "simcse_results.json").read_text())
    assert res_full["after"] == res_resumed["after"]  # the STS-B / SICK-R dev numbers of the final model
    state_full = json.loads((full_dir / "checkpoint-30" / "trainer_state.json").read_text())
    state_resumed = json.loads((killed_dir / "checkpoint-30" / "trainer_state.json").read_text())
    assert state_full["log_history"] == state_resumed["log_history"]  # every step's loss and every dev eval
    assert state_full["best_metric"] == state_resumed["best_metric"]
    assert Path(state_full["best_model_checkpoint"]).name == Path(state_resumed["best_model_checkpoint"]).name
    assert Path(state_resumed["best_model_checkpoint"]).parent == killed_dir
    assert hidden_entries(killed_dir) == []


# ------------------------------------------------------------------- 2. checkpoints cannot be half-written
def _fail_on_nth_call(real, name: str, n: int, partial: bytes = b"\x00partial"):
    """Wrap a save function: its n-th call for a file called ``name`` writes a few bytes and raises OSError."""
    calls = {"n": 0}

    def wrapper(obj, target, *a, **kw):
        calls["n"] += os.path.basename(str(target)) == name
        if calls["n"] == n and os.path.basename(str(target)) == name:
            Path(target).write_bytes(partial)
            raise OSError(28, "No space left on device (simulated)")
        return real(obj, target, *a, **kw)

    return wrapper


@pytest.fixture(scope="module")
def reference_run(setup, tmp_path_factory):
    """Final weights of an uninterrupted in-process run of 6 steps with checkpoints every 2 steps."""
    out = tmp_path_factory.mktemp("reference")
    trainer = build_trainer(setup, out, "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2",
                            "--eval_strategy", "no")
    trainer.train()
    trainer.save_model(str(out))
    return weights(out)


@pytest.mark.parametrize("failing", ["model weights", "optimizer state"])
def test_exception_mid_checkpoint_keeps_previous_checkpoint(setup, tmp_path, monkeypatch, reference_run, failing):
    import transformers.modeling_utils as mu

    out = tmp_path / "out"
    extra = ("--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2", "--eval_strategy", "no")
    # the 2nd save (checkpoint-4) of the file fails half-way: model weights are written first, then HF's
    # torch.save of optimizer.pt, scheduler.pt, rng_state.pth
    if failing == "model weights":
        monkeypatch.setattr(mu, "safe_save_file", _fail_on_nth_call(mu.safe_save_file, "model.safetensors", 2))
    else:
        monkeypatch.setattr(torch, "save", _fail_on_nth_call(torch.save, "optimizer.pt", 2))
    trainer = build_trainer(setup, out, *extra)
    with pytest.raises(OSError, match=r"could not write checkpoint-4 to .*: No space left on device.* \(needs about"):
        trainer.train()
    monkeypatch.undo()

    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2"]  # no checkpoint-4, no staging folder
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    from simcse.modeling import SimCSEModel

    SimCSEModel.from_pretrained(str(out / "checkpoint-2")).encode(["a man plays the guitar ."])  # it loads

    resumed = build_trainer(setup, out, *extra)
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    resumed.save_model(str(out))
    assert_same_weights(reference_run, weights(out))
    assert hidden_entries(out) == []


def test_stale_staging_folder_is_ignored_and_removed(setup, tmp_path):
    out = tmp_path / "out"
    stale = out / ".checkpoint-2.partial" / "checkpoint-2"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")  # what a SIGKILL during a save leaves
    from transformers.trainer_utils import get_last_checkpoint

    assert get_last_checkpoint(str(out)) is None  # HF's discovery does not see it
    trainer = build_trainer(setup, out, "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "2",
                            "--eval_strategy", "no")
    trainer.train()
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2"]


def test_resume_from_a_folder_that_is_not_a_checkpoint(setup, tmp_path):
    out = tmp_path / "out"
    trainer = build_trainer(setup, out, "--max_steps", "2", "--save_strategy", "no", "--eval_strategy", "no")
    with pytest.raises(ValueError, match="trainer_state.json is missing"):
        trainer.train(resume_from_checkpoint=str(setup["model"]))


def _fake_save_file_that_dies(real):
    def save_file(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\x00" * 10)
        raise OSError(28, "No space left on device (simulated)")

    return save_file


@pytest.mark.parametrize("existing", [False, True], ids=["fresh folder", "existing folder"])
def test_model_save_is_atomic(setup, tmp_path, monkeypatch, existing):
    """An exception while SimCSEModel.save_pretrained writes leaves no folder/file with the final name
    half-written: a fresh target does not appear, an existing one still loads with its old weights."""
    import transformers.modeling_utils as mu

    from simcse.modeling import SimCSEModel

    model = SimCSEModel.from_pretrained(str(setup["model"]), pooler_type="avg")
    target = tmp_path / "saved"
    sentences = ["a man plays the guitar .", "the dog runs in the park ."]
    before = None
    if existing:
        model.save_pretrained(target)
        before = SimCSEModel.from_pretrained(str(target)).encode(sentences)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)  # the save that fails would have changed every weight
    monkeypatch.setattr(mu, "safe_save_file", _fake_save_file_that_dies(mu.safe_save_file))
    with pytest.raises(OSError, match="simulated"):
        model.save_pretrained(target)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == (["saved"] if existing else [])  # no temp folder left
    if existing:
        import numpy as np

        np.testing.assert_array_equal(SimCSEModel.from_pretrained(str(target)).encode(sentences), before)


def test_best_checkpoint_is_kept_and_loaded_at_end(setup, tmp_path, monkeypatch):
    """With save_total_limit=1 the best checkpoint survives rotation, is recorded under its final path (not
    the staging folder) in every trainer_state.json, and load_best_model_at_end restores it."""
    import simcse.evaluation

    scripted = iter([0.2, 0.9, 0.5, 0.1])  # dev STS-B at steps 1..4: best at step 2, later ones worse

    def fake_dev(encode, data_dir=None):
        v = next(scripted, 0.0)
        return {"stsb_spearman": v, "sickr_spearman": v, "avg_sts": v}

    monkeypatch.setattr(simcse.evaluation, "evaluate_sts_dev", fake_dev)
    out = tmp_path / "out"
    trainer = build_trainer(setup, out, "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "1",
                            "--eval_strategy", "steps", "--eval_steps", "1", "--save_total_limit", "1",
                            "--load_best_model_at_end", "true", "--metric_for_best_model", "stsb_spearman")
    from transformers import TrainerCallback

    listings, states = {}, {}

    class Watch(TrainerCallback):  # runs right after each checkpoint save (and its rotation)
        def on_save(self, args, state, control, **kw):
            listings[state.global_step] = sorted(p.name for p in out.iterdir())
            states[state.global_step] = json.loads(
                (out / f"checkpoint-{state.global_step}" / "trainer_state.json").read_text())

    trainer.add_callback(Watch())
    trainer.train()
    assert listings == {1: ["checkpoint-1"], 2: ["checkpoint-2"], 3: ["checkpoint-2", "checkpoint-3"],
                        4: ["checkpoint-2", "checkpoint-4"]}
    for step in (2, 3, 4):  # recorded under the final name, never the staging folder
        assert states[step]["best_model_checkpoint"] == str(out / "checkpoint-2")
        assert states[step]["best_metric"] == 0.9
    # at the end HF keeps only the best checkpoint when save_total_limit == 1, and loaded it into the model
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2"]
    assert trainer.state.best_model_checkpoint == str(out / "checkpoint-2")
    trainer.save_model(str(out))
    assert_same_weights(weights(out / "checkpoint-2"), weights(out))


# ------------------------------------------------------------------------------------ 3. safe loading
class _Evil:
    """Unpickling this runs ``os.mkdir(marker)``: a stand-in for arbitrary code in a pickle."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _copy_tokenizer(src: Path, dst: Path) -> None:
    import shutil

    dst.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / f, dst / f)


def test_pickle_weights_load_only_as_plain_tensors(setup, tmp_path):
    from simcse.modeling import SimCSEModel

    state = weights(setup["model"])
    plain = tmp_path / "plain_bin"
    _copy_tokenizer(setup["model"], plain)
    torch.save(state, plain / "pytorch_model.bin")  # a legacy but harmless checkpoint: loads
    a = SimCSEModel.from_pretrained(str(plain), pooler_type="avg").encode(["a dog runs ."])
    b = SimCSEModel.from_pretrained(str(setup["model"]), pooler_type="avg").encode(["a dog runs ."])
    assert (a == b).all()

    evil = tmp_path / "evil_bin"
    _copy_tokenizer(setup["model"], evil)
    marker = tmp_path / "PWNED"
    torch.save({**state, "x": _Evil(marker)}, evil / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"refusing to load the pickle-based weights.*posix\.mkdir.*safetensors"):
        SimCSEModel.from_pretrained(str(evil), pooler_type="avg")
    assert not marker.exists()
    with pytest.raises(ValueError, match="weights_only=False is refused"):
        SimCSEModel.from_pretrained(str(plain), pooler_type="avg", weights_only=False)


def test_pickled_optimizer_state_is_loaded_weights_only(setup, tmp_path):
    """HF loads optimizer.pt / scheduler.pt / rng_state.pth with torch.load(weights_only=True)."""
    import pickle

    out = tmp_path / "out"
    build_trainer(setup, out, "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "2",
                  "--eval_strategy", "no").train()
    ck = out / "checkpoint-2"
    marker = tmp_path / "PWNED"
    opt = torch.load(ck / "optimizer.pt", weights_only=True)
    opt["evil"] = _Evil(marker)
    torch.save(opt, ck / "optimizer.pt")
    trainer = build_trainer(setup, out, "--max_steps", "4", "--save_strategy", "no", "--eval_strategy", "no")
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        trainer.train(resume_from_checkpoint=str(ck))
    assert not marker.exists()


def test_custom_code_runs_only_with_trust_remote_code(setup, tmp_path):
    import inspect
    import shutil

    from simcse.arguments import ModelArguments
    from simcse.modeling import SimCSEModel
    from simcse.tool import SimCSE

    assert inspect.signature(SimCSEModel.from_pretrained).parameters["trust_remote_code"].default is False
    assert ModelArguments.__dataclass_fields__["trust_remote_code"].default is False
    folder = tmp_path / "custom"
    _copy_tokenizer(setup["model"], folder)
    shutil.copy(setup["model"] / "model.safetensors", folder / "model.safetensors")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(model_type="evilbert", auto_map={"AutoConfig": "configuration_evil.EvilConfig",
                                                "AutoModel": "modeling_evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(cfg))
    marker = tmp_path / "PWNED"
    code = (f"import os\nos.mkdir({str(marker)!r})\nfrom transformers import BertConfig, BertModel\n"
            "class EvilConfig(BertConfig):\n    model_type = 'evilbert'\n"
            "class EvilModel(BertModel):\n    config_class = EvilConfig\n")
    (folder / "configuration_evil.py").write_text(code)
    (folder / "modeling_evil.py").write_text(code)
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        SimCSE(str(folder), pooler="avg", device="cpu")
    assert not marker.exists()


_NO_NETWORK_SCRIPT = r"""
import os, socket, sys
attempts = []
def refuse(*args, **kwargs):
    attempts.append(args[1:2] or args[:1])
    raise OSError("network access attempted")
socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse

import simcse, simcse.tool                          # light imports: the hub library is not loaded yet
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
    simcse.tool.SimCSE("some-org/some-model-not-cached", pooler="avg", device="cpu")
except OSError as e:
    print("offline error:", str(e).splitlines()[0])
else:
    raise SystemExit("a hub name loaded without network")
assert not attempts, attempts
print("imported", len(names), "modules; connection attempts:", len(attempts))
"""


def test_import_opens_no_network_connection_and_honours_offline_mode(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_HOME=str(tmp_path / "hf_home"), OMP_NUM_THREADS="1")  # an empty cache: nothing to fall back on
    r = subprocess.run([sys.executable, "-c", _NO_NETWORK_SCRIPT], env=env, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "connection attempts: 0" in r.stdout and "offline error:" in r.stdout


# ------------------------------------------------------------------------------------------ 6. numerics
def test_fp16_and_bf16_inputs_give_float32_finite_loss_and_grads():
    from simcse.losses import info_nce

    torch.manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16):
        z1 = torch.randn(16, 32).to(dtype).requires_grad_(True)
        z2 = (z1.detach() + 0.01 * torch.randn(16, 32).to(dtype)).requires_grad_(True)
        z3 = torch.randn(16, 32).to(dtype)
        for temp in (0.05, 1e-4):  # 1/temp = 10,000 would overflow fp16 (max 65504) after a few products
            loss = info_nce(z1, z2, z3, temp=temp)
            assert loss.dtype == torch.float32 and torch.isfinite(loss), (dtype, temp)
            g1, g2 = torch.autograd.grad(loss, (z1, z2))
            assert torch.isfinite(g1).all() and torch.isfinite(g2).all()
        ref = info_nce(z1.detach().float(), z2.detach().float(), z3.float())
        assert info_nce(z1, z2, z3).item() == pytest.approx(ref.item(), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_logits_stay_float32_under_autocast(dtype):
    """Under autocast the matmul of the cosine logits would run in half precision (bf16 resolves a logit of
    20 only to steps of 0.125); it must equal the float32 computation."""
    from simcse.losses import cosine_logits, info_nce

    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    want = cosine_logits(a, b, 0.05)
    with torch.autocast(device_type="cpu", dtype=dtype):
        got = cosine_logits(a, b, 0.05)
        loss = info_nce(a, b, temp=0.05)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert loss.item() == pytest.approx(info_nce(a, b, temp=0.05).item(), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_extreme_embeddings_keep_loss_and_grads_finite(dtype):
    from simcse.losses import info_nce

    big = torch.finfo(dtype).max / 2
    torch.manual_seed(0)
    cases = {
        "all equal": torch.ones(8, 16),
        "all zero": torch.zeros(8, 16),
        "huge norms": torch.randn(8, 16).sign() * big,
        "huge and tiny rows": torch.cat([torch.full((4, 16), big), torch.full((4, 16), 1e-30)]),
    }
    for name, z in cases.items():
        z = z.to(dtype).requires_grad_(True)
        for temp in (0.05, 1e-4):
            loss = info_nce(z, z.detach().clone(), z.detach().flip(0), temp=temp)
            (g,) = torch.autograd.grad(loss, z)
            assert torch.isfinite(loss), (name, dtype, temp)
            # The gradient with respect to a (near-)zero embedding is ~1/eps = 1e8 times the upstream one
            # (cosine is undefined at 0; nn.CosineSimilarity, used by the reference, behaves the same): finite
            # in float32/bf16, but it overflows float16 -- fp16 AMP's GradScaler then skips that step.
            if not (dtype == torch.float16 and name == "huge and tiny rows"):
                assert torch.isfinite(g).all(), (name, dtype, temp)
    # equal embeddings: every logit equal, so the loss is log(number of candidates)
    z = torch.ones(8, 16, dtype=dtype)
    assert info_nce(z, z).item() == pytest.approx(math.log(8), abs=1e-5)
    assert info_nce(z, z, z).item() == pytest.approx(math.log(16), abs=1e-5)
