"""Train SimCSE: ``python scripts/train.py [config.json] [--option value ...]``; see ``simcse.train``."""
from simcse.train import main

if __name__ == "__main__":
    main()
