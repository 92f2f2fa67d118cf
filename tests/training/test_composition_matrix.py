"""Every objective under every wrapper (none, ``--loss matryoshka``, ``--fixed_dropout``, ``--do_mlm``) on tiny
models, one process, a training file: the run either trains two steps (a finite loss logged at each) or is refused
at setup with one ``error:`` line, never a traceback at the first step or after (docs/reliability.md, "Composing
objectives, wrappers and options"). The refusals expected are listed in :data:`REFUSED`, so a new combination that
starts or stops training is noticed. The wrappers over two objectives are also streamed and resumed."""
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


def _hub(files):
    hub = files["root"] / "hub"
    if not hub.exists():
        (hub / "data").mkdir(parents=True)
        (hub / "data" / "wiki.txt").write_text((files["root"] / "train.txt").read_text())
        (hub / "README.md").write_text("---\nconfigs:\n- config_name: wiki\n  data_files:\n  - split: train\n"
                                       "    path: data/wiki.txt\n---\n")
    return hub


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
