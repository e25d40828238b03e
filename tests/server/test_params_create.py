"""Parameters are checked at create (protocol/core/base/bounds.py and each model's validators):
POST /v1/studies refuses, with 422 ``invalid_params``, every value beyond a declared bound and
every parameter set no population can plan; accepted extremes run to a finite result through
the server; GET /v1/protocols shows every numeric parameter's range.

The in-process property test (tests/protocol/test_params_bounds.py) runs the accepted extremes
of every protocol on the simulator; here the refusals go through the create route, and a few
accepted extremes through a swarm.
"""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from fedldp.client.population.build import PopulationSpec
from fedldp.client.swarm.run import run_swarm
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.wire import ProtocolList
from tests.protocol.test_params_bounds import _base, _variants
from tests.server.helpers import create_study, expect_error

URL = "http://fedldp.test"


async def _refused(client: httpx.AsyncClient, protocol: str, params: dict[str, Any]) -> str:
    """The detail of the create's ``invalid_params`` refusal; nothing is stored."""
    body = {"protocol": protocol, "params": params, "seed": 1}
    error = expect_error(await client.post("/v1/studies", json=body), 422, "invalid_params")
    return error.detail


async def test_the_issue_cases_are_refused_at_create(client: httpx.AsyncClient) -> None:
    """A data range whose width overflows (the first round's close raised OverflowError) and a
    Duchi dimension that would allocate 10^12 coordinates."""
    detail = await _refused(client, "hetero-mean-laplace", {"lo": -1e307, "hi": 1e307})
    assert "lo" in detail
    assert "hi" in detail
    assert "dimension" in await _refused(client, "hetero-mean-duchi", {"dimension": 10**12})
    assert (await client.get("/v1/studies")).json()["studies"] == []


@pytest.mark.parametrize(
    ("protocol", "params", "field"),
    [  # refusals no bound of a single field makes: what no population can plan
        ("hist-ldp", {"dimension": 5, "label_low": 0, "label_high": 1, "bins": 6}, "bins"),
        (
            "histoftree",
            {"dimension": 5, "label_low": 0, "label_high": 1, "histogram_dims": 6},
            "histogram_dims",
        ),
        (
            "histoftree",
            {"dimension": 5, "label_low": 0, "label_high": 1, "histogram_dims": 4, "bins": 9},
            "cells",
        ),
        ("user-regress", {"samples_per_user": 4, "dimension": 2, "bins_per_axis": 128}, "cells"),
        (
            "user-sgd",
            {"samples_per_user": 4, "dimension": 2, "smoothness": 1.0, "strong_convexity": 2.0},
            "strong_convexity",
        ),
        (
            "user-sgd",
            {"samples_per_user": 4, "dimension": 2, "smoothness": 1e3, "strong_convexity": 1.0},
            "rounds",
        ),
        ("hetero-mean-laplace", {"lo": 1.0, "hi": 1.0 + 1e-60}, "hi > lo"),
        ("hist-ldp", {"dimension": 5, "label_low": 1e50, "label_high": -1e50}, "label_high"),
    ],
)
async def test_parameters_no_population_can_plan_are_refused_at_create(
    client: httpx.AsyncClient, protocol: str, params: dict[str, Any], field: str
) -> None:
    assert field in await _refused(client, protocol, params)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
async def test_values_beyond_the_declared_bounds_are_refused_at_create(
    client: httpx.AsyncClient, name: str
) -> None:
    """For each numeric field: 1e308, -1e308, 5e-324, ... and the nearest value beyond each of
    its bounds, whichever the schema excludes; the detail names the field."""
    protocol = CATALOGUE[name]
    base = _base(protocol)
    properties = protocol.params_model.model_json_schema()["properties"]
    tried = 0
    for field, prop in properties.items():
        for value in _variants(prop)[1]:
            params = {**base, field: value}
            tried += 1
            if isinstance(value, int) and not -(2**63) <= value < 2**63:
                # the body reader refuses an integer beyond 64 bits before params are parsed
                body = {"protocol": name, "params": params, "seed": 1}
                expect_error(await client.post("/v1/studies", json=body), 422, "invalid_request")
                continue
            assert field in await _refused(client, name, params), (field, value)
    assert tried  # every protocol has a numeric parameter


async def test_the_catalogue_shows_each_parameter_range(client: httpx.AsyncClient) -> None:
    catalogue = ProtocolList.model_validate_json((await client.get("/v1/protocols")).content)
    laplace = next(p for p in catalogue.protocols if p.name == "hetero-mean-laplace")
    assert laplace.parameters["properties"]["hi"]["maximum"] == 1e50
    for entry in catalogue.protocols:
        for field, prop in entry.parameters["properties"].items():
            for option in prop.get("anyOf", [prop]):
                if option.get("type") in ("number", "integer"):
                    assert {"minimum", "exclusiveMinimum"} & option.keys(), (entry.name, field)
                    assert {"maximum", "exclusiveMaximum"} & option.keys(), (entry.name, field)


@pytest.mark.parametrize(
    ("protocol", "params", "population"),
    [
        (
            "hetero-mean-laplace",
            {"lo": -1e50, "hi": 1e50, "eps_cap": 1e-6, "beta": 1e-12},
            {"distribution": "two-point", "mean": 0.3},
        ),
        (
            "user-mean",
            {"samples_per_user": 4, "bound": 1e-50, "level": 1 - 1e-12},
            {"distribution": "two-point", "mean": 0.3, "samples": 4},
        ),
        (
            "hetero-mean-duchi",
            {"dimension": 3, "radius": 1e50},
            {"distribution": "two-point", "mean": 0.2, "dimension": 3},
        ),
        (
            "user-mean-linf",
            {"samples_per_user": 4, "dimension": 2, "bound": 1e50, "reference_epsilon": 1e3},
            {"distribution": "two-point", "mean": 0.2, "dimension": 2, "samples": 4},
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
async def test_accepted_extremes_run_to_a_result_through_the_server(
    app: FastAPI, protocol: str, params: dict[str, Any], population: dict[str, Any]
) -> None:
    run = await run_swarm(
        URL,
        population=PopulationSpec(users=40, epsilon=1.0, **population),
        seed=5,
        create=(protocol, params),
        batch=40,
        progress=False,
        transport=httpx.ASGITransport(app=app),
    )
    result = run.result
    assert (result.phase, result.failure_reason) == ("finished", None)
    estimate = result.estimate if isinstance(result.estimate, list) else [result.estimate]
    assert all(v is not None and math.isfinite(v) for v in estimate), result.estimate
    assert result.error_bar is None or math.isfinite(result.error_bar.half_width)


async def test_the_bounds_themselves_are_accepted(client: httpx.AsyncClient) -> None:
    """Each bound is inclusive where the schema says so: a create at it succeeds."""
    await create_study(client, "hetero-mean-laplace", {"lo": -1e50, "hi": 1e50})
    await create_study(client, "user-mean", {"samples_per_user": 1, "bound": 1e-50})
    await create_study(client, "central-huber", {"delta": 1e-50, "huber_scale": 1e-9})
    await create_study(client, "user-mean-l2", {"samples_per_user": 1, "dimension": 2,
                                                "kashin_constant": 0.5})  # fmt: skip
