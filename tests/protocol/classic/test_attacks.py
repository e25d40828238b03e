"""The attacks on the classic family (client/behaviour.py; the reports are the protocols'
``output_attack_reports`` and ``max_gain_reports``, stated in protocol/classic/frequency.py,
"Attacks", and in ClassicMean.output_attack_reports).

Each protocol runs twice on the same population and seed, honest and with a fraction β of
attackers, under the default quorum (every report must be accepted). The honest users' reports
are the same in both runs (their own streams), so the shift of the estimate is exactly
Σ_{i ∈ A} w_i (Y_i^attack − Y_i^honest) / Σ_i w_i over the attackers A: its expectation is
derived from the attack's report and the attackers' own data, its variance from the protocol's
own theory (the oracles' (p, q), the means' variance_terms). Each shift is checked within
z_quantile(1 − 1e-6/m)·σ of it, m the coordinates checked in that run (Bonferroni: a false
failure has probability below 1e-6 per run). Where the attacker's report is random (the sampled
vector means), Var(Y^attack − Y^honest) ≤ (σ_attack + σ_honest)² (Minkowski: both are drawn
from the attacker's one stream, so they need not be independent).

Whether the attack's report is the *best* one is checked by enumerating every admissible report
at small k (brute force over the payload space, filtered by the protocol's own ``check``)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from fedldp.client.behaviour import Behaviour, Roles, attack_payloads
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import SimulationResult, fill_from_population, simulate
from fedldp.protocol.api import Protocol, RoundTask, UserData, z_quantile
from fedldp.protocol.classic import frequency_oracles, hashing, means
from fedldp.protocol.classic import means_theory as mt
from fedldp.protocol.classic import oracles as th
from fedldp.protocol.classic.frequency import ClassicFrequency
from fedldp.protocol.classic.means_base import ClassicMean
from fedldp.protocol.core.streams import UserStreams, stream_key

FREQUENCY = [p for p in frequency_oracles.PROTOCOLS if isinstance(p, ClassicFrequency)]
MEANS = [p for p in means.PROTOCOLS if isinstance(p, ClassicMean)]
BETA = 0.1
K = 16
TARGETS = (3, 5, 11)
ALPHA = 1e-6
"""False-failure probability of each run's check (Bonferroni over its coordinates)."""
KEY = stream_key(26, 6)

CATEGORICAL = PopulationSpec(
    users=4000, distribution="categorical", items=K, zipf=1.0, epsilon_uniform="0.5:3"
)
SCALAR = PopulationSpec(
    users=4000, samples=4, distribution="two-point", mean=0.3, epsilon_mix="0.5:0.5,2:0.5"
)
VECTOR = PopulationSpec(  # k = 2 of d = 4 coordinates at ε = 6, all four at ε = 12
    users=4000,
    samples=4,
    distribution="two-point",
    mean=0.2,
    dimension=4,
    epsilon_mix="6:0.5,12:0.5",
)


def _pair(
    protocol: Protocol[Any], spec: PopulationSpec, behaviour: Behaviour, seed: int = 7
) -> tuple[SimulationResult, SimulationResult, np.ndarray]:
    """Honest and attacked runs (default quorum) and the attackers' slots."""
    pop = build_population(spec, seed)
    params = protocol.parse_params(fill_from_population(protocol, {}, pop))
    honest = simulate(protocol, params, pop, seed)
    attacked = simulate(protocol, params, pop, seed, behaviour=behaviour)
    for count in attacked.result.diagnostics["participation"]["rounds"]:
        assert count["refused"] == 0
        assert count["received"] == count["planned"] == pop.n
    slots = np.arange(pop.n, dtype=np.int64)
    bad = np.flatnonzero(Roles(behaviour, pop.population_seed).attackers(slots))
    assert 0 < bad.size < pop.n
    return honest, attacked, bad


