"""Strict request bodies (fedldp.server.web.bodies, the wire models' strict mode), body caps
(fedldp.server.web.limits) and credentials checked before any detailed validation error.

Each refusal below was answered 201 before issue 14: a string or a boolean for a number, counts
out of range, duplicate keys, UTF-16 bodies. Nothing refused is stored.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from fedldp.protocol.core.wire import Enrollment, StudyView
from fedldp.server.errors import FedldpError, InvalidRequest
from fedldp.server.settings import Settings
from fedldp.server.web import bodies
from fedldp.server.web.app import create_app
from fedldp.server.web.bodies import parse_json
from tests.server.helpers import app_context, create_study, enroll, expect_error, start

BIG = 2**70


async def n_enrolled(client: httpx.AsyncClient, study: StudyView) -> int:
    response = await client.get(f"/v1/studies/{study.id}")
    return StudyView.model_validate_json(response.content).n_participants


@pytest.mark.parametrize(
    "body",
    [
        {"epsilon": "0.5"},
        {"epsilon": True},
        {"epsilon": BIG},
        {"epsilon": 1.0, "metadata": {"samples": -5}},
        {"epsilon": 1.0, "metadata": {"samples": 0}},
        {"epsilon": 1.0, "metadata": {"samples": BIG}},
        {"epsilon": 1.0, "metadata": {"samples": 10**9 + 1}},
        {"epsilon": 1.0, "metadata": {"samples": 4.5}},
        {"epsilon": 1.0, "metadata": {"samples": True}},
        {"epsilon": 1.0, "metadata": {"samples": [1, 2]}},
        {"epsilon": 1.0, "metadata": {"public": [0.5] * 4097}},  # a vector beyond its bound
        {"epsilon": 1.0, "metadata": {f"k{i}": 1.0 for i in range(65)}},  # too many entries
        {"epsilon": 1.0, "participant_id": "3"},
    ],
    ids=repr,
)
async def test_enrollment_takes_numbers_as_numbers(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    headers = {"Authorization": "Bearer t"}  # a lease token would be checked after the body
    response = await client.post(f"/v1/studies/{study.id}/participants", json=body, headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["code"] in ("invalid_request", "epsilon_out_of_range")
    assert await n_enrolled(client, study) == 0


async def test_columnar_sample_counts_are_integers_in_range(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    url = f"/v1/studies/{study.id}/participants/batch"
    for samples in ([4, -5], [4, 4.0], [4, True], [4, BIG], [[1], [2]]):
        body = {"epsilons": [1.0, 1.0], "metadata": {"samples": samples}}
        expect_error(await client.post(url, json=body), 422, "invalid_request")
    good = {"epsilons": [1.0, 1.0], "metadata": {"samples": [4, 10**9]}}
    assert (await client.post(url, json=good)).status_code == 201
    assert await n_enrolled(client, study) == 2


async def test_a_twenty_megabyte_metadata_list_is_refused_unread(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    body = {"epsilon": 1.0, "metadata": {"samples": [1] * (10 * 2**20)}}  # 20 MB of JSON
    response = await client.post(f"/v1/studies/{study.id}/participants", json=body)
    expect_error(response, 413, "body_too_large")
    assert await n_enrolled(client, study) == 0


@pytest.fixture
async def laplace(client: httpx.AsyncClient) -> tuple[StudyView, list[Enrollment]]:
    """A started hetero-mean-laplace study (scalar reports) with two participants."""
    study = await create_study(client, "hetero-mean-laplace")
    people = await enroll(client, study.id, [1.0, 1.0])
    await start(client, study.id)
    return study, people


@pytest.mark.parametrize("value", ["0.1", True, BIG, -BIG, None], ids=repr)
async def test_report_values_are_numbers(
    client: httpx.AsyncClient, app: FastAPI, laplace: tuple[StudyView, list[Enrollment]], value: Any
) -> None:
    study, people = laplace
    body = {"participant_id": 0, "round": 0, "payload": {"kind": "scalar", "value": value}}
    headers = {"Authorization": f"Bearer {people[0].token}"}
    response = await client.post(f"/v1/studies/{study.id}/reports", json=body, headers=headers)
    expect_error(response, 422, "invalid_request")
    batch = {
        "round": 0,
        "kind": "scalar",
        "participant_ids": [0],
        "tokens": [people[0].token],
        "payloads": [[value]],
    }
    response = await client.post(f"/v1/studies/{study.id}/reports/batch", json=batch)
    expect_error(response, 422, "invalid_request")
    assert (await client.get(f"/v1/studies/{study.id}/rounds/0")).json()["received"] == 0


@pytest.mark.parametrize(
    "params",
    [
        {"samples_per_user": True},
        {"samples_per_user": "4"},
        {"samples_per_user": 4.0},
        {"samples_per_user": 10**6 + 1},  # impossible: refused at creation, not at start
        {"samples_per_user": 4, "bound": "1"},
    ],
    ids=repr,
)
async def test_study_parameters_are_strict_and_bounded(
    client: httpx.AsyncClient, params: dict[str, Any]
) -> None:
    body = {"protocol": "user-mean", "params": params, "seed": 1}
    error = expect_error(await client.post("/v1/studies", json=body), 422, "invalid_params")
    assert "samples_per_user" in error.detail or "bound" in error.detail
    assert (await client.get("/v1/studies")).json()["studies"] == []


async def test_impossible_dimensions_are_refused_at_creation(client: httpx.AsyncClient) -> None:
    for protocol, params in (
        ("hetero-mean-duchi", {"dimension": 10**5}),
        ("hetero-frequency", {"domain_size": 2**40}),
        ("central-wme", {"histogram_bound": 1e12}),
    ):
        body = {"protocol": protocol, "params": params, "seed": 1}
        expect_error(await client.post("/v1/studies", json=body), 422, "invalid_params")


async def test_duplicate_keys_and_foreign_encodings_are_refused(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    url = f"/v1/studies/{study.id}/participants"
    json_headers = {"Content-Type": "application/json"}
    twice = b'{"epsilon": 1.0, "epsilon": 0.001}'
    expect_error(await client.post(url, content=twice, headers=json_headers), 422, "duplicate_key")
    nested = b'{"epsilon": 1.0, "metadata": {"a": 1, "a": 2}}'
    expect_error(await client.post(url, content=nested, headers=json_headers), 422, "duplicate_key")
    created = b'{"protocol": "hetero-mean-rr", "seed": 1, "seed": 2}'
    response = await client.post("/v1/studies", content=created, headers=json_headers)
    expect_error(response, 422, "duplicate_key")
    for encoding in ("utf-16", "utf-16-le", "utf-32"):
        body = json.dumps({"epsilon": 1.0}).encode(encoding)
        response = await client.post(url, content=body, headers=json_headers)
        assert response.status_code in (415, 422), response.text
        assert response.json()["code"] in ("invalid_encoding", "invalid_request")
    latin = '{"epsilon": 1.0, "metadata": {"caf\u00e9": 1}}'.encode("latin-1")
    expect_error(
        await client.post(url, content=latin, headers=json_headers), 415, "invalid_encoding"
    )
    assert await n_enrolled(client, study) == 0
    ok = '{"epsilon": 1.0, "metadata": {"caf\u00e9": 1}}'.encode()
    assert (await client.post(url, content=ok, headers=json_headers)).status_code == 201


async def test_pathological_json_is_a_422_not_a_500(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    url = f"/v1/studies/{study.id}/participants"
    json_headers = {"Content-Type": "application/json"}
    for body in (
        b'{"epsilon": ' + b"9" * 5000 + b"}",  # beyond Python's int-from-text digit limit
        b'{"epsilon": -' + b"9" * 20 + b"}",
        b'{"epsilon": 1e400}',  # parses as infinity
        b"[" * 100_000 + b"]" * 100_000,  # nested beyond the parser's recursion
    ):
        expect_error(
            await client.post(url, content=body, headers=json_headers), 422, "invalid_request"
        )
    assert await n_enrolled(client, study) == 0


# --------------------------------------------------------------------------- body caps


@pytest.fixture
async def small(tmp_path: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An app whose caps are small: 2 KiB per single-participant body, 8 KiB per batch."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'small.db'}",
        max_body_bytes=2048,
        max_batch_body_bytes=8192,
    )
    app = create_app(settings, sweeper=False)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://fedldp.test") as c:
            yield c
    finally:
        app_context(app).db.dispose()


def padded(size: int) -> bytes:
    """A JSON body of exactly ``size`` bytes."""
    head, tail = b'{"epsilons": [1.0], "metadata": {"pad": [], "x": "', b'"}}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


async def test_bodies_over_their_routes_cap_are_refused(small: httpx.AsyncClient) -> None:
    study = await create_study(small, "hetero-mean-rr")
    single = f"/v1/studies/{study.id}/participants"
    batch = f"/v1/studies/{study.id}/participants/batch"
    headers = {"Content-Type": "application/json"}
    expect_error(
        await small.post(single, content=padded(2049), headers=headers), 413, "body_too_large"
    )
    # within its cap the body is read and validated (this one is not a valid enrollment)
    expect_error(
        await small.post(single, content=padded(2048), headers=headers), 422, "invalid_request"
    )
    # a batch route takes more
    expect_error(
        await small.post(batch, content=padded(8000), headers=headers), 422, "invalid_request"
    )
    expect_error(
        await small.post(batch, content=padded(8193), headers=headers), 413, "body_too_large"
    )


async def test_a_chunked_body_is_cut_off_at_the_cap(small: httpx.AsyncClient) -> None:
    study = await create_study(small, "hetero-mean-rr")
    sent: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(1000):  # 1 MB in all, far beyond the cap
            sent.append(1)
            yield b" " * 1000

    response = await small.post(
        f"/v1/studies/{study.id}/participants/batch",
        content=chunks(),
        headers={"Content-Type": "application/json"},
    )
    assert "content-length" not in response.request.headers
    expect_error(response, 413, "body_too_large")
    assert await n_enrolled(small, study) == 0


async def test_a_lying_content_length_does_not_get_past_the_cap(small: httpx.AsyncClient) -> None:
    study = await create_study(small, "hetero-mean-rr")
    body = padded(4096)
    response = await small.post(
        f"/v1/studies/{study.id}/participants",
        content=body,
        headers={"Content-Type": "application/json", "Content-Length": "100"},
    )
    error = expect_error(response, 413, "body_too_large")  # counted as it streamed in
    assert "2048" in error.detail


# --------------------------------------------------------------------------- credentials first


async def test_callers_without_credentials_get_401_not_details(
    client: httpx.AsyncClient, laplace: tuple[StudyView, list[Enrollment]]
) -> None:
    study, people = laplace
    junk = {"participant_id": "x", "round": "y", "payload": {"kind": "nope"}}
    response = await client.post(f"/v1/studies/{study.id}/reports", json=junk)
    expect_error(response, 401, "token_required")
    valid = {"participant_id": 0, "round": 0, "payload": {"kind": "scalar", "value": 0.1}}
    wrong = {"Authorization": f"Bearer {people[1].token}"}
    response = await client.post(
        f"/v1/studies/{study.id}/reports", json={**valid, "round": "y"}, headers=wrong
    )
    expect_error(response, 401, "invalid_token")  # the token is checked before the body
    for path in ("tasks", "reports/batch"):
        response = await client.post(f"/v1/studies/{study.id}/{path}", json={"junk": 1})
        expect_error(response, 401, "token_required")
    explicit = {"epsilon": "junk", "participant_id": 9}
    response = await client.post(f"/v1/studies/{study.id}/participants", json=explicit)
    expect_error(response, 401, "token_required")


async def test_the_participant_token_travels_as_bearer_everywhere(
    client: httpx.AsyncClient, laplace: tuple[StudyView, list[Enrollment]]
) -> None:
    study, people = laplace
    me = people[0]
    headers = {"Authorization": f"Bearer {me.token}"}
    report = {"participant_id": 0, "round": 0, "payload": {"kind": "scalar", "value": 0.1}}
    first = await client.post(f"/v1/studies/{study.id}/reports", json=report, headers=headers)
    assert first.status_code == 201, first.text
    # the deprecated body field still works (and is the same report: a duplicate)
    old = await client.post(f"/v1/studies/{study.id}/reports", json={**report, "token": me.token})
    assert old.status_code == 200, old.text
    assert old.json()["duplicate"] is True
    for what in ("task", "budget"):
        url = f"/v1/studies/{study.id}/participants/0/{what}"
        assert (await client.get(url, headers=headers)).status_code == 200
    # a malformed block token as bearer on a batch endpoint
    response = await client.post(
        f"/v1/studies/{study.id}/tasks",
        json={"participant_ids": [1]},
        headers={"Authorization": "Bearer 1.2.nope"},
    )
    expect_error(response, 401, "invalid_token")


async def test_a_block_token_as_bearer_authorises_its_block(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    answer = await client.post(
        f"/v1/studies/{study.id}/participants/batch",
        json={"epsilons": [1.0] * 3, "block_only": True},
    )
    block = answer.json()["block"]
    bearer = {"Authorization": f"Bearer {block['start']}.{block['stop']}.{block['token']}"}
    url = f"/v1/studies/{study.id}/tasks"
    response = await client.post(url, json={"participant_ids": [0, 1, 2]}, headers=bearer)
    assert response.status_code == 200, response.text
    assert response.json()["waiting"] == [0, 1, 2]
    forged = {"Authorization": f"Bearer 0.4.{block['token']}"}  # a block it does not stand for
    response = await client.post(url, json={"participant_ids": [3]}, headers=forged)
    assert response.status_code in (401, 404), response.text


# --------------------------------------------------------------------------- the document


def test_the_openapi_document_declares_credentials_and_refusals(app: FastAPI) -> None:
    doc = app.openapi()
    schemes = doc["components"]["securitySchemes"]
    assert {"adminKey", "participantToken", "blockToken", "leaseToken"} <= set(schemes)
    assert schemes["adminKey"] == {**schemes["adminKey"], "in": "header", "name": "X-Admin-Key"}
    paths = doc["paths"]

    def operation(path: str, method: str = "post") -> dict[str, Any]:
        op: dict[str, Any] = paths[path][method]
        return op

    def security(op: dict[str, Any]) -> set[str]:
        return {name for requirement in op.get("security", []) for name in requirement}

    assert security(operation("/v1/studies")) == {"adminKey"}
    assert security(operation("/v1/studies/{study_id}/leases")) == {"adminKey"}
    assert "participantToken" in security(operation("/v1/studies/{study_id}/reports"))
    task = "/v1/studies/{study_id}/participants/{participant_id}/task"
    assert "participantToken" in security(operation(task, "get"))
    assert "blockToken" in security(operation("/v1/studies/{study_id}/reports/batch"))
    assert "leaseToken" in security(operation("/v1/studies/{study_id}/participants/batch"))
    for path, methods in paths.items():
        for method, op in methods.items():
            if "requestBody" in op:  # every body route lists the body refusals
                for status in ("413", "415", "422"):
                    assert status in op["responses"], (path, method, status)
            if security(op) - {"adminKey"}:
                assert "401" in op["responses"], (path, method)
    report = operation("/v1/studies/{study_id}/reports")["responses"]
    assert "token_required" in report["401"]["description"]
    assert "duplicate_key" in report["422"]["description"]
    schemas = doc["components"]["schemas"]
    assert schemas["ReportSubmit"]["properties"]["token"]["deprecated"] is True
    assert "token" not in schemas["ReportSubmit"]["required"]
    assert {"oneOf": [{"required": ["payloads"]}, {"required": ["packed"]}]} in schemas[
        "ReportBatch"
    ]["allOf"]
    assert {"oneOf": [{"required": ["participants"]}, {"required": ["epsilons"]}]} in schemas[
        "EnrollBatch"
    ]["allOf"]


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("[1, 2, 9223372036854775807, -9223372036854775808]", False),
        ("[1, 2, 9223372036854775808]", True),
        ("[-9223372036854775809, 1.5]", True),
        ("[1e300, -1e300, 5]", False),  # floats beyond the range are floats
        ("[1e300, 99999999999999999999]", True),
        ("[[1, 2], [3, 99999999999999999999]]", True),
        ('["x", {"b": [0.5, -99999999999999999999]}]', True),
        ('{"a": [null, true, 99999999999999999999]}', True),
        ('{"a": [null, true, 9]}', False),
        ("1" + "0" * 5000, True),  # more digits than int() converts
    ],
)
def test_integers_beyond_64_bits_are_refused_anywhere(text: str, refused: bool) -> None:
    if refused:
        with pytest.raises(InvalidRequest):
            parse_json(text.encode())
    else:
        assert parse_json(text.encode()) == json.loads(text)


def _stdlib(raw: bytes) -> Any:
    """What ``parse_json`` answered before orjson: the standard library's decoder alone."""
    try:
        value = bodies.parse_json_stdlib(raw)
    except FedldpError as exc:
        return ("refused", exc.code, exc.detail)
    return ("value", value)


