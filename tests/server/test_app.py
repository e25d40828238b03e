"""The application (server/web/app.py): a whole study over HTTP reproduces the in-process simulator,
errors render as ``{"code", "detail"}``, and no input, however bad, gets a 500."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
import sqlalchemy.exc
from fastapi import FastAPI

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.seeds import derive_seeds, round_key
from fedldp.client.simulate import simulate
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.records import RoundTask
from fedldp.protocol.core.streams import UserStreams
from fedldp.protocol.core.wire import (
    BudgetView,
    EnrollmentBatch,
    ErrorBody,
    ResultView,
    RoundsView,
    StudyView,
    TaskBatch,
    TaskDone,
    TaskReport,
    TaskWait,
)
from fedldp.server.runtime.context import Context
from fedldp.server.services import studies
from fedldp.server.settings import Settings
from fedldp.server.web import app as server_app
from tests.server.helpers import create_study, expect_error, start, submit_batch

USERS = 2000
SEED = 20240611


async def test_full_study_over_http_matches_the_simulator(client: httpx.AsyncClient) -> None:
    spec = PopulationSpec(users=USERS, samples=16, distribution="two-point", mean=0.3)
    population = build_population(spec, SEED)
    protocol = CATALOGUE["user-mean"]
    raw_params = {"samples_per_user": 16}
    params = protocol.parse_params(raw_params)
    study_seed, population_seed = derive_seeds(SEED)

    study = await create_study(client, "user-mean", raw_params, seed=study_seed)
    enrolled = await client.post(
        f"/v1/studies/{study.id}/participants/batch",
        json={
            "participants": [
                {"epsilon": float(e), "metadata": {"samples": int(m)}}
                for e, m in zip(population.epsilon, population.metadata["samples"], strict=True)
            ]
        },
    )
    assert enrolled.status_code == 201
    people = EnrollmentBatch.model_validate_json(enrolled.content).enrollments
    assert [e.participant_id for e in people] == list(range(USERS))  # id = population slot
    await start(client, study.id)
    everyone = {"participant_ids": list(range(USERS)), "tokens": [e.token for e in people]}

    for k in range(2):
        answer = await client.post(f"/v1/studies/{study.id}/tasks", json=everyone)
        items = TaskBatch.model_validate_json(answer.content).items()
        reports = [(i.participant_id, i.task) for i in items if isinstance(i.task, TaskReport)]
        others = [i.task for i in items if not isinstance(i.task, TaskReport)]
        assert len(reports) == USERS // 2
        if k == 0:  # stage two waits for stage one
            assert all(isinstance(t, TaskWait) for t in others)
        else:  # stage one is done (the batch form lists who, not their reported rounds)
            assert all(isinstance(t, TaskDone) and t.phase == "running" for t in others)
        slots = np.array([pid for pid, _ in reports], dtype=np.int64)
        tasks = [t for _, t in reports]
        head = tasks[0]
        assert all(t.broadcast == head.broadcast for t in tasks)
        # The client side, exactly as client/simulate.py and client/swarm/user.py privatize.
        task = RoundTask(
            head.round,
            head.name,
            dict(head.broadcast),
            head.payload_kind,
            tuple(head.payload_shape),
        )
        eps = np.array([t.epsilon for t in tasks])
        group = np.array([t.group for t in tasks], dtype=np.int64)
        rng = UserStreams(round_key(population_seed, k), slots)
        payloads = protocol.privatize(params, task, population.data(slots), eps, group, rng)
        rows = np.asarray(payloads, dtype=np.float64).reshape(slots.size, -1).tolist()
        receipt = await submit_batch(
            client, study.id, k, head.payload_kind, [people[s] for s in slots], rows
        )
        assert (receipt.accepted, receipt.rejected) == (slots.size, 0)

    response = await client.get(f"/v1/studies/{study.id}/result")
    assert response.status_code == 200
    result = ResultView.model_validate_json(response.content)
    expected = simulate(protocol, params, population, SEED)

    assert result.phase == "finished"
    assert isinstance(result.estimate, float)
    assert isinstance(expected.result.estimate, float)
    assert result.estimate == pytest.approx(expected.result.estimate, rel=1e-9)
    # And it estimates the truth: within 5 predicted standard deviations (a false failure has
    # probability < 1e-6 under the CLT; the prediction bounds σ² by D², so it is conservative).
    sigma = float(np.sqrt(result.diagnostics["predicted_mse"]))
    assert abs(result.estimate - float(np.asarray(population.truth))) <= 5 * sigma
    assert result.error_bar is not None
    assert expected.result.error_bar is not None
    assert result.error_bar.half_width == pytest.approx(
        expected.result.error_bar.half_width, rel=1e-9
    )
    for key in ("k_hat", "n1", "n2", "L", "R"):
        assert result.diagnostics[key] == expected.result.diagnostics[key], key
    rounds = RoundsView.model_validate_json(
        (await client.get(f"/v1/studies/{study.id}/rounds")).content
    ).rounds
    assert len(rounds) == len(expected.outputs) == 2
    for served, computed in zip(rounds, expected.outputs, strict=True):
        assert served.output is not None
        assert set(served.output) == set(computed)
        for key, value in computed.items():
            np.testing.assert_allclose(served.output[key], value, rtol=1e-9, atol=0, err_msg=key)
    assert result.epsilon_spent.charged == USERS
    assert result.epsilon_spent.max == pytest.approx(float(expected.charges.max()))

    budget = await client.get(
        f"/v1/studies/{study.id}/participants/17/budget",
        headers={"Authorization": f"Bearer {people[17].token}"},
    )
    ledger = BudgetView.model_validate_json(budget.content)
    assert ledger.spent == pytest.approx(float(population.epsilon[17]))
    assert [c.reported for c in ledger.planned] == [True]


# --------------------------------------------------------------------------- error rendering


async def test_unknown_route_is_not_found(client: httpx.AsyncClient) -> None:
    for path in ("/nope", "/v1/studies/x/y/z", "/v2/studies"):
        expect_error(await client.get(path), 404, "not_found")


async def test_wrong_method_is_refused(client: httpx.AsyncClient) -> None:
    refused = await client.delete("/v1/studies")
    expect_error(refused, 405, "method_not_allowed")
    assert refused.headers["allow"] == "GET, POST"  # every method of the path (RFC 9110)
    refused = await client.put("/health")
    expect_error(refused, 405, "method_not_allowed")
    assert refused.headers["allow"] == "GET"


@pytest.mark.parametrize(
    "refusal",
    [
        sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("too many clients already")),
        sqlalchemy.exc.TimeoutError("QueuePool limit of size 5 overflow 10 reached"),
    ],
)
async def test_a_database_that_refuses_is_a_503_to_retry(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, refusal: Exception
) -> None:
    """PostgreSQL's connection limit, a pool with no free connection or SQLite's busy timeout
    are the database's refusals, not bugs: 503 with Retry-After, which fedldp's clients retry."""

    def refuse(ctx: object) -> None:
        raise refusal

    monkeypatch.setattr(studies, "list_all", refuse)
    refused = await client.get("/v1/studies")
    expect_error(refused, 503, "database_unavailable")
    assert refused.headers["retry-after"] == "1"


async def test_a_database_fault_in_the_sweeper_is_one_warning_line(
    ctx: Context, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A database restarting or a full disk fails every sweep while it lasts: a line each, not a
    traceback (kept for bugs), and the sweeper goes on."""
    swept = asyncio.Event()

    def refuse(_: Context) -> None:
        swept.set()
        raise sqlalchemy.exc.OperationalError(
            "BEGIN IMMEDIATE", {}, Exception("database or disk is full\nmore")
        )

    monkeypatch.setattr(server_app, "sweep", refuse)
    sweeper = asyncio.create_task(server_app._sweeper(ctx))
    await asyncio.wait_for(swept.wait(), 10)
    await asyncio.sleep(0.05)
    assert not sweeper.done()  # still sweeping
    sweeper.cancel()
    records = [r for r in caplog.records if r.name == "fedldp.server"]
    assert records
    for record in records:
        assert record.levelname == "WARNING"
        assert record.exc_info is None
        assert "database or disk is full" in record.getMessage()
        assert "\n" not in record.getMessage()


