"""simcse: SimCSE contrastive sentence embeddings (Gao, Yao and Chen, EMNLP 2021), re-implemented.

Importing this package has no side effects: no logging setup, no network, no heavy imports beyond torch.
"""
from simcse.training.losses import cosine_logits, info_nce
from simcse.models.modeling import SimCSEModel
from simcse.models.pooling import POOLERS, get_pooler
from simcse.retrieval.tool import SimCSE
from simcse.version import __version__

__all__ = ["SimCSE", "SimCSEModel", "info_nce", "cosine_logits", "POOLERS", "get_pooler", "__version__"]
