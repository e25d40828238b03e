"""Request body caps, enforced while the body streams in (before it is read whole or parsed).

A pure ASGI middleware: a request whose ``Content-Length`` exceeds its route's byte cap is refused
at once with 413 ``body_too_large``; one without (chunked) or lying about it is counted chunk by
chunk, and the chunk that crosses the cap raises ``BodyTooLarge`` inside the app, whose error
handler answers 413: nothing past the cap is read.

Every route but the batch routes gets ``Settings.max_body_bytes``. Each batch route (enrollment,
task and report batches, predictions) gets a cap of its own (``BATCH_CAPS``), derived from the
number of items it takes (``MAX_BATCH`` participants, ``MAX_PREDICT_ROWS`` rows) and the largest
legitimate item, measured on that item written out with the longest float64 literal there is, plus
``MARGIN``; ``Settings.max_batch_body_bytes``, when set, replaces them all. A batch body is also
counted by items while it streams in (``ItemCount``, a scan of its JSON structure at C speed,
strings skipped): a JSON array or object of more than ``MAX_BATCH`` members (no field of a batch
takes more), or more than ``MAX_VALUES`` values in all (the most of the largest legitimate body of
any batch route, plus the margin), is refused with 413 by the chunk that holds the excess. A body
of 20 million ε's is thus refused after its first 200 kB, before it is held or parsed, where it
was read and parsed whole (1 GB of memory) and refused only by validation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fedldp.protocol.core.wire import MAX_BATCH, MAX_ID, MAX_PREDICT_ROWS
from fedldp.protocol.core.wire.common import MAX_SAMPLES
from fedldp.protocol.semi_feature.common import MAX_DIMENSION
from fedldp.server.auth import tokens_for
from fedldp.server.errors import BodyTooLarge

__all__ = [
    "BATCH_CAPS",
    "LEGIT_ITEMS",
    "MARGIN",
    "MAX_VALUES",
    "PACKED_ROW",
    "BodyLimit",
    "ItemCount",
    "json_count",
]

MARGIN = 0.25
"""Room left above the largest legitimate body of each batch route (bytes and values)."""

PACKED_ROW = 192
"""Numbers per packed report row that a full report batch (``MAX_BATCH`` rows) may carry: e.g. a
192-dimensional vector payload; larger rows go in proportionally smaller batches (the swarm's
``batch`` option)."""

_EPSILON = 1.2345678901234567e-06
"""An ε of the longest literal (22 characters; ε lies in [1e-6, 1e3])."""
_UNIT = 2.2250738585072014e-308
"""A float64 in [0, 1] of the longest literal (23 characters): a public feature."""
_TOKEN = tokens_for("00" * 32, "study", [MAX_ID])[0]
"""A participant token (every one has the same length)."""


def _packed(numbers: int) -> str:
    """A ``packed`` string of ``numbers`` float64 numbers (base64, 4 characters per 3 bytes)."""
    return "A" * (-(-8 * numbers // 3) * 4)


LEGIT_ITEMS: dict[str, tuple[int, dict[str, Any]]] = {
    # a participant of a semi-feature study of the largest dimension: its public features (in
    # [0, 1]) and their mask (0.0 or 1.0), MAX_DIMENSION numbers each, a sample count and an
    # explicit id; the list form (one object each) is the longer of the two forms of a batch
    "/participants/batch": (
        MAX_BATCH,
        {
            "participants": [
                {
                    "epsilon": _EPSILON,
                    "metadata": {
                        "public": [_UNIT] * MAX_DIMENSION,
                        "mask": [1.0] * MAX_DIMENSION,
                        "samples": MAX_SAMPLES,
                    },
                    "participant_id": MAX_ID,
                }
            ]
        },
    ),
    # a participant id and its token
    "/tasks": (MAX_BATCH, {"participant_ids": [MAX_ID], "tokens": [_TOKEN]}),
    # a participant id, its token and its payload row, packed
    "/reports/batch": (
        MAX_BATCH,
        {
            "round": MAX_ID,
            "kind": "histogram",
            "participant_ids": [MAX_ID],
            "tokens": [_TOKEN],
            "packed": _packed(PACKED_ROW),
        },
    ),
    # a feature row of the largest dimension (values in [0, 1])
    "/predict": (MAX_PREDICT_ROWS, {"features": [[_UNIT] * MAX_DIMENSION]}),
}
"""Each batch route (by the end of its path): the most items a body takes, and the JSON of a
body of one largest legitimate item (written with ``json.dumps``' spaces, longer than the
compact JSON the clients send)."""


def _bytes(value: Any) -> int:
    return len(json.dumps(value).encode())


def json_count(value: Any) -> int:
    """What ``ItemCount`` counts of ``value`` as JSON: its arrays and objects, and their members
    beyond the first (at most twice its values)."""
    if isinstance(value, dict | list):
        members = list(value.values()) if isinstance(value, dict) else value
        return max(1, len(members)) + sum(json_count(v) for v in members)
    return 0


def _grown(one: dict[str, Any]) -> dict[str, Any]:
    """The body of ``one`` item with a second one (its lists twice as long)."""
    return {k: v * 2 if isinstance(v, list) else v for k, v in one.items()}


def _cap(items: int, one: dict[str, Any]) -> int:
    """Bytes of a body of ``items`` items like the one of ``one`` (the item and its separator
    ``items`` times, the rest once), plus the margin."""
    per_item = _bytes(_grown(one)) - _bytes(one)
    if isinstance(one.get("packed"), str):  # the packed rows grow with the items too
        per_item += len(one["packed"])
    return int((_bytes(one) + (items - 1) * per_item) * (1 + MARGIN))


def _count(items: int, one: dict[str, Any]) -> int:
    """``json_count`` of a body of ``items`` items like the one of ``one``."""
    return json_count(one) + (items - 1) * (json_count(_grown(one)) - json_count(one))


BATCH_CAPS: dict[str, int] = {route: _cap(*item) for route, item in LEGIT_ITEMS.items()}
"""The byte cap of each batch route (by the end of its path)."""

MAX_VALUES = int(max(_count(*item) for item in LEGIT_ITEMS.values()) * (1 + MARGIN))
"""Most JSON values (as ``ItemCount`` counts them) a batch body may hold: the most of the largest
legitimate body of any batch route, plus the margin. It bounds what parsing a body may cost (the
values of a body of numbers take two bytes each at least: the byte caps alone allow far more)."""


class ItemCount:
    """Counts the members of each JSON array and object of a body fed to it chunk by chunk, and
    the values in all, and raises ``BodyTooLarge`` as soon as a container has more than
    ``members`` or the body more than ``values``. A scan, not a parse: the text between two
    brackets, braces or strings is counted by its commas in one C call (a body of numbers costs
    one call per chunk), a string is skipped by one regular expression match. Malformed JSON is
    left to the parser that reads the body afterwards."""

    # a bracket, a brace, a whole string without escapes, or the start of any other string
    _TOKEN = re.compile(rb'[\[\]{}]|"[^"\\]*"|"')
    # the rest of a string: up to its closing quote, escapes included
    _REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)

    def __init__(self, *, members: int = MAX_BATCH, values: int = MAX_VALUES) -> None:
        self.members = members
        self.values = values
        self.counted = 0
        self._open: list[int] = []  # the commas seen in each open container
        self._string = False  # inside a string that the previous chunk left open
        self._carry = b""  # a string's unfinished escape at the end of the previous chunk

    def feed(self, chunk: bytes) -> None:
        text = self._carry + chunk if self._carry else chunk
        self._carry = b""
        pos, end = 0, len(text)
        while pos < end:
            if self._string:
                rest = self._REST.match(text, pos)
                if rest is None:  # the string goes on in the next chunk
                    tail = end - len(text.rstrip(b"\\"))
                    if tail % 2:
                        self._carry = b"\\"
                    return
                pos, self._string = rest.end(), False
                continue
            token = self._TOKEN.search(text, pos)
            stop = end if token is None else token.start()
            commas = text.count(b",", pos, stop)
            if commas and self._open:
                self._open[-1] += commas
                if self._open[-1] >= self.members:
                    raise BodyTooLarge(
                        f"a JSON array or object of the request body holds more than "
                        f"{self.members} members (the most any field of this route takes)"
                    )
                self._more(commas)
            if token is None:
                return
            pos = token.end()
            char = text[stop]
            if char in b"[{":
                self._open.append(0)
                self._more(1)
            elif char in b"]}":
                if self._open:
                    self._open.pop()
            elif pos - stop == 1:  # a lone quote: a string with escapes, or cut by the chunk
                self._string = True

    def _more(self, values: int) -> None:
        self.counted += values
        if self.counted > self.values:
            raise BodyTooLarge(
                f"the request body holds more than {self.values} JSON values (this route's limit)"
            )


@dataclass(frozen=True)
class _Route:
    cap: int
    counted: bool


class BodyLimit:
    def __init__(self, app: ASGIApp, *, single: int, batch: int | None = None) -> None:
        self.app = app
        self.single = _Route(single, counted=False)
        self.batch = {
            suffix: _Route(cap if batch is None else batch, counted=True)
            for suffix, cap in BATCH_CAPS.items()
        }

    def route(self, path: str) -> _Route:
        for suffix, route in self.batch.items():
            if path.endswith(suffix):
                return route
        return self.single

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.route(scope["path"])
        cap = route.cap
        length = _content_length(scope)
        if length is not None and length > cap:
            await _refuse(send, cap, length)
            return
        seen = 0
        items = ItemCount() if route.counted else None

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                body = message.get("body", b"")
                seen += len(body)
                if seen > cap:
                    raise BodyTooLarge(f"the request body exceeds this route's {cap} bytes")
                if items is not None and body:
                    items.feed(body)
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
