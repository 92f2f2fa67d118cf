"""Training from --dataset_name (simcse.training.sources): a Hub-layout folder and a save_to_disk folder train exactly
as the same data given as --train_file (every downstream option), column mapping and its one-line errors, configs
that name a dataset, and --streaming (max_steps, resume from the stream's saved position)."""
import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import (
    csv_rows,
    logged_losses,
    make_mlm_model,
    random_sentences,
    run_training,
    training_error,
)

from simcse.training.sources import view_columns

datasets = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    make_mlm_model(root / "model")  # with an MLM head for --do_mlm
    sents = random_sentences(64, seed=3)
    (root / "train.txt").write_text("\n".join(sents) + "\n")
    hub = root / "hub"
    (hub / "data").mkdir(parents=True)
    (hub / "data" / "wiki.txt").write_text("\n".join(sents) + "\n")
    (hub / "data" / "other.txt").write_text("\n".join(reversed(sents)) + "\n")
    (hub / "README.md").write_text("---\nconfigs:\n- config_name: wiki\n  data_files:\n  - split: train\n"
                                   "    path: data/wiki.txt\n- config_name: reversed\n  data_files:\n"
                                   "  - split: train\n    path: data/other.txt\n---\n")
    rows = csv_rows(48, 3, seed=4)
    rows[5][0] = rows[9][0]  # a repeated text, so that the no_duplicates sampler has work to do
    with open(root / "triplets.csv", "w", newline="") as f:
        csv.writer(f).writerows([("sent0", "sent1", "hard_neg"), *rows])
    datasets.Dataset.from_dict({"premise": [r[0] for r in rows], "hypothesis": [r[1] for r in rows],
                                "contradiction": [r[2] for r in rows], "id": list(range(len(rows)))}
                               ).save_to_disk(root / "nli_disk")
    return root


def _argv(data, out, *source, steps=8, extra=()):
    return ["--model_name_or_path", str(data / "model"), "--pooler_type", "cls", *source, "--output_dir", str(out),
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--max_steps", str(steps),
            "--save_strategy", "no", "--eval_strategy", "no", "--logging_steps", "1", "--report_to", "none",
            "--use_cpu", "true", "--dataloader_pin_memory", "false", "--eval_before_training", "false",
            "--test_after_training", "false", "--seed", "0", *extra]


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


# ------------------------------------------------------------------------------------------ column mapping
def _args(**kw):
    base = dict(dataset_name="d", sentence_column="text", sent0_column="sent0", sent1_column="sent1",
                hard_neg_column="hard_neg", neutral_as_negative=False, no_hard_negatives=False)
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("have, kw, expected", [
    (["text", "id"], {}, [("text", "sent0")]),
    (["sent0", "sent1"], {}, [("sent0", "sent0"), ("sent1", "sent1")]),
    (["sent0", "sent1", "hard_neg", "x"], {}, [("sent0", "sent0"), ("sent1", "sent1"), ("hard_neg", "hard_neg")]),
    (["sent0", "sent1", "hard_neg"], {"no_hard_negatives": True}, [("sent0", "sent0"), ("sent1", "sent1")]),
    (["sentence", "sent0", "sent1"], {"sentence_column": "sentence"}, [("sentence", "sent0")]),
    (["a", "b", "c"], {"sent0_column": "b", "sent1_column": "a"}, [("b", "sent0"), ("a", "sent1")]),
    (["a", "b", "c"], {"sent0_column": "a", "sent1_column": "b", "hard_neg_column": "c"},
     [("a", "sent0"), ("b", "sent1"), ("c", "hard_neg")]),
    (["sent0", "sent1", "hard_neg", "neutral"], {"neutral_as_negative": True},
     [("sent0", "sent0"), ("sent1", "sent1"), ("hard_neg", "hard_neg"), ("neutral", "neutral")]),
])
def test_view_columns(have, kw, expected):
    assert view_columns(have, _args(**kw)) == expected


@pytest.mark.parametrize("have, kw, message", [
    (["sentence", "label"], {}, "dataset 'd' has no column 'text' (--sentence_column); its columns: ['sentence', 'label']"),
    (["a", "b"], {"sent0_column": "a"}, "dataset 'd' has no column 'sent1' (--sent1_column); its columns: ['a', 'b']"),
    (["sent0", "sent1"], {"hard_neg_column": "neg"}, "dataset 'd' has no column 'neg' (--hard_neg_column); its columns: ['sent0', 'sent1']"),
    (["sent0", "sent1", "hard_neg"], {"neutral_as_negative": True}, "no column 'neutral' (--neutral_as_negative)"),
])
def test_view_columns_errors_list_the_columns(have, kw, message):
    with pytest.raises(ValueError) as e:
        view_columns(have, _args(**kw))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_bad_column_stops_before_training(data, tmp_path):
    out = tmp_path / "out"
    msg = training_error(_argv(data, out, "--dataset_name", str(data / "nli_disk")))
    assert msg == (f"error: dataset {str(data / 'nli_disk')!r} has no column 'text' (--sentence_column); its columns: "
                   "['premise', 'hypothesis', 'contradiction', 'id']")
    assert not out.exists()


