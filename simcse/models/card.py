"""The model card (``README.md`` with Hub metadata) of a saved model folder.

Written by :meth:`simcse.SimCSEModel.save_pretrained` (pooler and loading instructions), at the end of training
(with the training configuration and the dev/test Spearman measured then) and by ``simcse evaluate
--update_card`` (the STS-B / SICK-R Spearman of that evaluation). The YAML header follows the Hub's model card
metadata (``huggingface_hub.ModelCardData``): ``library_name``, ``pipeline_tag``, ``base_model``, ``datasets``,
``license``, ``tags`` and a ``model-index`` holding the measured Spearman correlations (times 100).

A card that was not written by simcse (no ``simcse`` tag) is left alone, except peft's blank template (the card
peft writes beside an adapter, ``# Model Card for Model ID``, which a LoRA adapter folder held before simcse
wrote its own there). An adapter folder's card names the adapter's base model (``adapter_config.json``) and
says how to load the adapter.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from simcse.models.lora import ADAPTER_CONFIG_NAME
from simcse.models.st_files import st_modes_of

CARD_NAME = "README.md"
TRAINING_ARGS_NAME = "simcse_training_args.json"
CARD_TAG = "simcse"
# results keys -> (Hub dataset id, display name)
RESULT_DATASETS = {
    "STSBenchmark": ("sentence-transformers/stsb", "STS Benchmark"),
    "SICKRelatedness": ("mteb/sickr-sts", "SICK-R"),
}
# keys of the training configuration listed in the card, in order
CARD_TRAINING_KEYS = (
    "base_model", "model_name_or_path", "train_file", "dataset_name", "dataset_config_name", "dataset_data_files", "pooler_type", "mlp_only_train", "loss", "loss_class", "loss_wrappers", "loss_args", "loss_learned", "temp", "hard_negative_weight", "do_mlm",
    "max_seq_length", "per_device_train_batch_size", "learning_rate", "num_train_epochs", "max_steps", "seed",
)
_POOLER_TEXT = {
    "cls": "the [CLS] vector of the last layer through the MLP head (Linear + Tanh)",
    "cls_before_pooler": "the [CLS] vector of the last layer (no MLP)",
    "avg": "the attention-masked mean of the last layer",
    "avg_top2": "the attention-masked mean of the average of the last two layers",
    "avg_first_last": "the attention-masked mean of the average of the first and the last layer",
    "last_token": "the last layer's state of each sentence's last real token",
    "max": "the per-dimension maximum of the last layer over the real tokens",
    "weighted_avg": "the mean of the last layer over the real tokens, weighted by position (1, 2, ...)",
    "avg_sqrt_len": "the sum of the last layer over the real tokens divided by the square root of their number",
    "prompt_mask": "the last-layer state of the [MASK] token of the prompt template wrapped around the sentence "
                   "(simcse_config.json, `prompt`), through the MLP head",
    "prompt_mask_before_pooler": "the last-layer state of the [MASK] token of the prompt template wrapped around the "
                                 "sentence (simcse_config.json, `prompt`; no MLP)",
}
_CITATION = """@inproceedings{gao2021simcse,
   title={{SimCSE}: Simple Contrastive Learning of Sentence Embeddings},
   author={Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},
   booktitle={Empirical Methods in Natural Language Processing (EMNLP)},
   year={2021}
}"""


def _hub_id(name) -> str | None:
    """``name`` when it looks like a Hub model id (not a local path), else None."""
    if not isinstance(name, str) or not name or Path(name).exists() or name.startswith((".", "/", "~")):
        return None
    return name if name.count("/") <= 1 else None


def _read_card(folder: Path):
    from huggingface_hub import ModelCard

    f = folder / CARD_NAME
    if not f.is_file():
        return None
    try:
        return ModelCard.load(f)
    except Exception:  # not a card huggingface_hub can parse: treat as someone else's README
        return False


_PEFT_TEMPLATE_TITLE = "# Model Card for Model ID"  # the heading of peft's blank card (huggingface_hub's template)


def _simcse_may_replace(card, overwrite: bool) -> bool:
    """Whether ``card`` (a parsed README.md) is simcse's own card, peft's blank template, or ``overwrite`` is set."""
    if overwrite or CARD_TAG in (card.data.tags or []):
        return True
    return card.data.library_name == "peft" and card.text.lstrip().startswith(_PEFT_TEMPLATE_TITLE)


def _old_results(card) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    by_type = {v[0]: k for k, v in RESULT_DATASETS.items()}
    for r in getattr(card.data, "eval_results", None) or []:
        task = by_type.get(r.dataset_type)
        if task and r.dataset_split and r.metric_type == "spearman_cosine":
            out.setdefault(task, {})[r.dataset_split] = float(r.metric_value) / 100.0
    return out


def _eval_results(results: dict[str, dict[str, float]]):
    from huggingface_hub import EvalResult

    rows = []
    for task, splits in results.items():
        dtype, dname = RESULT_DATASETS[task]
        for split in ("dev", "test"):
            if split in splits:
                rows.append(EvalResult(task_type="sentence-similarity", task_name="Semantic Textual Similarity",
                                       dataset_type=dtype, dataset_name=dname, dataset_split=split,
                                       metric_type="spearman_cosine", metric_name="Spearman (cosine)",
                                       metric_value=round(100.0 * float(splits[split]), 2)))
    return rows


def _usage(pooler: str, name: str, st_ok: bool, adapter: bool = False, dense: bool = False) -> str:
    st = (f"```python\nfrom sentence_transformers import SentenceTransformer\n\nmodel = SentenceTransformer(\"{name}\")\n"
          "embeddings = model.encode([\"A man is playing a guitar.\"])\n```" if st_ok else
          "sentence-transformers cannot load this folder: it holds a LoRA adapter, and sentence-transformers would "
          "rebuild the base model without this run's settings, so `SentenceTransformer(...)` stops with an error "
          "instead of computing other embeddings. Use simcse (training with `--merge_lora true` gives a folder "
          "sentence-transformers loads)." if adapter else
          f"sentence-transformers cannot load this folder: its Pooling module has no `{pooler}` mode, so "
          "`SentenceTransformer(...)` stops with `Invalid pooling mode` instead of computing other embeddings. "
          "Use simcse or plain transformers.")
    if dense or "+" in pooler:
        hf = (f"# this model's {'Dense layers after pooling' if dense else f'pooler {pooler}'} are not part of the "
              "transformers model:\n# encode with simcse or sentence-transformers (above)")
    elif pooler == "cls":
        hf = "emb = out.pooler_output  # the encoder's pooler holds the SimCSE MLP"
    elif pooler == "cls_before_pooler":
        hf = "emb = out.last_hidden_state[:, 0]"
    elif pooler == "last_token":
        hf = ("last = batch[\"attention_mask\"].sum(1) - 1  # right padding\n"
              "emb = out.last_hidden_state[torch.arange(len(last)), last]")
    elif pooler.startswith("prompt_mask"):
        hf = ("# the sentences must first be wrapped in the template of simcse_config.json (\"prompt\"), e.g.\n"
              "# 'This sentence : \"{sentence}\" means {mask} .' with {mask} = tokenizer.mask_token\n"
              "emb = out.last_hidden_state[batch[\"input_ids\"] == tokenizer.mask_token_id]")
    else:
        layers = {"avg_top2": "(out.hidden_states[-1] + out.hidden_states[-2]) / 2",
                  "avg_first_last": "(out.hidden_states[1] + out.hidden_states[-1]) / 2",
                  "avg_first_last_embeddings": "(out.hidden_states[0] + out.hidden_states[-1]) / 2",
                  }.get(pooler, "out.last_hidden_state")
        reduce = {"max": "emb = h.masked_fill(m == 0, float(\"-inf\")).max(1).values",
                  "weighted_avg": "w = m * torch.arange(1, m.shape[1] + 1).view(1, -1, 1)  # position weights\n"
                                  "emb = (h * w).sum(1) / w.sum(1)",
                  "avg_sqrt_len": "emb = (h * m).sum(1) / m.sum(1).sqrt()"}.get(pooler, "emb = (h * m).sum(1) / m.sum(1)")
        hf = f"h = {layers}\nm = batch[\"attention_mask\"].unsqueeze(-1).float()\n{reduce}"
    return f"""### simcse

