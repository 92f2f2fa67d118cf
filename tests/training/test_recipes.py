"""Packaged configs selected by name (``simcse train --config unsup_bert_base``)."""
import json

import pytest

from conftest import training_error
from simcse.training.recipes import config_dir, list_configs, resolve_config
from simcse.training.train import parse_args


def test_names_resolve_to_the_packaged_files():
    d = config_dir()
    assert d is not None
    for name in ("unsup_bert_base", "unsup_bert_base.json", "configs/unsup_bert_base.json"):
        assert resolve_config(name).resolve() == d / "unsup_bert_base.json"
    assert resolve_config("ablations/table7_alpha1.0") == d / "ablations" / "table7_alpha1.0.json"
    names = list_configs()
    assert {"unsup_bert_base", "sup_bert_base", "unsup_cpu_minilm", "ablations/table7_alpha0.5"} <= set(names)


def test_a_path_wins_over_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "unsup_bert_base.json").write_text("{}")
    assert resolve_config("unsup_bert_base.json").resolve() == tmp_path / "unsup_bert_base.json"


def test_unknown_name_lists_the_packaged_ones():
    with pytest.raises(FileNotFoundError, match="packaged configs: .*sup_bert_base"):
        resolve_config("unsup_bert_huge")


def test_config_option_gives_defaults_that_later_options_override(tmp_path, tiny_bert_dir, train_txt):
    m, d, t = parse_args(["--config", "sup_bert_base", "--model_name_or_path", str(tiny_bert_dir),
                          "--train_file", str(train_txt), "--output_dir", str(tmp_path / "o"), "--max_steps", "3"])
    assert t.learning_rate == 5e-5 and t.num_train_epochs == 3 and t.max_steps == 3  # from the config / overridden
    assert m.model_name_or_path == str(tiny_bert_dir) and d.train_file == str(train_txt)
    assert m.hard_negative_weight == 0.0 and m.hard_negative_alpha == 1.0  # alpha 1 = the paper's setting


def test_table7_configs_keep_their_alpha(tmp_path, tiny_bert_dir, train_txt):
    for alpha in (0.5, 1.0, 2.0):
        m, _, _ = parse_args(["--config", f"ablations/table7_alpha{alpha}", "--model_name_or_path", str(tiny_bert_dir),
                              "--train_file", str(train_txt), "--output_dir", str(tmp_path / "o")])
        assert m.hard_negative_alpha == pytest.approx(alpha)


def test_every_packaged_config_parses(tmp_path, tiny_bert_dir, train_txt):
    for name in list_configs():
        cfg = json.loads(resolve_config(name).read_text())
        argv = ["--config", name, "--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt),
                "--output_dir", str(tmp_path / "o")]
        if cfg.get("augmentation") == "mlm" or cfg.get("do_mlm"):
            continue  # parsing is the same; those need an MLM head only at build time
        parse_args(argv)


def test_bad_config_option_is_one_line(tmp_path, tiny_bert_dir, train_txt):
    base = ["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_txt), "--output_dir", str(tmp_path / "o")]
    assert "no such file, and not a packaged config" in training_error(["--config", "nope"] + base)
    assert "--config needs" in training_error(base + ["--config"])
    assert "two configs" in training_error(["sup_bert_base.json", "--config", "unsup_bert_base"] + base)
