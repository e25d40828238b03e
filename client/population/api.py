"""The population API: what a test, an experiment script or a law plugin needs, and nothing
internal (the population counterpart of ``fedldp.protocol.api``; its names are stable,
tests/client/population/test_api.py freezes them)."""

from __future__ import annotations

from fedldp.client.population.spec import PopulationSpec

__all__ = ["PopulationSpec"]