```python
from simcse import SimCSE

model = SimCSE("{name}")  # reads the pooler from simcse_config.json
embeddings = model.encode(["A man is playing a guitar."])
```

### sentence-transformers

{st}

### transformers

```python
import torch
from transformers import AutoModel, AutoTokenizer

tok, enc = AutoTokenizer.from_pretrained("{name}"), AutoModel.from_pretrained("{name}")
batch = tok(["A man is playing a guitar."], padding=True, truncation=True, return_tensors="pt")
with torch.no_grad():
    out = enc(**batch, output_hidden_states=True)
{hf}
```
"""


def _body(name: str, cfg: dict, training: dict, results: dict, st_ok: bool, base: str | None) -> str:
    pooler = cfg.get("pooler_type", "cls")
    mlp_note = " (the MLP is used in training only)" if pooler == "cls" and cfg.get("mlp_only_train") else ""
    if pooler == "cls" and cfg.get("mlp_only_train"):
        pooler_text = "the [CLS] vector of the last layer (no MLP)"
    elif pooler == "prompt_mask" and cfg.get("mlp_only_train"):
        pooler_text = _POOLER_TEXT["prompt_mask_before_pooler"]
    else:
        pooler_text = " concatenated with ".join(_POOLER_TEXT.get(p, p) for p in pooler.split("+"))
    lines = [f"# {name}", "",
             _trained_with(training), "",
             f"- pooler: `{pooler}`{mlp_note}: the sentence embedding is {pooler_text}",
             f"- embedding size: {cfg.get('hidden_size', '?')}; similarity: cosine"]
    if cfg.get("dense"):
        layers = ", ".join(f"Dense {d.get('in_features')}->{d.get('out_features')} "
                           f"({str(d.get('activation_function', '')).rsplit('.', 1)[-1]})" for d in cfg["dense"])
        lines.append(f"- after pooling: {layers}")
    if cfg.get("normalize"):
        lines.append("- the embeddings are unit length (a Normalize module)")
    data = _training_data(training)
    if base:
        lines.append(f"- base model: [{base}](https://huggingface.co/{base})")
    if cfg.get("lora_adapter"):
        lines.append("- weights: a LoRA adapter over the base model that `adapter_config.json` names (loading it "
                     "needs peft: `pip install peft`)")
    if data:
        lines.append(f"- training data: {data}")
    lines.append("")
    if results:
        lines += ["## Results", "", "Spearman correlation (x100) of the cosine similarity with the gold scores.", "",
                  "| task | split | Spearman |", "|---|---|---|"]
        for task, splits in results.items():
            for split in ("dev", "test"):
                if split in splits:
                    lines.append(f"| {RESULT_DATASETS[task][1]} | {split} | {100.0 * splits[split]:.2f} |")
        lines.append("")
    if training:
        lines += ["## Training configuration", "", "| argument | value |", "|---|---|"]
        # a local folder of a base model known by its Hub id (the embedded model's install path) is not shown
        local_base = training.get("base_model") and _hub_id(training.get("model_name_or_path")) is None
        lines += [f"| {k} | `{training[k]}` |" for k in CARD_TRAINING_KEYS if training.get(k) is not None
                  and not (k == "model_name_or_path" and local_base)]
        lines.append("")
    lines += ["## Usage", "", _usage(pooler, name, st_ok, bool(cfg.get("lora_adapter")), bool(cfg.get("dense"))),
              "## Citation", "", "```bibtex", _CITATION, "```", ""]
    if training.get("loss_citation"):
        lines[-1:-1] = ["", f"The `{training.get('loss')}` objective:", "", "```bibtex", training["loss_citation"].strip(), "```"]
    return "\n".join(lines)


_SIMCSE_OBJECTIVES = (None, "infonce", "simcse")


def _trained_with(training: dict) -> str:
    """The card's first sentence: SimCSE, or the objective the run trained with (its name and class)."""
    loss = training.get("loss")
    if loss in _SIMCSE_OBJECTIVES:
        return "A sentence encoder trained with SimCSE (Gao, Yao and Chen, EMNLP 2021) using the `simcse` library."
    cls = f" (`{training['loss_class']}`)" if training.get("loss_class") else ""
    wrapped = f", wrapped by {training['loss_wrappers']}" if training.get("loss_wrappers") else ""
    return f"A sentence encoder trained with the `{loss}` objective{cls}{wrapped} using the `simcse` library."


