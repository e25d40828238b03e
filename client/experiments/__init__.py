"""Experiments: declarative sweeps of in-process simulations, their CSV of trials, their figures,
and the papers' figures reproduced with their claims checked (``fedldp experiment``,
``fedldp reproduce``)."""
