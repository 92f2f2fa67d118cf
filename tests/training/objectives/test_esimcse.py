"""ESimCSE's objective against an independent transcription of the official code (caskcsg/sentemb, ESimCSE/):
``train.py`` prepare_features (``--dup_type bpe``), ``esimcse/models.py`` cl_forward (momentum update inside the
forward, queue negatives ``pre_z1``) and ``esimcse/trainers.py`` compute_loss (the eval-mode momentum pass on
view 0, the FIFO queue of ``neg_size`` rows), with the momentum encoder started as ``BertForCL.__init__`` /
``cl_init`` start it (random weights). Dropout on, the objective's own ``prepare_batch``, several optimizer steps
(the shared harness, ``fidelity_harness.py``), so the queue fills, overflows and the momentum weights move;
loss, weights, queue and momentum weights compared after every step, and negative controls."""
from __future__ import annotations

import copy
import random

import pytest
import torch
from torch import nn

from conftest import make_tiny_model, random_sentences, spread_cls_model
from fidelity_harness import (TOLERANCES, OfficialBertForCL, ReferenceBase, assert_steps_match, assert_told_apart,
                              mismatch, project_steps, reference_steps, sentence_batches)
from simcse.training.objectives import LossContext, build_objective
from simcse.training.word_repetition import repeat_tokens


# ---------------------------------------------------------------- the official code, transcribed
def official_bpe_dup(input_ids: list[int], dup_rate: float, rnd: random.Random) -> list[int]:
    """train.py prepare_features, ``dup_type == "bpe"``, for a row of the positive view (idx >= total)."""
    input_len = len(input_ids)
    if int(dup_rate * input_len) > 0:
        add_len = rnd.randrange(min(10, int(dup_rate * input_len)))
        dup = sorted(rnd.sample(range(1, input_len - 1), add_len))
        new_input_ids = []
        for i, _id in enumerate(input_ids):
            if i in dup:
                new_input_ids.append(_id)
            new_input_ids.append(_id)
        return new_input_ids
    return input_ids


class OfficialESimCSE(ReferenceBase):
    """BertForCL with momentum > 0 and the trainer's compute_loss (neg_size > 0), unsupervised, cls pooler, built
    as the official code builds it: ``bert`` and the MLP from the checkpoint ``state`` (``from_pretrained`` loads
    ``bert.*``; the MLP is the checkpoint's here, the same start on both sides), ``momentum_model`` a
    ``BertModel(config)`` whose weights ``cl_init``'s ``init_weights`` draws afresh (the checkpoint has no
    ``momentum_model.*``): the model's ``_init_weights`` from a CPU generator seeded with ``seed``.

    ``start="copy"`` (MoCo's start) and ``momentum_pass_train=True`` (the momentum pass with dropout) are the
    negative controls' changes."""

    def __init__(self, config, state: dict, temp: float, momentum: float, neg_size: int, seed: int,
                 start: str = "official", momentum_pass_train: bool = False):
        from transformers import BertModel

        self.cl = OfficialBertForCL(config, state)  # bert (from the checkpoint) + MLPLayer, float64
        self.bert, self.mlp = self.cl.bert, self.cl.mlp
        dtype = self.mlp[0].weight.dtype
        if start == "official":
            self.momentum_model = BertModel(self.bert.config, add_pooling_layer=False).to(dtype)  # pooler unused
            for p in self.momentum_model.parameters():
                p._is_hf_initialized = False
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                torch.random.default_generator.manual_seed(seed)
                self.momentum_model.apply(self.momentum_model._init_weights)  # cl_init: cls.init_weights()
        else:
            self.momentum_model = copy.deepcopy(self.bert)
        for p in self.momentum_model.parameters():
            p.requires_grad = False
        self.temp, self.momentum, self.neg_size = temp, momentum, neg_size
        self.momentum_pass_train = momentum_pass_train
        self.pre_z1 = None

    def parameters(self):
        return self.cl.parameters()

    def sim(self, x, y):
        return nn.CosineSimilarity(dim=-1)(x, y) / self.temp

    def step_loss(self, step: int, batch: dict) -> torch.Tensor:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        bs = ids.shape[0]
        # compute_loss: model.train(); cl_forward (disable_dropout False): encode, then the momentum update with
        # the weights the batch is encoded with
        pooled = self.cl.encode(batch)  # (bs, num_sent, H); the update below does not touch the online weights
        for param, param_m in zip(self.bert.parameters(), self.momentum_model.parameters()):
            param_m.data = param_m.data * self.momentum + param.data * (1.0 - self.momentum)
        z1, z2 = pooled[:, 0], pooled[:, 1]
        cos_sim = self.sim(z1.unsqueeze(1), z2.unsqueeze(0))
        labels = torch.arange(bs)
        if self.pre_z1 is not None:
            cos_sim = torch.cat((cos_sim, self.sim(z1.unsqueeze(1), self.pre_z1.unsqueeze(0))), 1)
        loss = nn.CrossEntropyLoss()(cos_sim, labels)
        # compute_loss: model.eval(); momentum pass on view 0 (cls pooler + the online mlp); FIFO queue
        self.momentum_model.train(self.momentum_pass_train)
        with torch.no_grad():
            m = self.momentum_model(input_ids=ids[:, 0], attention_mask=mask[:, 0],
                                    token_type_ids=batch["token_type_ids"][:, 0])
            eval_z = self.mlp(m.last_hidden_state[:, 0])
        self.pre_z1 = eval_z.clone() if self.pre_z1 is None else torch.cat((self.pre_z1, eval_z.clone()), 0)[-self.neg_size:]
        return loss

    def weights(self) -> dict:
        return self.cl.weights()

    def state(self) -> dict:
        """The queue and the momentum weights the next batch is encoded with (the official update runs at the
        start of the next forward, with the current weights)."""
        hidden = self.mlp[0].in_features
        queue = self.pre_z1 if self.pre_z1 is not None else torch.zeros(0, hidden, dtype=self.mlp[0].weight.dtype)
        momentum = {f"momentum.{k}": m * self.momentum + p.detach() * (1.0 - self.momentum)
                    for (k, m), p in zip(self.momentum_model.named_parameters(), self.bert.parameters())}
        return {"queue": queue, **momentum}


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tiny_nodrop_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny_bert_nodrop"), "bert", dropout=0.0)