def _base_model(training: dict) -> str | None:
    """The Hub id of the model training started from: ``training["base_model"]`` (recorded by the trainer, which
    knows the embedded model's id), else ``model_name_or_path`` when it is a Hub id; None for a local folder."""
    return training.get("base_model") or _hub_id(training.get("model_name_or_path"))


def _hub_dataset(training: dict) -> str | None:
    """The Hub id of the training dataset (``dataset_name`` when it is one); None for local data."""
    name = training.get("dataset_name")
    return _hub_id(name) if name and not Path(str(name)).exists() else None


def _training_data(training: dict) -> str | None:
    """The training data in words: the local file by its name, a local dataset folder by its name, or the Hub
    dataset by its id (with its config and data files)."""
    if training.get("train_file"):
        return f"the local file `{Path(str(training['train_file'])).name}`"
    name = training.get("dataset_name")
    if not name:
        return None
    hub = _hub_dataset(training)
    parts = [f"the Hub dataset [{hub}](https://huggingface.co/datasets/{hub})" if hub else
             f"the local dataset `{Path(str(name)).name}`"]
    parts += [f"{k} `{training[k]}`" for k in ("dataset_config_name", "dataset_data_files") if training.get(k)]
    return ", ".join(parts)


def write_model_card(folder: str | os.PathLike, simcse_config: dict | None = None, training: dict | None = None,
                     results: dict[str, dict[str, float]] | None = None, model_name: str | None = None,
                     license: str = "mit", overwrite: bool = False, replace_results: bool = False) -> Path | None:
    """Write (or update) ``folder/README.md``; return its path, or None when a foreign card was kept.

    Args:
        folder: a saved model folder (``simcse_config.json`` is read when ``simcse_config`` is None).
        training: training arguments (names as in ``scripts/train.py``), saved as ``simcse_training_args.json``;
            default: that file of the folder when present. Its ``base_model`` (a Hub id), when given, is the
            card's ``base_model``; else ``model_name_or_path`` when that is a Hub id. The training data is
            named as used: a local ``train_file`` by its file name (no Hub ``datasets`` entry), a Hub
            ``dataset_name`` by its id (also in ``datasets``).
        results: ``{"STSBenchmark"|"SICKRelatedness": {"dev"|"test": spearman}}``, Spearman as a fraction
            (0.8203); merged over the results already in the card, unless ``replace_results``.
        model_name: the title and the id in the usage snippets (default: the folder name).
        license: the Hub license id.
        overwrite: replace a README.md that simcse did not write.
        replace_results: the card shows ``results`` only, none of the results already in it (a new training run
            into a folder that held another model: its scores are not this model's).

    Raises:
        ValueError: an unknown task or a split other than dev/test in ``results``.
    """
    from huggingface_hub import ModelCard, ModelCardData

    folder = Path(folder)
    for task, splits in (results or {}).items():
        if task not in RESULT_DATASETS or not set(splits) <= {"dev", "test"}:
            raise ValueError(f"results must map {sorted(RESULT_DATASETS)} to {{'dev'|'test': spearman}}, "
                             f"got {task!r}: {splits!r}")
    old = _read_card(folder)
    if old is False or (old is not None and not _simcse_may_replace(old, overwrite)):
        return None
    merged = _old_results(old) if old and not replace_results else {}
    for task, splits in (results or {}).items():
        merged.setdefault(task, {}).update({k: float(v) for k, v in splits.items()})
    cfg = simcse_config if simcse_config is not None else _json(folder / "simcse_config.json")
    if training is None:
        training = _json(folder / TRAINING_ARGS_NAME)
    else:  # kept with the folder, so later updates (evaluate --update_card, saves) describe it too
        (folder / TRAINING_ARGS_NAME).write_text(json.dumps(training, indent=2, default=str) + "\n")
    adapter = bool(cfg.get("lora_adapter"))
    st_ok = st_modes_of(cfg.get("pooler_type", "cls")) is not None and not adapter
    base = _base_model(training) or (_hub_id(_json(folder / ADAPTER_CONFIG_NAME).get("base_model_name_or_path"))
                                     if adapter else None)
    name = model_name or folder.resolve().name
    hub_dataset = None if training.get("train_file") else _hub_dataset(training)
    data = ModelCardData(  # Hub metadata: Hub ids only (a local file or folder is named in the card's text)
        library_name="sentence-transformers" if st_ok else "peft" if adapter else "transformers",
        pipeline_tag="sentence-similarity", base_model=base, license=license, model_name=name,
        datasets=[hub_dataset] if hub_dataset else None,
        tags=[CARD_TAG, "sentence-transformers", "sentence-similarity", "feature-extraction"],
        eval_results=_eval_results(merged) or None,
    )
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n{_body(name, cfg, training, merged, st_ok, base)}")
    path = folder / CARD_NAME
    tmp = path.with_name(f".{CARD_NAME}.tmp")
    card.save(tmp)
    os.replace(tmp, path)
    return path


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def results_from_senteval(res: dict) -> dict[str, dict[str, float]]:
    """``{task: {split: spearman}}`` for STS-B / SICK-R from :func:`simcse.evaluation.evaluate`'s output."""
    out: dict[str, dict[str, float]] = {}
    for task in RESULT_DATASETS:
        for split in ("dev", "test"):
            rho = res.get(task, {}).get(split, {}).get("spearman")
            if rho is not None:
                rho = rho.statistic if hasattr(rho, "statistic") else rho[0] if isinstance(rho, (tuple, list)) else rho
                out.setdefault(task, {})[split] = float(rho)
    return out


