"""A local server for notebooks (client/swarm/local.py): started healthy, stopped with its folder
removed by ``stop``, by the ``with`` block, or by the exit of the Python process that started it;
and a swarm run to its end from inside a running event loop (a Jupyter cell's)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fedldp
from fedldp.client.swarm.local import LocalServer, local_server

pytestmark = pytest.mark.e2e


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stop_ends_the_server_and_removes_its_folder() -> None:
    server = local_server()
    folder = Path(server.process.log.parent) if server.process.log else None
    assert server.running
    assert folder is not None
    assert folder.is_dir()
    assert "running=True" in repr(server)
    server.stop()
    server.stop()  # again: nothing
    assert not server.running
    assert not folder.exists()
    with pytest.raises(RuntimeError, match="make a new one"):
        server.start()


def test_the_server_stops_when_the_python_process_exits(tmp_path: Path) -> None:
    """A notebook's kernel that exits (restart, shutdown) takes its server with it: the child
    process below starts one, prints its pid and exits without stopping it."""
    script = (
        "import fedldp\n"
        "server = fedldp.local_server()\n"
        "print(server.process.process.pid, server.process.log.parent, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    pid_text, folder = done.stdout.split()
    pid = int(pid_text)
    deadline = time.monotonic() + 15
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):  # not ours to leave running, whatever the verdict
        os.kill(pid, 9)
        pytest.fail("the server outlived the process that started it")
    assert not Path(folder).exists()


async def test_run_swarm_sync_runs_inside_a_running_event_loop() -> None:
    """As in a Jupyter cell: this test runs on an event loop, where ``asyncio.run`` would
    refuse; the swarm then runs on a loop of its own and gives what ``await run_swarm`` gives."""
    spec = fedldp.PopulationSpec(users=600, samples=8, distribution="two-point", mean=0.2)
    create = ("user-mean", {"samples_per_user": 8})
    with LocalServer() as server:
        assert server.running
        blocking = fedldp.run_swarm_sync(
            server.url, create=create, population=spec, seed=4, batch=300, progress=False
        )
        awaited = await fedldp.run_swarm(
            server.url, create=create, population=spec, seed=4, batch=300, progress=False
        )
    assert blocking.result.phase == awaited.result.phase == "finished"
    assert blocking.result.estimate == awaited.result.estimate
    assert blocking.study_id != awaited.study_id
