"""One run of a ``sentence_transformers`` arm: train with sentence-transformers' own trainer and loss, save the model
folder the runner scores (``python -m simcse.experiments.st_train --options RUN/config.json --output_dir RUN/model``).

The arm's options (JSON, the names of ``simcse train`` where there is one)::

    {"model_name_or_path": "all-MiniLM-L6-v2",    # a folder or the embedded model's name
     "train_file": "stsb_train.csv",               # sent0,sent1,score (scored pairs) or sent0,sent1,hard_neg
     "loss": "CoSENTLoss",                         # one of LOSSES
     "loss_args": {"scale": 20},                   # the loss's arguments (MatryoshkaLoss: "matryoshka_dims")
     "per_device_train_batch_size": 16, "learning_rate": 5e-5, "warmup_steps": 36, "max_seq_length": 32,
     "num_train_epochs": 1, "max_steps": -1, "max_train_samples": 5744, "seed": 42,
     "senteval_dir": null}                         # the SentEval folder the runner scores on (default: the evaluator's)

The model is the start encoder with mean pooling (sentence-transformers' ``Transformer`` + ``Pooling``), trained
through ``SentenceTransformerTrainer`` (HF's Trainer loop, linear decay after the warm-up, fp32); its folder keeps
the position table's length as its cap (not the training cut), so the runner scores it on the same tokens as a
``simcse`` arm. ``simcse_results.json`` (steps, runtime, examples/s, as ``simcse train`` writes them) is written
last: the runner reads a run as trained only when it is there.
"""
from __future__ import annotations

import argparse
import json
import numbers
from pathlib import Path

LOSSES = ("CoSENTLoss", "AnglELoss", "MultipleNegativesRankingLoss", "MatryoshkaLoss")
INTEGERS = {"per_device_train_batch_size": 1, "warmup_steps": 0, "max_seq_length": 2, "num_train_epochs": 1,
            "max_train_samples": 1, "seed": 0}
# senteval_dir: the SentEval folder the run is scored on (as a simcse arm's); training does not read it
OPTIONS = {"model_name_or_path", "train_file", "loss", "loss_args", "learning_rate", "max_steps", "senteval_dir",
           *INTEGERS}
DEFAULTS = {"per_device_train_batch_size": 16, "learning_rate": 5e-5, "warmup_steps": 0, "max_seq_length": 128,
            "num_train_epochs": 1, "max_steps": -1, "max_train_samples": None, "loss_args": {}, "seed": 42,
            "senteval_dir": None}


def check_options(options: dict) -> dict:
    """The arm's options with their defaults, checked without reading data or loading a model.

    Raises:
        ValueError: one line naming the option and what was expected (an unknown option, a loss outside
            :data:`LOSSES`, a number out of range, a missing model or training file).
    """
    unknown = sorted(k for k in options if k not in OPTIONS)
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not an option of a sentence_transformers arm; expected {sorted(OPTIONS)}")
    for key in ("model_name_or_path", "train_file"):
        if not isinstance(options.get(key), str) or not options[key]:
            raise ValueError(f"a sentence_transformers arm needs {key!r} (a path or name), got {options.get(key)!r}")
    if options.get("loss") not in LOSSES:
        raise ValueError(f"loss {options.get('loss')!r} is not one of {list(LOSSES)}")
    out = {**DEFAULTS, **options}
    for key, low in INTEGERS.items():
        v = out[key]
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < low):
            raise ValueError(f"{key} must be an integer >= {low}, got {v!r}")
    if not isinstance(out["learning_rate"], numbers.Real) or out["learning_rate"] <= 0:
        raise ValueError(f"learning_rate must be a number > 0, got {out['learning_rate']!r}")
    if not isinstance(out["max_steps"], int) or out["max_steps"] == 0 or out["max_steps"] < -1:
        raise ValueError(f"max_steps must be -1 (the epochs decide) or an integer >= 1, got {out['max_steps']!r}")
    if not isinstance(out["loss_args"], dict):
        raise ValueError(f"loss_args must be an object, got {out['loss_args']!r}")
    if out["loss"] == "MatryoshkaLoss" and not out["loss_args"].get("matryoshka_dims"):
        raise ValueError("loss MatryoshkaLoss needs loss_args.matryoshka_dims (a list of dimensions)")
    return out


