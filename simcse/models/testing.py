"""Tiny random encoders and decoder LLMs that need no download: for tests of your own objectives, poolers or
data code, and the CPU demo of the decoder recipe (:func:`tiny_decoder`).

    from simcse.models.testing import tiny_encoder
    folder = tiny_encoder(tmp_path / "tiny")            # a 2-layer, hidden-32 random BERT with its tokenizer
    model = SimCSEModel.from_pretrained(str(folder))      # or simcse train --model_name_or_path FOLDER ...

The folder is an ordinary Hugging Face model folder (``config.json``, ``model.safetensors``, a WordPiece
``BertTokenizerFast`` over :data:`WORDS`), so everything that reads a model name or path reads it, with the network
off. Weights are random (``torch.manual_seed(seed)``), so the same arguments give the same weights on every run.
The project's own tests, benchmarks and GPU check build their models here.
"""
from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# the vocabulary after the special tokens: enough words for short English-like sentences
WORDS = (
    "a an the man woman child dog cat horse is are was playing riding eating cutting guitar flute bread "
    "onion car road park walks runs sits on in with and of to . , red blue big small young old music "
    "plays sings dances jumps food table house tree water ball"
).split()


def tiny_encoder(folder: str | Path, *, arch: str = "bert", layers: int = 2, hidden: int = 32, heads: int = 2,
                 intermediate: int | None = None, positions: int = 64, vocab_size: int | None = None,
                 init_std: float = 0.02, dropout: float = 0.1, seed: int = 0, words=WORDS, mlm_head: bool = False) -> Path:
    """Save a random ``arch`` encoder and its WordPiece tokenizer into ``folder`` (created); return ``folder``.

    Args:
        arch: ``"bert"`` (``BertModel``) or ``"roberta"`` (``RobertaModel`` layout: no token types, padding-offset
            positions; the tokenizer stays WordPiece, which is all a test of the layout needs).
        layers, hidden, heads: encoder depth, width (``hidden`` must divide by ``heads``) and attention heads.
        intermediate: feed-forward width (default ``2 * hidden``, small on purpose; BERT's own is ``4 * hidden``).
        positions: ``max_position_embeddings``, the longest input in tokens.
        vocab_size: rows of the embedding table (default: exactly the written vocabulary; a larger value pads
            the table, e.g. 30522 for BERT-base's memory footprint).
        init_std: ``initializer_range`` (BERT: 0.02; larger spreads the random sentences' embeddings apart).
        dropout: hidden and attention dropout probability.
        seed: ``torch.manual_seed`` before the weights are drawn.
        words: the vocabulary after :data:`SPECIAL_TOKENS` (lower-case words; the tokenizer lower-cases).
        mlm_head: save the masked-LM model (``BertForMaskedLM`` / ``RobertaForMaskedLM``: the encoder plus its
            random MLM head), so ``--do_mlm``, InfoCSE and DiffCSE's generator can be tried on it.

    Raises:
        ValueError: an unknown ``arch``, ``hidden`` not divisible by ``heads``, or ``vocab_size`` smaller than
            the vocabulary.
    """
    import torch
    from transformers import (BertConfig, BertForMaskedLM, BertModel, BertTokenizerFast, RobertaConfig,
                              RobertaForMaskedLM, RobertaModel)

    if arch not in ("bert", "roberta"):
        raise ValueError(f"arch: expected 'bert' or 'roberta', got {arch!r}")
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = [*SPECIAL_TOKENS, *words]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizerFast(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    if tok.vocab_size != len(vocab):  # a repeated word, or a tokenizer that did not read the file
        raise ValueError(f"the tokenizer read {tok.vocab_size} of the {len(vocab)} vocabulary entries; "
                         "words must be distinct")
    size = len(vocab) if vocab_size is None else vocab_size
    if size < len(vocab):
        raise ValueError(f"vocab_size ({size}) is smaller than the vocabulary ({len(vocab)} tokens)")
    common = dict(vocab_size=size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  intermediate_size=intermediate or 2 * hidden, max_position_embeddings=positions,
                  hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, initializer_range=init_std)
    torch.manual_seed(seed)
    if arch == "bert":
        model = (BertForMaskedLM if mlm_head else BertModel)(BertConfig(**common))
    else:
        model = (RobertaForMaskedLM if mlm_head else RobertaModel)(
            RobertaConfig(pad_token_id=0, bos_token_id=2, eos_token_id=3, type_vocab_size=1, **common))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


DECODER_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gpt2")
DECODER_SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>", "<mask>")
FAMILY_ADDS_BOS = {"llama": True, "mistral": True, "gemma": True, "qwen2": False, "qwen3": False, "gpt2": False}


def _qwen2_tokenizer(words, specials: dict):
    """A ``Qwen2Tokenizer`` (byte-level BPE with Qwen2's pre-tokenizer) whose merges make each of ``words``, with
    and without a leading space, one token: transformers 5 loads every ``qwen2`` folder's tokenizer as that class
    from the vocabulary and merges alone, so a word-level vocabulary would come back split into bytes."""
    import json

    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX, Qwen2Tokenizer

    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
                                                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=100_000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=list(DECODER_SPECIAL_TOKENS), show_progress=False)
    core.train_from_iterator([" ".join(words), *words], trainer)
    bpe = json.loads(core.to_str())["model"]
    return Qwen2Tokenizer(vocab=bpe["vocab"], merges=[tuple(m) for m in bpe["merges"]], **specials)


