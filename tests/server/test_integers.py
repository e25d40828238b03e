"""Every integer the API reads is range-checked before it reaches the database: an out-of-range
value in a path, query, header or body field gets a 4xx with a stable code, never a 500.

The integers are found in the app's OpenAPI document (parameters, and request body schemas
followed through their references), so a new integer parameter or field is covered without
touching this file. Issue 23: ``Last-Event-ID: 9223372036854775808`` (or ``?after=``) was a 500
(``OverflowError``) on SQLite, and any event number from 2^31 on was one on PostgreSQL, whose
event, id and round columns are 32-bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedldp.protocol.core.wire import MAX_ID, ErrorBody
from fedldp.server.runtime.auth import token_for
from tests.server.helpers import app_context

SPECIAL = [2**31, 2**32, 2**63 - 1, 2**63, 2**64, 10**30, -1, -(2**31) - 1, -(2**63) - 1]
"""The values every integer gets (beside drawn ones): beyond 32 bits, 64 bits, negative."""
OUT_OF_RANGE = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(min_value=MAX_ID + 1),
    st.integers(max_value=-1),
    st.integers(min_value=20, max_value=400).map(lambda digits: 10**digits),
)

Location = tuple[str | int, ...]
"""Where an integer lies in a body: keys, 0 for a list's item, "*" for any key of a mapping."""


@dataclass(frozen=True)
class Parameter:
    method: str
    path: str
    where: str  # "path", "query" or "header"
    name: str
    schema: dict[str, Any]


@dataclass(frozen=True)
class BodyField:
    method: str
    path: str
    location: Location
    schema: dict[str, Any]


def _integers(
    schema: dict[str, Any],
    doc: dict[str, Any],
    at: Location = (),
    seen: frozenset[str] = frozenset(),
) -> Iterator[tuple[Location, dict[str, Any]]]:
    """The integer schemas within ``schema``, each with its location."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            yield from _integers(doc["components"]["schemas"][name], doc, at, seen | {name})
        return
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            yield from _integers(option, doc, at, seen)
    if schema.get("type") == "integer":
        yield at, schema
    for name, inner in schema.get("properties", {}).items():
        yield from _integers(inner, doc, (*at, name), seen)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        yield from _integers(extra, doc, (*at, "*"), seen)
    if isinstance(schema.get("items"), dict):
        yield from _integers(schema["items"], doc, (*at, 0), seen)


def integer_parameters(app: FastAPI) -> list[Parameter]:
    doc = app.openapi()
    return [
        Parameter(method, path, p["in"], p["name"], schema)
        for path, operations in doc["paths"].items()
        for method, op in operations.items()
        for p in op.get("parameters", [])
        for _, schema in _integers(p["schema"], doc)
    ]


def integer_fields(app: FastAPI) -> list[BodyField]:
    doc = app.openapi()
    return [
        BodyField(method, path, at, schema)
        for path, operations in doc["paths"].items()
        for method, op in operations.items()
        if "requestBody" in op
        for at, schema in _integers(op["requestBody"]["content"]["application/json"]["schema"], doc)
    ]


# --------------------------------------------------------------------------- the studies


@dataclass
class World:
    http: httpx.AsyncClient
    enrolling: str
    running: str
    ended: str
    secret: dict[str, str]
    campaign: str = ""  # a campaign whose occurrence 0 is open

    def study_for(self, path: str) -> str:
        """The study a request of ``path`` goes to: one that gets it past its phase checks."""
        if path.endswith(("/participants", "/participants/batch", "/leases")):
            return self.enrolling
        if path.endswith("/events"):
            return self.ended  # its stream ends after its stored events
        return self.running

    def token(self, study_id: str, participant_id: str) -> dict[str, str]:
        """The participant's real token: its request gets past authentication to the database."""
        token = token_for(self.secret[study_id], study_id, int(participant_id))
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def world(app: FastAPI, client: httpx.AsyncClient) -> World:
    async def study(*actions: str) -> str:
        body = {"protocol": "hetero-mean-rr", "params": {}, "seed": 1}
        study_id: str = (await client.post("/v1/studies", json=body)).json()["id"]
        url = f"/v1/studies/{study_id}"
        enrolled = await client.post(f"{url}/participants/batch", json={"epsilons": [1.0, 1.0]})
        assert enrolled.status_code == 201, enrolled.text
        for action in actions:
            assert (await client.post(f"{url}/{action}")).status_code == 200
        return study_id

    ids = await study(), await study("start"), await study("cancel")
    ctx = app_context(app)
    campaign = (await client.post("/v1/campaigns", json=BASES["/v1/campaigns"])).json()["id"]
    assert (await client.post(f"/v1/campaigns/{campaign}/occurrences/next")).status_code == 200
    secret = {s: ctx.study_secret(s) or "" for s in ids}
    return World(client, *ids, secret=secret, campaign=campaign)


