"""A lean HTTP/1.1 keep-alive client: the swarm's transport to a real server.

``httpx`` spends about as much CPU per request as the server does (≈ 0.1 ms in the client object,
and as much again in httpcore's pool, whose bookkeeping scans every connection for every queued
request, plus a failed ``import sniffio`` per lock where that package is absent). A simulated
population sends each user's requests on its own, tens of thousands of small requests a second,
so the swarm talks to the server through this pool instead: a fixed number of persistent
connections, each an ``asyncio.Protocol`` that writes one request and parses one answer at a time
(``Content-Length``, chunked, or until close), idle connections kept in a stack (O(1) to take
one), and callers beyond the connection count queued first come, first served.

It raises httpx's exceptions (``ConnectError`` with the ``OSError`` as cause, ``ConnectTimeout``,
``PoolTimeout``, ``ReadTimeout``, ``ReadError``, ``RemoteProtocolError``) so that
``fedldp.client.api.client.ApiClient`` retries its failures exactly as it retries httpx's. A
connection idle for longer than ``IDLE_S`` (below uvicorn's keep-alive timeout of 5 s) or closed by
the server is dropped before use rather than risk a request on a socket the server is closing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

__all__ = ["Answer", "ConnectionPool"]

IDLE_S = 4.0
"""How long an idle connection is reused (uvicorn closes them after 5 s)."""
MAX_HEAD = 64 * 1024
"""Largest answer head (status line and headers) accepted."""


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status, headers (names in lower case) and body."""

    status: int
    headers: dict[str, str]
    content: bytes


