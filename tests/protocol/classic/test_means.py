"""The classic mean protocols (protocol/classic/means.py) end to end in process: plan →
privatize (per-user streams) → check → aggregate (in chunks) → finalize, against the papers'
variance formulas (protocol/classic/means_theory.py, checked against the papers in
test_means_theory.py).

Monte-Carlo tests replicate a study R times on the same users' means (one privatize call over
R·n users, one aggregate per replicate) and compare the replicates' errors with the exact
variance: each coordinate's mean error within 4.4 standard errors (two-sided normal tail 1e-5;
Bonferroni over d coordinates keeps the total below 1e-4), and the mean squared error ‖e‖²
within 4.4·sqrt(2/R) of the formula relatively (for a Gaussian error vector Var‖e‖² = 2 tr(Σ²) ≤
2 tr(Σ)²; at n = 200 users the CLT makes the error Gaussian to a few percent).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from fedldp.protocol.api import Plan, ReportChunk, Result, RoundTask, UserData
from fedldp.protocol.classic import means
from fedldp.protocol.classic import means_theory as th
from fedldp.protocol.classic.means import ClassicMean
from fedldp.protocol.core.streams import UserStreams, stream_key

PROTOCOLS: tuple[ClassicMean, ...] = tuple(p for p in means.PROTOCOLS if isinstance(p, ClassicMean))
D = 4
Z = 4.4
"""Two-sided normal quantile at 1e-5."""
KEY = stream_key(26, 1)


def _raw(protocol: ClassicMean, **extra: Any) -> dict[str, Any]:
    return ({"dimension": D} if protocol.vector else {}) | extra


def _data(t: np.ndarray, protocol: ClassicMean) -> UserData:
    """Users holding two samples each whose mean is t (n,) or (n, d): t ± 0.5 clipped to what
    averages back to t (so that the local mean, not a sample, is what gets privatized)."""
    spread = np.minimum(0.5, 1.0 - np.abs(t)) if protocol.vector else np.minimum(0.5, 1 - abs(t))
    values = np.stack([t - spread, t + spread], axis=1)
    values = values.reshape(-1, *t.shape[1:]) if protocol.vector else values.reshape(-1)
    return UserData(values, np.full(t.shape[0], 2, dtype=np.int64))


def _means(n: int, protocol: ClassicMean, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (n, D) if protocol.vector else (n,)
    t = rng.uniform(-1.0, 1.0, shape)
    t[: n // 4] = np.sign(t[: n // 4])  # a quarter at the ends, PM's worst case
    return t


def _run(
    protocol: ClassicMean, raw: dict[str, Any], t: np.ndarray, eps: np.ndarray, chunk: int = 97
) -> tuple[Any, Plan, np.ndarray, Result]:
    params = protocol.parse_params(raw)
    plan = protocol.plan(params, eps, {}, 7)
    broadcast = protocol.broadcast(params, plan, 0, [])
    rp = plan.rounds[0]
    task = RoundTask.of(rp, broadcast)
    payloads = protocol.privatize(
        params, task, _data(t, protocol), rp.epsilon, rp.groups(), UserStreams(KEY, rp.cohort)
    )
    assert np.all(protocol.check(params, task, rp.epsilon, payloads))
    assert np.all(protocol.plausible(params, task, rp.epsilon, rp.groups(), payloads))
    cuts = range(0, rp.cohort.size, chunk)
    chunks = [
        ReportChunk(
            rp.cohort[s : s + chunk],
            rp.epsilon[s : s + chunk],
            rp.groups()[s : s + chunk],
            payloads[s : s + chunk],
        )
        for s in cuts
    ]
    output = protocol.aggregate(params, plan, 0, broadcast, chunks)
    return params, plan, payloads, protocol.finalize(params, plan, [output])


def _mixed(n: int) -> np.ndarray:
    return np.resize(np.array([0.5, 2.0, 5.0]), n)


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.name)
def test_equal_epsilons_give_the_textbook_average_with_either_weighting(
    protocol: ClassicMean,
) -> None:
    t = _means(300, protocol)
    eps = np.full(300, 1.5)
    _, _, payloads, inverse = _run(protocol, _raw(protocol), t, eps)
    _, _, same, uniform = _run(protocol, _raw(protocol, weights="uniform"), t, eps)
    assert np.array_equal(payloads, same)
    textbook = payloads.reshape(300, -1).mean(axis=0)
    for result in (inverse, uniform):
        raw = np.atleast_1d(np.asarray(result.diagnostics["raw_estimate"]))
        assert np.allclose(raw, textbook, rtol=1e-12, atol=1e-15)
    assert inverse.diagnostics["predicted_mse"] == pytest.approx(
        uniform.diagnostics["predicted_mse"], rel=1e-12
    )


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.name)
def test_unequal_epsilons_weight_each_report_by_its_inverse_worst_variance(
    protocol: ClassicMean,
) -> None:
    t = _means(300, protocol)
    eps = _mixed(300)
    _, _, payloads, result = _run(protocol, _raw(protocol), t, eps)
    d = D if protocol.vector else 1
    a = th.inverse_variance_weights(protocol.mechanism, eps, d, protocol.sampled)
    expected = (a @ payloads.reshape(300, -1)) / a.sum()
    raw = np.atleast_1d(np.asarray(result.diagnostics["raw_estimate"]))
    assert np.allclose(raw, expected, rtol=1e-12, atol=1e-15)
    assert len(set(np.round(a, 12))) == 3  # three ε's, three weights


@pytest.mark.parametrize("weights", ["inverse-variance", "uniform"])
@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.name)
def test_replicated_errors_match_the_exact_variance(protocol: ClassicMean, weights: str) -> None:
    n, reps = 200, 1500
    t = _means(n, protocol, seed=1)
    eps = _mixed(n)
    d = D if protocol.vector else 1
    raw = _raw(protocol, weights=weights)
    params, _plan, payloads, _ = _run(protocol, raw, np.concatenate([t] * reps), np.tile(eps, reps))
    one = protocol.plan(params, eps, {}, 7)
    broadcast = protocol.broadcast(params, one, 0, [])
    rows = payloads.reshape(reps, n, -1) if protocol.vector else payloads.reshape(reps, n)
    slots = np.arange(n, dtype=np.int64)
    errors, predicted = [], []
    w = (
        np.ones(n)
        if weights == "uniform"
        else th.inverse_variance_weights(protocol.mechanism, eps, d, protocol.sampled)
    )
    target = (w / w.sum()) @ t.reshape(n, -1)
    for r in range(reps):
        chunk = ReportChunk(slots, eps, np.zeros(n, dtype=np.int64), rows[r])
        result = protocol.finalize(
            params, one, [protocol.aggregate(params, one, 0, broadcast, [chunk])]
        )
        errors.append(np.atleast_1d(np.asarray(result.diagnostics["raw_estimate"])) - target)
        predicted.append(result.diagnostics["predicted_mse"])
    e = np.array(errors)
    exact = th.exact_mse(protocol.mechanism, t, eps, w, protocol.sampled)
    a, b = th.variance_terms(protocol.mechanism, eps, d, protocol.sampled)
    wn = w / w.sum()
    per_coordinate = (wn**2) @ (a[:, None] + b[:, None] * t.reshape(n, -1) ** 2)
    assert per_coordinate.sum() == pytest.approx(exact, rel=1e-12)
    # unbiased: each coordinate's mean error within Z standard errors
    assert np.all(np.abs(e.mean(axis=0)) <= Z * np.sqrt(per_coordinate / reps)), e.mean(axis=0)
    # the variance formula: mean ‖e‖² within Z·sqrt(2/R) of it, relatively
    mse = float(np.mean(np.sum(e**2, axis=1)))
    assert abs(mse / exact - 1.0) <= Z * math.sqrt(2.0 / reps), (mse, exact)
    # the predicted_mse diagnostic: unbiased (PM, Laplace, sampled HM); an upper bound where the
    # report cannot see t² (Duchi: B = −1), within its own Monte-Carlo error
    p = np.array(predicted)
    slack = Z * p.std() / math.sqrt(reps)
    if np.all(b + 1.0 > 1e-12):
        assert abs(p.mean() - exact) <= slack + 1e-12 * exact, (p.mean(), exact)
    else:
        assert p.mean() >= exact - slack, (p.mean(), exact)


@pytest.mark.parametrize("mechanism", ["laplace", "duchi", "pm", "hm"])
def test_a_vector_protocol_at_d_1_is_its_scalar_protocol(mechanism: str) -> None:
    scalar = next(p for p in PROTOCOLS if p.mechanism == mechanism and not p.vector)
    vector = next(p for p in PROTOCOLS if p.mechanism == mechanism and p.vector)
    t = np.linspace(-1.0, 1.0, 101)
    eps = np.resize(np.array([0.3, 1.0, 3.0, 7.0]), 101)
    _, _, ys, rs = _run(scalar, {}, t, eps)
    _, _, yv, rv = _run(vector, {"dimension": 1}, t[:, None], eps)
    assert np.array_equal(ys, yv[:, 0])
    assert rs.estimate == pytest.approx(rv.estimate[0], rel=1e-12)  # type: ignore[index]


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.name)
def test_check_refuses_what_no_honest_client_sends(protocol: ClassicMean) -> None:
    n = 60
    params, plan, payloads, _ = _run(protocol, _raw(protocol), _means(n, protocol), _mixed(n))
    rp = plan.rounds[0]
    task = RoundTask.of(rp, protocol.broadcast(params, plan, 0, []))
    y = payloads.reshape(n, -1).copy()
    lo, hi = protocol.report_bounds(params, task, rp.epsilon, rp.groups())
    top = np.broadcast_to(hi, payloads.shape).reshape(n, -1)
    bad = {
        "nan": np.where(np.arange(y.shape[1]) == 0, np.nan, y),
        "beyond": np.where(np.arange(y.shape[1]) == 0, 1.5 * top, y),
    }
    if protocol.mechanism == "duchi":
        bad["off the ±B grid"] = y * 0.99
    if protocol.sampled:
        bad["too many coordinates"] = np.where(y == 0, 0.01, y)
    for name, rows in bad.items():
        ok = protocol.check(params, task, rp.epsilon, rows.reshape(payloads.shape))
        assert not np.any(ok), name
    # the output attacker's report, the upper bound itself, passes unless a sampled vector's
    # k-coordinate rule refuses it
    ok = protocol.check(params, task, rp.epsilon, np.broadcast_to(hi, payloads.shape).copy())
    assert np.all(ok) != protocol.sampled
    assert np.all(np.asarray(lo) == -np.asarray(hi))


def test_params_are_validated() -> None:
    pm = next(p for p in PROTOCOLS if p.name == "classic-pm-vector")
    for bad in ({}, {"dimension": 0}, {"dimension": 5000}, {"dimension": 2, "weights": "paper"}):
        with pytest.raises(ValueError, match="validation error"):
            pm.parse_params(bad)
    with pytest.raises(ValueError, match="at least one participant"):
        pm.plan(pm.parse_params({"dimension": 2}), np.zeros(0), {}, 0)
    with pytest.raises(ValueError, match="dimension 2"):
        pm.privatize(
            pm.parse_params({"dimension": 2}),
            RoundTask.of(
                pm.plan(pm.parse_params({"dimension": 2}), np.ones(1), {}, 0).rounds[0], {}
            ),
            UserData(np.zeros((2, 3)), np.array([2])),
            np.ones(1),
            np.zeros(1, dtype=np.int64),
            UserStreams(KEY, np.arange(1)),
        )


@pytest.mark.parametrize(
    "name", ["classic-pm-vector", "classic-hm-vector", "classic-laplace-vector"]
)
def test_alg_4_samples_k_coordinates_uniformly_whatever_the_data(name: str) -> None:
    # ε = 5 at d = 4: k = 2, so the sampled pair is one of binom(4, 2) = 6, each with probability
    # 1/6 whatever the data (the set carries no information); chi-square at α = 1e-4
    protocol = next(p for p in PROTOCOLS if p.name == name)
    n = 12_000
    t = np.tile(np.array([1.0, -1.0, 0.3, 0.0]), (n, 1))
    _, _, payloads, _ = _run(protocol, _raw(protocol), t, np.full(n, 5.0))
    chosen = payloads != 0
    assert np.all(chosen.sum(axis=1) == 2)
    pairs = [tuple(np.flatnonzero(row)) for row in chosen]
    counts = np.array([pairs.count(p) for p in sorted(set(pairs))])
    assert counts.size == 6
    assert stats.chisquare(counts).pvalue > 1e-4
