"""The one error type for a problem with a command's inputs."""


class UsageError(ValueError):
    """A problem with a command's inputs (a missing file, options that conflict...): ``simcse`` prints it as one
    ``error: ...`` line and exits with status 2. A ``ValueError``, so library callers catch it as one."""


_RUNNING: list[str] = []  # the ``simcse`` sub-command simcse.cli.main is running now (innermost last)


class running_command:
    """``with running_command("evaluate"): ...`` -- :func:`command_prog` names ``simcse evaluate`` meanwhile.

    :func:`simcse.cli.main` wraps every sub-command it hands its arguments to (train, evaluate, download), so
    their parsers' usage lines and errors name the command the user typed, whatever ``sys.argv[0]`` is
    (``__main__.py`` under ``python -m simcse``, a test runner, ...)."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        _RUNNING.append(self.name)
        return self

    def __exit__(self, *exc):
        _RUNNING.pop()
        return False


def command_prog(name: str) -> str | None:
    """``prog=`` for the argument parser of sub-command ``name``: ``"simcse NAME"`` while :func:`simcse.cli.main`
    runs it (:class:`running_command`), else None (argparse's default: the script's own name, e.g.
    ``evaluation.py`` for ``python scripts/evaluation.py``)."""
    return f"simcse {name}" if _RUNNING and _RUNNING[-1] == name else None