@pytest.mark.parametrize("path", ["/v1/studies/x/participants", "/v1/studies/x/predict"])
async def test_a_body_that_is_not_json_is_an_invalid_request(
    client: httpx.AsyncClient, path: str
) -> None:
    sent = await client.post(
        path, content=b"not json {", headers={"content-type": "application/json"}
    )
    assert "not JSON" in expect_error(sent, 422, "invalid_request").detail


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"[]", b'"study"', b"null", b'{"protocol": "hetero-mean-rr", "seed": NaN}'],
)
async def test_unparsable_bodies_are_invalid_requests(
    client: httpx.AsyncClient, raw: bytes
) -> None:
    response = await client.post(
        "/v1/studies", content=raw, headers={"Content-Type": "application/json"}
    )
    expect_error(response, 422, "invalid_request")


async def test_openapi_points_client_authors_at_the_guide(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    assert "docs/clients.md" in document["info"]["description"]
    task = document["components"]["schemas"]["TaskReport"]["properties"]["broadcast"]
    assert "`sensitivity`" in task["description"]
    assert "`n_bins`" in task["description"]


async def test_openapi_document_lists_every_route(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert set(paths) == {
        "/health",
        "/v1/protocols",
        "/v1/studies",
        "/v1/studies/{study_id}",
        "/v1/studies/{study_id}/start",
        "/v1/studies/{study_id}/cancel",
        "/v1/studies/{study_id}/participants",
        "/v1/studies/{study_id}/participants/batch",
        "/v1/studies/{study_id}/leases",
        "/v1/studies/{study_id}/participants/{participant_id}/task",
        "/v1/studies/{study_id}/tasks",
        "/v1/studies/{study_id}/reports",
        "/v1/studies/{study_id}/reports/batch",
        "/v1/studies/{study_id}/rounds",
        "/v1/studies/{study_id}/rounds/{index}",
        "/v1/studies/{study_id}/result",
        "/v1/studies/{study_id}/predict",
        "/v1/studies/{study_id}/participants/{participant_id}/budget",
        "/v1/studies/{study_id}/events",
        "/v1/studies/{study_id}/epsilon",
        "/metrics",
        "/v1/campaigns",
        "/v1/campaigns/{campaign_id}",
        "/v1/campaigns/{campaign_id}/occurrences/next",
        "/v1/campaigns/{campaign_id}/occurrences/{index}/devices",
        "/v1/campaigns/{campaign_id}/occurrences/{index}/truth",
        "/v1/campaigns/{campaign_id}/devices/{device}/budget",
    }


# --------------------------------------------------------------------------- no 500, ever


@pytest.fixture
async def lenient(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client that gets the 500 answer instead of the app's exception (to list offenders)."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://fedldp.test") as c:
        yield c


Request = tuple[str, str, Any, Any]  # method, path, body, headers


def bad_requests(sid: str, token: str, waiting: str) -> list[Request]:
    """(method, path, JSON body or raw bytes, headers): bad inputs of every kind and route."""
    huge = 2**64
    raw_nan = (
        b'{"participant_id": 0, "token": "%s", "round": 0, "payload": {"kind": "bit", "bit": NaN}}'
    )
    bit = {"kind": "bit", "bit": 1}
    raw_report = (
        b'{"participant_id": 0, "token": "%s", "round": 0, "payload": {"kind": "bit", "bit": 1}}'
    )

    def rep(pid: Any = 0, tok: Any = token, rnd: Any = 0, payload: Any = bit) -> dict[str, Any]:
        return {"participant_id": pid, "token": tok, "round": rnd, "payload": payload}

    def batch(ids: Any, toks: Any, rows: Any, rnd: Any = 0, kind: Any = "bit") -> dict[str, Any]:
        return {
            "round": rnd,
            "kind": kind,
            "participant_ids": ids,
            "tokens": toks,
            "payloads": rows,
        }

    s = f"/v1/studies/{sid}"
    w = f"/v1/studies/{waiting}"
    create = "/v1/studies"
    return [
        # studies
        (
            "POST",
            create,
            {"protocol": "hetero-mean-rr", "seed": 1, "enrollment_deadline_s": 1e300},
            None,
        ),
        (
            "POST",
            create,
            {"protocol": "hetero-mean-rr", "seed": 1, "round_deadline_s": 1e300},
            None,
        ),
        (
            "POST",
            create,
            {"protocol": "hetero-mean-rr", "seed": 1, "enrollment_target": 2**31},
            None,
        ),
        (
            "POST",
            create,
            {"protocol": "hetero-mean-rr", "seed": 1, "enrollment_target": huge},
            None,
        ),
        ("POST", create, {"protocol": "hetero-mean-rr", "seed": huge}, None),
        ("POST", create, {"protocol": "x" * 10_000, "seed": 1}, None),
        ("POST", create, {"protocol": "hetero-mean-rr", "seed": 1, "name": "n" * 201}, None),
        (
            "POST",
            create,
            b'{"protocol": "hetero-mean-rr", "seed": 1, "params": {"beta": 1e999}}',
            None,
        ),
        ("POST", create, {"protocol": "hetero-mean-rr", "seed": 1, "params": [1, 2]}, None),
        (
            "POST",
            create,
            {"protocol": "user-mean", "seed": 1, "params": {"samples_per_user": huge}},
            None,
        ),
        ("POST", create, {"protocol": None, "seed": 1}, None),
        ("POST", create, {"protocol": "hetero-mean-rr", "seed": 1, "name": "a\u0000b"}, None),
        ("POST", create, {"protocol": "hetero\u0000", "seed": 1}, None),
        ("POST", create, b"\xff\xfe not json", None),
        ("POST", create, b'{"protocol": "hetero-mean-rr", "seed": 1e999}', None),
        ("GET", "/v1/studies/" + "z" * 5000, None, None),
        ("GET", "/v1/studies/%00", None, None),
        ("GET", "/v1/studies/%ED%A0%80", None, None),
        ("GET", "/v1/studies/%FF%FE", None, None),
        ("POST", create, b'{"protocol": "hetero-mean-rr", "seed": 1, "name": "\\ud800"}', None),
        ("POST", create, b'{"protocol": "hetero-mean-rr\\udfff", "seed": 1}', None),
        ("POST", f"{w}/participants", b'{"epsilon": 1.0, "metadata": {"\\ud800": 1.0}}', None),
        ("POST", f"{s}/reports", raw_report % b"\\ud800", None),
        ("POST", f"{s}/tasks", b'{"participant_ids": [0], "tokens": ["\\udc80"]}', None),
        ("GET", "/v1/studies/'; DROP TABLE studies; --", None, None),
        ("POST", f"{w}/start", {"unexpected": "body"}, None),
        ("POST", f"{s}/start", None, None),
        # enrollment
        ("POST", f"{s}/participants", {"epsilon": 1.0}, None),
        ("POST", f"{w}/participants", b'{"epsilon": 1e999}', None),
        ("POST", create, b'{"protocol": "hetero-mean-rr", "seed": 1, "params": {"x": NaN}}', None),
        ("POST", f"{w}/participants", {"epsilon": 1.0, "metadata": {"x": "text"}}, None),
        ("POST", f"{w}/participants", {"epsilon": 1.0, "metadata": {"x": [[1.0]]}}, None),
        ("POST", f"{w}/participants", {"epsilon": 1.0, "metadata": [1]}, None),
        ("POST", f"{w}/participants", {"epsilon": 1.0, "metadata": {"k\u0000": 1.0}}, None),
        ("POST", f"{w}/participants/batch", {"participants": [{"epsilon": -1}] * 3}, None),
        ("POST", f"{w}/participants/batch", {"participants": {"epsilon": 1}}, None),
        ("POST", f"{w}/participants", {"epsilon": 1.0, "participant_id": huge}, None),
        ("POST", f"{w}/participants", {"epsilon": 1.0, "participant_id": 2**31}, None),
        ("POST", f"{w}/participants", {"epsilon": 1.0, "participant_id": -1}, None),
        ("POST", f"{w}/participants", {"epsilon": 1.0, "participant_id": 0}, None),
        ("POST", f"{w}/participants", {"epsilon": 1.0, "participant_id": 0}, None),  # again
        ("POST", f"{w}/participants/batch", {"participants": [{"epsilon": 1.0}] * 2}, None),
        (
            "POST",
            f"{w}/participants/batch",
            {"participants": [{"epsilon": 1.0, "participant_id": 5}, {"epsilon": 1.0}]},
            None,
        ),
        # leases
        ("POST", f"{w}/leases", {"size": 0}, None),
        ("POST", f"{w}/leases", {"size": huge}, None),
        ("POST", f"{w}/leases", {"size": 10}, None),  # no enrollment target
        ("POST", f"{s}/leases", {"size": 10}, None),
        ("POST", f"{w}/leases", None, None),
        # tasks
        ("GET", f"{s}/participants/{huge}/task", None, {"Authorization": f"Bearer {token}"}),
        ("GET", f"{s}/participants/-5/task", None, {"Authorization": f"Bearer {token}"}),
        ("GET", f"{s}/participants/abc/task", None, None),
        (
            "GET",
            f"{s}/participants/0/task",
            None,
            {b"authorization": "Bearer \u00e9t\u00e9".encode()},
        ),
        ("GET", f"{s}/participants/0/task", None, {"Authorization": "Bearer"}),
        (
            "GET",
            f"{s}/participants/0/budget",
            None,
            {b"authorization": "Bearer \u00e9".encode("latin-1")},
        ),
        ("POST", f"{s}/tasks", {"participant_ids": [huge], "tokens": [token]}, None),
        ("POST", f"{s}/tasks", {"participant_ids": [0], "tokens": ["\u00e9\u00e9"]}, None),
        ("POST", f"{s}/tasks", {"participant_ids": [], "tokens": []}, None),
        ("POST", f"{s}/tasks", {"participant_ids": [-1], "tokens": [token]}, None),
        ("POST", f"{w}/tasks", {"participant_ids": [0], "tokens": [token]}, None),
        # single reports
        ("POST", f"{s}/reports", rep(pid=huge), None),
        ("POST", f"{s}/reports", rep(pid=2**31), None),
        ("POST", f"{s}/reports", rep(rnd=huge), None),
        ("POST", f"{s}/reports", rep(rnd=2**31), None),
        ("POST", f"{s}/reports", rep(rnd=-1), None),
        ("POST", f"{s}/reports", rep(tok="\u00e9\u00e9\u00e9"), None),
        ("POST", f"{s}/reports", rep(tok=""), None),
        ("POST", f"{s}/reports", rep(payload={"kind": "bit", "bit": 0}), None),
        ("POST", f"{s}/reports", rep(payload={"kind": "scalar", "value": 1e308}), None),
        ("POST", f"{s}/reports", rep(payload={"kind": "vector", "values": []}), None),
        (
            "POST",
            f"{s}/reports",
            rep(payload={"kind": "index-sign", "index": huge, "sign": 1}),
            None,
        ),
        ("POST", f"{s}/reports", rep(payload={"kind": "teleport"}), None),
        ("POST", f"{s}/reports", rep(payload=None), None),
        ("POST", f"{s}/reports", raw_nan % token.encode(), None),
        ("POST", f"{w}/reports", rep(), None),
        # batch reports
        ("POST", f"{s}/reports/batch", batch([huge], [token], [[1.0]]), None),
        ("POST", f"{s}/reports/batch", batch([huge, 2**31, -1], [token] * 3, [[1.0]] * 3), None),
        ("POST", f"{s}/reports/batch", batch([0], [token], [[1.0]], rnd=huge), None),
        ("POST", f"{s}/reports/batch", batch([0], [token], [[1.0]], rnd=2**31), None),
        ("POST", f"{s}/reports/batch", batch([0], ["\u00e9"], [[1.0]]), None),
        ("POST", f"{s}/reports/batch", batch([0], [token], [[]]), None),
        ("POST", f"{s}/reports/batch", batch([0], [token], [[1.0] * 1000]), None),
        ("POST", f"{s}/reports/batch", batch([0], [token], [[1e308]]), None),
        ("POST", f"{s}/reports/batch", batch([0], [token], [["one"]]), None),
        ("POST", f"{s}/reports/batch", batch([0], [token], [[1.0]], kind="teleport"), None),
        ("POST", f"{s}/reports/batch", batch([], [], []), None),
        ("POST", f"{s}/reports/batch", batch([0], [], []), None),
        ("POST", f"{w}/reports/batch", batch([0], [token], [[1.0]]), None),
        # reading
        ("GET", f"{s}/rounds/{huge}", None, None),
        ("GET", f"{s}/rounds/{2**31}", None, None),
        ("GET", f"{s}/rounds/-1", None, None),
        ("GET", f"{s}/rounds/x", None, None),
        ("GET", f"{w}/result", None, None),
        ("GET", f"{w}/rounds/0", None, None),
        ("POST", f"{s}/predict", {"features": [[0.5]]}, None),
        ("POST", f"{s}/predict", {"features": [[huge]]}, None),
        ("POST", f"{s}/predict", {"features": "0.5"}, None),
        ("POST", f"{s}/predict", b'{"features": [[Infinity]]}', None),
        ("POST", f"{w}/predict", {}, None),
        ("POST", f"{s}/cancel/now", None, None),
    ]


async def test_no_bad_input_gets_a_server_error(
    client: httpx.AsyncClient, lenient: httpx.AsyncClient
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    waiting = await create_study(client, "hetero-mean-rr")
    enrolled = await client.post(
        f"/v1/studies/{study.id}/participants/batch",
        json={"participants": [{"epsilon": 1.0}, {"epsilon": 1.0}]},
    )
    token = EnrollmentBatch.model_validate_json(enrolled.content).enrollments[0].token
    await start(client, study.id)

    offenders: list[str] = []
    for method, path, body, headers in bad_requests(study.id, token, waiting.id):
        if isinstance(body, bytes):
            json_type = {"Content-Type": "application/json"}
            response = await lenient.request(method, path, content=body, headers=json_type)
        else:
            response = await lenient.request(method, path, json=body, headers=headers)
        if response.status_code >= 500:
            offenders.append(f"{method} {path[-30:]} {str(body)[:100]} -> {response.status_code}")
        elif response.status_code >= 400:
            error = ErrorBody.model_validate_json(response.content)  # always {"code", "detail"}
            assert error.code, (method, path)
    assert offenders == [], "\n".join(offenders)

    # The study is intact: nothing above was stored, and it still takes a good report.
    view = StudyView.model_validate_json((await client.get(f"/v1/studies/{study.id}")).content)
    assert (view.phase, view.rounds[0].received) == ("running", 0)
    good = await client.post(
        f"/v1/studies/{study.id}/reports",
        json={
            "participant_id": 0,
            "token": token,
            "round": 0,
            "payload": {"kind": "bit", "bit": 1},
        },
    )
    assert good.status_code == 201


async def test_a_serving_app_works_out_the_catalogue_before_it_answers(tmp_path: Any) -> None:
    """A swarm's first request is ``GET /v1/protocols``: a serving app (its sweeper on) has the
    default ε's catalogue ready when its lifespan has started; a test app (sweeper off) not."""
    studies._catalogue.cache_clear()
    for sweeper in (False, True):
        settings = Settings(database_url=f"sqlite:///{tmp_path / f'app{sweeper}.db'}")
        app = server_app.create_app(settings, sweeper=sweeper)
        async with app.router.lifespan_context(app):
            warmed = studies._catalogue.cache_info().currsize
            assert warmed == (1 if sweeper else 0)
            ctx = app.state.ctx
            assert studies._catalogue.cache_info().hits == 0
            studies.catalogue(ctx, 1.0)
            assert studies._catalogue.cache_info().hits == (1 if sweeper else 0)
        studies._catalogue.cache_clear()
