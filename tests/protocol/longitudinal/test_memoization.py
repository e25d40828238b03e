"""The longitudinal guarantee of the memoizing protocols (docs/longitudinal.md §1, §5), measured.

* The memoization contract: a device's memoized randomness is the same in every study (a
  function of its population seed and index only), different across devices and values, and
  fresh per study without memoization.
* Over T collections of the same value a memoized device reveals no more than its longitudinal
  ε: the likelihood-ratio attacker's accuracy stays at the exact value it has against the
  memoized response (at most e^{ε_∞}/(1 + e^{ε_∞})), while against fresh randomization it grows
  towards 1 with T; both are computed exactly and measured on N devices per value.
* The known weakness: a memoized response leaks when the value changes: a device whose value
  moves from 0 to m shows a change in its 1BitMean bit with probability p₀² + p₁², a device that
  keeps its value never does.

Tolerance: a measured accuracy of N Bernoulli trials is within z·√(a(1 − a)/N) of its exact
value a, z the two-sided normal quantile at 10⁻³ (Bonferroni over each test's comparisons).
Fixed seeds: the outcome is the same on every run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from fedldp.client.seeds import device_key, round_key
from fedldp.protocol.api import FloatArray, UserStreams, stream_key, z_quantile
from fedldp.protocol.longitudinal.rappor import (
    PRR_PURPOSE,
    MemoRappor,
    longitudinal_epsilon,
    report_probabilities,
)
from fedldp.protocol.longitudinal.telemetry import MemoDBitFlip, MemoOneBitMean
from tests.protocol.longitudinal.helpers import collect, users

N = 3000  # devices per value
ALPHA = 1e-3


def within(measured: float, exact: float, comparisons: int) -> bool:
    z = z_quantile(1 - ALPHA / comparisons)
    return abs(measured - exact) <= z * math.sqrt(exact * (1 - exact) / N) + 1e-12


# --------------------------------------------------------------------------- the contract


def test_device_streams_persist_across_studies_and_rounds() -> None:
    idx = np.arange(50)
    labels = idx % 7
    draws = []
    for study_key in (round_key(11, 0), round_key(11, 3), stream_key(99, 1)):
        key = stream_key(int(study_key.k1), 5)
        key.device = device_key(11)
        streams = UserStreams(key, idx)
        streams.random((50, 3))  # whatever the study drew before
        draws.append(streams.device(PRR_PURPOSE).labelled(labels, 4))
    assert all(np.array_equal(draws[0], d) for d in draws[1:])
    assert round_key(11, 0).device == round_key(11, 5).device == device_key(11)
    # another population seed, another label, another device: other numbers
    other_seed = UserStreams(round_key(12, 0), idx).device(PRR_PURPOSE).labelled(labels, 4)
    other_label = UserStreams(round_key(11, 0), idx).device(PRR_PURPOSE).labelled(labels + 1, 4)
    other_device = UserStreams(round_key(11, 0), idx + 1).device(PRR_PURPOSE).labelled(labels, 4)
    for other in (other_seed, other_label, other_device):
        assert not np.any(other == draws[0])
    # a key without a device key: per-key device streams (memoized within that key only)
    a = UserStreams(stream_key(1, 2), idx).device(3).labelled(labels, 4)
    b = UserStreams(stream_key(1, 3), idx).device(3).labelled(labels, 4)
    assert not np.any(a == b)


def test_labelled_draws_are_uniform() -> None:
    # 10⁵ uniforms: the mean within z·√(1/12/10⁵) of 1/2, the fraction below 1/4 within its own
    u = UserStreams(round_key(5, 0), np.arange(1000)).device(1).labelled(np.arange(1000), 100)
    z = z_quantile(1 - ALPHA / 2)
    assert abs(u.mean() - 0.5) <= z * math.sqrt(1 / 12 / u.size)
    assert abs(np.mean(u < 0.25) - 0.25) <= z * math.sqrt(0.25 * 0.75 / u.size)
    assert u.min() > 0.0
    assert u.max() < 1.0


@pytest.mark.parametrize(
    ("protocol", "raw", "values"),
    [
        (MemoOneBitMean(), {"bound": 1.0, "levels": 4}, np.linspace(0, 1, 200)),
        (MemoDBitFlip(), {"domain_size": 6, "buckets": 3}, np.arange(200) % 6),
    ],
    ids=["1bitmean", "dbitflip"],
)
def test_a_memoized_device_sends_one_response_in_every_study(
    protocol: MemoOneBitMean | MemoDBitFlip, raw: dict[str, object], values: FloatArray
) -> None:
    data, eps = users(values), np.full(200, 1.0)
    memo = [collect(protocol, {**raw, "memoize": True}, data, eps, t) for t in range(20)]
    assert all(np.array_equal(memo[0], m) for m in memo[1:])
    fresh = [collect(protocol, {**raw, "memoize": False}, data, eps, t) for t in range(20)]
    assert not all(np.array_equal(fresh[0], m) for m in fresh[1:])


def test_rappor_permanent_response_is_one_value_across_studies() -> None:
    # the reports vary (the IRR is fresh) but the bits' frequencies over T studies converge to
    # q on the memoized B' = 1 and 1 − q on B' = 0: the PRR the device holds is one value
    protocol, k, f, t_max = MemoRappor(), 4, 0.5, 400
    raw = {"domain_size": k, "f": f, "memoize": True}
    data, eps = users(np.zeros(100, dtype=np.int64)), np.full(100, 1.0)
    reports = np.array([collect(protocol, raw, data, eps, t) for t in range(t_max)])
    key = round_key(0, 0)
    key.device = device_key(2024)
    u = UserStreams(key, np.arange(100)).device(PRR_PURPOSE).labelled(np.zeros(100, int), k)
    b_prime = np.where(u < f / 2, 1.0, np.where(u < f, 0.0, np.arange(k) == 0))
    _, q = report_probabilities(eps, f)
    expected = np.where(b_prime > 0, q[0], 1 - q[0])
    z = z_quantile(1 - ALPHA / (100 * k))
    tolerance = z * np.sqrt(expected * (1 - expected) / t_max)
    assert np.all(np.abs(reports.mean(axis=0) - expected) <= tolerance)


# --------------------------------------------------------------------------- the attackers


def one_bit_accuracy(bits: FloatArray, truth_is_m: FloatArray) -> float:
    """Majority vote of each device's T bits (T odd): the likelihood-ratio test of 0 against m
    (the bits are i.i.d. given the value, fresh; all equal, memoized)."""
    guess = (bits > 0).mean(axis=0) > 0.5
    return float(np.mean(guess == truth_is_m))


@pytest.mark.parametrize("t", [1, 9, 41])
def test_1bitmean_attacker_is_bounded_by_memoization_and_grows_without(t: int) -> None:
    eps, protocol = 1.0, MemoOneBitMean()
    truth = np.arange(2 * N) % 2 == 1  # half the devices at 0, half at m = 1
    data, e = users(truth.astype(float)), np.full(2 * N, eps)
    p1 = math.exp(eps) / (1 + math.exp(eps))
    measured = {}
    for memoize in (True, False):
        raw = {"bound": 1.0, "levels": 1, "memoize": memoize}
        bits = np.array([collect(protocol, raw, data, e, s) for s in range(t)])
        measured[memoize] = one_bit_accuracy(bits, truth)
    fresh_exact = float(binom.sf(t // 2, t, p1))  # P(more than half of the T bits are right)
    assert within(measured[True], p1, 2)  # e^ε/(1 + e^ε) whatever T
    assert within(measured[False], fresh_exact, 2)
    if t == 41:
        assert fresh_exact > 0.99
        assert measured[False] > measured[True] + 0.2


def rappor_likelihoods(t: int, q_star: float, q: float, f: float, memoize: bool) -> FloatArray:
    """P(c₀, c₁ | v = 0) over the counts of ones of bits 0 and 1 in T reports ((T+1)² table);
    v = 1 is its transpose. Memoized: a mixture over the device's B'_0, B'_1 of binomials of
    the IRR; fresh: each report's bit j is Bernoulli(q* or 1 − q*)."""
    c = np.arange(t + 1)
    if not memoize:
        return np.outer(binom.pmf(c, t, q_star), binom.pmf(c, t, 1 - q_star))
    on, off = binom.pmf(c, t, q), binom.pmf(c, t, 1 - q)
    bit0 = (1 - f / 2) * on + f / 2 * off  # B_0 = 1: B'_0 = 1 w.p. 1 − f/2
    bit1 = f / 2 * on + (1 - f / 2) * off
    return np.outer(bit0, bit1)


