"""Protocol parameters are bounded (protocol/core/base/bounds.py and each model's validators):
every catalogue protocol, given extreme parameters, refuses them when they are validated (as the
server validates them at create: strict JSON) or, when it accepts them, some population plans
them and a study on such a population runs to a finite result.

Each numeric field is tried at extremes JSON can carry (±1e308, ±1e-308, 5e-324, 0, -1, huge
integers), at its declared bounds and at the nearest values outside them; booleans, literals
and ``null`` take each of their values, so cross-field rules (heavy tails, ranges, grids) are
reached too. pytest runs with warnings as errors: an overflow inside a run fails the test.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fedldp.client.population.build import AnyPopulation, PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.protocol import Params, Protocol
from fedldp.protocol.core.base.records import jsonable

SPECS: dict[str, dict[str, Any]] = {  # the population laws by data kind (PopulationSpec fields)
    "scalar": {"distribution": "two-point", "mean": 0.3},
    "vector": {"distribution": "two-point", "mean": 0.2, "dimension": 3},
    "categorical": {"distribution": "categorical", "items": 5},
}
LABELED: dict[str, dict[str, Any]] = {  # the labeled law each learning protocol is made for
    "user-sgd": {"distribution": "sparse-linear"},
    "user-classify": {"distribution": "binned-classification"},
    "user-regress": {"distribution": "binned-regression"},
}
SEMI_FEATURE: dict[str, Any] = {"distribution": "sin-sum"}  # histoftree and its baselines

EPSILON = 1.0
"""Every simulated participant's ε, and the ε of the minimum population asked for."""
MAX_USERS = 4000
MAX_ENTRIES = 1_000_000
"""A run is simulated when its population (users × samples × dimension) and its reports
(Σ cohort × payload size over the rounds) are at most this big, and its plan has at most
``MAX_ROUNDS`` rounds; otherwise the plan alone is checked (to keep each example well under a
second: a 4096-cell regression grid takes 5 s)."""
MAX_ROUNDS = 24

EXTREMES: list[Any] = [1e308, -1e308, 1e-308, -1e-308, 5e-324, 0, 0.0, -1, 1, 2**31 - 1, 10**30]
"""Numbers JSON carries (it has no inf or NaN: 1e308 stands for them) that no bound is near."""

KASHIN_REFUSAL = "no Kashin frame"
"""The one refusal at plan that no parameter bound can anticipate: whether a Kashin frame with
constant K exists for d depends on the study seed's draws (K >= 1/2 is necessary, and refused
below; K = 1 passes at d <= 3 and fails at d = 8), and the plan says so whatever the
population. Every other plan refusal of accepted parameters is a test failure."""


def _outside(bound: float | int, direction: float, integer: bool) -> float | int:
    """The nearest value beyond ``bound`` in ``direction`` (±1)."""
    if integer:
        return int(bound) + int(direction)
    return float(np.nextafter(float(bound), direction * math.inf))


