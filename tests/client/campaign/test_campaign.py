"""Campaigns in process (fedldp.client.campaign): drifting laws, persistent devices, occurrence
seeds, device budgets and the estimates over time."""

from __future__ import annotations

import contextlib
import io
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy.stats import norm

from fedldp.client.campaign.budget import ChargeRule, DeviceBudget, DeviceLedger, parse_every
from fedldp.client.campaign.simulate import occurrence_population, simulate_campaign
from fedldp.client.campaign.template import CampaignTemplate
from fedldp.client.population.build import build_population
from fedldp.client.population.spec import PopulationSpec
from fedldp.client.simulate import simulate
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.accounting import composed_epsilon


def _template(**over: Any) -> CampaignTemplate:
    raw: dict[str, Any] = {
        "protocol": "classic-duchi",
        "population": {
            "users": 3000,
            "distribution": "two-point",
            "mean": -0.3,
            "epsilon": 1.0,
            "drift": {"mean_per_day": 0.02},
        },
        "every": "1d",
        "times": 30,
        **over,
    }
    return CampaignTemplate.model_validate(raw)


def test_gaussian_drift_moves_each_device_by_the_slope() -> None:
    spec = PopulationSpec(users=50, distribution="gaussian", mean=0.1, drift={"mean_per_day": 0.05})
    slots = np.arange(50)
    day0 = build_population(spec, 4).data(slots).values
    day7 = build_population(spec, 4, day=7, occurrence=3)
    np.testing.assert_allclose(day7.data(slots).values, day0 + 0.35, rtol=0, atol=1e-12)
    assert day7.truth == pytest.approx(0.1 + 0.35, abs=1e-15)


def test_categorical_top_item_swaps_only_items_zero_and_j() -> None:
    spec = PopulationSpec(
        users=400,
        distribution="categorical",
        items=5,
        zipf=1.0,
        drift={"top_item": 3, "from_day": 10},
    )
    slots = np.arange(400)
    before = build_population(spec, 2, day=9.5).data(slots).values
    after = build_population(spec, 2, day=10).data(slots).values
    assert np.array_equal(before, build_population(spec, 2).data(slots).values)
    swap = np.array([3, 1, 2, 0, 4])
    assert np.array_equal(after, swap[before])
    truth0 = np.asarray(build_population(spec, 2).truth)
    truth10 = np.asarray(build_population(spec, 2, day=10).truth)
    assert np.array_equal(truth10, truth0[swap])
    assert int(np.argmax(truth10)) == 3


