"""Train SimCSE: ``python scripts/train.py [config.json] [--option value ...]``; see ``simcse.training.train``."""
from simcse.training.train import program

if __name__ == "__main__":
    program()
