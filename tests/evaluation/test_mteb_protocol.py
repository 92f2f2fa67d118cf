"""SimCSE under mteb 2.x: the encoder protocol, and mteb's own STS scoring on local SentEval STS-B files."""
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import SENTENCES
from simcse import SimCSE

mteb = pytest.importorskip("mteb")

from simcse.evaluation.mteb_protocol import run_tasks, senteval_sts_task  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REAL_DATA = Path(os.environ.get("SIMCSE_DATA_MIRROR", REPO.parent / "shared" / "data")) / "senteval" / "downstream"


@pytest.fixture
def real_data():
    if not (REAL_DATA / "STS" / "STSBenchmark" / "sts-dev.csv").is_file():
        pytest.skip(f"SentEval data not found at {REAL_DATA}")
    return REAL_DATA


@pytest.fixture
def tool(tiny_bert_dir):
    return SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")


def test_protocol(tool):
    from mteb.models import EncoderProtocol
    from torch.utils.data import DataLoader

    assert isinstance(tool, EncoderProtocol)
    meta = tool.mteb_model_meta
    assert meta.embed_dim == 32 and str(getattr(meta.similarity_fn_name, "value", meta.similarity_fn_name)) == "cosine"
    loader = DataLoader([{"text": s} for s in SENTENCES], batch_size=5)
    emb = tool.encode(loader, task_metadata=None, hf_split="test", hf_subset="default", prompt_type=None, batch_size=3)
    assert isinstance(emb, np.ndarray) and emb.dtype == np.float32 and emb.shape == (len(SENTENCES), 32)
    np.testing.assert_allclose(emb, tool.encode(SENTENCES, return_numpy=True), atol=1e-6)
    # the reference behaviour stays: a list without mteb keywords gives a torch tensor
    assert not isinstance(tool.encode(SENTENCES), np.ndarray)
    np.testing.assert_allclose(tool.similarity_pairwise(emb[:3], emb[3:6]), (emb[:3] * emb[3:6]).sum(1), atol=1e-6)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['normalise'\]"):
        tool.encode(loader, hf_split="test", normalise=True)
    with pytest.raises(TypeError, match="has no 'text' column"):
        tool.encode(DataLoader([{"image": 1}], batch_size=1), hf_split="test")


def test_mteb_sts_matches_our_evaluator(tool, real_data):
    from simcse.evaluation import evaluate

    task = senteval_sts_task("STSBenchmark", "dev", data_dir=real_data)
    task.load_data()
    assert len(task.dataset["dev"]) == 1500
    scores = run_tasks(tool, [task], batch_size=32)
    ours = evaluate(lambda s: tool.encode(s, return_numpy=True), ["STSBenchmark"], real_data, mode="dev")
    rho = ours["STSBenchmark"]["dev"]["spearman"][0]
    assert 0.05 < abs(rho)  # a real correlation, not a degenerate constant
    assert scores["SimCSELocalSTSBenchmark"] == pytest.approx(rho, abs=1e-4)


def test_senteval_sts_task_errors(real_data, tmp_path):
    with pytest.raises(ValueError, match="task must be one of"):
        senteval_sts_task("STS12", "test", data_dir=real_data)
    with pytest.raises(ValueError, match="split must be one of"):
        senteval_sts_task("STSBenchmark", "validation", data_dir=real_data)
    with pytest.raises(FileNotFoundError):
        senteval_sts_task("STSBenchmark", "test", data_dir=tmp_path)
