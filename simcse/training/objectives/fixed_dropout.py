"""The fixed-dropout ablation (paper Table 3, "fixed 0.1"): both views carry the same dropout mask."""
from __future__ import annotations

from simcse.training.objectives.base import ObjectiveWrapper, view_inputs


class FixedDropout(ObjectiveWrapper):
    """Wraps an objective so that only view 0 of each (identical-view) example is encoded, with one dropout mask,
    and that (B, H) embedding serves as every view: identical to encoding identical views with identical masks,
    forward and backward (``--fixed_dropout``). Needs one-sentence rows."""

    input_columns = ("sent0",)
    requires = ("uses_embeddings", "dropout_views")
    option = "--fixed_dropout"

    def embed(self, model, batch, context):
        b, v = batch["input_ids"].shape[:2]
        z = model(**view_inputs(batch, 0))  # (B, H)
        return z.unsqueeze(1).expand(b, v, z.shape[-1])

    def check_columns(self, columns, source):
        if list(columns) != ["sent0"]:
            raise ValueError(f"--fixed_dropout makes both views from one sentence: it needs a one-sentence-per-line "
                             f".txt train_file and --positives simcse (got views {list(columns)})")
