"""``python -m simcse ...``: the ``simcse`` command (:func:`simcse.cli.main`; so ``torchrun -m simcse encode ...``
works)."""
import sys

from simcse.cli import main

if __name__ == "__main__":
    sys.exit(main())