def _ours(raw: bytes) -> Any:
    try:
        value = parse_json(raw)
    except FedldpError as exc:
        return ("refused", exc.code, exc.detail)
    return ("value", value)


def _same(a: Any, b: Any) -> bool:
    """Equal, and each float bit for bit (0.0 and -0.0 differ), each int an int (an explicit
    stack: the bodies nest deeper than the recursion limit allows)."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, float):
            if struct.pack("<d", x) != struct.pack("<d", y):
                return False
        elif isinstance(x, dict):
            if list(x) != list(y):
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list | tuple):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True


@pytest.mark.parametrize(
    "raw",
    [
        b'{"epsilon": 1.0, "epsilon": 0.001}',
        b'{"a": {"b": 1, "b": 1}}',
        b'[{"a": 1}, {"a": 1, "a": 2}]',
        b'{"a": ":", "b": "x\\":"}',  # strings that look like a key's end: the slow path
        b'{"a": 1, "a": 1, "s": "\\":"}',  # a duplicate hidden behind a key-like string
        b'{"a": 9223372036854775807, "b": -9223372036854775808}',
        b'{"a": 18446744073709551615}',  # orjson reads it as an integer, refused by both
        b'{"a": 18446744073709551616}',  # orjson reads it as a float: the slow path refuses
        b"[-9223372036854775809]",
        b'{"a": NaN}',
        b"[1e400]",
        b'["\\ud800"]',  # a lone surrogate: the standard library takes it, orjson does not
        b"\xef\xbb\xbf{}",
        b'{"caf\xe9": 1}',
        b'{"a"\n :\t1, "b" : [0.1, 1e-320, -0.0, 5e-324, 1.7976931348623157e308]}',
        b"[" * 2000 + b"]" * 2000,
        b"[" * 900 + b"]" * 900,
        b"",
        b"{}",
        b"[0.30000000000000004, 0.1000000000000000055511151231257827021181583404541015625]",
    ],
)
def test_the_fast_decoder_answers_as_the_standard_library(raw: bytes) -> None:
    assert _same(_ours(raw), _stdlib(raw)), (_ours(raw), _stdlib(raw))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.sampled_from('ab":\\ \u00e9'), max_size=6),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(st.tuples(st.sampled_from(["a", "b", 'c":', "d"]), inner), max_size=4)
    ),
    max_leaves=25,
)


def _text(value: Any) -> str:
    """JSON text of ``value``, where a list of pairs is an object (keys may repeat)."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):
        return "{" + ", ".join(f"{json.dumps(k)}: {_text(v)}" for k, v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_text(v) for v in value) + "]"
    if isinstance(value, tuple):
        return _text(list(value))
    return json.dumps(value)


@settings(max_examples=400, deadline=None)
@given(json_values, st.sampled_from(["%r", "%.17g", "%.20e", "%.3g"]))
def test_the_fast_decoder_answers_as_the_standard_library_on_any_json(
    value: Any, float_format: str
) -> None:
    text = _text(value)
    if float_format != "%r":  # the same numbers written otherwise (more or fewer digits)
        text = re.sub(
            r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+e[-+]?\d+",
            lambda m: float_format % float(m.group()),
            text,
        )
    raw = text.encode()
    assert _same(_ours(raw), _stdlib(raw)), text


@pytest.mark.parametrize(
    "literal",
    ["-9223372036854775809", "9223372036854775808", "-9223372036854775808", "4611686018427387904"],
)
def test_integers_near_the_64_bit_edge_are_read_as_the_standard_library_reads_them(
    literal: str,
) -> None:
    """orjson reads -2^63-1 as the float -2^63: the fast path must not take it for a number
    inside the range (an integer metadata column took it, 201)."""
    for raw in (f'{{"a": {literal}}}', f'{{"a": [1, {literal}]}}', f"[[{literal}, 2.5]]"):
        assert _same(_ours(raw.encode()), _stdlib(raw.encode())), raw
