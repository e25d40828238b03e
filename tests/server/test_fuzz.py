"""Schemathesis against the live ASGI app (``create_app``): every operation of the OpenAPI
document, with inputs generated from it (valid and invalid), never gets a 5xx, and every answer
(status, content type, headers, body) is one the document declares; invalid inputs are refused.

Two runs per operation: without credentials (ids and tokens as generated), and with them (the
path names real studies, enrolling, running or cancelled, a real participant, the participant's
token and the admin key), so that the requests get past authentication into the services.

Not checked: ``positive_data_acceptance`` (a request valid for the schema must be accepted). The
wire models refuse some schema-valid bodies on purpose, with a 422 ``invalid_request``: rules
across fields that JSON Schema does not express here (give exactly one of ``participants`` and
``epsilons``; of ``tokens`` and ``blocks``; a payload's ``kind`` that a default fills in the
schema). Bounded: a few examples per operation (``EXAMPLES``), about 30 s on one core.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, settings
from schemathesis import checks as st_checks
from schemathesis.generation.case import Case

from fedldp.server.runtime.auth import token_for
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app
from fedldp.server.web.routes import MAX_HOLD_S

pytestmark = pytest.mark.fuzz

ADMIN_KEY = "fuzz-admin-key"
EXAMPLES = 6
CHECKS = [
    st_checks.not_a_server_error,
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_headers_conformance,
    st_checks.response_schema_conformance,
    st_checks.negative_data_rejection,
    st_checks.allow_header_conformance,
    st_checks.unsupported_method,
]
CREDENTIALED_CHECKS = [c for c in CHECKS if c is not st_checks.negative_data_rejection]
"""With real credentials filled in, a case generated to lack a required credential (negative
data) is no longer negative: the answer it gets is right, so that check runs anonymously only."""


@dataclass(frozen=True)
class Seeded:
    """A study in the database before the fuzzing: its id and its participants' tokens."""

    study_id: str
    tokens: list[str]


async def _study(http: httpx.AsyncClient, *, start: bool = False, cancel: bool = False) -> Seeded:
    admin = {"x-admin-key": ADMIN_KEY}
    body = {"protocol": "user-mean", "params": {"samples_per_user": 4}, "seed": 1}
    created = await http.post("/v1/studies", json=body, headers=admin)
    assert created.status_code == 201, created.text
    study_id = created.json()["id"]
    people = {"participants": [{"epsilon": 1.0, "metadata": {"samples": 4}}] * 4}
    enrolled = await http.post(f"/v1/studies/{study_id}/participants/batch", json=people)
    assert enrolled.status_code == 201, enrolled.text
    tokens: list[str] = enrolled.json()["tokens"]
    for action, wanted in (("start", start), ("cancel", cancel)):
        if wanted:
            answer = await http.post(f"/v1/studies/{study_id}/{action}", headers=admin)
            assert answer.status_code == 200, answer.text
    return Seeded(study_id, tokens)


async def _seed(app: FastAPI) -> list[Seeded]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://fuzz.test") as http:
        return [await _study(http), await _study(http, start=True), await _study(http, cancel=True)]


# The schema is loaded when the module is collected, so the app exists from then on (on a
# database in its own folder, removed after the module's tests).
_FOLDER = Path(tempfile.mkdtemp(prefix="fedldp-fuzz-"))
APP = create_app(
    Settings(database_url=f"sqlite:///{_FOLDER}/fuzz.db", admin_key=ADMIN_KEY), sweeper=False
)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def seeded() -> Iterator[list[Seeded]]:
    """The studies the credentialed run points its requests at; the folder goes afterwards."""
    APP.state.seeded = asyncio.run(_seed(APP))
    yield APP.state.seeded
    APP.state.ctx.db.dispose()
    shutil.rmtree(_FOLDER, ignore_errors=True)


_turns = itertools.count()


def _with_credentials(case: Case[Any], seeded: list[Seeded]) -> dict[str, str]:
    """Point ``case`` at a real study (each in turn) and participant; the headers to send."""
    study = seeded[next(_turns) % len(seeded)]
    params = case.path_parameters if case.path_parameters is not None else {}
    if "study_id" in params:
        params["study_id"] = study.study_id
    if "participant_id" in params:
        params["participant_id"] = 0
    if "index" in params:
        params["index"] = 0
    return {"x-admin-key": ADMIN_KEY, "authorization": f"Bearer {study.tokens[0]}"}


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@schema.parametrize()
@FUZZ
def test_anonymous_requests_get_no_5xx_and_documented_answers(case: Case[Any]) -> None:
    case.call_and_validate(checks=CHECKS)


@schema.parametrize()
@FUZZ
def test_credentialed_requests_get_no_5xx_and_documented_answers(case: Case[Any]) -> None:
    headers = _with_credentials(case, APP.state.seeded)
    # a task request may be held up to MAX_HOLD_S (then answered "wait"): read for longer
    response = case.call_and_validate(
        headers=headers, checks=CREDENTIALED_CHECKS, timeout=MAX_HOLD_S + 10
    )
    if case.path_parameters and "study_id" in case.path_parameters:
        assert response.status_code != 404 or response.json()["code"] != "unknown_study"


OUT_OF_RANGE = [2**31, 2**63 - 1, 2**63, 2**64, -1, -(2**63) - 1]


def _integer(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "integer" or any(map(_integer, schema.get("anyOf", [])))


INTEGER_PARAMETERS = [
    (method.upper(), path, parameter["in"], parameter["name"])
    for path, operations in APP.openapi()["paths"].items()
    for method, operation in operations.items()
    for parameter in operation.get("parameters", [])
    if parameter["in"] in ("path", "query", "header") and _integer(parameter["schema"])
]


@pytest.mark.parametrize(("method", "path", "where", "name"), INTEGER_PARAMETERS)
@pytest.mark.parametrize("value", OUT_OF_RANGE)
def test_out_of_range_integer_parameters_get_a_documented_422(
    method: str, path: str, where: str, name: str, value: int, seeded: list[Seeded]
) -> None:
    study = seeded[2] if path.endswith("/events") else seeded[1]  # ended: its stream ends
    values: dict[str, Any] = {
        "study_id": study.study_id,
        "participant_id": 0,
        "index": 0,
        "campaign_id": "any",  # the integer is refused before the campaign is looked up
        "device": "d0",
    }
    parts: dict[str, dict[str, Any]] = {"path": {}, "query": {}, "header": {}}
    parts[where][name] = str(value) if where == "header" else value
    values |= parts["path"]
    secret = APP.state.ctx.study_secret(study.study_id)
    token = token_for(secret, study.study_id, values["participant_id"])
    operation = schema.find_operation_by_path(method, path)
    assert operation is not None
    case = schema.make_case(
        operation=operation,
        path_parameters={k: v for k, v in values.items() if "{" + k + "}" in path},
        query=parts["query"] or None,
        # with the admin key: an admin route's integers are checked past it
        headers={**parts["header"], "authorization": f"Bearer {token}", "x-admin-key": ADMIN_KEY},
    )
    response = case.call_and_validate(
        checks=[c for c in CREDENTIALED_CHECKS if c is not st_checks.unsupported_method]
    )
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_request"
