"""Metrics, request ids and JSON logs (server/runtime/metrics.py, server/web/observe.py)."""

from __future__ import annotations

import json
import logging

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fedldp.server.web.observe import REQUEST_ID, JsonFormatter, RequestIdFilter
from tests.server.helpers import create_study, enroll, start, submit_batch


async def samples(
    client: httpx.AsyncClient,
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def requests_of(
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float], route: str, status: str
) -> float:
    key = ("fedldp_http_requests_total", (("method", "GET"), ("route", route), ("status", status)))
    return values.get(key, 0.0)


async def test_requests_are_counted_by_route_template(client: httpx.AsyncClient) -> None:
    view = await create_study(client, "hetero-mean-rr")
    for _ in range(3):
        assert (await client.get(f"/v1/studies/{view.id}")).status_code == 200
    assert (await client.get(f"/v1/studies/{'0' * 32}")).status_code == 404
    assert (await client.get("/no/such/route")).status_code == 404
    values = await samples(client)
    assert requests_of(values, "/v1/studies/{study_id}", "200") == 3
    assert requests_of(values, "/v1/studies/{study_id}", "404") == 1
    assert requests_of(values, "<unmatched>", "404") == 1
    count = (
        "fedldp_http_request_duration_seconds_count",
        (("method", "GET"), ("route", "/v1/studies/{study_id}")),
    )
    assert values[count] == 4
    assert values[("fedldp_studies", (("phase", "enrolling"),))] == 1
    assert values[("fedldp_studies", (("phase", "running"),))] == 0
    assert values[("fedldp_db_statement_duration_seconds_count", ())] > 0


async def test_reports_and_rounds_are_counted(client: httpx.AsyncClient) -> None:
    view = await create_study(client, "hetero-mean-laplace")
    people = await enroll(client, view.id, [1.0] * 3)
    await start(client, view.id)
    forged = people[2].model_copy(update={"token": "x" * len(people[2].token)})
    await submit_batch(client, view.id, 0, "scalar", [people[0], forged], [[0.5], [0.5]])
    await submit_batch(client, view.id, 0, "scalar", [people[0]], [[0.5]])  # a resend
    single = {
        "participant_id": people[1].participant_id,
        "round": 0,
        "token": people[1].token,
        "payload": {"kind": "scalar", "value": 0.25},
    }
    assert (await client.post(f"/v1/studies/{view.id}/reports", json=single)).status_code == 201
    values = await samples(client)
    assert values[("fedldp_reports_total", (("code", ""), ("outcome", "accepted")))] == 2
    assert values[("fedldp_reports_total", (("code", ""), ("outcome", "duplicate")))] == 1
    assert (
        values[("fedldp_reports_total", (("code", "invalid_token"), ("outcome", "refused")))] == 1
    )
    assert values[("fedldp_rounds_closed_total", ())] == 0
    await submit_batch(client, view.id, 0, "scalar", [people[2]], [[0.0]])  # completes round 0
    values = await samples(client)
    assert values[("fedldp_rounds_closed_total", ())] == 1
    assert values[("fedldp_studies", (("phase", "finished"),))] == 1


async def test_request_ids_are_returned_and_kept(client: httpx.AsyncClient) -> None:
    first, second = await client.get("/health"), await client.get("/health")
    assert len(first.headers["x-request-id"]) == 32
    assert first.headers["x-request-id"] != second.headers["x-request-id"]
    mine = await client.get("/health", headers={"X-Request-ID": "trace-42.a"})
    assert mine.headers["x-request-id"] == "trace-42.a"
    # not a short token: replaced, never echoed into a header or a log line
    odd = await client.get("/health", headers={"X-Request-ID": "a b" * 40})
    assert len(odd.headers["x-request-id"]) == 32


def test_json_log_lines_carry_the_request_id() -> None:
    record = logging.LogRecord(
        "fedldp.server", logging.WARNING, __file__, 1, "study %s", ("s1",), None
    )
    record.round = 3
    token = REQUEST_ID.set("r-1")
    try:
        assert RequestIdFilter().filter(record)
    finally:
        REQUEST_ID.reset(token)
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "study s1"
    assert (line["level"], line["logger"], line["request_id"], line["round"]) == (
        "warning",
        "fedldp.server",
        "r-1",
        3,
    )
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(JsonFormatter().format(record))["exception"]


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_configure_logging_formats_records(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    from fedldp.server.web.observe import configure_logging

    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    try:
        configure_logging("info", fmt)
        token = REQUEST_ID.set("abc")
        logging.getLogger("fedldp.server").info("hello")
        REQUEST_ID.reset(token)
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    if fmt == "json":
        assert json.loads(err)["request_id"] == "abc"
    else:
        assert err.endswith("hello [request abc]")
