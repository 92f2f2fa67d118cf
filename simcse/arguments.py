"""Argument dataclasses for ``scripts/train.py`` (names and defaults of the reference ``train.py``).

Checked in ``__post_init__`` so a bad value stops the run before anything is loaded or written.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .pooling import POOLERS, get_pooler


@dataclass
class ModelArguments:
    """What to train: the encoder, the pooler and the loss."""

    model_name_or_path: str = field(metadata={"help": "HF model folder or hub name (e.g. bert-base-uncased), or a saved SimCSE model."})
    pooler_type: str = field(default="cls", metadata={"help": f"Pooler, one of {sorted(POOLERS)}."})
    mlp_only_train: bool = field(default=False, metadata={"help": "Use the cls MLP only in training (unsupervised SimCSE default)."})
    temp: float = field(default=0.05, metadata={"help": "InfoNCE temperature tau (> 0)."})
    hard_negative_weight: float = field(
        default=1.0,
        metadata={"help": "alpha of Eq. 5, a multiplicative weight >= 0 on each query's own hard negative. "
                          "The reference's --hard_negative_weight w is a log-weight: use alpha = exp(w) "
                          "(reference 0 == alpha 1, the default)."},
    )
    do_mlm: bool = field(default=False, metadata={"help": "Add the auxiliary MLM loss (Appendix D)."})
    mlm_weight: float = field(default=0.1, metadata={"help": "lambda, weight of the MLM loss."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of tokens masked for MLM (80/10/10)."})
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow custom model code from the model folder."})
    gradient_cache_chunk_size: int | None = field(
        default=None,
        metadata={"help": "Gradient caching (GradCache, Gao et al. 2021): run the encoder on chunks of this many "
                          "examples while the loss still spans the whole per-device batch (two passes, dropout "
                          "replayed). Activation memory is one chunk's, for one extra forward pass. "
                          "0 or unset: off."},
    )

    def __post_init__(self):
        get_pooler(self.pooler_type)
        if not (isinstance(self.temp, (int, float)) and math.isfinite(self.temp) and self.temp > 0):
            raise ValueError(f"--temp must be a finite number > 0, got {self.temp}")
        if not self.hard_negative_weight >= 0:
            raise ValueError(f"--hard_negative_weight (alpha) must be >= 0, got {self.hard_negative_weight}")
        if not self.mlm_weight >= 0:
            raise ValueError(f"--mlm_weight must be >= 0, got {self.mlm_weight}")
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability}")
        if self.gradient_cache_chunk_size is not None:
            if not isinstance(self.gradient_cache_chunk_size, int) or self.gradient_cache_chunk_size < 0:
                raise ValueError(f"--gradient_cache_chunk_size must be an integer >= 1 (0 = off), got {self.gradient_cache_chunk_size}")
            self.gradient_cache_chunk_size = self.gradient_cache_chunk_size or None


@dataclass
class DataTrainingArguments:
    """What to train on and evaluate with."""

    train_file: str = field(metadata={"help": "Text file (one sentence per line) or CSV with sent0,sent1[,hard_neg]."})
    max_seq_length: int = field(default=32, metadata={"help": "Truncate sentences to this many tokens (>= 2)."})
    pad_to_max_length: bool = field(default=False, metadata={"help": "Pad every batch to max_seq_length instead of its longest sentence."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training examples."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenisation."})
    senteval_dir: str | None = field(default=None, metadata={"help": "SentEval data/downstream folder for STS-B/SICK-R evaluation."})
    eval_before_training: bool = field(default=True, metadata={"help": "Evaluate STS-B/SICK-R dev once before training."})
    test_after_training: bool = field(default=True, metadata={"help": "Report STS-B and SICK-R test Spearman of the final model."})

    def __post_init__(self):
        from .data import check_train_file

        if not isinstance(self.max_seq_length, int) or self.max_seq_length < 2:
            raise ValueError(f"--max_seq_length must be an integer >= 2 (room for [CLS] and [SEP]), got {self.max_seq_length}")
        if self.max_train_samples is not None and self.max_train_samples < 1:
            raise ValueError(f"--max_train_samples must be >= 1, got {self.max_train_samples}")
        check_train_file(self.train_file)
