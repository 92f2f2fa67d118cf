"""PromptBERT's objective (simcse.training.objectives.promptbert) against an independent forward of the official
code (kongds/Prompt-BERT ``prompt_bert/models.py: cl_forward`` with ``--mask_embedding_sentence``,
``--mask_embedding_sentence_different_template`` and ``--mask_embedding_sentence_delta``; its templates tokenised
as ``train.py`` does): same loss (1e-6) and gradients (2e-5 relative) on a tiny BERT with dropout off, and a
different loss when a key hyperparameter (a template, the temperature, denoising) changes."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from conftest import SENTENCES, make_tiny_model, write_corpus
from fidelity_harness import ReferenceBase
from simcse.models.modeling import SimCSEModel
from simcse.training.objectives import build_objective
from simcse.training.objectives.base import LossContext

# official notation, over the tiny vocabulary (" and : are [UNK] there, as any out-of-vocabulary word)
T1 = '*cls*_the_man_of_"*sent_0*"_is*mask*.*sep+*'
T2 = '*cls*_a_dog_:_"*sent_0*"_is*mask*.*sep+*'
# a second template whose prefix is one token shorter than T1's: the official rule (every template's template-only
# rows shifted from T1's prefix length) and a per-template rule differ only with such a pair
T2_SHORT = '*cls*_a_dog_"*sent_0*"_is*mask*.*sep+*'
TEMP = 0.05


def _official_split(template: str, tok) -> tuple[str, str]:
    """train.py: the template string -> (mask_embedding_sentence_bs, mask_embedding_sentence_es)."""
    t = template.replace("*mask*", tok.mask_token).replace("*sep+*", "").replace("*cls*", "").replace("*sent_0*", " ")
    t = t.split(" ")
    return t[0].replace("_", " "), t[1].replace("_", " ")


def _official_batch(tok, sentences, t1, t2, max_seq_length=32):
    """train.py prepare_features + the collator: view 0 with template 1, view 1 with template 2, padded."""
    (bs, es), (bs2, es2) = _official_split(t1, tok), _official_split(t2, tok)
    b1, e1 = tok.encode(bs)[:-1], tok.encode(es)[1:]
    b2, e2 = tok.encode(bs2)[:-1], tok.encode(es2)[1:]
    rows = []
    for s in sentences:
        ids = tok.encode(s, add_special_tokens=False)[:max_seq_length]
        rows.append([b1 + ids + e1, b2 + ids + e2])
    ml = max(len(r) for pair in rows for r in pair)
    input_ids = torch.tensor([[r + [tok.pad_token_id] * (ml - len(r)) for r in pair] for pair in rows])
    mask = torch.tensor([[[1] * len(r) + [0] * (ml - len(r)) for r in pair] for pair in rows])
    return input_ids, mask


def _official_delta(encoder, tok, template, mask_id, first_template, length=50):
    """cl_forward.get_delta: the bare template repeated ``length`` times, positions from ``len(cls.bs) + 1`` on
    shifted by the row. ``cls.bs`` is set once in train.py L783 from ``--mask_embedding_sentence_template`` (the
    first template) and used for both templates' deltas."""
    bs, es = _official_split(template, tok)
    n_bs = len(tok.encode(_official_split(first_template, tok)[0], add_special_tokens=False))  # len(cls.bs)
    tokens = tok.encode(bs + es)
    d_ids = torch.tensor([tokens]).repeat(length, 1)
    d_pos = torch.arange(d_ids.shape[1]).unsqueeze(0).repeat(length, 1)
    d_pos[:, n_bs + 1:] += torch.arange(length).unsqueeze(-1)
    # the official call passes no attention mask, which its transformers (4.x) read as all ones; transformers >= 5.25
    # reads a mask-less call with position ids as packed sequences split where the positions jump, so the ones
    # are written out here to keep the official semantics on every version
    last = encoder(input_ids=d_ids, attention_mask=torch.ones_like(d_ids), position_ids=d_pos,
                   return_dict=True).last_hidden_state
    return last[d_ids == mask_id], d_ids.shape[1]


