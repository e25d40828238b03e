"""Semi-feature populations (client/population/features.py): the §5.1 sin-sum law and its masks, the
enrollment metadata, the evaluation helpers, the diabetes substitute of §5.2/§6.3 (skipped without
scikit-learn) and both driven end to end by the in-process simulator."""

from __future__ import annotations

import importlib
import math
from typing import Any, cast

import numpy as np
import pytest
from scipy import stats

from fedldp.client.population import features
from fedldp.client.population.build import Population
from fedldp.client.population.features import (
    DIABETES_ORDER,
    SIN_SUM_BOUNDS,
    SIN_SUM_MEAN,
    SIN_SUM_VARIANCE,
    SemiFeaturePopulation,
    aligned_mask,
    diabetes_population,
    reference_tree_mse,
    sin_sum,
    synthetic_population,
    tail_mask,
    tenfold_mask,
)
from fedldp.client.simulate import SimulationResult, simulate
from fedldp.protocol.semi_feature.common import split_features
from fedldp.protocol.semi_feature.hist_ldp import HistLdp
from fedldp.protocol.semi_feature.histoftree import HistOfTree, HistOfTreeTuned
from fedldp.protocol.semi_feature.tree_baselines import KrrTree, LabelDt, ParDt

K = 5.0  # k·σ: a two-sided normal tail beyond 5σ has probability 5.7e-7 per check
SEED = 31


def _sin_moments() -> tuple[float, float, float]:
    """E sin U, E h², E h⁴ for h = sin U − E sin U, U ~ U[0, 1] (Gauss–Legendre, exact to 1e-15)."""
    nodes, weights = np.polynomial.legendre.leggauss(40)
    u, w = (nodes + 1) / 2, weights / 2
    m1 = float(w @ np.sin(u))
    h = np.sin(u) - m1
    return m1, float(w @ h**2), float(w @ h**4)


def test_sin_sum_constants_are_exact() -> None:
    m1, m2, _m4 = _sin_moments()
    assert pytest.approx(3 * m1, rel=1e-13) == SIN_SUM_MEAN
    assert pytest.approx(3 * m2, rel=1e-12) == SIN_SUM_VARIANCE
    assert pytest.approx(1.3791, abs=1e-4) == SIN_SUM_MEAN
    assert pytest.approx(0.1841, abs=1e-4) == SIN_SUM_VARIANCE
    assert pytest.approx((-3.0, 5.524), abs=1e-3) == SIN_SUM_BOUNDS


def test_sin_sum_law_moments() -> None:
    """Features U[0,1]^5 (mean ½, variance 1/12), noise y − f*(x) ~ N(0, 1) (variance of z² is
    2), each within 5σ of theory."""
    pop = synthetic_population(50_000, SEED, 2.0, test_size=10)
    data = pop.data(np.arange(pop.n))
    x, mask = split_features(data.values, 5)
    assert data.labels is not None
    n = pop.n
    assert np.all(np.abs(x.mean(axis=0) - 0.5) <= K * math.sqrt(1 / 12 / n))
    assert np.all(np.abs(x.var(axis=0) - 1 / 12) <= K * math.sqrt((1 / 80 - 1 / 144) / n))
    noise = data.labels - sin_sum(x)
    assert abs(noise.mean()) <= K * math.sqrt(1 / n)
    assert abs(noise.var() - 1.0) <= K * math.sqrt(2 / n)
    assert np.array_equal(mask, pop.mask)
    assert np.all(data.counts == 1)


def test_a_users_data_do_not_depend_on_its_block() -> None:
    pop = synthetic_population(500, SEED, 1.0, test_size=10)
    block = pop.data(np.arange(500))
    for slot in [0, 17, 499]:
        alone = pop.data(np.array([slot]))
        assert np.array_equal(alone.values[0], block.values[slot])
        assert alone.labels is not None
        assert block.labels is not None
        assert alone.labels[0] == block.labels[slot]
    shuffled = pop.data(np.array([499, 3]))
    assert np.array_equal(shuffled.values, block.values[[499, 3]])
    with pytest.raises(ValueError, match=r"\[0, 500\)"):
        pop.data(np.array([500]))


