"""Exact privacy of every message of the Alg-2 engine (user-level-ldp.md §4.1, §4.2 TP1, TP2, TP5,
TP6): a user's whole report in a round, over all its components, is a Laplace mechanism whose
log-likelihood ratio between any two local datasets is at most the ε it is charged, and reaches it.

The client code is run with a noise source that returns a known standard Laplace array, so the
noise scale it used per component is read off exactly; the log-ratio of the report's density is
then computed in closed form for the two datasets that put every component at opposite ends.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest

from fedldp.protocol.core.base.records import FloatArray
from fedldp.protocol.core.streams import RandomSource
from fedldp.protocol.user_level import components as comp
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.layout import Families, Layout, choose_layout

M, N_REF = 64, 10_000


class _Fixed:
    def __init__(self, value: float) -> None:
        self.value = value

    def laplace(self, loc: float, scale: float, size: tuple[int, ...]) -> FloatArray:
        return np.full(size, self.value)


def known_noise(value: float) -> RandomSource:
    """A noise source whose standard Laplace draws all equal ``value`` (duck-typed)."""
    return cast(RandomSource, _Fixed(value))


def _setup(n_components: int, epsilon: float) -> tuple[Layout, Families]:
    layout = choose_layout(n_components, epsilon, N_REF)
    design = ts.bounded_design(1.0, M, N_REF)
    return layout, Families((design,), np.zeros(n_components, dtype=np.int64))


def _log_ratio(z: FloatArray, a: FloatArray, b: FloatArray, scale: FloatArray) -> float:
    """log p(z | a) − log p(z | b) for independent Laplace coordinates of scales ``scale``."""
    return float(np.sum((np.abs(z - b) - np.abs(z - a)) / scale))


@pytest.mark.parametrize(("c", "epsilon"), [(6, 0.5), (6, 2.5), (6, 400.0), (3, 7.0)])
def test_stage_one_report_is_charge_ldp_and_tight(c: int, epsilon: float) -> None:
    layout, families = _setup(c, epsilon)
    group = np.zeros(1, dtype=np.int64)  # group 0 has the most components
    r = int(layout.counts[0])
    charge = np.array([epsilon * layout.charge_fractions()[0]])
    low, high = np.full((1, c), -1.0), np.full((1, c), 1.0)  # every component at an end

    def report(values: FloatArray, noise: float) -> FloatArray:
        return comp.stage_one_reports(values, layout, families, group, charge, known_noise(noise))

    v_low, v_high = report(low, 0.0)[0, :r], report(high, 0.0)[0, :r]  # the one-hot messages
    scale = (report(low, 1.0) - report(low, 0.0))[0, :r]
    eps_c = charge[0] / r
    assert np.allclose(scale, 2.0 / eps_c)  # Lap(2/ε_c) on every bin (§4.1 Stage I)
    assert np.isclose(r * eps_c, charge[0])  # the components compose to the charge (TP5)
    rng = np.random.default_rng(1)
    for _ in range(200):  # any output: log-ratio <= charge
        z = v_low + rng.laplace(0, scale)
        assert _log_ratio(z, v_low, v_high, scale) <= charge[0] + 1e-9
    extreme = v_low + np.where(v_low > v_high, 10.0, -10.0) * scale
    assert _log_ratio(extreme, v_low, v_high, scale) == pytest.approx(charge[0])  # tight
    assert np.all(report(low, 0.0)[0, r:] == 0.0)  # padding carries nothing


@pytest.mark.parametrize(("c", "epsilon"), [(6, 0.5), (6, 2.5), (6, 400.0)])
def test_stage_two_report_is_charge_ldp_and_tight(c: int, epsilon: float) -> None:
    layout, families = _setup(c, epsilon)
    group = np.zeros(1, dtype=np.int64)
    r = int(layout.counts[0])
    charge = np.array([epsilon * layout.charge_fractions()[0]])
    interval = {"lo": np.linspace(-0.5, 0.0, c).tolist(), "hi": np.linspace(0.2, 0.9, c).tolist()}

    def report(values: FloatArray, noise: float) -> FloatArray:
        return comp.stage_two_reports(
            values, layout, families, interval, group, charge, known_noise(noise)
        )

    wild_low, wild_high = np.full((1, c), -100.0), np.full((1, c), 100.0)  # out of support (TP6)
    v_low, v_high = report(wild_low, 0.0)[0, :r], report(wild_high, 0.0)[0, :r]
    assert np.allclose(v_low, interval["lo"][:r])
    assert np.allclose(v_high, interval["hi"][:r])  # clipped to [lo, hi]
    scale = (report(wild_low, 1.0) - report(wild_low, 0.0))[0, :r]
    width = np.asarray(interval["hi"][:r]) - np.asarray(interval["lo"][:r])
    assert np.allclose(scale, width / (charge[0] / r))  # Lap((hi − lo)/ε_c) (§4.1 Stage II)
    extreme = v_low - 10.0 * scale
    assert _log_ratio(extreme, v_low, v_high, scale) == pytest.approx(charge[0])
    rng = np.random.default_rng(2)
    for _ in range(200):
        z = v_high + rng.laplace(0, scale)
        assert abs(_log_ratio(z, v_low, v_high, scale)) <= charge[0] + 1e-9


def test_stage_one_clamps_out_of_support_means_into_a_bin() -> None:
    """TP6: a mean of 100·D lands in the last bin, −100·D in the first: a one-hot vector."""
    layout, families = _setup(2, 0.5)
    group = np.array([0, 1])
    z = comp.stage_one_reports(
        np.array([[100.0, 0.0], [0.0, -100.0]]), layout, families, group, np.ones(2) * 0.5,
        known_noise(0.0),
    )  # fmt: skip
    assert z[0, 0].tolist() == [0.0] * (families.n_bins - 1) + [1.0]
    assert z[1, 0].tolist() == [1.0] + [0.0] * (families.n_bins - 1)
