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