def _official_loss(encoder, mlp, tok, sentences, t1, t2, temp, denoise=True):
    mask_id = tok.mask_token_id
    delta, tlen = _official_delta(encoder, tok, t1, mask_id, t1)
    delta1, tlen1 = _official_delta(encoder, tok, t2, mask_id, t1)
    if not denoise:  # without --mask_embedding_sentence_delta (a negative control)
        delta, delta1 = torch.zeros_like(delta), torch.zeros_like(delta1)
    input_ids, attention_mask = _official_batch(tok, sentences, t1, t2)
    bsz, num_sent = input_ids.shape[:2]
    flat_ids = input_ids.view(-1, input_ids.size(-1))
    flat_mask = attention_mask.view(-1, attention_mask.size(-1))
    last = encoder(flat_ids, attention_mask=flat_mask, return_dict=True).last_hidden_state
    pooled = last[flat_ids == mask_id].view(bsz, num_sent, -1)
    blen = attention_mask.sum(-1) - tlen
    blen1 = attention_mask.sum(-1) - tlen1
    pooled = torch.stack([pooled[:, 0] - delta[blen[:, 0]], pooled[:, 1] - delta1[blen1[:, 1]]], 1)
    pooled = mlp(pooled)
    z1, z2 = pooled[:, 0], pooled[:, 1]
    cos = nn.CosineSimilarity(dim=-1)(z1.unsqueeze(1), z2.unsqueeze(0)) / temp
    return nn.CrossEntropyLoss()(cos, torch.arange(bsz))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("pb"), "bert", dropout=0.0)


def _spread_model(folder, loss_args):
    """The tiny prompt model with spread weights, its objective set up on it, in float64 (the comparison sees the
    formulas, not float32 rounding of two attention kernels)."""
    model = SimCSEModel.from_pretrained(str(folder), pooler_type="prompt_mask", mlp_only_train=True, new_mlp_init="random")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # spread the tiny model's embeddings
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    objective = build_objective("promptbert", loss_args)
    objective.setup(model, None)
    return model.double(), objective


def _ours(folder, loss_args, unpadded=False):
    model, objective = _spread_model(folder, loss_args)
    if unpadded:
        assert model.set_unpadded(True)
    model.train()
    enc = model.tokenizer(SENTENCES, padding=True, return_tensors="pt", return_token_type_ids=False)
    batch = {k: v[:, None].expand(-1, 2, -1) for k, v in enc.items()}  # the collator's two copies
    emb = model(**batch)
    return model, objective.loss(emb, batch, LossContext(model=model))


def _reference(model):
    from transformers import BertModel

    ref = BertModel(model.encoder.config, add_pooling_layer=False)
    ref.config._attn_implementation = "eager"
    ref.double().load_state_dict(model.encoder.state_dict())
    ref.train()
    mlp = nn.Sequential(nn.Linear(model.hidden_size, model.hidden_size), nn.Tanh()).double()
    mlp[0].load_state_dict(model.mlp.dense.state_dict())
    return ref, mlp


@pytest.mark.parametrize("t2", [T2, T2_SHORT], ids=["equal-prefixes", "shorter-second-prefix"])
@pytest.mark.parametrize("unpadded", [False, True])
def test_promptbert_equals_official_forward(tiny, unpadded, t2):
    model, loss = _ours(tiny, {"template": T1, "template2": t2, "temp": TEMP}, unpadded=unpadded)
    loss.backward()
    ref, mlp = _reference(model)
    ref_loss = _official_loss(ref, mlp, model.tokenizer, SENTENCES, T1, t2, TEMP)
    ref_loss.backward()
    assert abs(ref_loss.item() - math.log(len(SENTENCES))) > 0.1  # not degenerate (every cosine equal: ln 12)
    assert abs(loss.item() - ref_loss.item()) < 1e-6
    ours = dict(model.encoder.named_parameters())
    for name, p in ref.named_parameters():
        g, r = ours[name].grad, p.grad
        assert r is not None and g is not None, name
        # + 1e-9: the key biases and the last LayerNorm's bias have gradient 0 in exact arithmetic (softmax
        # ignores a shift common to all keys; denoising subtracts that bias from both [MASK] states)
        assert (g - r).norm() <= 2e-5 * r.norm() + 1e-9, name
    assert (model.mlp.dense.weight.grad - mlp[0].weight.grad).norm() <= 2e-5 * mlp[0].weight.grad.norm()


