"""The user-level randomizers of Zhao et al. 2024 (arXiv:2405.17079) on their worst-case
neighbouring user datasets, for the empirical privacy audit (user-level-ldp.md §4.2 TP3 and TP6,
§6.2 E10; the audit itself is ``fedldp.protocol.mechanisms.audit``).

Each case runs the client code the protocols run (``two_stage``, ``components``, ``baselines``)
on two user datasets that differ entirely (the user-level neighbour relation: the whole local
dataset may change), chosen to put the noiseless messages at the two ends of their range:
all m samples at −D against all at +D. The statistic is the Laplace privacy loss of the message,
``laplace_loss_statistic``. Stage II is audited conditionally on a stage-one interval strictly
inside (−D, D), as the sequentially interactive definition asks (§4.1): the interval is public,
a function of other users' reports. ``…-outside`` cases feed samples at 100·D (TP6): the clamp and
clip must keep the message's law.

Fixed public constants: D = 1, m = 256 samples (B = 8 stage-one bins) and N_ref = 16 000 for
Alg 1; C = 8 components over 128 000 users for Alg 2 (the §3.3 regime of the audited ε decides
how many components a user serves); m = 8 for the baselines (the item-level baseline draws m
Laplace values per user).
"""

from __future__ import annotations

import numpy as np

from fedldp.protocol.core.base.records import FloatArray
from fedldp.protocol.mechanisms.audit import AuditCase, Draw, laplace_loss_statistic
from fedldp.protocol.user_level import components as comp
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.baselines import (
    BaselineClippedLaplace,
    BaselineItemLevel,
    BaselineOneSample,
    BaselineParams,
)
from fedldp.protocol.user_level.layout import Families, choose_layout

__all__ = ["AUDITS"]

_BOUND = 1.0
_M = 256
_N_REF = 16_000
_COMPONENTS = 8
_N_MULTI = 128_000
_M_BASELINE = 8
_OUTSIDE = 100.0


def _design() -> ts.Design:
    return ts.bounded_design(_BOUND, _M, _N_REF)


