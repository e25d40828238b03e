"""Composition of central (ε, δ) releases (protocol/core/accounting.py) and the central
protocols' ``release_event`` hooks (protocol/central/protocols.py): checked against Balle and
Wang's analytic Gaussian formula, basic composition, and the protocols' own calibrations."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import norm

from fedldp.protocol import api
from fedldp.protocol.catalogue import CATALOGUE, get_protocol
from fedldp.protocol.central import wme
from fedldp.protocol.core.accounting import (
    DISCRETIZATION,
    EpsilonDeltaDpEvent,
    composed_epsilon,
    is_private,
)
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.mechanisms import dp_noise as dn

TRUNCATION = 1e-6
"""Slack above the pessimistic grid's T·DISCRETIZATION: the PLD drops tail mass below 1e-15,
added to δ; through the slope of δ(ε) (≥ 1e-9 in every case here) that moves ε by < 1e-6."""


def analytic_gaussian_delta(epsilon: float, sigma: float) -> float:
    """δ(ε) of the Gaussian mechanism N(0, σ²) against N(1, σ²) (sensitivity 1): Balle and Wang,
    ICML 2018, Theorem 8: Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ)."""
    return float(
        norm.cdf(0.5 / sigma - epsilon * sigma)
        - math.exp(epsilon) * norm.cdf(-0.5 / sigma - epsilon * sigma)
    )


def analytic_gaussian_epsilon(delta: float, sigma: float) -> float:
    """The exact ε at ``delta`` (δ(ε) decreases in ε: a root bracket and brentq)."""
    if analytic_gaussian_delta(0.0, sigma) <= delta:
        return 0.0
    high = 1.0
    while analytic_gaussian_delta(high, sigma) > delta:
        high *= 2.0
    return float(brentq(lambda e: analytic_gaussian_delta(e, sigma) - delta, 0.0, high, xtol=1e-13))


@pytest.mark.parametrize(
    ("sigma", "times", "delta"),
    [(1.0, 1, 1e-5), (2.0, 10, 1e-6), (5.0, 30, 1e-5), (0.8, 4, 1e-3), (10.0, 100, 1e-8)],
)
def test_t_gaussian_releases_compose_to_the_analytic_gaussian_of_sigma_over_root_t(
    sigma: float, times: int, delta: float
) -> None:
    """T Gaussian mechanisms of noise multiplier σ compose to one of σ/√T (the privacy loss of
    each is N(μ, 2μ) with μ = 1/(2σ²); their sum is N(Tμ, 2Tμ)); the PLD is pessimistic by at
    most T grid steps."""
    exact = analytic_gaussian_epsilon(delta, sigma / math.sqrt(times))
    pld = composed_epsilon([dpa.GaussianDpEvent(sigma)] * times, delta)
    assert exact - 1e-9 <= pld <= exact + times * DISCRETIZATION + TRUNCATION, (pld, exact)


def test_the_formula_matches_dp_accountings_own_gaussian() -> None:
    """The test's formula is the one dp-accounting's analytic Gaussian solver implements."""
    for sigma, delta in [(1.0, 1e-5), (3.0, 1e-7)]:
        theirs = dpa.get_epsilon_gaussian(sigma, delta)
        assert analytic_gaussian_epsilon(delta, sigma) == pytest.approx(theirs, rel=1e-6)


@settings(max_examples=12, deadline=None)
@given(
    epsilons=st.lists(st.floats(0.05, 2.0), min_size=1, max_size=8),
    delta=st.sampled_from([1e-8, 1e-6, 1e-3]),
)
def test_pld_never_exceeds_basic_composition_of_pure_releases(
    epsilons: list[float], delta: float
) -> None:
    """A Laplace mechanism of multiplier b is 1/b-DP: the composed ε at any δ is at most Σ 1/b
    (plus the grid's pessimism)."""
    events = [dpa.LaplaceDpEvent(1.0 / e) for e in epsilons]
    slack = len(events) * DISCRETIZATION
    assert composed_epsilon(events, delta) <= math.fsum(epsilons) + slack


def test_epsilon_delta_releases_compose_below_the_basic_theorem() -> None:
    """T (ε₀, δ₀) releases: at δ ≥ Tδ₀ basic composition gives Tε₀; the optimal composition
    (Kairouz et al.) gives no more, far less for many small releases (the sum of 100 losses
    ±0.1 has mean 100·0.1·tanh(0.05) ≈ 0.5 and standard deviation ≈ 1: its 1e-6 tail is near
    5.3, against 10), and ∞ when the budget's δ is below the releases' own."""
    events = [EpsilonDeltaDpEvent(0.1, 1e-8)] * 100
    composed = composed_epsilon(events, 100 * 1e-8 + 1e-6)
    assert composed <= 100 * 0.1 + 100 * DISCRETIZATION
    assert composed < 0.6 * 100 * 0.1
    assert composed_epsilon(events, 9e-7) == math.inf  # 1 − (1 − 1e-8)^100 ≈ 1e-6 > 9e-7
    assert composed_epsilon(events[:1], 2e-8) == pytest.approx(0.1, abs=DISCRETIZATION)


def test_composition_takes_no_order_and_refuses_bad_deltas() -> None:
    a, b = dpa.GaussianDpEvent(2.0), dpa.LaplaceDpEvent(3.0)
    assert composed_epsilon([a, b, a], 1e-6) == composed_epsilon([a, a, b], 1e-6)
    assert composed_epsilon([], 1e-6) == 0.0
    assert composed_epsilon([dpa.NonPrivateDpEvent()], 1e-6) == math.inf
    for bad in (0.0, 1.0, -1e-6, math.nan):
        with pytest.raises(ValueError, match="delta"):
            composed_epsilon([a], bad)
    with pytest.raises(ValueError, match="cannot compose"):
        composed_epsilon([dpa.ZCDpEvent(0.1)], 1e-6)


# --------------------------------------------------------------------------- the hooks


def test_local_protocols_declare_no_release_event() -> None:
    """The default hook (None: charged pure ε by ``repeated_epsilon``) for every local protocol,
    an own one for every central protocol."""
    for name, protocol in CATALOGUE.items():
        own = type(protocol).release_event is not Protocol.release_event
        assert own == (protocol.trust == "central"), name


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 2.5])
def test_central_wme_is_pure_epsilon_and_tight(epsilon: float) -> None:
    """WME at d = 1 is pure ε-DP: its composed ε reaches ε as δ → 0 (every stage's loss sits at
    its maximum with probability ≥ 1/2, so δ(ε′) ≥ (1 − e^{ε′−ε})/8) and never passes it."""
    protocol = get_protocol("central-wme")
    event = protocol.release_event(protocol.parse_params({}), epsilon)
    at = composed_epsilon([event], 1e-12)
    assert epsilon - 1e-9 <= at <= epsilon + 3 * DISCRETIZATION


