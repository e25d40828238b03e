"""The lean keep-alive pool (client/api/connection.py) against a scripted HTTP server in the test's
event loop: connections are reused and bounded, every answer framing is read (length, chunked,
until close), and each failure surfaces as the httpx exception ``ApiClient`` retries on.

A real fedldp server behind it runs in tests/e2e (the swarm's per-user and batch modes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from fedldp.client.api.client import ApiClient, NotFoundError
from fedldp.client.api.connection import ConnectionPool
from fedldp.client.api.retry import RetryPolicy, failure_reason
from fedldp.client.swarm.server_process import free_port

Reply = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request (its head and body); False closes the connection."""


def answer(status: int, body: bytes, *extra: str) -> bytes:
    head = f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\n" + "".join(
        f"{h}\r\n" for h in extra
    )
    return (head + "\r\n").encode() + body


class Server:
    """A scripted HTTP/1.1 server: counts connections and requests, at most ``busy`` at once."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.connections = 0
        self.requests: list[bytes] = []
        self.busy = 0
        self.most_busy = 0
        self.handlers: set[asyncio.Task[None]] = set()
        self.writers: set[asyncio.StreamWriter] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                self.busy += 1
                self.most_busy = max(self.most_busy, self.busy)
                try:
                    keep = await self.reply(request, writer)
                finally:
                    self.busy -= 1
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.handlers.discard(task)


@asynccontextmanager
async def serving(reply: Reply) -> AsyncIterator[tuple[Server, str]]:
    server = Server(reply)
    port = free_port()
    listener = await asyncio.start_server(server.serve, "127.0.0.1", port)
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        listener.close()
        for writer in server.writers:  # end the connections' handlers before the loop ends
            writer.close()
        await asyncio.gather(*server.handlers)


def pool(url: str, connections: int = 2, timeout: float = 5.0) -> ConnectionPool:
    return ConnectionPool(url, max_connections=connections, timeout=timeout, connect_timeout=2.0)


async def echo(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(answer(200, request.split(b"\r\n", 1)[0]))
    return True


async def test_connections_are_kept_alive_and_bounded() -> None:
    async def slow(request: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.01)
        return await echo(request, writer)

    async with serving(slow) as (server, url):
        p = pool(url, connections=3)
        answers = await asyncio.gather(*(p.request("GET", f"/r/{i}", {}, None) for i in range(40)))
        await p.aclose()
    assert [a.content for a in answers] == [f"GET /r/{i} HTTP/1.1".encode() for i in range(40)]
    assert server.connections == 3  # each reused for many requests, never more than the bound
    assert server.most_busy == 3
    assert len(server.requests) == 40


async def test_requests_carry_their_headers_body_and_host() -> None:
    async with serving(echo) as (server, url):
        p = ConnectionPool(
            url + "/base",
            max_connections=1,
            timeout=5.0,
            connect_timeout=2.0,
            headers={"accept": "application/json"},
        )
        await p.request("POST", "/x", {"authorization": "Bearer t"}, b'{"a":1}')
        await p.aclose()
    sent = server.requests[0]
    assert sent.startswith(b"POST /base/x HTTP/1.1\r\n")
    for header in (b"host: 127.0.0.1:", b"accept: application/json", b"authorization: Bearer t"):
        assert header in sent
    assert sent.endswith(b'content-length: 7\r\n\r\n{"a":1}')


@pytest.mark.parametrize(
    ("raw", "body"),
    [
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n",
            b"abcde",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\nz\r\n0\r\nx-t: 1\r\n\r\n",
            b"z",
        ),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
    ],
)
async def test_chunked_and_empty_answers_are_read_and_the_connection_reused(
    raw: bytes, body: bytes
) -> None:
    async def framed(request: bytes, writer: asyncio.StreamWriter) -> bool:
        for i in range(0, len(raw), 5):  # in pieces: the parser must wait for the rest
            writer.write(raw[i : i + 5])
            await writer.drain()
            await asyncio.sleep(0)
        return True

    async with serving(framed) as (server, url):
        p = pool(url, connections=1)
        first = await p.request("GET", "/", {}, None)
        second = await p.request("GET", "/", {}, None)
        await p.aclose()
    assert first.content == second.content == body
    assert server.connections == 1


async def test_an_answer_without_length_runs_until_close_and_is_not_reused() -> None:
    async def close_delimited(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it")
        return False

    async with serving(close_delimited) as (server, url):
        p = pool(url, connections=1)
        assert (await p.request("GET", "/", {}, None)).content == b"all of it"
        assert (await p.request("GET", "/", {}, None)).content == b"all of it"
        await p.aclose()
    assert server.connections == 2


async def test_connection_close_is_honoured() -> None:
    async def closing(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(200, b"x", "connection: close"))
        return True  # the client must not send on it again anyway

    async with serving(closing) as (server, url):
        p = pool(url, connections=1)
        for _ in range(3):
            assert (await p.request("GET", "/", {}, None)).headers["connection"] == "close"
        await p.aclose()
    assert server.connections == 3


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    async def once(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(200, b"x"))
        return False  # closes after answering, without saying so (a keep-alive timeout)

    async with serving(once) as (server, url):
        p = pool(url, connections=1)
        await p.request("GET", "/", {}, None)
        await asyncio.sleep(0.05)  # the close reaches the client
        assert (await p.request("POST", "/", {}, b"{}")).content == b"x"
        await p.aclose()
    assert server.connections == 2


async def test_a_server_that_hangs_up_mid_answer_is_a_protocol_error() -> None:
    async def hang_up(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        return False

    async with serving(hang_up) as (_, url):
        p = pool(url)
        with pytest.raises(httpx.RemoteProtocolError):
            await p.request("GET", "/", {}, None)
        await p.aclose()


async def test_garbage_is_a_protocol_error() -> None:
    async def garbage(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        return True

    async with serving(garbage) as (_, url):
        p = pool(url)
        with pytest.raises(httpx.RemoteProtocolError, match="not an HTTP answer"):
            await p.request("GET", "/", {}, None)
        await p.aclose()


async def test_a_slow_answer_times_out_and_frees_its_connection() -> None:
    async def slow_first(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if b"/slow" in request:
            await asyncio.sleep(1.0)
        writer.write(answer(200, b"ok"))
        return True

    async with serving(slow_first) as (_, url):
        p = pool(url, connections=1, timeout=0.2)
        with pytest.raises(httpx.ReadTimeout):
            await p.request("GET", "/slow", {}, None)
        assert (await p.request("GET", "/fast", {}, None)).content == b"ok"
        await p.aclose()


async def test_waiting_for_a_busy_pool_times_out() -> None:
    async def slow(request: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.5)
        writer.write(answer(200, b"ok"))
        return True

    async with serving(slow) as (_, url):
        p = pool(url, connections=1, timeout=0.3)
        first = asyncio.create_task(p.request("GET", "/", {}, None))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(p.request("GET", "/", {}, None))
        await asyncio.sleep(0.01)
        with pytest.raises(httpx.PoolTimeout):  # the first frees the slot only at 0.3 s
            await p.request("GET", "/", {}, None)
        for task in (first, second):
            with pytest.raises(httpx.ReadTimeout):
                await task
        await p.aclose()


async def test_a_refused_connection_is_named_and_retried_by_the_client() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    p = pool(url)
    with pytest.raises(httpx.ConnectError) as refused:
        await p.request("GET", "/", {}, None)
    assert failure_reason(refused.value) == "connection refused"
    delays: list[float] = []

    async def no_wait(seconds: float) -> None:
        delays.append(seconds)

    async with ApiClient(url, retry=RetryPolicy(attempts=3), sleep=no_wait) as api:
        with pytest.raises(Exception, match=r"failed 3 times.*connection refused"):
            await api.list_studies()
    assert len(delays) == 2


async def test_the_api_client_reads_error_codes_through_the_pool() -> None:
    async def not_found(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(404, b'{"code": "unknown_study", "detail": "no study s"}'))
        return True

    async with serving(not_found) as (server, url), ApiClient(url) as api:
        with pytest.raises(NotFoundError) as info:
            await api.study("s")
    assert (info.value.code, info.value.detail, info.value.status) == (
        "unknown_study",
        "no study s",
        404,
    )
    assert server.requests[0].startswith(b"GET /v1/studies/s HTTP/1.1")


def test_only_plain_http_and_a_positive_bound() -> None:
    with pytest.raises(ValueError, match="plain http"):
        pool("https://example.org")
    with pytest.raises(ValueError, match="max_connections"):
        pool("http://127.0.0.1:1", connections=0)