def test_metadata_carry_public_values_only() -> None:
    pop = synthetic_population(2000, SEED, np.linspace(1, 4, 2000), mask="tail", gamma=1.0)
    x = pop.data(np.arange(pop.n)).values[:, :5]
    public = pop.metadata["public"]
    assert np.array_equal(public[~pop.mask], x[~pop.mask])
    assert np.all(public[pop.mask] == 0.0)  # private values never enrolled
    assert set(np.unique(pop.metadata["mask"]).tolist()) == {0.0, 1.0}
    assert np.all(pop.metadata["samples"] == 1)
    assert pop.epsilon.tolist() == np.linspace(1, 4, 2000).tolist()
    assert pop.params(depth=3) == {
        "dimension": 5,
        "label_low": SIN_SUM_BOUNDS[0],
        "label_high": SIN_SUM_BOUNDS[1],
        "depth": 3,
    }
    description = pop.describe()
    assert description["protection_counts"] == [2000, 1000, 666, 500, 400]
    assert "truth" not in description
    with pytest.raises(ValueError, match="finite and > 0"):
        synthetic_population(10, SEED, 0.0)


def test_masks_follow_the_spec() -> None:
    assert aligned_mask(3, 5, 2).tolist() == [[True, True, False, False, False]] * 3
    assert tail_mask(10_000, 5, 1.0).sum(axis=0).tolist() == [10_000, 5_000, 3_333, 2_500, 2_000]
    assert tail_mask(10_000, 5, 2.0).sum(axis=0).tolist() == [10_000, 2_500, 1_111, 625, 400]
    default = tenfold_mask(354, 10, 2).sum(axis=0).tolist()
    assert default == [354, 354, 35, 35, 3, 3, 0, 0, 0, 0]  # aligned + a thinning tail
    literal = tenfold_mask(354, 10, 2, literal=True).sum(axis=0).tolist()
    assert literal == [354, 35, 35, 3, 3, 0, 0, 0, 0, 0]
    nested = tail_mask(1000, 5, 0.7)
    assert np.all(nested[:, 1:] <= nested[:, :-1])  # who protects ℓ + 1 protects ℓ
    with pytest.raises(ValueError, match="s\\*"):
        aligned_mask(3, 5, 6)


def test_evaluation_helpers() -> None:
    """f* itself has excess risk 0 and test MSE ≈ 1 (noise variance; SD of the mean of z² is
    √(2/m)); the best constant E f* has excess ≈ Var f*, within 5σ from the exact fourth moment
    of the centred f* (E(h1+h2+h3)⁴ = 3·E h⁴ + 18·(E h²)²)."""
    pop = synthetic_population(10, SEED, 1.0, test_size=20_000)
    assert pop.test_bayes is not None
    m = pop.test_labels.size
    best = pop.evaluate(pop.test_bayes)
    assert best["excess_risk"] == 0.0
    assert "dt_test_mse" not in best  # synthetic data are scored by the excess risk
    assert abs(best["test_mse"] - 1.0) <= K * math.sqrt(2 / m)
    _, m2, m4 = _sin_moments()
    mu4 = 3 * m4 + 18 * m2**2
    constant = pop.evaluate(np.full(m, SIN_SUM_MEAN))
    sd = math.sqrt((mu4 - SIN_SUM_VARIANCE**2) / m)
    assert abs(constant["excess_risk"] - SIN_SUM_VARIANCE) <= K * sd
    with pytest.raises(ValueError, match="one prediction per test point"):
        pop.evaluate(np.zeros(3))
    mse, (depth, leaf) = reference_tree_mse(synthetic_population(3000, SEED, 1.0, test_size=2000))
    assert 1.0 < mse < 1.0 + SIN_SUM_VARIANCE  # DT learns something, never beats the noise
    assert (depth, leaf) in features.DT_GRID


def _simulate(proto: Any, pop: SemiFeaturePopulation, **extra: Any) -> SimulationResult:
    params = proto.parse_params(pop.params(**extra))
    return simulate(proto, params, cast(Population, pop), pop.seed, chunk_size=700)