def tiny_decoder(folder: str | Path, family: str = "llama", *, dropout: float = 0.1, seed: int = 0,
                 words=WORDS) -> Path:
    """Save a random ``family`` causal LM (``*ForCausalLM``: the base model and its LM head; hidden 32, 2 layers,
    4 heads, 2 key-value heads) and a word-level tokenizer into ``folder`` (created); return ``folder``.

    The tokenizer (a ``PreTrainedTokenizerFast`` over :data:`DECODER_SPECIAL_TOKENS` and ``words``, lower-cased,
    split at whitespace and punctuation) has pad, bos, eos and mask tokens, and adds the special tokens the family's
    own tokenizer adds (:data:`FAMILY_ADDS_BOS`): a BOS for Llama, Mistral and Gemma (a ``TemplateProcessing``
    post-processor), none for Qwen2/3 and GPT-2 (a ``ByteLevel`` one, as theirs); none adds an EOS. Qwen2's is a
    byte-level BPE over the same words instead (:func:`_qwen2_tokenizer`), as transformers loads it.

    Raises:
        ValueError: an unknown ``family`` (lists :data:`DECODER_FAMILIES`).
    """
    import torch
    import transformers as tf
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    if family not in DECODER_FAMILIES:
        raise ValueError(f"family: expected one of {list(DECODER_FAMILIES)}, got {family!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {w: i for i, w in enumerate(dict.fromkeys([*DECODER_SPECIAL_TOKENS, *words]))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    if FAMILY_ADDS_BOS[family]:
        bos = DECODER_SPECIAL_TOKENS[2]
        core.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1",
                                                            special_tokens=[(bos, vocab[bos])])
    else:
        core.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = dict(pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>", mask_token="<mask>",
                    model_max_length=64)
    if family == "qwen2":  # transformers rebuilds any qwen2 tokenizer as Qwen2Tokenizer from its vocab and merges
        tok = _qwen2_tokenizer(words, specials)
    else:
        tok = tf.PreTrainedTokenizerFast(tokenizer_object=core, **specials)
    tok.save_pretrained(folder)
    ids = dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
               eos_token_id=tok.eos_token_id)
    torch.manual_seed(seed)
    if family == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, resid_pdrop=dropout,
                                                 embd_pdrop=dropout, attn_pdrop=dropout, **ids))
    else:
        name = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma": "Gemma"}[family]
        cfg = getattr(tf, f"{name}Config")(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                            max_position_embeddings=64, attention_dropout=dropout, **ids)
        model = getattr(tf, f"{name}ForCausalLM")(cfg)
    model.save_pretrained(folder)
    return folder
