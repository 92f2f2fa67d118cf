""":class:`SimCSETrainingArguments`: HF ``TrainingArguments`` with SimCSE's own run options, checked at once.

SimCSE's additions: the precision rule (``--bf16 auto``, ``--precision``; :func:`simcse.training.precision.resolve_precision`),
the global contrastive batch (``--global_batch_size``; :mod:`simcse.training.batch_size`), the signals that save
a checkpoint (``--save_on_signal``), and checks of HF's numeric options that HF itself leaves to the first step
(``--learning_rate -1``, ``--gradient_accumulation_steps 0``, ``--num_train_epochs 0``, ...). Everything is checked
in ``__post_init__``, before a model or a dataset is loaded: a bad value is one ``ValueError`` line.

``--do_eval`` keeps the reference's meaning (transformers 4.2: asked for, not implied by ``--eval_strategy``):
the final evaluation with the transfer tasks runs only when it is given.
"""
from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from pathlib import Path

from transformers import TrainingArguments

from simcse.files.checks import check_int, check_number, check_seed

DEFAULT_PER_DEVICE_BATCH = 8  # HF's default, used when neither batch option is given
DEFAULT_EVAL_BATCH = 128  # the evaluator's own batch (sentences sorted by length): HF's 8 made evaluation 3-5x slower


