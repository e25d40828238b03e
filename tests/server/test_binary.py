"""Binary batch bodies (``application/vnd.fedldp.batch``: fedldp.protocol.core.wire.binary,
read by fedldp.server.web.binary): the same answers and refusals as the JSON bodies they stand
for, exactly-once across the two forms, and a 4xx with a stable code, never a 500, for any
malformed body (a fuzz test feeds mutated ones)."""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedldp.protocol.core.wire import MAX_BATCH, BatchReceipt, EnrollmentBatch, StudyView
from fedldp.protocol.core.wire.binary import BATCH_MEDIA_TYPE, PREFIX, encode_batch
from fedldp.server.errors import BodyTooLarge
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app
from fedldp.server.web.binary import decode_batch
from fedldp.server.web.limits import BATCH_VALUES, BinaryCount
from tests.server.helpers import app_context, create_study, expect_error, start

BINARY = {"content-type": BATCH_MEDIA_TYPE}


async def post(
    client: httpx.AsyncClient, url: str, fields: dict[str, Any], arrays: dict[Any, Any]
) -> httpx.Response:
    return await client.post(url, content=encode_batch(fields, arrays), headers=BINARY)


async def enrolled(client: httpx.AsyncClient, n: int = 4) -> tuple[StudyView, EnrollmentBatch]:
    """A started hetero-mean-rr study (bit payloads, one round) of ``n`` participants enrolled by
    a binary body."""
    study = await create_study(client, "hetero-mean-rr")
    fields = {"block_only": False}
    arrays = {"epsilons": np.full(n, 1.0), ("metadata", "samples"): np.full(n, 3)}
    response = await post(client, f"/v1/studies/{study.id}/participants/batch", fields, arrays)
    assert response.status_code == 201, response.text
    batch = EnrollmentBatch.model_validate_json(response.content)
    await start(client, study.id)
    return study, batch


