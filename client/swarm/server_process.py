"""Run a fedldp server program (``python -m fedldp.server``): as a child process to start and
stop (``ServerProcess``), or in place of this process (``exec_server``).

The client side never imports ``server/`` (docs/architecture.md, convention 1); it runs it as a
program, configured through its ``FEDLDP_*`` environment (``FEDLDP_DATABASE_URL``,
``FEDLDP_ADMIN_KEY``, ...). ``ServerProcess`` serves ``fedldp run`` and the end-to-end tests (which
kill and restart it); ``exec_server`` serves ``fedldp server`` and ``fedldp db``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

from fedldp.client.swarm.agents import SwarmError

__all__ = ["ServerProcess", "exec_server", "free_port", "server_command", "sqlite_url"]


def server_command(args: Sequence[str]) -> list[str]:
    """The command line of ``python -m fedldp.server ARGS`` with this interpreter."""
    return [sys.executable, "-m", "fedldp.server", *args]


def exec_server(args: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Become ``python -m fedldp.server ARGS``, with ``env`` added to the environment.

    On POSIX this process is replaced (``os.execve``): its pid is the server's, so the caller's
    signals, SIGKILL included, reach the server itself and no child outlives it. Elsewhere the
    server runs as a child and its exit status is returned."""
    command = server_command(args)
    environment = {**os.environ, **(env or {})}
    if os.name == "posix":
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, command, environment)
    return subprocess.run(command, env=environment, check=False).returncode


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def sqlite_url(path: Path) -> str:
    """The database URL of an SQLite file."""
    return f"sqlite:///{path.resolve()}"


class ServerProcess:
    """``python -m fedldp.server --host H --port P`` with ``env`` added to this process's
    environment.

    Output goes to ``log`` (a file, appended to) or is inherited when ``log`` is None.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        database_url: str | None = None,
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
        new_session: bool = False,
    ) -> None:
        self.host = host
        self.port = free_port(host) if port is None else port
        self.env = dict(env or {})
        if database_url is not None:
            self.env["FEDLDP_DATABASE_URL"] = database_url
        self.log = log
        self.new_session = new_session
        self.process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def command(self) -> list[str]:
        return server_command(["--host", self.host, "--port", str(self.port)])

    def start(self) -> ServerProcess:
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("the server is already running")
        output: IO[bytes] | None = None
        if self.log is not None:
            self._log_file = output = self.log.open("ab")
        self.process = subprocess.Popen(
            self.command,
            env={**os.environ, **self.env},
            stdout=output,
            stderr=subprocess.STDOUT if output is not None else None,
            start_new_session=self.new_session,
        )
        return self

    def log_tail(self, lines: int = 5) -> str:
        if self.log is None or not self.log.exists():
            return ""
        tail = self.log.read_text(errors="replace").strip().splitlines()[-lines:]
        return " | ".join(line.strip() for line in tail)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Block until ``GET /health`` answers 200; SwarmError if the server exits or hangs."""
        assert self.process is not None, "start() first"
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.url, timeout=2.0) as http:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise SwarmError(
                        "server_exited",
                        f"the server exited with status {code} while starting"
                        + (f": {self.log_tail()}" if self.log_tail() else ""),
                        server_side=True,
                    )
                try:
                    if http.get("/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass  # not listening yet
                if time.monotonic() > deadline:
                    raise SwarmError(
                        "server_timeout",
                        f"the server at {self.url} did not become healthy in {timeout:g} s",
                        server_side=True,
                    )
                time.sleep(0.1)

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: no shutdown at all (the crash tests)."""
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def wait(self) -> int:
        assert self.process is not None, "start() first"
        return self.process.wait()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` s; the exit status (None if never started)."""
        if self.process is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return code

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
