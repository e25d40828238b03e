"""Semi-feature LDP (protocol/semi_feature/histoftree.py, histoftree_base.py, hist_ldp.py,
tree_baselines.py, partition.py, trees.py; spec public-features-ldp.md): the §6.1 unit tests with
the spec's worked values, exact privacy of the label and cell mechanisms, the ledger, the server's
V_i check, and the §6.2 E1/E1b acceptance experiments at CI size (slow)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedldp.client.population.features import (
    SemiFeaturePopulation,
    aligned_mask,
    synthetic_population,
    tail_mask,
)
from fedldp.client.seeds import round_key
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.protocol import Params, Protocol
from fedldp.protocol.core.base.records import (
    JSON,
    FloatArray,
    Plan,
    ReportChunk,
    Result,
    RoundTask,
    UserData,
)
from fedldp.protocol.core.ledger import TOLERANCE, check_plan_budget
from fedldp.protocol.core.streams import UserStreams, stream_key
from fedldp.protocol.mechanisms.randomizers import (
    laplace_log_density,
    rr_debias,
    rr_keep_probability,
)
from fedldp.protocol.semi_feature import hist_ldp, histoftree, tree_baselines
from fedldp.protocol.semi_feature.common import enrollment, split_features
from fedldp.protocol.semi_feature.hist_ldp import HistLdp
from fedldp.protocol.semi_feature.histoftree import HistOfTree, HistOfTreeTuned
from fedldp.protocol.semi_feature.partition import (
    Partition,
    feature_order,
    grr_debias,
    grr_keep_probability,
    grr_offset,
    grr_other_probability,
    grr_report,
    rule15_objective,
    tuned_structure,
    unary_rr_report,
)
from fedldp.protocol.semi_feature.tree_baselines import KrrTree, LabelDt, ParDt, krr_budgets
from fedldp.protocol.semi_feature.trees import Tree, cart_tree, max_edge_tree, regression_tree

SEED = 20
K = 5.0  # k·σ: a two-sided normal tail beyond 5σ has probability 5.7e-7 per check
HOT, TUNED, HIST = HistOfTree(), HistOfTreeTuned(), HistLdp()


def run_semi(
    proto: Protocol[Any],
    params: Params,
    pop: SemiFeaturePopulation,
    seed: int,
    chunk: int = 4096,
    drop: dict[int, np.ndarray[Any, Any]] | None = None,
) -> tuple[Plan, list[JSON], Result]:
    """plan → broadcast → privatize → check → check_members (and ``check_cells``) → aggregate
    in chunks → finalize, with the simulator's streams (``round_key``); ``drop[k]`` lists slots
    whose round-k report never arrives."""
    plan = proto.plan(params, pop.epsilon, pop.metadata, seed)
    check_plan_budget(plan, pop.epsilon)
    outputs: list[JSON] = []
    for rp in plan.rounds:
        broadcast = proto.broadcast(params, plan, rp.index, outputs)
        task = RoundTask.of(rp, broadcast)
        keep = ~np.isin(rp.cohort, (drop or {}).get(rp.index, []))
        cohort, eps, group = rp.cohort[keep], rp.epsilon[keep], rp.groups()[keep]

        def chunks(
            task: RoundTask = task, cohort: Any = cohort, eps: Any = eps, group: Any = group
        ) -> Iterator[ReportChunk]:
            for a in range(0, cohort.size, chunk):
                b = slice(a, a + chunk)
                rng = UserStreams(round_key(pop.population_seed, task.round), cohort[b])
                z = proto.privatize(params, task, pop.data(cohort[b]), eps[b], group[b], rng)
                assert z.shape == (cohort[b].size, *task.payload_shape)
                assert proto.check(params, task, eps[b], z).all()
                assert proto.check_members(params, plan, task, cohort[b], z).all()
                if task.round == 1 and isinstance(proto, HistOfTree | HistOfTreeTuned):
                    hot: Any = proto  # the call the server will make (check_cells)
                    assert hot.check_cells(params, plan, task.broadcast, cohort[b], z).all()
                yield ReportChunk(cohort[b], eps[b], group[b], z)

        outputs.append(proto.aggregate(params, plan, rp.index, broadcast, chunks()))
    return plan, outputs, proto.finalize(params, plan, outputs)


def excess(proto: Protocol[Any], params: Params, pop: SemiFeaturePopulation, seed: int) -> JSON:
    plan, outputs, _ = run_semi(proto, params, pop, seed, chunk=pop.n)
    assert hasattr(proto, "predict")
    return dict(pop.evaluate(proto.predict(params, plan, outputs, pop.test_features)))


@cache
def small_pop(mask: str = "aligned", private: int = 2, eps: float = 4.0) -> SemiFeaturePopulation:
    return synthetic_population(2000, SEED, eps, mask=mask, private=private, test_size=500)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- catalogue, layout


def test_protocols_are_named_described_and_predict() -> None:
    protocols = (*histoftree.PROTOCOLS, *hist_ldp.PROTOCOLS, *tree_baselines.PROTOCOLS)
    names = [p.name for p in protocols]
    assert names == ["histoftree", "histoftree-tuned", "hist-ldp", "pardt", "labeldt", "krr-tree"]
    assert all(CATALOGUE[name] is proto for name, proto in zip(names, protocols, strict=True))
    for proto in protocols:
        entry = proto.describe()
        assert entry["data_kind"] == "labeled"
        assert entry["heterogeneity"]
        params = proto.parse_params({"dimension": 5, "label_low": -1, "label_high": 2})
        assert proto.feature_dimension(params) == 5  # type: ignore[attr-defined]


def test_semi_feature_layout_and_enrollment_checks() -> None:
    x, w = split_features([[0.2, 1.3, 1.0, 0.0]], 2)
    assert x.tolist() == [[0.2, 1.0]]
    assert w.tolist() == [[True, False]]
    with pytest.raises(ValueError, match="2d = 4"):
        split_features(np.zeros((1, 3)), 2)
    with pytest.raises(ValueError, match=r"0 .public. or 1"):
        split_features([[0.2, 0.3, 0.5, 0.0]], 2)
    params = HOT.parse_params({"dimension": 2, "label_low": 0, "label_high": 1})
    with pytest.raises(ValueError, match="'mask' and 'public'"):
        HOT.plan(params, np.ones(3), {}, SEED)
    mask, public = np.array([[1.0, 0.0]] * 3), np.array([[0.7, 0.4]] * 3)
    w, shown, warnings = enrollment({"mask": mask, "public": public}, 3, 2)
    assert shown[:, 0].tolist() == [0.0] * 3
    assert "ignored" in warnings[0]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        enrollment({"mask": mask, "public": public + np.array([0.0, 0.7])}, 3, 2)
    with pytest.raises(ValueError, match="label_high"):
        HOT.parse_params({"dimension": 2, "label_low": 1, "label_high": 1})


# --------------------------------------------------------------------------- §6.1.1 label


def _round_reports(
    plan: Plan, params: Any, outputs: list[JSON], k: int, features: Any, label: float, n: int
) -> FloatArray:
    """``n`` round-``k`` reports of HistOfTree's own client step (``privatize``, with the task
    clients receive, at the ε the plan charges slot 0 in that round) for a user holding the
    semi-feature row ``features`` (features, then mask) and ``label``; own stream per report."""
    rp = plan.rounds[k]
    task = RoundTask.of(rp, HOT.client_broadcast(HOT.broadcast(params, plan, k, outputs)))
    data = UserData(np.tile(features, (n, 1)), np.ones(n, dtype=np.int64), np.full(n, label))
    streams = UserStreams(stream_key(SEED, 0x1AB, k, int(1000 * label) % 997), np.arange(n))
    eps = np.full(n, rp.epsilon[0])
    out = HOT.privatize(params, task, data, eps, np.zeros(n, dtype=np.int64), streams)
    return np.asarray(out, dtype=np.float64)


def test_label_round_noise_is_the_theory_and_its_ratio_is_rho_epsilon() -> None:
    """The label round's own client step (round 0 at the ε the plan charges, ρε): its noise
    around the clipped, centred label has the Laplace scale b = 2M/(ρε) (|Lap(b)| is Exp(b),
    mean b and sd b: the measured mean within 5 SE, false failure 5.7e-7 per check, so half or
    twice the noise fails); at that scale the exact log-density ratio between the extreme labels
    ±M is at most ρε on a grid of outputs and reaches it; a label above y_hi is clipped to M
    before the noise."""
    params = HOT.parse_params({"dimension": 1, "label_low": -3.0, "label_high": 5.0, "rho": 0.3})
    eps, big_m, n = 2.0, params.half_range, 100_000
    metadata = {"mask": np.ones((2, 1)), "public": np.zeros((2, 1))}
    plan = HOT.plan(params, np.full(2, eps), metadata, SEED)
    assert plan.rounds[0].epsilon[0] == pytest.approx(params.rho * eps)
    scale = (params.label_high - params.label_low) / (params.rho * eps)
    assert scale == pytest.approx(2 * big_m / (params.rho * eps))
    for y, centred in ((params.label_high, big_m), (params.label_low, -big_m), (40.0, big_m)):
        noise = _round_reports(plan, params, [], 0, [0.5, 1.0], y, n) - centred
        assert abs(float(np.mean(np.abs(noise))) - scale) <= K * scale / math.sqrt(n)
        assert abs(float(np.mean(noise))) <= K * scale * math.sqrt(2.0 / n)  # Var Lap = 2b²
    z = np.linspace(-60, 60, 4001)
    ratio = laplace_log_density(z, -big_m, scale) - laplace_log_density(z, big_m, scale)
    assert np.max(np.abs(ratio)) <= params.rho * eps + 1e-12
    assert np.max(np.abs(ratio)) == pytest.approx(params.rho * eps, abs=1e-12)  # tight


# --------------------------------------------------------------------------- §6.1.2 GRR


@pytest.mark.parametrize(("k", "eps"), list(itertools.product([1, 2, 5, 50], [0.1, 1.0, 3.0])))
def test_grr_theory_is_exact(k: int, eps: float) -> None:
    keep, other = grr_keep_probability(eps, k), grr_other_probability(eps, k)
    assert float(keep + (k - 1) * other) == pytest.approx(1.0, abs=1e-15)
    c, off = grr_debias(eps, k), grr_offset(eps)
    assert float(c * keep - off) == pytest.approx(1.0, abs=1e-12)  # E Ṽ^true = 1
    assert float(c * other - off) == pytest.approx(0.0, abs=1e-12)  # E Ṽ^other = 0
    assert float(c - k * off) == pytest.approx(1.0, abs=1e-12)  # Σ_j Ṽ^j = 1 for any report
    if k > 1:  # output laws under two different true cells: ratio ≤ e^ε and = e^ε
        law_a = np.array([keep] + [other] * (k - 1))
        law_b = np.roll(law_a, 1)
        assert np.max(np.log(law_a / law_b)) == pytest.approx(eps, abs=1e-12)
    else:
        assert float(keep) == 1.0


def test_grr_sampler_follows_its_law() -> None:
    """2·10⁵ reports per (K, ε): the true member's frequency and every other member's within
    5σ of theory, never outside 0..K−1; Ṽ means within 5 SE of the indicator; K = 1 is exact."""
    n = 200_000
    rng = np.random.default_rng(SEED)
    for k, eps in itertools.product([1, 2, 5, 50], [0.1, 1.0, 3.0]):
        true = np.full(n, min(3, k - 1))
        sent = grr_report(true, k, np.full(n, eps), rng)
        assert sent.min() >= 0
        assert sent.max() < k
        counts = np.bincount(sent, minlength=k) / n
        probs = np.where(np.arange(k) == true[0], grr_keep_probability(eps, k), 0.0)
        probs = np.where(np.arange(k) == true[0], probs, grr_other_probability(eps, k))
        assert np.all(np.abs(counts - probs) <= K * np.sqrt(probs * (1 - probs) / n) + 1e-12)
        c, off = float(grr_debias(eps, k)), float(grr_offset(eps))
        v_mean = c * counts - off  # mean of Ṽ^j over the draws
        sd = c * np.sqrt(probs * (1 - probs) / n)
        assert np.all(np.abs(v_mean - (np.arange(k) == true[0])) <= K * sd + 1e-9)


def test_cell_report_is_semi_feature_ldp_exactly() -> None:
    """Def. 3.1: two users with the same public coordinates and different private ones (and
    labels) have the same V_i; the cell round's own client step (at the plan's (1 − ρ)ε) reports
    every member of V_i with the GRR law's frequencies (2·10⁵ reports per user, each within 5σ:
    false failure 5.7e-7 per cell) and its label round has the scale 2M/(ρε) (5 SE, as in the
    label test), so the law of the whole release (label then cell) differs by at most
    e^{ρε + (1−ρ)ε} = e^ε, and by exactly that at the extremes."""
    pop = small_pop("aligned", 2)
    params = HOT.parse_params(pop.params(bins=3, depth=2, rho=0.6))
    plan, outputs, _ = run_semi(HOT, params, pop, SEED)
    part = Partition.from_json(outputs[0]["partition"])
    x = np.array([[0.05, 0.05, 0.3, 0.6, 0.9], [0.95, 0.55, 0.3, 0.6, 0.9]])  # private dims 0, 1
    mask = aligned_mask(2, 5, 2)
    a_set, b_set = part.potential(x, ~mask)
    assert np.array_equal(a_set[0], a_set[1])
    assert np.array_equal(b_set[0], b_set[1])
    cells = part.cell(x)
    members = np.flatnonzero((a_set[0][:, None] & b_set[0][None, :]).reshape(-1))
    k, eps_i = members.size, float(plan.rounds[1].epsilon[0])
    assert eps_i == pytest.approx(0.4 * 4.0)
    law = np.where(members[None, :] == cells[:, None], grr_keep_probability(eps_i, k), 0.0)
    law = np.where(law > 0, law, grr_other_probability(eps_i, k))
    n = 200_000
    big_m = params.half_range
    scale = (params.label_high - params.label_low) / (0.6 * 4.0)
    for row, user_law, y, centred in (
        (0, law[0], params.label_high, big_m),
        (1, law[1], params.label_low, -big_m),
    ):
        features = np.concatenate([x[row], mask[row].astype(np.float64)])
        sent = _round_reports(plan, params, outputs, 1, features, y, n).astype(np.int64)
        assert np.all(np.isin(sent, members))
        freq = (sent[:, None] == members[None, :]).mean(axis=0)
        assert np.all(np.abs(freq - user_law) <= K * np.sqrt(user_law * (1 - user_law) / n))
        noise = _round_reports(plan, params, outputs, 0, features, y, n) - centred
        assert abs(float(np.mean(np.abs(noise))) - scale) <= K * scale / math.sqrt(n)
    cell_ratio = float(np.max(np.abs(np.log(law[0] / law[1]))))
    z = np.linspace(-60, 60, 4001)
    label_ratio = float(
        np.max(laplace_log_density(z, big_m, scale) - laplace_log_density(z, -big_m, scale))
    )
    assert cell_ratio == pytest.approx(eps_i, abs=1e-12)
    assert cell_ratio + label_ratio == pytest.approx(4.0, abs=1e-12)


# --------------------------------------------------------------------------- §6.1.3 unary RR


def test_unary_rr_exact_ratio_and_unbiasedness() -> None:
    eps_i, k = 1.3, 3
    keep = float(rr_keep_probability(eps_i / 2))
    outputs = np.array(list(itertools.product([0, 1], repeat=k)))

    def law(cell: int) -> FloatArray:
        truth = np.arange(k) == cell
        return np.asarray(np.prod(np.where(outputs == truth, keep, 1 - keep), axis=1))

    ratio = np.log(law(0) / law(2))
    assert np.max(np.abs(ratio)) == pytest.approx(eps_i, abs=1e-12)  # two bits move: e^{ε_I}
    n = 200_000
    members = np.zeros((n, 5), dtype=np.bool_)
    members[:, :3] = True  # V_i = cells 0..2 of 5
    bits = unary_rr_report(
        members, np.zeros(n, dtype=np.int64), np.full(n, eps_i), np.random.default_rng(3)
    )
    assert np.all(bits[:, 3:] == 0)  # never outside V_i
    c = float(rr_debias(eps_i / 2))
    v = c * (bits[:, :3] - (1 - keep))
    sd = c * math.sqrt(keep * (1 - keep) / n)
    assert np.all(np.abs(v.mean(axis=0) - [1, 0, 0]) <= K * sd)


# --------------------------------------------------------------------------- §6.1.4 V_i


def test_aligned_potential_sets_are_the_private_grid_times_the_own_leaf() -> None:
    pop = small_pop("aligned", 2)
    params = HOT.parse_params(pop.params(bins=3, depth=3))
    _plan, outputs, _ = run_semi(HOT, params, pop, SEED)
    part = Partition.from_json(outputs[0]["partition"])
    x = pop.data(np.arange(pop.n)).values[:, :5]
    a_set, b_set = part.potential(x, ~pop.mask)
    assert np.all(a_set.sum(axis=1) == 9)
    assert np.all(b_set.sum(axis=1) == 1)
    cells = part.cell(x)
    assert np.all(a_set[np.arange(pop.n), cells // part.n_leaves])
    assert np.all(b_set[np.arange(pop.n), cells % part.n_leaves])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0, 1), min_size=5, max_size=5),
    st.lists(st.floats(0, 1), min_size=5, max_size=5),
    st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_potential_set_ignores_private_coordinates(
    x: list[float], other: list[float], private: list[bool]
) -> None:
    """V_i depends on the public coordinates only (so its law cannot reveal private ones), and
    always holds the true cell (§2.6)."""
    part = _tail_partition()
    w = np.array([private])
    a = np.array([x])
    b = np.where(w, np.array([other]), a)  # same public coordinates, other private ones
    va, vb = part.potential(a, ~w), part.potential(b, ~w)
    assert np.array_equal(va[0], vb[0])
    assert np.array_equal(va[1], vb[1])
    cell = int(part.cell(a)[0])
    assert va[0][0, cell // part.n_leaves]
    assert va[1][0, cell % part.n_leaves]


@cache
def _tail_partition() -> Partition:
    pop = small_pop("tail", 1)
    params = HOT.parse_params(pop.params(bins=2, depth=4, histogram_dims=1))
    _, outputs, _ = run_semi(HOT, params, pop, SEED)
    return Partition.from_json(outputs[0]["partition"])


def test_personalized_potential_sets_obey_lemma_b10() -> None:
    """K_i ≤ t^s · 2^{p − ⌊p/(d−s)⌋·(d − s − Σ_{ℓ∈T} W_i^ℓ)} (Lemma B.10) on W_γ, γ = 1."""
    pop = small_pop("tail", 1)
    part = _tail_partition()
    s, p, d = 1, 4, 5
    x = pop.data(np.arange(pop.n)).values[:, :d]
    a_set, b_set = part.potential(x, ~pop.mask)
    k = a_set.sum(axis=1) * b_set.sum(axis=1)
    tree_private = pop.mask[:, part.tree_dims].sum(axis=1)
    bound = 2**s * 2.0 ** (p - (p // (d - s)) * (d - s - tree_private))
    assert np.all(k <= bound)
    assert k.max() > k.min()


# --------------------------------------------------------------------------- §6.1.5 ledger


def test_every_plan_charges_its_split_and_never_more_than_epsilon() -> None:
    pop = synthetic_population(400, SEED, np.linspace(0.5, 8.0, 400), mask="tail", test_size=1)
    plan = HOT.plan(HOT.parse_params(pop.params(rho=0.3)), pop.epsilon, pop.metadata, SEED)
    assert np.allclose(plan.rounds[0].epsilon, 0.3 * pop.epsilon, rtol=1e-15)
    assert np.allclose(plan.rounds[1].epsilon, 0.7 * pop.epsilon, rtol=1e-15)
    assert np.all(np.abs(plan.charges() - pop.epsilon) <= TOLERANCE)  # ρε + (1−ρ)ε = ε
    hist = HIST.plan(HIST.parse_params(pop.params()), pop.epsilon, pop.metadata, SEED)
    assert np.all(hist.rounds[0].message_counts() == 2)  # Z̃ and W̃ at ε/2 each
    label, coord = krr_budgets(pop.mask, pop.epsilon)
    assert np.allclose(label + pop.mask.sum(axis=1) * coord, pop.epsilon, rtol=1e-14)
    assert np.all(label >= pop.epsilon / 2 - 1e-15)
    for proto in (*histoftree.PROTOCOLS[1:], *hist_ldp.PROTOCOLS, *tree_baselines.PROTOCOLS):
        p = proto.plan(proto.parse_params(pop.params()), pop.epsilon, pop.metadata, SEED)
        assert np.all(check_plan_budget(p, pop.epsilon) <= pop.epsilon + TOLERANCE)


# --------------------------------------------------------------------------- §6.1.6 Alg. 1


@pytest.mark.parametrize(("p", "tree_dims"), [(3, 2), (4, 3), (5, 3), (6, 4)])
def test_max_edge_tree_tiles_the_cube_with_balanced_leaves(p: int, tree_dims: int) -> None:
    rng = np.random.default_rng(p)
    x = rng.random((3000, tree_dims))
    y = np.sin(3 * x[:, 0]) + rng.standard_normal(3000)
    tree = max_edge_tree(x, np.ones_like(x, dtype=bool), y, range(tree_dims), p)
    assert tree.n_leaves == 2**p
    lo, hi = tree.boxes(range(tree_dims))
    assert np.prod(hi - lo, axis=1).sum() == pytest.approx(1.0, abs=1e-12)
    edges = {2.0 ** -(p // tree_dims), 2.0 ** -math.ceil(p / tree_dims)}
    assert set(np.unique(hi - lo).tolist()) <= edges
    pts = rng.random((5000, tree_dims))
    inside = np.all((pts[:, None] >= lo[None]) & (pts[:, None] < hi[None]), axis=2)
    assert np.all(inside.sum(axis=1) == 1)  # exactly one leaf each
    assert np.array_equal(np.argmax(inside, axis=1), tree.apply(pts))


def test_max_edge_split_rules() -> None:
    rng = np.random.default_rng(SEED)
    x = rng.random((4000, 3))
    known = np.ones_like(x, dtype=bool)
    # only feature 1 of two public features carries signal: the first split is on it
    y = 3.0 * (x[:, 1] >= 0.5) + 0.1 * rng.standard_normal(4000)
    assert max_edge_tree(x, known, y, [0, 1], 1).feature[0] == 1
    # users who hide the split feature leave the children: feature 0 splits first (on group P);
    # group Q (feature 0 private) carries a strong step on feature 1 that only it could show,
    # so the children split feature 2 (group P's weak step) instead of feature 1
    q = np.arange(4000) >= 2000
    known[q, 0] = False
    y = np.where(q, 5.0 * (x[:, 1] >= 0.5), 10.0 * (x[:, 0] >= 0.5) + (x[:, 2] >= 0.5))
    y = y + 0.01 * rng.standard_normal(4000)
    tree = max_edge_tree(x, known, y, [0, 1, 2], 2)
    assert tree.feature[0] == 0
    assert tree.feature[tree.left[0]] == 2
    assert tree.feature[tree.right[0]] == 2
    # deterministic, and ties (constant labels) go to the smallest feature index
    again = max_edge_tree(x, known, y, [0, 1, 2], 2)
    assert again.as_json() == tree.as_json()
    flat = max_edge_tree(x, known, np.zeros(4000), [2, 1], 2)
    assert flat.feature[0] == 1
    assert flat.feature[flat.left[0]] == 2


def test_cart_tree_uses_quantile_thresholds_inside_the_box() -> None:
    rng = np.random.default_rng(SEED)
    x = rng.random((3000, 2))
    y = 2.0 * (x[:, 0] >= 0.33) + 0.1 * rng.standard_normal(3000)
    tree = cart_tree(x, np.ones_like(x, dtype=bool), y, [0, 1], 3)
    assert tree.feature[0] == 0
    assert abs(tree.threshold[0] - 0.33) < 0.06
    assert 2 <= tree.n_leaves <= 8
    assert tree.depth <= 3
    lo, hi = tree.boxes([0, 1])
    assert np.prod(hi - lo, axis=1).sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="malformed tree"):
        Tree.from_json({**tree.as_json(), "left": [0] * tree.feature.size})


# --------------------------------------------------------------------------- §6.1.7 limit


def test_near_non_private_limit_is_the_empirical_cell_mean() -> None:
    """Aligned, s* = 2, t = 2, p = 2, n = 10⁴, ε = 100, ρ = ½: GRR (index budget 50) never lies,
    so every cell value is Σ Ỹ_i 1{X_i ∈ cell}/Σ 1{X_i ∈ cell} to 1e−6, and within 0.05 (mean
    absolute) of the non-private estimator (3) on the same partition."""
    pop = synthetic_population(10_000, SEED, 100.0, private=2, test_size=10)
    params = HOT.parse_params(pop.params(bins=2, depth=2, rho=0.5))
    _, outputs, result = run_semi(HOT, params, pop, SEED)
    part = Partition.from_json(outputs[0]["partition"])
    data = pop.data(np.arange(pop.n))
    assert data.labels is not None
    cells = part.cell(data.values[:, :5])
    labels = np.asarray(outputs[0]["labels"])
    count = np.bincount(cells, minlength=part.n_cells)
    assert count.min() > 0
    noisy = np.bincount(cells, labels, minlength=part.n_cells) / count + params.centre
    assert np.max(np.abs(np.asarray(result.estimate) - noisy)) <= 1e-6
    clean = np.bincount(cells, data.labels, minlength=part.n_cells) / count
    assert np.mean(np.abs(np.asarray(result.estimate) - clean)) <= 0.05


# --------------------------------------------------------------------------- §6.1.8 rule (15)


def test_rule15_worked_values() -> None:
    n, d = 10_000, 5
    eps = np.full(n, 4.0)
    aligned = aligned_mask(n, d, 2)
    tail = aligned[:, 2:].sum(axis=1)
    value = rule15_objective(2, 2, d, eps, tail, 0.01)
    assert value == pytest.approx(0.001462 + 0.003969, abs=5e-7)  # (a): 0.005431
    assert tuned_structure(aligned, eps, 0.01)[:3] == (2, 2, 2)
    w = tail_mask(n, d, 1.0)
    assert w.sum(axis=0).tolist() == [10_000, 5_000, 3_333, 2_500, 2_000]
    order = feature_order(w)
    tails = w[:, order[1:]].sum(axis=1)
    delta = float(np.mean(2.0 ** (tails * 2 / 4)))
    assert delta == pytest.approx(1.84377, abs=5e-6)  # (b)
    assert rule15_objective(1, 2, d, eps, tails, 0.01) == pytest.approx(0.0058491, abs=5e-8)
    assert tuned_structure(w, eps, 0.01)[:3] == (1, 2, 1)


@pytest.mark.parametrize("private", [1, 2, 3])
def test_rule15_keeps_s_star_in_the_aligned_case(private: int) -> None:
    w = aligned_mask(10_000, 5, private)
    for eps, c in itertools.product([1.0, 4.0, 8.0], [0.01, 0.1, 1.0]):
        assert tuned_structure(w, np.full(10_000, eps), c)[0] == private


def test_rule15_is_the_brute_force_argmin_of_its_objective() -> None:
    rng = np.random.default_rng(SEED)
    n, d = 3000, 5
    w = tail_mask(n, d, 1.5)
    eps = rng.uniform(1.0, 6.0, n)
    order = feature_order(w)
    values = {}
    for s, p in itertools.product(range(1, d), range(12)):
        tails = w[:, order[s:]].sum(axis=1)
        direct = 2.0 ** (p * (d + s) / (d - s)) * math.log(n) * np.sum(
            2.0 ** (tails * p / (d - s)) / eps**2
        ) / n**2 + 0.05 * 2.0 ** (-2 * p / (d - s))
        values[s, p] = rule15_objective(s, p, d, eps, tails, 0.05)
        assert values[s, p] == pytest.approx(direct, rel=1e-12)
    s, p, t, value = tuned_structure(w, eps, 0.05)
    assert (s, p) == min(values, key=lambda sp: (values[sp], sp))
    assert value == values[s, p]
    assert t == max(1, math.floor(2 ** (p / (d - s)) + 0.5))


def test_tuned_protocol_plans_with_rule15() -> None:
    pop = small_pop("tail", 1)
    params = TUNED.parse_params(pop.params(bias_constant=0.01, bins_offset=1))
    plan, _outputs, result = run_semi(TUNED, params, pop, SEED)
    s, p, t_star, _ = tuned_structure(pop.mask, pop.epsilon, 0.01)
    assert (plan.public["histogram_dims"], plan.public["depth"]) == (s, p)
    assert plan.public["bins"] == t_star + 1
    assert result.diagnostics["rule15"]["s"] == s


# --------------------------------------------------------------------------- §6.1.9 protocol


def test_a_user_alone_sends_what_it_sends_in_a_block() -> None:
    pop = small_pop("tail", 1)
    params = HOT.parse_params(pop.params(histogram_dims=1, bins=2, depth=3))
    plan, outputs, _ = run_semi(HOT, params, pop, SEED)
    rp = plan.rounds[1]
    task = RoundTask.of(rp, HOT.broadcast(params, plan, 1, outputs))
    key = round_key(pop.population_seed, 1)
    slots = np.arange(0, 2000, 97)
    block = HOT.privatize(
        params,
        task,
        pop.data(slots),
        rp.epsilon[slots],
        rp.groups()[slots],
        UserStreams(key, slots),
    )
    for i, slot in enumerate(slots.tolist()):
        one = np.array([slot])
        alone = HOT.privatize(
            params, task, pop.data(one), rp.epsilon[one], rp.groups()[one], UserStreams(key, one)
        )
        assert alone[0] == block[i]


@pytest.mark.parametrize("mechanism", ["grr", "rr"])
def test_the_server_rejects_a_cell_outside_the_potential_set(mechanism: str) -> None:
    pop = small_pop("tail", 1)
    params = HOT.parse_params(
        pop.params(histogram_dims=1, bins=2, depth=3, index_mechanism=mechanism)
    )
    plan, outputs, _ = run_semi(HOT, params, pop, SEED)
    broadcast = HOT.broadcast(params, plan, 1, outputs)
    part = Partition.from_json(broadcast["partition"])
    slots = np.arange(pop.n)
    a_set, b_set = part.potential(pop.metadata["public"], ~pop.mask)
    members = (a_set[:, :, None] & b_set[:, None, :]).reshape(pop.n, -1)
    outside = np.argmin(members, axis=1)  # the first cell outside V_i
    has = ~members[slots, outside]
    assert has.sum() > 100  # users with public tree coordinates have cells outside V_i
    if mechanism == "grr":
        bad = outside.astype(np.float64)
        good = np.argmax(members, axis=1).astype(np.float64)
    else:
        bad = np.zeros((pop.n, plan.rounds[1].payload_shape[0]))
        bad[slots, outside] = 1.0
        good = np.zeros_like(bad)
    task = RoundTask.of(plan.rounds[1], broadcast)
    assert np.array_equal(HOT.check_members(params, plan, task, slots, bad), ~has)
    assert np.array_equal(HOT.check_cells(params, plan, broadcast, slots, bad), ~has)
    assert HOT.check_cells(params, plan, broadcast, slots, good).all()
    assert not HOT.check_cells(
        params, plan, broadcast, slots[:1], np.full((1, *bad.shape[1:]), np.nan)
    ).any()


def test_users_missing_a_round_leave_the_estimator() -> None:
    """A user who sent only its cell (or only its label) enters neither N_j nor D_j; a
    label-only user still shaped the tree (post-processing, §1.4)."""
    pop = small_pop("aligned", 1)
    params = HOT.parse_params(pop.params(bins=2, depth=2))
    _, _full, _ = run_semi(HOT, params, pop, SEED)
    only_cell, only_label = np.arange(0, 100), np.arange(100, 250)
    _, outs, result = run_semi(HOT, params, pop, SEED, drop={0: only_cell, 1: only_label})
    assert outs[0]["n_reports"] == 1900
    assert outs[1]["n_reports"] == 1850
    assert outs[1]["n_paired"] == 1750
    # the sums are those of the paired users alone: recompute them from their reports
    part = Partition.from_json(outs[0]["partition"])
    labels = np.asarray(outs[0]["labels"], dtype=np.float64)
    assert np.isnan(labels[only_cell]).all()
    assert np.isfinite(labels[only_label]).all()
    plan = HOT.plan(params, pop.epsilon, pop.metadata, SEED)
    paired = np.setdiff1d(np.arange(pop.n), np.concatenate([only_cell, only_label]))
    rp = plan.rounds[1]
    task = RoundTask.of(rp, HOT.broadcast(params, plan, 1, outs))
    z = HOT.privatize(
        params,
        task,
        pop.data(paired),
        rp.epsilon[paired],
        rp.groups()[paired],
        UserStreams(round_key(pop.population_seed, 1), paired),
    )
    alone = HOT.aggregate(
        params,
        plan,
        1,
        task.broadcast,
        iter([ReportChunk(paired, rp.epsilon[paired], rp.groups()[paired], z)]),
    )
    assert np.allclose(alone["numerator"], outs[1]["numerator"], rtol=1e-12, atol=1e-9)
    assert part.n_cells == np.asarray(result.estimate).size


def test_unary_rr_protocol_runs_and_is_unbiased_in_the_limit() -> None:
    pop = synthetic_population(5000, SEED, 60.0, private=1, test_size=10)
    params = HOT.parse_params(pop.params(bins=2, depth=2, rho=0.5, index_mechanism="rr"))
    plan, outputs, _result = run_semi(HOT, params, pop, SEED)
    assert plan.rounds[1].payload_kind == "vector"
    assert plan.rounds[1].payload_shape == (8,)
    den = np.asarray(outputs[1]["denominator"])
    part = Partition.from_json(outputs[0]["partition"])
    count = np.bincount(part.cell(pop.data(np.arange(pop.n)).values[:, :5]), minlength=8)
    assert np.allclose(den, count, atol=1e-6)  # per-bit ε = 15: RR never flips here


def test_predictions_and_other_protocols_end_to_end() -> None:
    pop = small_pop("tenfold", 1)
    cases: list[tuple[Any, dict[str, Any]]] = [
        (HOT, {"tree_rule": "cart"}),
        (HOT, {"split_criterion": "variance"}),
        (HIST, {"truncate_to": "zero", "truncation": 0.2}),
        (ParDt(), {}),
        (ParDt(), {"missing": "common"}),
        (ParDt(), {"clip_leaves": False, "min_samples_leaf": 1, "max_depth": 8}),
        (LabelDt(), {}),
        (KrrTree(), {"krr_bins": 4}),
    ]
    for proto, extra in cases:
        params = proto.parse_params(pop.params(**extra))
        plan, outputs, _result = run_semi(proto, params, pop, SEED)
        pred = proto.predict(params, plan, outputs, pop.test_features)
        assert pred.shape == (500,)
        assert np.all(np.isfinite(pred))
        inside = (pred >= params.label_low - 1e-9) & (pred <= params.label_high + 1e-9)
        assert inside.all() == extra.get("clip_leaves", True)  # unclipped noisy leaves stray
        with pytest.raises(ValueError, match="dimension 5"):
            proto.predict(params, plan, outputs, np.zeros((2, 4)))
    labeldt = LabelDt()
    plan = labeldt.plan(labeldt.parse_params(pop.params()), pop.epsilon, {}, SEED)
    assert "in clear" in plan.warnings[0]


def test_krr_reports_bin_centres_only_where_private() -> None:
    pop = small_pop("tenfold", 1)
    proto = KrrTree()
    params = proto.parse_params(pop.params(krr_bins=3))
    plan = proto.plan(params, pop.epsilon, pop.metadata, SEED)
    task = RoundTask.of(plan.rounds[0], proto.broadcast(params, plan, 0, []))
    slots = np.arange(pop.n)
    z = proto.privatize(
        params,
        task,
        pop.data(slots),
        pop.epsilon,
        plan.rounds[0].groups(),
        UserStreams(stream_key(1, 2), slots),
    )
    assert proto.check_members(params, plan, task, slots, z).all()
    assert set(np.unique(z[:, :5][pop.mask]).tolist()) <= {1 / 6, 0.5, 5 / 6}
    assert np.all(z[:, :5][~pop.mask] == 0.0)
    z[0, 0] = 0.4
    assert not proto.check_members(params, plan, task, slots[:1], z[:1]).any()


def test_hist_truncation_and_grid() -> None:
    pop = synthetic_population(3000, SEED, 1000.0, test_size=10)
    params = HIST.parse_params(pop.params(bins=2, truncation=0.0))
    _, _outputs, result = run_semi(HIST, params, pop, SEED)
    data = pop.data(np.arange(pop.n))
    assert data.labels is not None
    cells = np.minimum(data.values[:, :5] * 2, 1).astype(int) @ (2 ** np.arange(4, -1, -1))
    count = np.bincount(cells, minlength=32)
    clean = np.bincount(cells, data.labels, minlength=32) / count
    # ε = 1000: noise sd of a cell's sums is about √(2·3000)·4M/ε ≈ 2.6 against ~94 users
    assert np.mean(np.abs(np.asarray(result.estimate) - clean)) <= 0.1
    strict = HIST.parse_params(pop.params(bins=2, truncation=0.5))
    _, _, truncated = run_semi(HIST, strict, pop, SEED)
    assert np.allclose(truncated.estimate, params.centre)  # every p̂_k ≈ 1/32 < ζ


def test_regression_tree_small_cases_and_missing_values() -> None:
    x = np.array([[0.1], [0.2], [0.8], [0.9]])
    tree, values = regression_tree(x, np.array([1.0, 1.0, 5.0, 5.0]), 3, 1)
    assert tree.n_leaves == 2
    assert tree.threshold[0] == pytest.approx(0.5)
    assert values.tolist() == [1.0, 5.0]  # pure children stay leaves
    nan_x = np.array([[0.1], [0.2], [np.nan], [np.nan], [0.8], [0.9]])
    y = np.array([0.0, 0.0, 9.0, 9.0, 10.0, 10.0])
    tree, values = regression_tree(nan_x, y, 1, 1)
    assert bool(tree.missing_left[0]) is False  # missing values join the side they match
    assert tree.apply(np.array([[np.nan]]))[0] == 1
    tree, _ = regression_tree(x, np.array([1.0, 2.0, 3.0, 4.0]), 4, 2)
    assert tree.n_leaves == 2  # min_samples_leaf = 2 allows one split only


def test_regression_tree_matches_scikit_learn() -> None:
    """The same partition of the training users and the same leaf means as scikit-learn's
    DecisionTreeRegressor (deep nodes can isolate the same users through different features,
    an exact tie that scikit-learn breaks at random: compared on the training points)."""
    tree_module = pytest.importorskip("sklearn.tree", reason="scikit-learn is not installed")
    rng = np.random.default_rng(SEED)
    x = rng.random((800, 4))
    y = np.sin(4 * x[:, 0]) + x[:, 2] + 0.3 * rng.standard_normal(800)
    for depth, leaf in [(1, 1), (4, 10), (6, 1), (8, 100)]:
        ours, values = regression_tree(x, y, depth, leaf)
        ref = tree_module.DecisionTreeRegressor(
            max_depth=depth, min_samples_leaf=leaf, random_state=0
        )
        ref.fit(x, y)
        assert ours.n_leaves == ref.get_n_leaves()
        assert np.allclose(values[ours.apply(x)], ref.predict(x), atol=1e-9)


# --------------------------------------------------------------------------- §6.2 E1, E1b

GRID = [
    {"bins": t, "depth": p, "rho": r} for t in (1, 2, 3) for p in (1, 2, 4) for r in (0.5, 0.7, 0.9)
]
HIST_GRID = [{"bins": t, "truncation": z} for t in (1, 2) for z in (0.01, 0.05)]


def oracle(
    proto: Protocol[Any], grid: list[dict[str, Any]], pops: list[SemiFeaturePopulation]
) -> dict[str, float]:
    """The paper's protocol: the grid point with the lowest mean excess risk over replications
    (common random numbers: every config sees the same users, noise streams and test points)."""
    scores = np.array(
        [
            [
                list(excess(proto, proto.parse_params(pop.params(**g)), pop, r).values())
                for r, pop in enumerate(pops)
            ]
            for g in grid
        ]
    )  # (configs, reps, [test_mse, excess_risk])
    best = int(np.argmin(scores[:, :, 1].mean(axis=1)))
    return {
        "excess": float(scores[best, :, 1].mean()),
        "test_mse": float(scores[best, :, 0].mean()),
    }


@cache
def e1(eps: float, n: int = 10_000, reps: int = 10) -> tuple[dict[str, float], dict[str, float]]:
    pops = [synthetic_population(n, 1000 + r, eps, private=1) for r in range(reps)]
    grid = GRID if n == 10_000 else [g for g in GRID if g["bins"] <= 2]
    return oracle(HOT, grid, pops), oracle(HIST, HIST_GRID, pops)


# E1 pass rules (spec §6.2): (absolute cap, ratio to Hist); calibrated HoT .221/.123/.089/.044
E1_RULES = {8.0: (0.065, 0.40), 4.0: (0.12, 0.65), 2.0: (0.16, 0.80), 1.0: (math.inf, 1.10)}


@pytest.mark.slow
@pytest.mark.parametrize("eps", [8.0, 4.0, 2.0, 1.0])
def test_e1_histoftree_beats_the_classical_ldp_histogram(eps: float) -> None:
    """E1 (s* = 1, n = 10⁴, R = 10, oracle over G and the Hist grid): HistOfTree's excess risk
    at most the cap and the stated fraction of Hist's (≥ 60/35/20 % lower at ε = 8/4/2); at ε = 4
    also test MSE ≤ 0.95 × Hist's. The margins are the spec's (calibrated ratios 0.24/0.48/0.64;
    a replication's excess has SE ≈ 0.01, so each gate sits several SE from the calibration)."""
    hot, hist = e1(eps)
    cap, ratio = E1_RULES[eps]
    assert hot["excess"] <= cap, (hot, hist)
    assert hot["excess"] <= ratio * hist["excess"], (hot, hist)
    if eps == 4.0:
        assert hot["test_mse"] <= 0.95 * hist["test_mse"], (hot, hist)


@pytest.mark.slow
def test_e1_excess_risk_decreases_in_epsilon() -> None:
    values = [e1(eps)[0]["excess"] for eps in (1.0, 2.0, 4.0, 8.0)]
    assert all(b <= 1.05 * a for a, b in itertools.pairwise(values)), values


@pytest.mark.slow
def test_e1b_histoftree_beats_classical_ldp_at_epsilon_one() -> None:
    """E1b: n = 4·10⁴, ε = 1, R = 6, t ∈ {1, 2}: excess ≤ 0.80 × Hist and test MSE ≤ 0.97 × Hist
    (calibrated 0.129 vs 0.191, 1.138 vs 1.202)."""
    hot, hist = e1(1.0, 40_000, 6)
    assert hot["excess"] <= 0.80 * hist["excess"], (hot, hist)
    assert hot["test_mse"] <= 0.97 * hist["test_mse"], (hot, hist)
