"""Every objective under every wrapper (none, ``--loss matryoshka``, ``--fixed_dropout``, ``--do_mlm``) on tiny
models: the run either trains two steps (a finite loss logged at each) or is refused at setup with one ``error:``
line, never a traceback at the first step or after (docs/reliability.md, "Composing objectives, wrappers and
options"). The refusals expected are listed in :data:`REFUSED` (and, for those that depend on the source or the
process count, :data:`REFUSED_ELSEWHERE`), so a new combination that starts or stops training is noticed.

Axes: {a training file, the same rows as a stream} x {1, 2 gloo processes} x {resumed from the first checkpoint}:
a resumed run logs the uninterrupted run's second loss exactly (on every rank)."""
from __future__ import annotations

import csv
import json
import math

import pytest

from conftest import random_sentences

pytestmark = pytest.mark.slow

OBJECTIVES = ["infonce", "esimcse", "mixcse", "simcse_pp", "diffcse", "infocse", "promptbert", "rankcse", "cosent",
              "angle", "mntp"]
WRAPPERS = ["none", "matryoshka", "fixed_dropout", "mlm"]
# (objective, wrapper) -> a fragment of the one-line refusal
REFUSED = {
    ("esimcse", "matryoshka"): "cannot wrap --loss esimcse",
    ("simcse_pp", "matryoshka"): "cannot wrap --loss simcse_pp",
    ("diffcse", "matryoshka"): "cannot wrap --loss diffcse",
    ("infocse", "matryoshka"): "cannot wrap --loss infocse",
    ("esimcse", "fixed_dropout"): "--fixed_dropout cannot wrap --loss esimcse",
    ("promptbert", "fixed_dropout"): "--fixed_dropout cannot wrap --loss promptbert",
    ("cosent", "fixed_dropout"): "--fixed_dropout makes both views from one sentence",
    ("angle", "fixed_dropout"): "--fixed_dropout makes both views from one sentence",
    ("mntp", "matryoshka"): "cannot wrap --loss mntp: its loss does not use the sentence embeddings",
    ("mntp", "fixed_dropout"): "--fixed_dropout cannot wrap --loss mntp",
    ("mntp", "mlm"): "--do_mlm cannot wrap --loss mntp",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_mlm_dir):
    from decoder_models import make_tiny_decoder

    root = tmp_path_factory.mktemp("matrix")
    (root / "train.txt").write_text("\n".join(random_sentences(24, seed=4)) + "\n")
    a, b = random_sentences(24, seed=5), random_sentences(24, seed=6)
    with open(root / "scored.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sent0", "sent1", "score"])
        w.writerows([a[i], b[i], f"{i % 5}.0"] for i in range(24))
    return {"root": root, "bert": tiny_mlm_dir, "decoder": make_tiny_decoder(root / "llama", "llama")}


def _loss_args(name: str, files) -> dict:
    return {"esimcse": {"neg_size": 8}, "diffcse": {"generator_name": str(files["bert"])},
            "infocse": {"skip_from": 1}, "rankcse": {"teachers": [str(files["bert"])]}}.get(name, {})