def _task(protocol: Protocol[Any], params: Any, r: SimulationResult) -> RoundTask:
    return RoundTask.of(r.plan.rounds[0], protocol.broadcast(params, r.plan, 0, []))


def _attack(
    protocol: Protocol[Any], r: SimulationResult, behaviour: Behaviour, slots: np.ndarray
) -> np.ndarray:
    """The attackers' reports (from a stream of the test's), which must pass ``check``."""
    task = _task(protocol, r.params, r)
    eps = r.plan.rounds[0].epsilon[slots]
    group = np.zeros(slots.size, dtype=np.int64)
    data = r.population.data(slots)
    y = attack_payloads(
        behaviour, protocol, r.params, task, data, eps, group, UserStreams(KEY, slots)
    )
    assert protocol.check(r.params, task, eps, y).all()
    assert protocol.plausible(r.params, task, eps, group, y).all()
    return y


def _supports(protocol: ClassicFrequency, k: int, eps: np.ndarray, y: np.ndarray) -> np.ndarray:
    """S(Y_i) of each report as a (n, k) indicator matrix (local hashing: H_i(x) = y_i for each
    item x, vectorised over the reports; the others: the support count of each report alone)."""
    if protocol.oracle in ("blh", "olh"):
        z = y.astype(np.int64)
        bits = z.shape[1] - 2
        g = protocol.ranges(eps)  # type: ignore[attr-defined]
        columns = [
            hashing.hash_values(z[:, :bits], z[:, bits], g, np.full(z.shape[0], x)) == z[:, -1]
            for x in range(k)
        ]
        return np.stack(columns, axis=1)
    rows = [
        protocol.support(k, eps[i : i + 1], y[i : i + 1], np.ones(1)) for i in range(y.shape[0])
    ]
    return np.asarray(rows) > 0.5


def _items(pop: Any, slots: np.ndarray) -> np.ndarray:
    data = pop.data(slots)
    assert np.all(data.counts == 1)
    return np.asarray(data.values, dtype=np.int64)


def _band(count: int) -> float:
    return z_quantile(1.0 - ALPHA / count)


# --------------------------------------------------------------------------- frequency oracles


def _output_support(oracle: str, eps: np.ndarray, k: int) -> np.ndarray:
    """The output attack's support per attacker, as frequency.py's "Attacks" states it."""
    n = eps.size
    if oracle == "grr":
        return np.tile(np.arange(k) == k - 1, (n, 1))
    if oracle == "ss":
        return np.arange(k)[None, :] >= (k - th.ss_size(eps, k))[:, None]
    return np.ones((n, k), dtype=bool)  # unary encoding, local hashing, HR: every item


@pytest.mark.parametrize("protocol", FREQUENCY, ids=lambda p: p.name)
def test_output_attack_on_a_frequency_oracle_shifts_it_as_derived(
    protocol: ClassicFrequency,
) -> None:
    """Each attacker's report supports S_att (its top items, all of them where one report can)
    and adds z[x] = (1[x ∈ S_att] − q_i)/(p_i − q_i) where the honest report of item x_i added
    1[x = x_i] in expectation, with variance π(1 − π)/(p_i − q_i)², π = p_i at x_i, else q_i."""
    behaviour = Behaviour(attack="output", attackers=BETA)
    honest, attacked, bad = _pair(protocol, CATEGORICAL, behaviour)
    eps = honest.plan.rounds[0].epsilon
    p, q = th.support_probabilities(protocol.oracle, eps, K)
    w = th.user_weights(p, q, honest.params.weights)  # type: ignore[attr-defined]
    y = _attack(protocol, honest, behaviour, bad)
    s = _supports(protocol, K, eps[bad], y)
    np.testing.assert_array_equal(s, _output_support(protocol.oracle, eps[bad], K))
    gap = (p - q)[bad, None]
    held = _items(honest.population, bad)[:, None] == np.arange(K)[None, :]
    expected = w[bad] @ ((s - q[bad, None]) / gap - held) / w.sum()
    pi = np.where(held, p[bad, None], q[bad, None])
    sd = np.sqrt(w[bad] ** 2 @ (pi * (1 - pi) / gap**2)) / w.sum()
    shift = np.asarray(attacked.estimate) - np.asarray(honest.estimate)
    assert np.all(np.abs(shift - expected) <= _band(K) * sd), (shift - expected) / sd
    assert shift[K - 1] > 0


