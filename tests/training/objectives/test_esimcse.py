"""ESimCSE's objective against an independent transcription of the official code (caskcsg/sentemb, ESimCSE/):
``train.py`` prepare_features (``--dup_type bpe``), ``esimcse/models.py`` cl_forward (momentum update inside the
forward, queue negatives ``pre_z1``) and ``esimcse/trainers.py`` compute_loss (the eval-mode momentum pass on
view 0, the FIFO queue of ``neg_size`` rows). Several optimizer steps, so the queue fills, overflows and the
momentum weights move; loss within 1e-6 and gradients within 2e-5 relative at every step."""
from __future__ import annotations

import copy
import random

import pytest
import torch
from torch import nn

from conftest import assert_same_gradients, make_tiny_model, random_sentences, spread_cls_model
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


class OfficialESimCSE:
    """BertForCL with momentum > 0 and the trainer's compute_loss (neg_size > 0), unsupervised, cls pooler."""

    def __init__(self, bert: nn.Module, mlp: nn.Module, temp: float, momentum: float, neg_size: int):
        self.bert, self.mlp = bert, mlp
        self.momentum_model = copy.deepcopy(bert)
        for p in self.momentum_model.parameters():
            p.requires_grad = False
        self.temp, self.momentum, self.neg_size = temp, momentum, neg_size
        self.pre_z1 = None

    def sim(self, x, y):
        return nn.CosineSimilarity(dim=-1)(x, y) / self.temp

    def step_loss(self, batch: dict) -> torch.Tensor:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        bs, num_sent, length = ids.shape
        # cl_forward (disable_dropout False): encode, then the momentum update with the current weights
        out = self.bert(input_ids=ids.view(-1, length), attention_mask=mask.view(-1, length),
                        token_type_ids=batch["token_type_ids"].view(-1, length))
        for param, param_m in zip(self.bert.parameters(), self.momentum_model.parameters()):
            param_m.data = param_m.data * self.momentum + param.data * (1.0 - self.momentum)
        pooled = self.mlp(out.last_hidden_state[:, 0]).view(bs, num_sent, -1)
        z1, z2 = pooled[:, 0], pooled[:, 1]
        cos_sim = self.sim(z1.unsqueeze(1), z2.unsqueeze(0))
        labels = torch.arange(bs)
        if self.pre_z1 is not None:
            cos_sim = torch.cat((cos_sim, self.sim(z1.unsqueeze(1), self.pre_z1.unsqueeze(0))), 1)
        loss = nn.CrossEntropyLoss()(cos_sim, labels)
        # compute_loss: model.eval(); momentum pass on view 0 (cls pooler + the online mlp); FIFO queue
        self.momentum_model.eval()
        with torch.no_grad():
            m = self.momentum_model(input_ids=ids[:, 0], attention_mask=mask[:, 0],
                                    token_type_ids=batch["token_type_ids"][:, 0])
            eval_z = self.mlp(m.last_hidden_state[:, 0])
        self.pre_z1 = eval_z.clone() if self.pre_z1 is None else torch.cat((self.pre_z1, eval_z.clone()), 0)[-self.neg_size:]
        return loss


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tiny_nodrop_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny_bert_nodrop"), "bert", dropout=0.0)


def batches(tokenizer, dup_rate: float, n_batches: int, bs: int):
    """(bs, 2, L) batches: view 0 the sentence, view 1 its official bpe repetition (seeded ``random``)."""
    rnd = random.Random(7)
    sents = random_sentences(n_batches * bs, seed=1)
    out = []
    for b in range(n_batches):
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
    assert any((b["attention_mask"][:, 1].sum(1) > b["attention_mask"][:, 0].sum(1)).any() for b in out)
    return out


HP = {"temp": 0.05, "momentum": 0.8, "neg_size": 12, "dup_rate": 0.32}


