"""SentEval-compatible evaluation: 7 STS tasks and 7 transfer tasks on any ``encode`` function.

Entry points:

* :func:`evaluate` (``encode, tasks, data_dir=None, mode="test"``): results in SentEval's shape.
* :func:`evaluate_sts_dev` (``encode, data_dir=None``): STS-B / SICK-R dev Spearman, for training.
* :func:`compare_sts` (``encode_a, encode_b, tasks``): two encoders on the same STS pairs, the difference of each
  Spearman with its paired-bootstrap interval and p-value; ``evaluate(..., bootstrap=1000)`` adds intervals.
* :func:`resolve_senteval_dir`: where the SentEval ``data/downstream`` folder is.
* :func:`table_values` / :func:`format_tables`: the paper's two tables.

Importing this package reads no files and loads no model.
"""
from simcse.evaluation.data import resolve_senteval_dir
from simcse.evaluation.engine import MODES, STS_TASKS, TASKS, TRANSFER_TASKS, check_tasks, compare_sts, evaluate, evaluate_sts_dev
from simcse.evaluation.sts import Correlation, cosine_similarity
from simcse.evaluation.tables import format_table, format_tables, table_values

__all__ = [
    "resolve_senteval_dir",
    "evaluate",
    "evaluate_sts_dev",
    "compare_sts",
    "check_tasks",
    "cosine_similarity",
    "Correlation",
    "table_values",
    "format_table",
    "format_tables",
    "TASKS",
    "STS_TASKS",
    "TRANSFER_TASKS",
    "MODES",
]
