"""Objects a law entry point must not name (tests/client/population/test_laws.py)."""

from __future__ import annotations

from fedldp.client.population.api import Distribution


class NotALaw:
    """An object a law entry point must not name."""


class Unfinished(Distribution):
    """A law that implements nothing (abstract)."""

    dimension = None