def _refused(response: httpx.Response, what: str) -> None:
    assert 400 <= response.status_code < 500, (what, response.status_code, response.text)
    ErrorBody.model_validate_json(response.content)  # a stable code and a detail


def _in_range(schema: dict[str, Any], value: int) -> bool:
    low = schema.get("minimum", schema.get("exclusiveMinimum", -(2**63)))
    high = schema.get("maximum", schema.get("exclusiveMaximum", 2**63 - 1))
    return bool(low <= value <= high)


async def ask(world: World, parameter: Parameter, value: int) -> httpx.Response:
    """The request of ``parameter``'s operation with ``value`` for it (its other parameters
    real: a study, participant 0 and its token)."""
    study_id = world.study_for(parameter.path)
    path_values = {
        "study_id": study_id,
        "participant_id": "0",
        "index": "0",
        "campaign_id": world.campaign,
        "device": "d0",
    }
    query: dict[str, str] = {}
    headers: dict[str, str] = {}
    if parameter.where == "path":
        path_values[parameter.name] = str(value)
    elif parameter.where == "query":
        query[parameter.name] = str(value)
    else:
        headers[parameter.name] = str(value)
    headers |= world.token(study_id, path_values["participant_id"])
    url = parameter.path.format(**path_values)
    # a route with a body gets a valid one
    body = BASES.get(parameter.path, NO_INTEGER_BODIES.get(parameter.path))
    return await world.http.request(parameter.method, url, params=query, headers=headers, json=body)


# --------------------------------------------------------------------------- parameters


def test_the_document_lists_every_integer_the_routes_read(app: FastAPI) -> None:
    found = {(p.where, p.name) for p in integer_parameters(app)}
    assert {
        ("path", "participant_id"),
        ("path", "index"),
        ("query", "after"),
        ("header", "last-event-id"),
        ("query", "bins"),
    } <= found
    for parameter in integer_parameters(app):  # each bounded on both sides
        assert {"minimum", "maximum"} <= set(parameter.schema), parameter
    fields = {(f.path, f.location) for f in integer_fields(app)}
    assert ("/v1/studies/{study_id}/reports", ("round",)) in fields
    assert ("/v1/studies/{study_id}/participants/batch", ("participant_ids", 0)) in fields


async def test_every_integer_parameter_refuses_the_special_values(
    world: World, app: FastAPI
) -> None:
    for parameter in integer_parameters(app):
        for value in SPECIAL:
            response = await ask(world, parameter, value)
            _refused(response, f"{parameter} = {value}")
            assert response.json()["code"] == "invalid_request"
        for edge in (parameter.schema["minimum"], parameter.schema["maximum"]):
            response = await ask(world, parameter, edge)  # in range: answered, not refused as such
            assert response.status_code < 500, (parameter, edge, response.text)
            assert response.status_code != 422, (parameter, edge, response.text)


