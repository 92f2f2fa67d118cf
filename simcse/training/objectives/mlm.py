"""The auxiliary masked-language-model term (paper Appendix D, ``--do_mlm``) as a wrapper over any objective."""
from __future__ import annotations

import torch

from simcse.training.losses import mlm_loss
from simcse.training.objectives.base import BatchSeeds, ObjectiveWrapper, total_loss


class WithMLM(ObjectiveWrapper):
    """``inner``'s loss plus ``weight`` x the MLM cross-entropy of the model's attached head
    (:meth:`simcse.models.modeling.SimCSEModel.attach_mlm_head`) on a masked copy of every view.

    Masks: when the batch has no ``mlm_input_ids``/``mlm_labels`` (B, V, L) yet and a ``masker`` is given
    (``masker(input_ids, attention_mask, generator=g) -> (masked_ids, labels)``, e.g.
    :func:`simcse.training.data.mask_tokens` with the tokenizer's facts bound), they are drawn in
    :meth:`prepare_batch` from a CPU generator seeded by (seed, global step, rank, micro-batch within the step),
    so a resumed run masks exactly as an uninterrupted one. The term is token-level, so it is a
    :meth:`chunk_loss`: per chunk it is the sum over the chunk's masked tokens divided by the whole batch's count,
    and the chunks add up to the batch mean (gradient caching). Logged as ``loss_mlm``.

    Args:
        inner: the wrapped objective. weight: lambda >= 0 (paper 0.1). masker: as above, or None (the batches
            carry their own masks).
    """

    option = "--do_mlm"
    requires = ("uses_embeddings",)

    def __init__(self, inner, weight: float = 0.1, masker=None):
        super().__init__(inner)
        if not weight >= 0:
            raise ValueError(f"--mlm_weight must be >= 0, got {weight}")
        self.weight = float(weight)
        self.masker = masker
        self._seeds = BatchSeeds()

    def prepare_batch(self, batch, context):
        batch = self.inner.prepare_batch(batch, context)
        if self.masker is None or "mlm_input_ids" in batch:
            return batch
        ids = batch["input_ids"]
        masked, labels = self.masker(ids.cpu(), batch["attention_mask"].cpu(),
                                     generator=torch.Generator().manual_seed(self._seeds(context)))
        return {**batch, "mlm_input_ids": masked.to(ids.device), "mlm_labels": labels.to(ids.device)}

    def chunk_loss(self, embeddings, batch, context):
        inner_total, parts = total_loss(self.inner.chunk_loss(embeddings, batch, context))
        # the inner objective's own token terms are kept under their names; one named "mlm" (InfoCSE's) is renamed
        # so this wrapper's term does not replace it (it was dropped, its head left without gradient)
        out = ({(f"{self.inner.name}_mlm" if k == "mlm" else k): v for k, v in parts.items()} if parts else
               ({} if inner_total is None else {f"{self.inner.name}_tokens": inner_total}))
        if "mlm_input_ids" not in batch or not self.weight > 0:
            return out or None
        full = context.full_batch if "mlm_labels" in context.full_batch else batch
        n_masked = int((full["mlm_labels"] != -100).sum())
        rows = batch["input_ids"].shape[0] * batch["input_ids"].shape[1]
        kwargs = {"token_type_ids": batch["token_type_ids"].reshape(rows, -1)} if "token_type_ids" in batch else {}
        logits = context.model.mlm_logits(batch["mlm_input_ids"].reshape(rows, -1),
                                          batch["attention_mask"].reshape(rows, -1), **kwargs)  # (rows, L, vocab)
        out["mlm"] = self.weight * mlm_loss(logits, batch["mlm_labels"].reshape(rows, -1), n_masked=n_masked)
        return out

    def get_config_dict(self):
        return {**super().get_config_dict(), "mlm_weight": self.weight}
