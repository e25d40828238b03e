"""fedldp: simulate federated local-differential-privacy deployments.

The package's three parts live in ``fedldp.protocol`` (pure math and the wire schema),
``fedldp.client`` (populations, the in-process simulator, the HTTP swarm, the command line) and
``fedldp.server`` (the FastAPI aggregation server). A script needs only these names:

* ``get_protocol(name)`` and ``CATALOGUE``: the protocols by name, built-in and installed plugins'
  (``fedldp protocols`` lists them; a plugin is written against ``fedldp.protocol.api``);
* ``PopulationSpec`` and ``build_population(spec, seed)``: who the simulated users are;
* ``simulate(protocol, params, population, seed)``: one run in process, vectorised;
* ``run_swarm`` (a coroutine) and ``run_swarm_sync``: the same population against a server over
  HTTP, each user privatizing on its side;
* ``ApiClient``: the typed async client of every endpoint.

They are imported on first use, so ``import fedldp`` stays cheap and ``fedldp.server`` never loads
the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedldp.client.api.client import ApiClient
    from fedldp.client.population.build import build_population
    from fedldp.client.population.spec import PopulationSpec
    from fedldp.client.simulate import simulate
    from fedldp.client.swarm.run import run_swarm, run_swarm_sync
    from fedldp.protocol.catalogue import CATALOGUE, get_protocol

__all__ = [
    "CATALOGUE",
    "ApiClient",
    "PopulationSpec",
    "build_population",
    "get_protocol",
    "run_swarm",
    "run_swarm_sync",
    "simulate",
]

_HOMES = {
    "ApiClient": "fedldp.client.api.client",
    "run_swarm": "fedldp.client.swarm.run",
    "run_swarm_sync": "fedldp.client.swarm.run",
    "build_population": "fedldp.client.population.build",
    "PopulationSpec": "fedldp.client.population.spec",
    "simulate": "fedldp.client.simulate",
    "CATALOGUE": "fedldp.protocol.catalogue",
    "get_protocol": "fedldp.protocol.catalogue",
}


def __getattr__(name: str) -> Any:
    """Import a public name from its home module on first use (PEP 562)."""
    try:
        home = _HOMES[name]
    except KeyError:
        raise AttributeError(f"module 'fedldp' has no attribute {name!r}") from None
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
