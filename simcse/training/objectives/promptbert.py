"""PromptBERT (Jiang et al., EMNLP 2022, arXiv 2201.04337; official code kongds/Prompt-BERT).

The sentence embedding is the ``[MASK]`` state of a prompt template (the ``prompt_mask`` pooler,
:mod:`simcse.models.prompt`); the positive pair is the same sentence under two *different* templates, and
*template denoising* subtracts each template's own ``[MASK]`` state (the template encoded alone, with the
position ids a sentence of the same length would give it). The loss is SimCSE's InfoNCE over in-batch
negatives (official ``cl_forward``: cosine / temp, cross-entropy; a hard negative, view 2, uses the second
template and ``hard_negative_weight`` as an additive logit, as the official code).

The templates are set on the model at :meth:`PromptBERT.setup` and saved with it (``simcse_config.json``), so
``SimCSE(folder)`` encodes with the first template, without denoising (the official unsupervised evaluation).
"""
from __future__ import annotations

import math

import torch

from simcse.models.pooling import PROMPT_POOLERS
from simcse.models.prompt import DENOISE_POSITIONS, PromptConfig, parse_template
from simcse.training.losses import info_nce
from simcse.training.objectives import register_objective
from simcse.training.objectives.base import LossContext, Objective

# run.sh "unsup-bert": --mask_embedding_sentence_template / --mask_embedding_sentence_different_template
OFFICIAL_BERT_TEMPLATE = '*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*'
OFFICIAL_BERT_TEMPLATE2 = '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'