def run_official(folder, states, data, temp, momentum, neg_size):
    """The transcription over the batches, its online weights set to ``states[t]`` (ours before step t) at each
    step, so that both sides compute every step from the same weights (no float drift of two optimizers)."""
    from transformers import BertModel

    bert = BertModel.from_pretrained(str(folder), attn_implementation="eager", add_pooling_layer=False).train()
    hidden = bert.config.hidden_size
    mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
    ref = None
    losses, grads = [], []
    for state, batch in zip(states, data):
        bert.load_state_dict({k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")})
        mlp[0].load_state_dict({k[len("mlp.dense."):]: v for k, v in state.items() if k.startswith("mlp.dense.")})
        ref = ref or OfficialESimCSE(bert, mlp, temp, momentum, neg_size)  # momentum copy of the first weights
        for p in [*bert.parameters(), *mlp.parameters()]:
            p.grad = None
        loss = ref.step_loss(batch)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append({**{f"encoder.{k}": p.grad.clone() for k, p in bert.named_parameters()},
                      "mlp.dense.weight": mlp[0].weight.grad.clone(), "mlp.dense.bias": mlp[0].bias.grad.clone()})
    return losses, grads, ref


def run_ours(model, data, lr=0.5, **hp):
    """Our objective over the batches with SGD(lr) steps and on_step_end; also the weights before each step."""
    objective = build_objective("esimcse", {**HP, **hp})
    objective.setup(model, None)
    context = LossContext(model=model)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    losses, grads, states = [], [], []
    for batch in data:
        states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        opt.zero_grad()
        ids = batch["input_ids"]
        z = model(**{k: v.reshape(-1, v.shape[-1]) for k, v in batch.items()}).view(ids.shape[0], 2, -1)
        loss = objective.loss(z, batch, context)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append({k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None})
        opt.step()
        objective.on_step_end(model, context)
    return losses, grads, states, objective


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


def test_esimcse_equals_official_forward_over_steps(tiny_nodrop_dir):
    model = spread_cls_model(tiny_nodrop_dir)
    data = batches(model.tokenizer, HP["dup_rate"], n_batches=4, bs=8)  # queue: 0, 8, 12 (overflow), 12 rows
    ours, our_grads, states, objective = run_ours(model, data)
    theirs, their_grads, ref = run_official(tiny_nodrop_dir, states, data, HP["temp"], HP["momentum"], HP["neg_size"])

    assert objective.queue.shape[0] == HP["neg_size"]
    for step, (a, b) in enumerate(zip(ours, theirs)):
        assert 0.05 < b < 0.95 * torch.log(torch.tensor(8.0 + min(HP["neg_size"], 8 * step))), (step, b)
        assert abs(a - b) < 1e-6, (step, a, b)
        assert_same_gradients(our_grads[step], their_grads[step])
    assert torch.allclose(objective.queue, ref.pre_z1, atol=1e-4)  # rounding of the two updates
    for (name, mine), theirs_p in zip(objective.momentum_encoder.named_parameters(), ref.momentum_model.parameters()):
        # ours is one update ahead (after the last step); the official one is updated at the next forward
        assert torch.allclose(mine, theirs_p * HP["momentum"] + model.encoder.get_parameter(name) * (1 - HP["momentum"]),
                              atol=1e-6), name

    # the comparison tells a changed key hyperparameter apart (temperature, momentum, queue size)
    for changed in ({"temp": 0.1}, {"momentum": 0.995}, {"neg_size": 8}):
        hp = {k: HP[k] for k in ("temp", "momentum", "neg_size")} | changed
        other, _, _ = run_official(tiny_nodrop_dir, states, data, **hp)
        assert max(abs(a - b) for a, b in zip(ours, other)) > 1e-4, changed


def test_momentum_pass_is_eval_mode_and_keeps_modes(tiny_bert_dir):
    """The momentum pass runs without dropout (the official ``model.eval()``), applies the training MLP, and leaves
    every module's train/eval mode as it was."""
    from simcse.models.modeling import SimCSEModel

    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="cls", mlp_only_train=True).train()
    objective = build_objective("esimcse", HP)
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
    for bad in ({"temp": 0}, {"momentum": 1.0}, {"neg_size": 0}, {"dup_rate": 1.5}):
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
