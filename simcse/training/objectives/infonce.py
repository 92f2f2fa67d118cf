"""SimCSE's InfoNCE objective (paper Section 3, Eq. 1, 4 and 5): unsupervised (two dropout views), supervised
(premise, entailment) with the contradiction as a hard negative weighted by alpha, and further negative sets
(the neutral hypotheses of Table 7). ``--loss infonce`` (also ``--loss simcse``), the default."""
from __future__ import annotations

import torch

from simcse.training.losses import check_hard_negative_alpha, check_temperature, info_nce
from simcse.training.objectives import register_objective
from simcse.training.objectives.base import Objective


class InfoNCE(Objective):
    """InfoNCE with cosine similarity over in-batch negatives (:func:`simcse.training.losses.info_nce`).

    Views: 0 the queries, 1 the positives, 2 the hard negatives (weight ``hard_negative_alpha``), 3.. more
    negative sets of weight 1. Under torch.distributed the keys (views 1..) of all ranks are gathered with
    gradients and this rank's positives sit at ``rank * B + arange(B)``; the loss is the mean over this rank's
    B queries, which gives the gradient of the global mean (see :mod:`simcse.training.trainer`).

    Args:
        temp: temperature tau, a finite number > 0 (paper: 0.05).
        hard_negative_alpha: Eq. 5's multiplicative weight >= 0 of each query's own hard negative (1: the
            paper's setting; the reference's ``hard_negative_weight`` w is ``log(alpha)``).

    Raises:
        ValueError: a temperature or alpha out of range (names the option).
    """

    name = "infonce"
    input_columns = ("sent0",)
    optional_columns = ("sent1", "hard_neg", "neutral")

    def __init__(self, temp: float = 0.05, hard_negative_alpha: float = 1.0):
        super().__init__()
        self.temp = check_temperature(temp)
        self.hard_negative_alpha = check_hard_negative_alpha(hard_negative_alpha)

    def loss(self, embeddings: torch.Tensor, batch, context) -> torch.Tensor:
        batch_size, views = embeddings.shape[:2]
        keys = [embeddings[:, v] for v in range(1, views)]  # positives, then negative sets: (B, H) each
        labels = None
        if context.world > 1:
            keys = [context.gather(k) for k in keys]  # (W*B, H) each
            labels = torch.arange(batch_size, device=embeddings.device) + context.rank * batch_size
        return info_nce(embeddings[:, 0], *keys, temp=self.temp, hard_negative_alpha=self.hard_negative_alpha,
                        labels=labels)

    def check_batch(self, per_device: int, world: int, n_views: int) -> None:
        """A single example per batch is refused unless it carries a hard negative or other processes add
        negatives (one home for the rule; :func:`~simcse.training.losses.info_nce` checks the tensors)."""
        if per_device < 2 and world < 2 and n_views < 3:
            raise ValueError("per_device_train_batch_size must be >= 2: InfoNCE needs in-batch negatives")

    def get_config_dict(self) -> dict:
        return {"temp": self.temp, "hard_negative_alpha": self.hard_negative_alpha}


register_objective(InfoNCE)
register_objective(InfoNCE, name="simcse")
