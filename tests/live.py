"""A real server for tests that need one: ``python -m fedldp.server`` on an SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fedldp.client.swarm.server_process import ServerProcess, sqlite_url


@contextmanager
def sqlite_server(folder: Path) -> Iterator[ServerProcess]:
    """A healthy server on ``folder/fedldp.db`` (its log in ``folder/server.log``), stopped on
    exit."""
    log = folder / "server.log"
    with ServerProcess(database_url=sqlite_url(folder / "fedldp.db"), log=log) as process:
        process.wait_healthy()
        yield process