def read_rows(path: str, limit: int | None) -> tuple[dict, str]:
    """The training columns of ``path`` as sentence-transformers names them and the kind (``scored`` or
    ``triplets``): ``sent0,sent1,score`` -> sentence1, sentence2, score; ``sent0,sent1,hard_neg`` -> anchor,
    positive, negative. The first ``limit`` rows.

    Raises:
        ValueError: a CSV with neither header.
    """
    import csv
    import itertools

    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        rows = list(itertools.islice(reader, limit))
    if {"sent0", "sent1", "score"} <= set(fields):
        return {"sentence1": [r["sent0"] for r in rows], "sentence2": [r["sent1"] for r in rows],
                "score": [float(r["score"]) for r in rows]}, "scored"
    if {"sent0", "sent1", "hard_neg"} <= set(fields):
        return {"anchor": [r["sent0"] for r in rows], "positive": [r["sent1"] for r in rows],
                "negative": [r["hard_neg"] for r in rows]}, "triplets"
    raise ValueError(f"train_file {path!r} has columns {fields}; expected sent0,sent1,score or sent0,sent1,hard_neg")


def train(options: dict, output_dir: str) -> dict:
    """Train and save (see the module); returns the ``train`` record of ``simcse_results.json``."""
    import datasets
    import torch
    from sentence_transformers import (SentenceTransformer, SentenceTransformerTrainer,
                                       SentenceTransformerTrainingArguments)
    from sentence_transformers.sentence_transformer import losses
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import set_seed

    from simcse.files.storage import write_text_atomic
    from simcse.training.config import resolve_model_name

    o = check_options(options)
    columns, _ = read_rows(o["train_file"], o["max_train_samples"])
    set_seed(o["seed"])
    word = Transformer(resolve_model_name(o["model_name_or_path"]), max_seq_length=o["max_seq_length"])
    model = SentenceTransformer(modules=[word, Pooling(word.get_embedding_dimension(), pooling_mode="mean")],
                                device="cuda" if torch.cuda.is_available() else "cpu")
    args = dict(o["loss_args"])
    if o["loss"] == "MatryoshkaLoss":
        dims = args.pop("matryoshka_dims")
        loss = losses.MatryoshkaLoss(model, losses.MultipleNegativesRankingLoss(model, **args), list(dims))
    else:
        loss = getattr(losses, o["loss"])(model, **args)
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(Path(output_dir) / "trainer"), per_device_train_batch_size=o["per_device_train_batch_size"],
        learning_rate=o["learning_rate"], warmup_steps=o["warmup_steps"], lr_scheduler_type="linear",
        num_train_epochs=o["num_train_epochs"], max_steps=o["max_steps"], seed=o["seed"],
        use_cpu=not torch.cuda.is_available(), save_strategy="no", eval_strategy="no", report_to="none",
        logging_steps=10_000, dataloader_pin_memory=False, dataloader_num_workers=0)
    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=datasets.Dataset.from_dict(columns),
                                         loss=loss)
    metrics = trainer.train().metrics
    # the folder would record the training cut as its cap, which the evaluator honours: lift it to the position table
    model.max_seq_length = word.auto_model.config.max_position_embeddings
    model.save(output_dir)
    record = {"steps": trainer.state.global_step, "train_runtime": metrics["train_runtime"],
              "train_samples_per_second": metrics["train_samples_per_second"]}
    write_text_atomic(Path(output_dir) / "simcse_results.json",
                      json.dumps({"train": record, "sentence_transformers": o}, indent=2) + "\n")
    return record


def main(argv: list[str] | None = None) -> dict:
    """``python -m simcse.experiments.st_train --options FILE --output_dir DIR``."""
    p = argparse.ArgumentParser(prog="python -m simcse.experiments.st_train", description=__doc__.split("\n\n")[0])
    p.add_argument("--options", required=True, help="the arm's options (JSON)")
    p.add_argument("--output_dir", required=True, help="the model folder to write")
    args = p.parse_args(argv)
    options = json.loads(Path(args.options).read_text(encoding="utf-8"))
    record = train(options, args.output_dir)
    print(f"[st_train] trained {record['steps']} steps in {record['train_runtime']:.0f} s", flush=True)
    return record


if __name__ == "__main__":
    main()
