"""The dashboard with a plugin protocol (issue 25 item 5; STYLE rule 17: assert what a person
sees): the example plugin (examples/protocol-plugin, ``example-krr`` of ``fedldp-example-krr``)
installed beside a real server, a study of it run by ``fedldp swarm``; the list and the study
page name the protocol's origin and version as the study recorded them, the round's output
(the plugin's own fields) is drawn, and the estimate shown equals ``GET …/result``. The page is
saved as a screenshot (to ``$FEDLDP_DASHBOARD_PLUGIN_SCREENSHOT`` when set)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fedldp.client.swarm.server_process import ServerProcess
from fedldp.protocol.core.wire import ResultView, StudyView
from tests.e2e.test_dashboard import browser  # noqa: F401  (the fixture)
from tests.live import sqlite_server
from tests.plugins import pip_installed

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "protocol-plugin"
PROJECT = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
FEDLDP = str(Path(sys.executable).parent / "fedldp")
ITEMS = 5


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server started after the example plugin was installed (so it serves it)."""
    with pip_installed(EXAMPLE, PROJECT["name"]), sqlite_server(tmp_path) as process:
        yield process


def test_the_dashboard_names_a_plugin_protocols_origin_and_draws_its_study(
    server: ServerProcess,
    browser: object,  # noqa: F811
    tmp_path: Path,
) -> None:
    from playwright.sync_api import Browser, expect

    assert isinstance(browser, Browser)
    swarm = [
        *(FEDLDP, "swarm", "--server", server.url, "--create", "example-krr"),
        *("--name", "krr-on-the-dashboard", "--seed", "4", "--batch", "500", "--json", "--quiet"),
        *("--users", "3000", "--samples", "3", "--distribution", "categorical"),
        *("--items", str(ITEMS), "--epsilon-mix", "1:0.5,2:0.5"),
    ]
    ran = subprocess.run(swarm, capture_output=True, text=True, timeout=300, check=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    study_id = json.loads(ran.stdout)["study_id"]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        study = StudyView.model_validate_json(http.get(f"/v1/studies/{study_id}").content)
        result = ResultView.model_validate_json(http.get(f"/v1/studies/{study_id}/result").content)
    plugin = f"{PROJECT['name']} {PROJECT['version']}"
    assert (study.protocol_origin, study.protocol_version) == (PROJECT["name"], PROJECT["version"])
    assert isinstance(result.estimate, list)
    assert len(result.estimate) == ITEMS

    page = browser.new_page(viewport={"width": 1280, "height": 1500})
    page.goto(server.url + "/")
    row = page.locator(f'tr[data-study="{study.id}"]')
    expect(row).to_contain_text("krr-on-the-dashboard")
    expect(row.get_by_test_id("protocol")).to_contain_text("example-krr")
    expect(row.get_by_test_id("protocol-origin")).to_have_text(plugin)
    row.click()

    expect(page.locator("#phase")).to_have_text("finished")
    expect(page.locator("#protocol-line")).to_contain_text(f"example-krr (plugin {plugin})")
    code = page.locator("#study-facts dt", has_text="protocol code").locator(
        "xpath=following-sibling::dd[1]"
    )
    expect(code).to_have_text(f"plugin {plugin}")
    shown = page.locator("#result-estimate")
    expect(shown).to_be_visible(timeout=30_000)
    assert json.loads(shown.get_attribute("data-value") or "null") == result.estimate
    # the round's output, fields only this plugin names: its frequencies drawn, its numbers listed
    expect(page.get_by_role("img", name=f"frequencies ({ITEMS} values)")).to_be_visible()
    numbers = page.get_by_test_id("output-numbers")
    expect(numbers).to_contain_text("count")
    expect(numbers).to_contain_text("3000")
    page.wait_for_timeout(300)  # the ledger histogram's last fetch
    target = Path(
        os.environ.get("FEDLDP_DASHBOARD_PLUGIN_SCREENSHOT", str(tmp_path / "dashboard.png"))
    )
    page.screenshot(path=str(target), full_page=True)
    assert target.stat().st_size > 10_000
