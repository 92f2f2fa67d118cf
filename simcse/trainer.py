"""SimCSETrainer: HF Trainer with the contrastive loss and STS evaluation, overriding hooks only.

Overridden: ``compute_loss`` (one encoder pass over all views, InfoNCE), ``evaluate`` (STS-B / SICK-R dev
Spearman instead of a prediction loop), and the three model-persistence hooks ``_save``,
``_load_from_checkpoint`` and ``_load_best_model`` (the model is a composed ``nn.Module`` with its own
safetensors format, as sentence-transformers' trainer does for its models). The training loop itself is
HF's, untouched.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from transformers import Trainer

from .distributed import all_gather_with_grad, world_info
from .losses import info_nce


@dataclass
class STSDevSet:
    """Stand-in ``eval_dataset``: evaluation reads STS-B/SICK-R dev from ``data_dir`` (SentEval layout)."""

    data_dir: str | None = None

    def __len__(self) -> int:  # Trainer only checks that an eval set exists
        return 1


class SimCSETrainer(Trainer):
    """HF Trainer for SimCSE (paper Section 3-4).

    Args (besides Trainer's):
        temp: InfoNCE temperature (> 0).
        hard_negative_weight: alpha of Eq. 5 (multiplicative; see :func:`simcse.losses.info_nce`).
        mlm_weight: lambda of the auxiliary MLM loss (Appendix D) when the batch carries ``mlm_input_ids``.
        senteval_dir: SentEval ``downstream`` folder for dev evaluation (default: see
            :func:`simcse.evaluation.resolve_senteval_dir`).
        eval_max_length: token truncation when encoding evaluation sentences.

    Batches are (B, V, L) from :class:`simcse.data.ContrastiveCollator`; V = 2 (two dropout views of the same
    sentence, or a positive pair) or 3 (with a hard negative). All B*V rows go through the encoder in one pass.
    Under torch.distributed the keys (views 2 and 3) are gathered from all ranks with gradients, so each
    query sees world_size * B - 1 in-batch negatives; each rank averages the loss over its own queries and
    DDP's gradient averaging makes the result equal to one process holding the whole global batch.
    """

    def __init__(self, *args, temp: float = 0.05, hard_negative_weight: float = 1.0, mlm_weight: float = 0.1,
                 senteval_dir: str | None = None, eval_max_length: int = 128, **kwargs):
        if kwargs.get("eval_dataset") is None:
            kwargs["eval_dataset"] = STSDevSet(senteval_dir)
        super().__init__(*args, **kwargs)
        if not temp > 0:
            raise ValueError(f"temp must be > 0, got {temp}")
        self.temp = temp
        self.hard_negative_weight = hard_negative_weight
        self.mlm_weight = mlm_weight
        self.senteval_dir = senteval_dir
        self.eval_max_length = eval_max_length

    # ------------------------------------------------------------------------------------------- loss
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        ids = inputs["input_ids"]
        batch, views, length = ids.shape  # (B, V, L)
        flat = {k: inputs[k].reshape(batch * views, -1) for k in ("input_ids", "attention_mask", "token_type_ids") if k in inputs}
        z = model(**flat).view(batch, views, -1)  # (B, V, H)
        z1, z2 = z[:, 0], z[:, 1]  # queries, positives: (B, H)
        z3 = z[:, 2] if views > 2 else None  # hard negatives: (B, H)
        rank, world = world_info()
        labels = None
        if world > 1:
            z2 = all_gather_with_grad(z2)  # (W*B, H)
            z3 = all_gather_with_grad(z3) if z3 is not None else None
            labels = torch.arange(batch, device=z.device) + rank * batch
        loss = info_nce(z1, z2, z3, temp=self.temp, hard_negative_weight=self.hard_negative_weight, labels=labels)
        if "mlm_input_ids" in inputs and self.mlm_weight > 0:
            mlm_kwargs = {"token_type_ids": flat["token_type_ids"]} if "token_type_ids" in flat else {}
            logits = self.accelerator.unwrap_model(model).mlm_logits(
                inputs["mlm_input_ids"].reshape(batch * views, -1), flat["attention_mask"], **mlm_kwargs
            )  # (B*V, L, vocab)
            mlm_labels = inputs["mlm_labels"].reshape(-1)
            if (mlm_labels != -100).any():
                mlm_loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), mlm_labels, ignore_index=-100)
            else:  # nothing masked in this batch (tiny batches): contribute 0, keep every parameter in the graph
                mlm_loss = logits.sum() * 0.0
            loss = loss + self.mlm_weight * mlm_loss
        return (loss, {"embeddings": z}) if return_outputs else loss

    # ------------------------------------------------------------------------------------- evaluation
    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """STS-B dev and SICK-R dev Spearman of the current model (dropout off).

        Logs and returns ``{prefix}_stsb_spearman``, ``{prefix}_sickr_spearman``, ``{prefix}_avg_sts``
        (fractions), so ``metric_for_best_model="stsb_spearman"`` selects checkpoints.
        """
        from .evaluation import evaluate_sts_dev

        data_dir = getattr(eval_dataset or self.eval_dataset, "data_dir", None) or self.senteval_dir
        model = self.accelerator.unwrap_model(self.model)
        bs = self.args.per_device_eval_batch_size

        def encode(sentences):
            return model.encode(sentences, batch_size=bs, max_length=self.eval_max_length)

        scores = evaluate_sts_dev(encode, data_dir)
        metrics = {f"{metric_key_prefix}_{k}": float(v) for k, v in scores.items()}
        metrics[f"{metric_key_prefix}_epoch"] = self.state.epoch or 0.0
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    # ------------------------------------------------------------------------------------ persistence
    def _save(self, output_dir: str | None = None, state_dict=None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if not self.args.should_save:
            return
        self.accelerator.unwrap_model(self.model).save_pretrained(output_dir)
        with open(os.path.join(output_dir, "training_args.json"), "w") as f:
            f.write(self.args.to_json_string())

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        (model if model is not None else self.model).load_weights(resume_from_checkpoint)

    def _load_best_model(self) -> None:
        self.accelerator.unwrap_model(self.model).load_weights(self.state.best_model_checkpoint)
