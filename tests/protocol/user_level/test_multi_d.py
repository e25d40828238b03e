"""Alg 2 and its variants (protocol/user_level/components.py, protocol/user_level/multi_d.py):
layouts and ledgers (user-level-ldp.md §3.3, §4.2 TP5), full runs on real data, and the §6.2
experiments E4 (ℓ∞ regimes), E5 (Kashin versus ℓ∞) and E6 (Hadamard slope in the alphabet) at CI
size on the spec's fast path (§6.1), each against the §5.3 constant-level predictions."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.base.records import JSON, FloatArray, IntArray, Plan, RoundTask, UserData
from fedldp.protocol.core.ledger import check_plan_budget
from fedldp.protocol.mechanisms.transforms import fwht
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.driver import (
    ComponentProtocol,
    cached_frame,
    kashin_public,
    study_frame,
)
from fedldp.protocol.user_level.layout import Layout, assign, choose_layout
from fedldp.protocol.user_level.multi_d import UserFrequency, UserMeanL2, UserMeanLinf
from tests.protocol.user_level.components_harness import fast_path, run_protocol, slot_data

SEED = 2024


# --------------------------------------------------------------------------- layouts, ledgers


def test_layout_regimes_follow_section_3_3() -> None:
    high = choose_layout(8, 0.5, 10_000)
    assert (high.regime, high.n_groups) == ("high", 8)
    assert np.array_equal(high.counts, np.ones(8))
    assert np.allclose(high.factors, 1.0)

    medium = choose_layout(8, 2.7, 10_000)  # r = ⌊2.7⌋ = 2 coordinates per group at 1-LDP
    assert (medium.regime, medium.n_groups) == ("medium", 4)
    assert np.array_equal(medium.starts, [0, 2, 4, 6])
    assert np.array_equal(medium.counts, [2] * 4)
    assert np.allclose(medium.factors * 2.7, 1.0)  # ε_c = 1 for a user at the reference ε
    assert np.allclose(medium.charge_fractions() * 2.7, 2.0)  # charged ⌊ε⌋ = 2 of 2.7

    uneven = choose_layout(7, 3.0, 10_000)  # G = ⌈7/3⌉ = 3 groups of 3, 3, 1
    assert np.array_equal(uneven.counts, [3, 3, 1])
    full = choose_layout(7, 3.0, 10_000, use_full_budget=True)
    assert np.allclose(full.charge_fractions(), 1.0)  # ε/r_g per component: all of ε

    boundary = 8 * math.log(10_000)  # d ln n
    assert choose_layout(8, boundary * 0.999, 10_000).regime == "medium"
    low = choose_layout(8, boundary, 10_000)
    assert (low.regime, low.n_groups) == ("low", 1)
    assert np.allclose(low.factors, 1 / 8)

    assert Layout.from_json(medium.as_json()).as_json() == medium.as_json()
    with pytest.raises(ValueError, match="malformed"):
        Layout.from_json(medium.as_json() | {"counts": [2, 2, 2, 1]})


def test_assignment_is_a_partition_with_halves_per_group() -> None:
    slots = np.arange(3, 1003, dtype=np.int64)
    a = assign(slots, 7, SEED, 1)
    every = np.concatenate((a.stage_one, a.stage_two))
    assert np.array_equal(np.sort(every), slots)  # disjoint and complete (TP5)
    assert np.all(np.diff(a.stage_one) > 0)
    assert np.all(np.diff(a.stage_two) > 0)
    sizes = np.bincount(a.group_one, minlength=7) + np.bincount(a.group_two, minlength=7)
    assert sizes.max() - sizes.min() <= 1
    assert np.array_equal(np.bincount(a.group_one, minlength=7), sizes // 2)
    with pytest.raises(ValueError, match="cannot fill"):
        assign(slots[:10], 6, SEED)


LEDGER_CASES: list[tuple[str, JSON]] = [
    ("user-mean-linf", {"samples_per_user": 64, "dimension": 5}),
    ("user-mean-linf", {"samples_per_user": 64, "dimension": 5, "use_full_budget": True}),
    ("user-mean-l2", {"samples_per_user": 64, "dimension": 3}),
    ("user-mean-l1", {"samples_per_user": 64, "dimension": 6}),
    ("user-frequency", {"samples_per_user": 64, "domain_size": 5}),
]


@pytest.mark.parametrize(("name", "raw"), LEDGER_CASES)
@given(
    levels=st.lists(st.floats(0.3, 300.0), min_size=1, max_size=4),
    seed=st.integers(0, 2**31 - 1),
)
@settings(max_examples=12, deadline=None)
def test_no_participant_is_charged_more_than_its_epsilon(
    name: str, raw: JSON, levels: list[float], seed: int
) -> None:
    """TP5 for mixtures of up to four ε levels (every regime, non-integer medium ε's)."""
    eps = np.random.default_rng(seed).choice(levels, size=20_000)
    proto = get_protocol(name)
    params = proto.parse_params(raw)
    try:
        plan = proto.plan(params, eps, {}, seed)
    except ValueError as exc:  # an infeasible mixture is refused, never overspent
        if "infeasible" not in str(exc):
            raise
        return
    check_plan_budget(plan, eps)
    one = np.concatenate([rp.cohort for rp in plan.rounds])
    assert np.unique(one).size == one.size  # each participant serves one stage of one group


@pytest.mark.parametrize(
    ("epsilon", "spent"), [(0.5, 0.5), (1.0, 1.0), (2.7, 2.0), (5.5, 5.0), (400.0, 400.0)]
)
def test_equal_epsilons_spend_what_the_paper_spends(epsilon: float, spent: float) -> None:
    """high: one coordinate at ε; medium: ⌊ε⌋ coordinates at 1 (Kashin: 2d = 8 components);
    low: 2d components at ε/(2d)."""
    proto = UserMeanL2()
    params = proto.parse_params({"samples_per_user": 16, "dimension": 4})
    eps = np.full(20_000, epsilon)
    plan = proto.plan(params, eps, {}, SEED)
    task = RoundTask.of(plan.rounds[0], proto.broadcast(params, plan, 0, []))
    layout = Layout.from_json(task.broadcast["layout"])
    # ⌊5.5⌋ = 5 components per group: groups of 5 and 3 of the 8, each at 1-LDP
    assert plan.charges().max() == pytest.approx(spent)
    for rp in plan.rounds:
        assert np.allclose(plan.charges()[rp.cohort], rp.epsilon)
        assert np.allclose(rp.epsilon, epsilon * layout.charge_fractions()[rp.groups()])
    per_component = plan.rounds[0].epsilon / layout.counts[plan.rounds[0].groups()]
    expected = {"high": epsilon, "medium": 1.0, "low": epsilon / layout.n_components}
    assert np.allclose(per_component, expected[layout.regime])


def test_unequal_epsilons_scale_each_users_share() -> None:
    proto = UserMeanLinf()
    params = proto.parse_params({"samples_per_user": 16, "dimension": 6})
    eps = np.where(np.arange(30_000) % 3 == 0, 6.0, 3.0)  # median 3: medium, r = 3, G = 2
    plan = proto.plan(params, eps, {}, SEED)
    assert np.allclose(plan.charges(), eps)  # ⌊3⌋/3 of each ε_i: all of it
    assert plan.public["reference_epsilon"] == 3.0


def test_parameters_are_validated() -> None:
    proto = UserMeanLinf()
    with pytest.raises(ValidationError):
        proto.parse_params({"samples_per_user": 16, "dimension": 0})
    with pytest.raises(ValidationError, match="moment_bound"):
        proto.parse_params({"samples_per_user": 16, "dimension": 2, "heavy_tail": True})
    with pytest.raises(ValidationError, match="omit bound"):
        proto.parse_params(
            {"samples_per_user": 16, "dimension": 2, "heavy_tail": True, "moment_bound": 2.0,
             "bound": 3.0}
        )  # fmt: skip
    with pytest.raises(ValidationError):
        UserFrequency().parse_params({"samples_per_user": 16, "domain_size": 1})


def test_infeasible_plans_are_refused_with_the_weakest_group_named() -> None:
    proto = UserMeanLinf()
    params = proto.parse_params({"samples_per_user": 256, "dimension": 16})
    with pytest.raises(ValueError, match=r"infeasible plan: the weakest of the 16 groups"):
        proto.plan(params, np.full(8000, 0.5), {}, SEED)


# --------------------------------------------------------------------------- real data


def _vectors(rng: np.random.Generator, n: int, m: int, mu: FloatArray) -> UserData:
    d = mu.size
    x = np.where(rng.random((n * m, d)) < (1 + mu) / 2, 1.0, -1.0)
    return UserData(x, np.full(n, m, dtype=np.int64))


def _select(data: UserData, slots: IntArray) -> UserData:
    off = data.offsets
    idx = np.concatenate([np.arange(off[s], off[s + 1]) for s in slots])
    return UserData(data.values[idx], data.counts[slots])


@pytest.mark.parametrize(
    ("name", "extra", "epsilon"),
    [
        ("user-mean-linf", {}, 0.8),
        ("user-mean-linf", {}, 3.0),
        ("user-mean-l2", {"radius": 2.0}, 0.8),
        ("user-mean-l1", {"bound": 4.0}, 8.0),
        ("user-mean-linf", {"heavy_tail": True, "moment_bound": 1.0}, 1.0),
        ("user-mean-l2", {"heavy_tail": True, "moment_bound": 8.0}, 1.0),  # E‖X‖₂³ = 2³
    ],
)
def test_full_runs_on_real_data_land_within_their_error_bar(
    name: str, extra: JSON, epsilon: float
) -> None:
    """Each coordinate's error is within the 95% ℓ2 bar; over five independent protocol runs the
    bar is missed with probability ≤ 5·0.05 only if every approximation held, so a miss of more
    than one is a failure (binomial tail P(≥2 of 5) ≈ 0.023)."""
    rng = np.random.default_rng(SEED)
    mu = np.array([0.3, -0.2, 0.0, 0.5])
    n, m = 12_000, 16
    data = _vectors(rng, n, m, mu)
    proto = get_protocol(name)
    params = proto.parse_params({"samples_per_user": m, "dimension": 4, **extra})
    misses = 0
    for rep in range(5):
        eps = np.full(n, epsilon)
        _, _, result = run_protocol(proto, params, eps, lambda s: _select(data, s), SEED + rep, rng)
        assert result.error_bar is not None
        assert result.error_bar.norm == "l2"
        error = float(np.linalg.norm(np.asarray(result.estimate) - mu))
        misses += error > result.error_bar.half_width
    assert misses <= 1


def test_frequency_full_run_estimates_the_pmf() -> None:
    rng = np.random.default_rng(SEED)
    probs = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    n, m = 16_000, 16
    items = rng.choice(5, size=n * m, p=probs)
    data = UserData(items.astype(np.int64), np.full(n, m, dtype=np.int64))
    proto = UserFrequency()
    params = proto.parse_params({"samples_per_user": m, "domain_size": 5})
    _, _, result = run_protocol(
        proto, params, np.full(n, 2.0), lambda s: _select(data, s), SEED, rng
    )
    assert result.error_bar is not None
    assert np.linalg.norm(np.asarray(result.estimate) - probs) <= result.error_bar.half_width
    assert result.diagnostics["padded_dimension"] == 8


def test_out_of_support_data_is_clipped_not_trusted() -> None:
    """TP6: users holding values of 100·D still send messages inside the Laplace laws of the
    clipped range: the stage-II pre-noise values are exactly the interval ends."""
    proto = UserMeanLinf()
    params = proto.parse_params({"samples_per_user": 4, "dimension": 2})
    eps = np.full(4000, 1.0)
    plan = proto.plan(params, eps, {}, SEED)
    outputs: list[JSON] = [{"lo": [-0.5, -0.5], "hi": [0.5, 0.5]}]
    task = RoundTask.of(plan.rounds[1], proto.broadcast(params, plan, 1, outputs))
    rp = plan.rounds[1]
    wild = UserData(np.full((rp.cohort.size * 4, 2), 100.0), np.full(rp.cohort.size, 4))

    class NoNoise:
        def laplace(self, loc: float, scale: float, size: tuple[int, ...]) -> FloatArray:
            return np.zeros(size)

    z = proto.privatize(params, task, wild, rp.epsilon, rp.groups(), NoNoise())  # type: ignore[arg-type]
    assert np.allclose(z[z != 0], 0.5)


# --------------------------------------------------------------------------- experiments


def _binomial_means(mu: FloatArray, m: int, rng: np.random.Generator) -> Any:
    def source(task: RoundTask, slots: IntArray) -> FloatArray:
        k = rng.binomial(m, (1 + mu) / 2, size=(slots.size, mu.size))
        return np.asarray(2.0 * k / m - 1.0, dtype=np.float64)

    return source


def _predicted_mse(plan: Plan, sigma2: FloatArray, m: int, t: int = 0) -> float:
    """§5.3 (with the exact stage-II counts of the plan): Σ_c (1/n2_c)·[σ_c²/m + 2(c*D)²/(mε_c²)],
    D = 1, from the layout alone (independent of the code under test's own prediction)."""
    inv = plan.public["invocations"][t]
    layout = Layout.from_json(inv["layout"])
    rp = plan.rounds[2 * t + 1]
    eps_c = rp.epsilon / layout.counts[rp.groups()]
    n2 = np.bincount(rp.groups(), minlength=layout.n_groups)[layout.component_group()]
    eps_comp = np.bincount(rp.groups(), eps_c, minlength=layout.n_groups) / np.bincount(
        rp.groups(), minlength=layout.n_groups
    )
    c_star = ts.c_star(plan.n_participants)
    per = (sigma2 / m + 2 * c_star**2 / (m * eps_comp[layout.component_group()] ** 2)) / n2
    return float(per.sum())


@pytest.mark.slow
def test_e4_linf_regimes_match_the_section_5_3_predictions() -> None:
    """E4 at CI size (d = 8, m = 256, R = 24 per point): every point within [0.7, 1.4] of §5.3
    (the spec's tolerance; the mean of R·d squared normal errors has relative sd √(2/(Rd)) ≈ 0.10,
    so the band is ≥ 3σ wide on each side), the staircase MSE(ε)/MSE(1) ≈ ⌈d/⌊ε⌋⌉/d within 25%
    and the flat step ε ∈ [1, 2)."""
    rng = np.random.default_rng(SEED)
    d, m, n, reps = 8, 256, 64_000, 24
    mu = np.linspace(-0.4, 0.4, d)
    proto = fast_path(UserMeanLinf(), _binomial_means(mu, m, rng))
    params = proto.parse_params({"samples_per_user": m, "dimension": d})
    measured: dict[float, float] = {}
    for epsilon in (0.5, 1.0, 1.99, 2.0, 4.0, 8.0, 200.0):
        errors, predicted = [], 0.0
        for rep in range(reps):
            plan, _, result = run_protocol(
                proto, params, np.full(n, epsilon), slot_data, SEED + rep, rng
            )
            predicted = _predicted_mse(plan, 1 - mu**2, m)
            errors.append(float(np.sum((np.asarray(result.estimate) - mu) ** 2)))
        measured[epsilon] = float(np.mean(errors))
        assert 0.7 <= measured[epsilon] / predicted <= 1.4, (epsilon, measured[epsilon], predicted)
    for epsilon in (2.0, 4.0, 8.0):
        stairs = math.ceil(d / math.floor(epsilon)) / d
        assert abs(measured[epsilon] / measured[1.0] / stairs - 1) <= 0.25
    assert abs(measured[1.99] / measured[1.0] - 1) <= 0.25


def _atom_counts(probs: FloatArray, m: int, rng: np.random.Generator, n: int) -> FloatArray:
    return np.asarray(rng.multinomial(m, probs, size=n) / m, dtype=np.float64)


@pytest.mark.slow
def test_e5_kashin_versus_linf_ratio_is_about_2k2_over_d() -> None:
    """E5: one-hot atoms ±e_k (‖X‖∞ = ‖X‖₂ = 1); MSE_Kashin/MSE_ℓ∞ ≈ 2K²/d within ±30% (spec),
    and the Kashin reconstruction of every atom is exact.

    The ±30% is the spec's claim about the true ratio; the estimate's noise is set apart from it.
    One run's squared error is a sum of d roughly normal squares (relative sd ≈ √(2/d) = 0.5 at
    d = 8), so over R runs the log of the ratio of the two MSEs has sd ≈ √(2·2/(dR)): 0.25 at
    R = 8, where ±30% was 1.2 sd and a true ratio inside the band failed one run in four. Here
    R = 24 and the sd is estimated from the runs (delta method on the log ratio of the two
    means of independent runs); the test fails when the estimate lies more than 4 sd outside
    the band: false failure ≤ 3.2e-5 per dimension when the claim holds."""
    rng = np.random.default_rng(SEED)
    m, reps, eps = 256, 24, 0.5
    k_const = 2.5
    for d in (8, 16):
        n = 8000 * d  # 2d groups of 4000: stage-one score 2000·ε² = 500 (§1.5)
        w = rng.dirichlet(np.ones(d))
        b = rng.uniform(0.2, 0.8, d)
        probs = np.concatenate((w * b, w * (1 - b)))
        atoms = np.concatenate((np.eye(d), -np.eye(d)))
        mu = probs @ atoms
        l2 = UserMeanL2()
        l2_params = l2.parse_params({"samples_per_user": m, "dimension": d, "radius": 1.0})
        frame = l2.frame(l2_params, {"frame_seed": SEED})
        assert np.max(np.abs(frame.decode(frame.coefficients(atoms)) - atoms)) < 1e-9

        def kashin(
            task: RoundTask, slots: IntArray, p: FloatArray = probs, x: FloatArray = atoms
        ) -> FloatArray:
            # the coefficients in the frame of this run's study seed (public, in the broadcast)
            frame = cached_frame(x.shape[1], int(task.broadcast["frame_seed"]), k_const)
            return np.asarray(_atom_counts(p, m, rng, slots.size) @ frame.coefficients(x))

        def linf(
            task: RoundTask, slots: IntArray, p: FloatArray = probs, a: FloatArray = atoms
        ) -> FloatArray:
            return np.asarray(_atom_counts(p, m, rng, slots.size) @ a)

        mse, var_log = {}, 0.0
        for label, proto, params in (
            ("kashin", fast_path(l2, kashin), l2_params),
            ("linf", fast_path(UserMeanLinf(), linf), UserMeanLinf().parse_params(
                {"samples_per_user": m, "dimension": d})),
        ):  # fmt: skip
            errs = []
            for rep in range(reps):
                _, _, result = run_protocol(
                    proto, params, np.full(n, eps), slot_data, SEED + rep, rng
                )
                errs.append(float(np.sum((np.asarray(result.estimate) - mu) ** 2)))
            mse[label] = float(np.mean(errs))
            var_log += float(np.var(errs, ddof=1)) / (reps * mse[label] ** 2)
        log_ratio = math.log(mse["kashin"] / mse["linf"] / (2 * k_const**2 / d))
        outside = max(0.0, abs(log_ratio) - math.log(1.30))
        assert outside <= 4 * math.sqrt(var_log), (d, mse, math.exp(log_ratio), var_log)


@pytest.mark.slow
def test_e6_hadamard_error_grows_linearly_in_the_alphabet() -> None:
    """E6: Zipf(1.1) pmfs, squared ℓ2 error slope in A of +1 ± 0.25 (the raw one-hot through ℓ∞
    Alg 2 would give +2)."""
    rng = np.random.default_rng(SEED)
    m, n, reps, eps = 256, 64_000, 10, 0.5
    sizes = (4, 8, 16)
    errors = []
    for a in sizes:
        zipf = 1.0 / np.arange(1, a + 1) ** 1.1
        probs: FloatArray = np.asarray(zipf / zipf.sum(), dtype=np.float64)

        def source(task: RoundTask, slots: IntArray, probs: FloatArray = probs) -> FloatArray:
            counts = _atom_counts(probs, m, rng, slots.size)
            return np.asarray(fwht(counts) / math.sqrt(counts.shape[1]))

        proto = fast_path(UserFrequency(), source)
        params = proto.parse_params({"samples_per_user": m, "domain_size": a})
        errs = []
        for rep in range(reps):
            _, _, result = run_protocol(proto, params, np.full(n, eps), slot_data, rep, rng)
            errs.append(float(np.sum((np.asarray(result.estimate) - probs) ** 2)))
        errors.append(np.mean(errs))
    slope = np.polyfit(np.log(sizes), np.log(errors), 1)[0]
    assert abs(slope - 1.0) <= 0.25, (slope, errors)


def test_component_protocols_are_in_the_catalogue() -> None:
    for name in ("user-mean-linf", "user-mean-l2", "user-mean-l1", "user-frequency"):
        proto = get_protocol(name)
        assert isinstance(proto, ComponentProtocol)
        entry = proto.describe()
        assert entry["trust"] == "local"
        assert "samples_per_user" in entry["parameters"]["required"]


def test_a_client_that_rebuilds_a_different_kashin_frame_refuses_to_report() -> None:
    public = kashin_public(4, SEED, 2.5)
    assert study_frame(4, 2.5, public).observed == public["kashin_observed"]
    with pytest.raises(ValueError, match="different Kashin frame"):
        study_frame(4, 2.5, public | {"kashin_observed": public["kashin_observed"] + 1e-9})
