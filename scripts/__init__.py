"""The project's scripts (a package so that ``python -m scripts.benchmarks.NAME`` and ``python -m scripts.gpu_check``
run from the checkout's root). The user entry points here also run as files: ``python scripts/train.py ...``."""
