"""Faults survived: ``benchmarks/bench_faults.py`` at CI size (a per-user swarm of 300 users and a
batch swarm of 1,200, a 1 s fault), every scenario.

Each scenario injects its fault mid-round 0 of both swarms (the bench checks that both studies
are running with round 0 partly received before it begins; the migration kill comes while the
swarms wait for a server) and must end, for each swarm, with the in-process simulator's estimate
for the same seed (1e-9 relative), every round closed with its whole cohort, and exactly one
stored report per (round, cohort member); the bench exits 1 on any other outcome, and the fault
must have been felt: 503s where the database failed, refused connections where the server was
down. Scenarios that cannot run here (not root, no PostgreSQL, no nginx) are skipped with the
bench's reason. The four run at once, each in its own bench process, so that the whole takes
well under a minute: none disturbs another (the PostgreSQL restart is of a cluster the bench
makes for it; the full disk is a tmpfs of its own).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_faults.py"
SCENARIOS = ("postgres-restart", "disk-full", "migration-kill", "replica-kill")
Outcome = tuple[int, str, dict[str, Any] | None]
"""The bench's exit status, its output, and what it wrote with ``--json``."""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    folder = tmp_path_factory.mktemp("faults")
    found: dict[str, Outcome] = {}
    running = []
    for name in SCENARIOS:
        out = folder / f"{name}.json"
        command = [sys.executable, str(BENCH), "--size", "ci", "--fault-s", "1"]
        command += ["--scenario", name, "--json", str(out)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        running.append((name, process, out))
    for name, process, out in running:
        try:
            output, _ = process.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            # interrupted, not killed: its cleanup drops its cluster, unmounts its disk
            process.send_signal(signal.SIGINT)
            output, _ = process.communicate(timeout=60)
        data = json.loads(out.read_text()) if out.exists() else None
        found[name] = (process.returncode, output.decode(errors="replace"), data)
    return found


def felt_503s(rows: list[dict[str, Any]]) -> bool:
    """Each swarm was refused with 503 while the database was down or its disk full (the bench
    empties SQLite's WAL first, so that every write must grow it)."""
    return all(r["got_503"] > 0 for r in rows)


def felt_refusals(rows: list[dict[str, Any]]) -> bool:
    """Each swarm found no server listening (refused connections) and retried."""
    return all(r["broken"] > 0 and r["retries"] > 0 for r in rows)


def felt_nothing_required(rows: list[dict[str, Any]]) -> bool:
    """nginx passes what the dead replica refuses on to the other one: a swarm sees a 502 only
    for a request in flight at the kill (then retried), and may see none."""
    return True


FELT: dict[str, Callable[[list[dict[str, Any]]], bool]] = {
    "postgres-restart": felt_503s,
    "disk-full": felt_503s,
    "migration-kill": felt_refusals,
    "replica-kill": felt_nothing_required,
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_both_swarms_end_with_the_simulators_estimate_after_the_fault(
    outcomes: dict[str, Outcome], scenario: str
) -> None:
    code, output, data = outcomes[scenario]
    assert data is not None, output
    if scenario in data["skipped"]:
        pytest.skip(data["skipped"][scenario])
    assert code == 0, output
    rows = data["rows"]
    assert [(r["scenario"], r["mode"]) for r in rows] == [
        (scenario, "per-user"),
        (scenario, "batch"),
    ], output
    assert [r["outcome"] for r in rows] == ["estimate equal"] * 2, output
    assert all(r["fault_s"] >= 1.0 for r in rows), output
    # every failure the swarms saw was retried, and there was no other (no 500)
    assert all(r["retries"] == r["got_502"] + r["got_503"] + r["broken"] for r in rows), output
    assert FELT[scenario](rows), output
