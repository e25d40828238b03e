"""A plugin protocol on the deployment path (client/swarm/enrolling.py ``study_protocol``): it runs
through the server and a swarm to the simulator's estimate, and a swarm whose installed code of a
study's protocol has another version than the study was created with is refused before any of
its users enrolls (``protocol_version_mismatch``), and a creating swarm whose code differs from
the server's catalogue is refused before it creates the study. The plugins are fake distributions
(tests/plugins.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from fedldp.client.api.errors import PhaseError, SwarmError, error_for
from fedldp.client.population.build import build_population
from fedldp.client.population.spec import PopulationSpec
from fedldp.client.simulate import simulate
from fedldp.client.swarm.run import run_swarm
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import StudyCreate
from fedldp.server.runtime.context import Context
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app
from tests.plugins import PLUGIN, Plugins

REL = 1e-9  # the sums grouped differently (docs/architecture.md, "The three parts")
URL = "http://fedldp.test"
PLUG = {"plug-mean": f"{PLUGIN}:PluginMean"}
SPEC = PopulationSpec(users=500, samples=4, distribution="two-point", mean=0.2)


@pytest.fixture
def app(plugins: Plugins, tmp_path: Path) -> Iterator[FastAPI]:
    """A server started with plug-mean 1.2.3 installed beside it."""
    plugins.install("fedldp-plug", "1.2.3", PLUG)
    application = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'swarm.db'}"))
    try:
        yield application
    finally:
        ctx: Context = application.state.ctx
        ctx.db.dispose()


async def test_a_plugin_protocol_runs_through_a_swarm_as_in_process(app: FastAPI) -> None:
    run = await run_swarm(
        URL,
        population=SPEC,
        seed=5,
        create=("plug-mean", {}),
        batch=100,
        progress=False,
        transport=httpx.ASGITransport(app=app),
    )
    assert run.study.phase == "finished"
    assert (run.study.protocol_origin, run.study.protocol_version) == ("fedldp-plug", "1.2.3")
    assert run.diagnostics == run.result.diagnostics
    assert "participation" in run.diagnostics
    protocol = get_protocol("plug-mean")
    expected = simulate(
        protocol, protocol.parse_params({}), build_population(SPEC, 5), 5
    ).result.estimate
    np.testing.assert_allclose(
        np.asarray(run.result.estimate, dtype=np.float64),
        np.asarray(expected, dtype=np.float64),
        rtol=REL,
        atol=1e-15,
    )


async def test_a_swarm_with_another_version_of_the_protocol_is_refused(
    app: FastAPI, plugins: Plugins
) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=URL) as client:
        body = StudyCreate(protocol="plug-mean", seed=3).model_dump(mode="json")
        created = await client.post("/v1/studies", json=body)
        assert created.status_code == 201, created.text
        study_id = created.json()["id"]
        plugins.install("fedldp-plug", "1.3.0", PLUG)  # the swarm's side has another version
        with pytest.raises(SwarmError) as caught:
            await run_swarm(
                URL, population=SPEC, seed=5, study_id=study_id, progress=False, transport=transport
            )
        assert caught.value.code == "protocol_version_mismatch"
        assert "fedldp-plug 1.2.3" in caught.value.detail
        assert "fedldp-plug 1.3.0" in caught.value.detail
        view = await client.get(f"/v1/studies/{study_id}")
        assert view.json()["n_participants"] == 0  # refused before enrolling anyone


async def test_a_leasing_swarm_joining_a_study_of_another_version_is_refused(
    app: FastAPI, plugins: Plugins
) -> None:
    options: dict[str, Any] = {
        "population": SPEC,
        "seed": 5,
        "create": ("plug-mean", {}),
        "batch": 500,
        "progress": False,
        "name": "pinned",
        "lease": True,
        "transport": httpx.ASGITransport(app=app),
    }
    first = await run_swarm(URL, **options)
    assert first.study.protocol_version == "1.2.3"
    plugins.install("fedldp-plug", "1.3.0", PLUG)
    with pytest.raises(SwarmError) as caught:
        await run_swarm(URL, **options)
    assert caught.value.code == "protocol_version_mismatch"


class PinnedCatalogue(httpx.AsyncBaseTransport):
    """The app, but ``GET /v1/protocols`` answers ``catalogue`` (a server running other code than
    this process, which shares the app's catalogue); records every other request."""

    def __init__(self, app: FastAPI, catalogue: Any) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.catalogue = catalogue
        self.requests: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if (request.method, request.url.path) == ("GET", "/v1/protocols"):
            return httpx.Response(200, json=self.catalogue)
        self.requests.append((request.method, request.url.path))
        return await self.inner.handle_async_request(request)


@pytest.mark.parametrize("lease", [False, True])
async def test_a_creating_swarm_with_another_version_creates_nothing(
    app: FastAPI, plugins: Plugins, lease: bool
) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL) as client:
        served = (await client.get("/v1/protocols")).json()  # plug-mean of fedldp-plug 1.2.3
        plugins.install("fedldp-plug", "1.3.0", PLUG)  # the swarm's side has another version
        transport = PinnedCatalogue(app, served)
        with pytest.raises(SwarmError) as caught:
            await run_swarm(
                URL,
                population=SPEC,
                seed=5,
                create=("plug-mean", {}),
                name="pinned" if lease else None,
                lease=lease,
                progress=False,
                transport=transport,
            )
        assert caught.value.code == "protocol_version_mismatch"
        assert "fedldp-plug 1.2.3" in caught.value.detail
        assert "fedldp-plug 1.3.0" in caught.value.detail
        assert ("POST", "/v1/studies") not in transport.requests
        assert (await client.get("/v1/studies")).json()["studies"] == []  # no orphan study


def test_the_server_refusal_is_a_phase_error() -> None:
    assert isinstance(error_for("protocol_version_mismatch", "other code", 409), PhaseError)
