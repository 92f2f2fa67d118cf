"""simcse: SimCSE contrastive sentence embeddings (Gao, Yao and Chen, EMNLP 2021), re-implemented.

Importing this package has no side effects: no logging setup, no network, no heavy imports beyond torch.
"""
from .losses import cosine_logits, info_nce
from .modeling import SimCSEModel
from .pooling import POOLERS, get_pooler
from .tool import SimCSE

__version__ = "0.1.0"

__all__ = ["SimCSE", "SimCSEModel", "info_nce", "cosine_logits", "POOLERS", "get_pooler", "__version__"]