async def test_a_binary_enrollment_answers_as_its_json_body(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    url = f"/v1/studies/{study.id}/participants/batch"
    eps, samples = [0.5, 1.5, 2.0], [3, 4, 5]
    binary = await post(
        client, url, {"block_only": True}, {"epsilons": eps, ("metadata", "samples"): samples}
    )
    body = {"epsilons": eps, "metadata": {"samples": samples}, "block_only": True}
    as_json = await client.post(url, json=body)
    assert (binary.status_code, as_json.status_code) == (201, 201)
    first = EnrollmentBatch.model_validate_json(binary.content)
    second = EnrollmentBatch.model_validate_json(as_json.content)
    assert (first.participant_ids, second.participant_ids) == ([0, 1, 2], [3, 4, 5])
    assert first.block is not None
    assert not first.tokens
    listed = (await client.get(f"/v1/studies/{study.id}")).json()
    assert listed["n_participants"] == 6


async def test_binary_tasks_and_reports_are_exactly_once_with_json(
    client: httpx.AsyncClient,
) -> None:
    study, people = await enrolled(client)
    ids, tokens = people.participant_ids, people.tokens
    tasks = await post(
        client, f"/v1/studies/{study.id}/tasks", {"tokens": tokens}, {"participant_ids": ids}
    )
    assert tasks.status_code == 200, tasks.text
    assert tasks.json()["reports"][0]["participant_ids"] == ids
    url = f"/v1/studies/{study.id}/reports/batch"
    head = {"round": 0, "kind": "bit", "tokens": tokens[:2]}
    rows = np.array([[1.0], [-1.0]])
    sent = await post(client, url, head, {"participant_ids": ids[:2], "payloads": rows})
    assert BatchReceipt.model_validate_json(sent.content).accepted == 2, sent.text
    # an identical resend, as JSON (lists, then packed) and as binary: the same, duplicates
    as_json = {**head, "participant_ids": ids[:2], "payloads": rows.tolist()}
    for resend in (
        await client.post(url, json=as_json),
        await post(client, url, head, {"participant_ids": ids[:2], "payloads": rows}),
    ):
        receipt = BatchReceipt.model_validate_json(resend.content)
        assert (receipt.accepted, receipt.duplicates, receipt.rejected) == (0, 2, 0), resend.text
    # a different report for a participant that reported: refused, whichever form
    other = await post(client, url, head, {"participant_ids": ids[:2], "payloads": -rows})
    refused = BatchReceipt.model_validate_json(other.content)
    assert refused.rejected == 2
    assert refused.accepted == 0
    assert {item.code for item in refused.items} == {"duplicate_conflict"}
    # and the other way round: first as JSON, then resent binary
    head = {**head, "tokens": tokens[2:]}
    first = await client.post(
        url, json={**head, "participant_ids": ids[2:], "payloads": [[1.0]] * 2}
    )
    assert BatchReceipt.model_validate_json(first.content).accepted == 2, first.text
    again = await post(client, url, head, {"participant_ids": ids[2:], "payloads": np.ones((2, 1))})
    assert BatchReceipt.model_validate_json(again.content).duplicates == 2, again.text


def body(fields: dict[str, Any], arrays: dict[Any, Any]) -> bytes:
    return encode_batch(fields, arrays)


def edited(raw: bytes, header: dict[str, Any] | None = None, tail: bytes | None = None) -> bytes:
    """``raw`` with another JSON header and/or other bytes after it."""
    _, _, length = PREFIX.unpack_from(raw)
    old_header, old_tail = raw[PREFIX.size : PREFIX.size + length], raw[PREFIX.size + length :]
    text = old_header if header is None else json.dumps(header).encode()
    return PREFIX.pack(b"FLDB", 1, len(text)) + text + (old_tail if tail is None else tail)


GOOD_TASKS = body({"tokens": ["t"] * 2}, {"participant_ids": [0, 1]})
SPEC = {"field": ["participant_ids"], "dtype": "<i8", "shape": [2]}
IDS = np.array([0, 1], dtype="<i8").tobytes()

MALFORMED: list[tuple[str, bytes, int, str]] = [
    ("empty", b"", 422, "invalid_request"),
    ("truncated prefix", GOOD_TASKS[:7], 422, "invalid_request"),
    ("JSON sent as binary", b'{"participant_ids": [0]}', 415, "invalid_encoding"),
    ("wrong magic", b"XLDB" + GOOD_TASKS[4:], 415, "invalid_encoding"),
    ("wrong version", GOOD_TASKS[:4] + b"\x02" + GOOD_TASKS[5:], 415, "invalid_encoding"),
    ("reserved bytes", GOOD_TASKS[:5] + b"\x01" + GOOD_TASKS[6:], 415, "invalid_encoding"),
    ("truncated header", GOOD_TASKS[: PREFIX.size + 5], 422, "invalid_request"),
    ("truncated array", GOOD_TASKS[:-1], 422, "invalid_request"),
    ("bytes after the arrays", GOOD_TASKS + b"\0", 422, "invalid_request"),
    ("header not JSON", PREFIX.pack(b"FLDB", 1, 3) + b"{x}", 422, "invalid_request"),
    ("header not an object", edited(GOOD_TASKS, header=[1]), 422, "invalid_request"),  # type: ignore[arg-type]
    ("no arrays", edited(GOOD_TASKS, {"tokens": ["t"]}, b""), 422, "invalid_request"),
    (
        "header names a key twice",
        PREFIX.pack(b"FLDB", 1, 25) + b'{"arrays":[],"arrays":[]}',
        422,
        "duplicate_key",
    ),
    ("header not UTF-8", PREFIX.pack(b"FLDB", 1, 2) + b"\xff\xfe", 415, "invalid_encoding"),
    (
        "an unknown dtype",
        edited(GOOD_TASKS, {"tokens": ["t"] * 2, "arrays": [{**SPEC, "dtype": "<f4"}]}),
        422,
        "invalid_request",
    ),
    (
        "a big-endian dtype",
        edited(GOOD_TASKS, {"tokens": ["t"] * 2, "arrays": [{**SPEC, "dtype": ">i8"}]}),
        422,
        "invalid_request",
    ),
    (
        "three dimensions",
        edited(GOOD_TASKS, {"tokens": ["t"] * 2, "arrays": [{**SPEC, "shape": [2, 1, 1]}]}),
        422,
        "invalid_request",
    ),
    (
        "a negative size",
        edited(GOOD_TASKS, {"tokens": ["t"] * 2, "arrays": [{**SPEC, "shape": [-2]}]}),
        422,
        "invalid_request",
    ),
    (
        "a size that is not an integer",
        edited(GOOD_TASKS, {"tokens": ["t"] * 2, "arrays": [{**SPEC, "shape": [2.0]}]}),
        422,
        "invalid_request",
    ),
    (
        "lengths that disagree",
        edited(GOOD_TASKS, {"tokens": ["t"] * 2, "arrays": [{**SPEC, "shape": [3]}]}),
        422,
        "invalid_request",
    ),
    (
        "a field given twice",
        edited(GOOD_TASKS, {"tokens": ["t"] * 2, "participant_ids": [0, 1], "arrays": [SPEC]}),
        422,
        "invalid_request",
    ),
    (
        "an array of an array's field",
        edited(
            GOOD_TASKS,
            {"tokens": ["t"] * 2, "arrays": [SPEC, {**SPEC, "field": ["participant_ids", "x"]}]},
            IDS * 2,
        ),
        422,
        "invalid_request",
    ),
    (
        "an extra key in a spec",
        edited(GOOD_TASKS, {"tokens": ["t"] * 2, "arrays": [{**SPEC, "x": 1}]}),
        422,
        "invalid_request",
    ),
    (
        "more rows than a batch takes",
        edited(GOOD_TASKS, {"tokens": ["t"], "arrays": [{**SPEC, "shape": [MAX_BATCH + 1]}]}),
        413,
        "body_too_large",
    ),
    (
        "more numbers than the route's JSON body holds",
        edited(GOOD_TASKS, {"tokens": ["t"], "arrays": [{**SPEC, "shape": [MAX_BATCH, 10**4]}]}),
        413,
        "body_too_large",
    ),
    (
        "a size beyond 64 bits",
        edited(GOOD_TASKS, {"tokens": ["t"], "arrays": [{**SPEC, "shape": [2, 2**80]}]}),
        422,
        "invalid_request",
    ),
]


@pytest.mark.parametrize(
    ("raw", "status", "code"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
async def test_malformed_binary_bodies_get_a_stable_4xx(
    client: httpx.AsyncClient, raw: bytes, status: int, code: str
) -> None:
    study, _ = await enrolled(client)
    response = await client.post(f"/v1/studies/{study.id}/tasks", content=raw, headers=BINARY)
    expect_error(response, status, code)


async def test_binary_bodies_are_refused_as_their_json_bodies(client: httpx.AsyncClient) -> None:
    """Each body, as JSON and as binary (its numeric lists as arrays): the same status and code
    (the model validates both: ids out of 0..2^31-1, NaN, counts that disagree, ε out of range)."""
    study, people = await enrolled(client)
    s = study.id
    tokens = people.tokens[:2]
    head = {"round": 0, "kind": "bit", "tokens": tokens}
    cases: list[tuple[str, dict[str, Any], dict[Any, Any], dict[str, Any]]] = [
        ("/tasks", {"tokens": ["t"]}, {"participant_ids": [2**31]}, {}),
        ("/tasks", {"tokens": ["t"]}, {"participant_ids": [-1]}, {}),
        ("/tasks", {"tokens": ["t"]}, {"participant_ids": np.zeros(0, dtype=np.int64)}, {}),
        ("/tasks", {"tokens": ["t", "u"]}, {"participant_ids": [0]}, {}),
        ("/tasks", {"tokens": ["t"]}, {"participant_ids": [0.5]}, {}),
        ("/tasks", {}, {"participant_ids": [0]}, {}),
        ("/participants/batch", {}, {"epsilons": [np.nan]}, {}),
        ("/participants/batch", {}, {"epsilons": [np.inf]}, {}),
        ("/participants/batch", {}, {"epsilons": [1.0], ("metadata", "samples"): [0]}, {}),
        ("/participants/batch", {}, {"epsilons": [1.0], ("metadata", "samples"): [1.5]}, {}),
        ("/participants/batch", {}, {"epsilons": [1.0, 1.0], ("metadata", "samples"): [3]}, {}),
        ("/reports/batch", head, {"participant_ids": [0, 1], "payloads": [[np.nan], [1.0]]}, {}),
        ("/reports/batch", head, {"participant_ids": [0, 1], "payloads": [[1.0]]}, {}),
        ("/reports/batch", head, {"participant_ids": [0, 1]}, {}),
        (
            "/reports/batch",
            head,
            {"participant_ids": [0, 1], "payloads": [[1.0], [1.0]]},
            {"packed": ""},
        ),
        (
            "/reports/batch",
            {**head, "round": 2**31},
            {"participant_ids": [0, 1], "payloads": [[1.0]] * 2},
            {},
        ),
    ]
    for route, fields, arrays, extra in cases:
        url = f"/v1/studies/{s}{route}"
        binary = await post(client, url, {**fields, **extra}, arrays)
        as_json = {**fields, **extra}
        for field, values in arrays.items():
            value = np.asarray(values).tolist()
            if isinstance(field, tuple):
                as_json.setdefault(field[0], {})[field[1]] = value
            else:
                as_json[field] = value
        text = json.dumps(as_json).replace("NaN", "1e999").replace("Infinity", "1e999")
        answer = await client.post(url, content=text, headers={"content-type": "application/json"})
        assert binary.status_code == answer.status_code, (route, arrays, binary.text, answer.text)
        assert 400 <= binary.status_code < 500, binary.text
        assert binary.json()["code"] == answer.json()["code"], (route, arrays)


def test_the_arrays_are_bounded_before_any_is_read() -> None:
    """The numbers an array declares count against the route's JSON values, except a report
    batch's rows kept as an array (bounded by the byte cap, as ``packed``)."""
    rows = np.zeros((3, 4))
    raw = encode_batch({}, {"participant_ids": [0, 1, 2], "payloads": rows})
    decode_batch(raw, values=3, keep=frozenset({"payloads"}))
    with pytest.raises(BodyTooLarge):
        decode_batch(raw, values=3 + 11)  # the rows as lists: 15 numbers
    value, kept = decode_batch(raw, values=15)
    assert value == {"participant_ids": [0, 1, 2], "payloads": rows.tolist()}
    assert not kept


def feed(count: BinaryCount, raw: bytes, size: int) -> None:
    for i in range(0, len(raw), size):
        count.feed(raw[i : i + size])


def test_the_stream_counts_a_binary_header_not_its_arrays() -> None:
    """Array bytes that would be brackets in JSON are not counted; the header's JSON is, chunk
    by chunk (a header of a million values is refused by the chunk that holds the excess)."""
    values = BATCH_VALUES["/tasks"]
    brackets = np.frombuffer(b"[[[[[[[[" * 200, dtype="<i8")
    raw = encode_batch({"tokens": ["t"] * 200}, {"participant_ids": brackets})
    feed(BinaryCount(values=values), raw, 7)  # not refused
    wide = encode_batch({"tokens": [[]] * (values + 1)}, {})
    count = BinaryCount(values=values)
    with pytest.raises(BodyTooLarge):
        feed(count, wide, 65536)


async def test_the_byte_cap_applies_to_binary_bodies(tmp_path: Path) -> None:
    """A route's byte cap (here 8 KiB per batch) refuses a binary body as it does a JSON one,
    with a Content-Length beyond it or while it streams in."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'small.db'}", max_batch_body_bytes=8192
    )
    app = create_app(settings, sweeper=False)
    raw = encode_batch({"tokens": ["t"]}, {"participant_ids": np.zeros(2000, np.int64)})

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(raw), 1000):
            yield raw[i : i + 1000]

    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://fedldp.test") as c:
            for content in (raw, chunks()):
                response = await c.post("/v1/studies/x/tasks", content=content, headers=BINARY)
                expect_error(response, 413, "body_too_large")
    finally:
        app_context(app).db.dispose()


VALID = [
    ("/tasks", encode_batch({}, {"participant_ids": [0, 1, 2]})),
    (
        "/participants/batch",
        encode_batch({}, {"epsilons": [1.0, 2.0], ("metadata", "samples"): [3, 4]}),
    ),
    (
        "/reports/batch",
        encode_batch(
            {"round": 0, "kind": "bit"}, {"participant_ids": [0, 1], "payloads": [[1.0], [-1.0]]}
        ),
    ),
]
"""Valid bodies of each batch route (credentials as a block token bearer), to mutate."""


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    route, raw = draw(st.sampled_from(VALID))
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "cut", "insert", "length"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if how == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif how == "cut":
            del data[at : at + draw(st.integers(1, 16))]
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif len(data) >= PREFIX.size:  # a header length that lies
            struct.pack_into("<I", data, 8, draw(st.integers(0, 2**32 - 1)))
    return route, bytes(data)


_STUDIES: dict[int, tuple[str, dict[str, str]]] = {}
"""The fuzzed study of each client (one per test run: hypothesis reuses the fixture)."""


@pytest.mark.fuzz
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=mutated())
async def test_mutated_binary_bodies_never_get_a_500(
    client: httpx.AsyncClient, case: tuple[str, bytes]
) -> None:
    """Into a running study, with its block token: every mutation of a valid body of each batch
    route is answered (a refusal with its code, or an answer), never with a 5xx."""
    if id(client) not in _STUDIES:
        study, people = await enrolled(client)
        assert people.block is not None
        block = people.block
        bearer = {"authorization": f"Bearer {block.start}.{block.stop}.{block.token}"}
        _STUDIES[id(client)] = (study.id, bearer)
    study_id, bearer = _STUDIES[id(client)]
    route, raw = case
    url = f"/v1/studies/{study_id}{route}"
    response = await client.post(url, content=raw, headers={**BINARY, **bearer})
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json()["code"]


def documented_client() -> dict[str, Any]:
    """The namespace of docs/server.md's example client of the format (its ``batch_body``)."""
    page = (Path(__file__).parents[2] / "docs" / "server.md").read_text()
    block = page.split("<!-- binary-body -->\n```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/server.md", "exec"), namespace)
    return namespace


async def test_the_documented_client_writes_the_format(client: httpx.AsyncClient) -> None:
    """The page's example writes what ``encode_batch`` writes, byte for byte, and the server
    enrolls, tasks and takes reports from bodies it wrote."""
    doc = documented_client()
    assert doc["body"] == encode_batch(
        {"round": 0, "kind": "scalar", "blocks": [{"start": 0, "stop": 3, "token": "…"}]},
        {"participant_ids": [0, 1, 2], "payloads": np.array([[0.25], [-1.5], [3.0]])},
    )
    batch_body = doc["batch_body"]
    study = await create_study(client, "hetero-mean-rr")
    url = f"/v1/studies/{study.id}"
    enrolled = await client.post(
        f"{url}/participants/batch",
        content=batch_body({"block_only": True}, {("epsilons",): [1.0, 1.0]}),
        headers=BINARY,
    )
    assert enrolled.status_code == 201, enrolled.text
    block = EnrollmentBatch.model_validate_json(enrolled.content).block
    assert block is not None
    await start(client, study.id)
    blocks = {"blocks": [block.model_dump()]}
    ids = {("participant_ids",): [0, 1]}
    tasks = await client.post(f"{url}/tasks", content=batch_body(blocks, ids), headers=BINARY)
    assert tasks.json()["reports"][0]["participant_ids"] == [0, 1], tasks.text
    rows = {**ids, ("payloads",): [[1.0], [-1.0]]}
    sent = await client.post(
        f"{url}/reports/batch",
        content=batch_body({"round": 0, "kind": "bit", **blocks}, rows),
        headers=BINARY,
    )
    assert BatchReceipt.model_validate_json(sent.content).accepted == 2, sent.text


@settings(max_examples=100, deadline=None)
@given(
    ints=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20),
    floats=st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=20),
    width=st.integers(0, 3),
    token=st.text(max_size=8),
)
def test_a_body_reads_back_as_the_json_value_it_stands_for(
    ints: list[int], floats: list[float], width: int, token: str
) -> None:
    """``decode_batch(encode_batch(fields, arrays))`` is the JSON value holding each array as
    its list, bit for bit (integers stay integers, -0.0 stays -0.0); a kept array comes back
    as the array it was."""
    rows = np.arange(len(floats) * width, dtype=np.float64).reshape(len(floats), width)
    arrays = {"ids": np.array(ints, dtype=np.int64), ("m", "x"): np.array(floats), "rows": rows}
    raw = encode_batch({"token": token}, arrays)
    value, kept = decode_batch(raw, values=10**6, keep=frozenset({"rows"}))
    assert value == {"token": token, "ids": ints, "m": {"x": floats}}
    assert [type(i) for i in value["ids"]] == [int] * len(ints)
    assert np.array(value["m"]["x"]).tobytes() == np.array(floats).tobytes()
    assert kept["rows"].shape == rows.shape
    assert kept["rows"].tobytes() == rows.tobytes()
