"""A protocol's declared data range (``Protocol.data_range``) against a population's values
(``fedldp.client.population.ranges``): each law's support holds its samples and is reached, and
a protocol that clips values outside its range (``memo-1bitmean``: [0, m]) is refused a law that
can leave it, before anything runs, in a simulation, an experiment, a campaign in process and
over HTTP, with a message naming the range and the law."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx
import numpy as np
import pytest
from scipy.stats import norm

from fedldp.client.campaign.drive import run_campaign
from fedldp.client.campaign.simulate import simulate_campaign
from fedldp.client.campaign.template import CampaignTemplate
from fedldp.client.experiments.loading import parse_experiment
from fedldp.client.population.build import Population, PopulationSpec, build_population
from fedldp.client.population.ranges import check_data_range
from fedldp.client.simulate import simulate
from fedldp.protocol.catalogue import CATALOGUE, get_protocol
from fedldp.protocol.core.base.protocol import Protocol

N = 20_000


@pytest.mark.parametrize(
    ("law", "support"),
    [
        ({"distribution": "uniform", "low": -0.5, "high": 2.0}, (-0.5, 2.0)),
        ({"distribution": "two-point", "mean": 0.3, "bound": 2.0}, (-2.0, 2.0)),
        ({"distribution": "two-point", "mean": 1.0}, (1.0, 1.0)),
        ({"distribution": "bernoulli", "p": 0.3}, (0.0, 1.0)),
        ({"distribution": "bernoulli", "p": 0.0}, (0.0, 0.0)),
        ({"distribution": "gaussian", "mean": 0.5}, (-math.inf, math.inf)),
        ({"distribution": "exponential", "rate": 2.0}, (0.0, math.inf)),
        ({"distribution": "lomax", "shape": 4.0}, (0.0, math.inf)),
    ],
)
def test_a_law_s_support_holds_its_samples_and_is_reached(
    law: dict[str, Any], support: tuple[float, float]
) -> None:
    population = build_population(PopulationSpec(users=N, **law), 3)
    assert isinstance(population, Population)
    assert population.value_range == support
    values = np.asarray(population.data(np.arange(N)).values, dtype=np.float64)
    lo, hi = support
    assert lo <= values.min()
    assert values.max() <= hi
    # a finite end is reached: exactly for the discrete laws; for the uniform law on [a, b] the
    # gap to an end exceeds t = 20(b − a)/N with probability (1 − t/(b − a))^N < e^−20
    for end, seen in ((lo, values.min()), (hi, values.max())):
        if math.isfinite(end):
            assert abs(seen - end) <= 20 * (hi - lo) / N


def test_only_memo_1bitmean_declares_a_range_and_it_is_0_to_m() -> None:
    declares = {n for n, p in CATALOGUE.items() if type(p).data_range is not Protocol.data_range}
    assert declares == {"memo-1bitmean"}
    protocol = get_protocol("memo-1bitmean")
    assert protocol.data_range(protocol.parse_params({"bound": 2.5})) == (0.0, 2.5)


def test_a_simulation_of_memo_1bitmean_on_a_two_point_law_is_refused() -> None:
    protocol = get_protocol("memo-1bitmean")
    params = protocol.parse_params({})
    population = build_population(PopulationSpec(users=500, distribution="two-point", mean=0.3), 1)
    with pytest.raises(
        ValueError, match=r"memo-1bitmean estimates the mean of values in \[0, 1\]"
    ) as info:
        simulate(protocol, params, population, 1)
    assert "two-point(bound=1, mu=0.3) produces values in [-1, 1]" in str(info.value)


@pytest.mark.parametrize(
    ("bound", "law", "refused"),
    [
        (1.0, {"distribution": "uniform", "low": 0.0, "high": 1.0}, False),
        (1.0, {"distribution": "bernoulli", "p": 0.4}, False),
        (2.0, {"distribution": "uniform", "low": 0.0, "high": 2.0}, False),
        (2.0, {"distribution": "uniform", "low": 0.0, "high": 2.5}, True),
        (2.0, {"distribution": "uniform", "low": -0.1, "high": 1.0}, True),
        (5.0, {"distribution": "exponential", "rate": 1.0}, True),
    ],
)
def test_the_range_is_checked_against_m(bound: float, law: dict[str, Any], refused: bool) -> None:
    protocol = get_protocol("memo-1bitmean")
    params = protocol.parse_params({"bound": bound})
    population = build_population(PopulationSpec(users=100, **law), 1)
    if refused:
        with pytest.raises(ValueError, match=rf"values in \[0, {bound:g}\]"):
            check_data_range(protocol, params, population)
    else:
        check_data_range(protocol, params, population)


def test_an_in_range_simulation_estimates_the_law_s_mean() -> None:
    """Bernoulli(0.4) on [0, 1]: the estimate lies within 4 standard errors of the truth (the
    standard error from the error bar: its half-width over the normal quantile of its level);
    a deviation that large has probability 6·10⁻⁵."""
    protocol = get_protocol("memo-1bitmean")
    population = build_population(PopulationSpec(users=20_000, distribution="bernoulli", p=0.4), 2)
    run = simulate(protocol, protocol.parse_params({}), population, 2)
    bar = run.result.error_bar
    assert bar is not None
    assert bar.kind == "clt"
    estimate = run.result.estimate
    assert isinstance(estimate, float)
    assert abs(estimate - 0.4) <= 4 * bar.half_width / norm.ppf((1 + bar.level) / 2)


TEMPLATE: dict[str, Any] = {
    "protocol": "memo-1bitmean",
    "population": {"users": 300, "distribution": "two-point", "mean": 0.2},
    "every": "1d",
    "times": 3,
}


def test_a_campaign_is_refused_in_process_and_before_the_server_is_asked(tmp_path: Any) -> None:
    template = CampaignTemplate.model_validate(TEMPLATE)
    with pytest.raises(ValueError, match=r"two-point\(bound=1, mu=0.2\)"):
        simulate_campaign(template, 1)
    asked: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(500)

    run = run_campaign(
        "http://fedldp.test", template, 1, tmp_path, transport=httpx.MockTransport(server)
    )
    with pytest.raises(ValueError, match=r"values in \[0, 1\]"):
        asyncio.run(run)
    assert asked == []


def test_a_drifting_law_is_checked_on_every_day() -> None:
    """Bernoulli p = 0.5 drifting by 0.25 a day: inside [0, 1] on every day, so accepted; the
    same law under m = 0.5 is refused (its values reach 1)."""
    drifting = {
        **TEMPLATE,
        "population": {
            "users": 200,
            "distribution": "bernoulli",
            "p": 0.5,
            "drift": {"mean_per_day": 0.25},
        },
        "times": 3,
    }
    template = CampaignTemplate.model_validate(drifting)
    result = simulate_campaign(template, 4)
    assert [o.truth for o in result.occurrences] == [0.5, 0.75, 1.0]
    narrow = CampaignTemplate.model_validate({**drifting, "params": {"bound": 0.5}})
    with pytest.raises(ValueError, match=r"values in \[0, 0.5\].*bernoulli"):
        simulate_campaign(narrow, 4)


def test_an_experiment_file_is_refused_at_its_population_line() -> None:
    text = """\
name: clipped
protocol: memo-1bitmean
population: {users: 500, distribution: two-point, mean: 0.2}
seeds: 1
"""
    with pytest.raises(ValueError, match=r"^exp\.yaml:3: population: memo-1bitmean") as info:
        parse_experiment(text, "exp.yaml")
    assert "[0, 1]" in str(info.value)
