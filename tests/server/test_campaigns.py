"""The campaign routes and services (server/services/campaigns.py) on every backend: the clock
the driver advances, occurrences opened again after a crash, and the ledger keyed by device with
its budget windows and stable refusals."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.accounting import composed_epsilon
from fedldp.protocol.core.wire import (
    CampaignView,
    DeviceBudgetView,
    OccurrenceView,
    occurrence_seed,
)
from tests.server.helpers import expect_error

BODY: dict[str, Any] = {
    "protocol": "hetero-mean-rr",
    "seed": 11,
    "every": 0.5,
    "times": 4,
    "budget_epsilon": 1.5,
    "budget_period": 1.0,
}


async def _campaign(client: httpx.AsyncClient, **over: Any) -> CampaignView:
    response = await client.post("/v1/campaigns", json={**BODY, **over})
    assert response.status_code == 201, response.text
    return CampaignView.model_validate_json(response.content)


async def _next(client: httpx.AsyncClient, campaign: str) -> OccurrenceView:
    response = await client.post(f"/v1/campaigns/{campaign}/occurrences/next")
    assert response.status_code == 200, response.text
    return OccurrenceView.model_validate_json(response.content)


async def _admit(
    client: httpx.AsyncClient, campaign: str, index: int, *devices: tuple[str, float]
) -> httpx.Response:
    body = {"devices": [{"device": d, "epsilon": e} for d, e in devices]}
    return await client.post(f"/v1/campaigns/{campaign}/occurrences/{index}/devices", json=body)


async def _run(client: httpx.AsyncClient, study: str) -> None:
    """Enroll two participants, then cancel the study: what a driver that died mid-occurrence
    leaves (its study is cancelled by the next run)."""
    anyone = await client.post(f"/v1/studies/{study}/participants/batch", json={"epsilons": [1.0]})
    expect_error(anyone, 403, "enrollment_closed")  # an occurrence's study is leased
    lease = (await client.post(f"/v1/studies/{study}/leases", json={"size": 2})).json()
    enrolled = await client.post(
        f"/v1/studies/{study}/participants/batch",
        json={"epsilons": [1.0, 1.0], "participant_ids": [0, 1]},
        headers={"Authorization": f"Bearer {lease['token']}"},
    )
    assert enrolled.status_code == 201, enrolled.text
    assert (await client.post(f"/v1/studies/{study}/cancel")).status_code == 200


async def test_occurrences_open_in_order_on_their_days(client: httpx.AsyncClient) -> None:
    campaign = await _campaign(client, name="daily")
    assert campaign.clock is None
    assert campaign.occurrences == []
    days = []
    for k in range(4):
        occurrence = await _next(client, campaign.id)
        assert occurrence.index == k
        again = await _next(client, campaign.id)  # still open: the same one
        assert again.study_id == occurrence.study_id
        study = (await client.get(f"/v1/studies/{occurrence.study_id}")).json()
        assert study["seed"] == occurrence_seed(11, k)
        assert study["protocol"] == "hetero-mean-rr"
        days.append(occurrence.day)
        assert (await client.post(f"/v1/studies/{occurrence.study_id}/cancel")).status_code == 200
    assert days == [0.0, 0.5, 1.0, 1.5]
    view = CampaignView.model_validate_json(
        (await client.get(f"/v1/campaigns/{campaign.id}")).content
    )
    assert view.clock == 1.5
    assert [o.phase for o in view.occurrences] == ["cancelled"] * 4
    expect_error(
        await client.post(f"/v1/campaigns/{campaign.id}/occurrences/next"), 409, "campaign_complete"
    )
    listed = (await client.get("/v1/campaigns")).json()["campaigns"]
    assert [c["id"] for c in listed] == [campaign.id]
    expect_error(
        await client.post("/v1/campaigns", json={**BODY, "name": "daily"}), 409, "campaign_exists"
    )


async def test_an_occurrence_left_half_run_is_opened_again_with_a_new_study(
    client: httpx.AsyncClient,
) -> None:
    campaign = await _campaign(client)
    first = await _next(client, campaign.id)
    assert (await _admit(client, campaign.id, 0, ("d1", 1.0))).status_code == 200
    await _run(client, first.study_id)  # enrolled, then cancelled: as a driver that died
    retry = await _next(client, campaign.id)
    assert retry.index == 0
    assert retry.study_id != first.study_id
    again = (await client.get(f"/v1/studies/{retry.study_id}")).json()
    assert again["seed"] == occurrence_seed(11, 0)  # the same reports will be sent
    # the device was charged once for occurrence 0, and is not charged again
    assert (await _admit(client, campaign.id, 0, ("d1", 1.0))).status_code == 200
    budget = DeviceBudgetView.model_validate_json(
        (await client.get(f"/v1/campaigns/{campaign.id}/devices/d1/budget")).content
    )
    assert [(s.occurrence, s.epsilon) for s in budget.spends] == [(0, 1.0)]


async def test_the_ledger_keeps_each_window_within_the_budget(client: httpx.AsyncClient) -> None:
    campaign = await _campaign(client)
    for k in range(4):  # days 0, 0.5 (window 0), 1, 1.5 (window 1)
        occurrence = await _next(client, campaign.id)
        first = await _admit(client, campaign.id, k, ("a", 1.0))
        if k % 2 == 0:
            assert first.status_code == 200, first.text
        else:
            expect_error(first, 409, "budget_exceeded")
        assert (await _admit(client, campaign.id, k, ("b", 0.75))).status_code == 200
        assert (await client.post(f"/v1/studies/{occurrence.study_id}/cancel")).status_code == 200
    a = DeviceBudgetView.model_validate_json(
        (await client.get(f"/v1/campaigns/{campaign.id}/devices/a/budget")).content
    )
    assert [s.occurrence for s in a.spends] == [0, 2]
    assert a.spent_total == 2.0
    assert a.spent_window == 1.0
    assert a.remaining == 0.5
    b = DeviceBudgetView.model_validate_json(
        (await client.get(f"/v1/campaigns/{campaign.id}/devices/b/budget")).content
    )
    assert b.spent_total == 3.0
    assert b.remaining == 0.0  # two charges of 0.75 fill the window exactly
    nobody = (await client.get(f"/v1/campaigns/{campaign.id}/devices/c/budget")).json()
    assert nobody["spends"] == []


async def test_a_lifetime_budget_and_no_budget(client: httpx.AsyncClient) -> None:
    lifetime = await _campaign(client, budget_period=None, budget_epsilon=2.0, every=7.0)
    unlimited = await _campaign(client, budget_period=None, budget_epsilon=None)
    for k in range(3):
        for campaign in (lifetime, unlimited):
            occurrence = await _next(client, campaign.id)
            answer = await _admit(client, campaign.id, k, ("x", 1.0))
            if campaign is lifetime and k == 2:
                expect_error(answer, 409, "budget_exceeded")
            else:
                assert answer.status_code == 200, answer.text
            await client.post(f"/v1/studies/{occurrence.study_id}/cancel")


@pytest.mark.parametrize(
    ("over", "status", "code"),
    [
        ({"protocol": "nope"}, 422, "unknown_protocol"),
        ({"protocol": "central-wme"}, 422, "invalid_request"),  # no budget_delta
        ({"budget_delta": 1e-6}, 422, "invalid_request"),  # δ for a pure-ε protocol
        ({"protocol": "central-wme", "budget_delta": 1.5}, 422, "invalid_request"),
        ({"protocol": "central-wme", "budget_delta": 0}, 422, "invalid_request"),
        ({"protocol": "central-wme", "budget_delta": "tiny"}, 422, "invalid_request"),
        (  # the release's own δ (1e-5) is not below the budget's: no finite ε
            {"protocol": "central-huber", "budget_delta": 1e-6},
            422,
            "invalid_params",
        ),
        (  # paper-proxy is not differentially private
            {
                "protocol": "central-huber",
                "params": {"calibration": "paper-proxy", "unsafe_non_private": True},
                "budget_delta": 1e-3,
            },
            422,
            "invalid_params",
        ),
        ({"params": {"nope": 1}}, 422, "invalid_params"),
        ({"budget_epsilon": None}, 422, "invalid_request"),  # a period without a budget
        ({"every": 0}, 422, "invalid_request"),
        ({"times": 0}, 422, "invalid_request"),
        ({"budget_epsilon": "2"}, 422, "invalid_request"),
    ],
)
async def test_bad_campaigns_are_refused_with_stable_codes(
    client: httpx.AsyncClient, over: dict[str, Any], status: int, code: str
) -> None:
    expect_error(await client.post("/v1/campaigns", json={**BODY, **over}), status, code)


async def test_admissions_are_refused_with_stable_codes(client: httpx.AsyncClient) -> None:
    campaign = await _campaign(client)
    expect_error(await client.get("/v1/campaigns/nope"), 404, "unknown_campaign")
    expect_error(await client.post("/v1/campaigns/nope/occurrences/next"), 404, "unknown_campaign")
    expect_error(await client.get("/v1/campaigns/nope/devices/d/budget"), 404, "unknown_campaign")
    expect_error(await _admit(client, campaign.id, 0, ("d", 1.0)), 404, "unknown_occurrence")
    occurrence = await _next(client, campaign.id)
    expect_error(
        await _admit(client, campaign.id, 0, ("d", 1.0), ("d", 1.0)), 409, "duplicate_conflict"
    )
    expect_error(await _admit(client, campaign.id, 0, ("bad id!", 1.0)), 422, "invalid_request")
    expect_error(await _admit(client, campaign.id, 0, ("d", 0.0)), 422, "invalid_request")
    bad_device = await client.get(f"/v1/campaigns/{campaign.id}/devices/{'x' * 65}/budget")
    expect_error(bad_device, 422, "invalid_request")
    assert (await _admit(client, campaign.id, 0, ("d", 1.0))).status_code == 200
    expect_error(await _admit(client, campaign.id, 0, ("d", 0.5)), 409, "duplicate_conflict")
    await _run(client, occurrence.study_id)
    expect_error(await _admit(client, campaign.id, 0, ("e", 0.5)), 409, "study_not_enrolling")


async def test_the_view_holds_declared_truths_and_the_charges_in_aggregate(
    client: httpx.AsyncClient,
) -> None:
    """What the dashboard's campaign view draws: each occurrence's declared truth (None until
    declared; declared again: replaced), the devices charged and their ε per occurrence, and the
    devices' cumulative spends as a histogram."""
    campaign = await _campaign(client, name="truths")
    first = await _next(client, campaign.id)
    assert (first.truth, first.devices_charged, first.error_bar) == (None, 0, None)
    put = f"/v1/campaigns/{campaign.id}/occurrences/0/truth"
    assert (await client.put(put, json={"truth": 0.25})).status_code == 200
    declared = await client.put(put, json={"truth": [0.5, 0.5]})
    assert OccurrenceView.model_validate_json(declared.content).truth == [0.5, 0.5]
    assert (await _admit(client, campaign.id, 0, ("a", 1.0), ("b", 0.5))).status_code == 200
    await _run(client, first.study_id)
    assert (await _next(client, campaign.id)).index == 0  # cancelled with participants: again
    second = await _next(client, campaign.id)
    assert (second.index, second.truth) == (0, [0.5, 0.5])  # kept by the reopened occurrence
    view = CampaignView.model_validate_json(
        (await client.get(f"/v1/campaigns/{campaign.id}")).content
    )
    (only,) = view.occurrences
    assert (only.devices_charged, only.epsilon_charged) == (2, 1.5)
    assert view.spent is not None
    assert (view.spent.devices, view.spent.total, view.spent.max) == (2, 1.5, 1.0)
    assert view.spent.mean == 0.75
    assert (sum(view.spent.counts), view.spent.edges[0]) == (2, 0.0)
    assert (view.spent.edges[-1], view.spent.counts[-1]) == (1.0, 1)  # the last bin: closed
    listed = (await client.get("/v1/campaigns")).json()["campaigns"]
    assert listed[0]["occurrences"][0]["truth"] == [0.5, 0.5]


