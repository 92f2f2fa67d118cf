"""The SimCSE-family objectives, the scored-pair losses (CoSENT, AnglE: every process ranks all processes' pairs)
and Matryoshka with one prefix size drawn per step (the same draw on every process) on two real gloo processes give
the loss and gradients of one process holding the whole batch (as tests/training/test_distributed.py checks SimCSE).

One spawn of two workers runs every row of :data:`ROWS`: each builds its trainer with the library's Python entry
(``build_trainer`` of the ``simcse train`` options, ``--ddp_backend gloo``: TrainingArguments/accelerate start the
process group from RANK/WORLD_SIZE), wraps the model in DDP with ``trainer.accelerator.prepare_model`` and runs
``trainer.training_step`` on its half of the global batch. The parent computes the one-process step on the whole
batch. Dropout is off (``--dropout 0``) so the comparison is exact up to float rounding. Each row runs a second
time with the original SimCSE code's gather (other processes' rows without gradient): a control that must not
match. The workers also count what each method gathers.

Random draws per process: ESimCSE's word repetition and InfoCSE's masks are drawn from (seed, step, rank), so
the one-process reference prepares each half with that rank's draws (InfoCSE: the first ``--seed`` whose two
halves mask equally many tokens, as the MLM term is a per-process mean that DDP averages). PromptBERT draws
nothing. RankCSE's ListMLE permutes columns before sorting only to break ties, and the teacher's lists of
distinct sentences have none: the draw changes nothing. InfoCSE runs with ``batchnorm`` off: the official
BatchNorm head normalises per process. ESimCSE's queue is per process (not gathered, as the official code).
"""
from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from conftest import (assert_same_gradients, free_port, gather_without_cross_process_gradient, make_mlm_model,
                      make_tiny_model, objective_argv, random_sentences, run_processes, write_csv)

pytestmark = pytest.mark.slow

WORLD, BATCH = 2, 8
PROMPT = {"template": "the {sentence} is {mask} .", "template2": "a {sentence} was {mask} ."}
# the pretrained copy as the momentum start: the official random start's first queue entries are nearly
# orthogonal to the queries (their negatives barely count), and this file checks that the queue's do
ESIMCSE = {"neg_size": 12, "momentum": 0.9, "momentum_init": "copy"}
# row -> (--loss, --loss_args, --pooler_type, tensors gathered with / without gradient)
ROWS = {
    "esimcse": ("esimcse", ESIMCSE, "avg", (1, 0)),  # first step: the queue is empty; the keys, not the queue
    "esimcse_full_queue": ("esimcse", ESIMCSE, "avg", (1, 0)),  # the same filled queue here and in the reference
    "simcse_pp": ("simcse_pp", {}, "avg", (3, 0)),  # the off-dropout keys, and both views for DCL
    "mixcse": ("mixcse", {"lambdas": 0.3, "hard_negative_weight": 0.5}, "avg", (1, 1)),  # keys; anchors to mix
    "infocse": ("infocse", {"mlm_weight": 0.5, "skip_from": 1, "batchnorm": False}, "cls_before_pooler", (1, 0)),
    "promptbert": ("promptbert", PROMPT, "prompt_mask", (1, 0)),
    "rankcse_listmle": ("rankcse", {"distillation": "listmle"}, "avg", (2, 1)),  # both views; the teacher's keys
    "rankcse_listnet": ("rankcse", {"distillation": "listnet"}, "avg", (2, 1)),
    # scored pairs: every process ranks all processes' pairs (pairs with gradient, scores without)
    "cosent": ("cosent", {}, "avg", (1, 1)),
    "angle": ("angle", {}, "avg", (1, 1)),
    # one prefix size drawn per step: the same on every process (a seed without the rank)
    "matryoshka_sampled": ("matryoshka", {"loss": "infonce", "matryoshka_dims": [32, 16, 8, 4], "n_dims_per_step": 1},
                           "avg", (1, 0)),
}
SCORED = {"cosent", "angle"}
# PromptBERT's template denoising subtracts two nearly equal states and InfoCSE's tiny [CLS] states are nearly
# equal: their float32 gradients are ill-conditioned (~1e-3 relative between two row orders of one process),
# float64 ones are not. The last LayerNorm's bias shifts both denoised states alike: true gradient 0 (compared
# absolutely).
FLOAT64 = {"promptbert", "infocse"}
NEAR_ZERO = {"promptbert": ("layer.1.output.LayerNorm.bias",)}


