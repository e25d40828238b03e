"""The classic mean mechanisms (protocol/classic/means_theory.py) against the papers: exact
checks first (the laws written independently from Wang et al. 2019's pseudo-code: densities,
enumerated supports), then the samplers against those laws by goodness-of-fit tests.

Every sampled test has a fixed seed and a stated false-failure probability: KS and chi-square at
α = 10^-4 per test (KS on a law with atoms, HM's, is conservative: the stated α still bounds it);
no independent library implements PM or HM, so the references are written here from the
pseudo-code, on a different code path (inverse CDFs, enumeration) from the samplers'.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, stats

from fedldp.protocol.classic import means_theory as th

ALPHA = 1e-4
"""False-failure probability of each goodness-of-fit test."""
EPSILONS = (0.3, 0.61, 1.0, 2.0, 4.0)
POINTS = (-1.0, -0.4, 0.0, 0.7, 1.0)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(2019, spawn_key=key))


# --------------------------------------------------------------------------- reference laws


def pm_density(y: np.ndarray, t: float, eps: float) -> np.ndarray:
    """Wang et al. 2019, Alg. 2 as a density: p = (e^ε − e^{ε/2})/(2e^{ε/2} + 2) on [l(t), r(t)],
    p/e^ε on the rest of [−C, C]."""
    e2 = math.exp(eps / 2)
    c = (e2 + 1) / (e2 - 1)
    lo = (c + 1) / 2 * t - (c - 1) / 2
    hi = lo + c - 1
    p = (math.exp(eps) - e2) / (2 * e2 + 2)
    inside = (y >= lo) & (y <= hi)
    return np.where(np.abs(y) <= c, np.where(inside, p, p / math.exp(eps)), 0.0)


def pm_cdf(y: np.ndarray, t: float, eps: float) -> np.ndarray:
    """The CDF of ``pm_density``: piecewise linear through its three pieces."""
    e2 = math.exp(eps / 2)
    c = (e2 + 1) / (e2 - 1)
    lo = (c + 1) / 2 * t - (c - 1) / 2
    hi = lo + c - 1
    p = (math.exp(eps) - e2) / (2 * e2 + 2)
    q = p / math.exp(eps)
    z = np.clip(y, -c, c)
    below = q * (np.minimum(z, lo) + c)
    mid = p * np.clip(z - lo, 0.0, hi - lo)
    above = q * np.clip(z - hi, 0.0, None)
    return np.asarray(below + mid + above)


def duchi_law(t: float, eps: float) -> tuple[float, float]:
    """Alg. 1: the value c and Pr[+c]."""
    c = (math.exp(eps) + 1) / (math.exp(eps) - 1)
    return c, (math.exp(eps) - 1) / (2 * math.exp(eps) + 2) * t + 0.5


def alpha(eps: float) -> float:
    return 1 - math.exp(-eps / 2) if eps > th.EPS_STAR else 0.0


# --------------------------------------------------------------------------- exact


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("t", POINTS)
def test_pm_law_is_unbiased_with_lemma_1_variance_and_eps_ldp(eps: float, t: float) -> None:
    c = float(th.pm_bound([eps])[0])
    pieces = sorted({-c, c, (c + 1) / 2 * t - (c - 1) / 2, (c + 1) / 2 * t + (c - 1) / 2})
    moments = [
        sum(
            integrate.quad(lambda y, k=k: y**k * float(pm_density(np.array(y), t, eps)), a, b)[0]
            for a, b in itertools.pairwise(pieces)
        )
        for k in range(3)
    ]
    assert moments[0] == pytest.approx(1.0, abs=1e-9)
    assert moments[1] == pytest.approx(t, abs=1e-9)
    e2 = math.exp(eps / 2)
    lemma_1 = t**2 / (e2 - 1) + (e2 + 3) / (3 * (e2 - 1) ** 2)
    a, b = th.variance_terms("pm", [eps])
    assert moments[2] - t**2 == pytest.approx(lemma_1, rel=1e-9)
    assert float(a[0] + b[0] * t**2) == pytest.approx(lemma_1, rel=1e-12)
    # the density takes two values whose ratio is e^ε: ε-LDP between any two inputs
    grid = np.linspace(-c, c, 2001)[1:-1]
    values = np.unique(np.round(pm_density(grid, t, eps), 12))
    assert values.size == 2
    assert values.max() / values.min() == pytest.approx(math.exp(eps))


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("t", POINTS)
def test_duchi_and_hm_variances_are_the_papers(eps: float, t: float) -> None:
    c, plus = duchi_law(t, eps)
    assert c * plus - c * (1 - plus) == pytest.approx(t, abs=1e-12)
    a, b = th.variance_terms("duchi", [eps])
    assert float(a[0] + b[0] * t**2) == pytest.approx(c * c - t * t, rel=1e-12)
    e2 = math.exp(eps / 2)
    pm = t**2 / (e2 - 1) + (e2 + 3) / (3 * (e2 - 1) ** 2)
    a, b = th.variance_terms("hm", [eps])
    mixture = alpha(eps) * pm + (1 - alpha(eps)) * (c * c - t * t)
    assert float(a[0] + b[0] * t**2) == pytest.approx(mixture, rel=1e-12)
    a, b = th.variance_terms("laplace", [eps])
    assert float(a[0] + b[0] * t**2) == pytest.approx(8 / eps**2, rel=1e-12)


def test_eps_star_is_lemma_4s_and_hm_worst_case_is_its_formula() -> None:
    assert pytest.approx(0.61, abs=0.005) == th.EPS_STAR
    for eps in (0.8, 1.0, 2.0, 5.0):
        e2 = math.exp(eps / 2)
        paper = (e2 + 3) / (3 * e2 * (e2 - 1)) + (math.exp(eps) + 1) ** 2 / (
            e2 * (math.exp(eps) - 1) ** 2
        )
        a, b = th.variance_terms("hm", [eps])
        assert float(th.worst_variance(a, b)[0]) == pytest.approx(paper, rel=1e-12)
        # HM's worst case beats both of its parts' (Wang et al. 2019, §III-C)
        worst = {
            m: float(th.worst_variance(*th.variance_terms(m, [eps]))[0]) for m in ("pm", "duchi")
        }
        assert float(th.worst_variance(a, b)[0]) <= min(worst.values())


@pytest.mark.parametrize("d", range(1, 9))
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_duchi_multidimensional_bound_makes_the_enumerated_law_unbiased(d: int, eps: float) -> None:
    t = np.linspace(-0.9, 0.8, d)
    law = duchi_multi_law(t, eps)
    cells = np.array(list(itertools.product((-1.0, 1.0), repeat=d)))
    b = float(th.duchi_bound([eps], d)[0])
    assert np.allclose(law @ (b * cells), t, atol=1e-12)
    a, bb = th.variance_terms("duchi", [eps], d)
    assert float(a[0]) == pytest.approx(b * b)
    assert float(bb[0]) == -1.0


def duchi_multi_law(t: np.ndarray, eps: float) -> np.ndarray:
    """Pr of each sign pattern of {−1, 1}^d (itertools order), by enumerating v and T± as the
    restatement in Wang et al. 2019 §IV-A defines them (T⁺: ⟨z, v⟩ ≥ 0, T⁻: ⟨z, v⟩ ≤ 0)."""
    cells = np.array(list(itertools.product((-1.0, 1.0), repeat=t.size)))
    pi = math.exp(eps) / (math.exp(eps) + 1)
    law = np.zeros(len(cells))
    for v in cells:
        pv = float(np.prod(np.where(v > 0, (1 + t) / 2, (1 - t) / 2)))
        plus, minus = cells @ v >= 0, cells @ v <= 0
        law += pv * (pi * plus / plus.sum() + (1 - pi) * minus / minus.sum())
    return law


# --------------------------------------------------------------------------- samplers


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("t", POINTS)
def test_pm_and_hm_samplers_follow_the_reference_laws(eps: float, t: float) -> None:
    n = 20_000
    u = _rng(1, int(eps * 100), int(t * 10 + 10)).random((n, 3))
    x, e = np.full(n, t), np.full(n, eps)
    pm = th.pm_sample(x, e, u[:, 0], u[:, 1])
    assert stats.kstest(pm, lambda y: pm_cdf(y, t, eps)).pvalue > ALPHA
    hm = th.hm_sample(x, e, u[:, 0], u[:, 1], u[:, 2])
    # HM has atoms at ±c (its Duchi part), which KS cannot take: chi-square on the two atoms
    # and 20 bins of [−C, C] for the PM part
    c, plus = duchi_law(t, eps)
    a = alpha(eps)
    atoms = np.isclose(np.abs(hm), c, rtol=1e-12, atol=0.0)
    edges = np.linspace(-float(th.pm_bound([eps])[0]), float(th.pm_bound([eps])[0]), 21)
    observed = [np.sum(atoms & (hm > 0)), np.sum(atoms & (hm < 0))]
    observed += list(np.histogram(hm[~atoms], edges)[0])
    expected = [(1 - a) * plus, (1 - a) * (1 - plus), *list(a * np.diff(pm_cdf(edges, t, eps)))]
    keep = np.array(expected) > 0
    counts, probs = np.array(observed)[keep], np.array(expected)[keep]
    assert counts.sum() == n
    assert stats.chisquare(counts, n * probs / probs.sum()).pvalue > ALPHA


@pytest.mark.parametrize("eps", EPSILONS)
def test_duchi_scalar_sampler_is_alg_1(eps: float) -> None:
    n = 20_000
    for t in POINTS:
        y = th.duchi_sample(np.full(n, t), np.full(n, eps), _rng(2, int(t * 10 + 10)).random(n))
        c, plus = duchi_law(t, eps)
        assert np.allclose(np.abs(y), c)
        assert stats.binomtest(int(np.sum(y > 0)), n, plus).pvalue > ALPHA


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_duchi_multidimensional_sampler_follows_the_enumerated_law(d: int, eps: float) -> None:
    n = 40_000
    t = np.linspace(-0.7, 0.9, d)
    u = _rng(3, d, int(eps * 10)).random((n, 2 * d + 2))
    y = th.duchi_multi_sample(
        np.tile(t, (n, 1)), np.full(n, eps), u[:, :d], u[:, d], u[:, d + 1], u[:, d + 2 :]
    )
    b = float(th.duchi_bound([eps], d)[0])
    assert np.allclose(np.abs(y), b)
    index = ((y > 0).astype(np.int64) * (1 << np.arange(d)[::-1])).sum(axis=1)
    observed = np.bincount(index, minlength=1 << d)
    expected = n * duchi_multi_law(t, eps)
    assert stats.chisquare(observed, expected).pvalue > ALPHA


@pytest.mark.parametrize(("d", "eps"), [(1, 1.0), (3, 1.0), (5, 5.0), (4, 12.0)])
def test_sampling_rule_is_alg_4s(d: int, eps: float) -> None:
    k = int(th.sampled_coordinates([eps], d)[0])
    assert k == max(1, min(d, math.floor(eps / 2.5)))
    a1, b1 = th.variance_terms("pm", [eps / k])
    a, b = th.variance_terms("pm", [eps], d, sampled=True)
    for t in (0.0, 0.5, 1.0):  # Lemma 5: (d/k)(Var(t; ε/k) + t²) − t²
        lemma_5 = d / k * (a1[0] + b1[0] * t * t + t * t) - t * t
        assert float(a[0] + b[0] * t * t) == pytest.approx(lemma_5, rel=1e-12)


def test_huge_epsilons_do_not_overflow() -> None:
    eps = np.array([1e-6, 50.0, 800.0, 5000.0])
    for mech in ("laplace", "duchi", "pm", "hm"):
        a, b = th.variance_terms(mech, eps)
        assert np.all(np.isfinite(a))
        assert np.all(np.isfinite(b))
    assert np.all(np.isfinite(th.pm_bound(eps)))
    assert np.all(np.isfinite(th.duchi_bound(eps, 6)))