@pytest.mark.parametrize("t", [1, 10, 40])
def test_rappor_attacker_stays_below_the_prr_bound_and_grows_without(t: int) -> None:
    eps, f, k, protocol = 1.0, 0.5, 4, MemoRappor()
    q_star_a, q_a = report_probabilities(np.array([eps]), f)
    q_star, q = float(q_star_a[0]), float(q_a[0])
    truth = np.arange(2 * N) % 2  # item 0 or item 1
    data, e = users(truth), np.full(2 * N, eps)
    results = {}
    for memoize in (True, False):
        raw = {"domain_size": k, "f": f, "memoize": memoize}
        reports = np.array([collect(protocol, raw, data, e, s) for s in range(t)])
        counts = reports.sum(axis=0)[:, :2].astype(int)  # (devices, 2): ones of bits 0 and 1
        table = rappor_likelihoods(t, q_star, q, f, memoize)
        lik0 = table[counts[:, 0], counts[:, 1]]
        lik1 = table[counts[:, 1], counts[:, 0]]
        guess = np.where(lik1 > lik0, 1, np.where(lik1 < lik0, 0, -1))
        # ties (equal likelihoods) are half right: count them as such, exactly
        right = np.where(guess == -1, 0.5, guess == truth)
        exact = 0.5 * float(np.maximum(table, table.T).sum())  # Bayes accuracy, prior 1/2
        results[memoize] = (float(right.mean()), exact)
    bound = 1 / (1 + math.exp(-longitudinal_epsilon(f)))  # e^{ε_∞}/(1 + e^{ε_∞})
    memo, memo_exact = results[True]
    fresh, fresh_exact = results[False]
    assert memo_exact <= 1 - f / 2 + 1e-12 <= bound  # the PRR caps it whatever T
    z = z_quantile(1 - ALPHA / 2)
    for measured, exact in results.values():  # ties make it a half-integer average: 1/4 ≥ var
        assert abs(measured - exact) <= z * math.sqrt(0.25 / (2 * N)), (measured, exact)
    assert memo <= 1 - f / 2 + z * math.sqrt(0.25 / (2 * N))
    if t == 40:
        assert fresh_exact > 0.98
        assert fresh > memo + 0.15