@pytest.mark.parametrize("changed", [{"template2": T1}, {"template": T2_SHORT}, {"temp": 0.1}, {"denoise": False},
                                     {"denoise_positions": "own_template"}])
def test_a_changed_hyperparameter_changes_the_loss(tiny, changed):
    model, loss = _ours(tiny, {"template": T1, "template2": T2_SHORT, "temp": TEMP, **changed})
    ref, mlp = _reference(model)
    ref_loss = _official_loss(ref, mlp, model.tokenizer, SENTENCES, T1, T2_SHORT, TEMP)
    assert abs(loss.item() - ref_loss.item()) > 1e-4, changed


def test_the_prefixes_differ_in_length(tiny):
    """The unequal-prefix case is real on the test's tokenizer (else the official-rule test could not fail)."""
    from simcse.models.prompt import BoundPrompt

    tok = SimCSEModel.from_pretrained(str(tiny), pooler_type="prompt_mask").tokenizer
    assert len(BoundPrompt.bind(T2_SHORT, tok).prefix) == len(BoundPrompt.bind(T1, tok).prefix) - 1


def test_setup_refuses_another_pooler(tiny):
    model = SimCSEModel.from_pretrained(str(tiny), pooler_type="cls", new_mlp_init="random")
    with pytest.raises(ValueError, match="--pooler_type prompt_mask"):
        build_objective("promptbert").setup(model, None)


@pytest.mark.parametrize("args, key", [({"temp": 0}, "temp"), ({"template": "no placeholders"}, "template"),
                                       ({"denoise": "maybe"}, "denoise"), ({"denoise_positions": "nope"},
                                                                          "denoise_positions"),
                                       ({"denoise_at_dev": "yes"}, "denoise_at_dev")])
def test_bad_loss_args_are_named(args, key):
    with pytest.raises(ValueError, match=key):
        build_objective("promptbert", args)


def test_gathered_negatives_equal_one_big_batch():
    """Two simulated processes (gathered keys, local queries, averaged) give the one-process loss and gradient."""
    from conftest import simulated_ranks

    objective = build_objective("promptbert")
    e = torch.randn(8, 2, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64, requires_grad=True)
    one = objective.loss(e, {}, LossContext(model=None))
    (g_one,) = torch.autograd.grad(one, e)
    two = simulated_ranks(objective, e, {"input_ids": torch.zeros(8, 2, 3, dtype=torch.long)})
    (g_two,) = torch.autograd.grad(two, e)
    assert abs(one.item() - two.item()) < 1e-9 and torch.allclose(g_one, g_two, atol=1e-12)


PROMPT_ARGS = {"template": "the {sentence} is {mask} .", "template2": "a {sentence} was {mask} ."}


@pytest.mark.slow
def test_trains_resumes_exactly_and_the_folder_encodes_with_the_template(tmp_path):
    from conftest import assert_resume_is_exact, objective_argv
    from simcse import SimCSE

    model_dir, corpus = make_tiny_model(tmp_path / "m", "bert"), write_corpus(tmp_path)
    full = assert_resume_is_exact(lambda out, *extra: objective_argv(
        model_dir, corpus, out, "promptbert", PROMPT_ARGS, "--pooler_type", "prompt_mask", "--mlp_only_train", "true",
        *extra), tmp_path)
    saved = SimCSEModel.from_pretrained(str(tmp_path / "full"))
    assert saved.pooler_type == "prompt_mask" and saved.prompt.templates == tuple(PROMPT_ARGS.values())
    tool = SimCSE(str(tmp_path / "full"))
    got = torch.as_tensor(tool.encode(SENTENCES[:4], normalize_to_unit=False))
    assert torch.allclose(got, torch.as_tensor(full.model.encode(SENTENCES[:4])), atol=1e-5)


