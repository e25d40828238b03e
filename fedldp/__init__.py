"""fedldp: simulate federated local-differential-privacy deployments.

The package's three parts live in ``fedldp.protocol`` (pure math and the wire schema),
``fedldp.client`` (populations, the in-process simulator, the HTTP swarm, the command line) and
``fedldp.server`` (the FastAPI aggregation server). A script needs only these names:

* ``get_protocol(name)`` and ``CATALOGUE``: the protocols by name, built-in and installed plugins'
  (``fedldp protocols`` lists them; a plugin is written against ``fedldp.protocol.api``);
* ``PopulationSpec`` and ``build_population(spec, seed)``: who the simulated users are;
* ``simulate(protocol, params, population, seed)``: one run in process, vectorised;
  ``fill_from_population(protocol, params, population)``: the parameters a protocol takes from
  the population (samples per user, ranges, dimension) added to ``params``;
* ``Behaviour``: users who drop out, answer late, join late or attack (``simulate`` and
  ``run_swarm`` take ``behaviour=``);
* ``run_swarm`` (a coroutine) and ``run_swarm_sync``: the same population against a server over
  HTTP, each user privatizing on its side;
* ``ApiClient``: the typed async client of every endpoint; ``StudyCreate``: the body of
  ``ApiClient.create_study``; ``derive_seeds(seed)``: the ``(study_seed, population_seed)`` a
  swarm and ``simulate`` derive from one run seed (a study created with the first is the one
  ``simulate`` with the same seed reproduces);
* ``local_server()``: a server on this machine for a notebook, stopped when the kernel exits;
* ``fedldp.experiments``: ``run`` an experiment file and ``load`` its trials.

Results are typed objects with ``to_dict()`` (JSON-ready) and ``to_frame()`` (a pandas DataFrame,
the ``notebook`` extra): ``simulate``'s, ``run_swarm``'s and the ``ApiClient``'s study, round and
result views.

>>> import fedldp
>>> spec = fedldp.PopulationSpec(users=1000, samples=8, distribution="two-point", mean=0.3)
>>> mean = fedldp.get_protocol("user-mean")
>>> run = fedldp.simulate(
...     mean, mean.parse_params({"samples_per_user": 8}), fedldp.build_population(spec, 1), 1
... )
>>> print(*sorted(run.to_dict())[:4])
diagnostics elapsed_s epsilon_spent error

They are imported on first use, so ``import fedldp`` stays cheap and ``fedldp.server`` never loads
the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedldp.client.api.client import ApiClient
    from fedldp.client.behaviour import Behaviour
    from fedldp.client.population.build import build_population
    from fedldp.client.population.spec import PopulationSpec
    from fedldp.client.seeds import derive_seeds
    from fedldp.client.simulate import fill_from_population, simulate
    from fedldp.client.swarm.local import LocalServer, local_server
    from fedldp.client.swarm.run import run_swarm, run_swarm_sync
    from fedldp.protocol.catalogue import CATALOGUE, get_protocol
    from fedldp.protocol.core.wire import StudyCreate

__all__ = [
    "CATALOGUE",
    "ApiClient",
    "Behaviour",
    "LocalServer",
    "PopulationSpec",
    "StudyCreate",
    "build_population",
    "derive_seeds",
    "experiments",
    "fill_from_population",
    "get_protocol",
    "local_server",
    "run_swarm",
    "run_swarm_sync",
    "simulate",
]

_HOMES = {
    "ApiClient": "fedldp.client.api.client",
    "Behaviour": "fedldp.client.behaviour",
    "StudyCreate": "fedldp.protocol.core.wire",
    "derive_seeds": "fedldp.client.seeds",
    "fill_from_population": "fedldp.client.simulate",
    "LocalServer": "fedldp.client.swarm.local",
    "local_server": "fedldp.client.swarm.local",
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
    if name == "experiments":  # a module: ``fedldp.experiments.load`` without importing it
        return importlib.import_module("fedldp.experiments")
    try:
        home = _HOMES[name]
    except KeyError:
        raise AttributeError(f"module 'fedldp' has no attribute {name!r}") from None
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