def test_the_simulator_drives_semi_feature_populations() -> None:
    """The population plugs into ``fedldp.client.simulate`` (which also runs ``check_members``):
    every protocol finishes, charges at most ε_i, and predicts; chunking never changes the
    result."""
    pop = synthetic_population(3000, SEED, np.linspace(2.0, 6.0, 3000), mask="tail")
    protocols: list[Any] = [
        HistOfTree(),
        HistOfTreeTuned(),
        HistLdp(),
        ParDt(),
        LabelDt(),
        KrrTree(),
    ]
    for proto in protocols:
        run = _simulate(proto, pop)
        assert np.all(run.charges <= pop.epsilon + 1e-12)
        pred = proto.predict(run.params, run.plan, run.outputs, pop.test_features)
        assert np.isfinite(pop.evaluate(pred)["excess_risk"])
        assert run.to_dict()["population"]["n"] == 3000
    once = simulate(
        HistOfTree(), HistOfTree().parse_params(pop.params()), cast(Population, pop), SEED
    )
    chunked = _simulate(HistOfTree(), pop)
    assert np.allclose(once.result.estimate, chunked.result.estimate, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- diabetes


def test_diabetes_needs_scikit_learn(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Any:
        raise ImportError(name)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(ImportError, match=r"pip install 'fedldp\[data\]'"):
        diabetes_population(SEED, 1.0)


def _have_sklearn() -> bool:
    try:
        importlib.import_module("sklearn.datasets")
    except ImportError:
        return False
    return True


needs_sklearn = pytest.mark.skipif(
    not _have_sklearn(), reason="scikit-learn is not installed (optional: the diabetes data)"
)


@needs_sklearn
def test_diabetes_population_is_scaled_split_and_masked() -> None:
    datasets = importlib.import_module("sklearn.datasets")
    raw = datasets.load_diabetes(scaled=False)
    pop = diabetes_population(SEED, 2.0, split=3)
    assert (pop.n, pop.dimension) == (354, 10)
    assert (pop.label_low, pop.label_high) == (25.0, 346.0)
    everything = np.concatenate([pop.data(np.arange(pop.n)).values[:, :10], pop.test_features])
    assert np.allclose(everything.min(axis=0), 0.0)
    assert np.allclose(everything.max(axis=0), 1.0)
    s5 = raw.data[:, list(raw.feature_names).index("s5")]
    scaled = (s5 - s5.min()) / (s5.max() - s5.min())
    assert np.allclose(np.sort(everything[:, 0]), np.sort(scaled))  # column 0 is s5
    assert pop.mask[:, :2].all()
    assert not pop.mask[:, 2:].any()
    assert pop.test_labels.size == 88
    again = diabetes_population(SEED + 1, 2.0, split=3)
    assert np.array_equal(again.test_labels, pop.test_labels)  # the split is its own seed
    other = diabetes_population(SEED, 2.0, split=4)
    assert not np.array_equal(other.test_labels, pop.test_labels)
    personal = diabetes_population(SEED, 2.0, mask="tenfold")
    assert personal.mask.sum(axis=0).tolist() == [354, 354, 35, 35, 3, 3, 0, 0, 0, 0]
    assert list(DIABETES_ORDER[:2]) == pop.describe()["features"][:2]


@needs_sklearn
@pytest.mark.parametrize("mask", ["aligned", "tenfold"])
def test_diabetes_pipeline_end_to_end(mask: str) -> None:
    """§6.3 fast version (10 splits, ε = 4): every protocol through the simulator, MSE over the
    best non-private DT's (the tables' ratio). With 354 users only ε >= 4 learns anything (spec
    §6.4: calibrated ratios 1.3–1.6); the check is a smoke test, so the gate is loose: each mean
    ratio in [1, 3] (the oracle DT is not beaten; the constant predictor is ≈ 1.55). HistOfTree
    and Hist are compared with the Wilcoxon signed-rank test the paper uses (reported, not
    gated: the spec expects no significant difference at this n)."""
    configs: list[tuple[Any, dict[str, Any]]] = [
        (HistOfTree(), {"bins": 1, "depth": 2, "rho": 0.9}),
        (HistLdp(), {"bins": 1, "truncation": 0.01}),
        (ParDt(), {"max_depth": 2, "min_samples_leaf": 100}),
        (KrrTree(), {"max_depth": 2, "min_samples_leaf": 100, "krr_bins": 2}),
        (LabelDt(), {"max_depth": 2, "min_samples_leaf": 100}),
    ]
    ratios = np.zeros((len(configs), 10))
    for split in range(10):
        pop = diabetes_population(split, 4.0, mask=mask, split=split)  # type: ignore[arg-type]
        dt_mse, _ = reference_tree_mse(pop)
        for i, (proto, extra) in enumerate(configs):
            run = _simulate(proto, pop, **extra)
            pred = proto.predict(run.params, run.plan, run.outputs, pop.test_features)
            scores = pop.evaluate(pred)
            # the evaluation carries the same non-private DT (computed once per split)
            assert scores["dt_test_mse"] == dt_mse
            assert scores["mse_over_dt"] == pytest.approx(scores["test_mse"] / dt_mse)
            ratios[i, split] = scores["mse_over_dt"]
    means = ratios.mean(axis=1)
    assert np.all((means >= 1.0) & (means <= 3.0)), means
    p_value = stats.wilcoxon(ratios[0], ratios[1]).pvalue
    assert 0.0 <= p_value <= 1.0