@pytest.mark.slow
def test_gradient_caching_equals_the_whole_batch(tmp_path):
    from conftest import objective_argv, run_training, trainer_state

    model_dir, corpus = make_tiny_model(tmp_path / "m", "bert", dropout=0.0), write_corpus(tmp_path)
    runs = [run_training(objective_argv(model_dir, corpus, tmp_path / f"o{i}", "promptbert", PROMPT_ARGS,
                                        "--pooler_type", "prompt_mask", "--mlp_only_train", "true", "--max_steps", "2",
                                        "--save_strategy", "no", "--optim", "sgd", *extra))
            for i, extra in enumerate([(), ("--gradient_cache_chunk_size", "3")])]
    a, b = (trainer_state(r) for r in runs)  # SGD: a float-noise gradient (the exactly-0 ones) stays noise-sized
    start = SimCSEModel.from_pretrained(str(model_dir)).encoder.state_dict()
    assert any(not torch.allclose(a[f"encoder.{k}"], v) for k, v in start.items())  # it trained
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k


# ----------------------------------------------------------------------------------------- several steps
class OfficialPromptBERT(ReferenceBase):
    """cl_forward (``--mask_embedding_sentence_delta``) trained over several steps: the encoder and MLP from the
    start checkpoint, each step's sentences templated and batched as train.py does."""

    def __init__(self, model, start, sentence_lists, **kw):
        from fidelity_harness import OfficialBertForCL

        self.cl = OfficialBertForCL(model.encoder.config, start)
        self.tok, self.sentence_lists, self.kw = model.tokenizer, sentence_lists, {"t1": T1, "t2": T2, "temp": TEMP, **kw}

    def parameters(self):
        return self.cl.parameters()

    def step_loss(self, step, batch):
        self.cl.bert.train()
        return _official_loss(self.cl.bert, self.cl.mlp, self.tok, self.sentence_lists[step], **self.kw)

    def weights(self):
        return self.cl.weights()


def test_promptbert_trains_as_the_official_code_over_steps(tiny):
    """3 SGD steps in the trainer's order (the shared harness), float64, dropout off: loss and every weight agree
    after each step; another template, temperature or no denoising does not match. Dropout stays off here: the
    official code encodes the 50 template-only rows before the batch, this objective only the distinct lengths
    after it, so the two never draw the same dropout masks (the same distribution, other draws)."""
    from conftest import random_sentences
    from fidelity_harness import assert_steps_match, assert_told_apart, project_steps, reference_steps

    model, _ = _ours(tiny, {"template": T1, "template2": T2, "temp": TEMP})
    model.zero_grad(set_to_none=True)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    objective = build_objective("promptbert", {"template": T1, "template2": T2, "temp": TEMP})
    objective.setup(model, None)
    lists = [random_sentences(8, seed=20 + t) for t in range(3)]
    data = []
    for sentences in lists:
        enc = model.tokenizer(sentences, padding=True, return_tensors="pt", return_token_type_ids=False)
        data.append({k: v[:, None].expand(-1, 2, -1) for k, v in enc.items()})
    ours = project_steps(model, objective, data, set_up=False)

    def official(**kw):
        return reference_steps(OfficialPromptBERT(model, start, lists, **kw), data)

    assert_steps_match(ours, official())
    for changed in ({"t2": T1}, {"t1": T2}, {"temp": 0.1}, {"denoise": False}):
        assert_told_apart(ours, official(**changed))


# ------------------------------------------------------------------------------- dropout on, row-keyed masks
class _RowKeys:
    """The rows of the encoder call in progress, as keys: each row's real tokens' (id, position) pairs. Set by a
    forward pre-hook on the encoder, read by every :class:`_RowKeyedDropout` inside that call."""

    def __init__(self):
        self.keys, self.real = None, None

    def hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        pos = kwargs.get("position_ids")
        rows, width = ids.shape
        real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
        pos = torch.arange(width).expand(rows, width) if pos is None else pos
        self.real = real
        self.keys = [(tuple(ids[r][real[r]].tolist()), tuple(pos[r][real[r]].tolist())) for r in range(rows)]