HP = {"temp": 0.05, "momentum": 0.8, "neg_size": 12, "dup_rate": 0.32}
SEED = 3


def official_batches(tokenizer, n_batches: int, bs: int, dup_rate: float, seed: int) -> list[dict]:
    """The official ``prepare_features`` (``--dup_type bpe``: view 1 repeated) and padding collator over the same
    sentences, the repetition drawn from the objective's recorded stream (``random.Random`` seeded with the
    (seed, step, rank 0, micro-batch 0) seed its ``prepare_batch`` uses; the official code draws from the global
    ``random``)."""
    sents = random_sentences(n_batches * bs, seed=1)
    out = []
    for b in range(n_batches):
        rnd = random.Random(LossContext(model=None, global_step=b, seed=seed).draw_seed(0))
        rows = [tokenizer(s, truncation=True, max_length=32)["input_ids"] for s in sents[b * bs:(b + 1) * bs]]
        views = [(r, official_bpe_dup(r, dup_rate, rnd)) for r in rows]
        length = max(len(v) for pair in views for v in pair)
        ids = torch.zeros(bs, 2, length, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, pair in enumerate(views):
            for v, r in enumerate(pair):
                ids[i, v, :len(r)] = torch.tensor(r)
                mask[i, v, :len(r)] = 1
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)})
    return out


def esimcse_state(objective) -> dict:
    """The state ESimCSE carries: its queue and momentum weights."""
    return {"queue": objective.queue,
            **{f"momentum.{k}": p for k, p in objective.momentum_encoder.named_parameters()}}


@pytest.fixture(scope="module")
def multistep(tiny_bert_dir):
    """Our objective trained 4 steps with dropout on (the queue fills to 8, then 12 rows, then overflows), the
    model's start, and the official batches."""
    model = spread_cls_model(tiny_bert_dir).double()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    data = sentence_batches(model.tokenizer, n_batches=4, bs=8)
    ours = project_steps(model, build_objective("esimcse", HP), data, seed=SEED, state=esimcse_state)
    return ours, start, model.encoder.config, official_batches(model.tokenizer, 4, 8, HP["dup_rate"], SEED)


def run_official(config, checkpoint, batches, **changes):
    """The transcription over ``batches`` from the checkpoint ``start`` (HP, seed SEED, official start unless
    ``changes`` say otherwise)."""
    kw = {"temp": HP["temp"], "momentum": HP["momentum"], "neg_size": HP["neg_size"], "seed": SEED, **changes}
    return reference_steps(OfficialESimCSE(config, checkpoint, **kw), batches)