class _Parser:
    """Incremental parser of one HTTP/1.1 answer (``feed`` until it returns True)."""

    def __init__(self, head_only: bool) -> None:
        self.buffer = bytearray()
        self.head_only = head_only  # the answer to HEAD has no body
        self.status = 0
        self.headers: dict[str, str] = {}
        self.length: int | None = None
        self.chunked = False
        self.body = bytearray()
        self.keep_alive = True
        self._in_body = False

    def feed(self, data: bytes) -> bool:
        self.buffer += data
        if not self._in_body:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD:
                    raise httpx.RemoteProtocolError("the answer's head is too large")
                return False
            self._head(bytes(self.buffer[:end]))
            del self.buffer[: end + 4]
            self._in_body = True
        if self.head_only or self.status in (204, 304) or 100 <= self.status < 200:
            return True
        if self.chunked:
            return self._chunks()
        if self.length is None:
            return False  # the body runs until the server closes the connection
        if len(self.buffer) < self.length:
            return False
        self.body = self.buffer[: self.length]
        return True

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        try:
            self.status = int(rest[:3])
        except ValueError:
            raise httpx.RemoteProtocolError(f"not an HTTP answer: {lines[0][:80]!r}") from None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        connection = self.headers.get("connection", "").lower()
        self.keep_alive = connection != "close" and (
            version == "HTTP/1.1" or connection == "keep-alive"
        )
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self.chunked = True
        elif "content-length" in self.headers:
            self.length = int(self.headers["content-length"])
        elif not (self.head_only or self.status in (204, 304) or 100 <= self.status < 200):
            self.keep_alive = False  # the body runs until the server closes the connection

    def _chunks(self) -> bool:
        while True:
            end = self.buffer.find(b"\r\n")
            if end < 0:
                return False
            size = int(bytes(self.buffer[:end]).split(b";")[0], 16)
            if size == 0:
                return self.buffer.find(b"\r\n\r\n", end) >= 0  # past any trailers
            if len(self.buffer) < end + 2 + size + 2:
                return False
            self.body += self.buffer[end + 2 : end + 2 + size]
            del self.buffer[: end + 2 + size + 2]

    def eof(self) -> bool:
        """The connection closed: True if that completes an answer (read until close)."""
        if self._in_body and not self.chunked and self.length is None:
            self.body = self.buffer
            return True
        return False


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = time.monotonic()
        self._parser: _Parser | None = None
        self._answer: asyncio.Future[Answer] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        parser, answer = self._parser, self._answer
        if parser is None or answer is None or answer.done():
            self.close()  # bytes nobody asked for: the connection is out of step
            return
        try:
            complete = parser.feed(data)
        except (httpx.RemoteProtocolError, ValueError) as exc:
            answer.set_exception(httpx.RemoteProtocolError(f"a malformed answer: {exc}"))
            self.close()
            return
        if complete:
            self._finish(parser)

    def _finish(self, parser: _Parser) -> None:
        assert self._answer is not None
        if not parser.keep_alive:
            self.close()
        self._answer.set_result(Answer(parser.status, parser.headers, bytes(parser.body)))
        self._parser = self._answer = None

    def eof_received(self) -> bool | None:
        return None  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        parser, answer = self._parser, self._answer
        if parser is None or answer is None or answer.done():
            return
        if exc is None and parser.eof():
            self._finish(parser)
            return
        error = httpx.ReadError(str(exc)) if exc is not None else None
        answer.set_exception(
            error or httpx.RemoteProtocolError("the server closed the connection without answering")
        )

    async def exchange(self, request: bytes, head_only: bool) -> Answer:
        assert self.transport is not None
        assert self._answer is None
        self._parser = _Parser(head_only)
        self._answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self._answer

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class ConnectionPool:
    """Up to ``max_connections`` keep-alive connections to the server at ``base_url``."""

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        timeout: float,
        connect_timeout: float,
        headers: dict[str, str] | None = None,
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme != "http" or url.hostname is None:
            raise ValueError(f"the lean client speaks plain http, not {base_url!r}")
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self.host = url.hostname
        self.port = url.port or 80
        self.prefix = url.path.rstrip("/")
        self.max_connections = max_connections
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        authority = self.host if url.port is None else f"{self.host}:{self.port}"
        self._fixed = "".join(
            f"{k}: {v}\r\n" for k, v in {"host": authority, **(headers or {})}.items()
        )
        self._idle: list[_Connection] = []
        self._open = 0
        self._waiters: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()
        self._closed = False

    async def request(
        self, method: str, path: str, headers: dict[str, str], content: bytes | None
    ) -> Answer:
        """Send one request and return its answer (httpx's exceptions on failure)."""
        head = f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._fixed}"
        for name, value in headers.items():
            head += f"{name}: {value}\r\n"
        if content is not None:
            head += f"content-length: {len(content)}\r\n"
        data = (head + "\r\n").encode("latin-1") + (content or b"")
        connection = await self._acquire()
        while connection.closed:  # closed by the server while handed over: nothing was sent
            self._drop(connection)
            connection = await self._acquire()
        reusable = False
        try:
            async with asyncio.timeout(self.timeout):
                answer = await connection.exchange(data, method == "HEAD")
            reusable = not connection.closed
        except TimeoutError:
            raise httpx.ReadTimeout(f"no answer to {method} {path} in {self.timeout:g} s") from None
        finally:
            self._release(connection, reusable)
        return answer

    async def _acquire(self) -> _Connection:
        if self._closed:
            raise httpx.PoolTimeout("the connection pool is closed")
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and now - connection.idle_since < IDLE_S:
                return connection
            self._drop(connection)
        if self._open < self.max_connections:
            self._open += 1
            try:
                return await self._connect()
            except BaseException:
                self._open -= 1
                self._wake()
                raise
        waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self.timeout):
                given = await waiter
        except BaseException as exc:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            if waiter.done() and not waiter.cancelled():  # handed over as we gave up
                late = waiter.result()
                if late is None:
                    self._wake()
                else:
                    self._release(late, not late.closed)
            if isinstance(exc, TimeoutError):
                raise httpx.PoolTimeout(f"no free connection in {self.timeout:g} s") from None
            raise
        if given is None:  # a slot freed up: open a connection of our own
            return await self._acquire()
        return given

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(_Connection, self.host, self.port)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {self.host}:{self.port} timed out") from None
        except OSError as exc:
            cause: OSError = exc
            if f"[Errno {errno.ECONNREFUSED}]" in str(exc):  # every address refused it
                cause = ConnectionRefusedError(errno.ECONNREFUSED, str(exc))
            raise httpx.ConnectError(f"{self.host}:{self.port}: {exc}") from cause
        return connection

    def _release(self, connection: _Connection, reusable: bool) -> None:
        if not reusable or self._closed:
            connection.close()
            self._drop(connection)
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._open -= 1
        self._wake()

    def _wake(self) -> None:
        """A connection slot is free: the first waiter opens a connection of its own."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def aclose(self) -> None:
        self._closed = True
        for connection in self._idle:
            connection.close()
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(httpx.PoolTimeout("the connection pool is closed"))
