"""Experiments: arms x seeds of ``simcse train`` runs, on this machine or a Slurm cluster, reported with evidence
over seeds (``simcse experiment``; docs/experiments.md).

:mod:`~simcse.experiments.spec` (what a spec is), :mod:`~simcse.experiments.runs` (one run's folder and
processes), :mod:`~simcse.experiments.executors` (local, slurm through submitit),
:mod:`~simcse.experiments.report` (the statistics), :mod:`~simcse.experiments.grids` (grids and random search in
an arm), :mod:`~simcse.experiments.selection` (select on dev, test on fresh seeds, expected best vs points tried),
:mod:`~simcse.experiments.experiment` (the command).
"""
from simcse.experiments.experiment import main, plan, run_experiment
from simcse.experiments.report import analyse, write_report
from simcse.experiments.spec import Evaluation, Run, Spec, SpecError, load_spec, parse_spec

__all__ = ["Evaluation", "Run", "Spec", "SpecError", "analyse", "load_spec", "main", "parse_spec", "plan",
           "run_experiment", "write_report"]
