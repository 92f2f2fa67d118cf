"""Run one of the paper's ablation tables as an experiment: ``python scripts/run_ablation.py --table 3 ...``;
see ``simcse.research.ablation`` (docs/ablations.md)."""
from simcse.research.ablation import main

if __name__ == "__main__":
    main()