@register_objective
class PromptBERT(Objective):
    """PromptBERT's objective: InfoNCE between two prompt templates' ``[MASK]`` embeddings, denoised.

    Hyperparameters (``--loss_args``):
        template: view 0's template and the inference template (``{sentence}``/``{mask}`` or the official
            ``*sent_0*``/``*mask*`` notation). Default: the official unsupervised BERT one.
        template2: views 1.. (the positive; the hard negative); None: the first template for every view
            (official without ``--mask_embedding_sentence_different_template``).
        temp: softmax temperature (official ``--temp 0.05``).
        denoise: template denoising in training (official ``--mask_embedding_sentence_delta``).
        denoise_at_inference: also when encoding (the official supervised evaluation does; unsupervised not).
        denoise_at_dev: in the dev evaluations during training, which select the checkpoint (official
            ``sentemb_forward``: with ``--mask_embedding_sentence_delta`` the dev encoding subtracts the first
            template's delta unless ``--mask_embedding_sentence_delta_no_delta_eval``); None: as ``denoise``. The
            saved model encodes as ``denoise_at_inference`` says whatever this is.
        denoise_positions: ``"first_template"`` (official ``get_delta``: both templates' template-only rows shift
            their positions from the *first* template's prefix length) or ``"own_template"`` (each from its own;
            see :class:`simcse.models.prompt.PromptConfig`).
        hard_negative_weight: additive logit of the hard negative (view 2; official ``--hard_negative_weight``).

    Embeddings (B, V, H) come from the ``prompt_mask`` model; the loss is a float32 scalar.
    """

    name = "promptbert"
    input_columns = ("sent0",)
    optional_columns = ("sent1", "hard_neg")
    supports_gather = True  # official cl_forward all-gathers z1, z2 (and z3) with the local rows' gradients
    supports_grad_cache = True  # the prompt and denoising live in the encoder's forward; loss(embeddings) only
    dropout_views = False  # views 1.. use the second template (--fixed_dropout would drop it)
    pooler_types = PROMPT_POOLERS

    def __init__(self, template: str = OFFICIAL_BERT_TEMPLATE, template2: str | None = OFFICIAL_BERT_TEMPLATE2,
                 temp: float = 0.05, denoise: bool = True, denoise_at_inference: bool = False,
                 hard_negative_weight: float = 0.0, denoise_at_dev: bool | None = None,
                 denoise_positions: str = "first_template"):
        super().__init__()
        for key, value in (("template", template), ("template2", template2)):
            if value is not None:
                try:
                    parse_template(value)
                except ValueError as e:
                    raise ValueError(f"--loss_args {key}: {e}") from None
        if isinstance(temp, bool) or not isinstance(temp, (int, float)) or not temp > 0 or not math.isfinite(temp):
            raise ValueError(f"--loss_args temp must be a positive number, got {temp!r}")
        if not isinstance(hard_negative_weight, (int, float)) or not math.isfinite(hard_negative_weight):
            raise ValueError(f"--loss_args hard_negative_weight must be a finite number, got {hard_negative_weight!r}")
        for key, value in (("denoise", denoise), ("denoise_at_inference", denoise_at_inference),
                           ("denoise_at_dev", denoise if denoise_at_dev is None else denoise_at_dev)):
            if not isinstance(value, bool):
                raise ValueError(f"--loss_args {key} must be true or false, got {value!r}")
        if denoise_positions not in DENOISE_POSITIONS:
            raise ValueError(f"--loss_args denoise_positions must be one of {list(DENOISE_POSITIONS)}, "
                             f"got {denoise_positions!r}")
        self.template, self.template2 = template, template2
        self.temp, self.denoise, self.denoise_at_inference = float(temp), denoise, denoise_at_inference
        self.denoise_at_dev = denoise if denoise_at_dev is None else denoise_at_dev
        self.denoise_positions = denoise_positions
        self.hard_negative_weight = float(hard_negative_weight)

    def prompt_config(self) -> PromptConfig:
        """The :class:`~simcse.models.prompt.PromptConfig` this objective puts on the model."""
        templates = (self.template,) if self.template2 is None else (self.template, self.template2)
        return PromptConfig(templates, self.denoise, self.denoise_at_inference, self.denoise_positions)

    def dev_encoding(self, model):
        """Dev evaluations during training encode with the first template's delta subtracted when
        ``denoise_at_dev`` (the official run's checkpoint selection); the model's prompt is restored on exit."""
        import contextlib
        import dataclasses

        @contextlib.contextmanager
        def denoised():
            saved = model.prompt
            model.prompt = dataclasses.replace(saved, denoise_at_inference=self.denoise_at_dev)
            try:
                yield
            finally:
                model.prompt = saved

        return denoised() if getattr(model, "prompt", None) is not None else contextlib.nullcontext()

    def setup(self, model, args) -> None:
        """Put the templates on the model.

        Raises:
            ValueError: the model's pooler is not a ``prompt_mask`` pooler (names ``--pooler_type``), or a template
                does not fit the tokenizer (no mask token...).
        """
        self.check_pooler(getattr(model, "pooler_type", None))
        model.set_prompt(self.prompt_config())

    def loss(self, embeddings: torch.Tensor, batch, context: LossContext) -> torch.Tensor:
        z1 = embeddings[:, 0]
        keys = [context.gather(embeddings[:, v]) for v in range(1, embeddings.shape[1])]
        labels = torch.arange(len(z1), device=z1.device) + context.rank * len(z1)
        # info_nce's hard_negative_alpha multiplies exp(logit); the official weight is added to the logit
        return info_nce(z1, *keys[:2], temp=self.temp, hard_negative_alpha=math.exp(self.hard_negative_weight),
                        labels=labels)

    def extra_tokens(self, model, max_seq_length: int) -> int:
        """The longest template's tokens around a ``[CLS] s [SEP]`` row (the model wraps each row in it)."""
        from simcse.models.prompt import BoundPrompt

        return max(BoundPrompt.bind(t, model.tokenizer).extra_tokens for t in self.prompt_config().templates)

    def get_config_dict(self) -> dict:
        return {"template": self.template, "template2": self.template2, "temp": self.temp, "denoise": self.denoise,
                "denoise_at_inference": self.denoise_at_inference, "hard_negative_weight": self.hard_negative_weight,
                "denoise_at_dev": self.denoise_at_dev, "denoise_positions": self.denoise_positions}
