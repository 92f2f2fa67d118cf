"""Write failures (disk full, file size limit, read-only or failing storage) turned into one clear error.

A failed write shows up in different shapes: ``OSError`` (``ENOSPC``, ``EFBIG``, ``EIO``, ``EROFS``, ``EACCES``,
``EDQUOT``), safetensors' ``SafetensorError("... I/O error: File too large (os error 27)")`` or torch's zip
writer ``RuntimeError("... unexpected pos 576 vs 534")`` (a short write). :func:`writing` recognises them all
and raises :class:`WriteError` (an ``OSError`` with the original ``errno`` where known) whose message names what
was being written, the folder, and the space it needs against the space free (and the file size limit,
``ulimit -f``, when one is set). Cleaning up half-written files is the writer's job (atomic saves: a temporary
sibling removed in a ``finally``); :func:`writing` makes a termination signal (SIGTERM, SIGHUP) run that clean-up
too (:func:`signals_end_the_write`). :func:`check_room` reports a folder that clearly cannot hold what a run will
write before the run starts.

Atomic writes go through temporary folders (``tempfile.mkdtemp`` makes them ``0700``) and through writers that
create private files (safetensors writes ``0600``); :func:`make_temp_folder` and :func:`ordinary_permissions`
give what they leave the permissions an ordinary ``mkdir``/``open`` would have had under the process's umask, so
a saved model or index is as readable by others as any other file the user writes.
"""
from __future__ import annotations

import errno
import os
import re
from contextlib import contextmanager
from pathlib import Path

WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM,
                getattr(errno, "EDQUOT", errno.ENOSPC)}
_OS_ERROR = re.compile(r"os error (\d+)")
_SHORT_WRITE = ("unexpected pos", "PytorchStreamWriter failed writing")


class WriteError(OSError):
    """Writing ``what`` into ``folder`` failed; ``str()`` is one line for the user (see :func:`writing`)."""

    def __init__(self, err_no: int | None, message: str, what: str = "", folder: str = ""):
        super().__init__(err_no, message)
        self.what, self.folder = what, folder

    def __str__(self) -> str:
        return self.strerror


def human(n: int | float | None) -> str:
    """Bytes as ``'12.3 MB'`` (decimal units, as ``df -H``)."""
    if n is None:
        return "unknown"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def _existing(path: str | os.PathLike) -> Path:
    p = Path(path).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: str | os.PathLike) -> int | None:
    """Free bytes (for this user) on the file system of ``path`` or its nearest existing parent; None if unknown."""
    try:
        st = os.statvfs(_existing(path))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def file_size_limit() -> int | None:
    """The soft ``RLIMIT_FSIZE`` (``ulimit -f``) in bytes, or None when there is none."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def folder_bytes(path: str | os.PathLike) -> int:
    """Total size of the files under ``path`` (0 when it does not exist)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def write_errno(exc: BaseException) -> int | None | bool:
    """The errno of a write failure ``exc``; None for a failed write of unknown cause; False if it is none."""
    if isinstance(exc, WriteError):
        return exc.errno  # reported by an inner block: the outer one names the whole thing being written
    if isinstance(exc, OSError):
        return exc.errno if exc.errno in WRITE_ERRNOS else False
    text = str(exc)
    m = _OS_ERROR.search(text)
    if m:
        return int(m.group(1)) if int(m.group(1)) in WRITE_ERRNOS else False
    return None if any(s in text for s in _SHORT_WRITE) else False


def describe(what: str, folder: str | os.PathLike, exc: BaseException, needed: int | None = None) -> str:
    """One line: what failed to be written where, why, and the space needed vs free (and ``ulimit -f``)."""
    code = write_errno(exc)
    if isinstance(exc, OSError) and not isinstance(exc, WriteError) and exc.strerror:
        reason = exc.strerror  # the system's own words
    else:
        reason = os.strerror(code) if isinstance(code, int) and code else "the file was written short"
    space = [f"needs about {human(needed)}" if needed else None, f"{human(free_bytes(folder))} free there"]
    limit = file_size_limit()
    if limit is not None:
        space.append(f"file size limit (ulimit -f) {human(limit)}")
    return f"could not write {what} to {str(folder)!r}: {reason} ({'; '.join(s for s in space if s)})"


TERMINATION_SIGNALS = ("SIGTERM", "SIGHUP")  # their default action ends the process without running `finally`


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)  # the shell's status for a process ended by that signal (143 for SIGTERM)


@contextmanager
def signals_end_the_write():
    """Within the block, SIGTERM / SIGHUP raise ``SystemExit(128 + signal)`` instead of ending the process at once,
    so the ``finally`` clauses and context managers around the block remove its temporary files (a kill -TERM
    during ``simcse encode`` leaves no ``.x.npy.partial``) and the process then exits with the status a shell
    gives a process ended by that signal. Only a signal whose handler is the default is changed (a run that
    saves on SIGTERM keeps its own handler), only in the main thread (Python runs handlers there), and the
    handlers are put back when the block ends."""
    import signal
    import threading

    changed = {}
    if threading.current_thread() is threading.main_thread():
        for name in TERMINATION_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
                changed[sig] = signal.signal(sig, _exit_on_signal)
    try:
        yield
    finally:
        for sig, old in changed.items():
            signal.signal(sig, old)


