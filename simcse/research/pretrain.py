"""Masked-language-model pretraining of a small BERT from scratch (a raw, never sentence-tuned encoder).

The SimCSE paper starts from a raw pretrained language model (BERT, RoBERTa). Where no such checkpoint can
be downloaded, this module makes a small stand-in with HF's own pieces only:

* a WordPiece tokenizer trained with the ``tokenizers`` library on the same text (BERT's normalizer and
  pre-tokenizer, lower-cased, special tokens ``[PAD] [UNK] [CLS] [SEP] [MASK]``);
* ``BertForMaskedLM`` from a ``BertConfig`` of the chosen size;
* ``DataCollatorForLanguageModeling`` (BERT's 15% masking, 80/10/10 replacement);
* HF ``Trainer`` (checkpoints every ``save_steps``, resumed automatically from the newest one).

One training example is one line of the text file (one sentence for ``wiki1m_for_simcse.txt``), truncated
to ``max_seq_length`` tokens, as the sentences SimCSE later encodes. The result is a plain HF folder
(``config.json``, ``model.safetensors``, tokenizer files) usable as ``--model_name_or_path``; its MLM loss
curve is written next to it as ``loss_curve.csv`` (and ``loss_curve.png``).

Same seed, same text, same vocabulary and same arguments give the same weights (CPU), also across a
resume. The vocabulary itself can differ between two trainings on the same text where merge candidates tie
in count: ``tokenizers``' BPE/WordPiece trainer breaks ties in hash-map order (upstream issue
huggingface/tokenizers#1794). Pass ``tokenizer_name_or_path`` (for example an earlier run's folder) to reuse
a vocabulary exactly.
"""
from __future__ import annotations

import csv
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

