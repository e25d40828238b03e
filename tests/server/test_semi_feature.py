"""Semi-feature LDP over HTTP (protocol/semi_feature/histoftree.py): masks and public features
enrolled as metadata, the ε split charged round by round, and a cell outside the sender's potential
set refused with invalid_payload and not stored."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from fedldp.client.population.features import synthetic_population
from fedldp.protocol.core.base.records import RoundTask
from fedldp.protocol.core.streams import UserStreams, stream_key
from fedldp.protocol.core.wire import BatchReceipt, BudgetView, EnrollmentBatch, TaskBatch
from fedldp.protocol.semi_feature.histoftree import HistOfTree
from fedldp.protocol.semi_feature.partition import Partition
from tests.server.helpers import (
    app_context,
    create_study,
    expect_error,
    report_count,
    round_of,
    start,
    submit_batch,
)

N = 400


async def test_a_cell_outside_the_potential_set_is_refused(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    population = synthetic_population(N, 3, 4.0, mask="aligned", private=2, test_size=10)
    proto = HistOfTree()
    raw = population.params(depth=2, bins=2)
    params = proto.parse_params(raw)
    study = await create_study(client, "histoftree", raw, seed=9)
    body = {
        "epsilons": population.epsilon.tolist(),
        "metadata": {k: v.tolist() for k, v in population.metadata.items()},
    }
    response = await client.post(f"/v1/studies/{study.id}/participants/batch", json=body)
    assert response.status_code == 201, response.text
    people = EnrollmentBatch.model_validate_json(response.content).enrollments
    await start(client, study.id)
    plan = proto.plan(params, population.epsilon, population.metadata, 9)

    for rp in plan.rounds:
        view = await round_of(client, study.id, rp.index)
        task = RoundTask.of(rp, view.broadcast or {})
        rng = UserStreams(stream_key(5, 1, rp.index), rp.cohort)
        data = population.data(rp.cohort)
        z = proto.privatize(params, task, data, rp.epsilon, rp.groups(), rng)
        members = [people[int(s)] for s in rp.cohort]
        rows = z.reshape(rp.cohort.size, -1).tolist()
        if rp.index == 1:
            assert len(task.broadcast["labels"]) == N  # the stored broadcast pairs the labels
            asked = await client.post(
                f"/v1/studies/{study.id}/tasks",
                json={"participant_ids": [m.participant_id for m in members[:3]],
                      "tokens": [m.token for m in members[:3]]},
            )  # fmt: skip
            sent = TaskBatch.model_validate_json(asked.content).reports[0].broadcast
            assert "labels" not in sent  # ... which the clients are not sent (O(n))
            assert sent["partition"] == task.broadcast["partition"]
            part = Partition.from_json(task.broadcast["partition"])
            slot = int(rp.cohort[0])
            a_set, b_set = part.potential(
                plan.metadata["public"][[slot]], plan.metadata["mask"][[slot]] == 0
            )
            outside = np.flatnonzero(~(a_set[0][:, None] & b_set[0][None, :]).reshape(-1))
            assert outside.size, "aligned masks with public tree dims leave cells out of V_i"
            bad = await client.post(
                f"/v1/studies/{study.id}/reports/batch",
                json={
                    "round": 1,
                    "kind": "scalar",
                    "participant_ids": [slot],
                    "tokens": [people[slot].token],
                    "payloads": [[float(outside[0])]],
                },
            )
            assert bad.status_code == 200, bad.text
            refused = BatchReceipt.model_validate_json(bad.content)
            assert (refused.accepted, refused.rejected) == (0, 1)
            assert refused.items[0].code == "invalid_payload"
            assert report_count(app_context(app), study.id, 1) == 0
        receipt = await submit_batch(client, study.id, rp.index, "scalar", members, rows)
        assert receipt.accepted == rp.cohort.size

    budget = await client.get(
        f"/v1/studies/{study.id}/participants/0/budget",
        headers={"Authorization": f"Bearer {people[0].token}"},
    )
    ledger = BudgetView.model_validate_json(budget.content)
    rho = params.rho
    assert [c.epsilon for c in ledger.planned] == [rho * 4.0, (1 - rho) * 4.0]
    assert ledger.spent == 4.0
    result = await client.get(f"/v1/studies/{study.id}/result")
    assert result.json()["phase"] == "finished"
    expect_error(
        await client.post(f"/v1/studies/{study.id}/predict", json={"features": [[0.5] * 4]}),
        422,
        "invalid_request",
    )
    rows = [[0.1, 0.9, 0.5, 0.3, 0.7], [0.8, 0.2, 0.4, 0.6, 0.1]]
    answer = await client.post(f"/v1/studies/{study.id}/predict", json={"features": rows})
    assert answer.status_code == 200, answer.text
    outputs = [
        r["output"] for r in (await client.get(f"/v1/studies/{study.id}/rounds")).json()["rounds"]
    ]
    local = proto.predict(params, plan, outputs, np.asarray(rows))
    assert answer.json()["predictions"] == pytest.approx(local.tolist(), rel=1e-12)
