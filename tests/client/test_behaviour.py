"""Behaviour models (client/behaviour.py) in the in-process simulator: dropouts, late answers,
late joiners and attackers, drawn from the private seed; and the protocols under dropout."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import pytest

from fedldp.client.behaviour import Behaviour, Roles, parse_dropout, parse_late
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import SimulationResult, StudyFailed, fill_from_population, simulate
from fedldp.protocol.api import FloatArray, IntArray, Params, RandomSource, RoundTask
from fedldp.protocol.catalogue import CATALOGUE, get_protocol
from fedldp.protocol.classic.frequency_oracles import GeneralizedRR
from fedldp.protocol.mechanisms.plausibility import LAPLACE_TAIL
from tests.client.test_simulate import CATALOGUE_POPULATIONS, LABELED_POPULATIONS, population_for
from tests.client.toy_protocol import ToyMean

SCALAR = PopulationSpec(users=4000, samples=8, distribution="two-point", mean=0.3, epsilon=1.0)


def run(
    name: str,
    behaviour: Behaviour | None,
    seed: int = 5,
    spec: PopulationSpec = SCALAR,
    raw: dict[str, Any] | None = None,
    **options: Any,
) -> SimulationResult:
    protocol = get_protocol(name)
    pop = build_population(spec, seed)
    params = protocol.parse_params(fill_from_population(protocol, raw or {}, pop))
    return simulate(protocol, params, pop, seed, behaviour=behaviour, **options)


def rounds(r: SimulationResult) -> list[dict[str, Any]]:
    return list(r.result.diagnostics["participation"]["rounds"])


def binomial_ok(count: int, n: int, p: float) -> bool:
    # 5σ of a Binomial(n, p): a false failure has probability < 6e-7
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1e-9


# --------------------------------------------------------------------------- options


def test_options_parse_and_validate() -> None:
    assert parse_dropout("0.2") == (0.2,)
    assert parse_dropout("0.1,0.3") == (0.1, 0.3)
    assert parse_late("0.05:3") == (0.05, 3.0)
    for bad in ("1.5", "x", "0.1,-0.2"):
        with pytest.raises(ValueError, match="dropout"):
            parse_dropout(bad)
    for bad in ("0.1", "2:1", "0.1:-1"):
        with pytest.raises(ValueError, match="late"):
            parse_late(bad)
    with pytest.raises(ValueError, match="together"):
        Behaviour(attack="output")
    with pytest.raises(ValueError, match="targets"):
        Behaviour(attack="max-gain", attackers=0.1)
    assert Behaviour().honest
    assert Behaviour(dropout=(0.1, 0.4)).dropout_at(5) == 0.4


def test_roles_are_per_user_and_fractions_match() -> None:
    roles = Roles(Behaviour(dropout=(0.2,), late_fraction=0.1, late_delay_s=9.0), 1234)
    slots = np.arange(20_000, dtype=np.int64)
    present = [roles.present(slots, k) for k in range(3)]
    # a user who left never comes back, and each round loses 20% of those still there
    assert np.all(present[1] <= present[0])
    assert np.all(present[2] <= present[1])
    assert binomial_ok(int(present[0].sum()), slots.size, 0.8)
    assert binomial_ok(int(present[2].sum()), slots.size, 0.8**3)
    assert binomial_ok(int(roles.late(slots).sum()), slots.size, 0.1)
    assert not roles.too_late(slots, 10.0).any()
    np.testing.assert_array_equal(roles.too_late(slots, 5.0), roles.late(slots))
    # a user's role does not depend on which other users are asked about
    part = slots[7::13]
    np.testing.assert_array_equal(roles.present(part, 2), present[2][7::13])
    other = Roles(Behaviour(dropout=(0.2,)), 1235)
    assert not np.array_equal(other.present(slots, 0), present[0])


# --------------------------------------------------------------------------- dropout


def test_dropout_keeps_the_estimate_unbiased_and_widens_the_error_bar() -> None:
    full = run("baseline-clipped-laplace", None)
    dropped = run("baseline-clipped-laplace", Behaviour(dropout=(0.2,)), quorum=0.5)
    (count,) = rounds(dropped)
    assert count["dropped"] + count["received"] == count["planned"] == 4000
    assert binomial_ok(count["dropped"], 4000, 0.2)
    # equal ε: the predicted variance is that of the mean of the responders
    ratio = count["planned"] / count["received"]
    mse = dropped.result.diagnostics["predicted_mse"]
    assert mse == pytest.approx(full.result.diagnostics["predicted_mse"] * ratio, rel=1e-12)
    # unbiased on the responders (whose data has the population's law): 5σ, p < 6e-7
    assert abs(float(dropped.result.estimate) - 0.3) <= 5 * math.sqrt(mse)  # type: ignore[arg-type]


def test_a_missed_quorum_fails_with_the_servers_reason() -> None:
    with pytest.raises(StudyFailed, match=r"round 0 \(report\) got \d+ of 4000 reports .*0.9"):
        run("baseline-clipped-laplace", Behaviour(dropout=(0.5,)), quorum=0.9)


def test_two_stage_stage_one_dropouts_do_not_reach_stage_two() -> None:
    """user-mean's two stages have disjoint cohorts: who left during stage one is simply not
    there; stage two's cohort drops out on its own (20% per round, compounding)."""
    r = run("user-mean", Behaviour(dropout=(0.2,)), quorum=0.5, spec=SCALAR)
    one, two = rounds(r)
    assert binomial_ok(one["dropped"], one["planned"], 0.2)
    assert binomial_ok(two["dropped"], two["planned"], 1 - 0.8**2)
    assert r.result.diagnostics["n1"] == one["received"]
    assert r.result.diagnostics["n2"] == two["received"]