@given(data=st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
async def test_any_out_of_range_integer_parameter_is_a_422(
    world: World, app: FastAPI, data: st.DataObject
) -> None:
    parameter = data.draw(st.sampled_from(integer_parameters(app)))
    value = data.draw(OUT_OF_RANGE.filter(lambda v: not _in_range(parameter.schema, v)))
    response = await ask(world, parameter, value)
    _refused(response, f"{parameter} = {value}")
    assert response.json()["code"] == "invalid_request"


# --------------------------------------------------------------------------- body fields


BASES: dict[str, dict[str, Any]] = {
    "/v1/studies": {"protocol": "hetero-mean-rr", "params": {}, "seed": 1},
    "/v1/studies/{study_id}/leases": {"size": 1},
    "/v1/campaigns": {"protocol": "hetero-mean-rr", "seed": 1, "every": 1.0, "times": 2},
    "/v1/campaigns/{campaign_id}/occurrences/{index}/devices": {
        "devices": [{"device": "d0", "epsilon": 1.0}]
    },
    "/v1/studies/{study_id}/participants": {"epsilon": 1.0},
    "/v1/studies/{study_id}/participants/batch": {"epsilons": [1.0]},
    "/v1/studies/{study_id}/tasks": {"participant_ids": [0]},
    "/v1/studies/{study_id}/reports": {
        "participant_id": 0,
        "round": 0,
        "payload": {"kind": "bit", "bit": 1},
    },
    "/v1/studies/{study_id}/reports/batch": {
        "round": 0,
        "kind": "bit",
        "participant_ids": [0],
        "payloads": [[1.0]],
    },
}
"""A valid body of each route whose body holds integers (a field under test is put in)."""
NO_INTEGER_BODIES: dict[str, dict[str, Any]] = {
    "/v1/campaigns/{campaign_id}/occurrences/{index}/truth": {"truth": 0.5},
}
"""A valid body of each route with an integer path parameter and a body without integers (PUT:
not sent to the ``BASES`` routes' POST)."""


def _put(node: Any, at: Location, value: int) -> Any:
    """A copy of ``node`` with ``value`` at ``at`` (a mapping's any key: "n"; missing lists
    and mappings made on the way)."""
    if not at:
        return value
    step, rest = at[0], at[1:]
    fresh: Any = [] if rest[:1] == (0,) else {}
    if step == 0:
        return [_put(node[0] if isinstance(node, list) and node else fresh, rest, value)]
    key = "n" if step == "*" else step
    out = dict(node) if isinstance(node, dict) else {}
    out[key] = _put(out.get(key, fresh), rest, value)
    return out


async def send(world: World, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST ``body`` to ``path`` (of its study), as participant 0 (its token as bearer, and in
    the body of a batch)."""
    study_id = world.study_for(path)
    headers = world.token(study_id, "0")
    if path.endswith(("/tasks", "/reports/batch")):
        body = {"tokens": [headers["Authorization"].removeprefix("Bearer ")], **body}
    url = path.format(study_id=study_id, campaign_id=world.campaign, index=0)
    return await world.http.post(url, json=body, headers=headers)


async def post(world: World, field: BodyField, value: int) -> httpx.Response:
    return await send(world, field.path, _put(BASES[field.path], field.location, value))


def test_every_integer_body_field_has_a_valid_body_to_go_in(app: FastAPI) -> None:
    assert {f.path for f in integer_fields(app)} <= set(BASES)


async def test_the_bodies_the_fields_go_in_are_accepted(world: World, app: FastAPI) -> None:
    """So that a refusal of a body with an out-of-range integer is the integer's."""
    for path in sorted(BASES, key=lambda p: p.endswith("/leases")):  # enrollment first
        response = await send(world, path, BASES[path])
        assert response.status_code < 300, (path, response.text)


async def test_every_integer_body_field_refuses_the_special_values(
    world: World, app: FastAPI
) -> None:
    for field in integer_fields(app):
        for value in SPECIAL:
            if not _in_range(field.schema, value):
                _refused(await post(world, field, value), f"{field} = {value}")


@given(data=st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
async def test_any_out_of_range_integer_body_field_is_a_4xx(
    world: World, app: FastAPI, data: st.DataObject
) -> None:
    field = data.draw(st.sampled_from(integer_fields(app)))
    value = data.draw(OUT_OF_RANGE.filter(lambda v: not _in_range(field.schema, v)))
    _refused(await post(world, field, value), f"{field} = {value}")
