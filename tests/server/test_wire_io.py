"""One send per answer (server/web/wire_io.py): the coalescing transport and uvicorn serving with
it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any, cast

import uvicorn

from fedldp.server.web import wire_io
from fedldp.server.web.wire_io import _Coalescing


class Recorder:
    """A transport that records what is done to it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str) -> str:
        return f"info {name}"


def coalescing(recorder: Recorder) -> _Coalescing:
    return _Coalescing(cast(asyncio.Transport, recorder), asyncio.get_running_loop())


async def test_the_writes_of_one_turn_go_out_in_one_write_at_the_next() -> None:
    recorder = Recorder()
    transport = coalescing(recorder)
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    transport.write(b"body")
    assert recorder.calls == []
    await asyncio.sleep(0)
    assert recorder.calls == [("write", b"HTTP/1.1 200 OK\r\n\r\nbody")]
    transport.write(b"next")
    await asyncio.sleep(0)
    assert recorder.calls[1:] == [("write", b"next")]
    assert transport.get_extra_info("peername") == "info peername"  # the rest: the transport's


async def test_close_sends_what_was_gathered_first_and_later_writes_are_dropped() -> None:
    recorder = Recorder()
    transport = coalescing(recorder)
    transport.write(b"last words")
    transport.close()
    assert recorder.calls == [("write", b"last words"), ("close", b"")]
    transport.write(b"too late")
    await asyncio.sleep(0)
    assert recorder.calls == [("write", b"last words"), ("close", b"")]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers each request with its path, in two body chunks."""
    if scope["type"] != "http":
        return
    path = scope["path"].encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": path, "more_body": True})
    await send({"type": "http.response.body", "body": b"!"})


async def test_uvicorn_serves_keep_alive_and_chunked_answers_through_it() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=wire_io.PROTOCOL, log_level="error"
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        for _ in range(1000):  # up to 10 s
            if server.started:
                break
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = []
        for _ in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"transfer-encoding: chunked" in head
            answers.append(await reader.readuntil(b"0\r\n\r\n"))
        assert answers == [b"4\r\n/one\r\n1\r\n!\r\n0\r\n\r\n", b"4\r\n/two\r\n1\r\n!\r\n0\r\n\r\n"]
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    finally:
        server.should_exit = True
        await serving