def _argv(root, row, seed, out, *extra):
    loss, args, pooler, _ = ROWS[row]
    if loss == "rankcse":
        args = {"teachers": [str(root / "teacher")], "teacher_poolers": ["avg"], **args}
    data = root / ("scored.csv" if loss in SCORED else "train.txt")
    return objective_argv(root / "model", data, out, loss, args, "--pooler_type", pooler,
                          "--dropout", "0.0", "--seed", str(seed), *extra)


def _build(root, row, seed, out, *extra):
    from simcse.training.train import build_trainer, parse_args

    trainer = build_trainer(*parse_args(_argv(root, row, seed, out, *extra)))
    trainer.current_gradient_accumulation_steps = 1  # set by HF's training loop
    if row in FLOAT64:
        trainer.model.double()
    return trainer


def _half(batch, rank):
    return {k: v[rank * BATCH // WORLD:(rank + 1) * BATCH // WORLD] for k, v in batch.items()}


def _cat(halves):
    """The halves' tensors concatenated along the batch, right-padded with 0 ([PAD], mask 0) to the longest
    (ESimCSE's repetition lengthens each half by its own draw)."""
    def pad(t, length):
        return torch.nn.functional.pad(t, (0, length - t.shape[2])) if t.dim() == 3 and t.shape[2] < length else t

    out = {}
    for k in halves[0]:
        longest = max(h[k].shape[2] if h[k].dim() >= 3 else 0 for h in halves)
        out[k] = torch.cat([pad(h[k], longest) for h in halves])
    return out


def _per_rank_prepare(objective):
    """A ``prepare_batch`` for ``objective`` that prepares each half with that rank's own draws."""
    real, fresh = objective.prepare_batch, type(objective._seeds)  # a process's seed counter before its first step

    def prepare(batch, context, seed=None):
        halves = []
        for r in range(WORLD):
            objective._seeds = fresh()
            ctx = dataclasses.replace(context, rank=r, **({} if seed is None else {"seed": seed}))
            halves.append(real(_half(batch, r), ctx))
        return _cat(halves)

    return prepare


def _balanced_seed(trainer, batch):
    """The first ``--seed`` whose per-process masks (InfoCSE's ``infocse_labels``) count equally many tokens."""
    prepare = _per_rank_prepare(trainer.objective)
    for seed in range(100):
        labels = prepare(batch, trainer.loss_context(trainer.model, batch), seed=seed).get("infocse_labels")
        if labels is None:
            return 0
        counts = (labels != -100).view(WORLD, -1).sum(1)
        if counts[0] == counts[1]:
            return seed
    raise AssertionError("no seed with balanced masks")


def _step(trainer, model, batch, queue):
    """One training step on ``batch``: (loss, parameter gradients, the ESimCSE queue after its step hook)."""
    if queue is not None:
        trainer.objective._queue = queue.clone()
    loss = trainer.training_step(model, dict(batch))
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    after = None
    if hasattr(trainer.objective, "_queue"):
        trainer.objective.on_step_end(trainer.model, trainer.loss_context())
        after = trainer.objective.queue.clone()
    return {"loss": loss.detach(), "grads": grads, "queue": after}


def _counting(gather, kind, log):
    """``gather`` that first appends ``kind`` to ``log``."""
    def counted(t):
        log.append(kind)
        return gather(t)
    return counted


def _worker(rank: int, port: int, root: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD))
    torch.set_num_threads(1)
    from pathlib import Path

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import simcse.training.objective_hooks as hooks  # where the trainer takes its gather from

    root = Path(root)
    inputs, results = torch.load(root / "inputs.pt"), {}
    real = hooks.all_gather_with_grad, hooks.all_gather_nograd
    for row, (batch, seed, queue) in inputs.items():
        for control in (False, True):
            trainer = _build(root, row, seed, root / "out" / f"{row}-{rank}-{control}", "--ddp_backend", "gloo")
            assert dist.is_initialized() and dist.get_world_size() == WORLD and dist.get_backend() == "gloo"
            ddp = trainer.accelerator.prepare_model(trainer.model)
            assert isinstance(ddp, DistributedDataParallel)
            log = []
            hooks.all_gather_with_grad = _counting(gather_without_cross_process_gradient if control else real[0], 0, log)
            hooks.all_gather_nograd = _counting(real[1], 1, log)
            try:
                results[row, control] = {**_step(trainer, ddp, _half(batch, rank), queue), "gathers": log}
            finally:
                hooks.all_gather_with_grad, hooks.all_gather_nograd = real
    torch.save(results, root / f"rank{rank}.pt")
    dist.barrier()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(the two processes' results, the one-process results): ``{(row, control): {loss, grads, queue}}``."""
    root = tmp_path_factory.mktemp("gloo")
    make_mlm_model(root / "model", dropout=0.0)  # InfoCSE's official MLM head comes from the checkpoint
    make_tiny_model(root / "teacher", seed=1, dropout=0.0)
    (root / "train.txt").write_text("\n".join(random_sentences(BATCH, seed=7)) + "\n")
    pairs = zip(random_sentences(BATCH, seed=8), random_sentences(BATCH, seed=9), (0, 5, 1, 4, 2, 3, 5, 0))
    write_csv(root / "scored.csv", ["sent0", "sent1", "score"], [[a, b, str(c)] for a, b, c in pairs])
    inputs, single = {}, {}
    for row in ROWS:
        trainer = _build(root, row, 0, root / "out" / f"{row}-ref0")
        batch = next(iter(trainer.get_train_dataloader()))
        seed = _balanced_seed(trainer, batch) if hasattr(trainer.objective, "_seeds") else 0
        if seed:
            trainer = _build(root, row, seed, root / "out" / f"{row}-ref")
        if hasattr(trainer.objective, "_seeds"):
            trainer.objective.prepare_batch = _per_rank_prepare(trainer.objective)
        # step two of a one-process run: the queue holds step one's momentum embeddings (8 of neg_size 12)
        queue = single["esimcse"]["queue"] if row == "esimcse_full_queue" else None
        inputs[row] = (batch, seed, queue)
        single[row] = _step(trainer, trainer.model, batch, queue)
    torch.save(inputs, root / "inputs.pt")
    run_processes(_worker, (free_port(), str(root)), WORLD, timeout_s=240)
    return [torch.load(root / f"rank{r}.pt") for r in range(WORLD)], single


def _mean_loss(ranks, key):
    return torch.stack([r[key]["loss"] for r in ranks]).mean()


@pytest.mark.parametrize("row", ROWS)
def test_two_processes_equal_one_process(runs, row):
    """The mean of the processes' losses is the one-process loss; DDP's averaged gradients (the same on both
    processes) are the one-process gradients, the objective's own trained modules included."""
    ranks, single = runs
    ref = single[row]
    mean = _mean_loss(ranks, (row, False))
    assert torch.isclose(mean, ref["loss"], rtol=1e-5), (mean, ref["loss"])
    assert len(ref["grads"]) > 10
    for r in range(WORLD):
        ours = ranks[r][row, False]["grads"]
        assert_same_gradients(ours, ref["grads"], rel=1e-4, near_zero=NEAR_ZERO.get(row, ()))


@pytest.mark.parametrize("row", ROWS)
def test_gather_without_cross_process_gradient_does_not_match(runs, row):
    """Control: with other processes' rows gathered without their gradient (the original SimCSE code) the loss
    is the same but the gradients are not, so the equality above is a real check of each method's gather."""
    ranks, single = runs
    assert torch.isclose(_mean_loss(ranks, (row, True)), single[row]["loss"], rtol=1e-5)
    name = "encoder.embeddings.word_embeddings.weight"
    ours, ref = ranks[0][row, True]["grads"][name], single[row]["grads"][name]
    assert float((ours - ref).norm() / ref.norm()) > 1e-2


def test_esimcse_queue_is_per_process(runs):
    """After step one each process's queue holds the momentum embeddings of its own half only (not gathered); a
    filled queue changes the loss (its negatives count)."""
    ranks, single = runs
    whole = single["esimcse"]["queue"]
    assert whole.shape == (BATCH, 32)
    assert float(single["esimcse_full_queue"]["loss"]) > float(single["esimcse"]["loss"]) + 0.1
    for r in range(WORLD):
        mine = ranks[r]["esimcse", False]["queue"]
        torch.testing.assert_close(mine, _half({"q": whole}, r)["q"], rtol=1e-5, atol=1e-6)



@pytest.mark.parametrize("row", ROWS)
def test_what_each_method_gathers(runs, row):
    """The tensors a process gathers, as the official code: ESimCSE the keys (never its queue), SimCSE++ its
    off-dropout keys and both views (DCL), MixCSE the keys and the anchors it mixes (no gradient), RankCSE both
    views and the teacher's keys (no gradient)."""
    ranks, _ = runs
    log = ranks[0][row, False]["gathers"]
    assert (log.count(0), log.count(1)) == ROWS[row][3]