# --------------------------------------------------------------------------- the weakness


def test_a_memoized_bit_reveals_that_the_value_changed() -> None:
    eps, t, protocol = 1.0, 10, MemoOneBitMean()
    raw = {"bound": 1.0, "levels": 1, "memoize": True}
    e = np.full(2 * N, eps)
    changes = np.arange(2 * N) % 2 == 1  # these devices move from 0 to m at t/2
    before = users(np.zeros(2 * N))
    after = users(changes.astype(float))
    bits = np.array(
        [collect(protocol, raw, before if s < t // 2 else after, e, s) for s in range(t)]
    )
    seen_change = np.any(bits != bits[0], axis=0)
    p0, p1 = 1 / (1 + math.exp(eps)), 1 / (1 + math.exp(-eps))
    assert not np.any(seen_change[~changes])  # a kept value never shows a change
    detected = float(seen_change[changes].mean())
    assert within(detected, p0**2 + p1**2, 1)  # b(0) ≠ b(m): p₀(1 − p₁) + p₁(1 − p₀)


@pytest.mark.parametrize("gamma", [0.1, 0.25])
def test_output_perturbation_hides_a_change_in_part(gamma: float) -> None:
    # one report before and one after the move from 0 to m (or none): "changed" iff they
    # differ. The memoized bits differ w.p. δ = p₀² + p₁², two fresh flips w.p. φ = 2γ(1 − γ):
    # P(differ | changed) = δ(1 − φ) + (1 − δ)φ, P(differ | kept) = φ; advantage δ(1 − 2φ)
    eps, protocol = 1.0, MemoOneBitMean()
    raw = {"bound": 1.0, "levels": 1, "memoize": True, "flip": gamma}
    e = np.full(2 * N, eps)
    changes = np.arange(2 * N) % 2 == 1
    before, after = (
        collect(protocol, raw, users(np.zeros(2 * N)), e, 0),
        collect(protocol, raw, users(changes.astype(float)), e, 1),
    )
    differ = before != after
    p0, p1 = 1 / (1 + math.exp(eps)), 1 / (1 + math.exp(-eps))
    delta, phi = p0**2 + p1**2, 2 * gamma * (1 - gamma)
    assert within(float(differ[changes].mean()), delta * (1 - phi) + (1 - delta) * phi, 2)
    assert within(float(differ[~changes].mean()), phi, 2)
