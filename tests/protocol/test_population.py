"""The minimum population of every catalogue protocol (``Protocol.min_participants``, shown by
``fedldp protocols`` and ``GET /v1/protocols``): at the minimum the plan succeeds, one below it
refuses, and the required parameters filled in for the catalogue (``population_probe``) do not
change the answer (or, for ``samples_per_user``, are its least favourable value)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.protocol import Protocol

EPSILONS = (0.5, 1.0, 4.0)

DEPENDS_ON = {  # the protocols with no single minimum, and the parameter it depends on
    "user-frequency": ["domain_size"],
    "user-mean-l1": ["dimension"],
    "user-mean-l2": ["dimension"],
    "user-mean-linf": ["dimension"],
    "user-sgd": ["dimension"],
}

OTHER_VALUES: dict[str, list[dict[str, Any]]] = {  # other values of each probed parameter
    "samples_per_user": [{"samples_per_user": 64}],  # > 16: as demanding as the largest
    "dimension": [{"dimension": 3}],
    "domain_size": [{"domain_size": 7}],
    "label_low": [{"label_low": -2.0, "label_high": 3.0}],
    "label_high": [],
}

GIVEN = {"samples_per_user": 64}  # with the dimension or domain size, for DEPENDS_ON


def _plans(protocol: Protocol[Any], params: Any, n: int, epsilon: float) -> bool:
    try:
        metadata = protocol.population_metadata(params, n)
        protocol.plan(params, np.full(n, epsilon), metadata, 11)
    except ValueError:
        return False
    return True


def _exact(protocol: Protocol[Any], params: Any, epsilon: float) -> int:
    """The minimum with ``params``, checked from both sides against the plan itself."""
    n = protocol.min_participants(epsilon, params)
    assert n is not None
    assert _plans(protocol, params, n, epsilon), f"{protocol.name} refuses its minimum {n}"
    if n > 1:
        assert not _plans(protocol, params, n - 1, epsilon), f"{protocol.name} plans {n - 1}"
    return n


@pytest.mark.parametrize("name", sorted(CATALOGUE))
@pytest.mark.parametrize("epsilon", EPSILONS)
def test_every_protocol_states_its_minimum_or_what_it_depends_on(name: str, epsilon: float) -> None:
    protocol = CATALOGUE[name]
    population = protocol.population(epsilon)
    assert population["depends_on"] == DEPENDS_ON.get(name, [])
    assert population["rule"]
    if name in DEPENDS_ON:
        assert population["min_participants"] is None
        for dimension in (1, 2):  # the minimum grows with it: no single answer
            given = {**GIVEN, DEPENDS_ON[name][0]: dimension + 1}
            _exact(protocol, protocol.parse_params(given), epsilon)
        return
    probe = protocol.parse_params(protocol.population_probe)
    n = population["min_participants"]
    assert n is not None
    assert n == _exact(protocol, probe, epsilon)


@pytest.mark.parametrize(
    "name", sorted(n for n, p in CATALOGUE.items() if p.population_probe and n not in DEPENDS_ON)
)
def test_the_probed_parameters_do_not_change_the_minimum(name: str) -> None:
    """The catalogue fills in required parameters it claims the minimum does not depend on:
    other values give the same minimum (samples_per_user: any value above 16 does, and fewer
    samples never need more users)."""
    protocol = CATALOGUE[name]
    for epsilon in EPSILONS:
        n = protocol.min_participants(epsilon)
        assert n is not None
        for key in protocol.population_probe:
            for change in OTHER_VALUES[key]:
                params = protocol.parse_params({**protocol.population_probe, **change})
                assert _exact(protocol, params, epsilon) == n, (name, change, epsilon)
        if "samples_per_user" in protocol.population_probe:
            few = protocol.parse_params({**protocol.population_probe, "samples_per_user": 1})
            assert _exact(protocol, few, epsilon) <= n


def test_user_level_minima_at_epsilon_one() -> None:
    """user-mean's closed form 2·⌈300/min(ε², 1)⌉ (§1.5) and user-classify's plan search (the
    value docs/clients.md quotes)."""
    got = {n: CATALOGUE[n].min_participants(1.0) for n in ("user-mean", "user-classify")}
    assert got == {"user-mean": 600, "user-classify": 1200}
