"""Request body caps, enforced while the body streams in (before it is read whole or parsed).

A pure ASGI middleware: a request whose ``Content-Length`` exceeds its route's cap is refused at
once with 413 ``body_too_large``; one without (chunked) or lying about it is counted chunk by
chunk, and the chunk that crosses the cap raises ``BodyTooLarge`` inside the app, whose error
handler answers 413. The batch routes (enrollment, task and report batches, predictions) get
``Settings.max_batch_body_bytes``, every other route ``Settings.max_body_bytes``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fedldp.server.errors import BodyTooLarge

__all__ = ["BATCH_SUFFIXES", "BodyLimit"]

BATCH_SUFFIXES = ("/participants/batch", "/tasks", "/reports/batch", "/predict")
"""The routes whose bodies may carry many participants (or feature rows)."""


class BodyLimit:
    def __init__(self, app: ASGIApp, *, single: int, batch: int) -> None:
        self.app = app
        self.single = single
        self.batch = batch

    def cap(self, path: str) -> int:
        return self.batch if path.endswith(BATCH_SUFFIXES) else self.single

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = self.cap(scope["path"])
        length = _content_length(scope)
        if length is not None and length > cap:
            await _refuse(send, cap, length)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > cap:
                    raise BodyTooLarge(f"the request body exceeds this route's {cap} bytes")
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, cap: int, length: int) -> None:
    body: dict[str, Any] = {
        "code": BodyTooLarge.code,
        "detail": f"the request body of {length} bytes exceeds this route's {cap} bytes",
    }
    content = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": BodyTooLarge.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(content)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": content})
