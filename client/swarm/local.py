"""A fedldp server on this machine for a notebook or a script: ``python -m fedldp.server`` on a
free loopback port with a fresh SQLite database in a temporary folder (``ServerProcess``).

``local_server()`` returns it started and healthy. It stops, and its folder (database and log)
is removed, when its ``with`` block ends, when ``stop()`` is called, or when this Python process
exits (``atexit``): a notebook whose kernel is restarted or shut down leaves no server behind.
A kernel killed outright (SIGKILL) runs no exit handler; its server then keeps its port until
stopped by hand.

>>> import asyncio
>>> from fedldp import ApiClient, local_server
>>> async def status(url: str) -> str:
...     async with ApiClient(url) as api:
...         return (await api.health()).status
>>> with local_server() as server:
...     print(asyncio.run(status(server.url)), server.running)
ok True
>>> server.running
False
"""

from __future__ import annotations

import atexit
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from fedldp.client.swarm.server_process import ServerProcess, sqlite_url

__all__ = ["LocalServer", "local_server"]


class LocalServer:
    """One server program and its temporary folder (see the module docstring). ``admin_key``
    sets ``FEDLDP_ADMIN_KEY`` (creating and starting studies then need it); ``env`` adds other
    ``FEDLDP_*`` settings; ``database_url`` replaces the temporary SQLite file."""

    def __init__(
        self,
        *,
        admin_key: str | None = None,
        database_url: str | None = None,
        env: Mapping[str, str] | None = None,
        prefix: str = "fedldp-server-",
    ) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix=prefix)
        folder = Path(self._folder.name)
        settings = dict(env or {})
        if admin_key is not None:
            settings["FEDLDP_ADMIN_KEY"] = admin_key
        self.admin_key = admin_key
        self.process = ServerProcess(
            database_url=database_url or sqlite_url(folder / "fedldp.db"),
            env=settings,
            log=folder / "server.log",
        )
        self._stopped = False

    @property
    def url(self) -> str:
        """The server's base URL (``http://127.0.0.1:PORT``)."""
        return self.process.url

    @property
    def running(self) -> bool:
        process = self.process.process
        return process is not None and process.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        """The last ``lines`` lines of the server's log, joined by " | "."""
        return self.process.log_tail(lines)

    def start(self, timeout: float = 60.0) -> LocalServer:
        """Start the server and wait until ``GET /health`` answers (SwarmError, with the log's
        last lines, if it exits or does not answer within ``timeout`` seconds)."""
        if self._stopped:
            raise RuntimeError("this server was stopped and its folder removed: make a new one")
        atexit.register(self.stop)
        self.process.start()
        try:
            self.process.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and remove its folder; again is
        a no-op."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        try:
            self.process.stop()
        finally:
            self._folder.cleanup()

    close = stop

    def __enter__(self) -> LocalServer:
        if self.process.process is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LocalServer({self.url!r}, running={self.running})"


def local_server(
    *,
    admin_key: str | None = None,
    database_url: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> LocalServer:
    """A started, healthy ``LocalServer``: use it in a ``with`` block, or keep it for the
    notebook's life (it stops when the kernel exits, or on ``stop()``)."""
    return LocalServer(admin_key=admin_key, database_url=database_url, env=env).start(timeout)