@pytest.mark.parametrize("protocol", FREQUENCY, ids=lambda p: p.name)
def test_max_gain_on_a_frequency_oracle_raises_the_targets_as_derived(
    protocol: ClassicFrequency,
) -> None:
    """Each attacker's report supports max_gain_support of the r targets, so it adds
    G_i = oracles.max_gain to their total where an honest report added 1[x_i ∈ T] in
    expectation, with variance at most (Σ_t sd_t)², sd_t² = π_t(1 − π_t)/(p_i − q_i)²."""
    behaviour = Behaviour(attack="max-gain", attackers=BETA, targets=TARGETS)
    honest, attacked, bad = _pair(protocol, CATEGORICAL, behaviour)
    eps = honest.plan.rounds[0].epsilon
    r = len(TARGETS)
    p, q = th.support_probabilities(protocol.oracle, eps, K)
    w = th.user_weights(p, q, honest.params.weights)  # type: ignore[attr-defined]
    y = _attack(protocol, honest, behaviour, bad)
    hits = _supports(protocol, K, eps[bad], y)[:, list(TARGETS)].sum(axis=1)
    np.testing.assert_array_equal(hits, th.max_gain_support(protocol.oracle, eps[bad], K, r))
    held = _items(honest.population, bad)[:, None] == np.array(TARGETS)[None, :]
    gain = th.max_gain(protocol.oracle, eps[bad], K, r)
    expected = float(w[bad] @ (gain - held.sum(axis=1))) / w.sum()
    pi = np.where(held, p[bad, None], q[bad, None])
    sd_t = np.sqrt(pi * (1 - pi)) / (p - q)[bad, None]
    sd = math.sqrt(float(w[bad] ** 2 @ sd_t.sum(axis=1) ** 2)) / w.sum()
    shift = np.asarray(attacked.estimate) - np.asarray(honest.estimate)
    total = float(shift[list(TARGETS)].sum())
    assert abs(total - expected) <= _band(1) * sd, (total - expected) / sd
    assert total > 0


def _admissible(protocol: ClassicFrequency, params: Any, task: RoundTask, eps: float) -> Any:
    """Every report the protocol's check admits at ε (brute force over the payload space)."""
    k = params.domain_size
    if protocol.oracle == "grr":
        space: list[Any] = [[x] for x in range(k)]
    elif protocol.oracle == "hr":
        space = [[y] for y in range(th.hadamard_order(k))]
    elif protocol.oracle in ("blh", "olh"):
        g = int(protocol.ranges(np.array([eps]))[0])  # type: ignore[attr-defined]
        space = list(itertools.product(range(g), repeat=task.payload_shape[0]))
    else:
        space = list(itertools.product((0.0, 1.0), repeat=k))
    y = np.asarray(space, dtype=np.float64).reshape(len(space), *task.payload_shape)
    e = np.full(len(space), eps)
    return y[protocol.check(params, task, e, y)]


