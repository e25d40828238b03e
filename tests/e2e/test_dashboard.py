"""The dashboard in a real browser (issue 12; STYLE rule 17: assert what a person sees).

A real server (``python -m fedldp.server`` on an SQLite file) and headless Debian chromium driven
by playwright: the list shows the study; the study page's report counter advances while a swarm
runs in a background thread (driven by the event stream, not by reloading); the estimate shown at
the end equals ``GET …/result``. The page is saved as a screenshot (to
``$FEDLDP_DASHBOARD_SCREENSHOT`` when set, e.g. docs/dashboard.png).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population
from fedldp.client.swarm.run import SwarmResult, run_swarm_sync
from fedldp.client.swarm.server_process import ServerProcess
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import ResultView, StudyCreate, StudyView
from tests.live import sqlite_server

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SPEC = PopulationSpec(users=3000, samples=8, distribution="two-point", mean=0.3)
SEED = 12
REPORT_DELAY_S = 0.025
"""Report batches leave one at a time, this long apart (120 batches of 25 reports: about 3 s
of reporting, a dozen of the page's progress events). Unpaced, the swarm now reports all 3,000
users faster than the event stream reads the counters (every 0.25 s), and the page may see no
count between nothing and everything."""


class PacedTransport(httpx.AsyncHTTPTransport):
    """The swarm's transport, letting report batches out one per ``REPORT_DELAY_S``."""

    def __init__(self) -> None:
        super().__init__()
        self._gate: asyncio.Lock | None = None  # made in the swarm's event loop

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith(("/reports", "/reports/batch")):
            self._gate = self._gate or asyncio.Lock()
            async with self._gate:
                await asyncio.sleep(REPORT_DELAY_S)
        return await super().handle_async_request(request)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with sqlite_server(tmp_path) as process:
        yield process


@pytest.fixture
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: scripts/bootstrap installs it")
        pytest.skip("chromium is missing (scripts/bootstrap installs it as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()


def test_the_dashboard_follows_a_study_live(
    server: ServerProcess, browser: object, tmp_path: Path
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    protocol = get_protocol("user-mean")
    params = fill_from_population(protocol, {}, build_population(SPEC, SEED))
    create = StudyCreate(protocol="user-mean", params=params, seed=SEED, name="dashboard-demo")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        study = StudyView.model_validate_json(
            http.post("/v1/studies", json=create.model_dump(mode="json")).content
        )

    page = browser.new_page(viewport={"width": 1280, "height": 1500})
    page.goto(server.url + "/")
    row = page.locator(f'tr[data-study="{study.id}"]')
    expect(row).to_contain_text("dashboard-demo")
    expect(row).to_contain_text("enrolling")
    row.click()
    expect(page.locator("#phase")).to_have_text("enrolling")

    outcome: list[SwarmResult | BaseException] = []

    def swarm() -> None:
        try:
            outcome.append(
                run_swarm_sync(
                    server.url,
                    population=SPEC,
                    seed=SEED,
                    study_id=study.id,
                    batch=50,
                    concurrency=1,
                    progress=False,
                    transport=PacedTransport(),
                )
            )
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=swarm, daemon=True)
    thread.start()
    seen: list[int] = []  # the report counter as the page shows it, while the swarm runs
    deadline = time.monotonic() + 120
    while thread.is_alive() and time.monotonic() < deadline:
        counter = page.locator("#reports-total")
        if counter.count():
            value = int(counter.get_attribute("data-value") or 0)
            if not seen or value != seen[-1]:
                seen.append(value)
        page.wait_for_timeout(100)
    thread.join(timeout=5)
    assert outcome, "the swarm did not end"
    assert isinstance(outcome[0], SwarmResult), outcome
    total = sum(r.expected for r in outcome[0].study.rounds)
    # it advanced live: several distinct counts strictly between nothing and everything, rising
    inside = [v for v in seen if 0 < v < total]
    assert len(set(inside)) >= 2, seen
    assert inside == sorted(inside), seen

    expect(page.locator("#phase")).to_have_text("finished", timeout=30_000)
    shown = page.locator("#result-estimate")
    expect(shown).to_be_visible(timeout=30_000)
    with httpx.Client(base_url=server.url, timeout=30) as http:
        result = ResultView.model_validate_json(http.get(f"/v1/studies/{study.id}/result").content)
    assert float(shown.get_attribute("data-value") or "nan") == result.estimate
    expect(page.locator("#reports-total")).to_have_attribute("data-value", str(total))
    page.wait_for_timeout(300)  # the ledger histogram's last fetch
    target = Path(os.environ.get("FEDLDP_DASHBOARD_SCREENSHOT", str(tmp_path / "dashboard.png")))
    page.screenshot(path=str(target), full_page=True)
    assert target.stat().st_size > 10_000
