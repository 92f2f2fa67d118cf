"""Training callbacks: alignment and uniformity on STS-B during training (SimCSE Section 3, Figure 2).

Usage with :class:`simcse.training.trainer.SimCSETrainer` (or any HF Trainer whose model has ``.encode``)::

    from simcse.training.callbacks import AlignUniformCallback
    AlignUniformCallback.attach(trainer, every_n_steps=10)   # adds itself; logs through trainer.log
    trainer.train()
    # -> <output_dir>/align_uniform.jsonl, one JSON object per measurement; plot it with
    #    scripts/plot_figures.py --figure training_curve --log <output_dir>/align_uniform.jsonl
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
from transformers import TrainerCallback

from simcse.evaluation.analysis import encode_pairs, pairs_alignment_uniformity
from simcse.evaluation.data import load_stsb
from simcse.files.checks import check_int

logger = logging.getLogger(__name__)

LOG_NAME = "align_uniform.jsonl"


class AlignUniformCallback(TrainerCallback):
    """Every ``every_n_steps`` optimisation steps, measure l_align and l_uniform on STS-B and record them.

    The setting is :func:`simcse.evaluation.analysis.stsb_alignment_uniformity`'s: positives are the ``split`` pairs
    with gold > ``threshold``, uniformity runs over the split's distinct sentences. The STS-B file is read
    once (at the first measurement). Each measurement:

    * runs the model in eval mode (no dropout) and puts it back in the mode it was in;
    * logs ``{"align": ..., "uniform": ...}`` through ``trainer.log`` when a trainer is bound (see
      :meth:`attach`), so they reach ``state.log_history`` and the report integrations;
    * appends one JSON line ``{"step", "epoch", "align", "uniform", "n_pos", "n_sentences", "split"}`` to
      ``log_file`` (default ``<args.output_dir>/align_uniform.jsonl``).

    A measurement is also taken at step 0 when training starts from scratch (``at_start``): Figure 2's
    trajectories start at the pre-trained checkpoint. A fresh run (global step 0) truncates the log file;
    a resumed run appends. Only the world-process-zero computes (other ranks skip).

    Args:
        every_n_steps: measurement period in optimisation steps (>= 1; the paper plots every 10).
        data_dir: SentEval ``data/downstream`` folder (see :func:`simcse.evaluation.data.load_stsb`).
        split: STS-B split (``"dev"`` default; ``"train"``, ``"test"``, ``"all"``).
        threshold: gold score cut for positives (paper: 4).
        batch_size, max_length: passed to ``model.encode``.
        log_file: JSONL path; default ``<output_dir>/align_uniform.jsonl``.
        at_start: measure at step 0.
        trainer: the Trainer whose ``log`` receives the metrics (optional; :meth:`attach` sets it).

    Raises:
        ValueError: ``every_n_steps`` < 1; at the first measurement, errors of reading STS-B and a model
            without ``encode``.
    """

    def __init__(self, every_n_steps: int = 10, data_dir: str | os.PathLike | None = None, split: str = "dev",
                 threshold: float = 4.0, batch_size: int = 64, max_length: int = 128,
                 log_file: str | os.PathLike | None = None, at_start: bool = True, trainer=None):
        check_int(every_n_steps, "every_n_steps")
        self.every_n_steps = every_n_steps
        self.data_dir = data_dir
        self.split = split
        self.threshold = threshold
        self.batch_size = batch_size
        self.max_length = max_length
        self.log_file = Path(log_file) if log_file is not None else None
        self.at_start = at_start
        self.trainer = trainer
        self._data = None  # the STS-B pairs, read at the first measurement
        self._last_step = None

    @classmethod
    def attach(cls, trainer, **kwargs) -> "AlignUniformCallback":
        """Create a callback bound to ``trainer`` (metrics go through ``trainer.log``) and add it."""
        cb = cls(trainer=trainer, **kwargs)
        trainer.add_callback(cb)
        return cb

    # -------------------------------------------------------------------------------------- measuring
    def _load(self):
        if self._data is None:
            pairs = load_stsb(self.data_dir, self.split)
            if not np.any(pairs.scores > self.threshold):
                raise ValueError(f"STS-B {self.split} has no pair with gold > {self.threshold:g}")
            self._data = pairs
        return self._data

    def measure(self, model) -> dict[str, float]:
        """l_align / l_uniform of ``model`` (with ``.encode(list[str]) -> (N, D)``) in eval mode.

        Returns ``{"align", "uniform", "n_pos", "n_sentences"}``; the model's train/eval mode is restored.
        """
        model = getattr(model, "module", model)  # unwrap DataParallel/DDP
        if not hasattr(model, "encode"):
            raise ValueError(f"AlignUniformCallback needs a model with .encode(list[str]); got {type(model).__name__}")
        pairs = self._load()
        was_training = model.training
        model.eval()
        try:
            unique, e1, e2 = encode_pairs(
                lambda s: model.encode(s, batch_size=self.batch_size, max_length=self.max_length), pairs
            )
        finally:
            model.train(was_training)
        return pairs_alignment_uniformity(pairs.scores, unique, e1, e2, threshold=self.threshold)

    def _record(self, args, state, model) -> None:
        if not state.is_world_process_zero or model is None or self._last_step == state.global_step:
            return
        self._last_step = state.global_step
        m = self.measure(model)
        record = {"step": int(state.global_step), "epoch": float(state.epoch or 0.0), **m, "split": self.split}
        path = self.log_file or Path(args.output_dir) / LOG_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self.trainer is not None:
            self.trainer.log({"align": m["align"], "uniform": m["uniform"]})
        else:
            logger.info("step %d: align=%.4f uniform=%.4f", state.global_step, m["align"], m["uniform"])

    # ------------------------------------------------------------------------------------ trainer hooks
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._last_step = None
        if state.global_step == 0 and state.is_world_process_zero:
            path = self.log_file or Path(args.output_dir) / LOG_NAME
            if path.exists():
                path.unlink()  # a fresh run starts a fresh log
            if self.at_start:
                self._record(args, state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every_n_steps == 0:
            self._record(args, state, model)


def read_align_uniform_log(path: str | os.PathLike) -> list[dict]:
    """Records of an ``align_uniform.jsonl`` file written by :class:`AlignUniformCallback`, sorted by step.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not a JSON object with ``step``, ``align`` and ``uniform`` (line given),
            or an empty file.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"metrics log {str(p)!r} does not exist")
    records = []
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict) or not {"step", "align", "uniform"} <= set(rec):
                raise ValueError(f"{p}:{lineno}: expected an object with 'step', 'align' and 'uniform'")
            records.append(rec)
    if not records:
        raise ValueError(f"metrics log {str(p)!r} has no record")
    return sorted(records, key=lambda r: r["step"])