@pytest.mark.parametrize("protocol", FREQUENCY, ids=lambda p: p.name)
@pytest.mark.parametrize("eps", [0.7, 2.0])
def test_the_attacks_reports_are_the_best_admissible_ones(
    protocol: ClassicFrequency, eps: float
) -> None:
    """Over every admissible report at k = 6: the output report's support is the largest from
    the top item down (lexicographically, so all items where one report supports them all),
    and no report supports more targets than the max-gain report does."""
    k = 6
    params = protocol.parse_params({"domain_size": k})
    plan = protocol.plan(params, np.array([eps]), {}, 0)
    task = RoundTask.of(plan.rounds[0], protocol.broadcast(params, plan, 0, []))
    every = _admissible(protocol, params, task, eps)
    e = np.full(every.shape[0], eps)
    supports = _supports(protocol, k, e, every)
    top_down = supports[:, ::-1].astype(np.int64)
    best = max(tuple(row) for row in top_down)
    one = np.array([eps])
    group = np.zeros(1, dtype=np.int64)
    slots = np.zeros(1, dtype=np.int64)
    data = UserData(np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64))
    for attack, targets in (("output", ()), ("max-gain", (1, 4))):
        behaviour = Behaviour(attack=attack, attackers=0.5, targets=targets)  # type: ignore[arg-type]
        y = attack_payloads(
            behaviour, protocol, params, task, data, one, group, UserStreams(KEY, slots)
        )
        assert protocol.check(params, task, one, y).all()
        s = _supports(protocol, k, one, y)[0]
        if attack == "output":
            assert tuple(s[::-1].astype(np.int64)) == best
        else:
            most = int(supports[:, list(targets)].sum(axis=1).max())
            assert int(s[list(targets)].sum()) == most
            assert most == int(th.max_gain_support(protocol.oracle, one, k, 2)[0])


def test_max_gain_refuses_targets_outside_the_domain() -> None:
    for protocol in FREQUENCY:
        params = protocol.parse_params({"domain_size": 8})
        plan = protocol.plan(params, np.array([1.0]), {}, 0)
        task = RoundTask.of(plan.rounds[0], protocol.broadcast(params, plan, 0, []))
        rng = UserStreams(KEY, np.zeros(1, dtype=np.int64))
        group = np.zeros(1, dtype=np.int64)
        with pytest.raises(ValueError, match=r"target items must lie in \[0, 8\)"):
            protocol.max_gain_reports(params, task, (2, 8), np.array([1.0]), group, rng)


# --------------------------------------------------------------------------- means


@pytest.mark.parametrize("protocol", MEANS, ids=lambda p: p.name)
def test_output_attack_on_a_mean_shifts_it_as_derived(protocol: ClassicMean) -> None:
    """Each attacker reports M_i in every coordinate (the generic report: the scalar
    mechanisms' bound, Duchi's +B), or, sampled with k_i < d, (d/k_i)·M_i on k_i uniform
    coordinates: E[Y_ij] = (k_i/d)(d/k_i)M_i = M_i either way, against its own clipped mean t_ij
    that its honest report was unbiased for, Var ≤ (σ_attack + σ_honest)² with σ_honest² =
    A_i + B_i t_ij² and σ_attack² = R_i²(k_i/d)(1 − k_i/d), R_i the report's bound."""
    spec = VECTOR if protocol.vector else SCALAR
    behaviour = Behaviour(attack="output", attackers=BETA)
    honest, attacked, bad = _pair(protocol, spec, behaviour)
    d = spec.dimension if protocol.vector else 1
    assert d is not None
    eps = honest.plan.rounds[0].epsilon
    sampled = protocol.sampled
    weights = mt.inverse_variance_weights(protocol.mechanism, eps, d, sampled)
    if honest.params.weights == "uniform":  # type: ignore[attr-defined]
        weights = np.ones_like(eps)
    task = _task(protocol, honest.params, honest)
    group = np.zeros(eps.size, dtype=np.int64)
    _, hi = protocol.report_bounds(honest.params, task, eps, group)
    reach = np.asarray(hi).reshape(eps.size, -1)[:, 0]
    k = mt.sampled_coordinates(eps, d) if sampled else np.full(eps.size, d)
    y = _attack(protocol, honest, behaviour, bad).reshape(bad.size, d)
    np.testing.assert_array_equal(np.count_nonzero(y, axis=1), k[bad])
    np.testing.assert_array_equal(y[y != 0], np.broadcast_to(reach[bad, None], y.shape)[y != 0])
    mean = reach * k / d
    data = honest.population.data(bad)
    t = np.clip(data.user_means(np.asarray(data.values, dtype=np.float64)), -1, 1)
    t = t.reshape(bad.size, d)
    a, b = mt.variance_terms(protocol.mechanism, eps[bad], d, sampled)
    sd_honest = np.sqrt(a[:, None] + b[:, None] * t**2)
    frac = (k / d)[bad, None]
    sd_attack = reach[bad, None] * np.sqrt(frac * (1 - frac))
    w = weights[bad]
    expected = w @ (mean[bad, None] - t) / weights.sum()
    sd = np.sqrt(w**2 @ (sd_honest + sd_attack) ** 2) / weights.sum()
    raw = attacked.result.diagnostics["raw_estimate"]
    base = honest.result.diagnostics["raw_estimate"]
    shift = np.atleast_1d(np.asarray(raw) - np.asarray(base))
    assert np.all(np.abs(shift - expected) <= _band(d) * sd), (shift - expected) / sd
    assert np.all(shift > 0)


