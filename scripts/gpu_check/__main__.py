"""``python -m scripts.gpu_check``: :func:`scripts.gpu_check.check.main`."""
import sys

from scripts.gpu_check.check import main

sys.exit(main())