def _argv(name: str, wrapper: str, files, out) -> list[str]:
    args = _loss_args(name, files)
    loss = name
    if wrapper == "matryoshka":
        loss, args = "matryoshka", {"loss": name, "loss_args": args, "matryoshka_dims": [32, 16]}
    model = files["decoder"] if name == "mntp" else files["bert"]
    pooler = "prompt_mask" if name == "promptbert" else "avg" if name == "mntp" else "cls_before_pooler"
    data = files["root"] / ("scored.csv" if name in ("cosent", "angle") else "train.txt")
    argv = ["--model_name_or_path", str(model), "--train_file", str(data), "--output_dir", str(out),
            "--pooler_type", pooler, "--per_device_train_batch_size", "4", "--max_steps", "2", "--learning_rate", "1e-3",
            "--use_cpu", "true", "--eval_strategy", "no", "--save_strategy", "no", "--eval_before_training", "false",
            "--test_after_training", "false", "--report_to", "none", "--logging_steps", "1",
            "--dataloader_pin_memory", "false", "--save_on_signal", "none", "--seed", "0",
            "--loss", loss, "--loss_args", json.dumps(args)]
    if name == "mntp":
        argv += ["--bidirectional", "true"]
    if wrapper == "fixed_dropout":
        argv += ["--fixed_dropout", "true"]
    if wrapper == "mlm":
        argv += ["--do_mlm", "true"]
    return argv


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("name", OBJECTIVES)
def test_each_objective_under_each_wrapper_trains_or_is_refused_at_setup(files, tmp_path, name, wrapper):
    from simcse.training import train as train_mod

    built = []
    real_build = train_mod.build

    def spy(*a):
        built.append(trainer := real_build(*a))
        return trainer

    train_mod.build = spy
    try:
        with pytest.raises(SystemExit) as exc:
            train_mod.main(_argv(name, wrapper, files, tmp_path / "o"))
            raise SystemExit(0)  # trained
    finally:
        train_mod.build = real_build
    code = exc.value.code
    expected = REFUSED.get((name, wrapper))
    if code == 0 or code is None:
        assert expected is None, f"trained, but {expected!r} was expected"
        losses = [h["loss"] for h in built[0].state.log_history if "loss" in h]
        assert len(losses) == 2 and all(math.isfinite(x) for x in losses), losses
        return
    msg = str(code)
    assert msg.startswith("error: ") and "\n" not in msg, msg
    assert not built, "refused after setup"
    assert expected is not None and expected in msg, msg


def _dataset_folder(files, folder: str, config: str, source: str, data_file: str):
    """A local dataset folder ``folder`` whose README config ``config`` is a copy of the training file ``source``
    (one format per folder: ``datasets`` reads all of a folder's files with one builder)."""
    hub = files["root"] / folder
    if not hub.exists():
        (hub / "data").mkdir(parents=True)
        (hub / "data" / data_file).write_text((files["root"] / source).read_text())
        (hub / "README.md").write_text(f"---\nconfigs:\n- config_name: {config}\n  data_files:\n  - split: train\n"
                                       f"    path: data/{data_file}\n---\n")
    return hub


def _hub(files):
    return _dataset_folder(files, "hub", "wiki", "train.txt", "wiki.txt")


@pytest.mark.parametrize("wrapper", ["matryoshka", "fixed_dropout", "mlm"])
@pytest.mark.parametrize("name", ["infonce", "mixcse"])
def test_wrapped_objectives_stream_and_resume_as_uninterrupted(files, tmp_path, name, wrapper):
    """A wrapped objective reads a stream, and a run resumed from its first checkpoint logs the second step's loss
    of the uninterrupted run."""
    from conftest import logged_losses, run_training

    argv = _argv(name, wrapper, files, tmp_path / "full")
    i = argv.index("--train_file")
    streamed = argv[:i] + ["--dataset_name", str(_hub(files)), "--dataset_config_name", "wiki", "--streaming", "true"] \
        + argv[i + 2:]
    streamed[streamed.index("--output_dir") + 1] = str(tmp_path / "stream")
    assert run_training(streamed).state.global_step == 2
    save = ["--save_strategy", "steps", "--save_steps", "1"]
    full = run_training([*argv, *save])
    ck = tmp_path / "full" / "checkpoint-1"
    resumed_argv = [*argv, *save, "--resume_from_checkpoint", str(ck)]
    resumed_argv[resumed_argv.index("--output_dir") + 1] = str(tmp_path / "resumed")
    resumed = run_training(resumed_argv)
    assert logged_losses(resumed)[-1] == logged_losses(full)[-1]


# ------------------------------------------------------------------ {file, stream} x {1, 2 processes} x {resume}
SOURCES = ["file", "stream"]
# refusals that depend on the source or the process count (beyond REFUSED): (objective, wrapper, source, processes)
# -> a fragment of the one-line refusal; None in a key matches any value
REFUSED_ELSEWHERE: dict[tuple, str] = {
    ("mntp", None, None, 2): "--loss mntp does not support training on 2 processes",  # a token loss: no gather
}


def _refusal(name, wrapper, source, processes):
    if (name, wrapper) in REFUSED:
        return REFUSED[name, wrapper]
    for (n, w, s, p), fragment in REFUSED_ELSEWHERE.items():
        if n == name and w in (None, wrapper) and s in (None, source) and p in (None, processes):
            return fragment
    return None


