"""The four catalogue protocols of protocol/heterogeneous/ (means.py, frequency.py on flow.py), run
end to end in-process: plan → broadcast → privatize (per-user streams) → check → aggregate (in
chunks) → finalize."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy.stats import chi2

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.core.base.records import (
    FloatArray,
    Plan,
    ReportChunk,
    Result,
    RoundTask,
    UserData,
)
from fedldp.protocol.core.streams import UserStreams, stream_key
from fedldp.protocol.heterogeneous import estimators as est
from fedldp.protocol.heterogeneous import frequency, means
from fedldp.protocol.heterogeneous.frequency import jl_public_seed
from fedldp.protocol.mechanisms.randomizers import duchi_radius, jl_dimension, rr_debias

PROTOCOLS = (*means.PROTOCOLS, *frequency.PROTOCOLS)
LAPLACE, RR, DUCHI, FREQ = PROTOCOLS
KEY = stream_key(1, 5)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(777, spawn_key=key))


def _profile(n: int) -> FloatArray:
    return np.concatenate([np.full(n // 2, 0.1), np.full(n - n // 2, 1.0)])


class Run:
    """One in-process execution; chunks of ``chunk`` reporters reach ``aggregate`` in slot order."""

    def __init__(
        self,
        protocol: Protocol[Any],
        raw: dict[str, Any],
        data: UserData,
        eps: FloatArray,
        *,
        chunk: int = 250,
        keep: NDArray[np.bool_] | None = None,
    ) -> None:
        self.protocol = protocol
        self.params = protocol.parse_params(raw)
        self.plan: Plan = protocol.plan(self.params, eps, {}, 2024)
        self.broadcast = protocol.broadcast(self.params, self.plan, 0, [])
        rp = self.plan.rounds[0]
        self.task = RoundTask.of(rp, self.broadcast)
        self.payloads = protocol.privatize(
            self.params, self.task, data, rp.epsilon, rp.groups(), UserStreams(KEY, rp.cohort)
        )
        assert np.all(protocol.check(self.params, self.task, rp.epsilon, self.payloads))
        mask = np.ones(rp.cohort.size, dtype=bool) if keep is None else keep
        idx = np.flatnonzero(mask)
        chunks = [
            ReportChunk(rp.cohort[b], rp.epsilon[b], rp.groups()[b], self.payloads[b])
            for b in np.array_split(idx, max(1, math.ceil(idx.size / chunk)))
        ]
        self.output = protocol.aggregate(self.params, self.plan, 0, self.broadcast, chunks)
        # round outputs and broadcasts are stored as JSON: they must round-trip exactly
        assert json.loads(json.dumps(self.output)) == self.output
        assert json.loads(json.dumps(self.broadcast)) == self.broadcast
        self.result: Result = protocol.finalize(self.params, self.plan, [self.output])


def _scalar_users(n: int, g: np.random.Generator, per_user: int = 3) -> tuple[UserData, float]:
    """Each user holds ``per_user`` samples of 2·Beta(2,5) − 1; the target is E[X] = −3/7."""
    values = 2 * g.beta(2, 5, size=n * per_user) - 1
    return UserData(values, np.full(n, per_user, dtype=np.int64)), -3 / 7


def _binary_users(n: int, g: np.random.Generator, theta: float) -> UserData:
    values = np.where(g.random(n) < (1 + theta) / 2, 1.0, -1.0)
    return UserData(values, np.ones(n, dtype=np.int64))


def _vector_users(n: int, d: int, g: np.random.Generator) -> UserData:
    """X = e_1 w.p. 1/2, else uniform on the unit sphere: θ = e_1/2 (spec §5 E2)."""
    v = g.standard_normal((n, d))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v[g.random(n) < 0.5] = np.eye(d)[0]
    return UserData(v, np.ones(n, dtype=np.int64))


def _categorical_users(n: int, k: int, g: np.random.Generator) -> tuple[UserData, FloatArray]:
    p = 1 / np.arange(1, k + 1)
    p /= p.sum()
    counts = g.integers(1, 4, size=n).astype(np.int64)
    return UserData(g.choice(k, size=int(counts.sum()), p=p), counts), p


# --------------------------------------------------------------------------- catalogue


def test_catalogue_order_and_descriptions() -> None:
    assert [p.name for p in PROTOCOLS] == [
        "hetero-mean-laplace",
        "hetero-mean-rr",
        "hetero-mean-duchi",
        "hetero-frequency",
    ]
    for p in PROTOCOLS:
        assert CATALOGUE[p.name] is p
        info = p.describe()
        assert info["trust"] == "local"
        assert "Aliakbarpour" in info["source"]
        assert "a_i" in info["heterogeneity"]
        assert "user-level" in info["heterogeneity"]
    assert [p.data_kind for p in PROTOCOLS] == ["scalar", "scalar", "vector", "categorical"]


# --------------------------------------------------------------------------- full runs


@pytest.mark.parametrize("kind", ["paper", "uniform", "inverse_variance"])
def test_laplace_protocol_full_run(kind: str) -> None:
    n = 2000
    eps = _profile(n)
    data, theta = _scalar_users(n, _rng(1))
    run = Run(LAPLACE, {"weights": kind, "beta": 1e-4}, data, eps)
    assert np.all(run.plan.charges() <= eps)
    bar = run.result.error_bar
    assert bar is not None
    assert (bar.kind, bar.approximate, bar.norm, bar.level) == (
        "laplace-chernoff",
        False,
        "abs",
        1 - 1e-4,
    )
    # rigorous (1 − β) bound: fails with probability ≤ 1e-4
    assert abs(float(run.result.estimate) - theta) <= bar.half_width  # type: ignore[arg-type]
    a = est.weights("laplace", eps, kind)  # type: ignore[arg-type]
    assert run.output["raw_estimate"] == pytest.approx(float(a @ run.payloads / a.sum()))
    d = run.result.diagnostics
    assert d["n_reports"] == n
    assert d["weights"] == kind
    assert d["S"] == pytest.approx(est.effective_sizes(eps)["S"])
    assert d["W"] == pytest.approx(est.effective_sizes(eps)["W"])


def test_laplace_protocol_maps_the_data_range_and_clips() -> None:
    n = 400
    g = _rng(2)
    values = g.uniform(10.0, 20.0, n)
    eps = np.full(n, 0.05)
    run = Run(LAPLACE, {"lo": 10.0, "hi": 20.0}, UserData(values, np.ones(n, np.int64)), eps)
    estimate = float(run.result.estimate)  # type: ignore[arg-type]
    assert 10.0 <= estimate <= 20.0
    raw = float(run.output["raw_estimate"])
    assert raw == pytest.approx(15.0 + 5.0 * float(np.mean(run.payloads)))
    raw_params = {"lo": 10.0, "hi": 20.0, "clip": False}
    unclipped = Run(LAPLACE, raw_params, UserData(values, np.ones(n, np.int64)), eps)
    assert float(unclipped.result.estimate) == pytest.approx(raw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hi > lo"):
        LAPLACE.parse_params({"lo": 1.0, "hi": 1.0})


def test_rr_protocol_binary_and_interval() -> None:
    n, theta = 4000, 0.3
    eps = _profile(n)
    run = Run(RR, {"beta": 1e-4}, _binary_users(n, _rng(3), theta), eps)
    bar = run.result.error_bar
    assert bar is not None
    assert (bar.kind, bar.approximate) == ("hoeffding", False)
    assert abs(float(run.result.estimate) - theta) <= bar.half_width  # type: ignore[arg-type]
    s_rr = est.effective_sizes(eps)["S_RR"]
    assert bar.half_width == pytest.approx(math.sqrt(2 * math.log(2 / 1e-4) / s_rr), rel=1e-12)
    assert set(np.unique(run.payloads).tolist()) == {-1.0, 1.0}
    data, mean = _scalar_users(n, _rng(4))
    inter = Run(RR, {"input": "interval", "beta": 1e-4}, data, eps)
    assert inter.result.error_bar is not None
    assert abs(float(inter.result.estimate) - mean) <= inter.result.error_bar.half_width  # type: ignore[arg-type]
    c = rr_debias(eps)
    a = 1 / c**2
    assert inter.output["raw_estimate"] == pytest.approx(float(a @ (c * inter.payloads) / a.sum()))


def test_rr_binary_rejects_non_binary_users() -> None:
    params = RR.parse_params({"input": "binary"})
    eps = np.array([1.0, 1.0])
    plan = RR.plan(params, eps, {}, 1)
    task = RoundTask.of(plan.rounds[0], RR.broadcast(params, plan, 0, []))
    rng = UserStreams(KEY, [0, 1])
    mixed = UserData(np.array([1.0, -1.0, 1.0]), np.array([2, 1], dtype=np.int64))  # mean 0
    with pytest.raises(ValueError, match="exactly -1 or \\+1"):
        RR.privatize(params, task, mixed, eps, np.zeros(2, np.int64), rng)
    several = UserData(np.array([1.0, 1.0, -1.0]), np.array([2, 1], dtype=np.int64))
    out = RR.privatize(params, task, several, eps, np.zeros(2, np.int64), rng)
    assert np.all(np.abs(out) == 1.0)


@pytest.mark.parametrize("kind", ["paper", "inverse_variance"])
def test_duchi_protocol_full_run(kind: str) -> None:
    n, d = 3000, 6
    eps = _profile(n)
    run = Run(DUCHI, {"dimension": d, "weights": kind}, _vector_users(n, d, _rng(5)), eps)
    bar = run.result.error_bar
    assert bar is not None
    assert (bar.kind, bar.approximate, bar.norm) == ("clt", True, "l2")
    estimate = np.array(run.result.estimate)
    assert estimate.shape == (d,)
    assert np.linalg.norm(estimate) <= 1.0 + 1e-12
    theta = np.eye(d)[0] / 2
    # the bar is the CLT's 1 − β quantile of the error, ‖θ̂ − θ‖² ≈ (V/d)·χ²_d with V = Σ w_i²B_i²
    # (a bound: the trace of Var Y_i is at most E‖Y_i‖² = B_i²); rescaled to the 1 − 1e-4
    # quantile it fails with probability 1e-4 (1.487 bars at d = 6, β = 0.05; measured 0.56)
    tail = math.sqrt(chi2.ppf(1 - 1e-4, d) / chi2.ppf(bar.level, d))
    assert np.linalg.norm(np.array(run.output["raw_estimate"]) - theta) <= bar.half_width * tail
    a = est.weights("duchi", eps, kind)  # type: ignore[arg-type]
    assert np.allclose(run.output["raw_estimate"], a @ run.payloads / a.sum(), rtol=1e-10)
    assert np.allclose(np.linalg.norm(run.payloads, axis=1), duchi_radius(eps, d), rtol=1e-12)


def test_frequency_protocol_full_run() -> None:
    n, k, beta = 3000, 12, 0.05
    eps = _profile(n)
    data, p = _categorical_users(n, k, _rng(6))
    run = Run(FREQ, {"domain_size": k, "beta": beta}, data, eps)
    m = jl_dimension(k, beta, est.effective_sizes(eps)["S_RR"])
    assert run.broadcast == {"m": m, "jl_seed": jl_public_seed(2024), "k": k}
    assert run.plan.public["m"] == m
    bar = run.result.error_bar
    assert bar is not None
    assert (bar.kind, bar.approximate, bar.norm) == ("hoeffding-jl", False, "linf")
    p_hat = np.array(run.result.estimate)
    assert p_hat.shape == (k,)
    # the §4.2(d) bound for users' one uniformly chosen item: its law is p, so the bound applies
    assert np.max(np.abs(p_hat - p)) <= bar.half_width
    projected = np.array(run.result.diagnostics["projected"])
    assert np.all(projected >= 0)
    assert projected.sum() == pytest.approx(1.0)
    assert run.result.diagnostics["m"] == m
    j = run.payloads[:, 0]
    assert np.all((j >= 0) & (j < m) & (j == np.floor(j)))
    bigger = FREQ.plan(
        FREQ.parse_params({"domain_size": k, "m_at_least_s_rr": True}), eps * 40, {}, 1
    )
    assert bigger.public["m"] >= math.ceil(bigger.public["S_RR"])


def test_frequency_item_choice_uses_one_uniform_per_user() -> None:
    """The item comes from the user's own samples; its row is the same alone or in a block."""
    params = FREQ.parse_params({"domain_size": 5})
    eps = np.array([0.5, 1.0, 2.0])
    plan = FREQ.plan(params, eps, {}, 3)
    task = RoundTask.of(plan.rounds[0], FREQ.broadcast(params, plan, 0, []))
    data = UserData(np.array([0, 1, 2, 3, 4, 4]), np.array([2, 3, 1], dtype=np.int64))
    group = np.zeros(3, dtype=np.int64)
    block = FREQ.privatize(params, task, data, eps, group, UserStreams(KEY, [4, 9, 11]))
    alone = FREQ.privatize(
        params,
        task,
        UserData(np.array([2, 3, 4]), np.array([3])),
        eps[1:2],
        group[:1],
        UserStreams(KEY, [9]),
    )
    assert np.array_equal(block[1], alone[0])
    with pytest.raises(ValueError, match="items must lie"):
        FREQ.privatize(
            params,
            task,
            UserData(np.array([7]), np.array([1])),
            eps[:1],
            group[:1],
            UserStreams(KEY, [0]),
        )


