"""The campaign driver (client/campaign/drive.py) against the real app in process: the same
numbers as ``simulate_campaign``, a second run going on where the first stopped, and budgets
refused on both sides."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from fedldp.client.api.client import ApiClient, ApiError
from fedldp.client.campaign.drive import device_id, run_campaign
from fedldp.client.campaign.simulate import CampaignResult, simulate_campaign
from fedldp.client.campaign.template import CampaignTemplate
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.accounting import composed_epsilon
from fedldp.protocol.core.wire import DeviceBatch, DeviceCharge
from fedldp.server.runtime.context import Context
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app

URL = "http://fedldp.test"
REL = 1e-9  # the grouping of sums may differ (docs/architecture.md, The three parts)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[FastAPI]:
    application = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'campaign.db'}"))
    try:
        yield application
    finally:
        ctx: Context = application.state.ctx
        ctx.db.dispose()


def _template(**over: Any) -> CampaignTemplate:
    raw: dict[str, Any] = {
        "protocol": "classic-duchi",
        "population": {
            "users": 600,
            "distribution": "two-point",
            "mean": -0.2,
            "epsilon_mix": "0.5:0.4,1:0.6",
            "drift": {"mean_per_day": 0.05},
        },
        "every": "12h",
        "times": 5,
        "budget": {"epsilon": 1.5, "period": "1d"},
        **over,
    }
    return CampaignTemplate.model_validate(raw)


def assert_same(http: CampaignResult, local: CampaignResult) -> None:
    assert len(http.occurrences) == len(local.occurrences)
    for a, b in zip(http.occurrences, local.occurrences, strict=True):
        assert (a.index, a.day, a.enrolled, a.refused, a.truth) == (
            b.index,
            b.day,
            b.enrolled,
            b.refused,
            b.truth,
        )
        if b.estimate is None:
            assert a.estimate is None
        else:
            assert a.estimate is not None
            np.testing.assert_allclose(a.estimate, b.estimate, rtol=REL, atol=1e-12)
    np.testing.assert_array_equal(http.spent, local.spent)
    np.testing.assert_array_equal(http.bound, local.bound)


async def test_http_gives_the_in_process_numbers_and_resumes(app: FastAPI, tmp_path: Path) -> None:
    template, seed, folder = _template(), 7, tmp_path / "devices"
    transport = httpx.ASGITransport(app=app)
    first = await run_campaign(URL, template, seed, folder, transport=transport, limit=2)
    assert [o.index for o in first.occurrences] == [0, 1]
    done = await run_campaign(URL, template, seed, folder, transport=transport)
    local = simulate_campaign(template, seed)
    assert [o.enrolled for o in local.occurrences] == [600, 240, 600, 240, 600]
    assert_same(done, local)
    again = await run_campaign(URL, template, seed, folder, transport=transport)  # nothing left
    assert_same(again, local)
    async with ApiClient(URL, transport=transport) as api:
        (campaign,) = (await api.list_campaigns()).campaigns
        assert campaign.clock == 2.0
        assert [o.phase for o in campaign.occurrences] == ["finished"] * 5
        for o, mine in zip(campaign.occurrences, done.occurrences, strict=True):
            assert o.study_id == mine.study
            assert o.estimate == mine.estimate
        eps = np.asarray(
            [0.5 if e == 0.5 else 1.0 for e in _epsilons(template, seed)], dtype=np.float64
        )
        one = int(np.flatnonzero(eps == 1.0)[0])
        budget = await api.device_budget(campaign.id, device_id(one))
        assert [s.occurrence for s in budget.spends] == [0, 2, 4]
        assert budget.spent_total == 3.0
        assert budget.spent_window == 1.0  # day 2's window holds occurrence 4 alone
        assert budget.remaining == 0.5


async def test_a_drifting_top_item_over_http(app: FastAPI, tmp_path: Path) -> None:
    """Vector estimates (item frequencies) whose top item changes on day 1: the same numbers."""
    template = _template(
        protocol="hetero-frequency",
        population={
            "users": 1500,
            "distribution": "categorical",
            "items": 4,
            "zipf": 1.0,
            "drift": {"top_item": 2, "from_day": 1},
        },
        every="1d",
        times=3,
        budget=None,
    )
    transport = httpx.ASGITransport(app=app)
    http = await run_campaign(URL, template, 4, tmp_path / "devices", transport=transport)
    local = simulate_campaign(template, 4)
    assert_same(http, local)
    tops = [int(np.argmax(np.asarray(o.truth))) for o in local.occurrences]
    assert tops == [0, 2, 2]


async def test_a_central_campaign_over_http_gives_the_in_process_numbers(
    app: FastAPI, tmp_path: Path
) -> None:
    """central-wme-vector with a lifetime budget ε 2.3 at δ 1e-6 and ε's of 0.5 and 1: the
    devices of ε = 1 are refused from the seventh occurrence on (six releases compose to 2.20,
    seven to 2.40), those of ε = 0.5 never, both sides composing the same
    releases with the PLD accountant: the same admissions, estimates (the server's noise is
    fresh per occurrence and reproducible from the private seed) and spends, and the server's
    budget view shows the device's composed ε after each occurrence."""
    template = _template(
        protocol="central-wme-vector",
        population={
            "users": 200,
            "distribution": "gaussian",
            "mean": 0.1,
            "dimension": 3,
            "epsilon_mix": "0.5:0.5,1:0.5",
            "drift": {"mean_per_day": 0.01},
        },
        every="1d",
        times=8,
        budget={"epsilon": 2.3, "delta": 1e-6},
    )
    transport = httpx.ASGITransport(app=app)
    http = await run_campaign(URL, template, 9, tmp_path / "devices", transport=transport)
    local = simulate_campaign(template, 9)
    assert_same(http, local)
    eps = np.asarray(_epsilons(template, 9))
    ones = int(np.count_nonzero(eps == 1.0))
    assert [o.enrolled for o in local.occurrences] == [200] * 6 + [200 - ones] * 2
    protocol = get_protocol("central-wme-vector")
    params = protocol.parse_params({"dimension": 3})
    event = protocol.release_event(params, 1.0)
    async with ApiClient(URL, transport=transport) as api:
        (campaign,) = (await api.list_campaigns()).campaigns
        one = int(np.flatnonzero(eps == 1.0)[0])
        budget = await api.device_budget(campaign.id, device_id(one))
    expected = [composed_epsilon([event] * k, 1e-6) for k in range(1, 7)]
    assert [s.cumulative for s in budget.spends] == expected
    assert budget.spent_total == expected[-1] == local.spent[one] <= 2.3
    assert composed_epsilon([event] * 7, 1e-6) > 2.3
    half = protocol.release_event(params, 0.5)
    assert composed_epsilon([half] * 8, 1e-6) <= 2.3


