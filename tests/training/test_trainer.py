"""simcse.training.trainer: resume after SIGKILL, atomic checkpoints and model folders, best-checkpoint loading, safe
loading of checkpoints (weights-only pickles, no remote code unless trusted), and bf16 training on CPU.

The tests train the tiny random BERT of ``conftest.make_tiny_model`` (pooler ``avg``, dropout 0.1) on CPU.
Runs compared for equality are single-threaded (``OMP_NUM_THREADS=1``) with a fixed ``--seed``; on CPU that
is enough for bitwise-equal results (docs/reliability.md).
"""
from __future__ import annotations

import errno
import glob
import json
import math
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import WORDS, make_tiny_model, random_sentences, run_training
from simcse.training.trainer import SimCSETrainer

REPO = Path(__file__).resolve().parents[2]


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

    from simcse.training.train import build, parse_args

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
@pytest.mark.slow
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
@pytest.mark.slow
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
    from simcse.models.modeling import SimCSEModel

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


@pytest.mark.slow
def test_loading_an_unfinished_run_names_the_newest_checkpoint_and_the_resume_line(setup, tmp_path):
    """A run that stops (here: an error at step 3) after saving checkpoint-1 and -2 leaves no final weights:
    loading its folder fails with one message naming checkpoint-2 and the command that resumes the run; the
    checkpoint itself loads."""
    from transformers import TrainerCallback

    from simcse.models.modeling import SimCSEModel

    class PowerCut(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 2:
                raise RuntimeError("power cut")

    out = tmp_path / "cut"
    argv = train_argv(setup["model"], setup["train"], out, setup["senteval"], "--max_steps", "4", "--save_steps", "1",
                      "--eval_strategy", "no")
    with pytest.raises(RuntimeError, match="power cut"):
        run_training(argv, on_build=lambda trainer: trainer.add_callback(PowerCut()))
    assert not (out / "model.safetensors").exists() and (out / "checkpoint-2").is_dir()
    with pytest.raises(FileNotFoundError) as info:
        SimCSEModel.from_pretrained(str(out))
    msg = str(info.value)
    newest = str(out / "checkpoint-2")
    assert msg.startswith(f"model folder {str(out)!r} has no weights") and "\n" not in msg
    assert f"the newest being {newest!r}" in msg
    line = shlex.join(["python", sys.argv[0], *argv, "--resume_from_checkpoint", newest])
    assert msg.endswith(f"resume the run with: {line}")
    assert SimCSEModel.from_pretrained(newest).pooler_type == "avg"
    (out / "checkpoint-2" / "simcse_train_command.txt").unlink()  # a checkpoint of another tool: the rule in words
    with pytest.raises(FileNotFoundError, match="resume the run with: the training command that wrote it, with "
                                                f"--resume_from_checkpoint {newest}$"):
        SimCSEModel.from_pretrained(str(out))


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

    from simcse.models.modeling import SimCSEModel

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

    def fake_dev(encode, data_dir=None, constant_score=None):  # the trainer passes constant_score
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
    from simcse.models.modeling import SimCSEModel

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

    from simcse.training.arguments import ModelArguments
    from simcse.models.modeling import SimCSEModel
    from simcse.retrieval.tool import SimCSE

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


def _train(argv):
    captured = {"encoder_dtypes": []}

    def hook(trainer):
        # a Linear's output: bf16 under autocast (LayerNorm outputs, hence last_hidden_state, stay float32)
        linear = next(m for m in trainer.model.encoder.modules() if isinstance(m, torch.nn.Linear))
        linear.register_forward_hook(lambda m, i, o: captured["encoder_dtypes"].append(o.dtype))

    captured["trainer"] = run_training(argv, hook)
    return captured


@pytest.mark.parametrize("chunk", [None, 4], ids=["plain", "gradcache"])
def test_bf16_on_cpu_trains(tmp_path, tiny_bert_dir, train_txt, chunk, monkeypatch):
    loss_dtypes = []
    real_loss = SimCSETrainer.contrastive_loss

    def spy_loss(self, z, *args, **kwargs):
        loss = real_loss(self, z, *args, **kwargs)
        loss_dtypes.append(loss.dtype)
        return loss

    monkeypatch.setattr(SimCSETrainer, "contrastive_loss", spy_loss)
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt), "--output_dir", str(tmp_path / "o"),
            "--per_device_train_batch_size", "16", "--learning_rate", "1e-3", "--max_steps", "25", "--bf16", "true",
            "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0", "--use_cpu", "true",
            "--dataloader_pin_memory", "false", "--pooler_type", "avg"]
    if chunk:
        argv += ["--gradient_cache_chunk_size", str(chunk)]
    got = _train(argv)
    trainer = got["trainer"]
    assert trainer.args.bf16 and trainer.accelerator.mixed_precision == "bf16"
    # the encoder really ran in bf16 (accelerate's autocast), the loss was float32
    assert got["encoder_dtypes"] and set(got["encoder_dtypes"]) == {torch.bfloat16}
    assert loss_dtypes and set(loss_dtypes) == {torch.float32}
    assert next(trainer.model.parameters()).dtype == torch.float32  # master weights stay float32
    logs = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 25 and all(math.isfinite(x) for x in logs)
    first, last = sum(logs[:5]) / 5, sum(logs[-5:]) / 5
    assert last < 0.8 * first, logs


