"""The GPU check: correctness on CUDA, training speed against sentence-transformers, and the paper's central claim on
an encoder pretrained on the spot, within a time budget, offline (docs/performance.md, "GPU check").

Run from the checkout's root: ``bash scripts/gpu_check.sh`` (installs, then runs) or ``python -m scripts.gpu_check
--help``. :mod:`.check` is the entry point, budget and report; :mod:`.parts` the three parts; :mod:`.bundle` the
packing (data bundle, wheels, install). Not part of the installed package.
"""
