"""The classic frequency oracles (protocol/classic/frequency.py, frequency_oracles.py): error
against the paper's exact variance, the textbook estimator at equal ε, unequal-ε weights, chunking,
checks and bounds, and the ``fedldp simulate`` path."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.protocol.api import IntArray
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.classic import hashing
from fedldp.protocol.classic import oracles as th
from tests.protocol.classic.runner import (
    COVARIANCE_BOUND,
    ORACLES,
    frequencies,
    mse_tolerance,
    reports,
    run_once,
    zipf_items,
)

N = 20_000
SEEDS = 12
ALL = sorted(ORACLES)


@pytest.mark.parametrize("oracle", ALL)
@pytest.mark.parametrize("k", [8, 64])
@pytest.mark.parametrize("epsilon", [0.5, 2.0, 4.0])
def test_mse_over_seeds_matches_the_exact_variance(oracle: str, k: int, epsilon: float) -> None:
    items = zipf_items(k, N, seed=k)
    f = frequencies(items, k)
    eps = np.full(N, epsilon)
    outs = [run_once(oracle, k, items, eps, seed) for seed in range(SEEDS)]
    mse = np.mean([np.sum((np.asarray(o["frequencies"]) - f) ** 2) for o in outs])
    predicted = float(outs[0]["predicted_mse"])
    p, q = th.support_probabilities(oracle, np.array([epsilon]), k)  # type: ignore[arg-type]
    textbook = float(th.summed_variance(p, q, k)[0]) / N  # eq. (2) summed over the items
    assert predicted == pytest.approx(textbook, rel=1e-12)
    assert abs(mse - predicted) <= mse_tolerance(oracle, k, eps, predicted, SEEDS)


def naive_support(oracle: str, k: int, eps: np.ndarray, payloads: np.ndarray) -> np.ndarray:
    """Which items each report supports, one item at a time (no shared code with the servers'
    vectorised counts but the hash's definition)."""
    n = payloads.shape[0]
    out = np.zeros((n, k), dtype=bool)
    for x in range(k):
        if oracle == "grr":
            out[:, x] = payloads == x
        elif oracle in ("sue", "oue", "ss"):
            out[:, x] = payloads[:, x] == 1
        elif oracle == "hr":
            y = payloads.astype(np.int64)
            parity = np.array([bin((x + 1) & int(v)).count("1") % 2 for v in y])
            out[:, x] = parity == 0
        else:
            z = payloads.astype(np.int64)
            bits = z.shape[1] - 2
            g = 2 if oracle == "blh" else th.olh_range(eps)
            g_arr = np.broadcast_to(g, (n,))
            h = hashing.hash_values(z[:, :bits], z[:, bits], g_arr, np.full(n, x))
            out[:, x] = h == z[:, bits + 1]
    return out


@pytest.mark.parametrize("oracle", ALL)
@pytest.mark.parametrize("weights", ["inverse-variance", "uniform"])
def test_equal_epsilon_is_exactly_the_textbook_estimator(oracle: str, weights: str) -> None:
    k, n, eps = 12, 3000, np.full(3000, 1.3)
    items = zipf_items(k, n, seed=5)
    out = run_once(oracle, k, items, eps, seed=9, weights=weights)
    _, _, _, _, payloads = reports(oracle, k, items, eps, np.random.default_rng(9))
    counts = naive_support(oracle, k, eps, payloads).sum(axis=0)
    p, q = (float(v[0]) for v in th.support_probabilities(oracle, eps[:1], k))  # type: ignore[arg-type]
    textbook = (counts / n - q) / (p - q)  # Wang et al. 2017, eq. (1) over n
    assert np.asarray(out["frequencies"]) == pytest.approx(textbook, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("oracle", ALL)
def test_unequal_epsilon_is_unbiased_and_inverse_variance_is_better(oracle: str) -> None:
    k, n, seeds = 16, 20_000, 12
    items = zipf_items(k, n, seed=3)
    f = frequencies(items, k)
    eps = np.where(np.arange(n) % 4 == 0, 3.0, 0.5)  # a quarter of the users at ε = 3
    for weights in ("inverse-variance", "uniform"):
        outs = [run_once(oracle, k, items, eps, s, weights) for s in range(seeds)]
        mse = np.mean([np.sum((np.asarray(o["frequencies"]) - f) ** 2) for o in outs])
        predicted = float(outs[0]["predicted_mse"])
        p, q = th.support_probabilities(oracle, eps, k)  # type: ignore[arg-type]
        w = th.user_weights(p, q, weights)
        exact = float(np.sum(w**2 * th.summed_variance(p, q, k)) / np.sum(w) ** 2)
        assert predicted == pytest.approx(exact, rel=1e-12)
        lam = float(np.sum(w**2 * COVARIANCE_BOUND[oracle] / (p - q) ** 2) / np.sum(w) ** 2)
        assert abs(mse - predicted) <= 4.0 * math.sqrt(2.0 * predicted * lam / seeds)
        if weights == "inverse-variance":
            best = predicted
    assert best < predicted  # the uniform average's variance is larger


@pytest.mark.parametrize("oracle", ALL)
def test_chunking_does_not_change_the_estimate(oracle: str) -> None:
    k, n = 10, 2000
    items = zipf_items(k, n, seed=1)
    eps = np.linspace(0.5, 3.0, n)
    whole = run_once(oracle, k, items, eps, seed=2)
    chunked = run_once(oracle, k, items, eps, seed=2, chunk=333)
    assert chunked["frequencies"] == pytest.approx(whole["frequencies"], rel=1e-12, abs=1e-13)
    assert chunked["predicted_mse"] == pytest.approx(whole["predicted_mse"], rel=1e-12)


@pytest.mark.parametrize("oracle", ALL)
def test_checks_accept_honest_reports_inside_the_bounds_and_refuse_others(oracle: str) -> None:
    k, n = 10, 500
    items = zipf_items(k, n, seed=4)
    eps = np.linspace(0.2, 6.0, n)
    protocol, params, _, task, payloads = reports(oracle, k, items, eps, np.random.default_rng(0))
    group = np.zeros(n, dtype=np.int64)
    assert protocol.check(params, task, eps, payloads).all()
    assert protocol.plausible(params, task, eps, group, payloads).all()
    bounds = protocol.report_bounds(params, task, eps, group)
    assert bounds is not None
    lo, hi = bounds
    for bad in (np.asarray(hi) + 1.0, np.asarray(lo) - 1.0, np.asarray(hi) - 0.5):
        broken = payloads.copy()
        broken[0] = np.broadcast_to(bad, payloads.shape)[0]
        assert not protocol.check(params, task, eps, broken)[0]
    nan = payloads.copy()
    nan[1] = np.nan
    assert not protocol.check(params, task, eps, nan)[1]


def test_items_outside_the_domain_are_refused() -> None:
    with pytest.raises(ValueError, match="items must lie"):
        reports("grr", 4, np.array([0, 4]), np.ones(2), np.random.default_rng(0))


def test_olh_hash_range_and_subset_size_follow_the_papers() -> None:
    eps = np.array([0.5, 1.0, 2.0, 4.0])
    assert th.olh_range(eps).tolist() == [round(math.exp(e)) + 1 for e in eps]
    # Ye–Barg / Wang 2016: d next to k/(e^ε + 1), the one of smaller exact variance
    for k in (8, 64, 1000):
        d = th.ss_size(eps, k)
        real = k / (np.exp(eps) + 1)
        assert np.all((d == np.clip(np.floor(real), 1, k - 1)) | (d == np.ceil(real)))


def test_hash_family_is_pairwise_independent_exactly() -> None:
    # every (a, b) of Z_g^{L+1} for g = 3, k = 4: Pr[H(x) = H(v)] = 1/g for every x ≠ v
    g, bits = 3, 2
    grid = np.stack(np.meshgrid(*[np.arange(g)] * (bits + 1)), -1).reshape(-1, bits + 1)
    gg = np.full(grid.shape[0], g)
    values = [
        hashing.hash_values(grid[:, :bits], grid[:, bits], gg, np.full(len(grid), x))
        for x in range(4)
    ]
    for x in range(4):
        assert np.bincount(values[x], minlength=g).tolist() == [len(grid) // g] * g
        for v in range(x + 1, 4):
            assert np.mean(values[x] == values[v]) == pytest.approx(1.0 / g, abs=1e-15)


def test_support_counts_use_the_narrow_integers_and_agree_with_the_wide_ones() -> None:
    rng = np.random.default_rng(0)
    n, k = 3000, 100
    bits = hashing.hash_bits(k)
    for g_value in (2, 200, 40000):
        g = np.full(n, g_value)
        coefficients = rng.integers(0, g_value, (n, bits))
        offset = rng.integers(0, g_value, n)
        items: IntArray = rng.integers(0, k, n)
        y = hashing.hash_values(coefficients, offset, g, items)
        c = rng.random(n)
        got = hashing.support_weights(coefficients, offset, y, g, c, k)
        want = [
            float(np.sum(c * (hashing.hash_values(coefficients, offset, g, np.full(n, x)) == y)))
            for x in range(k)
        ]
        assert got == pytest.approx(want, rel=1e-12)


def test_walsh_hadamard_is_the_sylvester_matrix() -> None:
    order = 8
    rows = np.arange(order)
    h = 1 - 2 * (np.bitwise_count(rows[:, None] & rows[None, :]).astype(np.int64) % 2)
    x = np.random.default_rng(1).random(order)
    assert th.walsh_hadamard(x) == pytest.approx(h @ x, rel=1e-12)


@pytest.mark.parametrize("oracle", ALL)
def test_simulate_prints_an_error_the_formula_predicts(oracle: str) -> None:
    # the brief's command: --distribution categorical --items 64 --zipf 1 --epsilon 2
    spec = PopulationSpec(users=N, distribution="categorical", items=64, zipf=1.0, epsilon=2.0)
    protocol = get_protocol(f"classic-{oracle}")
    population = build_population(spec, 11)
    params = protocol.parse_params(fill_from_population(protocol, {}, population))
    result = simulate(protocol, params, population, 11).result
    truth = np.asarray(population.truth, dtype=np.float64)
    error2 = float(np.sum((np.asarray(result.estimate) - truth) ** 2))
    # against the law: eq. (2) plus the multinomial term Σ f(1 − f)/n (oracles' docstring)
    expected = result.diagnostics["predicted_mse"] + result.diagnostics["sampling_factor"] * float(
        np.sum(truth * (1 - truth))
    )
    eps = np.full(N, 2.0)
    p, q = th.support_probabilities(oracle, eps[:1], 64)  # type: ignore[arg-type]
    # λ_max of the error's covariance: the report's (COVARIANCE_BOUND) plus the multinomial
    # sampling's, diag(f) − ffᵀ ⪯ max f; one run: 5σ (normal tail 6e-7)
    lam = (COVARIANCE_BOUND[oracle] / float((p - q)[0]) ** 2 + float(truth.max())) / N
    assert abs(error2 - expected) <= 5.0 * math.sqrt(2.0 * expected * lam)


@pytest.mark.parametrize("epsilon", [1e-3, 0.5, 2.0, 7.0])
def test_each_report_law_has_worst_ratio_e_to_the_epsilon(epsilon: float) -> None:
    # exact first (STYLE 12): the report's law under two items, from the mechanisms' (p, q)
    k, e = 10, np.array([epsilon])
    bound = math.exp(epsilon)
    p, q = (float(v[0]) for v in th.support_probabilities("grr", e, k))
    assert p / q == pytest.approx(bound, rel=1e-12)  # the item itself: p against q
    # unary encoding: bits (1, 0) at (v, v') have p(1 − q) against q(1 − p); the sampler's q is
    # the paper's rounded up to a multiple of 2^-32 (oracles.unary_flip), so the realised ε' is
    # at most ε and short of it by less than 2^-32/(q(1 − q)) per flipped bit (2 for SUE)
    for oracle, paper_q, bits in (
        ("sue", 1 / (math.exp(epsilon / 2) + 1), 2),
        ("oue", 1 / (math.exp(epsilon) + 1), 1),
    ):
        p, q = (float(v[0]) for v in th.support_probabilities(oracle, e, k))  # type: ignore[arg-type]
        threshold = q * 2**32
        assert threshold == int(threshold)
        assert paper_q <= q < paper_q + 2**-32
        exact = Fraction(p) * (1 - Fraction(q)) / (Fraction(q) * (1 - Fraction(p)))
        realised = math.log(exact)
        assert realised <= epsilon * (1 + 1e-12)
        assert epsilon - realised <= bits * 2**-32 / (q * (1 - q)) + 1e-12 * epsilon
    p, _ = (float(v[0]) for v in th.support_probabilities("hr", e, k))
    assert p / (1 - p) == pytest.approx(bound, rel=1e-12)  # a column of C_v \ C_v'
    for oracle in ("blh", "olh"):  # y = H(v) ≠ H(v'): p against (1 − p)/(g − 1)
        g = 2 if oracle == "blh" else int(th.olh_range(e)[0])
        p, _ = (float(v[0]) for v in th.support_probabilities(oracle, e, k))  # type: ignore[arg-type]
        assert p / ((1 - p) / (g - 1)) == pytest.approx(bound, rel=1e-12)
    # SS: a subset holding v but not v' has weight e^ε against 1; Pr[v ∈ S] = d e^ε/(d e^ε + k − d)
    d = int(th.ss_size(e, k)[0])
    p, _ = (float(v[0]) for v in th.support_probabilities("ss", e, k))
    assert p == pytest.approx(d * bound / (d * bound + k - d), rel=1e-12)
