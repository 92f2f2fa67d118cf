"""simcse.research.ablation and the ablation flags it runs (paper Tables 1, 2, 3, 6, 7; train.build), on the tiny
models of conftest; the two-encoder model of simcse.models.dual_encoder."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SENTENCES, random_sentences, training_error, write_csv, write_senteval
from simcse.training import train as train_mod

REPO = Path(__file__).resolve().parents[2]


def _argv(model_dir, train_file, out, *extra):
    return ["--model_name_or_path", str(model_dir), "--train_file", str(train_file), "--output_dir", str(out),
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--max_steps", "2",
            "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--logging_steps", "1",
            "--eval_before_training", "false", "--test_after_training", "false", "--seed", "0", "--use_cpu", "true",
            "--dataloader_pin_memory", "false", "--pooler_type", "cls", "--mlp_only_train", "true", *extra]


def _build(argv):
    model_args, data_args, training_args = train_mod.parse_args(argv)
    return train_mod.build(model_args, data_args, training_args)


_error = training_error


def _first_batch(trainer):
    return next(iter(trainer.get_train_dataloader()))


def test_dropout_zero_makes_the_views_identical_and_p_changes_the_noise(tmp_path, tiny_bert_dir, train_txt):
    # tiny_bert_dir was saved with dropout 0.1
    z_by_p = {}
    for p in ("0", "0.1", "0.5"):
        trainer = _build(_argv(tiny_bert_dir, train_txt, tmp_path / p, "--dropout", p))
        model = trainer.model
        assert model.encoder.config.hidden_dropout_prob == float(p)
        assert model.encoder.config.attention_probs_dropout_prob == float(p)
        model.train()
        torch.manual_seed(0)
        z_by_p[p] = trainer._embed(model, _first_batch(trainer)).detach()  # (B, 2, H)
    gap = {p: (z[:, 0] - z[:, 1]).norm(dim=-1).mean().item() for p, z in z_by_p.items()}
    assert torch.equal(z_by_p["0"][:, 0], z_by_p["0"][:, 1])  # no dropout: both views identical
    assert 0 < gap["0.1"] < gap["0.5"], gap


def test_dropout_is_saved_with_the_model(tmp_path, tiny_bert_dir, train_txt):
    out = tmp_path / "out"
    train_mod.main(_argv(tiny_bert_dir, train_txt, out, "--dropout", "0.2"))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["hidden_dropout_prob"] == cfg["attention_probs_dropout_prob"] == 0.2


# ------------------------------------------------------------------------------------- fixed dropout
def test_fixed_dropout_gives_equal_views_from_one_encoding(tmp_path, tiny_bert_dir, train_txt):
    trainer = _build(_argv(tiny_bert_dir, train_txt, tmp_path / "o", "--dropout", "0.1", "--fixed_dropout", "true"))
    model = trainer.model
    model.train()
    batch = _first_batch(trainer)
    rows = []
    hook = model.register_forward_hook(lambda m, a, kw, out: rows.append(kw["input_ids"].shape[0]), with_kwargs=True)
    z = trainer._embed(model, batch)
    hook.remove()
    assert rows == [batch["input_ids"].shape[0]]  # B rows, not 2B: one pass, one mask per sentence
    assert torch.equal(z[:, 0], z[:, 1])
    # ...and the views still carry dropout noise (differs from the no-dropout embedding)
    model.eval()
    with torch.no_grad():
        z_eval = model(**{k: batch[k][:, 0] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch})
    assert not torch.allclose(z[:, 0].detach(), z_eval)


def test_fixed_dropout_gradient_equals_two_passes_with_the_same_mask(tmp_path, tiny_bert_dir, train_txt):
    trainer = _build(_argv(tiny_bert_dir, train_txt, tmp_path / "o", "--dropout", "0.1", "--fixed_dropout", "true"))
    model = trainer.model
    model.train()
    batch = _first_batch(trainer)
    one = {k: batch[k][:, 0] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    params = [p for p in model.parameters() if p.requires_grad]

    state = torch.get_rng_state()
    loss_fixed = trainer.contrastive_loss(trainer._embed(model, batch))
    g_fixed = torch.autograd.grad(loss_fixed, params, allow_unused=True)

    torch.set_rng_state(state)
    z1 = model(**one)
    torch.set_rng_state(state)  # replay: the second view draws exactly the same dropout masks
    z2 = model(**one)
    assert torch.equal(z1, z2)
    loss_two = trainer.contrastive_loss(torch.stack([z1, z2], dim=1))
    g_two = torch.autograd.grad(loss_two, params, allow_unused=True)
    assert torch.allclose(loss_fixed, loss_two)
    for a, b in zip(g_fixed, g_two):
        if a is None or b is None:
            assert a is None and b is None
        else:
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)


def test_fixed_dropout_needs_identical_views(tmp_path, tiny_bert_dir):
    f = write_csv(tmp_path / "pairs.csv", ["sent0", "sent1"], [[s, s] for s in SENTENCES])
    assert "one-sentence-per-line" in _error(_argv(tiny_bert_dir, f, tmp_path / "o", "--fixed_dropout", "true"))
    assert "--fixed_dropout" in _error(_argv(tiny_bert_dir, f, tmp_path / "o", "--fixed_dropout", "true",
                                             "--augmentation", "crop"))


def test_mlm_augmentation_without_mlm_head_is_a_clear_error(tmp_path, tiny_bert_dir, train_txt):
    msg = _error(_argv(tiny_bert_dir, train_txt, tmp_path / "o", "--augmentation", "mlm", "--augmentation_ratio", "0.15"))
    assert "masked-LM head" in msg and str(tiny_bert_dir) in msg


@pytest.mark.parametrize("aug, with_dropout", [("word_deletion", "true"), ("mlm", "false")])
def test_augmentation_trains_end_to_end(tmp_path, tiny_mlm_dir, train_txt, aug, with_dropout):
    trainer = _build(_argv(tiny_mlm_dir, train_txt, tmp_path / "o", "--augmentation", aug,
                           "--augmentation_ratio", "0.2", "--augmentation_with_dropout", with_dropout))
    expected_p = 0.1 if with_dropout == "true" else 0.0  # "instead of dropout": every dropout off
    assert trainer.model.encoder.config.hidden_dropout_prob == expected_p
    batch = _first_batch(trainer)
    assert batch["input_ids"].shape[:2] == (8, 2)
    assert not torch.equal(batch["input_ids"][:, 0], batch["input_ids"][:, 1])
    before = trainer.model.encoder.embeddings.word_embeddings.weight.detach().clone()
    out = trainer.train()
    assert out.global_step == 2
    assert not torch.equal(before, trainer.model.encoder.embeddings.word_embeddings.weight)


def test_augmentation_argument_checks(tmp_path, tiny_bert_dir, train_txt):
    assert "--augmentation must be one of" in _error(_argv(tiny_bert_dir, train_txt, tmp_path / "o", "--augmentation", "synonym"))
    assert "--augmentation_ratio" in _error(_argv(tiny_bert_dir, train_txt, tmp_path / "o", "--augmentation", "crop",
                                                  "--augmentation_ratio", "1.5"))
    assert "contradicts --dropout" in _error(_argv(tiny_bert_dir, train_txt, tmp_path / "o", "--augmentation", "crop",
                                                   "--augmentation_with_dropout", "false", "--dropout", "0.1"))


def test_next_sentence_objective_trains_on_consecutive_pairs(tmp_path, tiny_bert_dir):
    f = tmp_path / "doc.txt"
    lines = random_sentences(40, seed=4)
    f.write_text("\n".join(lines[:20]) + "\n\n" + "\n".join(lines[20:]) + "\n")
    trainer = _build(_argv(tiny_bert_dir, f, tmp_path / "o", "--objective", "next_sentence"))
    assert len(trainer.train_dataset) == 38  # 19 pairs per 20-line block
    assert trainer.train()
    assert "must be a .txt" in _error(_argv(tiny_bert_dir, write_csv(tmp_path / "p.csv", ["sent0", "sent1"], [["a", "b"]]),
                                            tmp_path / "o2", "--objective", "next_sentence"))
    assert "--positives must be one of" in _error(_argv(tiny_bert_dir, f, tmp_path / "o3", "--objective", "next_word"))


# ------------------------------------------------------------------------------------- two encoders
def test_two_encoders_route_views_train_apart_and_save_both(tmp_path, tiny_bert_dir, train_txt):
    from simcse.models.dual_encoder import SECOND_ENCODER_DIR, DualEncoderModel
    from simcse.models.modeling import SimCSEModel

    out = tmp_path / "out"
    argv = _argv(tiny_bert_dir, train_txt, out, "--two_encoders", "true", "--max_steps", "3")
    trainer = _build(argv)
    model = trainer.model
    assert isinstance(model, DualEncoderModel)
    model.eval()
    batch = _first_batch(trainer)
    z = trainer._embed(model, batch)
    with torch.no_grad():
        one = {k: batch[k][:, 1] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        assert torch.allclose(z[:, 1], model.second(**one))  # view 1 by the second encoder
        assert torch.allclose(z[:, 0], model.first(**one))  # identical copies at the start
    train_mod.main(argv)
    first = SimCSEModel.from_pretrained(out)
    second = SimCSEModel.from_pretrained(out / SECOND_ENCODER_DIR)
    w0 = SimCSEModel.from_pretrained(tiny_bert_dir).encoder.embeddings.word_embeddings.weight
    w1, w2 = first.encoder.embeddings.word_embeddings.weight, second.encoder.embeddings.word_embeddings.weight
    assert not torch.equal(w1, w0) and not torch.equal(w2, w0) and not torch.equal(w1, w2)  # trained separately
    reloaded = DualEncoderModel(SimCSEModel.from_pretrained(tiny_bert_dir))
    reloaded.load_weights(out)
    assert torch.equal(reloaded.second.encoder.embeddings.word_embeddings.weight, w2)


# ---------------------------------------------------------------------------- hard / neutral negatives
def test_neutral_negatives_add_a_fourth_view_to_the_loss(tmp_path, tiny_bert_dir):
    from simcse.training.losses import cosine_logits

    rows = [[s, s + " too", SENTENCES[(i + 3) % 12], SENTENCES[(i + 6) % 12]] for i, s in enumerate(SENTENCES)]
    f = write_csv(tmp_path / "nli.csv", ["sent0", "sent1", "hard_neg", "neutral"], rows)
    trainer = _build(_argv(tiny_bert_dir, f, tmp_path / "o", "--neutral_as_negative", "true", "--hard_negative_alpha", "2.0"))
    batch = _first_batch(trainer)
    assert batch["input_ids"].shape[1] == 4
    z = torch.randn(8, 4, 5, generator=torch.Generator().manual_seed(0))
    logits = torch.cat([cosine_logits(z[:, 0], z[:, v], 0.05) for v in (1, 2, 3)], dim=1)  # (8, 24)
    logits[torch.arange(8), 8 + torch.arange(8)] += np.log(2.0)
    expected = torch.nn.functional.cross_entropy(logits, torch.arange(8))
    assert torch.allclose(trainer.contrastive_loss(z), expected)
    assert trainer.train().global_step == 2


def test_neutral_flag_errors_without_a_neutral_column(tmp_path, tiny_bert_dir, train_txt):
    triplets = write_csv(tmp_path / "nli_for_simcse.csv", ["sent0", "sent1", "hard_neg"],
                          [[s, s, SENTENCES[(i + 1) % 12]] for i, s in enumerate(SENTENCES)])
    msg = _error(_argv(tiny_bert_dir, triplets, tmp_path / "o", "--neutral_as_negative", "true"))
    assert "needs a CSV with 'sent0,sent1,hard_neg,neutral' columns" in msg
    assert "neutral" in _error(_argv(tiny_bert_dir, train_txt, tmp_path / "o", "--neutral_as_negative", "true"))


def test_no_hard_negatives_trains_on_pairs(tmp_path, tiny_bert_dir):
    f = write_csv(tmp_path / "nli.csv", ["sent0", "sent1", "hard_neg"],
                   [[s, s + " too", SENTENCES[(i + 1) % 12]] for i, s in enumerate(SENTENCES)])
    trainer = _build(_argv(tiny_bert_dir, f, tmp_path / "o", "--no_hard_negatives", "true"))
    assert _first_batch(trainer)["input_ids"].shape[1] == 2
    trainer = _build(_argv(tiny_bert_dir, f, tmp_path / "o"))
    assert _first_batch(trainer)["input_ids"].shape[1] == 3


# ------------------------------------------------------------------------------------ run_ablation.py
def _runner():
    import simcse.research.ablation

    return simcse.research.ablation


def test_every_ablation_config_is_an_arm_of_its_tables_spec(tmp_path, tiny_bert_dir, train_txt):
    """Every configs/ablations/table<T>_<row>.json is an arm of the packaged spec ablation_table<T>, each parses as
    simcse train options and carries the paper's number; Table 3's rows are in the paper's order."""
    from simcse.experiments.spec import arm_meta, parse_spec

    ra = _runner()
    nli = write_csv(tmp_path / "nli.csv", ["sent0", "sent1", "hard_neg"], [["a", "b", "c"]])
    n = 0
    for table in ra.TABLES:
        raw = ra.table_spec_raw(table)
        spec = parse_spec(raw, f"ablation_table{table}")
        for name, arm in spec.arms.items():
            if arm.kind == "untrained":
                continue
            assert arm.config == f"ablations/table{table}_{name}"
            cfg = {k: v for k, v in json.loads((REPO / "configs" / f"{arm.config}.json").read_text()).items()
                   if not k.startswith("_") and k != "base"}
            cfg.update(model_name_or_path=str(tiny_bert_dir), output_dir=str(tmp_path / "o"))
            cfg["train_file"] = str(nli if str(arm.options.get("train_file", "")).endswith(".csv") else train_txt)
            argv = [x for k, v in cfg.items() for x in (f"--{k}", str(v))]
            train_mod.parse_args(argv)  # every key is a known, valid argument
            meta = arm_meta(spec, arm)
            assert isinstance(meta["paper"], float) and meta["label"]
            n += 1
    assert n == len(list((REPO / "configs" / "ablations").glob("table*.json")))
    t3 = ra.table_spec_raw("3")["arms"]
    assert list(t3) == ["untrained", "p0.0", "p0.01", "p0.05", "p0.1", "p0.15", "p0.2", "p0.5", "fixed0.1"]
    spec = parse_spec(ra.table_spec_raw("3"), "t3")
    assert [arm_meta(spec, a)["paper"] for a in spec.arms.values()][1:] == [71.1, 72.6, 81.1, 82.5, 81.4, 80.5,
                                                                           71.0, 43.6]
    with pytest.raises(ValueError, match="unknown row"):
        ra.table_spec("3", rows=["p0.3"])


