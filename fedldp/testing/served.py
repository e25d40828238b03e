"""The kit's checks that go through the server: the same seed gives the same estimate over HTTP
(a real ``python -m fedldp.server`` on a temporary SQLite file, driven by the swarm per user and
in batches) as in process, and the create route refuses parameters out of their declared range
(the app in process, ``httpx.ASGITransport``).

The server runs the protocols its catalogue names: a protocol under test must be the one the
server knows by its name (``CATALOGUE[name]``, same class), else these checks fail saying so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from fedldp.client.swarm.local import LocalServer
from fedldp.client.swarm.run import run_swarm_sync
from fedldp.client.swarm.server_process import sqlite_url
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.core.wire import StudyCreate
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app
from fedldp.testing.local import CheckFailed, Subject, ensure, same_estimate

__all__ = ["KitServer", "bad_params", "check_create", "check_http", "served_by_name"]


class KitServer(LocalServer):
    """A fedldp server for the kit (``fedldp.client.swarm.local.LocalServer``): ``python -m
    fedldp.server`` on a free port and a temporary SQLite database, healthy on entering, stopped
    (and its files removed) on leaving. One serves any number of ``check_protocol`` calls
    (``check_protocol(server=...)``)."""

    def __init__(self) -> None:
        super().__init__(prefix="fedldp-kit-")

    def __enter__(self) -> KitServer:
        super().__enter__()
        return self

    def start(self, timeout: float = 60.0) -> KitServer:
        super().start(timeout)
        return self


def served_by_name(protocol: Protocol[Any]) -> None:
    """CheckFailed unless the server (and the swarm's client step) run this very protocol."""
    known = CATALOGUE.get(protocol.name)
    ensure(
        known is not None and type(known) is type(protocol),
        f"the server and the swarm run the protocol their catalogue names {protocol.name!r}"
        + (
            f", a {type(known).__name__}, not this {type(protocol).__name__}"
            if known is not None
            else ", and it names none"
        )
        + ": register the protocol under its name to check it over HTTP",
    )


def check_http(subject: Subject, server: str, batch: int | None) -> str:
    """The swarm against ``server`` (per user when ``batch`` is None) reaches the simulator's
    estimate to the last digit."""
    served_by_name(subject.protocol)
    run = run_swarm_sync(
        server,
        population=subject.population,
        create=(subject.name, dict(subject.raw_params)),
        batch=batch,
        progress=False,
    )
    ensure(run.result.phase == "finished", f"the study ended {run.result.phase}")
    diff = same_estimate(run.result.estimate, subject.run.result.estimate)
    mode = "per user" if batch is None else f"in batches of {batch}"
    ensure(diff is None, f"over HTTP {mode} the estimate differs from the simulator's: {diff}")
    return f"{mode}: study {run.study_id} equals the simulator's estimate"


# --------------------------------------------------------------------------- create refusals


def _outside(schema: Mapping[str, Any]) -> list[Any]:
    """Values just outside a JSON-schema field's declared range (of every numeric or enum
    alternative the field has)."""
    out: list[Any] = []
    for alternative in schema.get("anyOf", [schema]):
        integer = alternative.get("type") == "integer"
        for key, sign in (("minimum", -1), ("maximum", 1)):
            if key in alternative:
                bound = alternative[key]
                out.append(bound + sign if integer else math.nextafter(bound, sign * math.inf))
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if key in alternative:
                out.append(alternative[key])
        if "enum" in alternative or "const" in alternative:
            out.append("not-one-of-its-values")
    return out


def bad_params(protocol: Protocol[Any], raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``raw`` with one field at a time set just outside its declared range (from the
    parameter model's JSON schema), and with an unknown field."""
    fields = protocol.params_model.model_json_schema().get("properties", {})
    bad = [{**raw, name: value} for name, schema in fields.items() for value in _outside(schema)]
    bad.append({**raw, "no_such_parameter": 1})
    return bad


def _run(coroutine: Any) -> Any:
    """Run a coroutine to the end from synchronous code, even inside a running event loop (a
    thread of its own)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _create_all(
    protocol: str, good: Mapping[str, Any], bad: list[dict[str, Any]], folder: Path
) -> tuple[httpx.Response, list[httpx.Response]]:
    settings = Settings(
        database_url=sqlite_url(folder / "create.db"), admin_key=None, key_dir=folder
    )
    app = create_app(settings, sweeper=False)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://fedldp.kit"
        ) as client:

            async def create(params: Mapping[str, Any]) -> httpx.Response:
                body = StudyCreate(protocol=protocol, params=dict(params), seed=1)
                return await client.post(
                    "/v1/studies", json=body.model_dump(mode="json", exclude_none=True)
                )

            return await create(good), [await create(params) for params in bad]
    finally:
        app.state.ctx.db.dispose()


def check_create(subject: Subject, invalid: list[Mapping[str, Any]]) -> str:
    """The create route accepts the subject's parameters and refuses, with 422
    ``invalid_params``, each declared bound crossed (``bad_params``) and each of ``invalid``."""
    served_by_name(subject.protocol)
    bad = [*bad_params(subject.protocol, subject.raw_params), *map(dict, invalid)]
    with tempfile.TemporaryDirectory(prefix="fedldp-kit-") as folder:
        good, answers = _run(_create_all(subject.name, subject.raw_params, bad, Path(folder)))
    ensure(
        good.status_code == 201,
        f"the create route refuses the kit's parameters: {good.status_code} {good.text}",
    )
    for params, answer in zip(bad, answers, strict=True):
        code = (
            answer.json().get("code")
            if answer.headers.get("content-type", "").startswith("application/json")
            else None
        )
        if answer.status_code != 422 or code != "invalid_params":
            raise CheckFailed(
                f"the create route answers {answer.status_code} {code or answer.text[:80]!r} to "
                f"parameters {params}: expected 422 invalid_params"
            )
    return f"{len(bad)} out-of-range parameter set(s) refused with 422 invalid_params"
