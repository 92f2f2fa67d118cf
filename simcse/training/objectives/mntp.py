"""Masked next-token prediction (MNTP), LLM2Vec's second step (BehnamGhader et al., COLM 2024,
arXiv 2404.05961; official code McGill-NLP/llm2vec, ``experiments/run_mntp.py``): after the attention of a
decoder has been made bidirectional, tokens are masked and each masked token ``i`` is predicted from the
decoder's output at position ``i - 1`` through its own language-model head, so the model learns to use the
future context the switch opened up. ``--loss mntp``."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from simcse.training.objectives import register_objective
from simcse.training.objectives.base import BatchSeeds, Objective

MASK_TOKEN_TYPES = ("blank", "eos", "mask")  # LLM2Vec's --mask_token_type for tokenizers without a mask token


class MNTP(Objective):
    """Masked next-token prediction on one view of each sentence.

    Masking follows the official run's default collator (``data_collator_type: default``: transformers'
    ``DataCollatorForLanguageModeling``): ``mlm_probability`` of the non-special, non-padding tokens are chosen;
    of those 80% become the mask token, 10% a random token, 10% stay (:func:`simcse.training.data.mask_tokens`).
    The loss is the official one (the causal-LM loss of ``*ForCausalLM`` on those labels): the mean over the
    chosen tokens ``i >= 1`` of the cross-entropy of the LM head's logits at position ``i - 1`` against token
    ``i`` (float32). The LM head is the checkpoint's own (``*ForCausalLM``'s ``lm_head``), frozen as in the
    official LoRA runs; when the checkpoint ties it to the input embeddings, the encoder's (trained) input
    embeddings are used. The head is not written into the saved model folder.

    Masks are drawn from a generator seeded by (seed, step, rank, micro-batch): a resumed run masks as an
    uninterrupted one. The sentence embeddings are not used (``embed`` does no encoder pass).

    Args:
        mlm_probability: fraction of tokens chosen, in (0, 1) (official Llama/Mistral configs: 0.2).
        mask_token_type: for a tokenizer without a mask token, what stands for it, as the official
            ``--mask_token_type``: ``blank`` ("_", the official configs' choice), ``eos`` or ``mask`` (a token
            ``<mask>`` that must already be in the vocabulary).

    Not supported (refused at setup): several processes and gradient caching (the MNTP pass runs outside the
    wrapped model's forward).
    """

    name = "mntp"
    single_view_copies = 1
    min_batch = 1
    supports_gather = False
    supports_grad_cache = False
    uses_embeddings = False  # token predictions only: the wrappers over sentence embeddings refuse it

    def __init__(self, mlm_probability: float = 0.2, mask_token_type: str = "blank"):
        super().__init__()
        if isinstance(mlm_probability, bool) or not isinstance(mlm_probability, (int, float)) or not 0 < mlm_probability < 1:
            raise ValueError(f"mlm_probability must be in (0, 1), got {mlm_probability!r}")
        if mask_token_type not in MASK_TOKEN_TYPES:
            raise ValueError(f"mask_token_type must be one of {list(MASK_TOKEN_TYPES)}, got {mask_token_type!r}")
        self.mlm_probability = float(mlm_probability)
        self.mask_token_type = mask_token_type
        self.lm_head: nn.Module | None = None
        self._tied = False
        self._token_facts: tuple[int, int, list[int]] | None = None
        self._seeds = BatchSeeds()

    # ---------------------------------------------------------------- setup
    def setup(self, model, args) -> None:
        from transformers import AutoModelForCausalLM

        from simcse.models.decoder import is_decoder_config

        config = model.encoder.config
        if not is_decoder_config(config):
            raise ValueError(f"--loss mntp trains decoder LLMs; the model is a {config.model_type!r} encoder "
                             "(use --do_mlm for masked-LM training of an encoder)")
        path = config._name_or_path
        lm, info = AutoModelForCausalLM.from_pretrained(path, config=config, output_loading_info=True)
        head = lm.get_output_embeddings()
        self._tied = head.weight.data_ptr() == lm.get_input_embeddings().weight.data_ptr() or bool(
            getattr(config, "tie_word_embeddings", False))
        head_names = {n for n, p in lm.named_parameters() if p is head.weight}
        if not self._tied and head_names & set(info.get("missing_keys", ())):
            raise ValueError(f"--loss mntp predicts tokens with the model's LM head, and {path!r} has none (a folder "
                             "saved by simcse keeps the encoder only; the head would be random): start MNTP from the "
                             "original checkpoint")
        if not self._tied:
            self.lm_head = nn.Linear(head.in_features, head.out_features, bias=head.bias is not None)
            self.lm_head.load_state_dict(head.state_dict())
            self.lm_head.requires_grad_(False)
            self.lm_head.to(dtype=next(model.encoder.parameters()).dtype)
        del lm
        self._token_facts = _mask_facts(model.tokenizer, self.mask_token_type)

    # ---------------------------------------------------------------- per batch
    def prepare_batch(self, batch, context):
        from simcse.training.data import mask_tokens

        if "mntp_input_ids" in batch:
            return batch
        seed = self._seeds(context, 0x4D4E5450)  # salted: "MNTP"
        mask_id, vocab, special = self._token_facts
        ids = batch["input_ids"][:, 0]  # (B, L): the one view
        masked, labels = mask_tokens(ids.cpu(), batch["attention_mask"][:, 0].cpu(), mask_token_id=mask_id,
                                     vocab_size=vocab, special_ids=special, mlm_probability=self.mlm_probability,
                                     generator=torch.Generator().manual_seed(seed))
        return {**batch, "mntp_input_ids": masked.to(ids.device), "mntp_labels": labels.to(ids.device)}

    def embed(self, model, batch, context):
        b = batch["input_ids"].shape[0]
        return torch.zeros(b, 1, context.model.hidden_size, device=batch["input_ids"].device)

    def loss(self, embeddings, batch, context):
        return embeddings.sum() * 0.0  # everything is in chunk_loss (token states)

    def chunk_loss(self, embeddings, batch, context):
        encoder = context.model.encoder
        out = encoder(input_ids=batch["mntp_input_ids"], attention_mask=batch["attention_mask"][:, 0], return_dict=True)
        hidden = out.last_hidden_state[:, :-1]  # (B, L-1, H): position i-1 predicts token i
        if self._tied:
            logits = F.linear(hidden, encoder.get_input_embeddings().weight)
        else:
            logits = self.lm_head(hidden)
        labels = batch["mntp_labels"][:, 1:]
        n = int((context.full_batch.get("mntp_labels", batch["mntp_labels"])[:, 1:] != -100).sum())
        if n == 0:
            return {"mntp": logits.sum() * 0.0}
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100,
                             reduction="sum")
        return {"mntp": ce / n}

    def check_columns(self, columns, source):
        if list(columns) != ["sent0"]:
            raise ValueError(f"--loss mntp trains on single sentences (a one-sentence-per-line file); the training "
                             f"data {source!r} has views {list(columns)}")

    def get_config_dict(self) -> dict:
        return {"mlm_probability": self.mlm_probability, "mask_token_type": self.mask_token_type}


def _mask_facts(tokenizer, mask_token_type: str) -> tuple[int, int, list[int]]:
    """(mask token id, vocabulary size, special ids) for MNTP masking, as the official run picks the mask
    token of a tokenizer that has none (``blank``: "_"; ``eos``; ``mask``: an existing ``<mask>`` token).

    Raises:
        ValueError: the chosen stand-in is not a single token of the vocabulary."""
    if tokenizer.mask_token_id is not None:
        mask_id = tokenizer.mask_token_id
    else:
        text = {"blank": "_", "eos": tokenizer.eos_token, "mask": "<mask>"}[mask_token_type]
        mask_id = tokenizer.convert_tokens_to_ids(text) if text is not None else None
        if mask_id is None or mask_id == tokenizer.unk_token_id:
            raise ValueError(f"--loss mntp: the tokenizer has no mask token and mask_token_type {mask_token_type!r} "
                             f"({text!r}) is not one of its tokens; choose another mask_token_type")
    return int(mask_id), len(tokenizer), list(tokenizer.all_special_ids)


register_objective(MNTP)