async def test_a_store_of_another_server_is_refused(app: FastAPI, tmp_path: Path) -> None:
    template, folder = _template(times=1), tmp_path / "devices"
    transport = httpx.ASGITransport(app=app)
    await run_campaign(URL, template, 2, folder, transport=transport)
    other = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'other.db'}"))
    try:
        with pytest.raises(ValueError, match="does not hold"):
            await run_campaign(URL, template, 2, folder, transport=httpx.ASGITransport(app=other))
        with pytest.raises(ValueError, match="another campaign"):
            await run_campaign(URL, _template(times=2), 2, folder, transport=transport)
    finally:
        other.state.ctx.db.dispose()


def _epsilons(template: CampaignTemplate, seed: int) -> list[float]:
    from fedldp.client.campaign.simulate import occurrence_population

    return [float(e) for e in occurrence_population(template, seed, 0).epsilon]


async def test_the_server_refuses_what_its_ledger_cannot_fit(app: FastAPI, tmp_path: Path) -> None:
    from fedldp.protocol.core.wire import CampaignCreate

    transport = httpx.ASGITransport(app=app)
    async with ApiClient(URL, transport=transport) as api:
        body = CampaignCreate(
            protocol="classic-duchi", seed=3, every=1.0, times=3, budget_epsilon=1.0
        )
        campaign = await api.create_campaign(body)
        first = await api.next_occurrence(campaign.id)
        assert (first.index, first.day) == (0, 0.0)
        assert (await api.next_occurrence(campaign.id)).study_id == first.study_id  # still open
        charge = DeviceBatch(devices=[DeviceCharge(device="d0", epsilon=1.0)])
        assert (await api.admit_devices(campaign.id, 0, charge)).admitted == 1
        assert (await api.admit_devices(campaign.id, 0, charge)).admitted == 1  # same answer
        other = DeviceBatch(devices=[DeviceCharge(device="d0", epsilon=0.5)])
        with pytest.raises(ApiError) as conflict:
            await api.admit_devices(campaign.id, 0, other)
        assert conflict.value.code == "duplicate_conflict"
        await api.cancel_study(first.study_id)  # nobody enrolled: it counts as run
        second = await api.next_occurrence(campaign.id)
        assert (second.index, second.day) == (1, 1.0)
        small = DeviceBatch(
            devices=[DeviceCharge(device="d1", epsilon=0.5), DeviceCharge(device="d0", epsilon=0.1)]
        )
        with pytest.raises(ApiError) as refused:
            await api.admit_devices(campaign.id, 1, small)
        assert refused.value.code == "budget_exceeded"
        assert refused.value.status == 409
        assert (await api.device_budget(campaign.id, "d1")).spends == []  # all or nothing
        with pytest.raises(ApiError) as unknown:
            await api.admit_devices(campaign.id, 2, charge)
        assert unknown.value.code == "unknown_occurrence"
        with pytest.raises(ApiError) as missing:
            await api.campaign("nope")
        assert missing.value.code == "unknown_campaign"
        central = body.model_copy(update={"protocol": "central-wme"})
        with pytest.raises(ApiError) as refused_central:  # ε at which δ? (docs/campaigns.md)
            await api.create_campaign(central)
        assert refused_central.value.code == "invalid_request"
        await api.cancel_study(second.study_id)
        await api.cancel_study((await api.next_occurrence(campaign.id)).study_id)
        with pytest.raises(ApiError) as complete:
            await api.next_occurrence(campaign.id)
        assert complete.value.code == "campaign_complete"