def test_central_wme_events_are_its_calibration() -> None:
    """The multipliers are the release's noise scale over its sensitivity, from wme's own
    functions: the stage-2 Laplace scale over 4τ·v_max, the Gaussian σ over Δ₂ = 4τ√d′·v_max,
    and the histogram's Lap(2/ε₁) over a count's change of 1."""
    tau, vmax, eps, delta = 0.7, 0.01, 1.3, 1e-6
    scalar = get_protocol("central-wme")
    event = scalar.release_event(scalar.parse_params({}), eps)
    assert isinstance(event, dpa.ComposedDpEvent)
    stage1, stage2 = event.events
    assert stage1 == dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(2.0 / (eps / 2)), 2)
    assert stage2.noise_multiplier == pytest.approx(
        wme.wme_laplace_scale(tau, vmax, eps) / (4 * tau * vmax), rel=1e-12
    )
    vector = get_protocol("central-wme-vector")
    params = vector.parse_params({"dimension": 5, "delta": delta})
    padded = 8
    composed = vector.release_event(params, eps)
    assert isinstance(composed, dpa.ComposedDpEvent)
    stage1, stage2 = composed.events
    assert stage1 == dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(2.0 / (eps / (2 * padded))), 16)
    sigma = wme.wme_gaussian_sigma(tau, padded, vmax, eps, delta)
    assert stage2.noise_multiplier == pytest.approx(
        sigma / (4 * tau * math.sqrt(padded) * vmax), rel=1e-12
    )
    one = vector.release_event(vector.parse_params({"dimension": 1}), eps)
    assert one == event  # dimension 1 is central-wme


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("central-wme", {}),
        ("central-wme-vector", {"dimension": 3}),
        ("central-huber", {}),
        ("central-huber-vector", {"dimension": 2}),
    ],
)
def test_one_release_is_within_its_guarantee_and_dominates_smaller_epsilons(
    name: str, params: dict[str, object]
) -> None:
    protocol = get_protocol(name)
    parsed = protocol.parse_params(params)
    delta = float(parsed.delta)
    for eps in (0.5, 1.0, 4.0):
        at = composed_epsilon([protocol.release_event(parsed, eps)], delta)
        assert at <= eps + 3 * DISCRETIZATION, (eps, at)
    grid = [0.2, 0.5, 1.0, 2.0]
    spent = [composed_epsilon([protocol.release_event(parsed, e)] * 3, 1e-4) for e in grid]
    assert np.all(np.diff(spent) > 0), spent  # more ε declared, more loss: never less


def test_huber_is_known_by_its_guarantee_and_paper_proxy_is_not_private() -> None:
    huber = get_protocol("central-huber")
    assert huber.release_event(huber.parse_params({"delta": 1e-7}), 800.0) == (
        EpsilonDeltaDpEvent(dn.ONE_D_EPSILON_CAP, 1e-7)
    )
    vector = get_protocol("central-huber-vector")
    assert vector.release_event(vector.parse_params({"dimension": 3}), 20.0) == (
        EpsilonDeltaDpEvent(dn.MULTI_D_EPSILON_CAP, 1e-5)
    )
    proxy = huber.parse_params({"calibration": "paper-proxy", "unsafe_non_private": True})
    assert not is_private(huber.release_event(proxy, 1.0), 1e-5)
    assert not is_private(huber.release_event(huber.parse_params({}), 1.0), 1e-6)  # δ 1e-5
    assert is_private(huber.release_event(huber.parse_params({}), 1.0), 2e-5)


def test_the_api_exports_the_accounting_names() -> None:
    assert api.EpsilonDeltaDpEvent is EpsilonDeltaDpEvent
    assert api.composed_epsilon is composed_epsilon
