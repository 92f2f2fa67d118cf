"""Dev evaluation inside training for :class:`simcse.training.trainer.SimCSETrainer`: STS-B and SICK-R dev
Spearman (the reference trainer's ``evaluate``: ``eval_stsb_spearman``, ``eval_sickr_spearman``, ``eval_avg_sts``)
and, with ``eval_transfer``, the 7 transfer tasks' dev accuracy.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from transformers import Trainer

import simcse.evaluation as senteval  # called through the module, so a patched evaluate_sts_dev is the one used

PROGRESS_BAR_FROM = 10_000  # an evaluation encoding more distinct sentences than this shows a progress bar

@dataclass
class STSDevSet:
    """Stand-in ``eval_dataset``: evaluation reads STS-B/SICK-R dev from ``data_dir`` (SentEval layout)."""

    data_dir: str | None = None

    def __len__(self) -> int:  # Trainer only checks that an eval set exists
        return 1


class DevEvaluation(Trainer):
    """The ``evaluate`` hook of :class:`simcse.training.trainer.SimCSETrainer` (see the module); it relies on the
    trainer's ``senteval_dir``, ``eval_max_length``, ``eval_transfer`` and ``final_eval_transfer`` (the final
    evaluation, ``metric_key_prefix="final"``, with the transfer tasks)."""

    final_eval_transfer = False  # set by the trainer's constructor

    # ------------------------------------------------------------------------------------- evaluation
    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """STS-B dev and SICK-R dev Spearman of the current model (dropout off).

        Logs and returns ``{prefix}_stsb_spearman``, ``{prefix}_sickr_spearman``, ``{prefix}_avg_sts``
        (fractions), so ``metric_for_best_model="stsb_spearman"`` selects checkpoints. A collapsed model (every
        cosine similarity equal) does not stop training: a warning names the task and its score is 0.0.
        """
        data_dir = getattr(eval_dataset or self.eval_dataset, "data_dir", None) or self.senteval_dir
        model = self.accelerator.unwrap_model(self.model)
        bs = self.args.per_device_eval_batch_size
        cap = getattr(getattr(model, "first", model), "max_input_tokens", 512)  # DualEncoderModel: its first encoder

        def encode(sentences):  # a progress bar for the long encodes (the transfer tasks': ~10^5 sentences)
            return model.encode(sentences, batch_size=bs, max_length=self.eval_max_length or cap,
                                show_progress=len(sentences) > PROGRESS_BAR_FROM)

        if self.is_world_process_zero():  # a long evaluation starts with a line saying what runs
            what = "STS-B and SICK-R dev" + (f" and the {len(senteval.TRANSFER_TASKS)} transfer tasks (dev, 5-fold; "
                                             "each logs when done)" if self.eval_transfer else "")
            print(f"\n[simcse] evaluating at step {self.state.global_step}: {what}", flush=True)
        objective = getattr(self, "objective", None)
        # the objective's checkpoint-selection encoding (its official run's) for the evaluations during training
        # only: the one before training and the final one score the model as it encodes once saved, so the
        # printed change compares like with like
        selecting = objective is not None and metric_key_prefix == "eval" and self.state.global_step > 0
        with contextlib.ExitStack() as stack:
            if selecting:
                stack.enter_context(objective.dev_encoding(model))
                if getattr(self, "dev_mlp", False):
                    stack.enter_context(_mlp_applied(model))
            scores = senteval.evaluate_sts_dev(encode, data_dir, constant_score=0.0)  # a collapsed model scores 0
            if self.eval_transfer or (metric_key_prefix == "final" and self.final_eval_transfer):
                scores.update(self._transfer_dev(encode, data_dir))
        metrics = {f"{metric_key_prefix}_{k}": float(v) for k, v in scores.items()}
        metrics[f"{metric_key_prefix}_epoch"] = self.state.epoch or 0.0
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    @staticmethod
    def _transfer_dev(encode, data_dir) -> dict[str, float]:
        """Dev accuracy (percent) of the 7 transfer tasks, fast 5-fold mode, and their mean ``avg_transfer``
        (the reference trainer's ``eval_transfer`` metrics)."""
        res = senteval.evaluate(encode, list(senteval.TRANSFER_TASKS), data_dir=data_dir, mode="dev")
        accs = {task: float(res[task]["devacc"]) for task in senteval.TRANSFER_TASKS}
        return {**accs, "avg_transfer": sum(accs.values()) / len(accs)}


@contextlib.contextmanager
def _mlp_applied(model):
    """Encode an ``mlp_only_train`` model with its MLP for the duration (``--dev_mlp``); restored on exit."""
    before = model.mlp_only_train
    model.mlp_only_train = False
    try:
        yield
    finally:
        model.mlp_only_train = before
