"""MLM-pretrain a small BERT from scratch: ``python scripts/pretrain_mlm.py --train_file ... --output_dir ...``.

See :mod:`simcse.research.pretrain` and docs/reproduction.md (the sizes used there and why).
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    from transformers import HfArgumentParser

    from simcse.research.pretrain import PretrainArguments, pretrain

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = HfArgumentParser(PretrainArguments)
    try:
        (args,) = parser.parse_args_into_dataclasses(args=argv)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = pretrain(args)
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