def test_esimcse_trains_as_the_official_code_with_dropout(multistep):
    """Dropout on, the objective's own word repetition, 4 SGD steps in the trainer's order, the momentum encoder
    started as the official code starts it (random weights): loss, weights, queue and momentum weights agree
    with the transcription after every step."""
    ours, start, config, official = multistep
    for step, batch in zip(ours, official):  # the objective's draws are the official rule's
        assert torch.equal(step.batch["input_ids"], batch["input_ids"])
        assert torch.equal(step.batch["attention_mask"], batch["attention_mask"])
    assert any((b["attention_mask"][:, 1].sum(1) > b["attention_mask"][:, 0].sum(1)).any() for b in official)
    theirs = run_official(config, start, official)
    assert_steps_match(ours, theirs)
    assert [s.state["queue"].shape[0] for s in ours] == [8, 12, 12, 12]
    assert len({round(s.loss, 3) for s in ours}) == 4


@pytest.mark.parametrize("change", [{"momentum": 0.995}, {"temp": 0.1}, {"neg_size": 8}, {"start": "copy"},
                                    {"momentum_pass_train": True}, {"seed": SEED + 1}],
                         ids=["momentum", "temp", "neg_size", "copy_start", "momentum_pass_train", "draw_seed"])
def test_multistep_comparison_tells_changes_apart(multistep, change):
    """Negative controls: the transcription with one thing changed does not match (a changed momentum, the MoCo
    copy start instead of the official random one, and the momentum pass in train mode change the state; a
    changed temperature or queue size the loss)."""
    ours, start, config, official = multistep
    theirs = run_official(config, start, official, **change)
    found = mismatch(ours, theirs)
    assert found["loss"] > 10 * TOLERANCES["loss"] or found["state"] > 10 * TOLERANCES["state"], (change, found)
    if set(change) & {"momentum", "start", "momentum_pass_train", "seed"}:
        assert found["state"] > 10 * TOLERANCES["state"], (change, found)


def test_copy_start_is_mocos_and_matches_a_copying_transcription(tiny_bert_dir):
    """``momentum_init: copy`` starts the momentum encoder as a copy of the pretrained backbone (MoCo's start) and
    trains as a transcription that copies; the official start's momentum weights differ from it."""
    model = spread_cls_model(tiny_bert_dir).double()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    data = sentence_batches(model.tokenizer, n_batches=3, bs=8)
    batches = official_batches(model.tokenizer, 3, 8, HP["dup_rate"], SEED)
    ours = project_steps(model, build_objective("esimcse", {**HP, "momentum_init": "copy"}), data, seed=SEED,
                         state=esimcse_state)
    assert_steps_match(ours, run_official(model.encoder.config, start, batches, start="copy"))
    assert_told_apart(ours, run_official(model.encoder.config, start, batches), "state")


def test_official_start_is_random_seeded_and_survives_a_checkpoint(tiny_bert_dir):
    """The official start: random weights (not the pretrained ones), the same for the same seed (every process
    of a run), others for another seed, the caller's random state untouched; a checkpoint of the objective
    restores the momentum weights and queue over a fresh setup's draw."""
    from types import SimpleNamespace

    model = spread_cls_model(tiny_bert_dir)
    objective = build_objective("esimcse", {**HP, "momentum": 0.0})  # momentum 0: the start is theta_0 itself
    objective.setup(model, SimpleNamespace(seed=SEED))

    def built(seed):
        o = build_objective("esimcse", {**HP, "momentum": 0.5})
        before = torch.random.get_rng_state()
        o.setup(model, SimpleNamespace(seed=seed))
        assert torch.equal(before, torch.random.get_rng_state())
        return o

    a, b, c = built(SEED), built(SEED), built(SEED + 1)
    for (name, pa), pb, pc, p in zip(a.momentum_encoder.named_parameters(), b.momentum_encoder.parameters(),
                                     c.momentum_encoder.parameters(), model.encoder.parameters()):
        assert torch.equal(pa, pb), name
        if name.endswith("weight") and "LayerNorm" not in name:
            assert not torch.equal(pa, pc), name
            random_part = 2 * pa - p.detach()  # m = 0.5 R + 0.5 theta_0
            assert abs(float(random_part.std()) - model.encoder.config.initializer_range) < 0.01, name
    state = a.state_dict()
    a.on_step_end(model)  # moves the momentum weights
    restored = built(SEED + 1)
    restored.load_state_dict(state)
    for (name, x), y in zip(restored.state_dict().items(), state.values()):
        if torch.is_tensor(x):
            assert torch.equal(x, y), name
    with pytest.raises(ValueError, match="momentum_init"):
        build_objective("esimcse", {"momentum_init": "moco"})
    objective.momentum_init = "random"
    with pytest.raises(ValueError, match="momentum_init"):
        objective.setup(model, None)