@pytest.mark.parametrize("extra, expected", [
    (["--train_file", "@train.txt", "--dataset_name", "@hub"], "both name the training data: give one"),
    ([], "no training data: give --train_file"),
    (["--train_file", "@train.txt", "--streaming", "true"], "--streaming apply to --dataset_name"),
    (["--dataset_name", "@hub", "--dataset_config_name", "wiki", "--streaming", "true", "--max_steps", "-1"],
     "--streaming true needs --max_steps N"),
    (["--dataset_name", "@hub", "--dataset_config_name", "wiki", "--streaming", "true",
      "--batch_sampler", "no_duplicates"], "need the whole dataset at once"),
    (["--dataset_name", "@hub", "--dataset_config_name", "nope"], "'nope'"),
])
def test_source_errors_are_one_line(data, tmp_path, extra, expected):
    extra = [str(data / a[1:]) if a.startswith("@") else a for a in extra]
    assert expected in training_error(_argv(data, tmp_path / "out", extra=extra))
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ same as --train_file
OPTIONS = {
    "plain": [],
    "mlm": ["--do_mlm", "true"],
    "gradient_cache": ["--gradient_cache_chunk_size", "4"],
    "augmentation": ["--augmentation", "word_deletion"],
    "max_train_samples": ["--max_train_samples", "24"],
}


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_hub_folder_trains_exactly_as_the_same_text_file(data, tmp_path, option):
    extra = OPTIONS[option]
    from_file = run_training(_argv(data, tmp_path / "file", "--train_file", str(data / "train.txt"), extra=extra))
    from_hub = run_training(_argv(data, tmp_path / "hub", "--dataset_name", str(data / "hub"),
                                  "--dataset_config_name", "wiki", extra=extra))
    assert len(from_hub.train_dataset) == (24 if option == "max_train_samples" else 64)
    assert logged_losses(from_hub) == logged_losses(from_file)
    a, b = _weights(tmp_path / "file"), _weights(tmp_path / "hub")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_another_config_is_other_data(data, tmp_path):
    """The README's configs are honoured: the reversed file trains differently (the comparison above can fail)."""
    wiki = run_training(_argv(data, tmp_path / "a", "--dataset_name", str(data / "hub"), "--dataset_config_name", "wiki", steps=2))
    rev = run_training(_argv(data, tmp_path / "b", "--dataset_name", str(data / "hub"), "--dataset_config_name", "reversed", steps=2))
    assert sorted(wiki.train_dataset["input_ids"]) == sorted(rev.train_dataset["input_ids"])
    assert wiki.train_dataset["input_ids"] != rev.train_dataset["input_ids"]


@pytest.mark.parametrize("extra", [[], ["--batch_sampler", "no_duplicates"]])
def test_save_to_disk_triplets_with_mapped_columns_train_as_the_csv(data, tmp_path, extra):
    from_csv = run_training(_argv(data, tmp_path / "csv", "--train_file", str(data / "triplets.csv"), extra=extra))
    mapped = ["--sent0_column", "premise", "--sent1_column", "hypothesis", "--hard_neg_column", "contradiction"]
    from_disk = run_training(_argv(data, tmp_path / "disk", "--dataset_name", str(data / "nli_disk"), *mapped, extra=extra))
    assert len(from_disk.train_dataset[0]["input_ids"]) == 3  # three views: sent0, sent1, hard_neg
    assert (from_disk.no_duplicates_rows is None) == (not extra)
    assert logged_losses(from_disk) == logged_losses(from_csv)


def test_a_config_names_a_dataset_and_the_command_line_replaces_it(data, tmp_path):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"dataset_name": str(data / "hub"), "dataset_config_name": "reversed", "temp": 0.05}))
    by_config = run_training([str(cfg), *_argv(data, tmp_path / "a", steps=1)])
    rev = [r for r in reversed(random_sentences(64, seed=3))]
    first = by_config.processing_class(rev[0], truncation=True, max_length=32)["input_ids"]
    assert by_config.train_dataset[0]["input_ids"][0] == first
    by_file = run_training([str(cfg), *_argv(data, tmp_path / "b", "--train_file", str(data / "train.txt"), steps=1)])
    assert len(by_file.train_dataset) == 64  # the config's dataset_name and its config name were dropped


