"""Score one run's model on the spec's STS tasks and keep every pair's cosine: ``python -m simcse.experiments.score``.

The runner calls it once per run, after training, in its own process (so the runner never loads a model):

    python -m simcse.experiments.score --model RUN/model --tasks STSBenchmark SICKRelatedness --split test \\
        --output RUN/scores.npz [--pooler cls --mlp_only_train] [--alignment] [--data_dir D]

It writes ``scores.npz`` (float64 arrays ``TASK|PART|sims`` and ``TASK|PART|gold``, pairs in the data's order,
:func:`simcse.evaluation.engine.sts_scores`) and ``scores.json`` (``{"spearman": {task: x100}, "align",
"uniform", "seconds", "peak_rss_mib"}``), each whole or not at all. A model folder is encoded with the pooler it
records (:func:`simcse.models.pooling.pooler_to_use`); a plain encoder (the ``untrained`` arm) with ``--pooler``.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def read_scores(path: str | Path) -> dict:
    """A ``scores.npz`` as ``{task: {part: (sims (n,), gold (n,))}}`` (float64), parts in file order.

    Raises:
        OSError: the file cannot be read. ValueError: a key that is not ``TASK|PART|sims/gold``.
    """
    import numpy as np

    out: dict = {}
    with np.load(path) as z:
        for name in z.files:
            bits = name.split("|")
            if len(bits) != 3 or bits[2] not in ("sims", "gold"):
                raise ValueError(f"{path}: unexpected array {name!r}; expected TASK|PART|sims or TASK|PART|gold")
            if bits[2] == "sims":
                out.setdefault(bits[0], {})[bits[1]] = (z[name], z[f"{bits[0]}|{bits[1]}|gold"])
    return out


def _save_npz_atomic(path: Path, arrays: dict) -> None:
    import numpy as np

    tmp = path.with_name(f".{path.name}.partial")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, path)


def load_model(folder: str, pooler: str | None = None, mlp_only_train: bool = False):
    """The model to score: a folder's recorded pooler when it records one, else ``pooler`` (default cls)."""
    from simcse.models.modeling import SimCSEModel
    from simcse.models.pooling import pooler_to_use
    from simcse.training.config import resolve_model_name

    folder = resolve_model_name(folder)
    chosen, recorded = pooler_to_use(folder, None)
    if recorded is None and pooler is not None:
        return SimCSEModel.from_pretrained(folder, pooler_type=pooler, mlp_only_train=mlp_only_train,
                                           new_mlp_init="random")
    return SimCSEModel.from_pretrained(folder, pooler_type=chosen) if chosen else SimCSEModel.from_pretrained(folder)


def score(model, tasks: list[str], split: str, data_dir=None, batch_size: int = 128, max_length: int | None = None,
          alignment: bool = False) -> tuple[dict, dict]:
    """``(arrays, summary)``: the pairs' cosines and gold per task and part (keys as :func:`read_scores` reads
    them) and ``{"spearman": {task: pooled Spearman x 100}, "align", "uniform"}`` (the last two with
    ``alignment``: STS-B ``split`` pairs, positives gold > 4, :func:`simcse.evaluation.analysis.pairs_alignment_uniformity`)."""
    import numpy as np

    from simcse.evaluation.engine import sts_scores
    from simcse.evaluation.intervals import pooled_spearman

    cache: dict = {}

    def encode(sentences):
        sentences = list(sentences)
        new = list(dict.fromkeys(s for s in sentences if s not in cache))
        if new:
            kw = {"max_length": max_length} if max_length else {}
            cache.update(zip(new, model.encode(new, batch_size=batch_size, **kw)))
        return np.stack([cache[s] for s in sentences])

    scored = sts_scores(encode, tasks, data_dir, mode=split)
    arrays = {f"{t}|{p}|{w}": a for t, parts in scored.items() for p, pair in parts.items()
              for w, a in zip(("sims", "gold"), pair)}
    summary: dict = {"spearman": {t: 100.0 * pooled_spearman(parts) for t, parts in scored.items()}}
    if alignment:
        from simcse.evaluation.analysis import encode_pairs, pairs_alignment_uniformity
        from simcse.evaluation.data import load_stsb

        pairs = load_stsb(data_dir, split)
        unique, e1, e2 = encode_pairs(encode, pairs)
        au = pairs_alignment_uniformity(pairs.scores, unique, e1, e2)
        summary["align"], summary["uniform"] = float(au["align"]), float(au["uniform"])
    return arrays, summary


def main(argv: list[str] | None = None) -> dict:
    """Score ``--model`` and write ``--output`` (.npz) and the ``.json`` beside it; returns the summary."""
    import resource

    p = argparse.ArgumentParser(prog="python -m simcse.experiments.score", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="model folder (or the embedded model's name)")
    p.add_argument("--tasks", nargs="+", required=True, help="STS task names")
    p.add_argument("--split", choices=["test", "dev"], default="test", help="the split scored")
    p.add_argument("--output", required=True, help="the .npz to write; the .json summary goes beside it")
    p.add_argument("--pooler", default=None, help="pooler of a folder that records none (default cls)")
    p.add_argument("--mlp_only_train", action="store_true", help="with --pooler cls: the MLP is training-only")
    p.add_argument("--data_dir", default=None, help="SentEval data/downstream folder (default: the evaluator's)")
    p.add_argument("--batch_size", type=int, default=128, help="sentences per encoder call")
    p.add_argument("--max_length", type=int, default=None, help="token cap (default: the model's own)")
    p.add_argument("--alignment", action="store_true", help="also l_align / l_uniform on STS-B pairs")
    p.add_argument("--seed", type=int, default=0, help="seed of a new (random) MLP of --pooler cls")
    args = p.parse_args(argv)
    t0 = time.time()
    import torch

    torch.manual_seed(args.seed)
    model = load_model(args.model, args.pooler, args.mlp_only_train).eval()
    arrays, summary = score(model, args.tasks, args.split, args.data_dir, args.batch_size, args.max_length,
                            args.alignment)
    out = Path(args.output)
    _save_npz_atomic(out, arrays)
    summary["seconds"] = round(time.time() - t0, 2)
    summary["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    from simcse.files.storage import write_text_atomic

    write_text_atomic(out.with_suffix(".json"), json.dumps(summary, indent=2) + "\n")
    print("[score] " + " ".join(f"{t}={v:.2f}" for t, v in summary["spearman"].items()), flush=True)
    return summary


if __name__ == "__main__":
    main()
