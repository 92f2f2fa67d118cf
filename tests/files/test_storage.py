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


@pytest.fixture(params=[0o022, 0o002, 0o077], ids=["umask022", "umask002", "umask077"])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mode & 0o777 for p in [root, *root.rglob("*")]}


@pytest.mark.parametrize("existing", [False, True], ids=["new", "into_existing"])
def test_atomic_folder_ends_with_the_permissions_of_an_ordinary_write(tmp_path, umask, existing):
    import torch
    from safetensors.torch import save_file

    from simcse.files.storage import atomic_folder, current_umask

    assert current_umask() == umask
    target = tmp_path / "out"
    if existing:
        target.mkdir()
    with atomic_folder(target, "the test folder") as tmp:
        save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))  # safetensors writes 0600
        (tmp / "sub").mkdir()
        (tmp / "sub" / "notes.txt").write_text("x")
    # what mkdir and open give under this umask, measured on ordinary writes beside it
    (tmp_path / "plain_dir").mkdir()
    (tmp_path / "plain_file").write_text("x")
    folder_mode = (tmp_path / "plain_dir").stat().st_mode & 0o777
    file_mode = (tmp_path / "plain_file").stat().st_mode & 0o777
    assert (folder_mode, file_mode) == (0o777 & ~umask, 0o666 & ~umask)
    assert _modes(target) == {".": folder_mode, "model.safetensors": file_mode, "sub": folder_mode,
                              "sub/notes.txt": file_mode}


def test_saved_model_and_index_are_readable_by_others(tmp_path, tiny_bert_dir, umask):
    from simcse.models.modeling import SimCSEModel
    from simcse.retrieval.tool import SimCSE

    folder_mode, file_mode = 0o777 & ~umask, 0o666 & ~umask
    SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg").save_pretrained(tmp_path / "m")
    tool = SimCSE(str(tmp_path / "m"), device="cpu")
    tool.build_index(SENTENCES[:6])
    tool.save_index(tmp_path / "idx")
    for root in (tmp_path / "m", tmp_path / "idx"):
        modes = _modes(root)
        assert {k: v for k, v in modes.items() if (root / k).is_dir()} == {
            k: folder_mode for k in modes if (root / k).is_dir()}, root
        assert {k: v for k, v in modes.items() if (root / k).is_file()} == {
            k: file_mode for k in modes if (root / k).is_file()}, root
    assert (tmp_path / "m" / "model.safetensors").stat().st_mode & 0o777 == file_mode


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


def test_atomic_folder_removes_stale_entries_it_replaces_only_after_writing(tmp_path):
    """Into an existing folder: the new files are moved in first, then the entries of ``replaces``' names that
    were not written are removed; entries of other names, and those written again, are kept."""
    from simcse.files.storage import atomic_folder

    target = tmp_path / "out"
    (target / "old_module").mkdir(parents=True)
    for name in ("old.bin", "kept.bin", "notes.txt", "old_module/config.json"):
        (target / name).write_text("old")
    seen = []

    def replaces(name):
        seen.append((name, (target / "new.bin").is_file()))
        return name.endswith(".bin") or name == "old_module"

    with atomic_folder(target, "the test folder", replaces=replaces) as tmp:
        (tmp / "new.bin").write_text("new")
        (tmp / "kept.bin").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["kept.bin", "new.bin", "notes.txt"]
    assert (target / "kept.bin").read_text() == "new" and (target / "notes.txt").read_text() == "old"
    assert seen and all(written for _, written in seen)  # asked only once the new files were in place


def test_a_save_over_a_model_folder_removes_its_stale_files_only(tmp_path, tiny_bert_dir):
    """save_pretrained over a folder of another model: the earlier model's files the save did not write (an
    adapter, an MLP, a 2_Dense module, a tokenizer vocabulary) go; the user's files stay; a model without a
    tokenizer keeps the folder's tokenizer."""
    from simcse.models.modeling import SimCSEModel

    model = SimCSEModel.from_pretrained(str(tiny_bert_dir), pooler_type="avg")
    folder = tmp_path / "m"
    folder.mkdir()
    stale = ("adapter_config.json", "adapter_model.safetensors", "simcse_mlp.safetensors", "spiece.model",
             "model-00001-of-00002.safetensors")
    for name in (*stale, "notes.txt", "2_Dense/config.json"):
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text("old")
    model.save_pretrained(folder)
    names = {p.name for p in folder.iterdir()}
    assert not names & {*stale, "2_Dense"} and {"model.safetensors", "notes.txt"} <= names
    (folder / "spiece.model").write_text("old")
    tokenizer_files = {p.name for p in folder.iterdir() if p.name.startswith(("tokenizer", "vocab", "spiece"))}
    model.tokenizer = None
    model.save_pretrained(folder)
    assert "spiece.model" in tokenizer_files and tokenizer_files <= {p.name for p in folder.iterdir()}