async def test_a_truth_is_refused_when_it_cannot_be_one(client: httpx.AsyncClient) -> None:
    campaign = await _campaign(client, name="refused-truths")
    put = f"/v1/campaigns/{campaign.id}/occurrences/0/truth"
    expect_error(await client.put(put, json={"truth": 0.1}), 404, "unknown_occurrence")
    await _next(client, campaign.id)
    bad: dict[str, Any]
    for bad in ({"truth": "0.1"}, {"truth": []}, {"truth": None}, {}, {"truth": 0.1, "x": 1}):
        expect_error(await client.put(put, json=bad), 422, "invalid_request")
    expect_error(await client.put(put, content=b'{"truth": NaN}'), 422, "invalid_request")
    missing = f"/v1/campaigns/{'0' * 32}/occurrences/0/truth"
    expect_error(await client.put(missing, json={"truth": 0.1}), 404, "unknown_campaign")


async def test_memoized_protocols_are_charged_by_their_rule(client: httpx.AsyncClient) -> None:
    """memo-1bitmean's server rule (docs/longitudinal.md §5): min(T, s + 1)·ε in all, whatever
    the values; fresh, T·ε. Lifetime budgets: refused at the occurrence that would pass them."""
    common = {"protocol": "memo-1bitmean", "every": 1.0, "times": 5, "budget_period": None}
    two = await _campaign(client, **common, params={"levels": 1}, budget_epsilon=2.5)
    four = await _campaign(client, **common, params={"levels": 3}, budget_epsilon=3.5)
    fresh = await _campaign(
        client, **common, params={"levels": 1, "memoize": False}, budget_epsilon=2.5
    )
    refused_at = {two.id: None, four.id: 3, fresh.id: 2}
    for k in range(5):
        for campaign in (two, four, fresh):
            occurrence = await _next(client, campaign.id)
            answer = await _admit(client, campaign.id, k, ("m", 1.0))
            first_refusal = refused_at[campaign.id]
            if first_refusal is not None and k >= first_refusal:
                expect_error(answer, 409, "budget_exceeded")
            else:
                assert answer.status_code == 200, answer.text
            await client.post(f"/v1/studies/{occurrence.study_id}/cancel")
    view = DeviceBudgetView.model_validate_json(
        (await client.get(f"/v1/campaigns/{two.id}/devices/m/budget")).content
    )
    assert [s.epsilon for s in view.spends] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert [s.declared for s in view.spends] == [1.0] * 5
    assert (view.spent_total, view.remaining) == (2.0, 0.5)
    view = DeviceBudgetView.model_validate_json(
        (await client.get(f"/v1/campaigns/{fresh.id}/devices/m/budget")).content
    )
    assert [s.epsilon for s in view.spends] == [1.0, 1.0]
    # the campaign's view states the same charges, per occurrence and per device: not the
    # declared ε's (5 in all), which the dashboard drew before
    shown = CampaignView.model_validate_json((await client.get(f"/v1/campaigns/{two.id}")).content)
    assert [o.epsilon_charged for o in shown.occurrences] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert [o.devices_charged for o in shown.occurrences] == [1] * 5
    assert shown.spent is not None
    assert (shown.spent.devices, shown.spent.total, shown.spent.max) == (1, 2.0, 2.0)


