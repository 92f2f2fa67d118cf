"""What an objective, its wrappers and the options around it may be combined with, refused at setup in one line
(docs/reliability.md, "Composing objectives, wrappers and options"): each test is one fault that used to train the
wrong thing silently, or die late; here it is refused (or supported) before anything is loaded or trained."""
from __future__ import annotations

import csv
import json
import math

import pytest

from conftest import random_sentences, training_error


def _args(**options):
    from simcse.training.parser import training_arguments

    return training_arguments(**options)


@pytest.fixture
def txt(tmp_path):
    p = tmp_path / "train.txt"
    p.write_text("\n".join(random_sentences(24, seed=3)) + "\n")
    return p


def _csv(path, header, n=24, cell=None):
    """A CSV of ``header`` columns (text; a ``score`` column numeric); ``cell``: {(row, column): value}."""
    cols = [random_sentences(n, seed=10 + i) for i in range(len(header))]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for r in range(n):
            row = [f"{r % 5}.0" if c == "score" else cols[i][r] for i, c in enumerate(header)]
            for (rr, c), v in (cell or {}).items():
                if rr == r:
                    row[header.index(c)] = v
            w.writerow(row)
    return path


def _argv(model, train, out, *extra):
    return ["--model_name_or_path", str(model), "--train_file", str(train), "--output_dir", str(out),
            "--pooler_type", "avg", "--per_device_train_batch_size", "4", "--max_steps", "1", "--use_cpu", "true",
            "--eval_strategy", "no", "--eval_before_training", "false", "--test_after_training", "false",
            "--report_to", "none", "--dataloader_pin_memory", "false", "--save_on_signal", "none", *extra]


# ------------------------------------------------------------------------------------------ wrappers over methods
@pytest.mark.parametrize("inner", ["esimcse", "diffcse", "infocse", "simcse_pp"])
def test_matryoshka_refuses_an_objective_that_needs_the_full_width(txt, inner):
    with pytest.raises(Exception, match=f"--loss matryoshka cannot wrap --loss {inner}: its loss needs the full "
                                        "embedding width"):
        _args(model_name_or_path="m", train_file=str(txt), output_dir="o", loss="matryoshka",
              loss_args=json.dumps({"loss": inner, "matryoshka_dims": [32, 16]}))


def test_layer_wrappers_refuse_a_loss_that_records_state_per_call():
    from simcse.training.objectives.compose import simcse_objective

    for wrapper in ("adaptive_layer", "2d_matryoshka"):
        with pytest.raises(ValueError, match="cannot wrap --loss esimcse: its loss"):
            simcse_objective(loss=wrapper, loss_args={"loss": "esimcse", "matryoshka_dims": [32, 16]}
                             if wrapper == "2d_matryoshka" else {"loss": "esimcse"})


def test_builtin_declarations_follow_the_wrapper_contract():
    """Every built-in objective whose loss is called by Matryoshka is pure under repeated calls on prefixes:
    two calls on the same embeddings give the same value and leave no per-call state (the documented contract)."""
    import torch

    from simcse.training.objectives import LossContext, get_objective
    from simcse.training.objectives.base import Objective

    for name in ("infonce", "mixcse", "cosent", "angle"):
        obj = get_objective(name)()
        assert obj.prefix_embeddings and obj.repeatable_loss
        emb = torch.nn.functional.normalize(torch.randn(6, 2, 16, generator=torch.Generator().manual_seed(0)), dim=-1)
        batch = {"score": torch.arange(6, dtype=torch.float32)}
        ctx = LossContext(model=torch.nn.Linear(1, 1))
        first, second = obj.loss(emb[..., :8], batch, ctx), obj.loss(emb[..., :8], batch, ctx)
        a = sum(first.values()) if isinstance(first, dict) else first
        b = sum(second.values()) if isinstance(second, dict) else second
        assert torch.equal(a, b), name
    assert not get_objective("esimcse").repeatable_loss and Objective.repeatable_loss


