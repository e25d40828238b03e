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
takes more), or more values in all than the largest legitimate body of the route holds, plus the
margin (``BATCH_VALUES``), is refused with 413 by the chunk that holds the excess (a binary
batch body, ``BinaryCount``: its JSON header so, its arrays by their declared sizes). A body
of 20 million ε's is thus refused after its first 250 kB, before it is held or parsed, where it
was read and parsed whole (1 GB of memory) and refused only by validation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fedldp.protocol.core.wire import MAX_BATCH, MAX_ID, MAX_PREDICT_ROWS
from fedldp.protocol.core.wire.binary import BATCH_MEDIA_TYPE, BATCH_VERSION, MAGIC, PREFIX
from fedldp.protocol.core.wire.common import MAX_SAMPLES
from fedldp.protocol.semi_feature.common import MAX_DIMENSION
from fedldp.server.errors import BodyTooLarge
from fedldp.server.runtime.auth import tokens_for

__all__ = [
    "BATCH_CAPS",
    "BATCH_VALUES",
    "JSON_ROW",
    "LEGIT_ITEMS",
    "MARGIN",
    "MAX_DEPTH",
    "PACKED_ROW",
    "BinaryCount",
    "BodyLimit",
    "ItemCount",
    "grown",
    "json_count",
]

MARGIN = 0.25
"""Room left above the largest legitimate body of each batch route (bytes and values)."""

PACKED_ROW = 192
"""Numbers per packed report row that a full report batch (``MAX_BATCH`` rows) may carry: e.g. a
192-dimensional vector payload; larger rows go in proportionally smaller batches (the swarm's
``batch`` option)."""
JSON_ROW = 64
"""Numbers per report row that a full report batch may carry as JSON lists (larger rows go
packed, or in smaller batches)."""

_NUMBER = -2.2250738585072014e-308
"""A float64 of the longest literal (24 characters): a payload number."""
_EPSILON = 1.2345678901234567e-06
"""An ε of the longest literal (22 characters; ε lies in [1e-6, 1e3])."""
_UNIT = 2.2250738585072014e-308
"""A float64 in [0, 1] of the longest literal (23 characters): a public feature."""
_TOKEN = tokens_for("00" * 32, "study", [MAX_ID])[0]
"""A participant token (every one has the same length)."""