async def test_a_memoized_response_at_another_epsilon_is_refused(
    client: httpx.AsyncClient,
) -> None:
    campaign = await _campaign(
        client, protocol="memo-1bitmean", params={}, budget_epsilon=None, budget_period=None
    )
    occurrence = await _next(client, campaign.id)
    assert (await _admit(client, campaign.id, 0, ("m", 1.0))).status_code == 200
    await client.post(f"/v1/studies/{occurrence.study_id}/cancel")
    await _next(client, campaign.id)
    expect_error(await _admit(client, campaign.id, 1, ("m", 2.0)), 422, "invalid_request")


async def test_central_releases_are_composed_at_the_budgets_delta(
    client: httpx.AsyncClient,
) -> None:
    """central-wme-vector (d = 3) at ε = 1 an occurrence, a lifetime budget of ε 2 at δ 1e-6:
    basic composition of the (1, 1e-5) guarantees would refuse the third occurrence; the PLD
    composition of the releases' own Laplace and Gaussian noise admits five (composed ε 1.98)
    and refuses the sixth (2.20). The server's numbers are dp-accounting's, as the device's."""
    params = {"dimension": 3}
    campaign = await _campaign(
        client,
        protocol="central-wme-vector",
        params=params,
        times=7,
        budget_period=None,
        budget_epsilon=2.0,
        budget_delta=1e-6,
    )
    assert campaign.budget_delta == 1e-6
    protocol = get_protocol("central-wme-vector")
    event = protocol.release_event(protocol.parse_params(params), 1.0)
    expected = [composed_epsilon([event] * k, 1e-6) for k in range(1, 8)]
    fits = [e <= 2.0 for e in expected]
    assert fits == [True] * 5 + [False] * 2
    for k in range(6):
        occurrence = await _next(client, campaign.id)
        answer = await _admit(client, campaign.id, k, ("a", 1.0), ("b", 0.5))
        if k < 5:
            assert answer.status_code == 200, answer.text
        else:
            expect_error(answer, 409, "budget_exceeded")
        await client.post(f"/v1/studies/{occurrence.study_id}/cancel")
    a = DeviceBudgetView.model_validate_json(
        (await client.get(f"/v1/campaigns/{campaign.id}/devices/a/budget")).content
    )
    assert a.budget_delta == 1e-6
    assert [s.cumulative for s in a.spends] == expected[:5]
    assert a.spent_total == expected[4] == a.spent_window
    assert a.remaining == pytest.approx(2.0 - expected[4], abs=1e-15)
    # the charges are the increases of the composed ε: they add up to it
    assert sum(s.epsilon for s in a.spends) == pytest.approx(expected[4], rel=1e-12)
    b = DeviceBudgetView.model_validate_json(
        (await client.get(f"/v1/campaigns/{campaign.id}/devices/b/budget")).content
    )
    half = protocol.release_event(protocol.parse_params(params), 0.5)
    assert b.spent_total == composed_epsilon([half] * 5, 1e-6)
    view = CampaignView.model_validate_json(
        (await client.get(f"/v1/campaigns/{campaign.id}")).content
    )
    assert view.spent is not None
    assert view.spent.max == expected[4]