def test_stsb_dev_of_the_runner_matches_the_trainer_evaluation(tmp_path, tiny_bert_dir):
    """The runner's scorer (simcse.experiments.score) on STS-B dev equals the trainer's eval_stsb_spearman, and
    measures alignment and uniformity from the same encoding."""
    from simcse.evaluation import evaluate_sts_dev
    from simcse.experiments.score import score
    from simcse.models.modeling import SimCSEModel

    data = write_senteval(tmp_path / "downstream")
    model = SimCSEModel.from_pretrained(tiny_bert_dir, pooler_type="cls_before_pooler")
    _, ours = score(model, ["STSBenchmark"], "dev", str(data), alignment=True)
    ref = evaluate_sts_dev(model.encode, str(data))["stsb_spearman"]
    assert ours["spearman"]["STSBenchmark"] == pytest.approx(100 * ref, abs=1e-9)
    assert 0 <= ours["align"] <= 4 and ours["uniform"] <= 0


@pytest.mark.slow
def test_run_ablation_end_to_end_writes_the_report_and_figures(tmp_path, tiny_bert_dir, train_txt, capsys):
    """scripts/run_ablation.py --table 3 on a tiny model: the untrained model and two rows through the experiment
    runner; the report has the paper's number beside ours, alignment/uniformity, and Figures 2 and 3; a rerun
    trains nothing."""
    data = write_senteval(tmp_path / "downstream")
    out = tmp_path / "abl"
    argv = ["--table", "3", "--rows", "p0.0", "fixed0.1", "--model_name_or_path", str(tiny_bert_dir),
            "--train_file", str(train_txt), "--senteval_dir", str(data), "--max_steps", "2",
            "--per_device_train_batch_size", "8", "--seeds", "42", "--output_dir", str(out)]
    res = _runner().main(argv + ["--align_every", "1"])
    assert sorted(res["results"]) == ["fixed0.1/seed42", "p0.0/seed42", "untrained/seed42"]
    assert all(r["status"] == "done" for r in res["results"].values())
    report = json.loads((out / "report.json").read_text())
    for arm in ("p0.0", "fixed0.1"):
        a = report["arms"][arm]
        assert a["costs"]["steps"] == 2 and np.isfinite(a["tasks"]["STSBenchmark"]["mean"])
        assert 0 <= a["costs"]["align"] <= 4 and a["costs"]["uniform"] <= 0
        options = json.loads((out / "runs" / arm / "seed42" / "config.json").read_text())
        assert options["per_device_train_batch_size"] == 8 and options["max_train_samples"] == 16
        assert [c["step"] for c in a["costs"]["curve"]] == [1, 2]  # --align_every 1
        assert a["costs"]["curve"][-1]["align"] == pytest.approx(a["costs"]["align"], abs=1e-4)
    assert report["arms"]["p0.0"]["paper"] == 71.1 and report["spec"]["models"] == [str(tiny_bert_dir)]
    text = (out / "report.md").read_text()
    assert "| p = 0.0 | 1 of 1 seeds |" in text and "| 71.1 |" in text and "| 43.6 |" in text
    for png in ("training_curve.png", "align_uniform.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = _runner().main(argv + ["--align_every", "1"])  # finished rows are read back, not retrained
    assert again["results"] == {}
    assert "3 done before, 0 to run" in capsys.readouterr().out