# --------------------------------------------------------------------------- plans and options


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.name)
def test_plan_charges_within_budget_and_eps_cap(protocol: Protocol[Any]) -> None:
    raw = {"dimension": 3} if protocol is DUCHI else {"domain_size": 4} if protocol is FREQ else {}
    eps = np.array([0.2, 0.9, 1.0, 3.0, 40.0])
    plan = protocol.plan(protocol.parse_params(raw), eps, {}, 5)
    assert len(plan.rounds) == 1
    assert plan.rounds[0].cohort.tolist() == [0, 1, 2, 3, 4]
    assert np.all(plan.charges() <= eps)
    assert np.array_equal(plan.charges(), eps)
    assert any("ε > 1" in w for w in plan.warnings)
    capped = protocol.plan(protocol.parse_params(raw | {"eps_cap": 1.0}), eps, {}, 5)
    assert capped.charges().tolist() == [0.2, 0.9, 1.0, 1.0, 1.0]
    assert capped.warnings == ()
    assert capped.public["S"] == pytest.approx(0.04 + 0.81 + 3.0)
    for bad in (np.array([1.0, 0.0]), np.array([1.0, math.nan]), np.array([])):
        with pytest.raises(ValueError, match=r"finite and > 0|at least one participant"):
            protocol.plan(protocol.parse_params(raw), bad, {}, 5)


