"""Body caps and item counts of fedldp.server.web.limits: a batch body is refused by the chunk that
crosses its route's byte cap or holds one item too many, before the rest is read; the largest
legitimate body of each batch route passes.

Issue 23: an 80 MB body of 20 million ε's to the enrollment batch route was read and parsed whole
(1 GB of memory, 6 s) before validation refused it with a 422."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from fedldp.protocol.core import wire
from fedldp.protocol.core.wire import MAX_BATCH, EnrollmentBatch, StudyView, TaskBatch
from fedldp.server.errors import BodyTooLarge
from fedldp.server.web.limits import (
    BATCH_CAPS,
    BATCH_VALUES,
    LEGIT_ITEMS,
    MARGIN,
    MAX_DEPTH,
    BodyLimit,
    ItemCount,
    grown,
    json_count,
)
from tests.server.helpers import create_study, expect_error

FLOOD = 80 * 10**6
"""Bytes of the issue's body of ε's."""
CHUNK = 65_536


class Sent:
    """A request body streamed from pieces, ``CHUNK`` bytes at a time, counting what was taken
    (and its items, when given an ``ItemCount``)."""

    def __init__(self, pieces: Iterator[bytes], count: ItemCount | None = None) -> None:
        self.pieces = pieces
        self.count = count
        self.taken = 0

    def _taken(self, chunk: bytes) -> bytes:
        self.taken += len(chunk)
        if self.count is not None:
            self.count.feed(chunk)
        return chunk

    async def __aiter__(self) -> AsyncIterator[bytes]:
        buffer = b""
        for piece in self.pieces:
            buffer += piece
            start = 0
            while len(buffer) - start >= CHUNK:
                yield self._taken(buffer[start : start + CHUNK])
                start += CHUNK
            buffer = buffer[start:]
        if buffer:
            yield self._taken(buffer)


def flood(size: int = FLOOD) -> Iterator[bytes]:
    """``{"epsilons": [1.0, 1.0, …]}`` of ``size`` bytes, made as it is sent."""
    head, tail, item = b'{"epsilons": [1.0', b"]}", b", 1.0"
    yield head
    n = (size - len(head) - len(tail)) // len(item)
    for _ in range(n // 10_000):
        yield item * 10_000
    yield item * (n % 10_000) + tail


async def n_enrolled(client: httpx.AsyncClient, study: StudyView) -> int:
    response = await client.get(f"/v1/studies/{study.id}")
    return StudyView.model_validate_json(response.content).n_participants


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
async def test_a_flood_of_epsilons_is_refused_after_its_first_items(
    client: httpx.AsyncClient, chunked: bool
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    body = Sent(flood())
    headers = {"Content-Type": "application/json"}
    if not chunked:
        headers["Content-Length"] = str(FLOOD)
    url = f"/v1/studies/{study.id}/participants/batch"
    response = await client.post(url, content=body, headers=headers)
    assert ("content-length" in response.request.headers) is not chunked
    error = expect_error(response, 413, "body_too_large")
    assert str(MAX_BATCH) in error.detail
    # 50,001 ε's are 250 kB: what was read is that and the chunk in flight
    assert body.taken <= 5 * (MAX_BATCH + 1) + CHUNK, body.taken
    assert await n_enrolled(client, study) == 0


@pytest.mark.parametrize("route", ["tasks", "predict", "participants", "leases", "start"])
async def test_a_body_beyond_the_cap_is_not_read_at_all(
    client: httpx.AsyncClient, route: str
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    body = Sent(flood())
    headers = {"Content-Type": "application/json", "Content-Length": str(FLOOD)}
    response = await client.post(f"/v1/studies/{study.id}/{route}", content=body, headers=headers)
    expect_error(response, 413, "body_too_large")
    assert body.taken == 0


@pytest.mark.parametrize(
    ("route", "cap"), [("tasks", BATCH_CAPS["/tasks"]), ("participants", 1 << 20)]
)
async def test_a_chunked_body_beyond_the_cap_is_read_up_to_it(
    client: httpx.AsyncClient, route: str, cap: int
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    body = Sent(iter([b'{"participant_ids": [0], "tokens": ["', b"a" * FLOOD]))
    url = f"/v1/studies/{study.id}/{route}"  # one long string: no item too many
    response = await client.post(url, content=body, headers={"Content-Type": "application/json"})
    assert "content-length" not in response.request.headers
    expect_error(response, 413, "body_too_large")
    assert cap < body.taken <= cap + CHUNK


@pytest.mark.parametrize("route", sorted(BATCH_VALUES))
def test_values_spread_over_small_containers_are_counted_in_all(route: str) -> None:
    limit = BATCH_VALUES[route]
    count = ItemCount(values=limit)
    count.feed(b'{"features": [')
    row = b"[" + b"0," * 999 + b"0],"  # 1,000 values per row: no container too large
    while count.counted <= limit - 1001:  # no refusal below the limit
        count.feed(row)
    with pytest.raises(BodyTooLarge, match="JSON values"):
        count.feed(row)


def test_a_body_nested_beyond_the_depth_is_refused() -> None:
    count = ItemCount(values=10**6)
    count.feed(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)  # as deep as allowed
    with pytest.raises(BodyTooLarge, match="nests deeper"):
        count.feed(b"[" * (MAX_DEPTH + 1))


# --------------------------------------------------------------------------- the counting


_JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(alphabet='a,"\\[]{}\n\x00é '),
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.dictionaries(st.text(alphabet='k,"\\[]{', max_size=4), inner, max_size=6)
    ),
    max_leaves=40,
)


def _widest(value: Any) -> int:
    """The most members of one array or object in ``value``."""
    if isinstance(value, dict | list):
        members = list(value.values()) if isinstance(value, dict) else value
        return max([len(members), *map(_widest, members)])
    return 0


@given(value=_JSON, cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8))
@settings(max_examples=400, deadline=None)
def test_the_count_is_exact_however_the_body_is_cut(value: Any, cuts: list[int]) -> None:
    text = json.dumps(value, ensure_ascii=False).encode()
    counted, widest = json_count(value), _widest(value)
    for members, refused in ((max(widest, 1), False), (max(widest - 1, 1), widest > 1)):
        count = ItemCount(members=members, values=10**6)
        bounds = sorted({0, len(text), *(min(c, len(text)) for c in cuts)})
        try:
            for start, stop in itertools.pairwise(bounds):
                count.feed(text[start:stop])
        except BodyTooLarge:
            assert refused
        else:
            assert not refused
            assert count.counted == counted


# --------------------------------------------------------------------------- legitimate bodies


def legit_body(items: int, form: dict[str, Any]) -> Iterator[bytes]:
    """The body of ``items`` items of a ``LEGIT_ITEMS`` form (``limits.grown(form, items)`` as
    ``json.dumps`` writes it), made as it is sent."""
    repeated: dict[str, Any] = {}

    def mark(node: dict[str, Any]) -> dict[str, Any]:  # what grows, replaced by a marker
        out: dict[str, Any] = {}
        for key, value in node.items():
            if isinstance(value, list) or key == "packed":
                out[key] = marker = f"@{len(repeated)}@"
                repeated[marker] = value
            else:
                out[key] = mark(value) if isinstance(value, dict) else value
        return out

    for piece in re.split(r'("@[0-9]+@")', json.dumps(mark(form))):
        value = repeated.get(piece.strip('"'))
        if value is None:
            yield piece.encode()
        elif isinstance(value, str):  # the packed rows, one after the other
            yield b'"'
            yield from _repeat(value.encode(), items)
            yield b'"'
        else:
            item = json.dumps(value[0]).encode()
            yield b"[" + item
            yield from _repeat(b", " + item, items - 1)
            yield b"]"


def _repeat(item: bytes, times: int) -> Iterator[bytes]:
    for _ in range(times // 1000):
        yield item * 1000
    yield item * (times % 1000)


async def _consume(scope: Scope, receive: Receive, send: Send) -> None:
    """An app that reads the whole body, then answers 200 with its length."""
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


@pytest.mark.parametrize("route", sorted(LEGIT_ITEMS))
async def test_the_largest_legitimate_bodies_of_each_batch_route_pass(route: str) -> None:
    items, forms = LEGIT_ITEMS[route]
    sizes, counts = [], []
    limit = BodyLimit(_consume, single=1 << 20)
    transport = httpx.ASGITransport(app=limit)
    async with httpx.AsyncClient(transport=transport, base_url="http://limits.test") as http:
        for form in forms:
            body = Sent(legit_body(items, form), ItemCount(values=BATCH_VALUES[route]))
            response = await http.post(f"/v1/studies/s{route}", content=body)
            assert response.status_code == 200, response.text
            sizes.append(int(response.text))
            counts.append(body.count.counted if body.count else 0)
    # the caps are those of the largest form, and their margin
    assert BATCH_CAPS[route] == int(max(sizes) * (1 + MARGIN)), (sizes, BATCH_CAPS[route])
    assert BATCH_VALUES[route] == int(max(counts) * (1 + MARGIN)), (counts, BATCH_VALUES[route])


def test_the_legitimate_bodies_are_what_the_wire_models_take() -> None:
    """Each form of a legitimate item makes a valid body (the caps measure real requests)."""
    models: dict[str, type[BaseModel]] = {
        "/participants/batch": wire.EnrollBatch,
        "/tasks": wire.TaskBatchRequest,
        "/reports/batch": wire.ReportBatch,
        "/predict": wire.PredictRequest,
    }
    assert set(models) == set(LEGIT_ITEMS) == set(BATCH_CAPS) == set(BATCH_VALUES)
    for route, (_, forms) in LEGIT_ITEMS.items():
        for form in forms:
            models[route].model_validate_json(json.dumps(grown(form, 3)))


async def test_a_full_batch_enrolls_and_asks_for_its_tasks(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    url = f"/v1/studies/{study.id}"
    response = await client.post(f"{url}/participants/batch", json={"epsilons": [1.0] * MAX_BATCH})
    assert response.status_code == 201, response.text
    enrolled = EnrollmentBatch.model_validate_json(response.content)
    assert await n_enrolled(client, study) == MAX_BATCH
    body = {"participant_ids": enrolled.participant_ids, "tokens": enrolled.tokens}
    response = await client.post(f"{url}/tasks", json=body)
    assert response.status_code == 200, response.text
    assert len(TaskBatch.model_validate_json(response.content).waiting) == MAX_BATCH


def test_the_flood_exceeds_no_byte_cap_of_enrollment() -> None:
    """The issue's body fits under the enrollment route's byte cap: only the item count stops
    it (the first test above would pass for the wrong reason otherwise)."""
    assert BATCH_CAPS["/participants/batch"] > FLOOD
