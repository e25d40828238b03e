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

``CLIENT_AUDITS``: the end-to-end cases (``fedldp.protocol.mechanisms.audit.ClientAudit``) of
every user-level catalogue protocol and round kind: the protocol's own ``privatize`` at the ε its
plan charges, stage two with the interval stage one found on a background population whose users
all hold the middle of the range (so the interval lies strictly inside it and the ends of the
range clip to its ends). The neighbours are two whole local datasets (user-level LDP): every
sample at one end of its range against every sample at the other end, which puts each component
the user serves at opposite ends of its bound; the statistic is the ℓ1 privacy loss of the
Laplace report, every coordinate in units of its noiseless difference
(``fedldp.protocol.mechanisms.audit.scaled_loss``). Stage one's message is a one-hot bin plus
Laplace noise per component, stage two's a clipped mean plus Laplace noise per component; a
user serves r components at ε/r each in the §3.3 low regime (chosen by ``reference_epsilon`` for
``user-mean-linf``, ``-l1`` and ``user-classify``, to audit that composition) and one at its
whole charge in the high regime (``user-frequency``, ``user-regress``: the member audited serves
the component the two datasets move end to end).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedldp.protocol.api import (
    AuditCase,
    ClientAudit,
    ClientStep,
    Draw,
    FloatArray,
    Protocol,
    UserData,
    client_step,
    laplace_loss_statistic,
    one_user,
    scaled_loss,
)
from fedldp.protocol.user_level import components as comp
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.baselines import (
    BaselineClippedLaplace,
    BaselineItemLevel,
    BaselineOneSample,
    BaselineParams,
)
from fedldp.protocol.user_level.binned import UserClassify, UserRegress
from fedldp.protocol.user_level.layout import Families, choose_layout
from fedldp.protocol.user_level.means import UserMean
from fedldp.protocol.user_level.multi_d import UserFrequency, UserMeanL1, UserMeanL2, UserMeanLinf
from fedldp.protocol.user_level.sgd import UserSgd

__all__ = ["AUDITS", "CLIENT_AUDITS"]

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


# --------------------------------------------------------------------------- end to end

_M_CLIENT = 256
"""m of the end-to-end cases: B = 8 stage-one bins of width h = D/4, so the stage-two interval
(three bins widened by Δ on each side, width 3h + 2Δ) lies strictly inside [−D, D] and the ends
of the range clip to its ends (with m = 64 it is wider than the range, and the ends do not
reach it: not tight)."""
_LOW = 20.0
"""reference_epsilon of the §3.3 low regime (ε_ref >= C ln n for C = 2, n < e^10): one group,
every member serves all C components at ε/C."""
_HIGH = 0.5
"""reference_epsilon of the §3.3 high regime (ε_ref < 1): C groups of one component, served at
the member's whole charge."""


def _users(n: int, one: UserData) -> UserData:
    """``n`` users holding ``one``'s dataset."""
    return one.take(np.zeros(n, dtype=np.int64))


def _setup(
    protocol: Protocol[Any],
    params: Mapping[str, Any],
    n: int,
    background: UserData,
    round_index: int,
    group: int | None = None,
) -> Callable[[float], ClientStep]:
    def setup(eps: float) -> ClientStep:
        return client_step(protocol, params, eps, _users(n, background), round_index, group=group)

    return setup


def _two_stage(
    protocol: Protocol[Any],
    params: Mapping[str, Any],
    n: int,
    background: UserData,
    a: UserData,
    b: UserData,
    summary: str,
    *,
    group: int | None = None,
    tight: tuple[bool, bool] = (True, True),
    variant: str = "",
) -> tuple[ClientAudit, ...]:
    """The stage-one and stage-two cases of an Alg-1/Alg-2 protocol (``tight`` for each)."""
    return tuple(
        ClientAudit(
            protocol.name,
            stage,
            summary,
            _setup(protocol, params, n, background, k, group),
            a,
            b,
            scaled_loss,
            tight[k],
            variant,
        )
        for k, stage in enumerate(("stage-1", "stage-2"))
    )


def _scalars(value: float, m: int = _M_CLIENT) -> UserData:
    return one_user(np.full(m, value))


def _vectors(value: Any, m: int = _M_CLIENT) -> UserData:
    return one_user(np.tile(np.asarray(value, dtype=np.float64), (m, 1)))


def _labeled(x: float, y: Any, m: int = _M_CLIENT) -> UserData:
    return one_user(np.full((m, 1), x), np.resize(np.asarray(y, dtype=np.float64), m))


def _baseline_case(protocol: Protocol[Any], tight: bool, summary: str) -> ClientAudit:
    params = {"samples_per_user": _M_BASELINE, "bound": _BOUND}
    return ClientAudit(
        protocol.name,
        "report",
        summary,
        _setup(protocol, params, 2, _scalars(0.0, _M_BASELINE), 0),
        _scalars(-_BOUND, _M_BASELINE),
        _scalars(_BOUND, _M_BASELINE),
        scaled_loss,
        tight,
    )


_ENDS = "every sample at −D against every sample at +D"