@pytest.mark.parametrize(
    "spec",
    [
        {"users": 5, "distribution": "uniform", "drift": {"mean_per_day": 0.1}},
        {"users": 5, "distribution": "gaussian", "drift": {"top_item": 1, "from_day": 2}},
        {"users": 5, "distribution": "gaussian", "drift": {"top_item": 1}},
        {"users": 5, "distribution": "gaussian", "drift": {}},
    ],
)
def test_drift_that_does_not_apply_is_refused(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        PopulationSpec.model_validate(spec)


def test_a_drift_that_leaves_the_law_is_refused_on_that_day() -> None:
    spec = PopulationSpec(users=5, distribution="two-point", mean=0.9, drift={"mean_per_day": 0.1})
    with pytest.raises(ValueError, match="mean"):
        build_population(spec, 1, day=2)


def test_occurrence_zero_is_a_plain_study_and_later_ones_draw_fresh_noise() -> None:
    template = _template(times=3)
    protocol = get_protocol("classic-duchi")
    params = protocol.parse_params({})
    plain = simulate(protocol, params, build_population(template.population, 5), 5)
    result = simulate_campaign(template, 5)
    assert result.occurrences[0].estimate == float(np.asarray(plain.result.estimate))
    # the same devices and data (no drift here), other noise: another estimate
    flat = _template(times=2, population={"users": 3000, "distribution": "two-point"})
    pop0, pop1 = (occurrence_population(flat, 5, k) for k in (0, 1))
    assert pop0.population_seed == pop1.population_seed
    assert np.array_equal(pop0.data(np.arange(3000)).values, pop1.data(np.arange(3000)).values)
    estimates = [o.estimate for o in simulate_campaign(flat, 5).occurrences]
    assert estimates[0] != estimates[1]


def test_each_estimate_is_within_theory_of_the_days_truth() -> None:
    template = _template()
    result = simulate_campaign(template, 11)
    n = 3000
    c = (math.e + 1) / (math.e - 1)  # Duchi at ε = 1 reports ±c: Var(report) <= c²
    # 30 occurrences, two-sided, Bonferroni: false-failure probability 1e-6 over the whole test
    z = float(norm.ppf(1 - 1e-6 / (2 * 30)))
    for o in result.occurrences:
        assert o.truth == pytest.approx(-0.3 + 0.02 * o.day, abs=1e-12)
        assert isinstance(o.estimate, float)
        assert isinstance(o.truth, float)
        assert abs(o.estimate - o.truth) <= z * c / math.sqrt(n), o
    np.testing.assert_array_equal(result.spent, np.full(n, 30.0))


def test_a_per_day_budget_refuses_the_occurrence_that_would_exceed_it() -> None:
    # two 12-hourly occurrences a day: ε 0.5 devices fit both (1 <= 1.5), ε 1 devices only one
    population = {"users": 1000, "distribution": "two-point", "epsilon_mix": "0.5:0.4,1:0.6"}
    template = _template(
        population=population, every="12h", times=6, budget={"epsilon": 1.5, "period": "1d"}
    )
    result = simulate_campaign(template, 3)
    eps = np.asarray(occurrence_population(template, 3, 0).epsilon)
    enrolled = [o.enrolled for o in result.occurrences]
    assert enrolled == [1000, 400] * 3
    assert [o.refused for o in result.occurrences] == [0, 600] * 3
    np.testing.assert_allclose(result.spent, np.full(1000, 3.0))  # 6 x 0.5 and 3 x 1
    lifetime = _template(population=population, times=5, budget={"epsilon": 2})
    result = simulate_campaign(lifetime, 3)
    assert [o.enrolled for o in result.occurrences] == [1000, 1000, 400, 400, 0]
    assert result.occurrences[-1].estimate is None
    np.testing.assert_allclose(result.spent, np.full(1000, 2.0))  # 4 x 0.5 and 2 x 1
    assert set(np.unique(eps).tolist()) == {0.5, 1.0}


def test_bad_budget_declarations_and_schedules_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"budget\.delta"):  # central: ε at which δ?
        _template(protocol="central-wme", budget={"epsilon": 2})
    with pytest.raises(ValidationError, match="only to central"):  # pure ε has no δ
        _template(budget={"epsilon": 2, "delta": 1e-6})
    for bad in (0, 1, 1.5, -1e-6, "tiny"):
        with pytest.raises(ValidationError, match="delta"):
            _template(protocol="central-wme", budget={"epsilon": 2, "delta": bad})
    huber = _template(protocol="central-huber", budget={"epsilon": 2, "delta": 1e-6})
    with pytest.raises(ValueError, match="no finite ε"):  # its own δ = 1e-5 > 1e-6
        simulate_campaign(huber, 1)
    with pytest.raises(ValidationError, match="duration"):
        _template(every="daily")
    assert parse_every("12h") == 0.5
    assert parse_every("90m") == pytest.approx(1 / 16)


@settings(max_examples=60, deadline=None)
@given(
    charges=st.lists(st.tuples(st.floats(0, 10), st.floats(0.01, 3.0)), min_size=1, max_size=30),
    budget=st.floats(0.5, 5.0),
    period=st.sampled_from([None, 0.5, 1.0, 7.0]),
)
def test_admitted_charges_never_exceed_the_budget_in_any_window(
    charges: list[tuple[float, float]], budget: float, period: float | None
) -> None:
    ledger = DeviceLedger(1, DeviceBudget(epsilon=budget, period=period))
    for k, (day, eps) in enumerate(sorted(charges)):
        charge = np.array([eps])
        if ledger.admits(day, charge)[0]:
            ledger.record(k, day, np.array([0]), charge)
    windows: dict[int, float] = {}
    assert ledger.budget is not None
    for s in ledger.spends:
        w = ledger.budget.window(s.day)
        windows[w] = windows.get(w, 0.0) + float(s.epsilon[0])
    assert all(total <= budget * (1 + 1e-9) for total in windows.values())