def test_duchi_paper_weights_warn_above_one() -> None:
    plan = DUCHI.plan(DUCHI.parse_params({"dimension": 2}), np.array([1.0, 5.0]), {}, 0)
    assert any("inverse_variance" in w for w in plan.warnings)


def test_eps_cap_runs_clients_at_the_cap() -> None:
    """With eps_cap = 1 a user at ε = 10 reports exactly as a user at ε = 1 (same stream)."""
    n = 50
    data = _binary_users(n, _rng(7), 0.0)
    high = Run(RR, {"eps_cap": 1.0}, data, np.full(n, 10.0))
    one = Run(RR, {}, data, np.full(n, 1.0))
    assert np.array_equal(high.payloads, one.payloads)
    assert high.output["S_RR"] == pytest.approx(one.output["S_RR"])


def test_dropouts_renormalize_and_chunking_does_not_matter() -> None:
    n = 1000
    eps = _profile(n)
    data = _binary_users(n, _rng(8), -0.2)
    keep = _rng(9).random(n) < 0.7
    small = Run(RR, {"clip": False}, data, eps, chunk=37, keep=keep)
    big = Run(RR, {"clip": False}, data, eps, chunk=10_000, keep=keep)
    assert small.output["raw_estimate"] == pytest.approx(big.output["raw_estimate"], rel=1e-12)
    c = rr_debias(eps[keep])
    expected = float(np.sum(small.payloads[keep] / c) / np.sum(1 / c**2))
    assert small.output["raw_estimate"] == pytest.approx(expected, rel=1e-12)
    assert small.result.diagnostics["n_reports"] == int(keep.sum())
    assert small.output["S_RR"] == pytest.approx(est.effective_sizes(eps[keep])["S_RR"])