CLIENT_AUDITS: tuple[ClientAudit, ...] = (
    *_two_stage(
        UserMean(),
        {"samples_per_user": _M_CLIENT, "bound": _BOUND},
        1_200,
        _scalars(0.0),
        _scalars(-_BOUND),
        _scalars(_BOUND),
        f"Alg 1, m = {_M_CLIENT}: {_ENDS}",
    ),
    *_two_stage(
        UserMean(),
        {"samples_per_user": _M_CLIENT, "heavy_tail": True, "moment_p": 3.0, "moment_bound": 3.2},
        1_200,
        _scalars(0.0),
        _scalars(-_OUTSIDE),
        _scalars(_OUTSIDE),
        f"Alg 1-HT (p = 3, M_3 = 3.2), m = {_M_CLIENT}: every sample at −100 against +100 (TP6: "
        "the clamp to [−D, D] and the clip keep the law)",
        variant="heavy-tail",
    ),
    _baseline_case(BaselineClippedLaplace(), True, f"B0, m = {_M_BASELINE}: {_ENDS}"),
    _baseline_case(BaselineOneSample(), True, f"B2, m = {_M_BASELINE}: {_ENDS}"),
    _baseline_case(
        BaselineItemLevel(),
        False,
        f"B1, m = {_M_BASELINE}: {_ENDS} (the mean of m Laplace draws: loss < ε on every event "
        "of positive probability, so not tight)",
    ),
    *_two_stage(
        UserMeanLinf(),
        {"samples_per_user": _M_CLIENT, "dimension": 2, "reference_epsilon": _LOW},
        2_600,
        _vectors([0.0, 0.0]),
        _vectors([-_BOUND, -_BOUND]),
        _vectors([_BOUND, _BOUND]),
        f"Alg 2 (ℓ∞, d = 2, low regime: both coordinates at ε/2): {_ENDS} on each coordinate",
    ),
    *_two_stage(
        UserMeanL2(),
        {"samples_per_user": 16, "dimension": 2, "reference_epsilon": _HIGH},
        3_000,
        _vectors([0.0, 0.0], 16),
        _vectors([_BOUND, 0.0], 16),
        _vectors([-_BOUND, 0.0], 16),
        "Alg 2-K (d = 2, m = 16, high regime: one Kashin coefficient per user): every sample at "
        "D·e_1 against every sample at −D·e_1 (stage one is tight: B = 2 bins, the coefficient "
        "changes sign; stage two is not: a coefficient of a point need not reach its bound "
        "K·D/√d)",
        tight=(True, False),
    ),
    *_two_stage(
        UserMeanL1(),
        {"samples_per_user": _M_CLIENT, "dimension": 2, "reference_epsilon": _LOW},
        2_600,
        _vectors([0.0, 0.0]),
        _vectors([_BOUND, 0.0]),
        _vectors([-_BOUND, 0.0]),
        "Alg 2-H (d = 2, low regime): every sample at D·e_1 against −D·e_1 (every Hadamard "
        "coefficient ±D/√2, at its bound)",
    ),
    *_two_stage(
        UserFrequency(),
        {"samples_per_user": _M_CLIENT, "domain_size": 2, "reference_epsilon": _HIGH},
        3_000,
        one_user(np.resize([0, 1], _M_CLIENT)),
        one_user(np.zeros(_M_CLIENT, dtype=np.int64)),
        one_user(np.ones(_M_CLIENT, dtype=np.int64)),
        "Alg 2-H on A = 2 items (high regime), a member of group 1, which serves the Hadamard "
        "coefficient that items 0 and 1 move from +1/√2 to −1/√2: every sample item 0 against "
        "every sample item 1",
        group=1,
    ),
    *_two_stage(
        UserSgd(),
        {
            "samples_per_user": _M_CLIENT,
            "dimension": 1,
            "mean_estimator": "linf",
            "rounds": 1,
        },
        1_200,
        _labeled(1.0, 0.0),
        _labeled(1.0, 10.0),
        _labeled(1.0, -10.0),
        "Alg 3 (d = 1, ℓ∞ estimator, one gradient round at θ_0 = 0): every sample (x, y) = "
        "(1, 10) against (1, −10), gradients clipped to −D and +D",
    ),
    *_two_stage(
        UserClassify(),
        {"samples_per_user": _M_CLIENT, "bins_per_axis": 2, "reference_epsilon": _LOW},
        2_600,
        _labeled(0.1, [1.0, -1.0]),
        _labeled(0.1, 1.0),
        _labeled(0.1, -1.0),
        "Alg 4 (d = 1, M = 2 bins, low regime: both Hadamard encodings at ε/2): every sample "
        "in bin 0 with label +1 against −1 (every encoding y·H_{k,0} = ±1, at its bound)",
    ),
    *_two_stage(
        UserRegress(),
        {"samples_per_user": _M_CLIENT, "bins_per_axis": 2, "reference_epsilon": _HIGH},
        3_200,
        _labeled(0.1, [1.0, -1.0]),
        _labeled(0.1, 1.0),
        _labeled(0.1, -1.0),
        "Alg 5 (d = 1, M = 2, T = 1, high regime), a member of group 0, which serves the label "
        "encoding U_0: every sample in bin 0 with label +T against −T",
        group=0,
    ),
)
"""The user-level protocols' end-to-end cases (``fedldp.protocol.catalogue.CLIENT_AUDITS``)."""