@pytest.mark.parametrize("loss, extra", [("esimcse", {}), ("promptbert", {"pooler_type": "prompt_mask"})])
def test_fixed_dropout_refuses_a_method_with_its_own_positive_view(txt, loss, extra):
    with pytest.raises(Exception, match=f"--fixed_dropout cannot wrap --loss {loss}: it makes its own positive view"):
        _args(model_name_or_path="m", train_file=str(txt), output_dir="o", loss=loss, fixed_dropout=True, **extra)


def test_matryoshka_refuses_a_dimension_listed_twice():
    from simcse.training.objectives.compose import simcse_objective

    with pytest.raises(ValueError, match=r"matryoshka_dims for --loss matryoshka lists \[16\] more than once"):
        simcse_objective(loss="matryoshka", loss_args={"matryoshka_dims": [32, 16, 16]})


def test_hard_negative_weight_reaches_the_argument_of_that_name_and_is_recorded_as_trained(txt, tmp_path):
    from simcse.training.build import _objective

    common = dict(model_name_or_path="m", train_file=str(txt), output_dir="o")
    for loss, extra in (("mixcse", {}), ("promptbert", {"pooler_type": "prompt_mask"})):
        m, _, _ = _args(loss=loss, hard_negative_weight=0.2, **common, **extra)
        assert _objective(m, None).hard_negative_weight == pytest.approx(0.2), loss
    # the loss_args value is what trains: the record (and so the card) says it
    m, d, t = _args(loss="mixcse", loss_args='{"hard_negative_weight": 0.5}', **common)
    assert m.hard_negative_weight == pytest.approx(0.5) and _objective(m, None).hard_negative_weight == 0.5
    from simcse.models.card import card_after_training

    card_after_training(tmp_path, (m, d, t), {})
    assert json.loads((tmp_path / "simcse_training_args.json").read_text())["hard_negative_weight"] == 0.5
    assert "| hard_negative_weight | `0.5` |" in (tmp_path / "README.md").read_text()
    with pytest.raises(Exception, match="disagree: give the weight once"):
        _args(loss="mixcse", loss_args='{"hard_negative_weight": 0.0}', hard_negative_weight=0.2, **common)
    with pytest.raises(Exception, match="--loss cosent has no hard-negative weight"):
        _args(loss="cosent", hard_negative_weight=0.2, **common)
    m, _, _ = _args(loss="cosent", **common)
    assert m.hard_negative_weight is None  # nothing of the kind trained
    # through a wrapper, to the objective it wraps
    m, _, _ = _args(loss="matryoshka", loss_args='{"matryoshka_dims": [32, 16]}', hard_negative_alpha=2.0, **common)
    assert _objective(m, None).inner.hard_negative_alpha == 2.0


def test_hard_negative_weight_reaches_a_custom_objective(txt):
    import torch

    from simcse.training.build import _objective
    from simcse.training.objectives import OBJECTIVES, Objective, register_objective

    class Weighted(Objective):
        name = "test_weighted_hn"

        def __init__(self, hard_negative_weight: float = 0.0):
            super().__init__()
            self.hard_negative_weight = hard_negative_weight

        def loss(self, embeddings, batch, context):
            return embeddings.sum() * 0

    register_objective(Weighted, replace=True)
    try:
        m, _, _ = _args(model_name_or_path="m", train_file=str(txt), output_dir="o", loss="test_weighted_hn",
                        hard_negative_weight=0.3)
        assert _objective(m, None).hard_negative_weight == pytest.approx(0.3)
    finally:
        OBJECTIVES.pop("test_weighted_hn", None)
    del torch


@pytest.mark.parametrize("loss", ["esimcse", "mixcse", "simcse_pp"])
def test_a_triplet_file_is_refused_by_an_objective_that_never_uses_its_hard_negatives(tiny_bert_dir, tmp_path, loss):
    data = _csv(tmp_path / "nli.csv", ["sent0", "sent1", "hard_neg"])
    msg = training_error(_argv(tiny_bert_dir, data, tmp_path / "o", "--loss", loss))
    assert f"--loss {loss} does not use the column(s) ['hard_neg']" in msg


