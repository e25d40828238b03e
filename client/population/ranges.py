"""A protocol's declared data range against a population's values (``Protocol.data_range``,
docs/extending.md): a protocol that clips values outside its range estimates the mean of the
clipped values, which is not the population's mean when the law reaches outside; the simulation,
the swarm, the experiments and the campaigns refuse such a pairing before running it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedldp.client.population.build import AnyPopulation
from fedldp.protocol.core.base.protocol import Params, Protocol

__all__ = ["check_data_range", "law_text"]


def law_text(population: AnyPopulation) -> str:
    """The population's law as a user wrote it: ``two-point(bound=1, mu=-0.3)``, ``csv FILE``."""
    described = population.describe()
    if described.get("source") == "csv":
        return f"csv {described.get('csv')}"
    law = described.get("distribution")
    if isinstance(law, Mapping):
        args = ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in law.items()
            if k != "name"
        )
        return f"{law.get('name')}({args})"
    return str(law)


def check_data_range(protocol: Protocol[Any], params: Params, population: AnyPopulation) -> None:
    """ValueError when the protocol declares a data range (``Protocol.data_range``) that the
    population's values can leave: its estimate would then be the mean of clipped values, not
    the population's mean. The message names the range and the law."""
    declared = protocol.data_range(params)
    held = getattr(population, "value_range", None)
    if declared is None or held is None:
        return
    lo, hi = declared
    if lo <= held[0] and held[1] <= hi:
        return
    raise ValueError(
        f"{protocol.name} estimates the mean of values in [{lo:g}, {hi:g}] and clips the others "
        f"into it, but the population's law {law_text(population)} produces values in "
        f"[{held[0]:g}, {held[1]:g}]: its estimate would not be the population's mean. Give a "
        f"population inside [{lo:g}, {hi:g}], or parameters whose range holds the law's"
    )
