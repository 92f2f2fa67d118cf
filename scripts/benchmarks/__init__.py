"""The benchmarks: run each from the checkout's root as ``python -m scripts.benchmarks.NAME --help``
(docs/performance.md); their shared helper is :mod:`scripts.benchmarks.common`. Not part of the installed package."""