@pytest.mark.parametrize("loss", ["cosent", "angle"])
def test_scored_objectives_refuse_a_hard_negative_column_at_setup(tiny_bert_dir, tmp_path, loss):
    data = _csv(tmp_path / "s.csv", ["sent0", "sent1", "hard_neg", "score"])
    msg = training_error(_argv(tiny_bert_dir, data, tmp_path / "o", "--loss", loss, "--eval_before_training", "true"))
    assert f"--loss {loss} does not use the column(s) ['hard_neg']" in msg


# ------------------------------------------------------------------------------------------ options and values
@pytest.mark.parametrize("loss_args", ['{"cosine_tau": NaN}', '{"angle_w": Infinity}', {"ibn_w": -math.inf}])
def test_non_finite_loss_args_are_refused(loss_args):
    from simcse.training.objectives.compose import simcse_objective

    with pytest.raises(ValueError, match="must be a finite number"):
        simcse_objective(loss="angle", loss_args=loss_args)


def test_one_boolean_rule_for_loss_args_and_the_python_entry(txt):
    from simcse.training.objectives.compose import simcse_objective

    assert simcse_objective(loss="diffcse", loss_args={"batchnorm": "false"}).batchnorm is False
    assert simcse_objective(loss="infocse", loss_args={"batchnorm": "no"}).batchnorm is False
    assert simcse_objective(loss="diffcse", loss_args={"batchnorm": "TRUE"}).batchnorm is True
    with pytest.raises(ValueError, match="--loss_args batchnorm for --loss diffcse must be true or false"):
        simcse_objective(loss="diffcse", loss_args={"batchnorm": "off-ish"})
    common = dict(model_name_or_path="m", train_file=str(txt), output_dir="o")
    m, d, t = _args(do_mlm="false", eval_before_training="0", use_cpu="yes", **common)
    assert m.do_mlm is False and d.eval_before_training is False and t.use_cpu is True
    with pytest.raises(Exception, match="--do_mlm must be true or false"):
        _args(do_mlm="maybe", **common)
    with pytest.raises(Exception, match="--fp16 must be true or false"):
        _args(fp16=2, **common)


def test_command_line_booleans_follow_the_same_rule():
    from simcse.training.build import SetupError
    from simcse.training.parser import parse_command_line

    assert parse_command_line(["--do_mlm", "yes"]).options["do_mlm"] is True
    with pytest.raises(SetupError, match="must be true or false"):
        parse_command_line(["--do_mlm", "maybe"])


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity"])
def test_a_non_finite_score_is_refused_naming_file_and_line(tiny_bert_dir, tmp_path, value):
    data = _csv(tmp_path / "s.csv", ["sent0", "sent1", "score"], cell={(2, "score"): value})
    msg = training_error(_argv(tiny_bert_dir, data, tmp_path / "o", "--loss", "cosent"))
    assert str(data) in msg and f"column 'score' of line 4 is {value!r}; expected a finite number" in msg


def test_build_trainer_leaves_the_callers_arguments_unchanged(tiny_bert_dir, txt, tmp_path):
    import copy

    from simcse.training.train import build_trainer

    m, d, t = _args(model_name_or_path=str(tiny_bert_dir), train_file=str(txt), output_dir=str(tmp_path / "o"),
                    pooler_type="avg", use_cpu=True, eval_strategy="no", eval_before_training=False,
                    test_after_training=False, report_to="none", max_steps=1, dataloader_pin_memory=False)
    before = copy.deepcopy(vars(t))
    assert t.ddp_find_unused_parameters is None
    build_trainer(m, d, t)
    assert t.ddp_find_unused_parameters is None
    plain = (str, int, float, bool, type(None))
    assert {k: v for k, v in vars(t).items() if isinstance(v, plain)} == \
        {k: v for k, v in before.items() if isinstance(v, plain)}


