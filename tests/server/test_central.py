"""Central-trust studies over HTTP (protocol/central/protocols.py): contributions kept in their own
table, never returned, deleted when the study ends; the noise seed secret; paper-proxy only with the
explicit unsafe flag."""

from __future__ import annotations

import httpx
import numpy as np
from fastapi import FastAPI
from sqlalchemy import func, select

from fedldp.protocol.core.wire import ProtocolList, ResultView, StudyView
from fedldp.server.store import report_rows
from fedldp.server.store.tables import ContributionRow, StudyRow
from tests.server.helpers import (
    app_context,
    create_study,
    enroll,
    expect_error,
    start,
    submit_batch,
)

N = 200


def _counts(app: FastAPI, study_id: str) -> tuple[int, int, set[bytes], set[str]]:
    """Contribution rows, report rows, the reports' payloads and digests."""
    with app_context(app).transaction() as session:
        contributions = session.scalar(
            select(func.count())
            .select_from(ContributionRow)
            .where(ContributionRow.study_id == study_id)
        )
        reports = report_rows.list_reports(session, study_id)
        return (
            int(contributions or 0),
            len(reports),
            {r.payload for r in reports},
            {r.digest for r in reports},
        )


async def test_contributions_are_kept_apart_and_deleted_at_the_end(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    study = await create_study(client, "central-wme", {}, noise_seed=123)
    assert study.trust == "central"
    assert "noise_seed" not in study.model_dump()
    people = await enroll(client, study.id, [1.0] * N)
    await start(client, study.id)
    means = np.random.default_rng(5).uniform(-0.9, 0.9, N)  # 17-digit markers
    rows = [[float(mu), 5.0] for mu in means]
    half = N // 2
    await submit_batch(client, study.id, 0, "statistic", people[:half], rows[:half])
    contributions, reports, payloads, _ = _counts(app, study.id)
    assert (contributions, reports, payloads) == (half, half, {b""})  # receipts hold no payload
    receipt = await submit_batch(client, study.id, 0, "statistic", people[half:], rows[half:])
    assert receipt.accepted == N - half

    result = ResultView.model_validate_json(
        (await client.get(f"/v1/studies/{study.id}/result")).content
    )
    assert result.phase == "finished"
    assert result.trust == "central"
    contributions, reports, payloads, digests = _counts(app, study.id)
    assert (contributions, reports, payloads, digests) == (0, N, {b""}, {""})
    everything = "".join(
        [
            (await client.get(f"/v1/studies/{study.id}")).text,
            (await client.get(f"/v1/studies/{study.id}/rounds")).text,
            (await client.get(f"/v1/studies/{study.id}/result")).text,
        ]
    )
    assert not any(repr(float(mu)) in everything for mu in means)  # no statistic is shown
    with app_context(app).transaction() as session:
        row = session.get(StudyRow, study.id)
        assert row is not None
        assert row.noise_seed == 123


async def test_a_cancelled_central_study_forgets_its_contributions(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    study = await create_study(client, "central-huber", {})
    people = await enroll(client, study.id, [1.0] * N)
    await start(client, study.id)
    await submit_batch(client, study.id, 0, "statistic", people[:10], [[0.1, 3.0]] * 10)
    assert _counts(app, study.id)[0] == 10
    response = await client.post(f"/v1/studies/{study.id}/cancel")
    assert StudyView.model_validate_json(response.content).phase == "cancelled"
    assert _counts(app, study.id)[0] == 0
    with app_context(app).transaction() as session:
        row = session.get(StudyRow, study.id)
        assert row is not None
        assert row.noise_seed is not None  # drawn by the server when none was given


async def test_paper_proxy_needs_the_unsafe_flag_and_says_it_is_not_private(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post(
        "/v1/studies",
        json={"protocol": "central-huber", "params": {"calibration": "paper-proxy"}, "seed": 1},
    )
    body = expect_error(response, 422, "invalid_params")
    assert "unsafe_non_private" in body.detail
    unsafe = {"calibration": "paper-proxy", "unsafe_non_private": True}
    study = await create_study(client, "central-huber", unsafe)
    people = await enroll(client, study.id, [1.0] * N)
    view = await start(client, study.id)
    assert any("NOT DIFFERENTIALLY PRIVATE" in w for w in view.warnings)
    rows = [[float(mu), 4.0] for mu in np.linspace(-0.5, 0.5, N)]
    await submit_batch(client, study.id, 0, "statistic", people, rows)
    result = ResultView.model_validate_json(
        (await client.get(f"/v1/studies/{study.id}/result")).content
    )
    assert result.diagnostics["differentially_private"] is False
    assert any("NOT DIFFERENTIALLY PRIVATE" in w for w in result.warnings)


async def test_the_catalogue_marks_central_protocols(client: httpx.AsyncClient) -> None:
    listing = ProtocolList.model_validate_json((await client.get("/v1/protocols")).content)
    trust = {p.name: p.trust for p in listing.protocols}
    assert trust["central-wme"] == trust["central-huber"] == "central"
    assert trust["user-mean"] == trust["histoftree"] == "local"
