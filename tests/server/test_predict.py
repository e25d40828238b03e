"""POST /v1/studies/{id}/predict: a finished nonparametric study as a predictor, and every refusal
(not finished, not a predictor, malformed rows) with its stable code."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from fedldp.protocol.core.base.records import RoundTask
from fedldp.protocol.core.streams import UserStreams, stream_key
from fedldp.protocol.core.wire import MAX_PREDICT_ROWS, PredictView
from fedldp.protocol.mechanisms.transforms import fwht
from fedldp.protocol.user_level.binned import UserClassify
from tests.server.helpers import create_study, enroll, expect_error, round_of, start, submit_batch

PARAMS = {"samples_per_user": 4, "bins_per_axis": 4, "dimension": 1}
N = 240
EPSILON = 400.0  # low-privacy regime: ε/4 per cell, so 240 users see the labels' signs


async def finished_classify_study(client: httpx.AsyncClient) -> tuple[str, list[float]]:
    """A user-classify study driven to the end with reports made by the protocol's own client
    step (users' encodings: label +1 on the right half of [0, 1], −1 on the left); returns its
    id and the cell predictions the same outputs give in process."""
    proto = UserClassify()
    params = proto.parse_params(PARAMS)
    study = await create_study(client, "user-classify", PARAMS, seed=5)
    people = await enroll(client, study.id, [EPSILON] * N)
    await start(client, study.id)
    plan = proto.plan(params, np.full(N, EPSILON), {}, 5)
    outputs = []
    for rp in plan.rounds:
        view = await round_of(client, study.id, rp.index)
        task = RoundTask.of(rp, view.broadcast or {})
        # every user's 4 samples: one in each cell, label sign(cell − 1.5)
        label_sums = np.tile([-1.0, -1.0, 1.0, 1.0], (rp.cohort.size, 1))
        values = fwht(label_sums) / 4  # U_ik = (1/m) Σ_j y_ij H_{k, b(x_ij)}
        rng = UserStreams(stream_key(1, 2, rp.index), rp.cohort)
        payloads = proto.privatize_components(params, task, values, rp.epsilon, rp.groups(), rng)
        members = [people[int(s)] for s in rp.cohort]
        kind = "histogram" if rp.index == 0 else "vector"
        rows = payloads.reshape(rp.cohort.size, -1).tolist()
        receipt = await submit_batch(client, study.id, rp.index, kind, members, rows)
        assert receipt.accepted == rp.cohort.size
        outputs.append((await round_of(client, study.id, rp.index)).output or {})
    local = proto.cell_predictions(params, plan, outputs)
    return study.id, local.tolist()


async def test_a_finished_classification_study_predicts_feature_rows(
    client: httpx.AsyncClient,
) -> None:
    study_id, cells = await finished_classify_study(client)
    rows = [[0.1], [0.3], [0.6], [0.99], [1.7], [-2.0]]
    response = await client.post(f"/v1/studies/{study_id}/predict", json={"features": rows})
    assert response.status_code == 200, response.text
    view = PredictView.model_validate_json(response.content)
    assert view.protocol == "user-classify"
    assert view.predictions == [cells[0], cells[1], cells[2], cells[3], cells[3], cells[0]]
    assert cells == [-1.0, -1.0, 1.0, 1.0]  # the signs the users' labels carry

    bad_width = {"features": [[0.1, 0.2]]}
    body = expect_error(
        await client.post(f"/v1/studies/{study_id}/predict", json=bad_width), 422,
        "invalid_request",
    )  # fmt: skip
    assert "dimension 1" in body.detail
    for features in ([], [[0.1]] * (MAX_PREDICT_ROWS + 1), [["x"]]):
        expect_error(
            await client.post(f"/v1/studies/{study_id}/predict", json={"features": features}),
            422,
            "invalid_request",
        )
    nan = b'{"features": [[NaN]]}'
    expect_error(
        await client.post(
            f"/v1/studies/{study_id}/predict",
            content=nan,
            headers={"content-type": "application/json"},
        ),
        422,
        "invalid_request",
    )


async def test_prediction_is_refused_before_the_end_and_for_other_protocols(
    client: httpx.AsyncClient,
) -> None:
    body = {"features": [[0.5]]}
    study = await create_study(client, "user-classify", PARAMS)
    expect_error(
        await client.post(f"/v1/studies/{study.id}/predict", json=body), 409, "not_finished"
    )
    mean = await create_study(client, "user-mean", {"samples_per_user": 4})
    expect_error(
        await client.post(f"/v1/studies/{mean.id}/predict", json=body), 422,
        "prediction_unsupported",
    )  # fmt: skip
    expect_error(await client.post("/v1/studies/nope/predict", json=body), 404, "unknown_study")


@pytest.mark.parametrize("protocol", ["user-classify", "user-regress"])
async def test_the_catalogue_lists_the_predictors(client: httpx.AsyncClient, protocol: str) -> None:
    response = await client.get("/v1/protocols")
    names = {p["name"]: p for p in response.json()["protocols"]}
    assert names[protocol]["data_kind"] == "labeled"
