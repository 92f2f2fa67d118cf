"""``python -m simcse ...`` runs the ``simcse`` command (so ``torchrun -m simcse encode ...`` works)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
