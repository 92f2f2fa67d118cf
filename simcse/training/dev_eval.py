"""Dev evaluation inside training for :class:`simcse.training.trainer.SimCSETrainer`: STS-B and SICK-R dev
Spearman (the reference trainer's ``evaluate``: ``eval_stsb_spearman``, ``eval_sickr_spearman``, ``eval_avg_sts``)
and, with ``eval_transfer``, the 7 transfer tasks' dev accuracy.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

import simcse.evaluation as senteval  # called through the module, so a patched evaluate_sts_dev is the one used

PROGRESS_BAR_FROM = 10_000  # an evaluation encoding more distinct sentences than this shows a progress bar


def _parameter_versions(model) -> tuple:
    """Each parameter's identity and in-place version counter: equal tuples mean no weight changed in between."""
    return tuple((id(p), p._version) for p in model.parameters())


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
        transfer = self.eval_transfer or (metric_key_prefix == "final" and self.final_eval_transfer)
        reused = self._scored_already(model, data_dir, transfer) if metric_key_prefix == "final" else None
        if reused is not None:
            step, scores = reused
            if self.is_world_process_zero():
                print(f"\n[simcse] the final model is the one scored at step {step}: its dev scores stand", flush=True)
            return self._report(scores, metric_key_prefix)
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
            if transfer:
                scores.update(self._transfer_dev(encode, data_dir))
        if metric_key_prefix == "eval" and self.state.global_step > 0 and not self._selection_encoding(objective, model):
            # scored as the final evaluation scores: kept, so that a final model equal to this one is not scored again
            self._last_scored = (self.state.global_step, data_dir, transfer, dict(scores), _parameter_versions(model))
        return self._report(scores, metric_key_prefix)

    def _report(self, scores: dict, metric_key_prefix: str) -> dict[str, float]:
        """Log ``scores`` under ``metric_key_prefix`` (with the epoch), tell the callbacks, return the metrics."""
        metrics = {f"{metric_key_prefix}_{k}": float(v) for k, v in scores.items()}
        metrics[f"{metric_key_prefix}_epoch"] = self.state.epoch or 0.0
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    def _selection_encoding(self, objective, model) -> bool:
        """True when the dev evaluations during training encode otherwise than the saved model (``--dev_mlp`` with
        an MLP, or an objective with its own ``dev_encoding``): their scores are not the final model's."""
        from simcse.training.objectives.base import Objective

        if getattr(self, "dev_mlp", False):
            return True
        inner = getattr(objective, "inner", objective)  # a wrapping objective delegates to the one it wraps
        return inner is not None and type(inner).dev_encoding is not Objective.dev_encoding

    def _scored_already(self, model, data_dir, transfer: bool) -> tuple[int, dict] | None:
        """``(step, scores)`` of the evaluation at the last step when the final evaluation would repeat it, else None.

        It would when, in this process, the dev sets (and the transfer tasks, when the final evaluation has them)
        were scored at the run's last step with the saved model's encoding, and the weights are those scored: no
        parameter changed since (torch's version counters), or ``load_best_model_at_end`` reloaded the checkpoint
        saved right after that evaluation. The evaluation is deterministic (dropout off, float32), so scoring again
        gives the same numbers; it costs one encoding of every dev sentence.
        """
        last = getattr(self, "_last_scored", None)
        if last is None:
            return None
        step, scored_dir, had_transfer, scores, versions = last
        if step != self.state.global_step or scored_dir != data_dir or (transfer and not had_transfer):
            return None
        best = self.state.best_model_checkpoint
        reloaded = (self.args.load_best_model_at_end and best is not None
                    and os.path.basename(os.path.normpath(best)) == f"{PREFIX_CHECKPOINT_DIR}-{step}")
        if not reloaded and versions != _parameter_versions(model):
            return None
        return step, scores

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