def _interval(design: ts.Design) -> tuple[float, float]:
    """[lo, hi] of a stage-one answer k̂ in the middle bin: inside (−D, D) for m = 256."""
    _k, left, right = ts.select_interval(np.eye(design.n_bins)[design.n_bins // 2], design)
    return float(left) - design.delta, float(right) + design.delta


def _means(draws: int, scale: float) -> tuple[FloatArray, FloatArray]:
    return np.full(draws, -scale * _BOUND), np.full(draws, scale * _BOUND)


def _stage_one(eps: float, draws: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    design = _design()
    a, b = _means(draws, 1.0)
    e = np.full(draws, eps)
    va, vb = ts.stage_one_vector(a[:1], design)[0], ts.stage_one_vector(b[:1], design)[0]
    za = ts.stage_one_report(a, design, e, rng)
    zb = ts.stage_one_report(b, design, e, rng)
    return laplace_loss_statistic(za, va, vb), laplace_loss_statistic(zb, va, vb)


def _stage_two(scale: float, heavy: bool = False) -> Draw:
    def draw(eps: float, draws: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
        design = (
            ts.heavy_tail_design(3.0, 3.2, _M, _N_REF, float(_N_REF) * eps * eps)
            if heavy
            else _design()
        )
        lo, hi = _interval(design) if not heavy else (-design.width / 2, design.width / 2)
        radius = design.bound if heavy else None
        a, b = _means(draws, scale * design.bound)
        e = np.full(draws, eps)
        za = ts.stage_two_report(a, lo, hi, e, rng, radius)
        zb = ts.stage_two_report(b, lo, hi, e, rng, radius)
        return laplace_loss_statistic(za, [lo], [hi]), laplace_loss_statistic(zb, [lo], [hi])

    return draw


def _multi(stage: int, scale: float) -> Draw:
    """Alg 2 (ℓ∞): a member of group 0 of the §3.3 layout at this ε sends its r_0 components."""

    def draw(eps: float, draws: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
        layout = choose_layout(_COMPONENTS, eps, _N_MULTI)
        design = _design()
        families = Families((design,), np.zeros(_COMPONENTS, dtype=np.int64))
        group = np.zeros(draws, dtype=np.int64)
        charge = np.full(draws, float(layout.charge_fractions()[0]) * eps)
        a = np.full((draws, _COMPONENTS), -scale * _BOUND)
        b = np.full((draws, _COMPONENTS), scale * _BOUND)
        if stage == 1:
            za = comp.stage_one_reports(a, layout, families, group, charge, rng)
            zb = comp.stage_one_reports(b, layout, families, group, charge, rng)
            one = np.zeros((layout.r_max, design.n_bins))
            va, vb = one.copy(), one.copy()
            real = np.arange(layout.r_max) < layout.counts[0]
            va[real, 0] = 1.0
            vb[real, design.n_bins - 1] = 1.0
        else:
            lo, hi = _interval(design)
            interval = {"lo": [lo] * _COMPONENTS, "hi": [hi] * _COMPONENTS}
            za = comp.stage_two_reports(a, layout, families, interval, group, charge, rng)
            zb = comp.stage_two_reports(b, layout, families, interval, group, charge, rng)
            real = np.arange(layout.r_max) < layout.counts[0]
            va, vb = np.where(real, lo, 0.0), np.where(real, hi, 0.0)
        return laplace_loss_statistic(za, va, vb), laplace_loss_statistic(zb, va, vb)

    return draw


def _baseline(protocol: BaselineItemLevel | BaselineOneSample | BaselineClippedLaplace) -> Draw:
    params = BaselineParams(samples_per_user=_M_BASELINE, bound=_BOUND)

    def draw(eps: float, draws: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
        a = np.full((draws, _M_BASELINE), -_BOUND)
        e = np.full(draws, eps)
        za = protocol.report(params, a, e, rng)
        zb = protocol.report(params, -a, e, rng)
        return (
            laplace_loss_statistic(za, [-_BOUND], [_BOUND]),
            laplace_loss_statistic(zb, [-_BOUND], [_BOUND]),
        )

    return draw


AUDITS: tuple[AuditCase, ...] = (
    AuditCase("alg1-stage-one", "Alg 1 stage I: e_bin(clamp(Ȳ)) + Lap(2/ε)^B, B = 8", _stage_one),
    AuditCase(
        "alg1-stage-two",
        "Alg 1 stage II: clip(Ȳ, lo, hi) + Lap((hi − lo)/ε), [lo, hi] ⊂ (−D, D)",
        _stage_two(1.0),
    ),
    AuditCase(
        "alg1-stage-two-outside",
        "Alg 1 stage II on samples at ±100·D (TP6: the clip keeps the law)",
        _stage_two(_OUTSIDE),
    ),
    AuditCase(
        "alg1-ht-stage-two",
        "Alg 1-HT stage II (p = 3, M_3 = 3.2) on samples at ±100·D: clamp to [−D, D], then clip",
        _stage_two(_OUTSIDE, heavy=True),
    ),
    AuditCase(
        "alg2-stage-one",
        "Alg 2 (d = 8) stage I: a user's r components, each e_bin + Lap(2/ε_c)^B",
        _multi(1, 1.0),
    ),
    AuditCase(
        "alg2-stage-two",
        "Alg 2 (d = 8) stage II: a user's r components, each clip + Lap((hi − lo)/ε_c)",
        _multi(2, 1.0),
    ),
    AuditCase(
        "baseline-clipped-laplace",
        "B0: clip(Ȳ, −D, D) + Lap(2D/ε)",
        _baseline(BaselineClippedLaplace()),
    ),
    AuditCase(
        "baseline-one-sample",
        "B2: one sample + Lap(2D/ε)",
        _baseline(BaselineOneSample()),
    ),
    AuditCase(
        "baseline-item-level",
        "B1: the mean of m samples each + Lap(2Dm/ε) (a sum of Laplace laws: loss < ε on "
        "every event of positive probability, so not tight)",
        _baseline(BaselineItemLevel()),
        tight=False,
    ),
)
"""The user-level randomizers' audit cases, by name (``fedldp.protocol.catalogue.AUDITS``)."""
