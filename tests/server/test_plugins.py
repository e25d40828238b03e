"""Plugin protocols on the server (server/runtime/protocols.py): served with their origin, broken
ones listed apart without stopping the rest, ``FEDLDP_PROTOCOLS`` narrowing what is offered, and
a study created with one version of its protocol's code never planned, fed or aggregated by
another (``409 protocol_version_mismatch``). The plugins are fake distributions
(tests/plugins.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from fedldp.protocol.catalogue import FEDLDP_VERSION
from fedldp.protocol.core.wire import Enrollment, ProtocolList, ResultView, StudyView
from fedldp.server.errors import ProtocolVersionMismatch, UnknownProtocol
from fedldp.server.services.rounds import close_round
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app
from tests.plugins import PLUGIN, Plugins
from tests.server.helpers import (
    app_context,
    create_study,
    enroll,
    expect_error,
    round_of,
    start,
)

PLUG = {"plug-mean": f"{PLUGIN}:PluginMean"}


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """A server process made now (it takes the catalogue as installed at its start)."""
    app = create_app(settings, sweeper=False)
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://fedldp.test") as c:
            yield app, c
    finally:
        app_context(app).db.dispose()


@pytest.fixture
def plug(plugins: Plugins) -> Plugins:
    plugins.install("fedldp-plug", "1.2.3", PLUG)
    return plugins


async def study_view(client: httpx.AsyncClient, study_id: str) -> StudyView:
    response = await client.get(f"/v1/studies/{study_id}")
    assert response.status_code == 200, response.text
    return StudyView.model_validate_json(response.content)


async def catalogue(client: httpx.AsyncClient) -> ProtocolList:
    response = await client.get("/v1/protocols")
    assert response.status_code == 200, response.text
    return ProtocolList.model_validate_json(response.content)


async def test_the_catalogue_lists_plugins_with_their_origin_and_broken_ones_apart(
    plug: Plugins, settings: Settings
) -> None:
    plug.install(
        "fedldp-odd",
        "0.9",
        {"plug-bad": f"{PLUGIN}:PlugParams", "plug-undescribable": f"{PLUGIN}:Undescribable"},
    )
    async with serving(settings) as (_, client):
        listed = await catalogue(client)
        served = {p.name: p for p in listed.protocols}
        assert (served["plug-mean"].origin, served["plug-mean"].origin_version) == (
            "fedldp-plug",
            "1.2.3",
        )
        assert (served["user-mean"].origin, served["user-mean"].origin_version) == (
            "built-in",
            FEDLDP_VERSION,
        )
        broken = {b.name: b for b in listed.broken}
        assert set(broken) == {"plug-bad", "plug-undescribable"}
        assert "not a fedldp.protocol.api.Protocol" in broken["plug-bad"].error
        assert "RuntimeError: no description today" in broken["plug-undescribable"].error
        assert "plug-undescribable" not in served
        assert (broken["plug-bad"].package, broken["plug-bad"].version) == ("fedldp-odd", "0.9")
        # the rest is served
        study = await create_study(client, "plug-mean")
        assert (study.protocol_origin, study.protocol_version) == ("fedldp-plug", "1.2.3")
        builtin = await create_study(client, "hetero-mean-rr")
        assert (builtin.protocol_origin, builtin.protocol_version) == ("built-in", FEDLDP_VERSION)
        response = await client.post(
            "/v1/studies", json={"protocol": "plug-bad", "params": {}, "seed": 1}
        )
        expect_error(response, 422, "unknown_protocol")


async def test_fedldp_protocols_narrows_what_the_server_offers(
    plug: Plugins, settings: Settings
) -> None:
    narrowed = settings.model_copy(update={"protocols": ("user-mean", "plug-mean")})
    async with serving(narrowed) as (_, client):
        listed = await catalogue(client)
        assert [p.name for p in listed.protocols] == ["plug-mean", "user-mean"]
        response = await client.post(
            "/v1/studies", json={"protocol": "hetero-mean-rr", "params": {}, "seed": 1}
        )
        body = expect_error(response, 422, "unknown_protocol")
        assert "plug-mean, user-mean" in body.detail
        await create_study(client, "plug-mean")


def test_a_server_told_to_offer_a_protocol_not_installed_does_not_start(
    plug: Plugins, settings: Settings
) -> None:
    with pytest.raises(UnknownProtocol, match="plug-missing"):
        create_app(settings.model_copy(update={"protocols": ("plug-missing",)}), sweeper=False)


def test_fedldp_protocols_is_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDLDP_PROTOCOLS", " user-mean , plug-mean,")
    assert Settings().protocols == ("user-mean", "plug-mean")
    monkeypatch.setenv("FEDLDP_PROTOCOLS", "")
    assert Settings().protocols is None


async def test_a_study_is_not_started_with_another_version_of_its_protocol(
    plug: Plugins, settings: Settings
) -> None:
    async with serving(settings) as (_, client):
        study = await create_study(client, "plug-mean")
        await enroll(client, study.id, [1.0] * 3)
        plug.install("fedldp-plug", "1.3.0", PLUG)  # upgraded under the running server
        body = expect_error(
            await client.post(f"/v1/studies/{study.id}/start"), 409, "protocol_version_mismatch"
        )
        assert "1.2.3" in body.detail
        assert "1.3.0" in body.detail
        assert (await study_view(client, study.id)).phase == "enrolling"
        plug.install("fedldp-plug", "1.2.3", PLUG)
        assert (await start(client, study.id)).phase == "running"


async def test_an_automatic_start_with_another_version_is_postponed_with_the_reason(
    plug: Plugins, settings: Settings
) -> None:
    async with serving(settings) as (_, client):
        study = await create_study(client, "plug-mean", enrollment_target=2)
        plug.install("fedldp-plug", "2.0", PLUG)
        await enroll(client, study.id, [1.0, 1.0])
        view = await study_view(client, study.id)
        assert view.phase == "enrolling"
        assert any("1.2.3" in w and "2.0" in w for w in view.warnings)


def reports(people: list[Enrollment], payloads: list[float]) -> dict[str, Any]:
    return {
        "round": 0,
        "kind": "scalar",
        "participant_ids": [p.participant_id for p in people],
        "tokens": [p.token for p in people],
        "payloads": [[x] for x in payloads],
    }


async def test_a_restarted_server_with_another_version_refuses_a_running_study(
    plug: Plugins, settings: Settings
) -> None:
    """Tasks, reports and the closing of a round go through the plan, which a server does not
    make for a study of other code: the round stays open for a server with the study's
    version."""
    async with serving(settings) as (_, client):
        study = await create_study(client, "plug-mean", round_deadline_s=2.0, quorum=0.5)
        people = await enroll(client, study.id, [1.0, 1.0])
        await start(client, study.id)
        stored = await client.post(
            f"/v1/studies/{study.id}/reports/batch", json=reports(people[:1], [0.5])
        )
        assert stored.status_code == 200, stored.text
        deadline = (await study_view(client, study.id)).rounds[0].deadline
    plug.install("fedldp-plug", "1.3.0", PLUG)
    async with serving(settings) as (app, client):
        response = await client.post(
            f"/v1/studies/{study.id}/reports/batch", json=reports(people[1:], [0.25])
        )
        body = expect_error(response, 409, "protocol_version_mismatch")
        assert "1.2.3" in body.detail
        task = await client.get(
            f"/v1/studies/{study.id}/participants/1/task",
            headers={"Authorization": f"Bearer {people[1].token}"},
        )
        expect_error(task, 409, "protocol_version_mismatch")
        assert deadline is not None
        # past the round's deadline, with its quorum met: the round is due to close
        await asyncio.sleep(max(0.0, (deadline - datetime.now(UTC)).total_seconds()) + 0.05)
        with pytest.raises(ProtocolVersionMismatch):
            close_round(app_context(app), study.id, 0)
        still = await round_of(client, study.id, 0)
        assert (still.status, still.received) == ("open", 1)
        assert (await study_view(client, study.id)).phase == "running"
    plug.install("fedldp-plug", "1.2.3", PLUG)
    async with serving(settings) as (app, client):
        assert close_round(app_context(app), study.id, 0)
        result = ResultView.model_validate_json(
            (await client.get(f"/v1/studies/{study.id}/result")).content
        )
        assert result.phase == "finished"
        assert result.estimate == 0.5  # the one report stored: aggregated by the study's code
