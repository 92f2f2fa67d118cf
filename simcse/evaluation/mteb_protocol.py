"""MTEB (mteb 2.x) support: the encoder protocol for :class:`simcse.SimCSE` and local STS tasks.

mteb calls ``model.encode(dataloader, *, task_metadata, hf_split, hf_subset, prompt_type, **kwargs)`` where
the DataLoader yields batches ``{"text": [str, ...], ...}``, expects a numpy array (N, H) back, and reads
``model.mteb_model_meta`` (an ``mteb.ModelMeta``). :meth:`simcse.SimCSE.encode` hands such calls to
:func:`encode_for_mteb`; :func:`model_meta` builds the metadata.

:func:`senteval_sts_task` wraps an STS task of a local SentEval folder (STS-B or SICK-R, read by the same
reader as :mod:`simcse.evaluation`) as an mteb ``AbsTaskSTS``, so ``mteb.evaluate`` runs offline.

Needs ``pip install simcse[mteb]``.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

MTEB_CALL_KEYS = ("task_metadata", "hf_split", "hf_subset", "prompt_type")
# EncodeKwargs mteb may pass along (see mteb.types.EncodeKwargs); "precision" only means something to ST
_MTEB_EXTRA_KEYS = ("show_progress_bar", "precision")


def texts_from_inputs(inputs) -> list[str]:
    """The texts of an mteb DataLoader (batches of ``{"text": [...]}``), or of a list of str, in order.

    Raises:
        TypeError: a batch without a ``"text"`` list (e.g. an image-only task).
    """
    if isinstance(inputs, (list, tuple)) and all(isinstance(s, str) for s in inputs):
        return list(inputs)
    texts: list[str] = []
    for i, batch in enumerate(inputs):
        if not isinstance(batch, dict) or "text" not in batch:
            keys = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
            raise TypeError(f"mteb input batch {i} has no 'text' column (got {keys}); SimCSE encodes text only")
        texts.extend(str(t) for t in batch["text"])
    return texts


def encode_for_mteb(tool, inputs, *, batch_size: int = 64, task_metadata=None, hf_split: str | None = None,
                    hf_subset: str | None = None, prompt_type=None, show_progress_bar: bool | None = None,
                    **kwargs) -> np.ndarray:
    """Encode for mteb: unit-length float32 (N, H) numpy rows for the texts of ``inputs``.

    SimCSE uses no prompts, so ``task_metadata``/``hf_split``/``hf_subset``/``prompt_type`` only identify the
    call. Blank texts (some mteb tasks have them) get a zero vector instead of the tool's ValueError.

    Raises:
        TypeError: a keyword neither mteb nor :meth:`simcse.SimCSE.encode` knows (named in the message).
    """
    unknown = sorted(set(kwargs) - set(_MTEB_EXTRA_KEYS))
    if unknown:
        raise TypeError(f"SimCSE.encode got unexpected keyword argument(s) {unknown}")
    texts = texts_from_inputs(inputs)
    out = np.zeros((len(texts), tool.hidden_size), dtype=np.float32)
    keep = [i for i, t in enumerate(texts) if t.strip()]
    if keep:
        out[keep] = tool.encode([texts[i] for i in keep], batch_size=batch_size, normalize_to_unit=True,
                                return_numpy=True, show_progress=bool(show_progress_bar))
    return out


def model_meta(tool):
    """An ``mteb.ModelMeta`` for a :class:`simcse.SimCSE` (name, embedding size, token limit, framework)."""
    from mteb.models.model_meta import ModelMeta

    name = tool.model_name_or_path or "simcse-model"
    if Path(name).exists():  # mteb wants "org/name": use the folder's last two parts
        parts = Path(name).resolve().parts
        name = "/".join(parts[-2:]) if len(parts) >= 2 else parts[-1]
    n_params = None
    model = getattr(tool, "model", None)
    if hasattr(model, "parameters"):
        n_params = sum(p.numel() for p in model.parameters())
    return ModelMeta.create_empty({
        "name": name, "revision": "local", "embed_dim": tool.hidden_size, "n_parameters": n_params,
        "max_tokens": tool.max_length, "similarity_fn_name": "cosine", "framework": ["PyTorch"],
        "open_weights": True, "use_instructions": False, "languages": None,
    })


def senteval_sts_task(task: str = "STSBenchmark", split: str = "test", data_dir: str | Path | None = None):
    """An mteb STS task over a local SentEval file: ``task`` ``"STSBenchmark"`` or ``"SICKRelatedness"``,
    ``split`` ``"train"``/``"dev"``/``"test"``; sentences as :mod:`simcse.evaluation` reads them.

    The task is named ``SimCSELocal<task>`` (main score ``cosine_spearman``, the split as its eval split).

    Raises:
        ValueError: an unknown task or split.
        FileNotFoundError: the SentEval files are missing (names the download script).
    """
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata

    from simcse.evaluation import data as D
    from simcse.evaluation.engine import check_data

    if task not in D.SPLIT_PAIR_FILES:
        raise ValueError(f"task must be one of {sorted(D.SPLIT_PAIR_FILES)}, got {task!r}")
    if split not in D.SPLIT_PAIR_FILES[task][1]:
        raise ValueError(f"split must be one of {sorted(D.SPLIT_PAIR_FILES[task][1])}, got {split!r}")
    folder = D.resolve_senteval_dir(data_dir)
    check_data(folder, [task])
    pairs = D.read_split_pairs(folder, task, split)
    lo, hi = (0.0, 5.0) if task == "STSBenchmark" else (1.0, 5.0)
    metadata = TaskMetadata(
        name=f"SimCSELocal{task}", type="STS", main_score="cosine_spearman",
        description=f"{task} {split} split read from a local SentEval folder ({folder}).",
        reference="https://github.com/facebookresearch/SentEval",
        dataset={"path": str(folder), "revision": "local"}, category="t2t", eval_splits=[split],
        eval_langs=["eng-Latn"], date=None, dialect=[], domains=[], task_subtypes=[], license="not specified",
        annotations_creators="human-annotated", modalities=["text"], sample_creation="found", bibtex_citation="",
    )

    class LocalSTS(AbsTaskSTS):
        min_score, max_score = lo, hi

        def load_data(self, num_proc: int | None = None, **kwargs) -> None:
            self.dataset = DatasetDict({split: Dataset.from_dict({
                "sentence1": list(pairs.sent1), "sentence2": list(pairs.sent2),
                "score": [float(s) for s in pairs.scores]})})
            self.data_loaded = True

    LocalSTS.metadata = metadata
    LocalSTS.__name__ = metadata.name
    return LocalSTS()


def run_tasks(tool, tasks: Iterable, output_folder: str | Path | None = None, batch_size: int = 64) -> dict:
    """Run mteb ``tasks`` (task objects or names) with ``tool``; return ``{task name: main score}``.

    Results are written to ``output_folder`` (an mteb results cache) when given, else kept in memory only.
    """
    import mteb

    objs = [mteb.get_task(t) if isinstance(t, str) else t for t in tasks]
    cache = mteb.ResultCache(str(output_folder)) if output_folder is not None else None
    result = mteb.evaluate(tool, objs, cache=cache, encode_kwargs={"batch_size": batch_size},
                           show_progress_bar=False, co2_tracker=False)
    return {r.task_name: r.get_score() for r in result.task_results}