def test_late_answers_past_the_deadline_are_refused() -> None:
    b = Behaviour(late_fraction=0.1, late_delay_s=5.0)
    (short,) = rounds(run("hetero-mean-laplace", b, round_deadline_s=1.0, quorum=0.5))
    assert binomial_ok(short["late"], 4000, 0.1)
    assert short["late"] + short["received"] == 4000
    (patient,) = rounds(run("hetero-mean-laplace", b, round_deadline_s=10.0))
    assert (patient["late"], patient["received"]) == (0, 4000)


def test_late_joiners_are_not_enrolled() -> None:
    r = run("hetero-mean-laplace", Behaviour(join_late=0.25))
    joined = r.result.diagnostics["participation"]["joined_late"]
    assert binomial_ok(joined, 4000, 0.25)
    assert r.plan.n_participants == 4000 - joined


# --------------------------------------------------------------------------- attacks


def test_output_attack_sends_the_largest_plausible_laplace_value() -> None:
    honest = run("baseline-clipped-laplace", None)
    attacked = run("baseline-clipped-laplace", Behaviour(attack="output", attackers=0.05))
    (count,) = rounds(attacked)
    assert count["received"] == 4000  # at the bound: still plausible
    assert count["refused"] == 0
    bound = 1.0 + 2.0 * LAPLACE_TAIL  # D + (2D/ε)·ln(10^12), D = ε = 1
    attackers = Roles(
        Behaviour(attack="output", attackers=0.05), attacked.population.population_seed
    )
    k = int(attackers.attackers(np.arange(4000, dtype=np.int64)).sum())
    assert binomial_ok(k, 4000, 0.05)
    # equal weights: the attack replaces k honest reports by the bound
    shift = float(attacked.result.estimate) - float(honest.result.estimate)  # type: ignore[arg-type]
    assert shift > 0
    assert shift <= k * (bound + 1.0 + 2.0 * LAPLACE_TAIL) / 4000


def test_output_attack_on_randomized_response_sends_plus_one() -> None:
    spec = PopulationSpec(users=4000, distribution="two-point", mean=-0.5, epsilon=1.0)
    b = Behaviour(attack="output", attackers=0.2)
    honest, attacked = run("hetero-mean-rr", None, spec=spec), run("hetero-mean-rr", b, spec=spec)
    assert float(attacked.result.estimate) > float(honest.result.estimate) + 0.2  # type: ignore[arg-type]


def test_an_attack_that_fails_the_checks_is_refused_and_counted() -> None:
    """Duchi reports lie on a sphere: the coordinate-wise largest report is off it."""
    spec = CATALOGUE_POPULATIONS["vector"]
    r = run("hetero-mean-duchi", Behaviour(attack="output", attackers=0.1), spec=spec, quorum=0.5)
    (count,) = rounds(r)
    assert binomial_ok(count["refused"], count["planned"], 0.1)
    assert count["refused"] + count["received"] == count["planned"]


def test_input_attack_runs_the_honest_randomizer_on_the_worst_input() -> None:
    honest = run("hetero-mean-laplace", None)
    attacked = run("hetero-mean-laplace", Behaviour(attack="input", attackers=0.1))
    assert rounds(attacked)[0]["refused"] == 0
    # the attackers' means clip to hi = 1 instead of two-point ±1 with mean 0.3
    assert float(attacked.result.estimate) > float(honest.result.estimate)  # type: ignore[arg-type]


def test_max_gain_promotes_the_targets() -> None:
    spec = CATALOGUE_POPULATIONS["categorical"]
    b = Behaviour(attack="max-gain", attackers=0.1, targets=(7,))
    honest, attacked = (
        run("hetero-frequency", None, spec=spec),
        run("hetero-frequency", b, spec=spec),
    )
    gain = np.asarray(attacked.result.estimate) - np.asarray(honest.result.estimate)
    assert int(np.argmax(gain)) == 7
    assert rounds(attacked)[0]["refused"] == 0
    with pytest.raises(ValueError, match="max-gain"):
        run("hetero-mean-laplace", b)


