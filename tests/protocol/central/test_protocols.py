"""protocol/central/protocols.py and release.py: the central (trusted-server) catalogue protocols
central-wme(-vector) and central-huber(-vector): parameters, plans and the ε rule, the statistic
round, full runs, the noise calibration through the protocol, the public output, and the paper-proxy
safety rails."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fedldp.protocol.central import huber as hb
from fedldp.protocol.central import protocols as ct
from fedldp.protocol.central import release, wme
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.core.base.records import (
    JSON,
    FloatArray,
    IntArray,
    Plan,
    ReportChunk,
    RoundTask,
    UserData,
)
from fedldp.protocol.core.ledger import check_plan_budget
from fedldp.protocol.mechanisms import dp_noise as dn
from tests.protocol.central.test_huber import brute_delta_1d, def5
from tests.protocol.user_level.components_harness import run_protocol

SEED = 2024
BY_NAME = {p.name: p for p in ct.PROTOCOLS}
MU = 0.3


def population(
    rng: np.random.Generator, counts: IntArray, d: int | None
) -> Callable[[IntArray], UserData]:
    """Gaussian samples N(μ, 1) per coordinate; user u holds counts[u] of them."""
    total = int(counts.sum())
    values = MU + rng.standard_normal(total if d is None else (total, d))
    offsets = np.concatenate(([0], np.cumsum(counts)))

    def data(slots: IntArray) -> UserData:
        idx = np.concatenate([np.arange(offsets[s], offsets[s + 1]) for s in slots])
        return UserData(values[idx], counts[slots].astype(np.int64))

    return data


def chunks_of(
    plan: Plan, payloads: FloatArray, size: int, order: IntArray
) -> Iterator[ReportChunk]:
    rp = plan.rounds[0]
    for a in range(0, order.size, size):
        idx = np.sort(order[a : a + size])
        yield ReportChunk(rp.cohort[idx], rp.epsilon[idx], rp.groups()[idx], payloads[idx])


def statistics(
    proto: Protocol[Any], params: Any, plan: Plan, data: Callable[[IntArray], UserData]
) -> FloatArray:
    rp = plan.rounds[0]
    task = RoundTask.of(rp, proto.broadcast(params, plan, 0, []))
    rng = np.random.default_rng(0)  # unused: the statistic is deterministic
    z = proto.privatize(params, task, data(rp.cohort), rp.epsilon, rp.groups(), rng)
    assert proto.check(params, task, rp.epsilon, z).all()
    return z


# --------------------------------------------------------------------------- catalogue, params


def test_catalogue_entries() -> None:
    expected = {
        "central-wme": "scalar",
        "central-wme-vector": "vector",
        "central-huber": "scalar",
        "central-huber-vector": "vector",
    }
    assert {p.name: p.data_kind for p in ct.PROTOCOLS} == expected
    for proto in ct.PROTOCOLS:
        entry = proto.describe()
        assert entry["trust"] == "central"
        assert "min" in entry["heterogeneity"]
        props = entry["parameters"]["properties"]
        for name, prop in props.items():
            assert prop.get("description"), name
            if prop.get("type") in ("number", "integer"):
                low = "minimum" in prop or "exclusiveMinimum" in prop
                high = "maximum" in prop or "exclusiveMaximum" in prop
                assert low, name
                assert high, name


def test_params_validation() -> None:
    wme, huber = BY_NAME["central-wme"], BY_NAME["central-huber"]
    assert (wme.parse_params({}).tau_scale, wme.parse_params({}).histogram_bound) == (2.0, 10.0)
    defaults = huber.parse_params({})
    assert (defaults.delta, defaults.clip_radius, defaults.gamma) == (1e-5, 1.0, 1.0)
    assert (defaults.huber_scale, defaults.calibration) == (4.0, "dp")
    for proto, raw in (
        (wme, {"tau_scale": 0.5, "extra": 1}),
        (wme, {"tau_scale": float("inf")}),
        (wme, {"tau_scale": 0.0}),
        (wme, {"delta": 0.0}),
        (huber, {"huber_scale": -1.0}),
        (huber, {"huber_scale": 1.0, "gamma": 0.5}),
        (huber, {"delta": 0.5}),
        (BY_NAME["central-huber-vector"], {"huber_scale": 1.0}),  # dimension is required
        (BY_NAME["central-huber-vector"], {"huber_scale": 1.0, "dimension": 9}),
        (BY_NAME["central-wme-vector"], {"dimension": 4097}),
    ):
        with pytest.raises(ValidationError):
            proto.parse_params(raw)


def test_paper_proxy_needs_the_unsafe_flag() -> None:
    """paper-proxy is NOT DP: refused without ``unsafe_non_private``; the flag alone is refused."""
    huber = BY_NAME["central-huber"]
    with pytest.raises(ValidationError, match="NOT differentially private"):
        huber.parse_params({"huber_scale": 4.0, "calibration": "paper-proxy"})
    with pytest.raises(ValidationError, match="only goes with"):
        huber.parse_params({"huber_scale": 4.0, "unsafe_non_private": True})
    raw = {"huber_scale": 4.0, "calibration": "paper-proxy", "unsafe_non_private": True}
    assert huber.parse_params(raw).calibration == "paper-proxy"


# --------------------------------------------------------------------------- plan, ε rule


def test_plan_one_statistic_round_and_min_epsilon() -> None:
    rng = np.random.default_rng(1)
    eps = rng.uniform(0.5, 3.0, 500)
    for proto, raw, d in (
        (BY_NAME["central-wme"], {}, 1),
        (BY_NAME["central-huber-vector"], {"huber_scale": 8.0, "dimension": 3}, 3),
    ):
        params = proto.parse_params(raw)
        plan = proto.plan(params, eps, {}, SEED)
        (rp,) = plan.rounds
        assert (rp.name, rp.payload_kind, rp.payload_shape) == ("statistic", "statistic", (d + 1,))
        assert np.array_equal(rp.cohort, np.arange(500))
        assert np.all(rp.epsilon == eps.min())
        assert np.array_equal(check_plan_budget(plan, eps), np.full(500, eps.min()))
        common = {
            "trust": "central", "seed": SEED, "epsilon": eps.min(), "delta": 1e-5, "d": d, "n": 500,
        }  # fmt: skip
        extra: JSON = {} if "wme" in proto.name else {"calibration": "dp"}
        if extra:
            alpha, beta = dn.noise_constants(float(eps.min()), 1e-5, d)
            extra |= {"alpha": alpha, "beta": beta}
        assert plan.public == common | extra
        text = " ".join(plan.warnings)
        assert "central trust" in text
        assert "public" in text  # the seed and the m_i
        assert f"ε = {eps.min():g}" in text
        task = proto.broadcast(params, plan, 0, [])
        assert task["trust"] == "central"
        with pytest.raises(ValueError, match="single round"):
            proto.broadcast(params, plan, 1, [])
    small = BY_NAME["central-wme"].parse_params({"delta": 0.05})
    assert any("1/n" in w for w in BY_NAME["central-wme"].plan(small, np.ones(30), {}, 1).warnings)
    with pytest.raises(ValueError, match="at least 2"):
        BY_NAME["central-wme"].plan(small, np.ones(1), {}, 1)
    with pytest.raises(ValueError, match="finite and > 0"):
        BY_NAME["central-wme"].plan(small, np.array([1.0, 0.0]), {}, 1)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.01, 20.0), min_size=2, max_size=40))
def test_no_plan_charges_more_than_a_budget(eps: list[float]) -> None:
    proto = BY_NAME["central-huber"]
    plan = proto.plan(proto.parse_params({"huber_scale": 1.0}), np.array(eps), {}, 3)
    charges = check_plan_budget(plan, np.array(eps))
    assert np.all(charges == min(eps))


# --------------------------------------------------------------------------- statistic round


def test_privatize_sends_the_user_statistic_and_check_rejects_bad_ones() -> None:
    rng = np.random.default_rng(2)
    counts = rng.integers(1, 9, 50)
    for proto, raw, d in (
        (BY_NAME["central-wme"], {}, None),
        (BY_NAME["central-wme-vector"], {"dimension": 1}, None),  # flat samples, d = 1
        (BY_NAME["central-huber-vector"], {"huber_scale": 1.0, "dimension": 3}, 3),
    ):
        params = proto.parse_params(raw)
        data = population(rng, counts, d)
        plan = proto.plan(params, np.ones(50), {}, SEED)
        z = statistics(proto, params, plan, data)
        block = data(plan.rounds[0].cohort)
        means = block.user_means().reshape(50, -1)
        assert np.array_equal(z[:, :-1], means)
        assert np.array_equal(z[:, -1], counts)
        task = RoundTask.of(plan.rounds[0], proto.broadcast(params, plan, 0, []))
        bad = np.repeat(z[:1], 5, axis=0)
        bad[0, -1] = 2.5  # not an integer count
        bad[1, -1] = 0.0
        bad[2, 0] = np.nan
        bad[3, 0] = 1e13  # beyond the numerical sanity bound
        assert proto.check(params, task, np.ones(5), bad).tolist() == [False] * 4 + [True]
    vec = BY_NAME["central-huber-vector"]
    params = vec.parse_params({"huber_scale": 1.0, "dimension": 2})
    plan = vec.plan(params, np.ones(50), {}, SEED)
    with pytest.raises(ValueError, match="dimension 2"):
        statistics(vec, params, plan, population(rng, counts, 3))


# --------------------------------------------------------------------------- full runs

FULL_RUNS: list[tuple[str, JSON, int | None]] = [
    ("central-wme", {"tau_scale": 6.0}, None),
    ("central-wme-vector", {"tau_scale": 6.0, "dimension": 3}, 3),
    ("central-wme-vector", {"tau_scale": 6.0, "dimension": 3, "hadamard": False}, 3),
    ("central-huber", {"huber_scale": 4.0}, None),
    ("central-huber", {"huber_scale": 4.0, "gamma": 2.0}, None),
    (
        "central-huber",
        {"huber_scale": 4.0, "calibration": "paper-proxy", "unsafe_non_private": True},
        None,
    ),
    ("central-huber-vector", {"huber_scale": 12.0, "dimension": 2}, 2),
]


@pytest.mark.parametrize(("name", "raw", "d"), FULL_RUNS)
@pytest.mark.parametrize("balanced", [True, False])
def test_full_run(name: str, raw: JSON, d: int | None, balanced: bool) -> None:
    """plan → privatize → check → aggregate → finalize, as the server and the simulator run it.

    The result equals the math module's release with the server's stream (exact), is the same for
    any chunking and arrival order, and lies within 5 noise-plus-sampling sd of μ (a false failure
    has probability < 1e-6; Gaussian data, so no clipping or Huber bias in expectation).
    """
    proto = BY_NAME[name]
    params = proto.parse_params(raw)
    rng = np.random.default_rng(3)
    n = 4000
    counts = np.full(n, 4) if balanced else rng.integers(1, 12, n)
    eps = rng.uniform(1.0, 4.0, n)
    data = population(rng, counts, d)
    plan, outs, result = run_protocol(proto, params, eps, data, SEED, rng, chunk=n)
    z = statistics(proto, params, plan, data)
    shuffled = np.random.default_rng(4).permutation(n)
    again = proto.aggregate(params, plan, 0, {}, chunks_of(plan, z, 97, shuffled))
    assert again == outs[0]

    dim = 1 if d is None else d
    means, m = z[:, :dim], z[:, dim]
    server = release.server_rng(SEED, 0)
    eps_min = float(eps.min())
    if name.startswith("central-wme"):
        rel = wme.wme_release(
            means, m / m.sum(), params.tau_scale / math.sqrt(m.mean()), params.histogram_bound,
            eps_min, params.delta,
            server, rotate=raw.get("hadamard", True),
        )  # fmt: skip
        expected = rel.estimate
        noise_var = rel.noise_scale**2 * (2.0 if dim == 1 else 1.0)
        weights = m / m.sum()
        assert outs[0]["noise_scale"] == rel.noise_scale
    else:
        rel_h = hb.hlm_release(
            means, m, epsilon=eps_min, delta=params.delta, scale_a=params.huber_scale,
            r_c=params.clip_radius, rng=server, gamma=params.gamma,
            calibration=params.calibration,
        )  # fmt: skip
        expected, noise_var = rel_h.estimate, rel_h.sigma**2
        weights = rel_h.design.weights
        assert result.diagnostics["users"] == ("balanced" if balanced else "imbalanced")
    estimate = np.atleast_1d(np.asarray(result.estimate, dtype=np.float64))
    assert np.array_equal(estimate, expected)
    assert isinstance(result.estimate, float if d is None else list)
    # per coordinate: the weighted mean of user means has variance Σ w_i²/m_i (σ = 1)
    sampling = float(np.sum(weights**2 / m))
    assert np.all(np.abs(estimate - MU) <= 5 * math.sqrt(noise_var + sampling))

    diag = result.diagnostics
    assert diag["trust"] == "central"
    assert diag["n"] == n
    assert diag["N"] == int(counts.sum())
    assert diag["epsilon"] == eps_min
    assert result.error_bar is None
    private = raw.get("calibration", "dp") == "dp"
    assert diag["differentially_private"] is private
    assert any("NOT DIFFERENTIALLY PRIVATE" in w for w in result.warnings) is not private
    assert len(set(result.warnings)) == len(result.warnings)


def test_dropouts_release_over_the_received_reports() -> None:
    proto = BY_NAME["central-huber"]
    params = proto.parse_params({"huber_scale": 4.0})
    rng = np.random.default_rng(5)
    data = population(rng, np.full(300, 3), None)
    plan = proto.plan(params, np.ones(300), {}, SEED)
    z = statistics(proto, params, plan, data)
    keep = np.arange(0, 300, 2)
    out = proto.aggregate(params, plan, 0, {}, chunks_of(plan, z, 64, keep))
    assert out["n"] == 150
    alone = hb.hlm_release(z[keep, :1], z[keep, 1], epsilon=1.0, delta=1e-5, scale_a=4.0, r_c=1.0,
                           rng=release.server_rng(SEED, 0))  # fmt: skip
    assert out["estimate"] == alone.estimate.tolist()


# --------------------------------------------------------------------------- calibration


def test_huber_noise_scale_from_the_spec_formulas() -> None:
    """The released noise is (S/α)·z with z the server's first standard normal, S = Def. 5 with
    Δ by brute force over every subset, α = the valid d = 1 constant at ε = min ε_i and δ."""
    proto = BY_NAME["central-huber"]
    for trial in range(20):
        rng = np.random.default_rng(100 + trial)
        n, m = 9, 3
        a, delta, r_c = float(rng.uniform(0.5, 4)), float(10 ** -rng.uniform(3, 8)), 0.05
        params = proto.parse_params({"huber_scale": a, "delta": delta, "clip_radius": r_c})
        eps = rng.uniform(0.3, 3.0, n)
        means = rng.standard_t(2, n) * 0.5
        payload = np.asarray(np.column_stack((means, np.full(n, m))), dtype=np.float64)
        plan = proto.plan(params, eps, {}, SEED + trial)
        out = proto.aggregate(params, plan, 0, {}, chunks_of(plan, payload, n, np.arange(n)))
        t = a / math.sqrt(m)
        beta = eps.min() / (2 * math.log(1 / delta))
        alpha = dn.calibrated_alpha(float(eps.min()), delta, beta)
        assert (out["alpha"], out["beta"]) == pytest.approx((alpha, beta), rel=1e-12)
        z_max = float(np.max(np.abs(means - means.mean())))
        s = def5(n, z_max, t, r_c, beta, brute_delta_1d(means, t))
        mu0, _ = hb.huber_minimize(means[:, None], np.full(n, 1 / n), t, 1e-10, 20_000)
        noise = release.server_rng(SEED + trial, 0).standard_normal(1)
        expected = float(hb.clip_ball(mu0, r_c)[0] + s / alpha * noise[0])
        assert out["estimate"][0] == pytest.approx(expected, rel=1e-12, abs=1e-15)
        assert out["connecting_point"] == pytest.approx(t)


def test_wme_noise_scale_from_the_spec_formulas() -> None:
    """WME: Lap(8τ·m_max/(N·ε)) for d = 1; σ = 4τ√d′·(m_max/N)·√(2 ln(1.25/δ))/min(ε/2, 1)
    for d > 1 (d′ = 8 for d = 5 with the rotation, 5 without), ε = min ε_i."""
    rng = np.random.default_rng(6)
    counts = rng.integers(1, 30, 400)
    eps = rng.uniform(0.5, 5.0, 400)
    e = float(eps.min())
    ratio = counts.max() / counts.sum()
    scalar = BY_NAME["central-wme"]
    tau = 0.7
    params = scalar.parse_params({"tau_scale": tau * math.sqrt(counts.mean())})
    plan = scalar.plan(params, eps, {}, SEED)
    payload = np.asarray(np.column_stack((rng.standard_normal(400), counts)), dtype=np.float64)
    out = scalar.aggregate(params, plan, 0, {}, chunks_of(plan, payload, 400, np.arange(400)))
    assert out["noise_scale"] == pytest.approx(8 * tau * ratio / e, rel=1e-12)
    assert out["noise_std"] == pytest.approx(math.sqrt(2) * out["noise_scale"])
    assert out["interval"][1] - out["interval"][0] == pytest.approx(4 * tau)
    vec = BY_NAME["central-wme-vector"]
    for hadamard, dprime in ((True, 8), (False, 5)):
        raw = {"dimension": 5, "hadamard": hadamard, "delta": 1e-6}
        params = vec.parse_params(raw | {"tau_scale": tau * math.sqrt(counts.mean())})
        plan = vec.plan(params, eps, {}, SEED)
        payload = np.asarray(
            np.column_stack((rng.standard_normal((400, 5)), counts)), dtype=np.float64
        )
        out = vec.aggregate(params, plan, 0, {}, chunks_of(plan, payload, 400, np.arange(400)))
        sigma = (
            4 * tau * math.sqrt(dprime) * ratio * math.sqrt(2 * math.log(1.25e6)) / min(e / 2, 1)
        )
        assert out["noise_scale"] == pytest.approx(sigma, rel=1e-12)
        assert out["epsilon_stage1"] == pytest.approx(e / (2 * dprime))


def test_wme_tau_is_raised_to_bound_the_histogram() -> None:
    """τ = tau_scale/√(N/n); a τ so small that stage one would draw more than
    ``MAX_HISTOGRAM_DRAWS`` noisy bins is raised (public quantities only) and the output says so."""
    proto = BY_NAME["central-wme"]
    params = proto.parse_params({"tau_scale": 1e-6})
    plan = proto.plan(params, np.ones(50), {}, SEED)
    payload = np.asarray(np.column_stack((np.zeros(50), np.full(50, 100))), dtype=np.float64)
    out = proto.aggregate(params, plan, 0, {}, chunks_of(plan, payload, 50, np.arange(50)))
    assert out["tau"] == pytest.approx(10.0 / (ct.MAX_HISTOGRAM_DRAWS - 2))
    assert wme.histogram_bins(out["tau"], 10.0) <= ct.MAX_HISTOGRAM_DRAWS
    assert any("raised" in w for w in out["warnings"])
    assert proto.parse_params({"tau_scale": 3.0}).tau(50, 5000) == (0.3, False)


def test_imbalanced_outputs_and_n_condition_warnings() -> None:
    proto = BY_NAME["central-huber"]
    params = proto.parse_params({"huber_scale": 2.0, "gamma": 2.0})
    rng = np.random.default_rng(7)
    counts = rng.integers(1, 20, 200)
    payload = np.asarray(
        np.column_stack((rng.standard_normal(200) / np.sqrt(counts), counts)), dtype=np.float64
    )
    plan = proto.plan(params, np.ones(200), {}, SEED)
    out = proto.aggregate(params, plan, 0, {}, chunks_of(plan, payload, 200, np.arange(200)))
    design = hb.huber_design(counts, 2.0, 2.0)
    assert out["users"] == "imbalanced"
    assert out["k0"] == 200 // 16
    assert out["m_cap"] == pytest.approx(2.0 * counts.sum() / 200)
    assert out["cover_fraction"] == design.theta
    need = hb.imbalanced_n_condition(200, int(counts.sum()), 2.0, out["beta"])
    assert out["n_condition"] == {"required_n_above": need, "holds": False}
    result = proto.finalize(params, plan, [out])
    assert any("does not exceed the theory" in w for w in result.warnings)


def test_reproducible_from_the_study_seed() -> None:
    proto = BY_NAME["central-huber"]
    params = proto.parse_params({"huber_scale": 4.0})
    rng = np.random.default_rng(8)
    payload = np.asarray(
        np.column_stack((rng.standard_normal(100), np.full(100, 2))), dtype=np.float64
    )
    results = []
    for seed in (11, 11, 12):
        plan = proto.plan(params, np.ones(100), {}, seed)
        results.append(
            proto.aggregate(params, plan, 0, {}, chunks_of(plan, payload, 30, np.arange(100)))
        )
    assert results[0] == results[1]
    assert results[0]["estimate"] != results[2]["estimate"]
    first = release.server_rng(11, 0).standard_normal(3)
    key = np.random.SeedSequence(11, spawn_key=(0xCE, 0))
    assert np.array_equal(first, np.random.default_rng(key).standard_normal(3))


# --------------------------------------------------------------------------- public output


def numbers(x: Any) -> Iterator[float]:
    if isinstance(x, dict):
        for v in x.values():
            yield from numbers(v)
    elif isinstance(x, list):
        for v in x:
            yield from numbers(v)
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield float(x)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_public_output_holds_no_participant_value(name: str) -> None:
    """Users whose samples all equal a distinct marker: no marker (a user's mean) appears in the
    round output or the result, as a number or as text. (The m_i are public in the paper.)"""
    proto = BY_NAME[name]
    raw: JSON = {"tau_scale": 1.0} if "wme" in name else {"huber_scale": 2.0}
    if name.endswith("vector"):
        raw["dimension"] = 2
    params = proto.parse_params(raw)
    n = 300
    markers = 0.123456789 + 1e-4 * np.arange(n * 2).reshape(n, 2) * np.sqrt(2)
    counts = np.arange(1, n + 1) % 7 + 1

    def data(slots: IntArray) -> UserData:
        rows = [np.repeat(markers[s : s + 1], counts[s], axis=0) for s in slots]
        values = np.concatenate(rows)
        return UserData(values if name.endswith("vector") else values[:, 0], counts[slots])

    _, outs, result = run_protocol(proto, params, np.ones(n), data, SEED, np.random.default_rng(0))
    public = [outs[0], result.diagnostics, {"estimate": result.estimate}]
    text = json.dumps(public, ensure_ascii=False) + " ".join(result.warnings)
    used = markers if name.endswith("vector") else markers[:, :1]
    seen = np.array(list(numbers(public)))
    for value in used.ravel():
        assert repr(float(value))[:10] not in text
        assert not np.any(np.isclose(seen, value, rtol=1e-12, atol=0))


# --------------------------------------------------------------------------- internal diagnostics


@pytest.mark.parametrize("calibration", ["dp", "paper-proxy"])
@pytest.mark.parametrize("balanced", [True, False])
def test_huber_internals_are_the_release_s_and_stay_out_of_its_output(
    calibration: str, balanced: bool
) -> None:
    """``internal`` (simulation only) reports the S the release drew its noise with (S/α equals
    hlm_release's σ exactly), and the public round output holds none of its values; in dp mode
    the case-(c) share is the largest case-(c) term over S: 2R_c·e^{−β·max(k_last + 1, 1)}, or
    2R_c itself when G(D, 0) is in case (c) (these imbalanced users: Δ̃ = n, no case (b))."""
    proto = BY_NAME["central-huber"]
    raw: JSON = {"huber_scale": 3.0, "calibration": calibration, "gamma": 2.0}
    if calibration == "paper-proxy":
        raw["unsafe_non_private"] = True
    params = proto.parse_params(raw)
    rng = np.random.default_rng(12)
    n = 400
    counts = np.full(n, 5) if balanced else rng.integers(1, 12, n)
    payload = np.asarray(
        np.column_stack((rng.standard_normal(n) / np.sqrt(counts), counts)), dtype=np.float64
    )
    plan = proto.plan(params, np.ones(n), {}, SEED)
    out = proto.aggregate(params, plan, 0, {}, chunks_of(plan, payload, 64, np.arange(n)))
    internal = proto.internal(params, plan, 0, list(chunks_of(plan, payload, 64, np.arange(n))))
    rel = hb.hlm_release(
        payload[:, :1], counts, epsilon=1.0, delta=1e-5, scale_a=3.0, r_c=1.0,
        rng=release.server_rng(SEED, 0), gamma=2.0, calibration=params.calibration,
    )  # fmt: skip
    assert internal["noise_std"] == rel.sigma
    assert internal["sensitivity"] == pytest.approx(rel.sigma * rel.alpha, rel=1e-15)
    assert not set(internal) & set(out)
    public = json.dumps([out, proto.finalize(params, plan, [out]).diagnostics])
    assert repr(internal["noise_std"]) not in public
    if calibration == "paper-proxy":
        assert set(internal) == {"sensitivity", "noise_std"}
        return
    sens = rel.sensitivity
    assert sens is not None
    assert (internal["case"], internal["delta_tilde"], internal["k_last"]) == (
        sens.case, sens.delta_tilde, sens.k_last,
    )  # fmt: skip
    # the worst case itself at k = 0 when G(D, 0) is in case (c), else the first case-(c) k
    term = 2.0 if sens.case == "c" else 2.0 * math.exp(-rel.beta * max(sens.k_last + 1, 1))
    assert internal["case_c_term"] == pytest.approx(term, rel=1e-12)
    assert internal["case_c_share"] == pytest.approx(term / sens.value, rel=1e-12)
    assert 0 < internal["case_c_share"] <= 1


def test_case_c_share_is_one_when_s_is_the_worst_case() -> None:
    """T so small that Δ̃ > n/4 − 1 (no case-(b) index) and Z > T: G(D, 0) = 2R_c, so S is the
    case-(c) term itself (share 1); a T above the spread gives case (a) with Δ̃ = 0, where the
    share is e^{−β·n/4}·2R_c/S."""
    proto = BY_NAME["central-huber"]
    n = 200
    means = np.linspace(-1.0, 1.0, n)
    payload = np.asarray(np.column_stack((means, np.ones(n))), dtype=np.float64)
    for scale, case in ((0.05, "c"), (5.0, "a")):
        params = proto.parse_params({"huber_scale": scale})
        plan = proto.plan(params, np.ones(n), {}, SEED)
        internal = proto.internal(params, plan, 0, list(chunks_of(plan, payload, n, np.arange(n))))
        assert internal["case"] == case
        if case == "c":
            assert internal["k_last"] < 0
            assert internal["case_c_share"] == 1.0
            assert internal["sensitivity"] == 2.0  # 2R_c
        else:
            beta = float(plan.public["beta"])
            assert internal["delta_tilde"] == 0
            term = 2.0 * math.exp(-beta * (n // 4))
            assert internal["case_c_share"] == pytest.approx(term / internal["sensitivity"])


def test_wme_reports_no_internals() -> None:
    proto = BY_NAME["central-wme"]
    assert not proto.internal_diagnostics
    params = proto.parse_params({})
    plan = proto.plan(params, np.ones(10), {}, SEED)
    payload = np.asarray(np.column_stack((np.zeros(10), np.ones(10))), dtype=np.float64)
    assert proto.internal(params, plan, 0, list(chunks_of(plan, payload, 10, np.arange(10)))) == {}