class _RowKeyedDropout(nn.Module):
    """Dropout whose mask for a row is drawn from a generator seeded by (this module's name, the row's real
    tokens' ids and positions): the same row gets the same mask whatever the batch it is encoded in, its width,
    its order or the number of rows before it -- so the official forward (the 50 template-only rows first, then
    the batch padded to its own width) and this library's (the batch, then the distinct lengths' template-only
    rows) draw identical masks, row by row, and can be compared with dropout on."""

    def __init__(self, p: float, name: str, rows: _RowKeys):
        super().__init__()
        self.p, self.name, self.rows = p, name, rows

    def forward(self, x):
        if not self.training or self.p == 0:
            return x
        import hashlib

        keep = torch.ones_like(x)
        for r, key in enumerate(self.rows.keys):
            seed = int.from_bytes(hashlib.sha256(repr((self.name, key)).encode()).digest()[:8], "little")
            g = torch.Generator().manual_seed(seed)
            n = int(self.rows.real[r].sum())
            drawn = (torch.rand((n, x.shape[-1]), generator=g, dtype=torch.float64) >= self.p).to(x.dtype)
            keep[r, self.rows.real[r]] = drawn / (1 - self.p)
        return x * keep


def _row_keyed(encoder, p: float) -> None:
    """Every hidden-state dropout of ``encoder`` (a BertModel) made row-keyed; attention-probability dropout off
    (it is functional inside the attention kernel, so no module can key it by row)."""
    rows = _RowKeys()
    encoder.register_forward_pre_hook(rows.hook, with_kwargs=True)
    for name, module in list(encoder.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Dropout):
                full = f"{name}.{child_name}" if name else child_name
                if full.endswith("attention.self.dropout"):
                    child.p = 0.0
                else:
                    setattr(module, child_name, _RowKeyedDropout(p, full, rows))


@pytest.fixture(scope="module")
def tiny_dropout(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("pbd"), "bert", dropout=0.1)


@pytest.mark.parametrize("t2", [T2, T2_SHORT], ids=["equal-prefixes", "shorter-second-prefix"])
def test_promptbert_equals_official_forward_with_dropout_on(tiny_dropout, t2):
    """Dropout on (p 0.1 on every hidden state, row-keyed on both sides, as the module docstring above says):
    the loss and every gradient equal the official forward's, and differ from the dropout-off loss."""
    model, objective = _spread_model(tiny_dropout, {"template": T1, "template2": t2, "temp": TEMP})
    ref, mlp = _reference(model)
    _row_keyed(model.encoder, 0.1)
    _row_keyed(ref, 0.1)
    model.train()
    ref.train()
    enc = model.tokenizer(SENTENCES, padding=True, return_tensors="pt", return_token_type_ids=False)
    batch = {k: v[:, None].expand(-1, 2, -1) for k, v in enc.items()}
    loss = objective.loss(model(**batch), batch, LossContext(model=model))
    loss.backward()
    ref_loss = _official_loss(ref, mlp, model.tokenizer, SENTENCES, T1, t2, TEMP)
    ref_loss.backward()
    assert abs(loss.item() - ref_loss.item()) < 1e-6
    ours = dict(model.encoder.named_parameters())
    for name, p in ref.named_parameters():
        assert (ours[name].grad - p.grad).norm() <= 2e-5 * p.grad.norm() + 1e-9, name
    with torch.no_grad():  # the control: without dropout the official loss is another number
        for m in ref.modules():
            if isinstance(m, _RowKeyedDropout):
                m.p = 0.0
        plain = _official_loss(ref, mlp, model.tokenizer, SENTENCES, T1, t2, TEMP)
    assert abs(plain.item() - ref_loss.item()) > 1e-3
