"""Crash safety of a campaign (issue 29 item 6), with real processes: the next occurrence starts on
schedule after the server is killed and restarted, and the device store survives the driver's
SIGKILL in the middle of an occurrence; either way the campaign ends with the numbers of
``simulate_campaign`` (each device charged once per occurrence)."""

from __future__ import annotations

import asyncio
import math
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedldp.client.api.client import ApiClient
from fedldp.client.campaign.drive import device_id, run_campaign
from fedldp.client.campaign.simulate import CampaignResult, simulate_campaign
from fedldp.client.campaign.store import STORE_FILE
from fedldp.client.campaign.template import CampaignTemplate, load_template
from fedldp.client.swarm.server_process import ServerProcess, sqlite_url

pytestmark = pytest.mark.e2e

FEDLDP = [
    sys.executable,
    "-c",
    "import sys; from fedldp.client.cli.main import main; sys.exit(main())",
]
TEMPLATE = """\
protocol: classic-duchi
population:
  users: {users}
  distribution: two-point
  mean: -0.2
  epsilon-mix: "0.5:0.4,1:0.6"
  drift: {{mean-per-day: 0.05}}
every: 12h
times: 4
budget: {{epsilon: 1.5, period: 1d}}
"""


def _server(database: Path, log: Path) -> ServerProcess:
    process = ServerProcess(database_url=sqlite_url(database), log=log)
    process.start()
    try:
        process.wait_healthy()
    except BaseException:
        process.stop()
        raise
    return process


def _same(http: CampaignResult, local: CampaignResult) -> None:
    assert [(o.index, o.enrolled, o.refused) for o in http.occurrences] == [
        (o.index, o.enrolled, o.refused) for o in local.occurrences
    ]
    for a, b in zip(http.occurrences, local.occurrences, strict=True):
        assert isinstance(a.estimate, float)
        assert isinstance(b.estimate, float)
        assert math.isclose(a.estimate, b.estimate, rel_tol=1e-9, abs_tol=1e-12)
    np.testing.assert_array_equal(http.spent, local.spent)


def _template(folder: Path, users: int) -> tuple[Path, CampaignTemplate]:
    path = folder / "campaign.yaml"
    path.write_text(TEMPLATE.format(users=users))
    return path, load_template(path)


def test_the_next_occurrence_starts_on_schedule_after_a_server_restart(tmp_path: Path) -> None:
    _, template = _template(tmp_path, 400)
    database, log, store = tmp_path / "fedldp.db", tmp_path / "server.log", tmp_path / "devices"
    first = _server(database, log)
    try:
        asyncio.run(run_campaign(first.url, template, 5, store, limit=2))
    finally:
        first.kill()  # no shutdown at all
        first.stop()  # closes its log
    second = _server(database, log)
    try:
        result = asyncio.run(run_campaign(second.url, template, 5, store))

        async def view() -> tuple[float | None, list[float]]:
            async with ApiClient(second.url) as api:
                (campaign,) = (await api.list_campaigns()).campaigns
                return campaign.clock, [o.day for o in campaign.occurrences]

        clock, days = asyncio.run(view())
    finally:
        second.stop()
    assert days == [template.day(k) for k in range(4)] == [0.0, 0.5, 1.0, 1.5]
    assert clock == 1.5
    _same(result, simulate_campaign(template, 5))


def _count(path: Path, sql: str) -> int:
    with sqlite3.connect(path, timeout=5.0) as db:
        return int(db.execute(sql).fetchone()[0])


def test_the_device_store_survives_the_drivers_sigkill(tmp_path: Path) -> None:
    path, template = _template(tmp_path, 6000)
    database, log, store = tmp_path / "fedldp.db", tmp_path / "server.log", tmp_path / "devices"
    server = _server(database, log)
    try:
        argv = [*FEDLDP, "campaign", "run", str(path), "--server", server.url, "--seed", "9"]
        argv += ["--store", str(store), "--batch", "100"]
        driver = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stored = store / STORE_FILE
        deadline = time.monotonic() + 240.0
        # kill it once occurrence 1's devices are charged (write-ahead), before it finishes
        while time.monotonic() < deadline and driver.poll() is None:
            if stored.exists():
                try:
                    if _count(stored, "SELECT count(*) FROM spends WHERE occurrence = 1"):
                        break
                except sqlite3.OperationalError:
                    pass  # the tables are being made
            time.sleep(0.005)
        assert driver.poll() is None, driver.stderr.read() if driver.stderr else ""
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        assert driver.stderr is not None
        driver.stderr.close()
        assert _count(stored, "SELECT count(*) FROM occurrences") == 1  # killed mid-occurrence
        charged = _count(stored, "SELECT count(*) FROM spends")
        assert charged == 6000 + 2400  # occurrence 0's and 1's charges survived
        again = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr
        result = asyncio.run(run_campaign(server.url, template, 9, store))  # nothing left

        async def budget(device: str) -> float:
            async with ApiClient(server.url) as api:
                (campaign,) = (await api.list_campaigns()).campaigns
                return (await api.device_budget(campaign.id, device)).spent_total

        spent_0 = asyncio.run(budget(device_id(0)))
    finally:
        server.stop()
    local = simulate_campaign(template, 9)
    _same(result, local)
    assert spent_0 == local.spent[0]  # the server charged device 0 once per occurrence too