# ---------------------------------------------------------------------------------------------- streaming
def _stream_argv(data, out, steps=8, extra=()):
    return _argv(data, out, "--dataset_name", str(data / "hub"), "--dataset_config_name", "wiki", "--streaming", "true",
                 steps=steps, extra=("--save_strategy", "steps", "--save_steps", "4", *extra))


def _spy(seen):
    def on_build(trainer):
        real = trainer.data_collator

        def collate(features):
            seen.extend(tuple(f["input_ids"][0]) for f in features)
            return real(features)
        trainer.data_collator = collate
    return on_build


def test_streaming_trains_max_steps_on_the_fly(data, tmp_path):
    seen = []
    trainer = run_training(_stream_argv(data, tmp_path / "out", steps=10, extra=("--shuffle_buffer_size", "16")),
                           on_build=_spy(seen))
    assert trainer.state.global_step == 10  # 80 examples from a 64-row stream: read again, as HF does for epochs
    assert len(seen) == 80 and len(set(seen[:64])) == 64  # the first pass holds every row once
    assert seen[64:] != seen[:16]  # the second pass is shuffled anew (set_epoch reaches the stream)
    tok = trainer.processing_class
    in_order = [tuple(x) for x in tok(random_sentences(64, seed=3), truncation=True, max_length=32)["input_ids"]]
    assert seen[:64] != in_order and sorted(seen[:64]) == sorted(in_order)  # shuffled, nothing lost
    assert isinstance(trainer.train_dataset.stream, datasets.IterableDataset)
    assert len(logged_losses(trainer)) == 10
    saved = json.loads((tmp_path / "out" / "checkpoint-4" / "stream_state_0.json").read_text())
    assert saved["examples"] == 32


def test_streaming_in_order_is_the_file_order(data, tmp_path):
    """Buffer 0 reads in order: the same first step as --train_file without shuffling (the file's first 8)."""
    seen = []
    trainer = run_training(_stream_argv(data, tmp_path / "out", steps=2, extra=("--shuffle_buffer_size", "0")),
                           on_build=_spy(seen))
    expected = trainer.processing_class(random_sentences(64, seed=3)[:16], truncation=True, max_length=32)["input_ids"]
    assert seen == [tuple(x) for x in expected]


@pytest.mark.parametrize("extra", [[], ["--do_mlm", "true", "--gradient_cache_chunk_size", "4"]])
def test_streaming_resume_equals_an_uninterrupted_run(data, tmp_path, extra):
    extra = ["--shuffle_buffer_size", "0", *extra]
    full = run_training(_stream_argv(data, tmp_path / "full", extra=extra))
    resumed = run_training(_stream_argv(data, tmp_path / "resumed", extra=extra)
                           + ["--resume_from_checkpoint", str(tmp_path / "full" / "checkpoint-4")])
    assert resumed.train_dataset.count == 64  # 32 examples restored from the checkpoint, 32 read after it
    assert logged_losses(resumed)[-4:] == logged_losses(full)[-4:]
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "resumed")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_streaming_resume_without_a_saved_position_is_refused(data, tmp_path):
    run_training(_argv(data, tmp_path / "mapped", "--dataset_name", str(data / "hub"), "--dataset_config_name", "wiki",
                       extra=("--save_strategy", "steps", "--save_steps", "4")))
    msg = training_error(_stream_argv(data, tmp_path / "s") + ["--resume_from_checkpoint", str(tmp_path / "mapped" / "checkpoint-4")])
    assert "has no stream position for process 0" in msg


def test_next_sentence_objective_from_a_dataset_equals_the_file(data, tmp_path):
    extra = ["--objective", "next_3_sentences"]
    from_file = run_training(_argv(data, tmp_path / "file", "--train_file", str(data / "train.txt"), steps=3, extra=extra))
    from_hub = run_training(_argv(data, tmp_path / "hub", "--dataset_name", str(data / "hub"),
                                  "--dataset_config_name", "wiki", steps=3, extra=extra))
    assert from_hub.train_dataset["input_ids"] == from_file.train_dataset["input_ids"]
    assert logged_losses(from_hub) == logged_losses(from_file)