def test_word_repetition_equals_official_bpe_dup(tiny_nodrop_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_nodrop_dir))
    changed = 0
    for s in random_sentences(50, seed=3):
        ids = tok(s)["input_ids"]
        ours, theirs = repeat_tokens(ids, 0.32, random.Random(s)), official_bpe_dup(ids, 0.32, random.Random(s))
        assert ours == theirs
        assert ours[0] == ids[0] and ours[-1] == ids[-1] and len(ours) - len(ids) < 10
        changed += len(ours) > len(ids)
    assert changed > 10
    with pytest.raises(ValueError, match="dup_rate"):
        repeat_tokens([1, 2, 3], 1.0, random.Random(0))


def test_momentum_pass_is_eval_mode_and_keeps_modes(tiny_bert_dir):
    """The momentum pass runs without dropout (the official ``model.eval()``), applies the training MLP, and leaves
    every module's train/eval mode as it was."""
    from simcse.models.modeling import SimCSEModel

    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="cls", mlp_only_train=True).train()
    objective = build_objective("esimcse", {**HP, "momentum_init": "copy"})
    objective.setup(model, None)
    enc = model.tokenizer(random_sentences(4, seed=5), padding=True, return_tensors="pt")
    batch = {k: torch.stack([v, v], 1) for k, v in enc.items()}
    a, b = objective.momentum_embeddings(model, batch), objective.momentum_embeddings(model, batch)
    assert torch.equal(a, b)
    assert all(m.training for m in model.modules())
    with torch.no_grad():
        expected = model.mlp(model.eval()(**enc))  # momentum copy == model before any step
    assert torch.allclose(a, expected, atol=1e-6)
    assert not any(p.requires_grad for p in objective.momentum_encoder.parameters())


def test_bad_hyperparameters_are_refused():
    for bad in ({"temp": 0}, {"momentum": 1.0}, {"neg_size": 0}, {"dup_rate": 1.5}, {"momentum_init": "moco"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            build_objective("esimcse", bad)


def test_prepare_batch_repeats_the_positive_view(tiny_nodrop_dir):
    """prepare_batch word-repeats view 1 only (the official bpe repetition of its real tokens), grows the batch
    and its masks to the longest row, gives the repeated rows token type 0, and draws the same at the same
    (seed, step, rank, micro-batch) - a resumed run repeats as an uninterrupted one."""
    from simcse.models.modeling import SimCSEModel
    from simcse.training.data import ContrastiveCollator

    model = SimCSEModel.from_pretrained(str(tiny_nodrop_dir), pooler_type="cls", mlp_only_train=True)
    tok = model.tokenizer
    rows = [tok(s, truncation=True, max_length=32) for s in random_sentences(16, seed=9)]
    batch = ContrastiveCollator(pad_token_id=tok.pad_token_id)([{k: [r[k]] for k in r} for r in rows])  # (16, 2, L)

    def prepared(step, calls=1):
        objective = build_objective("esimcse", HP)
        objective.setup(model, None)
        context = LossContext(model=model, global_step=step, seed=5)
        for _ in range(calls):
            out = objective.prepare_batch(batch, context)
        return out

    out = prepared(3)
    assert torch.equal(out["input_ids"], prepared(3)["input_ids"])  # keyed draws
    assert not torch.equal(out["input_ids"], prepared(4)["input_ids"])  # another step, other draws
    assert not torch.equal(out["input_ids"], prepared(3, calls=2)["input_ids"])  # the next micro-batch too
    length = batch["input_ids"].shape[-1]
    assert out["input_ids"].shape[-1] >= length
    assert torch.equal(out["input_ids"][:, 0, :length], batch["input_ids"][:, 0])  # view 0 untouched
    lengths = out["attention_mask"].sum(-1)  # (16, 2)
    assert (lengths[:, 1] >= lengths[:, 0]).all() and (lengths[:, 1] > lengths[:, 0]).sum() > 3
    for i, r in enumerate(rows):
        rep = out["input_ids"][i, 1, : int(lengths[i, 1])].tolist()
        assert rep[0] == r["input_ids"][0] and rep[-1] == r["input_ids"][-1]
        assert [t for j, t in enumerate(rep) if j == 0 or t != rep[j - 1]] == \
            [t for j, t in enumerate(r["input_ids"]) if j == 0 or t != r["input_ids"][j - 1]]  # only repetitions added
        assert (out["input_ids"][i, 1, int(lengths[i, 1]):] == tok.pad_token_id).all()
    assert (out["token_type_ids"][:, 1] == 0).all()