# ------------------------------------------------------------------------- preemption and write failures
# Training survives the machine: preemption signals (simcse.training.callbacks.SaveOnSignalCallback) and failed writes
# (simcse.files.storage). Runs cut by a signal or a write failure and resumed end bitwise equal to uninterrupted ones.


def _free_port_for_torchrun() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CHECKPOINT_FILES = {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"}
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
           HF_DATASETS_OFFLINE="1", PYTHONHASHSEED="0", PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))


@pytest.fixture(scope="module")
def psetup(tmp_path_factory):
    """Tiny BERT (and one with an MLM head), a text corpus and a triplet TSV for the preemption tests."""
    root = tmp_path_factory.mktemp("preemption")
    model = make_tiny_model(root / "model", "bert", dropout=0.1)
    torch.manual_seed(1)
    from transformers import BertConfig, BertForMaskedLM

    mlm = make_tiny_model(root / "mlm", "bert", dropout=0.1)
    BertForMaskedLM(BertConfig.from_pretrained(mlm)).save_pretrained(mlm)  # with a masked-LM head (--do_mlm)
    s = random_sentences(96, seed=5)
    train = root / "train.txt"
    train.write_text("\n".join(s[:64]) + "\n")
    triplets = root / "nli.tsv"
    triplets.write_text("sent0\tsent1\thard_neg\n" + "".join(f"{s[i]}\t{s[i + 32]}\t{s[i + 64]}\n" for i in range(32)))
    return {"model": model, "mlm": mlm, "train": train, "triplets": triplets,
            "senteval": write_sts_dev(root / "senteval")}


def _build(psetup, out, *extra, model=None, train=None):
    from transformers import set_seed

    from simcse.training.train import build, parse_args

    argv = train_argv(model or psetup["model"], train or psetup["train"], out, psetup["senteval"], *extra)
    args = parse_args(argv)
    set_seed(args[2].seed)
    return build(*args)