def test_a_prompt_as_long_as_max_seq_length_is_refused(tiny_bert_dir, txt, tmp_path):
    long_prompt = " ".join(random_sentences(3, seed=1)) + " : "
    msg = training_error(_argv(tiny_bert_dir, txt, tmp_path / "o", "--max_seq_length", "8",
                               "--prompts", json.dumps({"sent0": long_prompt})))
    assert "--prompts sent0: the prompt is" in msg and "--max_seq_length 8 cuts every sentence away" in msg


# ------------------------------------------------------------------------------------------ resume
def test_resuming_with_another_loss_is_refused_at_setup(tiny_bert_dir, txt, tmp_path):
    from conftest import run_training

    out = tmp_path / "o"
    run_training(_argv(tiny_bert_dir, txt, out, "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1"))
    ck = out / "checkpoint-1"
    assert json.loads((ck / "simcse_objective.json").read_text())["loss"] == "infonce"
    msg = training_error(_argv(tiny_bert_dir, txt, out, "--max_steps", "2", "--loss", "mixcse",
                               "--resume_from_checkpoint", str(ck)))
    assert f"--resume_from_checkpoint {str(ck)!r} was written by a run with --loss infonce; this run has --loss mixcse" in msg
    # the same objective with other arguments: a resumed optimizer would keep the old ones' state (half applied)
    msg = training_error(_argv(tiny_bert_dir, txt, out, "--max_steps", "2", "--temp", "0.1",
                               "--resume_from_checkpoint", str(ck)))
    assert "was written with other --loss infonce arguments (temp 0.05 -> 0.1)" in msg
    run_training(_argv(tiny_bert_dir, txt, out, "--max_steps", "2", "--resume_from_checkpoint", str(ck)))  # the same: resumes


@pytest.mark.parametrize("written, world", [(1, 2), (2, 1)])
def test_objective_state_of_another_process_count_names_the_true_reason(tmp_path, written, world):
    import types

    import torch

    from simcse.training.checkpoints import CheckpointHooks

    names = ["objective_state.pt"] if written == 1 else [f"objective_state_{r}.pt" for r in range(written)]
    for n in names:
        torch.save({}, tmp_path / n)
    obj = types.SimpleNamespace(name="esimcse", state_dict=lambda: {"queue": torch.zeros(1)})
    trainer = types.SimpleNamespace(objective=obj, args=types.SimpleNamespace(process_index=0, world_size=world))
    with pytest.raises(ValueError, match=f"per-process state .* of {written} process\\(es\\), and this run has {world}"):
        CheckpointHooks._load_objective_state(trainer, str(tmp_path))


def test_python_dash_m_simcse_train_records_a_resume_command_with_train(monkeypatch):
    import sys

    from simcse.files.errors import running_command
    from simcse.training.train import resume_command, run_command

    monkeypatch.setattr(sys, "argv", ["/x/site-packages/simcse/__main__.py", "train", "--max_steps", "3"])
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with running_command("train"):
        assert run_command(["--max_steps", "3"]) == "python -m simcse train --max_steps 3"
        assert resume_command(["--max_steps", "3"], "o/checkpoint-2") == \
            "python -m simcse train --max_steps 3 --resume_from_checkpoint o/checkpoint-2"
    monkeypatch.setenv("WORLD_SIZE", "2")
    with running_command("train"):
        assert run_command(["--max_steps", "3"]) == "torchrun --nproc_per_node=2 -m simcse train --max_steps 3"


# ------------------------------------------------------------------------------------------ LoRA and decoders
def _decoder_common(train):
    return ["--train_file", str(train), "--per_device_train_batch_size", "8", "--max_steps", "1",
            "--learning_rate", "1e-3", "--use_cpu", "true", "--eval_strategy", "no", "--save_strategy", "no",
            "--eval_before_training", "false", "--test_after_training", "false", "--report_to", "none",
            "--dataloader_pin_memory", "false", "--seed", "0", "--pooler_type", "avg", "--save_on_signal", "none"]


