"""Claims evaluated on trial rows: slopes over one regime (``x_in``) and quantile statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from fedldp.client.experiments.aggregate import quantile_level, stat_band
from fedldp.client.experiments.checks import evaluate
from fedldp.client.experiments.spec import CheckSpec, PlotSpec, Quantity


def _rows(points: dict[float, list[float]]) -> list[dict[str, str]]:
    return [
        {"protocol": "p", "epsilon": f"{x:g}", "seed": str(i), "error": repr(v)}
        for x, errors in points.items()
        for i, v in enumerate(errors)
    ]


def test_a_slope_over_x_in_fits_that_regime_only() -> None:
    # mean error = x^-2 up to x = 1, then flat: the fit over the first regime is exactly -2,
    # over every x it is not
    rows = _rows({0.25: [16.0], 0.5: [4.0], 1: [1.0], 4: [1.0], 16: [1.0]})
    spec = {"claim": "c", "kind": "slope", "x": "epsilon", "min": -2.01, "max": -1.99}
    regime = evaluate(CheckSpec.model_validate({**spec, "x_in": [0.25, 0.5, 1]}), rows, [])
    whole = evaluate(CheckSpec.model_validate(spec), rows, [])
    assert regime.measured[0][1] == pytest.approx(-2.0)
    assert regime.verdict == "holds"
    assert whole.verdict == "fails"


def test_x_in_belongs_to_slopes_and_needs_two_values() -> None:
    with pytest.raises(ValidationError, match="x_in"):
        CheckSpec.model_validate({"claim": "c", "kind": "bound", "x_in": [1, 2], "max": 1})
    with pytest.raises(ValidationError, match="x_in"):
        CheckSpec.model_validate(
            {"claim": "c", "kind": "slope", "x": "epsilon", "x_in": [1, 1], "max": 1}
        )


def test_quantile_statistic_and_its_order_statistic_band() -> None:
    rng = np.random.default_rng(5)
    xs = np.abs(rng.standard_normal(20_000))
    value, lo, hi = stat_band(xs.tolist(), "q99")
    assert quantile_level("q99") == 0.99
    assert quantile_level("q999") == 0.999
    assert quantile_level("mse") is None
    assert value == pytest.approx(float(np.quantile(xs, 0.99)))
    # the band holds the true quantile of |Z| (2.5758) and has the order-statistic width:
    # 1.96 √(R q (1 − q)) ranks each side: 2 × 1.96 × √(q(1 − q)/R)/f(q) = 2 × 1.96 ×
    # 0.000704/0.0289 ≈ 0.095 in value (f(q) = 2φ(2.5758), the density of |Z| there)
    assert lo < 2.5758 < hi
    assert 0.06 < hi - lo < 0.14
    assert math.isnan(stat_band([], "q90")[0])


def test_a_quantile_ratio_check_and_unknown_statistics_are_refused() -> None:
    rng = np.random.default_rng(6)
    rows = _rows({1: np.abs(rng.standard_normal(4000)).tolist()})
    check = CheckSpec.model_validate(
        {
            "claim": "Gaussian tail",
            "kind": "ratio",
            "numerator": {"stat": "q90"},
            "denominator": {"stat": "rmse"},
            "min": 1.645 * 0.9,
            "max": 1.645 * 1.1,
        }
    )
    assert evaluate(check, rows, ["protocol", "epsilon"]).verdict == "holds"
    for bad in ("q", "quantile", "q1.5", "p99"):
        with pytest.raises(ValidationError):
            PlotSpec.model_validate({"x": "epsilon", "stat": bad})


def test_a_tuned_minimum_takes_the_best_of_the_listed_tunings() -> None:
    rows = [
        {"protocol": p, "seed": str(s), "error": repr(e)}
        for p, e in (("wme", 1.0), ("hlm-t4", 4.0), ("hlm-t8", 0.5), ("hlm-t16", 0.1))
        for s in range(3)
    ]
    ratio = {
        "claim": "c",
        "kind": "ratio",
        "stat": "mse",
        "numerator": {"where": {"protocol": "wme"}},
        "min": 0,
    }
    # the best of t4 and t8 is t8 (MSE 0.25): 1/0.25; t16 is left out by `among`
    picked = {"best_of": "protocol", "among": ["hlm-t4", "hlm-t8"]}
    check = CheckSpec.model_validate({**ratio, "denominator": picked})
    assert evaluate(check, rows, ["protocol"]).measured[0][1] == pytest.approx(4.0)
    # without `among` every value of the column competes, the numerator's own included
    check = CheckSpec.model_validate({**ratio, "denominator": {"best_of": "protocol"}})
    assert evaluate(check, rows, ["protocol"]).measured[0][1] == pytest.approx(100.0)
    with pytest.raises(ValidationError, match="among"):
        CheckSpec.model_validate({**ratio, "denominator": {"among": ["hlm-t4"]}})


def test_a_tuned_minimum_over_several_grid_columns() -> None:
    # MSE = (t·p − 4)² + 1 over t, p ∈ {1, 2, 4}: the best pair (t·p = 4) gives 1; with t = 1
    # fixed the best p is 4 (MSE 1 as well), with p = 1 the best t is 4
    rows = [
        {"params.bins": str(t), "params.depth": str(p), "seed": "0", "error": repr(v)}
        for t in (1, 2, 4)
        for p in (1, 2, 4)
        for v in [((t * p - 4) ** 2 + 1) ** 0.5]
    ]
    base = {"claim": "c", "kind": "ratio", "stat": "mse", "min": 0}
    both = {"best_of": ["params.bins", "params.depth"]}
    t1 = {"best_of": "params.depth", "where": {"params.bins": 1}}
    coarse = {"best_of": "params.depth", "where": {"params.bins": 2}, "among": [1, 4]}
    check = CheckSpec.model_validate({**base, "numerator": t1, "denominator": both})
    assert evaluate(check, rows, []).measured[0][1] == pytest.approx(1.0)
    check = CheckSpec.model_validate({**base, "numerator": coarse, "denominator": both})
    assert evaluate(check, rows, []).measured[0][1] == pytest.approx(5.0)
    with pytest.raises(ValidationError, match="among"):
        Quantity.model_validate({"best_of": ["params.bins", "params.depth"], "among": [1]})


def test_a_slope_and_a_bound_of_a_tuned_method() -> None:
    # MSE of tuning t at m: (t·m − 1)²/m² + 1/m; the best t at each m is 1/m (MSE 1/m, slope −1),
    # while each fixed t flattens out (slope ≈ 0 for large m); `among` keeps t4 and t8 out
    tunings = {"t1": 1.0, "t0.1": 0.1, "t0.01": 0.01, "t4": 4.0, "t8": 8.0}
    rows = [
        {"protocol": label, "samples": str(m), "seed": "0",
         "error": repr(math.sqrt((t * m - 1) ** 2 / m**2 + 1 / m))}
        for label, t in tunings.items()
        for m in (1, 10, 100)
    ]  # fmt: skip
    among = ["t1", "t0.1", "t0.01"]
    base = {"claim": "c", "stat": "mse", "best_of": "protocol", "among": among}
    slope = CheckSpec.model_validate({**base, "kind": "slope", "x": "samples", "min": -1.01})
    outcome = evaluate(slope, rows, ["protocol", "samples"])
    assert outcome.measured[0][1] == pytest.approx(-1.0)
    bound = CheckSpec.model_validate({**base, "kind": "bound", "max": 1.0})
    outcome = evaluate(bound, rows, ["protocol", "samples"])
    # one value per m (the protocol column is tuned over, not a configuration)
    assert [v for _, v, _ in outcome.measured] == pytest.approx([1.0, 0.1, 0.01])
    # tuned minus tuned: the same tuned curve, so the difference is 0; minus a fixed t4, −1 − 0
    same = {"best_of": "protocol", "among": among}
    twice = CheckSpec.model_validate(
        {**base, "kind": "slope", "x": "samples", "min": -0.01, "max": 0.01, "minus": same}
    )
    assert evaluate(twice, rows, ["protocol", "samples"]).measured[0][1] == pytest.approx(0.0)
    fixed = CheckSpec.model_validate(
        {**base, "kind": "slope", "x": "samples", "max": 0, "minus": {"where": {"protocol": "t4"}}}
    )
    t4 = np.log([(4 * m - 1) ** 2 / m**2 + 1 / m for m in (1, 10, 100)])
    t4_slope = np.polyfit(np.log([1, 10, 100]), t4, 1)[0]
    got = evaluate(fixed, rows, ["protocol", "samples"]).measured[0][1]
    assert got == pytest.approx(-1.0 - t4_slope)
    untuned = CheckSpec.model_validate({**base, "kind": "bound", "max": 1.0, "among": None,
                                        "best_of": None})  # fmt: skip
    assert len(evaluate(untuned, rows, ["protocol", "samples"]).measured) == 15
    with pytest.raises(ValidationError, match="numerator or denominator"):
        CheckSpec.model_validate(
            {**base, "kind": "ratio", "numerator": {}, "denominator": {}, "min": 0}
        )
    with pytest.raises(ValidationError, match="among"):
        CheckSpec.model_validate({"claim": "c", "kind": "bound", "among": ["t1"], "max": 1})


def test_a_difference_of_two_statistics_over_the_same_seeds() -> None:
    # at x the errors are x·(1, …, 100)/100 + x²: the median grows like x², the q90 − median
    # gap ((0.901 − 0.505)·x, np.quantile interpolates) only linearly: its slope is exactly 1
    grid = np.arange(1, 101) / 100
    rows = _rows({x: (x * grid + x * x).tolist() for x in (1.0, 2.0, 4.0)})
    spec = {"claim": "c", "kind": "slope", "x": "epsilon", "min": 0.99, "max": 1.01}
    gap = evaluate(CheckSpec.model_validate({**spec, "stat": "q90 - median"}), rows, [])
    assert gap.measured[0][1] == pytest.approx(1.0)
    assert gap.verdict == "holds"
    assert evaluate(CheckSpec.model_validate({**spec, "stat": "q90"}), rows, []).verdict == "fails"
    bound = CheckSpec.model_validate(
        {"claim": "c", "kind": "bound", "stat": "q90 - median", "max": 1.0}
    )
    measured = evaluate(bound, rows, ["protocol", "epsilon"]).measured
    assert [v for _, v, _ in measured] == pytest.approx([0.396, 0.792, 1.584])
    assert [ok for _, _, ok in measured] == [True, True, False]
    # a ratio side may be one too: (q90 − median)/mean at x = 1 is 0.396/(0.505 + 1)
    ratio = CheckSpec.model_validate(
        {
            "claim": "c",
            "kind": "ratio",
            "where": {"epsilon": "1"},
            "numerator": {"stat": "q90 - median"},
            "denominator": {"stat": "mean"},
            "max": 1,
        }
    )
    assert evaluate(ratio, rows, []).measured[0][1] == pytest.approx(0.396 / 1.505)


def test_the_band_of_a_difference_is_the_conservative_one() -> None:
    xs = np.random.default_rng(7).standard_normal(400).tolist()
    v, lo, hi = stat_band(xs, "q90 - median")
    v90, lo90, hi90 = stat_band(xs, "q90")
    v50, lo50, hi50 = stat_band(xs, "median")
    assert (v, lo, hi) == pytest.approx((v90 - v50, lo90 - hi50, hi90 - lo50))
    # the difference holds the true gap of N(0, 1), z_0.9 − 0 = 1.2816
    assert lo < 1.2816 < hi


def test_differences_are_for_claims_and_name_two_statistics() -> None:
    for bad in ("q90 -", "q90 - ", "q90-median", "q90 - median - mean", "q90 - q"):
        with pytest.raises(ValidationError):
            CheckSpec.model_validate({"claim": "c", "kind": "bound", "stat": bad, "max": 1})
    with pytest.raises(ValidationError):
        PlotSpec.model_validate({"x": "epsilon", "stat": "q90 - median"})


def test_a_slope_minus_another_series_slope() -> None:
    # protocol a falls like x^-1, b like x^-1.5, and a theory column like x^-1 on a's rows:
    # a minus b is +0.5; a minus its theory column is 0
    rows = [
        {"protocol": p, "users": f"{x:g}", "seed": "0", "error": repr(x**k), "theory": repr(t)}
        for p, k in (("a", -0.5), ("b", -0.75))
        for x in (1.0, 4.0, 16.0)
        for t in [x**-1.0]
    ]
    base = {"claim": "c", "kind": "slope", "x": "users", "stat": "mse", "min": 0.49, "max": 0.51}
    versus_b = CheckSpec.model_validate(
        {**base, "where": {"protocol": "a"}, "minus": {"where": {"protocol": "b"}}}
    )
    outcome = evaluate(versus_b, rows, ["protocol", "users"])
    assert outcome.measured[0][1] == pytest.approx(0.5)
    assert outcome.verdict == "holds"
    theory = CheckSpec.model_validate(
        {
            **base,
            "where": {"protocol": "a"},
            "minus": {"y": "theory", "stat": "mean", "where": {"protocol": "a"}},
            "min": -0.01,
            "max": 0.01,
        }
    )
    assert evaluate(theory, rows, ["protocol", "users"]).measured[0][1] == pytest.approx(0.0)
    with pytest.raises(ValidationError, match="minus"):
        CheckSpec.model_validate({**base, "kind": "bound", "minus": {"y": "theory"}})


def test_a_where_value_may_list_several_and_each_is_its_own_group() -> None:
    rows = [
        {"protocol": p, "epsilon": "1", "seed": "0", "error": repr(v)}
        for p, v in (("a", 0.5), ("b", 2.0), ("c", 9.0))
    ]
    check = CheckSpec.model_validate(
        {"claim": "c", "kind": "bound", "where": {"protocol": {"in": ["a", "b"]}}, "max": 1}
    )
    outcome = evaluate(check, rows, ["protocol", "epsilon"])
    assert [(g, v) for g, v, _ in outcome.measured] == [("protocol=a", 0.5), ("protocol=b", 2.0)]
    assert outcome.verdict == "partly"
