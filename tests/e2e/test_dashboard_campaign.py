"""The dashboard's campaign view in a real browser (issue 29: "the dashboard shows it over time";
STYLE rule 17: assert what a person sees).

A real server (``python -m fedldp.server`` on an SQLite file), headless Debian chromium driven by
playwright, and ``run_campaign`` (what ``fedldp campaign run`` does) in a background thread: the
list names the campaign; its page counts the ended occurrences up while the campaign runs
(polling, no reload); at the end it shows every occurrence, each with the estimate of ``GET
/v1/campaigns/{id}`` and the truth the driver declared, drawn over simulated days. The page is
saved as a screenshot (to ``$FEDLDP_CAMPAIGN_SCREENSHOT`` when set, e.g.
docs/figures/screenshots/dashboard-campaign.png), and its top mid-campaign beside it
(``…-live.png``).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fedldp.client.campaign.drive import run_campaign
from fedldp.client.campaign.simulate import CampaignResult
from fedldp.client.campaign.template import CampaignTemplate
from fedldp.client.swarm.server_process import ServerProcess
from fedldp.protocol.core.wire import CampaignList
from tests.e2e.test_dashboard import browser  # noqa: F401  (the fixture)
from tests.live import sqlite_server

pytestmark = pytest.mark.e2e

TIMES = 8
TEMPLATE = CampaignTemplate.model_validate(
    {
        "protocol": "classic-duchi",
        "population": {
            "users": 1500,
            "distribution": "two-point",
            "mean": -0.3,
            "epsilon_mix": "0.5:0.4,1:0.6",
            "drift": {"mean_per_day": 0.1},
        },
        "every": "12h",
        "times": TIMES,
        "budget": {"epsilon": 1.5, "period": "1d"},
    }
)
"""Twice a day; a device of ε = 1 fits once a day in its budget of 1.5 and one of ε = 0.5 twice,
so every second occurrence admits only the ε = 0.5 devices (the budget chart shows it)."""
SEED = 5
OCCURRENCE_DELAY_S = 1.5
"""The driver waits this long before asking for each next occurrence: an occurrence of 1,500
devices runs in well under a second, and the page asks every second; paced, the page sees the
count of ended occurrences between none and all."""


class PacedTransport(httpx.AsyncHTTPTransport):
    """The driver's transport, holding each ``…/occurrences/next`` back ``OCCURRENCE_DELAY_S``."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/occurrences/next"):
            await asyncio.sleep(OCCURRENCE_DELAY_S)
        return await super().handle_async_request(request)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with sqlite_server(tmp_path) as process:
        yield process


def test_the_dashboard_follows_a_campaign_over_time(
    server: ServerProcess,
    browser: object,  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    page = browser.new_page(viewport={"width": 1280, "height": 1600})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server.url + "/#/campaigns")
    expect(page.locator("main")).to_contain_text("No campaigns yet")

    outcome: list[CampaignResult | BaseException] = []

    def drive() -> None:
        try:
            run = run_campaign(
                server.url,
                TEMPLATE,
                SEED,
                tmp_path / "devices",
                name="twice-daily",
                transport=PacedTransport(),
            )
            outcome.append(asyncio.run(run))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    row = page.locator("#campaign-list tr[data-campaign]")
    expect(row).to_contain_text("twice-daily", timeout=30_000)
    expect(row).to_contain_text("classic-duchi")
    row.click()
    ended = page.locator("#occurrences-ended")
    expect(ended).to_be_visible()
    target = Path(
        os.environ.get("FEDLDP_CAMPAIGN_SCREENSHOT", str(tmp_path / "dashboard-campaign.png"))
    )
    midway = target.with_name(target.stem + "-live.png")  # the head and chart, mid-campaign
    seen: list[int] = []  # the ended occurrences as the page counts them, while the driver runs
    deadline = time.monotonic() + 180
    while thread.is_alive() and time.monotonic() < deadline:
        if ended.count():
            value = int(ended.get_attribute("data-value") or 0)
            if not seen or value != seen[-1]:
                seen.append(value)
            if value == TIMES // 2 and not midway.exists():
                page.screenshot(
                    path=str(midway), clip={"x": 0, "y": 0, "width": 1280, "height": 700}
                )
        page.wait_for_timeout(100)
    thread.join(timeout=5)
    assert outcome, "the campaign did not end"
    assert isinstance(outcome[0], CampaignResult), outcome
    assert errors == []
    # it advanced live: several counts strictly between none and all, rising
    inside = [v for v in seen if 0 < v < TIMES]
    assert len(set(inside)) >= 3, seen
    assert inside == sorted(inside), seen

    expect(ended).to_have_attribute("data-value", str(TIMES), timeout=10_000)
    expect(page.locator("#campaign-status")).to_have_text("finished")
    expect(page.locator("#campaign-next")).to_contain_text(f"all {TIMES} occurrences ran")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        (view,) = CampaignList.model_validate_json(http.get("/v1/campaigns").content).campaigns
    rows = page.locator("#occurrences tr[data-occurrence]")
    expect(rows).to_have_count(TIMES)
    result = outcome[0]
    for o, local in zip(view.occurrences, result.occurrences, strict=True):
        cells = rows.nth(o.index)
        expect(cells).to_contain_text("finished")
        shown = cells.locator('[data-testid="estimate"]').get_attribute("data-value")
        assert json.loads(shown or "null") == o.estimate  # what the API says, unrounded
        assert o.truth == local.truth  # the driver declared the day's truth
        assert o.devices_charged == local.enrolled
    # drawn: one estimate point per occurrence, the truth beside them, both error charts
    chart = page.locator('[data-testid="estimates-chart"]')
    expect(chart.locator("circle[data-occurrence]")).to_have_count(TIMES)
    expect(page.locator("#truth-note")).to_contain_text("declared")
    expect(page.locator("#covered")).to_contain_text(f"of {TIMES} error bars cover the truth")
    assert view.spent is not None
    expect(page.locator("#spent-summary")).to_contain_text(f"{view.spent.devices} devices charged")
    # the budget binds: every second occurrence admits only the ε = 0.5 devices
    enrolled = [o.enrolled for o in result.occurrences]
    assert enrolled[1] < enrolled[0], enrolled
    assert enrolled[3] < enrolled[2], enrolled

    page.wait_for_timeout(300)
    page.screenshot(path=str(target), full_page=True)
    assert target.stat().st_size > 10_000
    assert midway.stat().st_size > 10_000
