"""The audits of repeated collection (protocol/longitudinal/repeated.py): the exact laws of a
device's T-report transcript against the papers' bounds, the client code's transcripts against
those laws, and RAPPOR's formulas against the paper's numbers.

Tolerances: a cell frequency of N draws is within z·√(p(1 − p)/N) of its probability p, z the
two-sided normal quantile at 10⁻³ over all cells of a test (Bonferroni). Fixed seeds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest

from fedldp.protocol.api import z_quantile
from fedldp.protocol.catalogue import AUDITS as CATALOGUE_AUDITS
from fedldp.protocol.longitudinal.rappor import (
    MemoRappor,
    longitudinal_epsilon,
    one_shot_epsilon,
)
from fedldp.protocol.longitudinal.repeated import (
    AUDITS,
    GAMMA,
    change_laws,
    count_transcripts,
    one_bit_laws,
    rappor_laws,
)
from fedldp.protocol.longitudinal.telemetry import MemoOneBitMean
from fedldp.protocol.mechanisms.audit import run_audit
from tests.protocol.longitudinal.helpers import users

CASES = {c.name: c for c in AUDITS}


def test_the_cases_are_in_the_catalogue() -> None:
    for case in AUDITS:
        assert CATALOGUE_AUDITS[case.name] is case
        assert case.repeated is not None
        assert case.exact is not None


# --------------------------------------------------------------------------- the paper's numbers


def test_rappor_formulas_give_the_papers_numbers() -> None:
    # RAPPOR (CCS 2014) §3's example parameters, h = 2 hash functions, f = 1/2, p = 1/2,
    # q = 3/4: q* = 0.6875 and p* = 0.5625, so ε₁ = 2·ln(0.6875·0.4375/(0.5625·0.3125)) =
    # 1.0743 and ε_∞ = 4·ln 3 = ln 81 = 4.3944 (the numbers google/rappor's
    # ComputePrivacyGuarantees prints for them too)
    assert one_shot_epsilon(0.5, 0.75, 0.5, h=2) == pytest.approx(1.0743, abs=5e-5)
    assert longitudinal_epsilon(0.5, h=2) == pytest.approx(math.log(81))
    assert longitudinal_epsilon(0.5, h=2) == pytest.approx(4.3944, abs=5e-5)
    # h = 1, fedldp's one-hot encoding: half of each
    assert longitudinal_epsilon(0.5) == pytest.approx(2 * math.log(3))
    assert one_shot_epsilon(0.5, 0.75, 0.5) == pytest.approx(1.0743 / 2, abs=5e-5)
    # f = 1/4: ε_∞ = 2·ln(7); f → 1 makes the PRR a coin (ε_∞ → 0)
    assert longitudinal_epsilon(0.25) == pytest.approx(2 * math.log(7))
    assert longitudinal_epsilon(1 - 1e-9) < 1e-8


# --------------------------------------------------------------------------- the exact laws


def exact(name: str) -> Callable[[float, int], float]:
    law = CASES[name].exact
    assert law is not None
    return law


@pytest.mark.parametrize("f", [0.5, 0.25])
@pytest.mark.parametrize("epsilon", [0.5, 1.0743])
def test_rappor_transcript_loss_is_bounded_by_the_prr_memoized_and_composes_fresh(
    f: float, epsilon: float
) -> None:
    eps_inf = longitudinal_epsilon(f)
    memo, fresh = exact(f"memo-rappor-f{f:g}-memoized"), exact(f"memo-rappor-f{f:g}-fresh")
    ts = (1, 2, 4, 8, 16, 32, 64, 256)
    losses = [memo(epsilon, t) for t in ts]
    assert losses[0] == pytest.approx(epsilon)  # one report: the calibrated ε₁
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(losses))
    for t, loss in zip(ts, losses, strict=True):
        assert loss <= min(t * epsilon, eps_inf) + 1e-9
        assert fresh(epsilon, t) == pytest.approx(t * epsilon)
    assert losses[-1] == pytest.approx(eps_inf, rel=1e-6)  # the transcript reveals B'
    for t in (1, 5, 17):
        for memoize in (True, False):
            assert rappor_laws(epsilon, f, t, memoize).sum() == pytest.approx(1.0)


def test_one_bit_mean_memoized_is_epsilon_whatever_t_and_a_change_shows() -> None:
    eps = 1.0
    for t in (1, 2, 3, 10, 64):
        assert exact("memo-1bitmean-memoized")(eps, t) == pytest.approx(eps)
        assert exact("memo-1bitmean-fresh")(eps, t) == pytest.approx(t * eps)
        assert exact("memo-1bitmean-change-fresh")(eps, t) == pytest.approx((t - t // 2) * eps)
        if t >= 2:
            assert exact("memo-1bitmean-change-memoized")(eps, t) == math.inf
    # output perturbation (Ding et al. §4): one report's ε' = ln(((1−2γ)p₁ + γ)/((1−2γ)p₀ + γ))
    p1 = math.exp(eps) / (math.exp(eps) + 1)
    g = GAMMA
    eps_prime = math.log(((1 - 2 * g) * p1 + g) / ((1 - 2 * g) * (1 - p1) + g))
    flip = exact(f"memo-1bitmean-memoized-flip{GAMMA:g}")
    assert flip(eps, 1) == pytest.approx(eps_prime)
    assert flip(eps, 64) == pytest.approx(eps, rel=1e-6)  # the memoized bit is given away
    change = exact(f"memo-1bitmean-change-memoized-flip{GAMMA:g}")
    assert change(eps, 1) == pytest.approx(eps_prime)
    assert math.isfinite(change(eps, 8))
    assert change(eps, 8) < change(eps, 16)
    for t in (1, 4, 9):
        for memoize in (True, False):
            for laws in (one_bit_laws(eps, t, memoize, g), change_laws(eps, t, memoize, g)):
                assert laws[0].sum() == pytest.approx(1.0)
                assert laws[1].sum() == pytest.approx(1.0)


# --------------------------------------------------------------------------- the client code


@pytest.mark.parametrize("memoize", [True, False])
def test_rappor_transcripts_of_the_client_code_follow_the_laws(memoize: bool) -> None:
    f, eps, t, n = 0.5, 1.0, 3, 20_000
    raw = {"domain_size": 2, "f": f, "memoize": memoize}
    data = [users(np.zeros(1, dtype=np.int64))] * t
    counts = count_transcripts(MemoRappor(), raw, eps, data, (0, 1), [0] * t, n, seed=7)
    c = counts.astype(np.int64)[:, 0]
    seen = np.zeros((t + 1, t + 1))
    np.add.at(seen, (c[:, 0], c[:, 1]), 1)
    law = rappor_laws(eps, f, t, memoize)
    z = z_quantile(1 - 1e-3 / (2 * law.size))
    assert np.all(np.abs(seen / n - law) <= z * np.sqrt(law * (1 - law) / n) + 1e-12)
    # the other law is rejected at the same level (twice its widest band): memoization, or its
    # absence, is what the client code did
    other = rappor_laws(eps, f, t, not memoize)
    assert np.max(np.abs(seen / n - other)) > 2 * z * np.sqrt(0.25 / n)


def test_one_bit_mean_change_transcripts_follow_the_laws() -> None:
    eps, t, n = 1.0, 4, 20_000
    raw = {"bound": 1.0, "levels": 1, "flip": GAMMA, "memoize": True}
    values = [users(np.array([0.0 if s < t // 2 else 1.0])) for s in range(t)]
    phases = [0 if s < t // 2 else 1 for s in range(t)]
    counts = count_transcripts(MemoOneBitMean(), raw, eps, values, (0,), phases, n, seed=3)
    c = counts.astype(np.int64)[:, :, 0]
    seen = np.zeros((t // 2 + 1, t - t // 2 + 1))
    np.add.at(seen, (c[:, 0], c[:, 1]), 1)
    _, moved = change_laws(eps, t, True, GAMMA)
    z = z_quantile(1 - 1e-3 / (2 * moved.size))
    assert np.all(np.abs(seen / n - moved) <= z * np.sqrt(moved * (1 - moved) / n) + 1e-12)


def test_the_audit_of_t_reports_is_sound_and_reaches_the_prr_bound() -> None:
    # 10⁵ draws per input at T = 32: the memoized transcript's loss is ε_∞ − 1e-10, so the
    # audit's interval (joint confidence 0.999) holds it: lower ≤ ε_∞ ≤ upper; fresh, the
    # loss is 32·ε and the audit's lower bound passes ε_∞ by far
    rng = np.random.default_rng(11)
    eps_inf = longitudinal_epsilon(0.5)
    memo = run_audit(
        CASES["memo-rappor-f0.5-memoized"], 1.0, draws=100_000, rng=rng, collections=32
    )
    assert memo.lower <= eps_inf <= memo.upper
    fresh = run_audit(CASES["memo-rappor-f0.5-fresh"], 1.0, draws=100_000, rng=rng, collections=32)
    assert fresh.lower > eps_inf + 1.0


def test_a_one_report_case_refuses_collections() -> None:
    one_shot = next(c for name, c in CATALOGUE_AUDITS.items() if c.repeated is None)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="audits one report"):
        run_audit(one_shot, 1.0, draws=100, rng=rng, collections=2)
    with pytest.raises(ValueError, match="collections must be >= 1"):
        run_audit(CASES["memo-1bitmean-fresh"], 1.0, draws=100, rng=rng, collections=0)


def test_a_memoized_device_run_at_twice_its_epsilon_is_caught() -> None:
    # the negative control over time: the memoized 1BitMean bit drawn at 2ε (noise = 0.5)
    # while ε is claimed; its T = 8 transcript's loss is 2ε, and the lower bound passes ε
    rng = np.random.default_rng(5)
    case = CASES["memo-1bitmean-memoized"]
    honest = run_audit(case, 1.0, draws=50_000, rng=rng, collections=8)
    leaky = run_audit(case, 1.0, draws=50_000, rng=rng, collections=8, noise=0.5)
    assert honest.lower <= 1.0 <= honest.upper
    assert leaky.lower > 1.5
