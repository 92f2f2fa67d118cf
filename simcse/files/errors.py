"""The one error type for a problem with a command's inputs."""


class UsageError(ValueError):
    """A problem with a command's inputs (a missing file, options that conflict...): ``simcse`` prints it as one
    ``error: ...`` line and exits with status 2. A ``ValueError``, so library callers catch it as one."""