class PromotingGRR(GeneralizedRR):
    """classic-grr with the max-gain hook: every fake user reports the first target."""

    name: ClassVar[str] = "classic-grr-promoting"

    def max_gain_reports(
        self,
        params: Params,
        task: RoundTask,
        targets: tuple[int, ...],
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        return np.full(epsilon.shape[0], float(targets[0]))


def test_a_protocols_max_gain_hook_is_the_attack() -> None:
    """The hook replaces "not defined for this protocol": the attackers' reports are the hook's
    (all the target, which GRR's check admits), so the target gains most; a protocol with
    neither the hook nor a built-in attack is still refused, naming the hook."""
    spec = CATALOGUE_POPULATIONS["categorical"]
    protocol = PromotingGRR()
    pop = build_population(spec, 5)
    params = protocol.parse_params(fill_from_population(protocol, {}, pop))
    behaviour = Behaviour(attack="max-gain", attackers=0.1, targets=(7,))
    honest = simulate(protocol, params, pop, 5)
    attacked = simulate(protocol, params, pop, 5, behaviour=behaviour)
    gain = np.asarray(attacked.result.estimate) - np.asarray(honest.result.estimate)
    assert int(np.argmax(gain)) == 7
    assert rounds(attacked)[0]["refused"] == 0
    with pytest.raises(ValueError, match=r"Protocol\.max_gain_reports"):
        run("hetero-mean-laplace", behaviour)


def test_an_output_attack_without_report_bounds_says_what_to_add() -> None:
    with pytest.raises(ValueError, match=r"define toy-mean's report_bounds\(params"):
        simulate(
            ToyMean(),
            ToyMean().parse_params({"samples_per_user": 8}),
            build_population(SCALAR, 5),
            5,
            behaviour=Behaviour(attack="output", attackers=0.1),
        )


def test_max_gain_on_user_frequency_pushes_the_targets_to_the_plausible_ends() -> None:
    """Stage two: every attacker component at the end of its plausible range on the targets'
    side (the Hadamard signs; mid-range where two targets disagree), so each attacker raises
    both targets by far more than an honest user holding one of them can (that is the input
    attack, gain β·(1 − p_t)); every report passes the server's checks."""
    spec = PopulationSpec(users=4000, samples=16, distribution="categorical", items=8, zipf=1.0)
    targets = (3, 6)
    b = Behaviour(attack="max-gain", attackers=0.05, targets=targets)
    honest = run("user-frequency", None, spec=spec)
    attacked = run("user-frequency", b, spec=spec)
    tried = run(
        "user-frequency", Behaviour(attack="input", attackers=0.05, targets=(3,)), spec=spec
    )
    gain = np.asarray(attacked.result.estimate) - np.asarray(honest.result.estimate)
    assert set(np.argsort(gain)[-2:].tolist()) == set(targets)
    input_gain = float(np.asarray(tried.result.estimate)[3] - np.asarray(honest.result.estimate)[3])
    assert min(gain[3], gain[6]) > 10 * max(input_gain, 0.05)
    assert all(r["refused"] == 0 for r in rounds(attacked))
    with pytest.raises(ValueError, match=r"target items must lie in \[0, 8\)"):
        run("user-frequency", Behaviour(attack="max-gain", attackers=0.05, targets=(8,)), spec=spec)


# --------------------------------------------------------------------------- every protocol


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_protocol_closes_rounds_on_a_quorum(name: str) -> None:
    """20% leave before the first round: each protocol aggregates its responders (a protocol
    that cannot fails the test with the server's reason), and the counts add up."""
    protocol = get_protocol(name)
    spec = population_for(protocol)
    try:
        r = run(name, Behaviour(dropout=(0.2, 0.0)), spec=spec, seed=3, quorum=0.5)
    except StudyFailed as exc:
        pytest.fail(f"{name} cannot close a round on a quorum: {exc}")
    for count in rounds(r):
        assert count["dropped"] + count["received"] == count["planned"]
        assert count["received"] < count["planned"] or count["planned"] == 0
    assert np.all(np.isfinite(np.asarray(r.result.estimate, dtype=np.float64)))


def test_histoftree_pairs_only_users_who_sent_both_reports() -> None:
    """The hard two-round case: the same users send a label, then a cell. Who leaves between
    the two rounds helped grow the tree but is not paired in the cell estimates."""
    spec = LABELED_POPULATIONS["histoftree"]
    r = run("histoftree", Behaviour(dropout=(0.1, 0.2)), spec=spec, quorum=0.5)
    labels, cells = rounds(r)
    assert labels["planned"] == cells["planned"] == 3000
    assert binomial_ok(cells["dropped"], 3000, 1 - 0.9 * 0.8)
    d = r.result.diagnostics
    assert d["label_reports"] == labels["received"]
    assert d["cell_reports"] == d["paired"] == cells["received"] < labels["received"]