async def test_a_memoized_campaign_over_http_charges_by_the_rules(
    app: FastAPI, tmp_path: Path
) -> None:
    """memo-1bitmean over a drifting Bernoulli law: the devices' store holds their own charges
    (ε per distinct value), the server's ledger its bound (min(T, 2)·ε), both as in process."""
    population = {
        "users": 300,
        "distribution": "bernoulli",
        "p": 0.2,
        "epsilon": 1.0,
        "drift": {"mean_per_day": 0.1},
    }
    template = _template(
        protocol="memo-1bitmean",
        params={"levels": 1},
        population=population,
        every="1d",
        times=4,
        budget={"epsilon": 2.5},
    )
    transport = httpx.ASGITransport(app=app)
    done = await run_campaign(URL, template, 5, tmp_path / "memo", transport=transport)
    local = simulate_campaign(template, 5)
    assert [o.enrolled for o in local.occurrences] == [300] * 4
    assert_same(done, local)
    assert set(np.unique(local.spent).tolist()) == {1.0, 2.0}
    async with ApiClient(URL, transport=transport) as api:
        (campaign,) = (await api.list_campaigns()).campaigns
        moved = int(np.flatnonzero(local.spent == 2.0)[0])
        budget = await api.device_budget(campaign.id, device_id(moved))
        assert [s.epsilon for s in budget.spends] == [1.0, 1.0, 0.0, 0.0]
        assert [s.declared for s in budget.spends] == [1.0] * 4
        assert budget.spent_total == local.bound[moved] == 2.0
