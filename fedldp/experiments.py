"""Experiments from Python: ``run(file, out)`` runs an experiment file (``fedldp experiment
run``) and ``load(out)`` reads its trials, both as a pandas DataFrame with typed columns (the
``notebook`` extra). They live in ``fedldp.client.experiments.frame``; this module is their short
name.

>>> import fedldp.experiments
>>> fedldp.experiments.load("no/such/run")
Traceback (most recent call last):
...
FileNotFoundError: no trials CSV at no/such/run (give a run directory or its CSV)
"""

from __future__ import annotations

from fedldp.client.experiments.frame import load, run

__all__ = ["load", "run"]
