"""``python -m simcse ...`` runs the ``simcse`` command (so ``torchrun -m simcse encode ...`` works)."""
import sys

from .cli import main

sys.exit(main())
