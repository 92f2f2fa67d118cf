"""Streaming sharded encoding: resume after SIGKILL, 2 torchrun CPU processes = 1 process, flat memory, bad input."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from conftest import random_sentences
from simcse.retrieval.shards import MANIFEST_NAME, ShardSet, encode_to_shards, is_shard_folder

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    f = tmp_path_factory.mktemp("shards") / "corpus.txt"
    f.write_text("\n".join(random_sentences(600, seed=7)) + "\n")
    return f


def _env():
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def _encode_cmd(model, corpus, out, shard_size=25):
    return ["-m", "simcse", "encode", "--model", str(model), "--pooler", "avg", "--input", str(corpus),
            "--output", str(out), "--shard-size", str(shard_size), "--batch-size", "8", "--device", "cpu"]


def _run(args, **kw):
    r = subprocess.run([sys.executable, *args], env=_env(), capture_output=True, text=True, timeout=300, **kw)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _manifest(folder):
    return json.loads((Path(folder) / MANIFEST_NAME).read_text())


@pytest.fixture(scope="module")
def uninterrupted(tiny_bert_dir, corpus, tmp_path_factory):
    from simcse import cli

    out = tmp_path_factory.mktemp("whole") / "emb"
    assert cli.main(_encode_cmd(tiny_bert_dir, corpus, out)[2:]) == 0  # in-process: one model load fewer
    return out


def test_one_process_writes_all_shards_in_line_order(uninterrupted, tiny_bert_dir, corpus):
    from simcse.retrieval.tool import SimCSE

    m = _manifest(uninterrupted)
    assert m["num_rows"] == 600 and m["num_shards"] == 24 and len(m["shards"]) == 24
    assert m["pooler"] == "avg" and m["dtype"] == "float32" and m["hidden_size"] == 32
    assert m["shards"][1]["rows"] == [25, 50] and m["shards"][1]["lines"] == [26, 50]
    shards = ShardSet(uninterrupted)
    shards.verify()
    emb = np.concatenate([a for _, a in shards.iter_arrays()])
    lines = corpus.read_text().splitlines()
    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    np.testing.assert_allclose(emb, tool.encode(lines, return_numpy=True), rtol=1e-5, atol=1e-6)
    assert list(shards.iter_sentences()) == lines
    np.testing.assert_array_equal(shards.rows([599, 0, 26]), emb[[599, 0, 26]])


@pytest.mark.slow
def test_resume_after_sigkill_equals_uninterrupted_run(tiny_bert_dir, corpus, uninterrupted, tmp_path):
    out = tmp_path / "emb"
    proc = subprocess.Popen([sys.executable, *_encode_cmd(tiny_bert_dir, corpus, out)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while not list(out.glob("shard-*.json")):  # kill as soon as the first shard is complete
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "no shard appeared"
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    done_before = len(list(out.glob("shard-*.json")))
    assert not (out / MANIFEST_NAME).exists() and 1 <= done_before < 24, "the kill did not interrupt the run"
    r = _run(_encode_cmd(tiny_bert_dir, corpus, out))
    assert f"{24 - done_before} shards written, {done_before} already there" in r.stderr
    assert _manifest(out) == _manifest(uninterrupted)  # same settings, row/line ranges, and SHA-256 of every shard
    assert not list(out.glob(".*tmp*")), "temporary files left behind"


@pytest.mark.slow
def test_torchrun_two_cpu_processes_equal_one_process(tiny_bert_dir, corpus, uninterrupted, tmp_path):
    out = tmp_path / "emb"
    r = _run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
              *_encode_cmd(tiny_bert_dir, corpus, out)])
    assert "rank 0/2: 12 shards written" in r.stderr and "rank 1/2: 12 shards written" in r.stderr
    assert _manifest(out) == _manifest(uninterrupted)


def _fake_encode(texts):
    """Deterministic stand-in for a model: 256 float32 numbers per text, from its characters."""
    codes = np.array([sum(map(ord, t)) for t in texts], dtype=np.float32)
    return np.outer(codes, np.linspace(0.0, 1.0, 256, dtype=np.float32))


def _peak_python_bytes(path, out, shard_size):
    tracemalloc.start()
    try:
        encode_to_shards(_fake_encode, path, out, {"model": "fake"}, shard_size=shard_size)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_flat_in_corpus_size(tmp_path):
    """Python/numpy peak (tracemalloc) for 20,000 lines stays that of 2,000 lines at the same shard size; holding
    all rows (as one .npy output does) would make it ~10x."""
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    lines = random_sentences(20_000, seed=3)
    small.write_text("\n".join(lines[:2000]) + "\n")
    big.write_text("\n".join(lines) + "\n")
    p_small = _peak_python_bytes(small, tmp_path / "s", 500)
    p_big = _peak_python_bytes(big, tmp_path / "b", 500)
    assert ShardSet(tmp_path / "b").num_rows == 20_000
    all_rows = 20_000 * 256 * 4
    assert p_big < 1.3 * p_small and p_big < all_rows / 4, (p_small, p_big)


def test_bad_line_fails_before_any_shard(tmp_path):
    f = tmp_path / "c.txt"
    f.write_bytes(b"a dog .\n" * 30 + b"\n" + b"a cat .\n")
    with pytest.raises(ValueError, match=r"c.txt:31 is blank"):
        encode_to_shards(_fake_encode, f, tmp_path / "o", {}, shard_size=10)
    assert not list((tmp_path / "o").glob("shard-*"))
    f.write_bytes(b"a dog .\n" * 30 + b"caf\xe9\n")
    with pytest.raises(ValueError, match=r"c.txt:31: byte 4 .* is not UTF-8"):
        encode_to_shards(_fake_encode, f, tmp_path / "o2", {}, shard_size=10)
    f.write_bytes(b"a dog .\n" * 30 + b" \n" + b"a cat .\n")
    m = encode_to_shards(_fake_encode, f, tmp_path / "o3", {}, shard_size=10, skip_blank=True)
    assert m["num_rows"] == 31 and m["shards"][-1]["rows"] == [30, 31] and m["shards"][-1]["lines"] == [32, 32]


def test_other_settings_or_changed_input_refuse_to_resume(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("".join(f"sentence {i} .\n" for i in range(45)))
    out = tmp_path / "o"
    m = encode_to_shards(_fake_encode, f, out, {"model": "a", "pooler": "avg"}, shard_size=10, dtype="float16")
    assert m["num_shards"] == 5 and np.load(out / "shard-00004.npy").dtype == np.float16 and is_shard_folder(out)
    with pytest.raises(ValueError, match="another run .*pooler: 'avg' there, 'cls' now"):
        encode_to_shards(_fake_encode, f, out, {"model": "a", "pooler": "cls"}, shard_size=10, dtype="float16")
    # "model" is how the path was spelled (descriptive); the model itself is its fingerprint
    encode_to_shards(_fake_encode, f, out, {"model": "./a", "pooler": "avg"}, shard_size=10, dtype="float16")
    (out / "shard-00002.json").unlink()  # as if killed before shard 2 was complete
    (out / MANIFEST_NAME).unlink()
    f.write_text("".join(f"sentence {i} .\n" for i in range(45)).replace("sentence 3 ", "sentencX 3 "))
    with pytest.raises(ValueError, match=r"lines 1-10 changed since shard-00000.npy was written"):
        encode_to_shards(_fake_encode, f, out, {"model": "a", "pooler": "avg"}, shard_size=10, dtype="float16")