def _packed(numbers: int) -> str:
    """A ``packed`` string of ``numbers`` float64 numbers (base64, 4 characters per 3 bytes)."""
    return "A" * (-(-8 * numbers // 3) * 4)


_REPORTS = {"round": MAX_ID, "kind": "vector", "participant_ids": [MAX_ID], "tokens": [_TOKEN]}

LEGIT_ITEMS: dict[str, tuple[int, tuple[dict[str, Any], ...]]] = {
    # a participant of a semi-feature study of the largest dimension: its public features (in
    # [0, 1]) and their mask (0.0 or 1.0), MAX_DIMENSION numbers each, a sample count and an
    # explicit id; in the list form (one object each) and the columnar form
    "/participants/batch": (
        MAX_BATCH,
        (
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
            {
                "epsilons": [_EPSILON],
                "metadata": {
                    "public": [[_UNIT] * MAX_DIMENSION],
                    "mask": [[1.0] * MAX_DIMENSION],
                    "samples": [MAX_SAMPLES],
                },
                "participant_ids": [MAX_ID],
            },
        ),
    ),
    # a participant id and its token
    "/tasks": (MAX_BATCH, ({"participant_ids": [MAX_ID], "tokens": [_TOKEN]},)),
    # a participant id, its token and its payload row, packed or as a JSON list
    "/reports/batch": (
        MAX_BATCH,
        (
            {**_REPORTS, "packed": _packed(PACKED_ROW)},
            {**_REPORTS, "payloads": [[_NUMBER] * JSON_ROW]},
        ),
    ),
    # a feature row of the largest dimension (values in [0, 1])
    "/predict": (MAX_PREDICT_ROWS, ({"features": [[_UNIT] * MAX_DIMENSION]},)),
}
"""Each batch route (by the end of its path): the most items a body takes, and each form of a
body of one largest legitimate item (in JSON, written with ``json.dumps``' spaces: longer than
the compact JSON the clients send). A body of more items repeats every list of the form (those
of a mapping in it too: the columns) and the packed rows."""


def _bytes(value: Any) -> int:
    return len(json.dumps(value).encode())


def json_count(value: Any) -> int:
    """What ``ItemCount`` counts of ``value`` as JSON: its arrays and objects, and their members
    beyond the first (at most twice its values)."""
    if isinstance(value, dict | list):
        members = list(value.values()) if isinstance(value, dict) else value
        return max(1, len(members)) + sum(json_count(v) for v in members)
    return 0


def grown(one: dict[str, Any], items: int = 2) -> dict[str, Any]:
    """The body of ``items`` items of the form ``one`` (its lists, and those of its mappings,
    repeated; the packed rows too)."""
    out: dict[str, Any] = {}
    for key, value in one.items():
        if isinstance(value, list):
            out[key] = value * items
        elif isinstance(value, dict):
            out[key] = grown(value, items)
        else:
            out[key] = value * items if key == "packed" else value
    return out


def _cap(items: int, one: dict[str, Any]) -> int:
    """Bytes of a body of ``items`` items of the form ``one`` (the item and its separators
    ``items`` times, the rest once), plus the margin."""
    per_item = _bytes(grown(one)) - _bytes(one)
    return int((_bytes(one) + (items - 1) * per_item) * (1 + MARGIN))


def _count(items: int, one: dict[str, Any]) -> int:
    """``json_count`` of a body of ``items`` items of the form ``one``, plus the margin."""
    per_item = json_count(grown(one)) - json_count(one)
    return int((json_count(one) + (items - 1) * per_item) * (1 + MARGIN))


BATCH_CAPS: dict[str, int] = {
    route: max(_cap(items, form) for form in forms) for route, (items, forms) in LEGIT_ITEMS.items()
}
"""The byte cap of each batch route (by the end of its path)."""

BATCH_VALUES: dict[str, int] = {
    route: max(_count(items, form) for form in forms)
    for route, (items, forms) in LEGIT_ITEMS.items()
}
"""Most JSON values (as ``ItemCount`` counts them) a body of each batch route may hold: those of
its largest legitimate body, plus the margin. They bound what parsing a body may cost, where the
byte caps alone would not: a value may take two bytes."""


MAX_DEPTH = 64
"""Deepest nesting of arrays and objects a batch body may have (its legitimate ones nest 5 deep
at most; the parser refuses some hundreds anyway)."""


class ItemCount:
    """Counts the members of each JSON array and object of a body fed to it chunk by chunk, and
    the values in all, and raises ``BodyTooLarge`` as soon as a container has more than
    ``members`` or, at the end of a chunk, the body more than ``values``. A scan, not a parse:
    the text between two brackets, braces or strings is counted by its commas in one C call (a
    body of numbers costs one call per chunk), a string without escapes is skipped by one
    regular expression match (a list's run of them too), any other by a search for its closing
    quote. Malformed JSON is left to the parser that reads the body afterwards."""

    _TOKENS = (b"[", b"]", b"{", b"}", b'"')
    """What the scan stops at: a bracket, a brace, the quote that opens a string."""
    _STRINGS = re.compile(rb'"[^"\\]*+"(?:[ \t\r\n]*+,[ \t\r\n]*+"[^"\\]*+")*+')
    """Strings without escapes, one or more, with commas between them (possessive: one pass;
    a run cut by the end of the chunk matches up to its last whole string)."""

    def __init__(self, *, values: int, members: int = MAX_BATCH) -> None:
        self.members = members
        self.values = values
        self.counted = 0
        self._open: list[int] = []  # the commas seen in each open container
        self._string = False  # inside a string that the previous chunk left open
        self._carry = b""  # a string's unfinished escape at the end of the previous chunk

    def feed(self, chunk: bytes) -> None:
        text = self._carry + chunk if self._carry else chunk
        self._carry = b""
        pos = 0
        if self._string:
            pos = self._string_end(text, 0)
            if pos < 0:
                return
            self._string = False
        opened, members, counted = self._open, self.members, self.counted
        find, end, strings = text.find, len(text), self._STRINGS.match
        # the next place of each token (end: none left), each found again once passed
        places = [find(t, pos) % (end + 1) for t in self._TOKENS]
        while True:
            for i, place in enumerate(places):
                if place < pos:
                    places[i] = find(self._TOKENS[i], pos) % (end + 1)
            start = min(places)
            if start > pos and opened:
                commas = text.count(b",", pos, start)
                if commas:
                    opened[-1] += commas
                    if opened[-1] >= members:
                        self._too_wide()
                    counted += commas
            if start == end:
                break
            char = text[start]
            if char == 0x22:  # a string, or a list's run of strings (a batch's tokens)
                run = strings(text, start)
                if run is not None:
                    pos = run.end()
                    commas = text.count(b'"', start, pos) // 2 - 1  # those between them
                    if commas and opened:
                        opened[-1] += commas
                        if opened[-1] >= members:
                            self._too_wide()
                        counted += commas
                    continue
                pos = self._string_end(text, start + 1)  # one with escapes: to its end
                if pos < 0:  # it goes on in the next chunk
                    self._string = True
                    break
            else:
                pos = start + 1
                if char == 0x5B or char == 0x7B:  # [ {
                    if len(opened) == MAX_DEPTH:
                        raise BodyTooLarge(
                            f"the request body nests deeper than {MAX_DEPTH} arrays and objects"
                        )
                    opened.append(0)
                    counted += 1
                elif opened:  # ] }
                    opened.pop()
        self.counted = counted
        if counted > self.values:
            raise BodyTooLarge(
                f"the request body holds more than {self.values} JSON values (this route's limit)"
            )

    def _string_end(self, text: bytes, pos: int) -> int:
        """Where the string that goes on at ``pos`` ends (after its closing quote), or -1 if it
        goes on past ``text`` (then keeping a final unfinished escape for the next chunk)."""
        while True:
            quote = text.find(b'"', pos)
            if quote < 0:
                if (len(text) - len(text.rstrip(b"\\"))) % 2:
                    self._carry = b"\\"
                return -1
            before = text[pos:quote]  # its backslashes: an even number close the string
            if (len(before) - len(before.rstrip(b"\\"))) % 2 == 0:
                return quote + 1
            pos = quote + 1  # an escaped quote

    def _too_wide(self) -> None:
        raise BodyTooLarge(
            f"a JSON array or object of the request body holds more than {self.members} "
            "members (the most any field of this route takes)"
        )


class BinaryCount:
    """``ItemCount`` for a binary batch body (``fedldp.protocol.core.wire.binary``): its JSON
    header is counted as a JSON body is, its arrays are not (fixed-width numbers, bounded by the
    byte cap; ``fedldp.server.web.binary`` checks how many their header declares before any is
    read). A body whose first bytes are not the format's is left to that reader to refuse."""

    def __init__(self, *, values: int) -> None:
        self.items = ItemCount(values=values)
        self._prefix = b""
        self._left: int | None = None  # header bytes still to count (None: prefix not read)

    def feed(self, chunk: bytes) -> None:
        start = 0  # where the header's bytes begin in the chunk (no copy of the arrays')
        if self._left is None:
            start = PREFIX.size - len(self._prefix)
            self._prefix += chunk[:start]
            if len(self._prefix) < PREFIX.size:
                return
            magic, version, length = PREFIX.unpack(self._prefix)
            self._left = length if (magic, version) == (MAGIC, BATCH_VERSION) else 0
        if self._left and start < len(chunk):
            part = chunk[start : start + self._left]
            self._left -= len(part)
            self.items.feed(part)


@dataclass(frozen=True)
class _Route:
    cap: int
    values: int | None  # None: not counted by items


class BodyLimit:
    def __init__(self, app: ASGIApp, *, single: int, batch: int | None = None) -> None:
        self.app = app
        self.single = _Route(single, values=None)
        self.batch = {
            suffix: _Route(cap if batch is None else batch, values=BATCH_VALUES[suffix])
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
        items: ItemCount | BinaryCount | None = None
        if route.values is not None:
            binary = _content_type(scope) == BATCH_MEDIA_TYPE
            items = (BinaryCount if binary else ItemCount)(values=route.values)

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


def _content_type(scope: Scope) -> str:
    """The request's content type, without its parameters, in lower case."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            return bytes(value).decode("latin-1").partition(";")[0].strip().lower()
    return ""


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
