"""``python -m simcse ...``: the ``simcse`` command (see :mod:`simcse.cli`)."""
import sys

from .cli import main

sys.exit(main())