async def test_a_central_budget_per_period_composes_each_window(
    client: httpx.AsyncClient,
) -> None:
    """Twice a day, ε 1.5 at δ 1e-6 per day, central-wme at ε = 1: each day composes its own
    releases (two pure ε = 1 releases compose to ≈ 2 > 1.5 at this δ), so a device is admitted
    once a day and refused the second time, every day."""
    campaign = await _campaign(
        client, protocol="central-wme", params={}, times=4, budget_delta=1e-6
    )
    for k in range(4):
        occurrence = await _next(client, campaign.id)
        answer = await _admit(client, campaign.id, k, ("a", 1.0))
        if k % 2 == 0:
            assert answer.status_code == 200, answer.text
        else:
            expect_error(answer, 409, "budget_exceeded")
        await client.post(f"/v1/studies/{occurrence.study_id}/cancel")
    a = DeviceBudgetView.model_validate_json(
        (await client.get(f"/v1/campaigns/{campaign.id}/devices/a/budget")).content
    )
    one = composed_epsilon(
        [
            get_protocol("central-wme").release_event(
                get_protocol("central-wme").parse_params({}), 1.0
            )
        ],
        1e-6,
    )
    assert [s.epsilon for s in a.spends] == [one, one]  # a fresh window each day
    assert a.spent_window == one
    assert a.spends[-1].cumulative == a.spent_total > one  # the lifetime composition of both
