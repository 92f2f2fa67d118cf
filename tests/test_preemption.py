"""Training survives the machine: preemption signals (SaveOnSignalCallback) and failed writes (simcse.storage).

Builds on tests/test_reliability.py (same tiny BERT, data and argument helpers): runs cut by a signal or a write
failure and resumed must end bitwise equal to a run that was never interrupted (single-threaded CPU).
"""
from __future__ import annotations

import errno
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import make_tiny_model, random_sentences
from test_reliability import (REPO, assert_same_weights, hidden_entries, train_argv, weights, write_sts_dev)

CHECKPOINT_FILES = {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"}
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
           HF_DATASETS_OFFLINE="1", PYTHONHASHSEED="0", PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
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


def _build(setup, out, *extra, model=None, train=None):
    from transformers import set_seed

    from simcse.train import build, parse_args

    argv = train_argv(model or setup["model"], train or setup["train"], out, setup["senteval"], *extra)
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
def test_sigterm_saves_a_checkpoint_prints_the_resume_command_and_resume_matches(setup, tmp_path):
    """SIGTERM mid-run with no periodic checkpoint: the run saves checkpoint-N after its current step, prints one
    resume line and exits 75; running that exact command ends bitwise equal to a run never signalled."""
    extra = ("--max_steps", "24", "--save_steps", "1000", "--eval_strategy", "no")
    out = tmp_path / "cut"
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"),
           *train_argv(setup["model"], setup["train"], out, setup["senteval"], *extra)]
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

    resume = shlex.split(resume_lines[0].split("resume with: ", 1)[1])
    assert resume[:2] == ["python", str(REPO / "scripts" / "train.py")]
    assert resume[2:-2] == cmd[2:] and resume[-2:] == ["--resume_from_checkpoint", str(checkpoints[0])]
    resumed = subprocess.run([sys.executable, *resume[1:]], env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    full = _build(setup, tmp_path / "full", *extra)  # the uninterrupted run, in this (single-threaded) process
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
def test_signal_checkpoint_resumes_bitwise(setup, tmp_path, kind):
    v = VARIANTS[kind]
    opts = dict(model=setup[v.get("model", "model")], train=setup[v.get("train", "train")])
    extra = ("--max_steps", "8", "--save_strategy", "no", "--eval_strategy", "no", *v.get("args", ()))
    full = _build(setup, tmp_path / "full", *extra, **opts)
    full.train()
    cut = _build(setup, tmp_path / "cut", *extra, **opts)
    cut.add_callback(SignalAt(3))
    cut.train()
    assert cut.state.global_step == 3  # the signal came during step 3: that step finishes, no further one
    assert sorted(p.name for p in (tmp_path / "cut").iterdir()) == ["checkpoint-3"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored after training
    resumed = _build(setup, tmp_path / "cut", *extra, **opts)
    resumed.train(resume_from_checkpoint=str(tmp_path / "cut" / "checkpoint-3"))
    for a, b in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        assert a[0] == b[0] and torch.equal(a[1], b[1]), a[0]


def test_signal_during_the_save_does_not_cut_it(setup, tmp_path, monkeypatch):
    """SIGTERM and SIGUSR1 arriving while optimizer.pt is written: the save completes, training stops once."""
    real_save = torch.save

    def save(obj, target, *a, **kw):
        if os.path.basename(str(target)) == "optimizer.pt":
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGUSR1)
        return real_save(obj, target, *a, **kw)

    monkeypatch.setattr(torch, "save", save)
    trainer = _build(setup, tmp_path / "out", "--max_steps", "8", "--save_strategy", "no", "--eval_strategy", "no")
    trainer.add_callback(SignalAt(2))
    trainer.train()
    monkeypatch.undo()
    assert trainer.state.global_step == 2
    ck = tmp_path / "out" / "checkpoint-2"
    assert CHECKPOINT_FILES <= {p.name for p in ck.iterdir()}
    torch.load(ck / "optimizer.pt", weights_only=True)  # whole
    assert hidden_entries(tmp_path / "out") == []


def test_save_on_signal_option(setup, tmp_path):
    trainer = _build(setup, tmp_path / "a", "--max_steps", "4", "--save_on_signal", "USR2", "--save_strategy", "no")
    trainer.add_callback(SignalAt(1, signal.SIGUSR2))
    trainer.train()
    assert trainer.state.global_step == 1 and (tmp_path / "a" / "checkpoint-1").is_dir()
    from simcse.callbacks import SaveOnSignalCallback
    from simcse.train import SetupError, parse_args

    none = _build(setup, tmp_path / "b", "--max_steps", "1", "--save_on_signal", "none")
    assert not any(isinstance(c, SaveOnSignalCallback) for c in none.callback_handler.callbacks)
    default = _build(setup, tmp_path / "c", "--max_steps", "1")
    [cb] = [c for c in default.callback_handler.callbacks if isinstance(c, SaveOnSignalCallback)]
    assert cb.signals == ("TERM", "USR1")
    for bad in ("KILL", "TERM,BOGUS"):
        with pytest.raises(SetupError, match="is not a signal that can be caught"):
            parse_args(train_argv(setup["model"], setup["train"], tmp_path / "d", setup["senteval"],
                                  "--save_on_signal", bad))


# ----------------------------------------------------------------------------------------- write failures
def _train_script_with(callback: str) -> str:
    """Source of a script running ``simcse.train.main(sys.argv[1:])`` with the TrainerCallback ``Injected``
    (defined by ``callback``) added to the trainer it builds."""
    return f"""
import os, resource, signal, sys
from transformers import TrainerCallback
import simcse.train as t
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


def test_file_size_limit_mid_run_reports_one_line_and_keeps_the_last_checkpoint(setup, tmp_path):
    """RLIMIT_FSIZE (Python gets EFBIG) makes checkpoint-4 fail: exit 74, one line naming the checkpoint, the folder
    and the space, no half-written file; checkpoint-2 is intact and resumes to the uninterrupted result."""
    out = tmp_path / "out"
    extra = ("--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2", "--eval_strategy", "no")
    argv = train_argv(setup["model"], setup["train"], out, setup["senteval"], *extra)
    r = subprocess.run([sys.executable, "-c", _LIMIT_AFTER_FIRST_SAVE, *argv], env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 74, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: could not write checkpoint-4 to {str(out)!r}: File too large (needs about "), last
    assert "free there; file size limit (ulimit -f) 20.0 kB)" in last
    assert last.endswith(f"--resume_from_checkpoint {out / 'checkpoint-2'}")
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-2"]  # no checkpoint-4, no staging folder

    full = _build(setup, tmp_path / "full", *extra)
    full.train()
    resumed = _build(setup, out, *extra)
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


def test_read_only_folder_mid_run_keeps_the_last_checkpoint(setup, tmp_path):
    from transformers import TrainerCallback

    from simcse.storage import WriteError

    if not _chmod_stops_writes(tmp_path):
        pytest.skip("running as root: a read-only folder does not stop root (the RLIMIT_FSIZE test covers mid-run)")
    out = tmp_path / "out"

    class ReadOnlyAfterFirstSave(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            out.chmod(0o555)

    trainer = _build(setup, out, "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2",
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
    from simcse.storage import WriteError, writing

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
def test_output_folder_that_cannot_hold_a_checkpoint_is_refused_up_front(setup, tmp_path, monkeypatch, limit):
    """Checked before training, without writing: a file size limit below the size of optimizer.pt, or less free
    space than one checkpoint (both faked here; the RLIMIT_FSIZE test above uses a real limit mid-run)."""
    import simcse.storage

    from simcse.train import SetupError

    if limit == "file size":
        monkeypatch.setattr(simcse.storage, "file_size_limit", lambda: 10_000)
        expected = (r"cannot write one checkpoint \(weights \+ optimizer state\) to .*: its largest file needs "
                    r"about .* kB, more than the file size limit \(ulimit -f\) of 10.0 kB")
    else:
        monkeypatch.setattr(simcse.storage, "free_bytes", lambda path: 5_000)
        expected = r"'.*' cannot hold one checkpoint \(weights \+ optimizer state\): it needs about .* kB, 5.0 kB free"
    out = tmp_path / "out"
    with pytest.raises(SetupError, match="^--output_dir: " + expected):
        _build(setup, out, "--max_steps", "2")
    assert not out.exists()


# ------------------------------------------------------------------------------------ torchrun, 2 processes
_SIGNAL_RANK_ONE = _train_script_with("""
class Injected(TrainerCallback):  # only rank 1 is signalled, as step 3 begins
    def on_step_begin(self, args, state, control, **kw):
        if args.process_index == 1 and state.global_step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
""")


def test_under_torchrun_every_rank_stops_after_the_same_step(setup, tmp_path):
    """Two CPU processes (gloo): SIGTERM reaches rank 1 only; both stop after step 3, write checkpoint-3 together
    (both ranks' RNG states) and exit 75; rank 0 prints a torchrun resume command."""
    script = tmp_path / "signal_rank_one.py"
    script.write_text(_SIGNAL_RANK_ONE)
    out = tmp_path / "out"
    argv = train_argv(setup["model"], setup["train"], out, setup["senteval"], "--max_steps", "12",
                      "--save_steps", "1000", "--eval_strategy", "no", "--per_device_train_batch_size", "4")
    from test_distributed import _free_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_free_port()}",
           str(script), *argv]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert "exitcode  : 75" in r.stderr or r.returncode == 75, r.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(("checkpoint", "."))) == ["checkpoint-3"]
    files = {p.name for p in (out / "checkpoint-3").iterdir()}
    assert {"model.safetensors", "optimizer.pt", "trainer_state.json", "rng_state_0.pth", "rng_state_1.pth"} <= files
    lines = [ln for ln in r.stdout.splitlines() if "resume with:" in ln]
    assert len(lines) == 1 and "stopped by a signal on another rank after step 3" in lines[0], r.stdout[-2000:]
    assert lines[0].split("resume with: ", 1)[1].startswith(f"torchrun --nproc_per_node=2 {script}")


def test_signal_handlers_are_restored_when_training_raises(setup, tmp_path):
    trainer = _build(setup, tmp_path / "out", "--max_steps", "4", "--save_strategy", "no", "--eval_strategy", "no")

    def failing(model, inputs, *a, **kw):
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # installed while training
        raise RuntimeError("boom")

    trainer.compute_loss = failing
    with pytest.raises(RuntimeError, match="boom"):
        trainer.train()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