def card_after_training(folder: str | os.PathLike, arg_objects, results: dict, model_name: str | None = None,
                        base_model: str | None = None, objective: dict | None = None) -> Path | None:
    """End of training: write ``simcse_training_args.json`` (the arguments of ``arg_objects``, dataclasses such
    as ``(ModelArguments, DataTrainingArguments, TrainingArguments)``) and the card with the dev Spearman of
    ``results["after"]`` (``final_stsb_spearman``...) and the test Spearman of ``results["test"]``.
    ``base_model``: the Hub id of the model training started from, when known (recorded as ``base_model``).
    ``objective``: the trained objective's record (:meth:`simcse.training.objectives.Objective.describe`):
    its name, class, arguments and learned scalars are recorded as ``loss``, ``loss_class``, ``loss_args`` (a JSON
    object string) and ``loss_learned`` (they win over the command line's ``--loss`` / ``--loss_args``: they
    are what trained), its citation goes under the card's."""
    import dataclasses
    import json

    training: dict = {"base_model": base_model} if base_model else {}
    if objective:
        training["loss"] = objective["loss"]
        training["loss_class"] = objective["class"]
        training["loss_args"] = json.dumps(objective.get("loss_args") or {}, sort_keys=True)
        if objective.get("learned"):
            training["loss_learned"] = json.dumps(objective["learned"], sort_keys=True)
        if objective.get("citation"):
            training["loss_citation"] = objective["citation"]
        if objective.get("wrappers"):
            training["loss_wrappers"] = ", ".join(objective["wrappers"])
    for obj in arg_objects:
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if isinstance(v, (str, int, float, bool)) or v is None:
                training.setdefault(f.name, v)
    scores: dict[str, dict[str, float]] = {}
    for task, key in (("STSBenchmark", "stsb_spearman"), ("SICKRelatedness", "sickr_spearman")):
        for split, section, prefix in (("dev", "after", "final_"), ("test", "test", "test_")):
            v = (results.get(section) or {}).get(prefix + key)
            if v is not None:
                scores.setdefault(task, {})[split] = float(v)
    return write_model_card(folder, training=training, results=scores, model_name=model_name, replace_results=True)