def _memo_template(memoize: bool, **over: Any) -> CampaignTemplate:
    return _template(
        protocol="memo-1bitmean",
        params={"levels": 1, "memoize": memoize},
        population={
            "users": 2000,
            "distribution": "bernoulli",
            "p": 0.3,
            "epsilon": 1.0,
            "drift": {"mean_per_day": 0.03},
        },
        times=10,
        **over,
    )


def test_a_memoized_device_pays_once_per_value_and_a_fresh_one_every_day() -> None:
    """memo-1bitmean (s = 1) over a drifting Bernoulli law: each device's bit is its value, which
    flips at most once (its uniform crossed by the rising p), so it has spent ε per distinct value,
    1 or 2, and the server (values unknown) charged min(T, 2)·ε = 2; fresh, 10·ε on both sides."""
    memo = simulate_campaign(_memo_template(True), 4)
    pops = [occurrence_population(_memo_template(True), 4, k) for k in (0, 9)]
    first, last = (np.asarray(p.data(np.arange(2000)).values) for p in pops)
    changed = first != last
    assert 0 < changed.sum() < 2000
    np.testing.assert_array_equal(memo.spent, np.where(changed, 2.0, 1.0))
    np.testing.assert_array_equal(memo.bound, np.full(2000, 2.0))
    fresh = simulate_campaign(_memo_template(False), 4)
    np.testing.assert_array_equal(fresh.spent, np.full(2000, 10.0))
    np.testing.assert_array_equal(fresh.bound, fresh.spent)


def test_budgets_refuse_where_the_charge_rules_say() -> None:
    """A lifetime budget of 2.5: memoized devices take part every day (the server's bound stops
    at 2), fresh ones from occurrence 2 on are refused; a budget of 1.5 stops memoized devices
    at occurrence 1 too, where the server's charge (1: the value may have changed) would pass
    it, even for devices whose own charge is 0."""
    budget = {"epsilon": 2.5}
    memo = simulate_campaign(_memo_template(True, budget=budget), 4)
    assert [o.enrolled for o in memo.occurrences] == [2000] * 10
    fresh = simulate_campaign(_memo_template(False, budget=budget), 4)
    assert [o.enrolled for o in fresh.occurrences] == [2000, 2000] + [0] * 8
    tight = simulate_campaign(_memo_template(True, budget={"epsilon": 1.5}), 4)
    assert [o.enrolled for o in tight.occurrences] == [2000] + [0] * 9
    np.testing.assert_array_equal(tight.spent, np.ones(2000))


def _central(**over: Any) -> CampaignTemplate:
    raw: dict[str, Any] = {
        "protocol": "central-wme-vector",
        "population": {
            "users": 300,
            "distribution": "gaussian",
            "mean": 0.1,
            "dimension": 3,
            "epsilon": 1.0,
            "drift": {"mean_per_day": 0.01},
        },
        "every": "1d",
        "times": 7,
        "budget": {"epsilon": 2.0, "delta": 1e-6},
        **over,
    }
    return CampaignTemplate.model_validate(raw)


