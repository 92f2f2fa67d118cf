"""Write failures outside training (simcse.files.storage): the index, encoded embeddings, exports, result JSON.

Each failure is injected as the OSError the system gives on a full disk (ENOSPC) or past ``ulimit -f`` (EFBIG)
after part of the file was written; the outcome must be one line naming what and where, and nothing
half-written (an earlier complete result is kept).
"""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import SENTENCES


def _failing_after_partial(code=errno.ENOSPC):
    """A replacement for a writer taking a file path among its arguments: writes a few bytes there, then raises
    OSError(code)."""

    def write(*args, **kw):
        file = next(a for a in [*args, *kw.values()] if isinstance(a, (str, Path)))
        Path(file).write_bytes(b"partial")
        raise OSError(code, os.strerror(code))

    return write


def test_index_save_failure_keeps_the_previous_index(tmp_path, tiny_bert_dir, monkeypatch):
    from simcse.files.storage import WriteError
    from simcse.retrieval.tool import SimCSE

    tool = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    tool.build_index(SENTENCES[:6])
    folder = tmp_path / "idx"
    tool.save_index(folder)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    tool.build_index(SENTENCES)  # a bigger index whose save fails half-way
    monkeypatch.setattr(type(tool.index), "_save", lambda self, f: _failing_after_partial()(f / "vectors.npy"))
    with pytest.raises(WriteError) as exc:
        tool.save_index(folder)
    monkeypatch.undo()
    assert str(exc.value).startswith(f"could not write the index to {str(tmp_path)!r}: No space left on device "
                                     "(needs about "), str(exc.value)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]  # no temporary folder left
    fresh = SimCSE(str(tiny_bert_dir), pooler="avg", device="cpu")
    fresh.load_index(folder)
    assert len(fresh.sentences) == 6


def test_encode_command_failure_leaves_no_partial_file(tmp_path, tiny_bert_dir, monkeypatch, capsys):
    from simcse import cli

    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(SENTENCES) + "\n")
    out = tmp_path / "emb.npy"
    real = np.lib.format.open_memmap

    def memmap(path, *a, **kw):
        arr = real(path, *a, **kw)
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(np.lib.format, "open_memmap", memmap)
    code = cli.main(["encode", "--model", str(tiny_bert_dir), "--pooler", "avg", "--input", str(inp),
                     "--output", str(out), "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith(f"error: could not write the embeddings emb.npy to {str(tmp_path)!r}: File too large "
                              "(needs about "), err[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@pytest.mark.parametrize("fmt", ["sentence-transformers", "huggingface"])
def test_export_failure_leaves_the_folder_as_it_was(tmp_path, tiny_bert_dir, monkeypatch, fmt):
    import transformers.modeling_utils as mu

    from simcse.interop.export import export_huggingface, export_sentence_transformers
    from simcse.models.modeling import SimCSEModel
    from simcse.files.storage import WriteError

    export = export_sentence_transformers if fmt == "sentence-transformers" else export_huggingface
    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg")
    monkeypatch.setattr(mu, "safe_save_file", _failing_after_partial())
    with pytest.raises(WriteError, match=r"^could not write the .* export to .*: No space left on device"):
        export(model, tmp_path / "out")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_result_json_is_whole_or_absent(tmp_path, monkeypatch):
    """simcse_results.json (training) and --output_json (evaluation) go through write_text_atomic."""
    import simcse.files.storage
    from simcse.files.storage import WriteError, write_text_atomic

    target = tmp_path / "results.json"
    write_text_atomic(target, json.dumps({"old": 1}))
    real_replace = simcse.files.storage.os.replace

    def failing_replace(src, dst):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(simcse.files.storage.os, "replace", failing_replace)
    with pytest.raises(WriteError, match=r"^could not write the results to .*: Input/output error"):
        write_text_atomic(target, json.dumps({"new": 2}), what="the results")
    monkeypatch.setattr(simcse.files.storage.os, "replace", real_replace)
    assert json.loads(target.read_text()) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


# ------------------------------------------------------------------------ a termination signal while writing
_SIGNALLED_CHILD = r'''
import os, signal, sys
import numpy as np
from simcse import cli
from simcse.retrieval import tool as tool_mod

case, model, inp, out = sys.argv[1:5]
if case == "npy":  # SIGTERM in the middle of the encoding loop, the .partial file half filled
    real, calls = tool_mod.SimCSE.encode, []
    def encode(self, *a, **kw):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, *a, **kw)
    tool_mod.SimCSE.encode = encode
else:  # SIGTERM while a shard's bytes are being written
    real_write = np.lib.format.write_array
    def write_array(f, *a, **kw):
        real_write(f, *a, **kw)
        os.kill(os.getpid(), signal.SIGTERM)
    np.lib.format.write_array = write_array
extra = ["--chunk-size", "2"] if case == "npy" else ["--shard-size", "4"]
sys.exit(cli.main(["encode", "--model", model, "--pooler", "avg", "--input", inp, "--output", out,
                   "--device", "cpu", *extra]))
'''


@pytest.mark.slow  # a fresh interpreter per case (torch, transformers)
@pytest.mark.parametrize("case, output", [("npy", "emb.npy"), ("shards", "emb")])
def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path, tiny_bert_dir, case, output):
    """SIGTERM ends the write as an error does: the temporary file is removed, the exit status is a signal's (143)."""
    import subprocess
    import sys

    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(SENTENCES) + "\n")
    r = subprocess.run([sys.executable, "-c", _SIGNALLED_CHILD, case, str(tiny_bert_dir), str(inp),
                        str(tmp_path / output)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert r.returncode == 128 + 15, (r.returncode, r.stderr[-2000:])
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.name.startswith("."))
    assert left == [], left
    assert not (tmp_path / "emb.npy").exists()


def test_a_signal_handler_of_the_program_is_kept_while_writing(tmp_path):
    """A program that handles SIGTERM itself (training saves a checkpoint on it) keeps its handler."""
    import signal

    from simcse.files.storage import writing

    seen = []
    old = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    try:
        with writing("x", tmp_path):
            os.kill(os.getpid(), signal.SIGTERM)
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, old)