@contextmanager
def writing(what: str, folder: str | os.PathLike, needed: int | None = None):
    """Turn a write failure inside the block into :class:`WriteError` (message from :func:`describe`); a
    termination signal during the block ends it as an error does (:func:`signals_end_the_write`), so the
    writer's clean-up runs.

    A :class:`WriteError` of an inner block is reported again with this block's ``what`` and ``folder`` (the
    outermost block names the whole thing being written). Other exceptions pass unchanged.
    """
    try:
        with signals_end_the_write():
            yield
    except Exception as e:  # noqa: BLE001 -- filtered by write_errno; everything else is re-raised as is
        code = write_errno(e)
        if code is False:
            raise
        raise WriteError(code, describe(what, folder, e, needed), what, str(folder)) from e


def check_room(folder: str | os.PathLike, needed: int, what: str, largest_file: int | None = None) -> None:
    """Raise :class:`WriteError` when ``folder`` clearly cannot hold ``needed`` bytes of ``what``.

    Checked without writing anything: the nearest existing folder must be writable (``os.access``), the file
    system must have ``needed`` bytes free, and the file size limit must allow ``largest_file`` bytes.
    """
    base = _existing(folder)
    if not os.access(base, os.W_OK):
        raise WriteError(errno.EACCES, f"cannot write {what} to {str(folder)!r}: {str(base)!r} is not writable",
                         what, str(folder))
    free = free_bytes(base)
    if free is not None and free < needed:
        raise WriteError(errno.ENOSPC, f"{str(folder)!r} cannot hold {what}: it needs about {human(needed)}, "
                                       f"{human(free)} free there", what, str(folder))
    limit = file_size_limit()
    if limit is not None and largest_file and largest_file > limit:
        raise WriteError(errno.EFBIG, f"cannot write {what} to {str(folder)!r}: its largest file needs about "
                                      f"{human(largest_file)}, more than the file size limit (ulimit -f) of "
                                      f"{human(limit)}", what, str(folder))


def current_umask() -> int:
    """The process's file mode creation mask (``umask``), e.g. ``0o022``; read from ``/proc/self/status`` where
    Linux offers it, else by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def ordinary_permissions(path: str | os.PathLike) -> None:
    """Give ``path`` (a file, or a folder and everything under it) the mode an ordinary write would have:
    folders ``0o777``, files ``0o666`` (``0o777`` when already executable by their owner), less the umask.

    For what atomic writes leave private: ``tempfile.mkdtemp`` folders (``0700``) and safetensors files (``0600``).
    Links are not followed. Raises ``OSError`` from ``chmod`` (a file of another owner).
    """
    mask = current_umask()
    root = Path(path)
    for p in (root, *(root.rglob("*") if root.is_dir() and not root.is_symlink() else ())):
        if p.is_symlink():
            continue
        mode = p.stat().st_mode
        full = 0o777 if p.is_dir() or mode & 0o100 else 0o666
        if mode & 0o7777 != full & ~mask:
            os.chmod(p, full & ~mask)


def make_temp_folder(parent: str | os.PathLike, prefix: str) -> Path:
    """A new folder ``parent/<prefix>XXXX`` (``tempfile.mkdtemp``: a name no other writer takes) with the mode
    ``mkdir`` would give it (``0o777`` less the umask), so renaming it into place publishes an ordinary folder."""
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    ordinary_permissions(tmp)
    return tmp


def write_text_atomic(path: str | os.PathLike, text: str, what: str | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary sibling and one rename: the file is whole or absent
    (an existing one is kept on failure). Failures raise :class:`WriteError` naming ``what``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.partial")
    try:
        with writing(what or path.name, path.parent):
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextmanager
def atomic_folder(target: str | os.PathLike, what: str, needed: int | None = None, replaces=None):
    """Yield a temporary sibling folder to write ``target``'s files into; on success they replace ``target``'s.

    Files and folders end with the permissions an ordinary write gives (:func:`ordinary_permissions`). A new
    ``target`` appears by one rename; into an existing one each file is moved by its own rename (files of
    other names are kept), and after all of them the top-level entries of ``target`` that were not written
    and whose name ``replaces`` (a predicate on the name) accepts are removed: the stale files of an earlier
    write of the same kind. On any failure the temporary folder is removed and ``target`` is untouched; write
    failures raise :class:`WriteError` naming ``what``. ``needed`` (bytes) is checked first with
    :func:`check_room`.
    """
    import shutil

    target = Path(target)
    with writing(what, target.parent if target.parent.exists() else target, needed):
        if needed:
            check_room(target, needed, what)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = make_temp_folder(target.parent, f".{target.name}.tmp-")
        try:
            yield tmp
            ordinary_permissions(tmp)  # safetensors writes 0600: published files get the umask's mode
            if not target.exists():
                os.replace(tmp, target)
                return
            written = {f.name for f in tmp.iterdir()}
            for f in sorted(tmp.rglob("*")):
                dest = target / f.relative_to(tmp)
                if f.is_dir():
                    dest.mkdir(exist_ok=True)
                else:
                    os.replace(f, dest)
            for old in sorted(target.iterdir()) if replaces is not None else ():
                if old.name not in written and replaces(old.name):
                    if old.is_dir() and not old.is_symlink():
                        shutil.rmtree(old)
                    else:
                        old.unlink()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