def _pairs_hub(files):
    return _dataset_folder(files, "hub_pairs", "pairs", "scored.csv", "pairs.csv")


def _source_argv(name, wrapper, files, out, source, *extra):
    """:func:`_argv` reading ``source``: the training file, or the same rows as a stream (in file order)."""
    argv = _argv(name, wrapper, files, out)
    if source == "stream":
        i = argv.index("--train_file")
        hub, config = (_pairs_hub(files), "pairs") if name in ("cosent", "angle") else (_hub(files), "wiki")
        argv[i:i + 2] = ["--dataset_name", str(hub), "--dataset_config_name", config,
                         "--streaming", "true", "--shuffle_buffer_size", "0"]
    return [*argv, *extra]


def _full_and_resumed(argv_of, root) -> dict:
    """Train 2 steps saving after each, then again resumed from ``checkpoint-1``: ``{"full": losses, "resumed":
    losses}``, or ``{"refused": message}`` when setup refuses (SystemExit with one line)."""
    from conftest import logged_losses, run_training

    save = ["--save_strategy", "steps", "--save_steps", "1"]
    try:
        full = logged_losses(run_training(argv_of(root / "full", *save)))
        resumed = logged_losses(run_training(argv_of(root / "resumed", *save, "--resume_from_checkpoint",
                                                     str(root / "full" / "checkpoint-1"))))
    except SystemExit as e:
        return {"refused": str(e.code)}
    return {"full": full, "resumed": resumed}


def _check(outcome: dict, expected: str | None, what: str) -> None:
    if "refused" in outcome:
        msg = outcome["refused"]
        assert msg.startswith("error: ") and "\n" not in msg, (what, msg)
        assert expected is not None and expected in msg, (what, msg)
        return
    assert expected is None, f"{what}: trained, but {expected!r} was expected"
    full, resumed = outcome["full"], outcome["resumed"]
    assert len(full) == 2 and all(math.isfinite(x) for x in full), (what, full)
    assert resumed[-1] == full[-1], (what, full, resumed)  # the resumed run's step 2 is the uninterrupted one's


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("name", OBJECTIVES)
def test_one_process_each_source_resumes_as_uninterrupted(files, tmp_path, name, wrapper, source):
    outcome = _full_and_resumed(lambda out, *extra: _source_argv(name, wrapper, files, out, source, *extra), tmp_path)
    _check(outcome, _refusal(name, wrapper, source, 1), f"{name}/{wrapper}/{source}")


def _matrix_worker(rank: int, port: int, root: str, source: str, files: dict) -> None:
    import os
    from pathlib import Path

    import torch

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    torch.set_num_threads(1)
    files = {k: Path(v) for k, v in files.items()}
    out = {}
    for name in OBJECTIVES:
        for wrapper in WRAPPERS:
            if (name, wrapper) in REFUSED:
                continue  # refused by the options alone: the one-process test covers it

            def argv_of(o, *extra, name=name, wrapper=wrapper):
                return _source_argv(name, wrapper, files, o, source, "--ddp_backend", "gloo", *extra)  # one folder

            out[name, wrapper] = _full_and_resumed(argv_of, Path(root) / f"{name}-{wrapper}")
    torch.save(out, Path(root) / f"rank{rank}.pt")


@pytest.mark.parametrize("source", SOURCES)
def test_two_processes_each_source_resume_as_uninterrupted(files, tmp_path, source):
    """Every objective under every wrapper on two gloo processes (one spawn runs them all): trains two steps and a
    run resumed from its first checkpoint logs the uninterrupted run's second loss on both ranks, or is refused at
    setup in one line."""
    import torch

    from conftest import free_port, run_processes

    _pairs_hub(files), _hub(files)
    run_processes(_matrix_worker, (free_port(), str(tmp_path), source, {k: str(v) for k, v in files.items()}), 2,
                  timeout_s=1800)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == sum((n, w) not in REFUSED for n in OBJECTIVES for w in WRAPPERS)
    failures = []
    for (name, wrapper) in ranks[0]:
        for r, got in enumerate(ranks):
            try:
                _check(got[name, wrapper], _refusal(name, wrapper, source, 2), f"{name}/{wrapper}/{source}/rank{r}")
            except AssertionError as e:
                failures.append(str(e))
    assert not failures, "\n".join(failures)