# --------------------------------------------------------------------------- the hook


@pytest.mark.parametrize(
    "name", ["classic-grr", "classic-oue", "classic-sue", "classic-pm", "classic-duchi-vector"]
)
def test_a_protocol_without_the_hook_gets_the_generic_report(name: str) -> None:
    """Where the upper end of report_bounds is the best report, the protocol leaves the hook
    undefined and the output attacker sends that upper end in every entry."""
    protocol = next(p for p in (*FREQUENCY, *MEANS) if p.name == name)
    if isinstance(protocol, ClassicFrequency):  # not overridden at all
        assert type(protocol).output_attack_reports is Protocol.output_attack_reports
    params, task, eps, group, rng = _small(protocol)
    assert protocol.output_attack_reports(params, task, eps, group, rng) is None
    data = UserData(np.zeros(3), np.ones(3, dtype=np.int64))
    behaviour = Behaviour(attack="output", attackers=0.5)
    y = attack_payloads(behaviour, protocol, params, task, data, eps, group, rng)
    bounds = protocol.report_bounds(params, task, eps, group)
    assert bounds is not None
    np.testing.assert_array_equal(y, np.broadcast_to(bounds[1], y.shape))
    assert protocol.check(params, task, eps, y).all()


def _small(protocol: Protocol[Any]) -> tuple[Any, RoundTask, Any, Any, UserStreams]:
    """Parameters, task, ε's, groups and streams of three users (ε = 0.5, 1, 8)."""
    raw: dict[str, Any] = {"domain_size": 8} if isinstance(protocol, ClassicFrequency) else {}
    if isinstance(protocol, ClassicMean) and protocol.vector:
        raw["dimension"] = 3
    params = protocol.parse_params(raw)
    eps = np.array([0.5, 1.0, 8.0])
    plan = protocol.plan(params, eps, {}, 0)
    task = RoundTask.of(plan.rounds[0], protocol.broadcast(params, plan, 0, []))
    slots = np.arange(3, dtype=np.int64)
    return params, task, eps, np.zeros(3, dtype=np.int64), UserStreams(KEY, slots)


def test_the_hook_is_defined_where_the_generic_report_is_refused_or_not_the_best() -> None:
    """SS and the sampled vector means (whose check refuses the generic report), local hashing
    and HR (whose generic report supports fewer items than another admissible one)."""
    mine = {p.name for p in (*FREQUENCY, *MEANS) if p.output_attack_reports(*_small(p)) is not None}
    assert mine == {
        "classic-ss",
        "classic-blh",
        "classic-olh",
        "classic-hr",
        "classic-laplace-vector",
        "classic-pm-vector",
        "classic-hm-vector",
    }