def _variants(prop: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """(values to try, values the schema itself excludes) for one property of a model's JSON
    schema: its enum, both booleans, or extremes and the values at and beyond its bounds."""
    options = prop.get("anyOf", [prop])
    values: list[Any] = []
    excluded: list[Any] = []
    for option in options:
        kind = option.get("type")
        if kind == "null":
            values.append(None)
        elif "enum" in option:
            values += list(option["enum"])
        elif kind == "boolean":
            values += [True, False]
        elif kind in ("number", "integer"):
            integer = kind == "integer"
            values += EXTREMES
            for key, direction in (("minimum", -1.0), ("maximum", 1.0)):
                if key in option:
                    beyond = _outside(option[key], direction, integer)
                    values += [option[key], beyond]
                    excluded.append(beyond)
            for key, direction in (("exclusiveMinimum", -1.0), ("exclusiveMaximum", 1.0)):
                if key in option:
                    inside = _outside(option[key], -direction, integer)
                    values += [option[key], inside]
                    excluded.append(option[key])
            low = option.get("minimum", option.get("exclusiveMinimum", -math.inf))
            high = option.get("maximum", option.get("exclusiveMaximum", math.inf))
            excluded += [v for v in EXTREMES if not low <= v <= high]
    return values, excluded


def _spec(protocol: Protocol[Any], params: Params) -> dict[str, Any]:
    spec = _law(protocol)
    ranged = protocol.data_range(params)
    if ranged is not None:  # a law inside the range the protocol clips to (memo-1bitmean's [0, m])
        spec = {"distribution": "uniform", "low": ranged[0], "high": ranged[1]}
    if spec["distribution"] != "sin-sum":
        spec["samples"] = getattr(params, "samples_per_user", 4)
        dimension = getattr(params, "dimension", None)
        if dimension is not None:
            spec["dimension"] = dimension
        if protocol.data_kind == "categorical":
            spec["items"] = getattr(params, "domain_size", 5)
        if getattr(params, "input", None) == "binary":  # RR on ±1 means: one ±1 sample each
            spec["samples"] = 1
    return spec


def _matching_population(
    protocol: Protocol[Any], params: Params, users: int, seed: int
) -> AnyPopulation | None:
    """A population of ``users`` whose data the parameters describe (dimension, items, samples),
    or None when it would be too big to simulate or none matches (sin-sum is 5-dimensional)."""
    spec = _spec(protocol, params)
    size = users * spec.get("samples", 1) * spec.get("dimension", 1)
    if users > MAX_USERS or size > MAX_ENTRIES:
        return None
    population = build_population(PopulationSpec(users=users, epsilon=EPSILON, **spec), seed)
    dimension = getattr(params, "dimension", None)
    if dimension is not None and population.dimension != dimension:
        return None
    return population


def _law(protocol: Protocol[Any]) -> dict[str, Any]:
    return dict(LABELED.get(protocol.name) or SPECS.get(protocol.data_kind) or SEMI_FEATURE)


def _base(protocol: Protocol[Any]) -> dict[str, Any]:
    """Values of the required parameters, from a population of the protocol's own kind."""
    population = build_population(PopulationSpec(users=4, **_law(protocol)), 1)
    filled = fill_from_population(protocol, {}, population)
    fields = protocol.params_model.model_fields
    return {k: v for k, v in filled.items() if fields[k].is_required()}


def _validate(protocol: Protocol[Any], raw: dict[str, Any]) -> Params | None:
    """The parameters as the server validates them at create (strict JSON), None if refused."""
    model: type[Params] = protocol.params_model
    try:
        return model.model_validate_json(json.dumps(raw, allow_nan=False), strict=True)
    except ValidationError:
        return None


def check_accepted(protocol: Protocol[Any], params: Params, seed: int) -> None:
    """Some population plans ``params``; when a population that size is small enough, the study
    runs on it to a finite result."""
    needed = protocol.min_participants(EPSILON, params)
    if needed is None:
        metadata = protocol.population_metadata(params, 64)
        with pytest.raises(ValueError, match=KASHIN_REFUSAL):  # else: no population plans
            protocol.plan(params, np.full(64, EPSILON), metadata, seed)
        return
    population = _matching_population(protocol, params, max(needed, 2), seed)
    if population is None:
        return
    epsilon = np.asarray(population.epsilon, dtype=np.float64)
    plan = protocol.plan(params, epsilon, population.metadata, seed)
    reports = sum(rp.cohort.size * math.prod(rp.payload_shape) for rp in plan.rounds)
    if len(plan.rounds) > MAX_ROUNDS or reports > MAX_ENTRIES / 10:
        return
    result = simulate(protocol, params, population, seed).result
    estimate = np.asarray(result.estimate, dtype=np.float64)
    assert estimate.size
    assert np.all(np.isfinite(estimate)), result.estimate
    if result.error_bar is not None:
        assert math.isfinite(result.error_bar.half_width), result.error_bar
    json.dumps(jsonable(result.diagnostics), allow_nan=False)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_numeric_parameter_declares_both_bounds(name: str) -> None:
    """The catalogue (GET /v1/protocols, ``fedldp protocols --json``'s schema) shows each
    number's range: a minimum and a maximum, inclusive or not, on every numeric field."""
    schema = CATALOGUE[name].describe()["parameters"]
    for field, prop in schema["properties"].items():
        for option in prop.get("anyOf", [prop]):
            if option.get("type") in ("number", "integer"):
                assert "minimum" in option or "exclusiveMinimum" in option, field
                assert "maximum" in option or "exclusiveMaximum" in option, field


@pytest.mark.parametrize("name", sorted(CATALOGUE))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_extreme_parameters_are_refused_or_run(name: str, data: st.DataObject, seed: int) -> None:
    protocol = CATALOGUE[name]
    properties = protocol.params_model.model_json_schema()["properties"]
    chosen = data.draw(
        st.lists(st.sampled_from(sorted(properties)), min_size=1, max_size=3, unique=True),
        label="fields",
    )
    raw = _base(protocol)
    refused_by_schema = False
    for field in chosen:
        values, excluded = _variants(properties[field])
        raw[field] = data.draw(st.sampled_from(values), label=field)
        value = raw[field]
        refused_by_schema |= not isinstance(value, bool) and any(value == v for v in excluded)
    params = _validate(protocol, raw)
    if params is None:
        return
    assert not refused_by_schema, f"a value outside the declared bounds was accepted: {raw}"
    check_accepted(protocol, params, seed)
