"""CoSENT (Su 2022, "CoSENT: a more efficient sentence vector scheme than Sentence-BERT"): a ranking loss over
the cosines of scored pairs, ordered by their gold scores.

For pairs (u_i, v_i) with gold scores y_i and s_i = scale * cos(u_i, v_i)::

    loss = log(1 + sum_{(i, j): y_i > y_j} exp(s_j - s_i))

Only the order of the scores matters, so any score range works (STS-B 0..5, SICK 1..5, 0/1 labels).
``scale`` 20 is the paper's and sentence-transformers' ``CoSENTLoss`` default (official code:
github.com/bojone/CoSENT; AnglE's ``cosine_loss`` is the same term).
"""
from __future__ import annotations

import torch

from simcse.training.objectives import register_objective
from simcse.training.objectives.base import LossContext, Objective

__all__ = ["CoSENT", "ranked_pair_loss", "check_pairs", "gather_pairs"]


def ranked_pair_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log(1 + sum_{y_i > y_j} exp(scores_j - scores_i))``: scores (B,) float (already scaled), labels (B,).

    The shared term of CoSENT and AnglE's angle objective; computed in float32, ties in ``labels`` add
    nothing. Returns a float32 scalar (0 pairs ordered: log 1 = 0).
    """
    scores = scores.float()
    labels = labels.to(scores.device, torch.float32).reshape(-1)
    diff = scores[None, :] - scores[:, None]  # (B, B): [i, j] = s_j - s_i
    ordered = labels[:, None] > labels[None, :]  # y_i > y_j
    terms = diff.masked_fill(~ordered, float("-inf")).reshape(-1)
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)


def check_pairs(name: str, embeddings: torch.Tensor, batch) -> torch.Tensor:
    """The scores (B,) of a scored-pair batch: embeddings (B, 2, H) and ``batch['score']`` (B,).

    Raises:
        ValueError: the batch has no ``score`` tensor, not one per pair, or not two views per row.
    """
    if embeddings.dim() != 3 or embeddings.shape[1] != 2:
        raise ValueError(f"--loss {name} takes scored pairs (sent0, sent1, score): embeddings (B, 2, H), "
                         f"got {tuple(embeddings.shape)}")
    scores = batch.get("score") if hasattr(batch, "get") else None
    if scores is None:
        raise ValueError(f"--loss {name} needs a 'score' column in the batch (a float per pair)")
    scores = torch.as_tensor(scores).reshape(-1)
    if scores.numel() != embeddings.shape[0]:
        raise ValueError(f"--loss {name}: {scores.numel()} scores for {embeddings.shape[0]} pairs")
    return scores


def gather_pairs(embeddings: torch.Tensor, labels: torch.Tensor, context) -> tuple[torch.Tensor, torch.Tensor]:
    """All processes' pairs: embeddings (B, 2, H) -> (W*B, 2, H) with gradients, scores (B,) -> (W*B,), in rank
    order (identity in one process). A ranking loss over pairs orders every pair against every other, so each
    process ranks the whole batch; every process computes the same loss, and the gathered gradient summed over
    processes and averaged by DDP is the gradient of the one-process loss on the whole batch."""
    if context is None or getattr(context, "world", 1) <= 1:
        return embeddings, labels
    return context.gather(embeddings), context.gather_nograd(labels.reshape(-1))


@register_objective
class CoSENT(Objective):
    """CoSENT on scored pairs (see the module).

    Args:
        scale: the factor on the cosines (sentence-transformers' ``scale``, AnglE's ``cosine_tau``), > 0.

    Raises:
        ValueError: ``scale`` not a positive number.
    """

    name = "cosent"
    input_columns = ("sent0", "sent1")
    label_columns = ("score",)
    min_batch = 2

    def __init__(self, scale: float = 20.0):
        super().__init__()
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
            raise ValueError(f"--loss_args scale for --loss cosent must be a positive number, got {scale!r}")
        self.scale = float(scale)

    def loss(self, embeddings: torch.Tensor, batch, context: LossContext | None = None) -> torch.Tensor:
        """embeddings (B, 2, H), ``batch['score']`` (B,) -> float32 scalar."""
        labels = check_pairs(self.name, embeddings, batch).to(embeddings.device, torch.float32)
        embeddings, labels = gather_pairs(embeddings, labels, context)  # rank all processes' pairs
        emb = embeddings.float()
        cos = torch.nn.functional.cosine_similarity(emb[:, 0], emb[:, 1], dim=-1)  # (B,)
        return ranked_pair_loss(cos * self.scale, labels)

    def get_config_dict(self) -> dict:
        return {"scale": self.scale}