# --------------------------------------------------------------------------- check()


def _task(protocol: Protocol[Any], raw: dict[str, Any], eps: FloatArray) -> tuple[Any, RoundTask]:
    params = protocol.parse_params(raw)
    plan = protocol.plan(params, eps, {}, 11)
    return params, RoundTask.of(plan.rounds[0], protocol.broadcast(params, plan, 0, []))


def test_check_flags_invalid_payloads() -> None:
    eps = np.array([1.0, 1.0, 1.0, 1.0])
    params, task = _task(RR, {}, eps)
    bits = np.array([1.0, -1.0, 0.5, math.nan])
    assert RR.check(params, task, eps, bits).tolist() == [True, True, False, False]

    params, task = _task(DUCHI, {"dimension": 2}, eps)
    b = float(duchi_radius(1.0, 2))
    vec = np.array([[b, 0.0], [0.0, -b], [b * (1 + 1e-6), 0.0], [1.0, 1.0]])
    assert DUCHI.check(params, task, eps, vec).tolist() == [True, True, False, False]
    with pytest.raises(ValueError, match="shape"):
        DUCHI.check(params, task, eps, np.zeros((4, 3)))

    params, task = _task(FREQ, {"domain_size": 3}, eps)
    m = int(task.broadcast["m"])
    rows = np.array([[0.0, 1.0], [m - 1.0, -1.0], [m, 1.0], [1.5, 1.0]])
    assert FREQ.check(params, task, eps, rows).tolist() == [True, True, False, False]
    assert FREQ.check(params, task, eps[:2], np.array([[0.0, 0.0], [-1.0, 1.0]])).tolist() == [
        False,
        False,
    ]

    params, task = _task(LAPLACE, {}, eps)
    assert LAPLACE.check(params, task, eps, np.array([0.3, -7.0, math.inf, math.nan])).tolist() == [
        True,
        True,
        False,
        False,
    ]


def test_aggregate_refuses_unchecked_reports() -> None:
    eps = np.array([1.0, 1.0])
    params = RR.parse_params({})
    plan = RR.plan(params, eps, {}, 0)
    bcast = RR.broadcast(params, plan, 0, [])
    bad = ReportChunk(np.array([0, 1]), eps, np.zeros(2, np.int64), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="fails the check"):
        RR.aggregate(params, plan, 0, bcast, [bad])
    with pytest.raises(ValueError, match="no reports"):
        RR.aggregate(params, plan, 0, bcast, [])
    with pytest.raises(ValueError, match="single round"):
        RR.broadcast(params, plan, 1, [])