def test_offline_hub_dataset_stops_with_one_line_naming_it(data, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    msg = training_error(_argv(data, tmp_path / "out", "--dataset_name", "princeton-nlp/datasets-for-simcse",
                               "--dataset_data_files", "wiki1m_for_simcse.txt"))
    assert "--dataset_name 'princeton-nlp/datasets-for-simcse'" in msg and "Hub cannot be reached" in msg
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------- a stream that does not divide into whole batches
def _short_hub(root, n, name="short"):
    """A Hub-layout folder of ``n`` sentences (config ``wiki``)."""
    hub = root / name
    (hub / "data").mkdir(parents=True)
    (hub / "data" / "wiki.txt").write_text("\n".join(random_sentences(n, seed=5)) + "\n")
    (hub / "README.md").write_text("---\nconfigs:\n- config_name: wiki\n  data_files:\n  - split: train\n"
                                   "    path: data/wiki.txt\n---\n")
    return hub


def _short_argv(data, hub, out, steps, extra=()):
    return _argv(data, out, "--dataset_name", str(hub), "--dataset_config_name", "wiki", "--streaming", "true",
                 steps=steps, extra=("--save_strategy", "steps", "--save_steps", "4", "--shuffle_buffer_size", "0",
                                     *extra))


def test_streaming_position_is_counted_and_resume_equals_the_run(data, tmp_path):
    """20 rows at batch 8 read 8 + 8 + 4: the checkpoint after step 4 is at 28 rows (the next pass's first 8)."""
    hub = _short_hub(tmp_path, 20)
    seen = []
    full = run_training(_short_argv(data, hub, tmp_path / "full", steps=8), on_build=_spy(seen))
    assert full.state.global_step == 8
    assert [len(seen)] == [8 + 8 + 4 + 8 + 8 + 4 + 8 + 8]
    saved = json.loads((tmp_path / "full" / "checkpoint-4" / "stream_state_0.json").read_text())
    assert saved["examples"] == 28 and saved["epoch"] == 1
    resumed = run_training(_short_argv(data, hub, tmp_path / "resumed", steps=8)
                           + ["--resume_from_checkpoint", str(tmp_path / "full" / "checkpoint-4")])
    assert resumed.train_dataset.count == 56
    assert logged_losses(resumed)[-4:] == logged_losses(full)[-4:]
    a, b = _weights(tmp_path / "full"), _weights(tmp_path / "resumed")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_streaming_resume_at_the_end_of_a_pass_goes_on_with_the_next(data, tmp_path):
    """16 rows at batch 8: the checkpoint after step 2 is at the end of the first pass."""
    hub = _short_hub(tmp_path, 16)
    full = run_training(_short_argv(data, hub, tmp_path / "full", steps=4, extra=("--save_steps", "2")))
    resumed = run_training(_short_argv(data, hub, tmp_path / "resumed", steps=4, extra=("--save_steps", "2"))
                           + ["--resume_from_checkpoint", str(tmp_path / "full" / "checkpoint-2")])
    assert resumed.state.global_step == 4 and logged_losses(resumed)[-2:] == logged_losses(full)[-2:]


def test_stream_ending_in_one_sentence_trains_all_steps_as_the_file(data, tmp_path):
    """17 rows at batch 8: the last batch of one sentence is dropped, as for --train_file; every pass is 8 + 8."""
    hub = _short_hub(tmp_path, 17)
    seen = []
    trainer = run_training(_short_argv(data, hub, tmp_path / "s", steps=6), on_build=_spy(seen))
    assert trainer.state.global_step == 6 and len(seen) == 48 and len(set(seen)) == 16
    by_file = run_training(_argv(data, tmp_path / "f", "--train_file", str(hub / "data" / "wiki.txt"), steps=6))
    assert by_file.state.global_step == 6


def test_stream_honours_dataloader_drop_last(data, tmp_path):
    hub = _short_hub(tmp_path, 20)
    seen = []
    run_training(_short_argv(data, hub, tmp_path / "s", steps=5, extra=("--dataloader_drop_last", "true")),
                 on_build=_spy(seen))
    assert len(seen) == 40 and len(set(seen)) == 16  # 8 + 8 each pass, the 4 left over never read


def _stream_worker(rank: int, port: int, argv: list, out: str) -> None:
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    torch.set_num_threads(1)
    trainer = run_training(argv)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(
        {"steps": trainer.state.global_step, "count": trainer.train_dataset.count}))


@pytest.mark.slow
def test_streaming_parts_of_unequal_length_stay_in_step(data, tmp_path):
    """21 rows in 2 processes: parts of 11 and 10 rows (every other row); each step both take the same count."""
    from conftest import free_port, run_processes

    hub = _short_hub(tmp_path, 21)
    argv = _short_argv(data, hub, tmp_path / "out", steps=5, extra=("--ddp_backend", "gloo", "--save_strategy", "no",
                                                                   "--save_on_signal", "none"))
    run_processes(_stream_worker, (free_port(), argv, str(tmp_path)), nprocs=2, timeout_s=300)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert got == [{"steps": 5, "count": 8 + 2 + 8 + 2 + 8}] * 2
