"""Catalogue protocols of protocol/user_level/means.py and baselines.py (pooled by weighting.py):
full runs, plans and ledgers (TP5), baselines (user-level-ldp.md §3.10) and the Alg-1-versus-B0
crossover in m (§6.2 E1)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy import stats

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.protocol import Params, Protocol, cohort_permutation
from fedldp.protocol.core.base.records import (
    JSON,
    FloatArray,
    IntArray,
    Plan,
    ReportChunk,
    Result,
    RoundTask,
    UserData,
)
from fedldp.protocol.core.ledger import check_plan_budget
from fedldp.protocol.core.streams import UserStreams, stream_key
from fedldp.protocol.mechanisms.randomizers import laplace_scale
from fedldp.protocol.user_level import baselines as bl
from fedldp.protocol.user_level import means as ul
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level import weighting

STUDY_SEED, POP_SEED = 4242, 777
MU = 0.3  # two-point data X ∈ {−1, +1}, P(X = 1) = 0.65 (E1)
SIGMA2 = 1 - MU**2


def population(rng: np.random.Generator, n: int, m: int, extra: int = 5) -> UserData:
    """n users of two-point data; every 7th user holds ``extra`` samples more than m."""
    counts = np.full(n, m, dtype=np.int64)
    counts[::7] += extra
    values = np.where(rng.random(int(counts.sum())) < (1 + MU) / 2, 1.0, -1.0)
    return UserData(values, counts)


def lomax_population(rng: np.random.Generator, n: int, m: int) -> UserData:
    return UserData(rng.pareto(3.5, n * m), np.full(n, m, dtype=np.int64))


def select(data: UserData, slots: IntArray) -> UserData:
    """The users at ``slots`` (in that order) as their own block."""
    off = data.offsets
    idx = np.concatenate([np.arange(off[s], off[s + 1]) for s in slots])
    return UserData(data.values[idx], data.counts[slots])


def chunked(
    slots: IntArray, eps: FloatArray, payloads: FloatArray, size: int
) -> Iterator[ReportChunk]:
    for a in range(0, slots.size, size):
        b = slice(a, a + size)
        yield ReportChunk(slots[b], eps[b], np.zeros(slots[b].size, np.int64), payloads[b])


def run(
    proto: Protocol[Any], params: Params, eps: FloatArray, data: UserData, chunk: int
) -> tuple[Plan, list[JSON], list[FloatArray], Result]:
    """plan → broadcast → privatize → check → aggregate (in chunks) → finalize."""
    plan = proto.plan(params, eps, {}, STUDY_SEED)
    outputs: list[JSON] = []
    payloads: list[FloatArray] = []
    for rp in plan.rounds:
        task = RoundTask.of(rp, proto.broadcast(params, plan, rp.index, outputs))
        streams = UserStreams(stream_key(POP_SEED, 1, rp.index), rp.cohort)
        z = proto.privatize(params, task, select(data, rp.cohort), rp.epsilon, rp.groups(), streams)
        assert z.shape == (rp.cohort.size, *rp.payload_shape)
        assert proto.check(params, task, rp.epsilon, z).all()
        chunks = chunked(rp.cohort, rp.epsilon, z, chunk)
        outputs.append(proto.aggregate(params, plan, rp.index, task.broadcast, chunks))
        payloads.append(z)
    return plan, outputs, payloads, proto.finalize(params, plan, outputs)


CASES: list[tuple[str, JSON, str]] = [
    ("user-mean", {"samples_per_user": 64}, "two-point"),
    ("user-mean", {"samples_per_user": 64, "clip_output": True, "level": 0.9}, "two-point"),
    ("user-mean", {"samples_per_user": 16, "heavy_tail": True, "moment_bound": 3.2}, "lomax"),
    ("baseline-item-level", {"samples_per_user": 64}, "two-point"),
    ("baseline-one-sample", {"samples_per_user": 64}, "two-point"),
    ("baseline-clipped-laplace", {"samples_per_user": 64}, "two-point"),
]
PROTOCOLS = (*ul.PROTOCOLS, *bl.PROTOCOLS)
BY_NAME = {p.name: p for p in PROTOCOLS}


@pytest.mark.parametrize(("name", "raw", "kind"), CASES)
def test_full_run(name: str, raw: JSON, kind: str) -> None:
    proto = BY_NAME[name]
    params = proto.parse_params(raw)
    rng = np.random.default_rng(5)
    n = 1500
    eps = rng.uniform(1.0, 3.0, n)
    m = int(raw["samples_per_user"])
    data = population(rng, n, m) if kind == "two-point" else lomax_population(rng, n, m)
    mu = MU if kind == "two-point" else 1 / 2.5

    plan, outs, payloads, result = run(proto, params, eps, data, chunk=n)
    assert np.array_equal(check_plan_budget(plan, eps), eps)  # each charged ε_i exactly once
    _, outs2, _, result2 = run(proto, params, eps, data, chunk=97)  # many chunks
    assert isinstance(result.estimate, float)
    assert isinstance(result2.estimate, float)
    assert result2.estimate == pytest.approx(result.estimate, abs=1e-12)
    assert [o.get("k_hat") for o in outs] == [o.get("k_hat") for o in outs2]

    # a user privatized alone sends the same payload as inside its block
    for rp, z in zip(plan.rounds, payloads, strict=True):
        task = RoundTask.of(rp, proto.broadcast(params, plan, rp.index, outs))
        r = rp.cohort.size // 2
        alone = rp.cohort[r : r + 1]
        streams = UserStreams(stream_key(POP_SEED, 1, rp.index), alone)
        one = proto.privatize(params, task, select(data, alone), rp.epsilon[r : r + 1],
                              rp.groups()[r : r + 1], streams)  # fmt: skip
        assert np.array_equal(one[0], z[r])

    # accuracy: |μ̂ − μ| ≤ 5·√(predicted MSE) (+ the heavy-tail bias bound); the prediction
    # bounds σ² by its public bound, so this fails with probability < 1e-6
    assert result.error_bar is not None
    mse = float(result.diagnostics["predicted_mse"])
    assert result.error_bar.half_width == pytest.approx(
        stats.norm.ppf(0.5 + result.error_bar.level / 2) * math.sqrt(mse)
    )
    assert result.error_bar.kind == "clt"
    assert result.error_bar.approximate
    slack = 0.0
    if raw.get("heavy_tail"):
        design = ts.Design.from_json(plan.public["design"])
        slack = design.sample_var / (4 * m * design.delta)
        assert result.diagnostics["heavy_tail"]
    assert abs(result.estimate - mu) <= 5 * math.sqrt(mse) + slack
    if name == "user-mean":
        assert result.warnings == plan.warnings
        diag = result.diagnostics
        assert diag["n1"] + diag["n2"] == n
        assert diag["n1"] == n // 2
        assert diag["L"] <= mu <= diag["R"]
        assert diag["R"] - diag["L"] == pytest.approx(3 * diag["h"])
        if raw.get("clip_output"):
            assert abs(result.estimate) <= diag["bound"]


def test_user_mean_rounds_and_broadcasts() -> None:
    proto = BY_NAME["user-mean"]
    params = proto.parse_params({"samples_per_user": 256})
    eps = np.full(2001, 1.0)
    plan = proto.plan(params, eps, {}, 3)
    one, two = plan.rounds
    assert (one.name, one.payload_kind, one.payload_shape) == ("stage-1", "histogram", (8,))
    assert (two.name, two.payload_kind, two.payload_shape) == ("stage-2", "scalar", ())
    assert (one.cohort.size, two.cohort.size) == (1000, 1001)
    assert np.intersect1d(one.cohort, two.cohort).size == 0
    assert np.array_equal(np.union1d(one.cohort, two.cohort), np.arange(2001))
    b0 = proto.broadcast(params, plan, 0, [])
    for key in ("bound", "m", "h", "n_bins", "delta", "n_ref"):
        assert key in b0
    assert b0["sensitivity"] == 2.0
    first = {"L": -0.25, "R": 0.5, "lo": -0.4, "hi": 0.65}
    b1 = proto.broadcast(params, plan, 1, [first])
    assert b1["sensitivity"] == pytest.approx(1.05)
    with pytest.raises(ValueError, match="stage one"):
        proto.broadcast(params, plan, 1, [])


def test_equal_eps_gives_plain_sums_and_mean() -> None:
    proto = BY_NAME["user-mean"]
    params = proto.parse_params({"samples_per_user": 64})
    data = population(np.random.default_rng(8), 1200, 64)
    _, outs, payloads, _ = run(proto, params, np.full(1200, 2.0), data, chunk=500)
    sums = np.asarray(outs[0]["sums"])
    assert np.allclose(sums, payloads[0].mean(axis=0), rtol=1e-12, atol=1e-12)
    assert outs[0]["k_hat"] == int(np.argmax(payloads[0].sum(axis=0))) + 1
    assert outs[1]["estimate"] == pytest.approx(payloads[1].mean(), rel=1e-12, abs=1e-15)


def test_unequal_eps_use_inverse_variance_weights_and_renormalize_dropouts() -> None:
    proto = BY_NAME["user-mean"]
    params = proto.parse_params({"samples_per_user": 64})
    rng = np.random.default_rng(9)
    eps = rng.uniform(0.8, 5.0, 1400)
    plan, outs, payloads, _ = run(proto, params, eps, population(rng, 1400, 64), chunk=300)
    design = ts.Design.from_json(plan.public["design"])
    one, two = plan.rounds
    assert np.allclose(outs[0]["sums"], ts.stage_one_weights(one.epsilon) @ payloads[0])
    w = ts.stage_two_weights(two.epsilon, design)
    assert outs[1]["estimate"] == pytest.approx(float(w @ payloads[1]), rel=1e-12)
    assert outs[1]["predicted_mse"] == pytest.approx(ts.predicted_mse(design, two.epsilon))
    # half the stage-two cohort drops out: the received weights are renormalized
    keep = slice(0, two.cohort.size // 2)
    part = ReportChunk(two.cohort[keep], two.epsilon[keep], two.groups()[keep], payloads[1][keep])
    out = proto.aggregate(params, plan, 1, {}, [part])
    wk = ts.stage_two_weights(two.epsilon[keep], design)
    assert out["estimate"] == pytest.approx(float(wk @ payloads[1][keep]), rel=1e-12)
    assert out["n_reports"] == two.cohort.size // 2
    with pytest.raises(ValueError, match="no reports"):
        proto.aggregate(params, plan, 1, {}, [])


def test_check_rejects_non_finite_and_misshapen_payloads() -> None:
    proto = BY_NAME["user-mean"]
    params = proto.parse_params({"samples_per_user": 64})
    plan = proto.plan(params, np.full(1200, 1.0), {}, 1)
    one = plan.rounds[0]
    task = RoundTask.of(one, proto.broadcast(params, plan, 0, []))
    z = np.zeros((3, 4))
    z[1, 2], z[2, 0] = np.nan, np.inf
    assert proto.check(params, task, np.ones(3), z).tolist() == [True, False, False]
    with pytest.raises(ValueError, match="shape"):
        proto.check(params, task, np.ones(3), np.zeros((3, 5)))
    two = RoundTask.of(plan.rounds[1], {})
    assert proto.check(params, two, np.ones(2), np.array([1e6, -np.inf])).tolist() == [
        True,
        False,
    ]


def test_infeasible_plan_is_refused_with_an_actionable_message() -> None:
    proto = BY_NAME["user-mean"]
    params = proto.parse_params({"samples_per_user": 256})
    with pytest.raises(ValueError, match=r"infeasible plan.*about \d+ in total"):
        proto.plan(params, np.full(1000, 0.5), {}, 1)  # score 500·0.25 = 125
    plan = proto.plan(params, np.full(2800, 0.5), {}, 1)  # score 350: warned
    assert len(plan.warnings) == 1
    with pytest.raises(ValueError, match="at least 2 participants"):
        proto.plan(params, np.array([1.0]), {}, 1)
    # m ≤ 16 means B ≤ 2 bins: no condition
    small = proto.parse_params({"samples_per_user": 16})
    assert proto.plan(small, np.full(10, 0.1), {}, 1).warnings == ()


def test_without_enforce_feasibility_the_infeasible_plan_runs_with_a_warning() -> None:
    # spec §6.2 E2 runs Alg 1 at n₁ε² = 50, as the paper's analysis does, to measure stage one
    proto = BY_NAME["user-mean"]
    params = proto.parse_params({"samples_per_user": 256, "enforce_feasibility": False})
    plan = proto.plan(params, np.full(400, 0.5), {}, 1)  # score 200·0.25 = 50 < 300
    assert len(plan.warnings) == 1
    assert plan.warnings[0].startswith("infeasible plan run as asked")
    assert proto.min_participants(0.5, params) == 2
    refused = ts.check_stage_one(np.full(200, 0.5), 8, 400, refuse=False)
    assert "enforce_feasibility false" in refused[0]


def test_parameters_are_validated() -> None:
    proto = BY_NAME["user-mean"]
    with pytest.raises(ValidationError, match="samples_per_user"):
        proto.parse_params({})
    with pytest.raises(ValidationError, match="moment_bound"):
        proto.parse_params({"samples_per_user": 4, "heavy_tail": True})
    with pytest.raises(ValidationError, match="omit bound"):
        proto.parse_params(
            {"samples_per_user": 4, "heavy_tail": True, "moment_bound": 2.0, "bound": 3.0}
        )
    with pytest.raises(ValidationError):
        proto.parse_params({"samples_per_user": 4, "bound": float("inf")})
    with pytest.raises(ValidationError):
        proto.parse_params({"samples_per_user": 4, "unknown": 1})


def test_users_with_too_few_samples_are_refused_and_extra_samples_truncated() -> None:
    data = UserData(np.arange(7.0), np.array([3, 4]))
    assert np.array_equal(weighting.user_samples(data, 3), [[0, 1, 2], [3, 4, 5]])
    with pytest.raises(ValueError, match="hold fewer"):
        weighting.user_samples(data, 4)
    with pytest.raises(ValueError, match="scalar data"):
        weighting.user_samples(UserData(np.zeros((4, 2)), np.array([2, 2])), 2)


def test_catalogue_entries() -> None:
    assert [p.name for p in PROTOCOLS] == [
        "user-mean",
        "baseline-item-level",
        "baseline-one-sample",
        "baseline-clipped-laplace",
    ]
    for p in PROTOCOLS:
        info = p.describe()
        assert info["data_kind"] == "scalar"
        assert info["trust"] == "local"
        assert "samples_per_user" in info["parameters"]["properties"]
        assert "\n" not in info["summary"]
        assert "ε" in info["heterogeneity"]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(0.01, 20.0), min_size=2, max_size=60).map(np.array),
    st.integers(0, 2**31),
)
def test_plans_never_charge_more_than_eps(eps: FloatArray, seed: int) -> None:
    for proto in PROTOCOLS:
        params = proto.parse_params({"samples_per_user": 4})  # B = 1: always feasible
        plan = proto.plan(params, eps, {}, seed)
        charges = check_plan_budget(plan, eps)
        assert np.all(charges <= eps)
        slots = np.concatenate([r.cohort for r in plan.rounds])
        assert np.array_equal(np.sort(slots), np.arange(eps.size))  # disjoint, all used once


# --------------------------------------------------------------------------- baselines (§3.10)


@pytest.mark.parametrize("name", ["baseline-item-level", "baseline-one-sample",
                                  "baseline-clipped-laplace"])  # fmt: skip
def test_baseline_report_variance_matches_exact_formula(name: str) -> None:
    """Var of one report vs the §3.10 per-user variance with the true σ²: 5σ of the sample
    variance (relative sd ≤ √((κ − 1)/N) with κ ≤ 6 for these Laplace-dominated reports)."""
    proto = BY_NAME[name]
    assert isinstance(proto, bl._Baseline)
    m, n, e = 16, 100_000, 0.8
    params = bl.BaselineParams(samples_per_user=m)
    rng = np.random.default_rng(21)
    samples = np.where(rng.random((n, m)) < (1 + MU) / 2, 1.0, -1.0)
    z = proto.report(params, samples, np.full(n, e), rng)
    var = float(bl.baseline_variances(proto.kind, np.array([e]), 1.0, m, SIGMA2)[0])
    assert abs(z.var() / var - 1) <= 5 * math.sqrt(5 / n)
    assert abs(z.mean() - MU) <= 5 * math.sqrt(var / n)


def test_baseline_formulas_and_crossover_from_exact_formulas() -> None:
    """§3.10/E1 at n = 16k, ε = 1: Alg 1 loses to B0 at m = 64, 128 and wins at m ≥ 256;
    the crossover is m* = (σ² + 4c*²)/8 (≈ 166); B2 = B0 + (σ² − σ²/m)/n; Alg 1 ≪ B1."""
    n, eps = 16_384, 1.0
    e = np.full(n, eps)

    def alg1(m: int) -> float:
        d = ts.bounded_design(1.0, m, n)
        return ts.predicted_mse(dataclasses.replace(d, sample_var=SIGMA2), np.full(n - n // 2, eps))

    def base(kind: str, m: int) -> float:
        return weighting.inverse_variance_mse(bl.baseline_variances(kind, e, 1.0, m, SIGMA2))

    assert base("clipped-laplace", 64) == pytest.approx(SIGMA2 / (n * 64) + 8 / n, rel=1e-12)
    assert base("item-level", 64) == pytest.approx(SIGMA2 / (n * 64) + 8 * 64 / n, rel=1e-12)
    assert base("one-sample", 64) == pytest.approx(SIGMA2 / n + 8 / n, rel=1e-12)
    for m in [64, 256]:
        assert base("one-sample", m) - base("clipped-laplace", m) == pytest.approx(
            (SIGMA2 - SIGMA2 / m) / n, rel=1e-9
        )
        assert alg1(m) < base("item-level", m) * 0.05
    assert alg1(64) > base("clipped-laplace", 64)
    assert alg1(128) > base("clipped-laplace", 128)
    assert all(alg1(m) < base("clipped-laplace", m) for m in [256, 512, 1024, 2048])
    m_star = (SIGMA2 + 4 * ts.c_star(n) ** 2) / 8
    assert alg1(math.floor(m_star)) > base("clipped-laplace", math.floor(m_star))
    assert alg1(math.ceil(m_star)) < base("clipped-laplace", math.ceil(m_star))
    assert m_star == pytest.approx(166, abs=1)
    # the spec's E1 figures: n·MSE ≈ 20.8 (Alg 1) vs 8.9 (B2) at m = 64; 5.2 vs 8.9 at m = 256
    assert n * alg1(64) == pytest.approx(20.8, abs=0.05)
    assert n * alg1(256) == pytest.approx(5.2, abs=0.05)
    assert n * base("one-sample", 64) == pytest.approx(8.9, abs=0.05)


@pytest.mark.slow
def test_crossover_in_simulation() -> None:
    """The same crossover from simulated errors. Each MSE_hat/MSE ~ χ²_R/R, so log(MSE_hat) has
    sd ≈ √(2/R); with R = 300 (Alg 1) and 2000 (B0) the log-ratio has sd 0.088 while the
    predicted log-ratios are +0.96 (m = 64) and −0.43 (m = 256): both beyond 4.9 sd.

    B0 is drawn from its exact sufficient statistics (its per-report law is checked against
    the formula above): with two-point data the clip is a no-op and Σ_i Ȳ_i = D(2·Bin(nm, q) −
    nm)/m, and a sum of n Lap(λ) is λ(G₁ − G₂) with G₁, G₂ ~ Gamma(n) (Lap = Exp − Exp)."""
    from tests.protocol.user_level.test_two_stage import simulate_alg1

    n, eps, d = 16_384, 1.0, 1.0
    rng = np.random.default_rng(41)
    q = (1 + MU / d) / 2
    lam = float(laplace_scale(2 * d, eps))
    for m, alg1_loses in [(64, True), (256, False)]:
        errors, _ = simulate_alg1(n, m, eps, MU, 300, rng)
        reps = 2000
        mean_y = d * (2 * rng.binomial(n * m, q, reps) / (n * m) - 1)
        noise = lam * (rng.gamma(n, size=reps) - rng.gamma(n, size=reps)) / n
        mse_b0 = float(np.mean((mean_y + noise - MU) ** 2))
        assert mse_b0 == pytest.approx(
            weighting.inverse_variance_mse(
                bl.baseline_variances("clipped-laplace", np.full(n, eps), d, m, SIGMA2)
            ),
            rel=5 * math.sqrt(2 / reps),
        )
        assert (np.mean(errors**2) > mse_b0) == alg1_loses


@pytest.mark.parametrize("epsilon", [0.1, 0.3, 1.0, 7.0])
def test_the_minimum_population_is_exactly_where_the_plan_becomes_feasible(epsilon: float) -> None:
    """§1.5 at equal ε: the closed form (no parameters) is the first n the plan accepts with
    more than 2 stage-one bins, from both sides; with at most 2 bins only 2 are needed."""
    protocol = CATALOGUE["user-mean"]
    many_bins = protocol.parse_params({"samples_per_user": 64})  # 4 bins
    n = protocol.min_participants(epsilon)
    assert n == 2 * math.ceil(300 / min(epsilon**2, 1.0))
    protocol.plan(many_bins, np.full(n, epsilon), {}, 3)
    with pytest.raises(ValueError, match="infeasible plan"):
        protocol.plan(many_bins, np.full(n - 1, epsilon), {}, 3)
    assert protocol.min_participants(epsilon, many_bins) == n  # the plan's own search agrees
    two_bins = protocol.parse_params({"samples_per_user": 16})
    assert protocol.min_participants(epsilon, two_bins) == 2


def test_the_stages_are_the_sorted_halves_of_the_seeds_permutation() -> None:
    """§2.3's split, as drawn before the cohorts became views of one permutation sorted in
    place (issue 27 item 4): the same cohorts, ε's and stage-one score for the same seed."""
    rng = np.random.default_rng(11)
    for n in (2, 3, 1001):
        eps = rng.uniform(0.2, 2.0, n)
        params = ul.UserMeanParams(samples_per_user=64, enforce_feasibility=False)
        plan = ul.UserMean().plan(params, eps, {}, 42)
        order = cohort_permutation(n, 42)
        one, two = np.sort(order[: n // 2]), np.sort(order[n // 2 :])
        assert plan.rounds[0].cohort.tolist() == one.tolist()
        assert plan.rounds[1].cohort.tolist() == two.tolist()
        assert plan.rounds[0].epsilon.tolist() == eps[one].tolist()
        assert plan.rounds[1].epsilon.tolist() == eps[two].tolist()
        score = float(np.sum(np.minimum(eps[one] * eps[one], 1.0)))
        assert plan.public["stage_one_score"] == score  # bit for bit