def _adapter_base(folder) -> str:
    return json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]


@pytest.mark.slow
def test_llm2vec_lora_chain_records_the_true_base_and_merges(tmp_path, txt):
    import torch

    from conftest import run_training
    from decoder_models import make_tiny_decoder
    from simcse import SimCSE

    pytest.importorskip("peft")
    folder = make_tiny_decoder(tmp_path / "llama", "llama")
    common = _decoder_common(txt)
    run_training(["--model_name_or_path", str(folder), "--output_dir", str(tmp_path / "mntp"), "--bidirectional", "true",
                  "--loss", "mntp", "--lora_r", "4", *common])
    assert _adapter_base(tmp_path / "mntp") == str(folder.resolve())
    trained = run_training(["--model_name_or_path", str(tmp_path / "mntp"), "--output_dir", str(tmp_path / "simcse"),
                            "--lora_r", "4", *common])
    assert _adapter_base(tmp_path / "simcse") == str((tmp_path / "mntp").resolve())
    sentences = ["a man plays music .", "the dog runs in the park ."]
    with torch.no_grad():
        want = trained.model.eval().encode(sentences)
    got = SimCSE(str(tmp_path / "simcse")).encode(sentences, normalize_to_unit=False)
    assert torch.allclose(torch.as_tensor(got), torch.as_tensor(want), atol=1e-5)
    run_training(["--model_name_or_path", str(tmp_path / "mntp"), "--output_dir", str(tmp_path / "merged"),
                  "--lora_r", "4", "--merge_lora", "true", *common])
    assert (tmp_path / "merged" / "model.safetensors").is_file()


@pytest.mark.slow
def test_an_adapter_from_a_relative_model_path_records_the_absolute_path(tmp_path, txt, monkeypatch):
    from conftest import run_training
    from decoder_models import make_tiny_decoder

    pytest.importorskip("peft")
    make_tiny_decoder(tmp_path / "llama", "llama")
    monkeypatch.chdir(tmp_path)
    run_training(["--model_name_or_path", "llama", "--output_dir", "out", "--lora_r", "4", *_decoder_common(txt)])
    assert _adapter_base(tmp_path / "out") == str((tmp_path / "llama").resolve())


def test_esimcse_with_lora_is_refused(txt):
    with pytest.raises(Exception, match="--loss esimcse does not train with LoRA"):
        _args(model_name_or_path="m", train_file=str(txt), output_dir="o", loss="esimcse", lora_r=4)


@pytest.mark.slow
def test_mntp_on_a_folder_without_an_lm_head_is_refused(tmp_path, txt):
    from conftest import run_training
    from decoder_models import make_tiny_decoder

    folder = make_tiny_decoder(tmp_path / "llama", "llama")  # an untied head
    common = _decoder_common(txt)
    run_training(["--model_name_or_path", str(folder), "--output_dir", str(tmp_path / "simcse"), *common])
    msg = training_error(["--model_name_or_path", str(tmp_path / "simcse"), "--output_dir", str(tmp_path / "again"),
                          "--bidirectional", "true", "--loss", "mntp", *common])
    assert "--loss mntp predicts tokens with the model's LM head" in msg and "has none" in msg


# ------------------------------------------------------------------------------------------ several processes
def test_matryoshka_draws_are_the_same_on_every_rank():
    import torch

    from simcse.training.objectives import LossContext
    from simcse.training.objectives.compose import simcse_objective
    from simcse.training.objectives.matryoshka import _draw

    obj = simcse_objective(loss="matryoshka", loss_args={"matryoshka_dims": [32, 16, 8, 4], "n_dims_per_step": 1})
    emb = torch.randn(4, 2, 32, generator=torch.Generator().manual_seed(0))
    for step in range(8):
        ctx = [LossContext(model=None, rank=r, global_step=step, seed=0) for r in (0, 1)]  # only the rank differs
        assert obj.loss(emb, {}, ctx[0]).keys() == obj.loss(emb, {}, ctx[1]).keys(), step
        assert _draw(6, 1, ctx[0], salt=2) == _draw(6, 1, ctx[1], salt=2), step  # 2D Matryoshka's layer draw