# ------------------------------------------------------------------------------------------ preemption
EXIT_PREEMPTED = 75  # sysexits.h EX_TEMPFAIL: "temporary failure, the user is invited to retry"
DEFAULT_SAVE_SIGNALS = ("TERM", "USR1")
_UNCATCHABLE = {"KILL", "STOP"}


def parse_signals(spec: str | None) -> tuple[str, ...]:
    """``"TERM,USR1"`` (names with or without ``SIG``, any case; ``""``/``"none"``: none) -> ``("TERM", "USR1")``.

    Raises:
        ValueError: a name that is not a signal of this platform, or one that cannot be caught (KILL, STOP).
    """
    import signal

    names = []
    for raw in (spec or "").replace(" ", "").split(","):
        name = raw.upper().removeprefix("SIG")
        if name in ("", "NONE"):
            continue
        if name in _UNCATCHABLE or not isinstance(getattr(signal, f"SIG{name}", None), signal.Signals):
            raise ValueError(f"--save_on_signal: {raw!r} is not a signal that can be caught; expected names such as "
                             "TERM, USR1, USR2, INT, HUP separated by commas, or 'none'")
        if name not in names:
            names.append(name)
    return tuple(names)


class SaveOnSignalCallback(TrainerCallback):
    """Stop training cleanly on a signal: finish the optimizer step, save a checkpoint, stop.

    While training runs, each of ``signals`` (default SIGTERM and SIGUSR1, which SLURM sends before a job is
    preempted or reaches its time limit) only sets a flag. At the end of the current optimizer step the callback
    asks HF Trainer to save a checkpoint (``control.should_save``, so it goes through the trainer's own atomic
    ``checkpoint-N`` save) and to stop (``control.should_training_stop``). Under torch.distributed the flag is
    combined over all ranks (all-reduce MAX) at every step, so every rank stops after the same step even when
    the signal reached them at different times, and the checkpoint is written by all of them together.
    Further signals while stopping are logged and ignored, so a second SIGTERM cannot cut the save short.

    After ``trainer.train()`` returns, :attr:`checkpoint` is the path of that checkpoint (None when no signal
    came) and :attr:`signal_name` the signal's name. The handlers are those of the process again once training
    has ended (:class:`simcse.training.trainer.SimCSETrainer` also restores them when training raises). Signal handlers
    can only be installed by the main thread; elsewhere the callback does nothing.
    """

    def __init__(self, signals=DEFAULT_SAVE_SIGNALS):
        self.signals = parse_signals(",".join(signals) if not isinstance(signals, str) else signals)
        self.signal_name: str | None = None
        self.stop_step: int | None = None
        self.checkpoint: str | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        import signal

        name = signal.Signals(signum).name
        if self.signal_name is None:
            self.signal_name = name
            logger.warning("%s received: finishing this optimizer step, then saving a checkpoint and stopping", name)
        else:
            logger.warning("%s received while stopping: ignored until the checkpoint is saved", name)

    def _install(self) -> None:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        for name in self.signals:
            sig = getattr(signal, f"SIG{name}")
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore_handlers(self) -> None:
        """Put back the signal handlers the process had before training (idempotent)."""
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def _requested_anywhere(self, args) -> bool:
        flag = self.signal_name is not None
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            import torch

            t = torch.tensor([1.0 if flag else 0.0], device=args.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if t.item() > 0 and not flag:
                self.signal_name = "a signal on another rank"
            return bool(t.item() > 0)
        return flag

    def on_train_begin(self, args, state, control, **kwargs):
        self.signal_name, self.stop_step, self.checkpoint = None, None, None
        self._install()

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop_step is None and self._requested_anywhere(args):
            self.stop_step = state.global_step
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.stop_step is not None and state.global_step == self.stop_step:
            self.checkpoint = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")

    def on_train_end(self, args, state, control, **kwargs):
        self.restore_handlers()
