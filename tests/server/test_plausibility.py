"""Implausible reports are refused at ingestion (server/services/participants.py): a Laplace report
far outside what the honest randomizer produces at the declared ε (issue 13: a report of 1.18e21 to
a bound-1 scalar protocol used to be stored and wreck the estimate)."""

from __future__ import annotations

import math

import httpx

from fedldp.protocol.core.wire import ResultView
from fedldp.protocol.mechanisms.plausibility import LAPLACE_TAIL
from tests.server.helpers import create_study, enroll, expect_error, round_of, start, submit_batch


async def test_a_huge_laplace_report_is_refused_and_counted(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "baseline-clipped-laplace", {"samples_per_user": 4})
    people = await enroll(client, study.id, [1.0, 1.0, 1.0, 0.5])
    await start(client, study.id)
    # D = 1, scale 2D/ε: the bound is D + (2D/ε)·ln(10^12) (56.26 at ε = 1, 111.5 at ε = 0.5)
    bound = 1.0 + 2.0 * LAPLACE_TAIL
    single = await client.post(
        f"/v1/studies/{study.id}/reports",
        json={
            "participant_id": people[0].participant_id,
            "token": people[0].token,
            "round": 0,
            "payload": {"kind": "scalar", "value": 1.18e21},
        },
    )
    expect_error(single, 422, "implausible_report")
    receipt = await submit_batch(
        client,
        study.id,
        0,
        "scalar",
        people,
        [[1.18e21], [math.nextafter(bound, 0.0)], [-bound - 1e-9], [1.0 + 4.0 * LAPLACE_TAIL]],
    )
    assert (receipt.accepted, receipt.rejected) == (2, 2)
    assert [(i.participant_id, i.code) for i in receipt.items] == [
        (people[0].participant_id, "implausible_report"),
        (people[2].participant_id, "implausible_report"),
    ]
    view = await round_of(client, study.id, 0)
    assert (view.received, view.refused) == (2, 3)
    # the refused may still send a plausible report: the round completes and counts them
    again = await submit_batch(client, study.id, 0, "scalar", [people[0], people[2]], [[0.5]] * 2)
    assert again.accepted == 2
    result = ResultView.model_validate_json(
        (await client.get(f"/v1/studies/{study.id}/result")).content
    )
    assert result.phase == "finished"
    assert result.estimate is not None
    assert abs(float(result.estimate)) < 1e3  # type: ignore[arg-type]
    rounds = result.diagnostics["participation"]["rounds"]
    assert rounds == [
        {"round": 0, "name": "report", "planned": 4, "late": 0, "refused": 3, "received": 4}
    ]