def test_a_central_campaign_composes_its_releases_and_refuses_the_right_occurrence() -> None:
    """Lifetime budget ε 2 at δ 1e-6, central-wme-vector at ε = 1: the composed ε of k
    releases (its Laplace histograms and Gaussian mean) passes 2 at k = 6, so five occurrences
    run (basic composition of their (1, 1e-5) guarantees would stop at two) and each device
    has spent the composition of five, by its own ledger and the server's rule alike."""
    template = _central()
    protocol = get_protocol("central-wme-vector")
    event = protocol.release_event(protocol.parse_params({"dimension": 3}), 1.0)
    composed = [composed_epsilon([event] * k, 1e-6) for k in range(1, 8)]
    first_refused = next(k for k, e in enumerate(composed) if e > 2.0)
    assert first_refused == 5
    result = simulate_campaign(template, 5)
    enrolled = [o.enrolled for o in result.occurrences]
    assert enrolled == [300] * first_refused + [0] * (7 - first_refused)
    assert [o.estimate is None for o in result.occurrences] == [False] * 5 + [True] * 2
    np.testing.assert_array_equal(result.spent, np.full(300, composed[4]))
    np.testing.assert_array_equal(result.bound, result.spent)
    # fresh noise each occurrence: no two releases alike (composition assumes independence)
    estimates = [tuple(o.estimate) for o in result.occurrences[:5]]  # type: ignore[arg-type]
    assert len(set(estimates)) == 5


def test_the_central_ledger_charges_window_increases_and_totals_lifetime_compositions() -> None:
    protocol = get_protocol("central-wme")
    params = protocol.parse_params({})
    rule = ChargeRule(protocol, params, 1e-6)
    ledger = DeviceLedger(2, DeviceBudget(epsilon=1.5, period=1.0, delta=1e-6), rule)
    event = protocol.release_event(params, 1.0)
    one, two = (composed_epsilon([event] * k, 1e-6) for k in (1, 2))
    eps = np.array([1.0, 1.0])
    for k, day in enumerate([0.0, 0.5, 1.0, 1.5]):
        admits = ledger.admits(day, eps)
        assert admits.tolist() == [k % 2 == 0] * 2  # two releases in a day compose past 1.5
        if admits.all():
            spend = ledger.record(k, day, np.arange(2), eps)
            np.testing.assert_array_equal(spend.epsilon, [one, one])  # a fresh window
    np.testing.assert_array_equal(ledger.total(), [two, two])  # lifetime: both composed
    np.testing.assert_array_equal(ledger.spent_in_window(1.2), [one, one])


@settings(max_examples=15, deadline=None)
@given(
    declared=st.lists(st.sampled_from([0.25, 0.5, 1.0]), min_size=1, max_size=10),
    budget=st.floats(0.5, 4.0),
)
def test_no_admitted_central_history_passes_the_budget(
    declared: list[float], budget: float
) -> None:
    """Whatever ε's a device declares, the releases it is admitted to compose (at δ) within its
    budget, and the composition never exceeds basic composition of their pure ε (WME, d = 1)."""
    protocol = get_protocol("central-wme")
    params = protocol.parse_params({})
    ledger = DeviceLedger(
        1, DeviceBudget(epsilon=budget, delta=1e-6), ChargeRule(protocol, params, 1e-6)
    )
    taken: list[float] = []
    for k, e in enumerate(declared):
        if ledger.admits(float(k), np.array([e]))[0]:
            ledger.record(k, float(k), np.array([0]), np.array([e]))
            taken.append(e)
    spent = float(ledger.total()[0])
    assert spent <= budget * (1 + 1e-9)
    assert spent <= math.fsum(taken) + len(taken) * 1e-4
    events = [protocol.release_event(params, e) for e in taken]
    assert spent == composed_epsilon(events, 1e-6)


GUIDE = Path(__file__).resolve().parents[3] / "docs" / "campaigns.md"


def test_the_pages_python_blocks_print_what_they_say() -> None:
    """docs/campaigns.md's Python blocks run; a ``print(...)  # value`` line prints its value
    (up to the comment's first colon)."""
    blocks = re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text(), re.DOTALL | re.MULTILINE)
    assert len(blocks) >= 2
    checked = 0
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(GUIDE), "exec"), {})  # the page's own code
        shown = [
            line.split("#", 1)[1].split(":", 1)[0].strip()
            for line in block.splitlines()
            if line.startswith("print(") and re.search(r"#\s*[\[\d]", line)
        ]
        printed = out.getvalue().splitlines()
        for value in shown:
            assert value in printed, (value, printed)
            checked += 1
    assert checked >= 2
