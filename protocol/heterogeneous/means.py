"""The mean protocols of Aliakbarpour, Fallah, Roy, Stevens 2025, "High-Probability Bounds for
Heterogeneous Local Differential Privacy" (arXiv:2510.11895; spec heterogeneous-ldp.md), as
catalogue protocols: scalar means by Laplace (Alg 1) and by randomized response (Algs 2, 2′), and
d-dimensional means by Duchi et al.'s mechanism (Algs 3, 4), each user at its own ε_i, on the
one-round flow of ``fedldp.protocol.heterogeneous.flow``.

The paper's users hold one point; a user here may hold several samples and feeds its local mean
into the one-point mechanism, so its report is ε_i-LDP for the whole local dataset (user-level
privacy) and the target is the population mean of the per-user means.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from fedldp.protocol.api import (
    JSON,
    BoolArray,
    DataKind,
    FloatArray,
    IntArray,
    PayloadKind,
    Plan,
    Protocol,
    RandomSource,
    ReportChunk,
    RoundTask,
    UserData,
    around,
    check_epsilons,
    duchi_radius,
    duchi_report,
    from_unit,
    laplace_mean_report,
    laplace_reach,
    laplace_scale,
    one_bit_report,
    randomized_response,
    rr_debias,
    valid_payloads,
)
from fedldp.protocol.core.base.bounds import Location, Scale, check_range
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.heterogeneous import estimators as est
from fedldp.protocol.heterogeneous.flow import WEIGHTS_TEXT, HeteroParams, HeteroProtocol

__all__ = [
    "PROTOCOLS",
    "DuchiParams",
    "HeteroDuchiMean",
    "HeteroLaplaceMean",
    "HeteroRRMean",
    "LaplaceParams",
    "RRParams",
]


class LaplaceParams(HeteroParams):
    lo: Location = Field(-1.0, description="lower end of the data range")
    hi: Location = Field(1.0, description="upper end of the data range")
    clip: bool = Field(True, description="clip the estimate into [lo, hi]")

    @model_validator(mode="after")
    def _range(self) -> LaplaceParams:
        check_range(self.lo, self.hi, "hi > lo")
        return self


class RRParams(HeteroParams):
    input: Literal["binary", "interval"] = Field(
        "interval",
        description="interval: Alg 2′ on [-1, 1] (RR itself on ±1 values); binary: Alg 2, "
        "which also checks that every local mean is exactly ±1",
    )
    clip: bool = Field(True, description="clip the estimate into [-1, 1]")


class DuchiParams(HeteroParams):
    # a report is a d-vector of float64 (32 KiB at 4096), as for user-mean-linf
    dimension: int = Field(ge=1, le=4096, description="d: dimension of the data")
    radius: Scale = Field(1.0, description="r: data lie in the ball B^d(r)")
    project: bool = Field(True, description="project the estimate onto B^d(r)")


def _local_means(data: UserData, d: int | None = None) -> FloatArray:
    values = np.asarray(data.values, dtype=np.float64)
    want = 1 if d is None else 2
    if values.ndim != want or (d is not None and values.shape[1] != d):
        shape = "scalars" if d is None else f"vectors of dimension {d}"
        raise ValueError(f"this protocol takes {shape}, got samples of shape {values.shape[1:]}")
    if not np.all(np.isfinite(values)):
        raise ValueError("data must be finite")
    return data.user_means(values)


# --------------------------------------------------------------------------- Alg 1


class HeteroLaplaceMean(HeteroProtocol[LaplaceParams]):
    """Alg 1 (§2.1): Y_i = X'_i + Lap(2/ε_i), X'_i the user's local mean mapped from [lo, hi]
    to [-1, 1] and clipped (user-level ε_i-LDP whatever the local dataset). Error bar: the
    [DERIVED] Laplace bound of §4.2(b), rigorous."""

    name: ClassVar[str] = "hetero-mean-laplace"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "lo",
        "hi",
        lo="the data range [lo, hi]: map the user's mean x to u = (2x - lo - hi)/(hi - lo), "
        "then clip u to [-1, 1]",
        hi="see lo",
    )
    summary: ClassVar[str] = (
        "Scalar mean under per-user ε: each user's local mean, mapped to [-1, 1] and clipped, "
        "plus Laplace(2/ε_i) noise; weighted average of the reports."
    )
    source: ClassVar[str] = "Aliakbarpour et al. 2025 (arXiv:2510.11895), Alg. 1, Thm 2.1"
    heterogeneity: ClassVar[str] = (
        "θ̂ = Σ a_i Y_i / Σ a_i with a_i = ε_i²/(1+ε_i²) (paper) or 1/(1 + 8/ε_i²) "
        "(inverse_variance); " + WEIGHTS_TEXT + " A user with several samples reports its "
        "local mean (user-level ε_i-LDP)."
    )
    data_kind: ClassVar[DataKind] = "scalar"
    params_model = LaplaceParams
    mechanism: ClassVar[est.Mechanism] = "laplace"
    payload_kind: ClassVar[PayloadKind] = "scalar"

    def message(self, params: LaplaceParams, plan: Plan) -> JSON:
        return {"lo": params.lo, "hi": params.hi}

    def report(
        self,
        params: LaplaceParams,
        task: RoundTask,
        data: UserData,
        eps: FloatArray,
        rng: RandomSource,
    ) -> FloatArray:
        return laplace_mean_report(_local_means(data), eps, rng, params.lo, params.hi)

    def report_bounds(
        self, params: LaplaceParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """[−1, 1] (the clipped unit-scale mean) ± the reach of Lap(2/ε_i)."""
        return around(-1.0, 1.0, laplace_reach(laplace_scale(2.0, check_epsilons(epsilon))), 0)

    bar_kind: ClassVar[str] = "laplace-chernoff"

    def add(
        self, params: LaplaceParams, broadcast: JSON, acc: est.Accumulator, chunk: ReportChunk
    ) -> None:
        eps = chunk.epsilon
        a = est.weights("laplace", eps, params.weights)
        acc.add(eps, a, est.report_spread("laplace", eps), chunk.payloads)

    def finish(
        self, params: LaplaceParams, broadcast: JSON, acc: est.Accumulator
    ) -> tuple[Any, float, JSON]:
        raw = float(acc.mean())
        unit = min(1.0, max(-1.0, raw)) if params.clip else raw
        half = (params.hi - params.lo) / 2.0  # the [-1, 1] bounds scale back to [lo, hi]
        width = est.laplace_half_width(
            acc.sum_w2, acc.sum_w2_spread2, acc.max_w_spread, params.beta
        )
        extra = {
            "raw_estimate": float(from_unit(raw, params.lo, params.hi)),
            "variance_bound": half**2 * (acc.sum_w2 + 2.0 * acc.sum_w2_spread2),
        }
        return float(from_unit(unit, params.lo, params.hi)), half * width, extra


# --------------------------------------------------------------------------- Alg 2 / 2′


class HeteroRRMean(HeteroProtocol[RRParams]):
    """Alg 2 (§2.2) on ±1 values, or Alg 2′ (stochastic rounding, then RR) on [-1, 1].

    ``binary``: the user's local mean must be exactly ±1 (RR on other values leaks |x|, §2.2);
    ``interval``: the local mean clipped to [-1, 1]. Error bar: Hoeffding, §4.2(a), exact."""

    name: ClassVar[str] = "hetero-mean-rr"
    broadcast_fields: ClassVar[Mapping[str, str]] = described("input")
    summary: ClassVar[str] = (
        "Scalar mean under per-user ε with one bit per user: randomized response on ±1 data "
        "(input='binary') or on the stochastically rounded local mean (input='interval')."
    )
    source: ClassVar[str] = (
        "Aliakbarpour et al. 2025 (arXiv:2510.11895), Alg. 2, Thm 2.2; Alg. 2′ of the spec §2.2"
    )
    heterogeneity: ClassVar[str] = (
        "θ̂ = Σ a_i c_i Y_i / Σ a_i with c_i = 1/tanh(ε_i/2) and a_i = 1/c_i² = tanh²(ε_i/2) "
        "(paper and inverse_variance); " + WEIGHTS_TEXT + " input='binary': each user's "
        "local mean must be exactly ±1 (one ±1 sample, or all samples equal); input='interval': "
        "the local mean clipped to [-1, 1] (user-level ε_i-LDP)."
    )
    data_kind: ClassVar[DataKind] = "scalar"
    params_model = RRParams
    mechanism: ClassVar[est.Mechanism] = "rr"
    payload_kind: ClassVar[PayloadKind] = "bit"

    def message(self, params: RRParams, plan: Plan) -> JSON:
        return {"input": params.input}

    def report(
        self, params: RRParams, task: RoundTask, data: UserData, eps: FloatArray, rng: RandomSource
    ) -> FloatArray:
        means = _local_means(data)
        if params.input == "interval":
            return one_bit_report(means, eps, rng)
        if not np.all(np.abs(means) == 1.0):
            raise ValueError(
                "input='binary' needs every user's local mean to be exactly -1 or +1 "
                "(randomized response on other values leaks |x|); use input='interval'"
            )
        return randomized_response(means, eps, rng)

    def check(
        self, params: RRParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        ok = valid_payloads(task, payloads)
        return np.asarray(ok & (np.abs(np.nan_to_num(payloads)) == 1.0), dtype=np.bool_)

    def report_bounds(
        self, params: RRParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """A ±1 bit (bounded: nothing is refused beyond ``check``)."""
        return np.array(-1.0), np.array(1.0)

    bar_kind: ClassVar[str] = "hoeffding"

    def add(
        self, params: RRParams, broadcast: JSON, acc: est.Accumulator, chunk: ReportChunk
    ) -> None:
        c_i = rr_debias(chunk.epsilon)
        a = est.weights("rr", chunk.epsilon, params.weights)
        acc.add(chunk.epsilon, a, c_i, c_i * chunk.payloads)

    def finish(
        self, params: RRParams, broadcast: JSON, acc: est.Accumulator
    ) -> tuple[Any, float, JSON]:
        raw = float(acc.mean())
        value = min(1.0, max(-1.0, raw)) if params.clip else raw
        width = est.rr_half_width(acc.sum_w2_spread2, params.beta)
        return value, width, {"raw_estimate": raw, "variance_bound": acc.sum_w2_spread2}


# --------------------------------------------------------------------------- Alg 3 + 4


class HeteroDuchiMean(HeteroProtocol[DuchiParams]):
    """Alg 3 (server) with Alg 4 (client, B = c_i·r/κ_d [FIX], §2.3) for data in B^d(r).

    Each user privatizes its local mean, projected onto B^d(r). Error bar: the CLT approximation
    sqrt(Σ w_i² B_i²·χ²_{d,1−β}/d) in ℓ2 (approximate: the paper's constants are not explicit)."""

    name: ClassVar[str] = "hetero-mean-duchi"
    broadcast_fields: ClassVar[Mapping[str, str]] = described("dimension", "radius")
    summary: ClassVar[str] = (
        "d-dimensional mean in the ball B^d(r) under per-user ε: Duchi et al.'s hemisphere "
        "randomizer on each user's local mean; weighted average of the reports."
    )
    source: ClassVar[str] = (
        "Aliakbarpour et al. 2025 (arXiv:2510.11895), Algs. 3–4, Thm 3.1 (B corrected, spec §2.3)"
    )
    heterogeneity: ClassVar[str] = (
        "θ̂ = Σ a_i Y_i / Σ a_i with a_i = ε_i² (paper; over-weights ε > 1, spec §2.6) or "
        "tanh²(ε_i/2) ∝ 1/B_i² (inverse_variance); " + WEIGHTS_TEXT + " A user with several "
        "samples reports its local mean, projected onto B^d(r) (user-level ε_i-LDP)."
    )
    data_kind: ClassVar[DataKind] = "vector"
    params_model = DuchiParams
    population_probe: ClassVar[Mapping[str, Any]] = {"dimension": 1}
    mechanism: ClassVar[est.Mechanism] = "duchi"
    payload_kind: ClassVar[PayloadKind] = "vector"

    def payload_shape(self, params: DuchiParams) -> tuple[int, ...]:
        return (params.dimension,)

    def message(self, params: DuchiParams, plan: Plan) -> JSON:
        return {"dimension": params.dimension, "radius": params.radius}

    def report(
        self,
        params: DuchiParams,
        task: RoundTask,
        data: UserData,
        eps: FloatArray,
        rng: RandomSource,
    ) -> FloatArray:
        return duchi_report(_local_means(data, params.dimension), eps, rng, params.radius)

    def check(
        self, params: DuchiParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        ok = valid_payloads(task, payloads)
        eps = est.capped_epsilons(epsilon, params.eps_cap)
        b = duchi_radius(eps, params.dimension, params.radius)
        norm = np.linalg.norm(np.nan_to_num(payloads), axis=1)
        return np.asarray(ok & (np.abs(norm - b) <= 1e-9 * b), dtype=np.bool_)

    def report_bounds(
        self, params: DuchiParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Each coordinate of a report on the sphere of radius B_i lies in [−B_i, B_i] (bounded:
        nothing is refused beyond ``check``)."""
        eps = est.capped_epsilons(epsilon, params.eps_cap)
        b = duchi_radius(eps, params.dimension, params.radius)
        return around(0.0, 0.0, b, 1)

    bar_kind: ClassVar[str] = "clt"
    bar_approximate: ClassVar[bool] = True
    bar_norm: ClassVar[str] = "l2"

    def num_shape(self, params: DuchiParams, broadcast: JSON) -> tuple[int, ...]:
        return (params.dimension,)

    def add(
        self, params: DuchiParams, broadcast: JSON, acc: est.Accumulator, chunk: ReportChunk
    ) -> None:
        eps, d, r = chunk.epsilon, params.dimension, params.radius
        a = est.weights("duchi", eps, params.weights)
        acc.add(eps, a, est.report_spread("duchi", eps, d=d, r=r), chunk.payloads)

    def finish(
        self, params: DuchiParams, broadcast: JSON, acc: est.Accumulator
    ) -> tuple[Any, float, JSON]:
        raw = acc.mean()
        value = est.project_ball(raw, params.radius) if params.project else raw
        width = est.duchi_clt_half_width(acc.sum_w2_spread2, params.dimension, params.beta)
        extra = {"raw_estimate": est.as_float_list(raw), "variance_bound": acc.sum_w2_spread2}
        return est.as_float_list(value), width, extra


PROTOCOLS: tuple[Protocol[Any], ...] = (
    HeteroLaplaceMean(),
    HeteroRRMean(),
    HeteroDuchiMean(),
)
