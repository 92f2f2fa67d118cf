"""How far float32 self-similarities of unit embeddings stray from 1, and what the tool reports.

    python -m scripts.benchmarks.cosine_rounding            # MiniLM (avg), the first 200 distinct STS-B dev sentences

Encodes the sentences, indexes them (numpy, faiss flat and faiss IVF when faiss is installed), and searches
each sentence for itself: prints how many raw float32 inner products lie above / below 1 and their largest
deviation, then how many exact duplicates ``SimCSE.search(..., threshold=1.0)`` finds and the largest score
it returns, and the same for ``SimCSE.similarity(list, list)``'s diagonal.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from scripts.benchmarks.common import default_model


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model_name_or_path", default=default_model())
    p.add_argument("--n", type=int, default=200, help="distinct STS-B dev sentences")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from simcse import SimCSE
    from simcse.retrieval.index import faiss_available
    from simcse.files.inputs import iter_lines

    from simcse.evaluation import resolve_senteval_dir

    # where the evaluator finds SentEval ($SIMCSE_SENTEVAL_DIR, $SIMCSE_DATA_MIRROR/senteval/downstream, data/downstream)
    dev = Path(resolve_senteval_dir(None)) / "STS" / "STSBenchmark" / "sts-dev.csv"
    rows = [line.split("\t") for line in iter_lines(dev)]
    sents = list(dict.fromkeys(r[5] for r in rows if len(r) > 6))[: args.n]
    tool = SimCSE(args.model_name_or_path, "cpu")
    print(f"model {args.model_name_or_path} (pooler {tool.pooler}, H={tool.hidden_size}), {len(sents)} sentences")
    emb = tool.encode(sents, return_numpy=True)
    kinds = [(False, False)] + ([(True, False), (True, True)] if faiss_available() else [])
    for use_faiss, fast in kinds:
        tool.build_index(sents, use_faiss=use_faiss, faiss_fast=fast)
        raw = tool.index.search(emb, 1)[0][:, 0]
        res = tool.search(sents, threshold=1.0, top_k=1)
        found = sum(1 for s, r in zip(sents, res) if r and r[0][0] == s)
        top = max((r[0][1] for r in res if r), default=float("nan"))
        print(f"{type(tool.index).__name__}: raw self-scores above 1: {int((raw > 1).sum())}, below 1: "
              f"{int((raw < 1).sum())}, max |raw - 1| {np.abs(raw - 1).max():.2e}; search(threshold=1.0) finds "
              f"{found}/{len(sents)}, max score {top}")
    sims = tool.similarity(sents, sents)
    raw = emb @ emb.T
    print(f"similarity: raw diagonal above 1: {int((np.diag(raw) > 1).sum())}; reported diagonal == 1: "
          f"{int((np.diag(sims) == 1).sum())}/{len(sents)}, range [{sims.min():.4f}, {sims.max():.4f}]")


if __name__ == "__main__":
    main()