@pytest.mark.parametrize("loss", ["cosent", "angle"])
def test_scored_objectives_rank_every_process_pair(loss):
    """Rank 0 of two processes computes the loss of the whole batch (its pairs and rank 1's), as one process
    holding all pairs would; before, it ranked its own 4 pairs only."""
    import torch

    from simcse.training.objectives import LossContext, get_objective

    g = torch.Generator().manual_seed(0)
    emb, scores = torch.randn(8, 2, 16, generator=g), torch.tensor([0., 5, 1, 4, 2, 3, 5, 0])
    obj = get_objective(loss)()
    one = obj.loss(emb, {"score": scores}, LossContext(model=None))
    ctx = LossContext(model=None, rank=0, world=2, gather=lambda t: torch.cat([t, emb[4:]]),
                      gather_nograd=lambda t: torch.cat([t, scores[4:]]))
    two = obj.loss(emb[:4], {"score": scores[:4]}, ctx)
    total = (lambda x: sum(x.values()) if isinstance(x, dict) else x)
    assert torch.allclose(total(two), total(one))


@pytest.mark.parametrize("loss, extra", [("esimcse", ["--loss_args", '{"dup_rate": 0.32}']),
                                         ("promptbert", ["--pooler_type", "prompt_mask"])])
def test_rows_the_objective_lengthens_must_fit_the_positions(tiny_bert_dir, txt, tmp_path, loss, extra):
    """The tiny BERT takes 64 tokens: --max_seq_length 64 passes the plain check, but word repetition (up to 9
    tokens) or PromptBERT's template would index past the position table at a long row."""
    msg = training_error(_argv(tiny_bert_dir, txt, tmp_path / "o", "--max_seq_length", "64", "--loss", loss, *extra))
    assert f"--loss {loss} lengthens each row by up to" in msg and "more than the 64 tokens" in msg


def test_objective_state_of_another_process_count_is_refused_at_setup(tmp_path):
    import torch

    from simcse.training.checkpoints import check_resume_objective

    torch.save({}, tmp_path / "objective_state.pt")  # one process wrote an ESimCSE queue
    (tmp_path / "simcse_objective.json").write_text(json.dumps({"loss": "esimcse"}))
    check_resume_objective(tmp_path, "esimcse", world=1)
    with pytest.raises(ValueError, match=r"of 1 process\(es\), and this run has 2: resume with 1 process"):
        check_resume_objective(tmp_path, "esimcse", world=2)


def test_temp_fills_an_objective_only_when_given():
    """Unset --temp leaves an objective its own default (a custom default 0.1 is not replaced by 0.05); a given
    --temp fills it; --temp and --loss_args temp that disagree are refused."""
    from simcse.training.objectives import Objective, register_objective
    from simcse.training.objectives.compose import simcse_objective

    class WarmTemp(Objective):
        name = "test_warm_temp"

        def __init__(self, temp: float = 0.1):
            super().__init__()
            self.temp = temp

        def loss(self, embeddings, batch, context):
            return embeddings.sum() * 0

    register_objective(WarmTemp, replace=True)
    assert simcse_objective(loss="test_warm_temp").temp == 0.1
    assert simcse_objective(temp=0.2, loss="test_warm_temp").temp == 0.2
    assert simcse_objective(loss="infonce").temp == 0.05
    with pytest.raises(ValueError, match="--temp 0.2 and --loss_args temp 0.1 disagree"):
        simcse_objective(temp=0.2, loss="test_warm_temp", loss_args={"temp": 0.1})