class SignalAt:
    """A TrainerCallback that sends ``sig`` to this process as optimizer step ``step`` begins (1-based)."""

    def __new__(cls, step, sig=signal.SIGTERM):
        from transformers import TrainerCallback

        class _Cb(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                if state.global_step == step - 1:
                    os.kill(os.getpid(), sig)

        return _Cb()


# ------------------------------------------------------------------------- signal, then resume (subprocess)
@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_prints_the_resume_command_and_resume_matches(psetup, tmp_path):
    """SIGTERM mid-run with no periodic checkpoint: the run saves checkpoint-N after its current step, prints one
    resume line and exits 75; running that exact command ends bitwise equal to a run never signalled."""
    extra = ("--max_steps", "24", "--save_steps", "1000", "--eval_strategy", "no")
    out = tmp_path / "cut"
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"),
           *train_argv(psetup["model"], psetup["train"], out, psetup["senteval"], *extra)]
    victim = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    for line in victim.stdout:  # HF prints one {'loss': ...} line per step (logging_steps 1)
        if "'loss'" in line:
            break
        assert time.monotonic() < deadline
    victim.send_signal(signal.SIGTERM)
    victim.send_signal(signal.SIGTERM)  # a second signal while stopping is ignored
    stdout, err = victim.communicate(timeout=300)
    assert victim.returncode == 75, err[-3000:]
    resume_lines = [ln for ln in stdout.splitlines() if "resume with:" in ln]
    assert len(resume_lines) == 1, stdout[-3000:]
    assert resume_lines[0].startswith("[simcse] stopped by SIGTERM after step ")
    checkpoints = sorted(out.glob("checkpoint-*"))
    assert len(checkpoints) == 1 and CHECKPOINT_FILES <= {p.name for p in checkpoints[0].iterdir()}
    step = int(checkpoints[0].name.split("-")[1])
    assert 1 <= step < 24 and f"after step {step};" in resume_lines[0]
    assert not (out / "model.safetensors").exists()
    from simcse.models.modeling import SimCSEModel

    with pytest.raises(FileNotFoundError) as info:  # loading the folder names the same resume line
        SimCSEModel.from_pretrained(str(out))
    assert str(info.value).endswith("resume the run with: " + resume_lines[0].split("resume with: ", 1)[1])

    resume = shlex.split(resume_lines[0].split("resume with: ", 1)[1])
    assert resume[:2] == ["python", str(REPO / "scripts" / "train.py")]
    assert resume[2:-2] == cmd[2:] and resume[-2:] == ["--resume_from_checkpoint", str(checkpoints[0])]
    resumed = subprocess.run([sys.executable, *resume[1:]], env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    full = _build(psetup, tmp_path / "full", *extra)  # the uninterrupted run, in this (single-threaded) process
    full.train()
    full.save_model(str(tmp_path / "full"))
    assert_same_weights(weights(tmp_path / "full"), weights(out))
    assert hidden_entries(out) == []


# ------------------------------------------------------------- signal, then resume (in process, four kinds)
VARIANTS = {
    "unsupervised": {},
    "supervised": {"train": "triplets"},
    "mlm": {"model": "mlm", "args": ("--do_mlm", "true")},
    "gradient cache": {"args": ("--gradient_cache_chunk_size", "3")},
}


@pytest.mark.parametrize("kind", list(VARIANTS))
@pytest.mark.slow
def test_signal_checkpoint_resumes_bitwise(psetup, tmp_path, kind):
    v = VARIANTS[kind]
    opts = dict(model=psetup[v.get("model", "model")], train=psetup[v.get("train", "train")])
    extra = ("--max_steps", "8", "--save_strategy", "no", "--eval_strategy", "no", *v.get("args", ()))
    full = _build(psetup, tmp_path / "full", *extra, **opts)
    full.train()
    cut = _build(psetup, tmp_path / "cut", *extra, **opts)
    cut.add_callback(SignalAt(3))
    cut.train()
    assert cut.state.global_step == 3  # the signal came during step 3: that step finishes, no further one
    assert sorted(p.name for p in (tmp_path / "cut").iterdir()) == ["checkpoint-3"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored after training
    resumed = _build(psetup, tmp_path / "cut", *extra, **opts)
    resumed.train(resume_from_checkpoint=str(tmp_path / "cut" / "checkpoint-3"))
    for a, b in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        assert a[0] == b[0] and torch.equal(a[1], b[1]), a[0]


def test_signal_during_the_save_does_not_cut_it(psetup, tmp_path, monkeypatch):
    """SIGTERM and SIGUSR1 arriving while optimizer.pt is written: the save completes, training stops once."""
    real_save = torch.save

    def save(obj, target, *a, **kw):
        if os.path.basename(str(target)) == "optimizer.pt":
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGUSR1)
        return real_save(obj, target, *a, **kw)

    monkeypatch.setattr(torch, "save", save)
    trainer = _build(psetup, tmp_path / "out", "--max_steps", "8", "--save_strategy", "no", "--eval_strategy", "no")
    trainer.add_callback(SignalAt(2))
    trainer.train()
    monkeypatch.undo()
    assert trainer.state.global_step == 2
    ck = tmp_path / "out" / "checkpoint-2"
    assert CHECKPOINT_FILES <= {p.name for p in ck.iterdir()}
    torch.load(ck / "optimizer.pt", weights_only=True)  # whole
    assert hidden_entries(tmp_path / "out") == []


def test_save_on_signal_option(psetup, tmp_path):
    trainer = _build(psetup, tmp_path / "a", "--max_steps", "4", "--save_on_signal", "USR2", "--save_strategy", "no")
    trainer.add_callback(SignalAt(1, signal.SIGUSR2))
    trainer.train()
    assert trainer.state.global_step == 1 and (tmp_path / "a" / "checkpoint-1").is_dir()
    from simcse.training.callbacks import SaveOnSignalCallback
    from simcse.training.train import SetupError, parse_args

    none = _build(psetup, tmp_path / "b", "--max_steps", "1", "--save_on_signal", "none")
    assert not any(isinstance(c, SaveOnSignalCallback) for c in none.callback_handler.callbacks)
    default = _build(psetup, tmp_path / "c", "--max_steps", "1")
    [cb] = [c for c in default.callback_handler.callbacks if isinstance(c, SaveOnSignalCallback)]
    assert cb.signals == ("TERM", "USR1")
    for bad in ("KILL", "TERM,BOGUS"):
        with pytest.raises(SetupError, match="is not a signal that can be caught"):
            parse_args(train_argv(psetup["model"], psetup["train"], tmp_path / "d", psetup["senteval"],
                                  "--save_on_signal", bad))


# ----------------------------------------------------------------------------------------- write failures
def _train_script_with(callback: str) -> str:
    """Source of a script running ``simcse.training.train.main(sys.argv[1:])`` with the TrainerCallback ``Injected``
    (defined by ``callback``) added to the trainer it builds."""
    return f"""
import os, resource, signal, sys
from transformers import TrainerCallback
import simcse.training.train as t
{callback}
real_build = t.build
def build(*a):
    trainer = real_build(*a)
    trainer.add_callback(Injected())
    return trainer
t.build = build
t.main(sys.argv[1:])
"""


_LIMIT_AFTER_FIRST_SAVE = _train_script_with("""
class Injected(TrainerCallback):  # after checkpoint-2 is written, files may hold at most 20,000 bytes (ulimit -f)
    def on_save(self, args, state, control, **kw):
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
""")


@pytest.mark.slow
def test_file_size_limit_mid_run_reports_one_line_and_keeps_the_last_checkpoint(psetup, tmp_path):
    """RLIMIT_FSIZE (Python gets EFBIG) makes checkpoint-4 fail: exit 74, one line naming the checkpoint, the folder
    and the space, no half-written file; checkpoint-2 is intact and resumes to the uninterrupted result."""
    out = tmp_path / "out"
    extra = ("--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2", "--eval_strategy", "no")
    argv = train_argv(psetup["model"], psetup["train"], out, psetup["senteval"], *extra)
    r = subprocess.run([sys.executable, "-c", _LIMIT_AFTER_FIRST_SAVE, *argv], env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 74, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: could not write checkpoint-4 to {str(out)!r}: File too large (needs about "), last
    assert "free there; file size limit (ulimit -f) 20.0 kB)" in last
    assert last.endswith(f"--resume_from_checkpoint {out / 'checkpoint-2'}")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2"]  # no checkpoint-4, no staging folder

    full = _build(psetup, tmp_path / "full", *extra)
    full.train()
    resumed = _build(psetup, out, *extra)
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)


def _chmod_stops_writes(tmp_path: Path) -> bool:
    """Whether a chmod 555 folder stops this process from writing (it does not stop root)."""
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o555)
    try:
        (probe / "x").touch()
    except PermissionError:
        return True
    finally:
        probe.chmod(0o755)
    return False


def test_read_only_folder_mid_run_keeps_the_last_checkpoint(psetup, tmp_path):
    from transformers import TrainerCallback

    from simcse.files.storage import WriteError

    if not _chmod_stops_writes(tmp_path):
        pytest.skip("running as root: a read-only folder does not stop root (the RLIMIT_FSIZE test covers mid-run)")
    out = tmp_path / "out"

    class ReadOnlyAfterFirstSave(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            out.chmod(0o555)

    trainer = _build(psetup, out, "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2",
                     "--eval_strategy", "no")
    trainer.add_callback(ReadOnlyAfterFirstSave())
    try:
        with pytest.raises(WriteError) as exc:
            trainer.train()
    finally:
        out.chmod(0o755)
    assert exc.value.errno == errno.EACCES
    assert str(exc.value).startswith(f"could not write checkpoint-4 to {str(out)!r}: Permission denied")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2"]


def test_write_errors_of_every_kind_name_what_and_where(tmp_path):
    from simcse.files.storage import WriteError, writing

    cases = [OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EIO, "Input/output error"),
             OSError(errno.EROFS, "Read-only file system"),
             RuntimeError("Error while serializing: I/O error: File too large (os error 27)"),
             RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")]
    reasons = ["No space left on device", "Input/output error", "Read-only file system", "File too large",
               "the file was written short"]
    for exc, reason in zip(cases, reasons):
        with pytest.raises(WriteError) as got:
            with writing("the index", tmp_path, needed=3_000_000):
                raise exc
        assert str(got.value).startswith(f"could not write the index to {str(tmp_path)!r}: {reason} "
                                         "(needs about 3.0 MB; "), str(got.value)
    with pytest.raises(ValueError, match="not a write error"):  # anything else passes unchanged
        with writing("x", tmp_path):
            raise ValueError("not a write error")


@pytest.mark.parametrize("limit", ["file size", "free space"])
def test_output_folder_that_cannot_hold_a_checkpoint_is_refused_up_front(psetup, tmp_path, monkeypatch, limit):
    """Checked before training, without writing: a file size limit below the size of optimizer.pt, or less free
    space than one checkpoint (both faked here; the RLIMIT_FSIZE test above uses a real limit mid-run)."""
    import simcse.files.storage

    from simcse.training.train import SetupError

    if limit == "file size":
        monkeypatch.setattr(simcse.files.storage, "file_size_limit", lambda: 10_000)
        expected = (r"cannot write one checkpoint \(weights \+ optimizer state\) to .*: its largest file needs "
                    r"about .* kB, more than the file size limit \(ulimit -f\) of 10.0 kB")
    else:
        monkeypatch.setattr(simcse.files.storage, "free_bytes", lambda path: 5_000)
        expected = r"'.*' cannot hold one checkpoint \(weights \+ optimizer state\): it needs about .* kB, 5.0 kB free"
    out = tmp_path / "out"
    with pytest.raises(SetupError, match="^--output_dir: " + expected):
        _build(psetup, out, "--max_steps", "2")
    assert not out.exists()


# ------------------------------------------------------------------------------------ torchrun, 2 processes
_SIGNAL_RANK_ONE = _train_script_with("""
class Injected(TrainerCallback):  # only rank 1 is signalled, as step 3 begins
    def on_step_begin(self, args, state, control, **kw):
        if args.process_index == 1 and state.global_step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
""")


@pytest.mark.slow
def test_under_torchrun_every_rank_stops_after_the_same_step(psetup, tmp_path):
    """Two CPU processes (gloo): SIGTERM reaches rank 1 only; both stop after step 3, write checkpoint-3 together
    (both ranks' RNG states) and exit 75; rank 0 prints a torchrun resume command."""
    script = tmp_path / "signal_rank_one.py"
    script.write_text(_SIGNAL_RANK_ONE)
    out = tmp_path / "out"
    argv = train_argv(psetup["model"], psetup["train"], out, psetup["senteval"], "--max_steps", "12",
                      "--save_steps", "1000", "--eval_strategy", "no", "--per_device_train_batch_size", "4")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_free_port_for_torchrun()}",
           str(script), *argv]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert "exitcode  : 75" in r.stderr or r.returncode == 75, r.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(("checkpoint", "."))) == ["checkpoint-3"]
    files = {p.name for p in (out / "checkpoint-3").iterdir()}
    assert {"model.safetensors", "optimizer.pt", "trainer_state.json", "rng_state_0.pth", "rng_state_1.pth"} <= files
    lines = [ln for ln in r.stdout.splitlines() if "resume with:" in ln]
    assert len(lines) == 1 and "stopped by a signal on another rank after step 3" in lines[0], r.stdout[-2000:]
    assert lines[0].split("resume with: ", 1)[1].startswith(f"torchrun --nproc_per_node=2 {script}")


def test_signal_handlers_are_restored_when_training_raises(psetup, tmp_path):
    trainer = _build(psetup, tmp_path / "out", "--max_steps", "4", "--save_strategy", "no", "--eval_strategy", "no")

    def failing(model, inputs, *a, **kw):
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # installed while training
        raise RuntimeError("boom")

    trainer.compute_loss = failing
    with pytest.raises(RuntimeError, match="boom"):
        trainer.train()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