@dataclass
class SimCSETrainingArguments(TrainingArguments):
    """HF ``TrainingArguments`` plus SimCSE's run options (the fields below); see the module docstring.

    Fields that mean "left open" when None: ``bf16``, ``fp16`` (decided by ``precision`` / ``auto``),
    ``per_device_train_batch_size`` (derived from ``global_batch_size``, else 8). After ``__post_init__``
    ``bf16``/``fp16`` are bools and ``per_device_train_batch_size`` an int, as HF expects.

    Raises (from ``__post_init__``):
        ValueError: one line naming the option and what it must be.
    """

    _argument_group_name = "SimCSE run options"

    bf16: str | None = field(
        default=None, metadata={"nargs": "?", "const": "true",
                                "help": "true: bf16 autocast (on a machine without CUDA it runs on the CPU); false; or "
                                        "auto: bf16 where the device the run uses multiplies bf16 natively (CPUs with "
                                        "AMX or AVX512-BF16, bf16 GPUs), fp32 elsewhere; the choice is printed. "
                                        "Unset: --precision decides, else fp32."})
    fp16: bool | None = field(
        default=None, metadata={"nargs": "?", "const": True,
                                "help": "fp16 mixed precision (CUDA GPUs only, the reference's --fp16). Unset: "
                                        "--precision decides."})
    precision: str | None = field(
        default=None,
        metadata={"help": "Precision on CUDA GPUs, as the configs state it: 'bf16', 'fp16' (the reference's --fp16), "
                          "'fp32', or 'auto' (= --bf16 auto). On the CPU only 'auto' applies (fp32 otherwise). An "
                          "explicit --bf16/--fp16 true wins."})
    per_device_train_batch_size: int | None = field(
        default=None,
        metadata={"help": f"Sentences (tuples) per process per step. Unset: derived from --global_batch_size, else "
                          f"{DEFAULT_PER_DEVICE_BATCH}."})
    global_batch_size: int | None = field(
        default=None,
        metadata={"help": "The contrastive batch over all processes (the paper's 64 or 512). The per-device batch is "
                          "derived as global_batch_size / WORLD_SIZE, so 1 or 8 GPUs train the same experiment. "
                          "Unset: --per_device_train_batch_size is used as given."})
    allow_batch_size_mismatch: bool = field(
        default=False,
        metadata={"help": "Keep an explicit --per_device_train_batch_size that disagrees with --global_batch_size "
                          "(a different experiment, on purpose). Without it such a mismatch is refused."})
    per_device_eval_batch_size: int | None = field(
        default=None,
        metadata={"help": f"Sentences per encoder call of the STS evaluations. Unset: {DEFAULT_EVAL_BATCH}."})
    overwrite_output_dir: InitVar[bool] = False  # HF's spelling, from Python; on the command line the option is parsed once
    save_on_signal: str = field(
        default="TERM,USR1",
        metadata={"help": "Signals (comma-separated names: TERM, USR1, USR2, INT, HUP) on which training finishes "
                          "the current optimizer step, saves a checkpoint, prints the command that resumes it and "
                          "exits with status 75. SLURM sends TERM (or USR1 with --signal) before preempting a job. "
                          "'none': signals keep their default effect."})

    align_uniform_every: int = field(
        default=0,
        metadata={"help": "l_align / l_uniform on STS-B dev every N steps into <output_dir>/align_uniform.jsonl "
                          "(Figure 2's paths). 0: never."})

    def __post_init__(self, overwrite_output_dir: bool = False):
        from simcse.training.callbacks import parse_signals
        from simcse.training.precision import resolve_precision

        # HF users give overwrite_output_dir with the training arguments (transformers 4's TrainingArguments had it);
        # build_trainer honours it as DataTrainingArguments' option of the same name
        from simcse.files.checks import as_bool, coerce_bool_fields

        coerce_bool_fields(self)  # use_cpu="false" from Python is False, as on the command line
        self.overwrite_output_dir = as_bool(overwrite_output_dir, "overwrite_output_dir")
        if self.per_device_eval_batch_size is None:
            self.per_device_eval_batch_size = DEFAULT_EVAL_BATCH
        self._check_numbers()
        self._check_output_dir()
        self.save_signals = parse_signals(self.save_on_signal)  # tuple of names, () for 'none'
        self.bf16, self.fp16, self.use_cpu = resolve_precision(
            self.bf16, self.fp16, self.precision, bool(self.use_cpu), say=lambda line: print(line, flush=True))
        self.per_device_train_batch_size = self._per_device_batch()
        asked_do_eval = bool(self.do_eval)
        super().__post_init__()
        self.do_eval = asked_do_eval  # HF sets it whenever eval_strategy != "no"; the reference's --do_eval is asked for

    def _check_numbers(self) -> None:
        """HF's numeric options that HF checks late (at the first step) or never."""
        check_number(self.learning_rate, "--learning_rate", 0, low_open=True)
        check_number(self.weight_decay, "--weight_decay", 0)
        check_number(self.max_grad_norm, "--max_grad_norm", 0, hint=" (0 = no clipping)")
        check_number(self.adam_beta1, "--adam_beta1", 0, 1, high_open=True)
        check_number(self.adam_beta2, "--adam_beta2", 0, 1, high_open=True)
        check_number(self.adam_epsilon, "--adam_epsilon", 0)
        check_number(self.warmup_steps, "--warmup_steps", 0)
        check_int(self.gradient_accumulation_steps, "--gradient_accumulation_steps")
        check_int(self.align_uniform_every, "--align_uniform_every", 0)
        check_int(self.per_device_train_batch_size, "--per_device_train_batch_size", allow_none=True)
        check_int(self.per_device_eval_batch_size, "--per_device_eval_batch_size")
        check_int(self.global_batch_size, "--global_batch_size", allow_none=True)
        check_seed(self.seed, "--seed")
        check_int(self.dataloader_num_workers, "--dataloader_num_workers", 0)
        check_int(self.save_total_limit, "--save_total_limit", 0, allow_none=True)
        for name in ("logging_steps", "eval_steps", "save_steps"):
            check_number(getattr(self, name), f"--{name}", 0, low_open=True, allow_none=True)
        if self.max_steps == 0 or (isinstance(self.max_steps, int) and self.max_steps < -1):
            raise ValueError(f"--max_steps {self.max_steps} trains nothing: give a positive number of optimizer steps, "
                             "or -1 (the default) to train --num_train_epochs")
        check_int(self.max_steps, "--max_steps", -1)
        if self.max_steps == -1:
            check_number(self.num_train_epochs, "--num_train_epochs", 0, low_open=True,
                         hint=" (or give --max_steps N); 0 would train nothing")

    def _check_output_dir(self) -> None:
        out = Path(self.output_dir).expanduser() if self.output_dir else None
        blocker = next((q for q in ([out, *out.parents] if out else []) if q.exists()), None)
        if blocker is not None and not blocker.is_dir():
            raise ValueError(f"--output_dir {self.output_dir!r} cannot be used: {str(blocker)!r} is a file, not a folder")

    def _per_device_batch(self) -> int:
        """The per-device batch: given, or derived from ``global_batch_size`` and ``WORLD_SIZE``."""
        if self.global_batch_size is None:
            return DEFAULT_PER_DEVICE_BATCH if self.per_device_train_batch_size is None else self.per_device_train_batch_size
        import logging

        from simcse.training.batch_size import derive_per_device_batch, world_size_from_env

        world = world_size_from_env()
        per_device = derive_per_device_batch(self.global_batch_size, world, self.per_device_train_batch_size,
                                             self.allow_batch_size_mismatch)
        logging.getLogger(__name__).info("contrastive batch: %d per device x %d process(es) = %d (--global_batch_size %d)",
                                         per_device, world, per_device * world, self.global_batch_size)
        return per_device
