"""The in-process simulator (client/simulate.py), on a toy protocol and on the catalogue."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from fedldp.client.population.build import Population, PopulationSpec, build_population
from fedldp.client.seeds import derive_seeds
from fedldp.client.simulate import SimulationError, fill_from_population, simulate
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.core.base.records import UserData
from fedldp.protocol.diagnostics import DIAGNOSTICS
from tests.client.toy_protocol import RejectingToy, ToyMean

TOY = ToyMean()
SPEC = PopulationSpec(
    users=10_000, samples=16, distribution="two-point", mean=0.3, epsilon_mix="0.5:0.5,2:0.5"
)

# Chunked sums add the same numbers in a different grouping, so results may differ in the last
# bits: a few ulps per addition over ~10^4 terms bounds the relative difference by ~1e-12.
REL = 1e-12


def run(
    protocol: Protocol[Any], raw: dict[str, Any], seed: int, chunk: int, spec: PopulationSpec = SPEC
) -> Any:
    pop = build_population(spec, seed)
    params = protocol.parse_params(fill_from_population(protocol, raw, pop))
    return simulate(protocol, params, pop, seed, chunk_size=chunk)


@pytest.mark.parametrize("rounds", [1, 3])
def test_chunk_size_does_not_change_the_result(rounds: int) -> None:
    results = [run(TOY, {"rounds": rounds}, 7, c) for c in (1000, 4096, SPEC.users or 0)]
    ref = results[0].result.estimate
    for r in results[1:]:
        assert r.result.estimate == pytest.approx(ref, rel=REL, abs=1e-15)
        assert r.result.diagnostics == results[0].result.diagnostics


def test_same_seed_same_result_other_seed_other_result() -> None:
    a, b, c = (run(TOY, {}, s, 4096).result.estimate for s in (3, 3, 4))
    assert a == b
    assert a != c


def test_toy_estimate_is_within_theory() -> None:
    # Var = Σ 8B²/ε_i²/n² + sampling variance of the user means (D² − μ²)/(nm); 5σ: p ≈ 6e-7.
    r = run(TOY, {}, 12, 8192)
    eps = r.population.epsilon
    var = float(np.sum(8.0 / eps**2)) / eps.size**2 + (1 - 0.09) / (eps.size * 16)
    assert abs(r.result.estimate - 0.3) <= 5 * math.sqrt(var)


def test_plan_budget_is_respected_and_reported() -> None:
    r = run(TOY, {}, 1, 4096)
    np.testing.assert_array_equal(r.charges, r.population.epsilon)
    spent = r.to_dict()["epsilon_spent"]
    assert spent["max"] == 2.0
    assert spent["median"] == 1.25
    assert spent["charged"] == 10_000
    with pytest.raises(ValueError, match="beyond its declared"):
        run(TOY, {"overspend": 1.5}, 1, 4096)


def test_data_kind_mismatch_is_a_clear_error() -> None:
    spec = PopulationSpec(users=100, dimension=2)
    with pytest.raises(ValueError, match="takes scalar data, but the population holds vector"):
        run(TOY, {}, 0, 100, spec)


def test_population_must_belong_to_the_seed() -> None:
    pop = build_population(SPEC, 1)
    params = TOY.parse_params({"samples_per_user": 16})
    with pytest.raises(ValueError, match="built for seed 1, not 2"):
        simulate(TOY, params, pop, 2)


def test_rejected_reports_are_a_client_bug() -> None:
    with pytest.raises(SimulationError, match="fails the server's check"):
        run(RejectingToy(), {}, 0, 4096)


def test_samples_per_user_is_filled_from_the_population() -> None:
    pop = build_population(PopulationSpec(users=100, imbalance=1.5, total_samples=5000), 0)
    m = pop.metadata["samples"]
    assert m.min() < m.max()
    assert fill_from_population(TOY, {}, pop)["samples_per_user"] == int(m.min())
    assert fill_from_population(TOY, {"samples_per_user": 3}, pop)["samples_per_user"] == 3


class SpyPopulation(Population):
    """Records the block sizes the simulator asks for."""

    blocks: list[int]

    def data(self, slots: NDArray[Any]) -> UserData:
        self.blocks.append(int(np.asarray(slots).size))
        return super().data(slots)


def test_memory_stays_flat_and_progress_is_reported() -> None:
    pop = build_population(SPEC, 5)
    spy = SpyPopulation(**{k: getattr(pop, k) for k in pop.__dataclass_fields__})
    spy.blocks = []
    seen: list[tuple[int, int]] = []
    params = TOY.parse_params({"samples_per_user": 16, "rounds": 2})
    simulate(TOY, params, spy, 5, chunk_size=3000, progress=lambda d, t: seen.append((d, t)))
    assert max(spy.blocks) <= 3000
    assert sum(spy.blocks) == 10_000
    assert [d for d, _ in seen] == list(np.cumsum(spy.blocks))
    assert all(t == 10_000 for _, t in seen)


def test_as_json_shape() -> None:
    out = run(TOY, {}, 2, 4096).to_dict()
    for key in (
        "protocol",
        "params",
        "n",
        "seed",
        "estimate",
        "truth",
        "error",
        "error_bar",
        "epsilon_spent",
        "diagnostics",
        "warnings",
        "elapsed_s",
        "population",
    ):
        assert key in out
    assert out["error"] == pytest.approx(abs(out["estimate"] - 0.3), rel=1e-12)
    assert out["params"]["samples_per_user"] == 16
    assert out["seed"] == 2
    assert str(derive_seeds(2)[1]) not in json.dumps(out)  # the private seed never appears


def test_the_result_names_its_parts_as_to_dict_does() -> None:
    """``estimate``, ``truth`` and ``diagnostics`` read the run's result directly (a protocol's
    diagnostics were reachable only as ``result.diagnostics``)."""
    r = run(TOY, {}, 2, 4096)
    out = r.to_dict()
    assert (r.estimate, r.truth) == (out["estimate"], out["truth"])
    assert r.diagnostics is r.result.diagnostics
    assert r.diagnostics
    assert set(r.diagnostics) == set(out["diagnostics"])


def test_chunk_size_must_be_positive() -> None:
    pop = build_population(SPEC, 0)
    with pytest.raises(ValueError, match="chunk_size"):
        simulate(TOY, TOY.parse_params({"samples_per_user": 1}), pop, 0, chunk_size=0)


# --------------------------------------------------------------------------- the real catalogue

CATALOGUE_POPULATIONS = {
    "scalar": PopulationSpec(
        users=4000, samples=16, distribution="two-point", mean=0.3, epsilon_mix="0.5:0.5,2:0.5"
    ),
    "vector": PopulationSpec(
        users=4000, samples=4, distribution="two-point", mean=0.2, dimension=4, epsilon=1.0
    ),
    "categorical": PopulationSpec(
        users=4000, distribution="categorical", items=10, zipf=1.0, epsilon_uniform="0.5:2"
    ),
}


LABELED_POPULATIONS = {  # the labeled law each learning protocol is made for
    "user-sgd": PopulationSpec(users=4000, samples=16, distribution="sparse-linear", epsilon=1.0),
    "user-classify": PopulationSpec(
        users=4000, samples=16, distribution="binned-classification", epsilon=1.0
    ),
    "user-regress": PopulationSpec(
        users=4000, samples=16, distribution="binned-regression", epsilon=1.0
    ),
    **{  # semi-feature LDP: one sample and a privacy mask per user
        name: PopulationSpec(users=3000, distribution="sin-sum", epsilon_mix="1:0.5,4:0.5")
        for name in ("histoftree", "histoftree-tuned", "hist-ldp", "pardt", "labeldt", "krr-tree")
    },
}


RANGED_POPULATIONS = {  # a law inside the data range each protocol declaring one clips to
    "memo-1bitmean": PopulationSpec(
        users=4000,
        samples=16,
        distribution="uniform",
        low=0.0,
        high=1.0,
        epsilon_mix="0.5:0.5,2:0.5",
    ),
}


def population_for(protocol: Any) -> PopulationSpec:
    """The population a catalogue protocol is checked on: its own law when it needs one."""
    name = protocol.name
    own = LABELED_POPULATIONS.get(name) or RANGED_POPULATIONS.get(name)
    return own or CATALOGUE_POPULATIONS[protocol.data_kind]


def catalogue_names() -> list[str]:
    from fedldp.protocol.catalogue import CATALOGUE

    return sorted(CATALOGUE)


@pytest.mark.parametrize("name", catalogue_names())
def test_catalogue_protocols_are_chunk_invariant_and_deterministic(name: str) -> None:
    from fedldp.protocol.catalogue import get_protocol

    protocol = get_protocol(name)
    spec = population_for(protocol)
    results = [run(protocol, {}, 21, c, spec) for c in (1000, 4096, spec.users or 0)]
    again = run(protocol, {}, 21, 1000, spec)
    other = run(protocol, {}, 22, 1000, spec)
    ref = np.asarray(results[0].result.estimate, dtype=np.float64)
    assert np.array_equal(np.asarray(again.result.estimate), ref)
    assert not np.array_equal(np.asarray(other.result.estimate), ref)
    for r in results[1:]:
        np.testing.assert_allclose(np.asarray(r.result.estimate), ref, rtol=REL, atol=1e-15)
    for r in results:
        assert np.all(r.charges <= r.population.epsilon + 1e-12)
        assert json.dumps(r.to_dict(), allow_nan=False)
        # honest reports pass the plausibility bounds (each entry fails with p <= 1e-12)
        for count in r.result.diagnostics["participation"]["rounds"]:
            assert count["refused"] == count["late"] == count["dropped"] == 0
            assert count["received"] == count["planned"]
    undescribed = set(results[0].result.diagnostics) - set(DIAGNOSTICS)
    assert not undescribed, f"add these to fedldp.protocol.diagnostics: {sorted(undescribed)}"


def test_each_warning_is_shown_once() -> None:
    from fedldp.protocol.catalogue import get_protocol

    protocol = get_protocol("hetero-frequency")  # warns about ε > 1 in its plan and its result
    spec = PopulationSpec(users=3000, distribution="categorical", items=5, epsilon=2.0)
    out = run(protocol, {}, 1, 4096, spec)
    assert any("ε > 1" in w for w in out.warnings)
    assert len(out.warnings) == len(set(out.warnings))


@pytest.mark.parametrize(
    ("spec", "radius"),
    [
        (PopulationSpec(users=10, distribution="two-point", bound=0.5, dimension=4), 1.0),
        (PopulationSpec(users=10, distribution="uniform", low=-3, high=1, dimension=9), 9.0),
        (PopulationSpec(users=10, distribution="uniform", ball="l2", bound=2, dimension=3), 2.0),
        (PopulationSpec(users=10, distribution="gaussian", dimension=3), None),  # unbounded
    ],
)
def test_the_population_fills_what_it_determines(
    spec: PopulationSpec, radius: float | None
) -> None:
    """Duchi's mechanism projects onto the ball of ``radius``: a box population must not be
    cut down to the unit ball (that would bias the estimate), so its support radius is used."""
    from fedldp.protocol.catalogue import get_protocol

    protocol = get_protocol("hetero-mean-duchi")
    pop = build_population(spec, 0)
    filled = fill_from_population(protocol, {}, pop)
    assert filled["dimension"] == spec.dimension
    assert filled.get("radius") == (pytest.approx(radius) if radius is not None else None)
    assert fill_from_population(protocol, {"radius": 7.0}, pop)["radius"] == 7.0  # given wins


def test_internal_diagnostics_are_the_simulators_alone() -> None:
    """A protocol's ``internal`` values (central Huber: its smooth sensitivity) reach the
    simulated result's diagnostics under ``internal``, never the public round outputs; a protocol
    without them adds no key (central-wme's output is unchanged)."""
    from fedldp.protocol.catalogue import get_protocol

    spec = PopulationSpec(users=500, samples=4, distribution="gaussian")
    huber = run(get_protocol("central-huber"), {}, 3, 128, spec)
    internal = huber.result.diagnostics["internal"]
    assert {"sensitivity", "noise_std", "case_c_share", "delta_tilde"} <= set(internal)
    assert all("internal" not in out and "sensitivity" not in out for out in huber.outputs)
    assert 0 < internal["case_c_share"] <= 1
    wme = run(get_protocol("central-wme"), {}, 3, 128, spec)
    assert "internal" not in wme.result.diagnostics


def test_huber_gamma_is_the_imbalanced_generators() -> None:
    """Imbalanced counts s_i = ⌈N (i/n)^γ⌉ satisfy the huber spec's Assumption 3 with that γ
    (§6.3): central-huber's gamma (m_c = γN/n, k₀ = ⌊n/(8γ)⌋) defaults to it; a given gamma
    wins, balanced users and γ < 1 fill nothing."""
    from fedldp.protocol.catalogue import get_protocol

    huber = get_protocol("central-huber")
    pop = build_population(
        PopulationSpec(users=200, imbalance=3, total_samples=5000, distribution="gaussian"), 0
    )
    assert fill_from_population(huber, {}, pop)["gamma"] == 3
    assert fill_from_population(huber, {"gamma": 1.5}, pop)["gamma"] == 1.5
    out = simulate(huber, huber.parse_params(fill_from_population(huber, {}, pop)), pop, 0)
    assert out.result.diagnostics["gamma"] == 3
    assert out.result.diagnostics["k0"] == pop.n // 24
    flat = build_population(PopulationSpec(users=200, samples=3, distribution="gaussian"), 0)
    assert "gamma" not in fill_from_population(huber, {}, flat)
    low = build_population(
        PopulationSpec(users=200, imbalance=0.5, total_samples=5000, distribution="gaussian"), 0
    )
    assert "gamma" not in fill_from_population(huber, {}, low)
