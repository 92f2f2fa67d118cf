"""The package version (one place; ``simcse.__version__`` and the web API read it)."""
__version__ = "0.1.0"