logger = logging.getLogger("simcse.research.pretrain")

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@dataclass
class PretrainArguments:
    """Arguments of :func:`pretrain` (``python scripts/pretrain_mlm.py --help`` lists them)."""

    train_file: str = field(metadata={"help": "UTF-8 text, one example (sentence) per line, e.g. data/wiki1m_for_simcse.txt"})
    output_dir: str = field(metadata={"help": "Folder for checkpoints and the final HF model + tokenizer"})
    max_lines: int = field(default=0, metadata={"help": "Use only the first N lines of train_file (0 = all)"})
    tokenizer_name_or_path: str = field(default="", metadata={"help": "Reuse this folder's WordPiece vocabulary "
                                                                      "instead of training one (exact reruns)"})
    tokenizer_lines: int = field(default=200_000, metadata={"help": "Train the WordPiece vocabulary on the first N lines (0 = all)"})
    vocab_size: int = field(default=8192, metadata={"help": "WordPiece vocabulary size (special tokens included)"})
    hidden_size: int = field(default=256, metadata={"help": "BERT hidden size"})
    num_hidden_layers: int = field(default=4, metadata={"help": "Number of Transformer layers"})
    num_attention_heads: int = field(default=4, metadata={"help": "Attention heads (must divide hidden_size)"})
    intermediate_size: int = field(default=0, metadata={"help": "Feed-forward size (0 = 4 * hidden_size, as BERT)"})
    max_seq_length: int = field(default=64, metadata={"help": "Tokens per example after truncation, [CLS]/[SEP] included"})
    dropout: float = field(default=0.1, metadata={"help": "hidden_dropout_prob and attention_probs_dropout_prob (BERT: 0.1)"})
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of tokens masked (BERT: 0.15)"})
    batch_size: int = field(default=64, metadata={"help": "Examples per optimizer step"})
    learning_rate: float = field(default=5e-4, metadata={"help": "Peak AdamW learning rate (linear warmup then linear decay)"})
    warmup_ratio: float = field(default=0.06, metadata={"help": "Fraction of max_steps spent warming up"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay"})
    max_steps: int = field(default=1000, metadata={"help": "Optimizer steps"})
    save_steps: int = field(default=500, metadata={"help": "Write a checkpoint every N steps (resume loses at most N)"})
    logging_steps: int = field(default=50, metadata={"help": "Log the MLM loss every N steps"})
    bf16: bool = field(default=True, metadata={"help": "bfloat16 autocast (CPU or GPU)"})
    seed: int = field(default=42, metadata={"help": "Seed of weights, data order and masking"})
    torch_threads: int = field(default=0, metadata={"help": "torch.set_num_threads (0 = leave torch's default)"})
    dataloader_num_workers: int = field(default=0, metadata={"help": "DataLoader worker processes that mask and "
                                                                       "collate batches (0 = in the training process)"})
    max_minutes: float = field(default=0.0, metadata={"help": "Stop (and save) after this many minutes of training in "
                                                              "this process, even before max_steps (0 = no limit)"})

    def __post_init__(self):
        if not Path(self.train_file).is_file():
            raise FileNotFoundError(f"train_file {self.train_file!r} does not exist or is not a file")
        positive = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "batch_size",
                    "max_steps", "save_steps", "logging_steps")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_seq_length < 3:
            raise ValueError(f"max_seq_length must be >= 3 ([CLS] token [SEP]), got {self.max_seq_length}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must divide hidden_size ({self.hidden_size})")
        if self.vocab_size <= len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {self.vocab_size}")
        for name in ("dropout", "mlm_probability", "warmup_ratio"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.mlm_probability == 0:
            raise ValueError("mlm_probability must be > 0 (nothing would be masked)")
        if self.max_minutes < 0:
            raise ValueError(f"max_minutes must be >= 0 (0 = no limit), got {self.max_minutes}")
        if self.max_lines < 0 or self.tokenizer_lines < 0:
            raise ValueError("max_lines and tokenizer_lines must be >= 0 (0 = all lines)")
        if self.dataloader_num_workers < 0:
            raise ValueError(f"dataloader_num_workers must be >= 0, got {self.dataloader_num_workers}")


def read_lines(path: str | os.PathLike, limit: int = 0) -> list[str]:
    """First ``limit`` non-empty lines of a UTF-8 file (all if 0), stripped. Raises ValueError if none."""
    lines = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                lines.append(line)
                if limit and len(lines) >= limit:
                    break
    if not lines:
        raise ValueError(f"train_file {str(path)!r} has no non-empty lines")
    return lines


def train_tokenizer(lines: list[str], vocab_size: int, out_dir: str | os.PathLike, max_length: int):
    """Train a lower-cased BERT WordPiece vocabulary on ``lines``; save and return a ``BertTokenizerFast``.

    Uses ``tokenizers``' WordPiece model, BertNormalizer (lower-case, strip accents), BertPreTokenizer and
    WordPieceTrainer (``##`` continuation prefix), as BERT's own vocabulary. The vocabulary may come out
    smaller than ``vocab_size`` on a small text.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import BertTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    tok.train_from_iterator(lines, trainer=trainer, length=len(lines))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    (out_dir / "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")
    fast = BertTokenizerFast(vocab=str(out_dir / "vocab.txt"), do_lower_case=True, model_max_length=max_length)
    fast.save_pretrained(out_dir)
    return fast


class TokenizedLines:
    """Map-style dataset: item i = ``{"input_ids": list[int]}`` of line i, [CLS] ... [SEP], at most max_length."""

    def __init__(self, lines: list[str], tokenizer, max_length: int, batch: int = 10_000):
        self.ids: list[list[int]] = []
        for start in range(0, len(lines), batch):
            enc = tokenizer(lines[start:start + batch], truncation=True, max_length=max_length,
                            return_attention_mask=False, return_token_type_ids=False)
            self.ids.extend(enc["input_ids"])

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i]}


def build_model(args: PretrainArguments, vocab_size: int, pad_token_id: int):
    """A randomly initialised ``BertForMaskedLM`` of the size in ``args`` (seeded by ``args.seed``).

    Its position table has exactly ``args.max_seq_length`` rows: every position the pretraining sees is
    trained and none is left untrained for a later user to read by encoding longer inputs: a longer input is
    truncated (the saved tokenizer's ``model_max_length``, sentence-transformers' ``max_seq_length``) or
    refused (a plain HF forward), never embedded with random position vectors.
    """
    import torch
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=vocab_size, hidden_size=args.hidden_size, num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads, intermediate_size=args.intermediate_size or 4 * args.hidden_size,
        max_position_embeddings=args.max_seq_length, hidden_dropout_prob=args.dropout,
        attention_probs_dropout_prob=args.dropout, pad_token_id=pad_token_id)
    torch.manual_seed(args.seed)
    return BertForMaskedLM(config)


def _last_checkpoint(output_dir: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None


def write_loss_curve(log_history: list[dict], path: str | os.PathLike) -> list[tuple[int, float]]:
    """Write ``step,loss`` rows of the Trainer's training-loss log to ``path`` (CSV); return the rows."""
    rows = [(int(h["step"]), float(h["loss"])) for h in log_history if "loss" in h and "step" in h]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["step", "mlm_loss"])
        w.writerows(rows)
    return rows


def time_budget_callback(minutes: float):
    """A ``TrainerCallback`` that stops training once ``minutes`` of wall time have passed since train begin."""
    import time

    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if time.monotonic() - self.start > 60.0 * minutes:
                logger.warning("time budget of %.1f min reached at step %d: stopping", minutes, state.global_step)
                control.should_training_stop = True
                control.should_save = True
            return control

    return TimeBudget()


def pretrain(args: PretrainArguments, callbacks: list | None = None) -> Path:
    """Pretrain (or resume) and save the final model + tokenizer in ``args.output_dir``; return that folder.

    ``callbacks``: extra HF ``TrainerCallback`` objects (e.g. a step clock), added after the time budget's.

    The tokenizer comes from ``tokenizer_name_or_path`` if given, else from ``output_dir`` if it holds one
    (``tokenizer.json``: a resumed run sees the same ids), else it is trained on the text and saved there.
    Training resumes from the newest ``checkpoint-*`` folder there, if any (weights, optimizer, scheduler,
    RNG states and data position, as HF Trainer restores them; the masks drawn after a resume are not
    bit-for-bit those of an uninterrupted run). ``train_result.json`` records the step reached, the
    checkpoint resumed from and the Trainer's run metrics.
    """
    import torch
    from transformers import (BertTokenizerFast, DataCollatorForLanguageModeling, Trainer, TrainingArguments,
                              set_seed)

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pretrain_args.json").write_text(json.dumps(asdict(args), indent=2) + "\n", encoding="utf-8")
    set_seed(args.seed)
    lines = read_lines(args.train_file, args.max_lines)
    if args.tokenizer_name_or_path or (out / "tokenizer.json").is_file():
        tokenizer = BertTokenizerFast.from_pretrained(args.tokenizer_name_or_path or out)
        tokenizer.save_pretrained(out)
    else:
        tok_lines = lines[: args.tokenizer_lines] if args.tokenizer_lines else lines
        tokenizer = train_tokenizer(tok_lines, args.vocab_size, out, args.max_seq_length)
    dataset = TokenizedLines(lines, tokenizer, args.max_seq_length)
    logger.info("pretraining on %d lines, vocabulary %d", len(dataset), len(tokenizer))
    model = build_model(args, len(tokenizer), tokenizer.pad_token_id)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mlm_probability, pad_to_multiple_of=8)
    targs = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=args.batch_size, learning_rate=args.learning_rate,
        warmup_steps=int(args.warmup_ratio * args.max_steps), weight_decay=args.weight_decay,
        max_steps=args.max_steps, lr_scheduler_type="linear", save_steps=args.save_steps, save_total_limit=2,
        logging_steps=args.logging_steps, logging_first_step=True, bf16=args.bf16, seed=args.seed,
        data_seed=args.seed, report_to=[], dataloader_num_workers=args.dataloader_num_workers, disable_tqdm=True,
        use_cpu=not torch.cuda.is_available())
    callbacks = ([time_budget_callback(args.max_minutes)] if args.max_minutes else []) + list(callbacks or [])
    trainer = Trainer(model=model, args=targs, train_dataset=dataset, data_collator=collator, callbacks=callbacks,
                      processing_class=tokenizer)  # checkpoints are complete HF folders
    resume = _last_checkpoint(out)
    result = trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(str(out))
    tokenizer.save_pretrained(out)
    curve = write_loss_curve(trainer.state.log_history, out / "loss_curve.csv")
    try:
        from simcse.evaluation.plots import plot_loss_curve

        plot_loss_curve([s for s, _ in curve], [v for _, v in curve], out / "loss_curve.png",
                        title=f"MLM pretraining ({args.num_hidden_layers} layers, hidden {args.hidden_size})")
    except ImportError:  # matplotlib is optional
        logger.warning("matplotlib not installed: loss_curve.png not written")
    summary = {"global_step": result.global_step, "resumed_from": resume, "n_lines": len(dataset),
               "vocab_size": len(tokenizer), "n_parameters": model.num_parameters(), **result.metrics}
    (out / "train_result.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return out
