"""Catalogue protocols of Aliakbarpour, Fallah, Roy, Stevens 2025, "High-Probability Bounds for
Heterogeneous Local Differential Privacy" (arXiv:2510.11895); spec heterogeneous-ldp.md.

Four one-round, non-interactive protocols: every enrolled participant reports once at its own
ε_i (or min(ε_i, eps_cap), §2.6, which is what the plan charges), and the server outputs a
normalized weighted average of unbiased reports whose weights depend only on the public ε's
(``fedldp.protocol.heterogeneous.estimators``). Weights renormalize over the participants who
reported.

User-level data: the paper's users hold one point. A user here may hold several samples; the mean
protocols feed the user's local mean into the one-point mechanism, and ``hetero-frequency`` one
item drawn uniformly from the user's samples with the user's own stream. Either way the report
is ε_i-LDP for the whole local dataset (user-level privacy), and the target is the population
mean of the per-user statistic (θ(P) of §1.1 when each user holds one sample).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import ConfigDict, Field, model_validator

from fedldp.protocol.core.base import (
    JSON,
    BoolArray,
    DataKind,
    ErrorBar,
    FloatArray,
    IntArray,
    Params,
    PayloadKind,
    Plan,
    Protocol,
    ReportChunk,
    Result,
    RoundPlan,
    RoundTask,
    UserData,
    check_epsilons,
    valid_payloads,
)
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.core.streams import RandomSource
from fedldp.protocol.heterogeneous import estimators as est
from fedldp.protocol.mechanisms.plausibility import around, laplace_reach
from fedldp.protocol.mechanisms.randomizers import (
    JL_MAX_ENTRIES,
    duchi_radius,
    duchi_report,
    from_unit,
    jl_dimension,
    jl_estimate,
    jl_report,
    laplace_mean_report,
    laplace_scale,
    one_bit_report,
    randomized_response,
    rr_debias,
)

__all__ = [
    "PROTOCOLS",
    "DuchiParams",
    "FrequencyParams",
    "HeteroDuchiMean",
    "HeteroFrequency",
    "HeteroLaplaceMean",
    "HeteroParams",
    "HeteroRRMean",
    "LaplaceParams",
    "RRParams",
    "jl_public_seed",
]

_WEIGHTS_TEXT = (
    "weights='uniform' gives every reporter a_i = 1 (the §2.7 baseline); eps_cap runs (and "
    "charges) every client at min(ε_i, eps_cap)."
)


class HeteroParams(Params):
    """Options shared by the four protocols (heterogeneous-ldp §2.6–2.8)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    weights: est.WeightKind = Field("paper", description="paper, uniform or inverse_variance")
    eps_cap: float | None = Field(None, gt=0, description="clients run at min(ε_i, eps_cap)")
    beta: float = Field(0.05, gt=0, lt=1, description="error-bar level is 1 − β")


class LaplaceParams(HeteroParams):
    lo: float = Field(-1.0, description="lower end of the data range")
    hi: float = Field(1.0, description="upper end of the data range")
    clip: bool = Field(True, description="clip the estimate into [lo, hi]")

    @model_validator(mode="after")
    def _range(self) -> LaplaceParams:
        if not self.hi > self.lo:
            raise ValueError(f"need hi > lo, got [{self.lo}, {self.hi}]")
        return self


class RRParams(HeteroParams):
    input: Literal["binary", "interval"] = Field(
        "interval",
        description="interval: Alg 2′ on [-1, 1] (RR itself on ±1 values); binary: Alg 2, "
        "which also checks that every local mean is exactly ±1",
    )
    clip: bool = Field(True, description="clip the estimate into [-1, 1]")


class DuchiParams(HeteroParams):
    dimension: int = Field(ge=1, le=4096, description="d: dimension of the data")
    radius: float = Field(1.0, gt=0, description="r: data lie in the ball B^d(r)")
    project: bool = Field(True, description="project the estimate onto B^d(r)")


class FrequencyParams(HeteroParams):
    domain_size: int = Field(ge=1, le=1 << 20, description="k: items are 0..k−1")
    m_at_least_s_rr: bool = Field(False, description="also enforce m ≥ ceil(S_RR) (§2.5)")


P = TypeVar("P", bound=HeteroParams)


def jl_public_seed(seed: int) -> int:
    """The public seed of Alg 5's sign matrix, derived from the study seed (53 bits, JSON-safe)."""
    ss = np.random.SeedSequence(seed, spawn_key=(0x4A4C,))
    return int(ss.generate_state(1, np.uint64)[0] >> np.uint64(11))


class _Hetero(Protocol[P]):
    """One round, every participant, weighted average of unbiased reports (§2.0, §2.9)."""

    dropout: ClassVar[str] = (
        "The weighted average runs over the responders, its weights a_i renormalised over them "
        "(unbiased on the responders); the error bar is computed from their weights. Sizes fixed "
        "at planning (the JL dimension m) stay those of the enrolled ε's."
    )
    population_rule: ClassVar[str] = (
        "any population of at least 1 participant, whatever its parameters"
    )

    mechanism: ClassVar[est.Mechanism]
    payload_kind: ClassVar[PayloadKind]
    bar_kind: ClassVar[str]
    bar_approximate: ClassVar[bool] = False
    bar_norm: ClassVar[str] = "abs"

    def payload_shape(self, params: P) -> tuple[int, ...]:
        return ()

    def public(self, params: P, run_eps: FloatArray, seed: int) -> JSON:
        return {}

    @abstractmethod
    def report(
        self, params: P, task: RoundTask, data: UserData, eps: FloatArray, rng: RandomSource
    ) -> FloatArray: ...

    @abstractmethod
    def add(self, params: P, broadcast: JSON, acc: est.Accumulator, chunk: ReportChunk) -> None:
        """Decode a chunk of (checked) reports into the accumulator."""

    @abstractmethod
    def finish(self, params: P, broadcast: JSON, acc: est.Accumulator) -> tuple[Any, float, JSON]:
        """(estimate, error-bar half width, extra diagnostics) from the accumulated sums."""

    def num_shape(self, params: P, broadcast: JSON) -> tuple[int, ...]:
        return ()

    def plan(
        self, params: P, epsilon: FloatArray, metadata: Mapping[str, NDArray[Any]], seed: int
    ) -> Plan:
        eps = check_epsilons(epsilon)
        if eps.ndim != 1 or eps.size < 1:
            raise ValueError(f"{self.name} needs at least one participant")
        run = est.capped_epsilons(eps, params.eps_cap)
        n = int(eps.size)
        rp = RoundPlan(
            0,
            "report",
            np.arange(n, dtype=np.int64),
            run,
            self.payload_kind,
            self.payload_shape(params),
        )
        warnings: list[str] = []
        above = int(np.sum(run > 1.0))
        if above:
            warnings.append(
                f"{above} participant(s) run at ε > 1, outside the paper's theorems (ε_i ≤ 1); "
                "the mechanisms stay ε_i-LDP, but consider eps_cap=1 (spec §2.6)"
            )
            if self.mechanism == "duchi" and params.weights == "paper":
                warnings.append(
                    "the paper's ε² weights over-weight users with ε > 1 (spec §2.6); "
                    "weights='inverse_variance' avoids this"
                )
        public = est.effective_sizes(run) | self.public(params, run, seed)
        return Plan(n, (rp,), public, tuple(warnings))

    def broadcast(self, params: P, plan: Plan, round_index: int, outputs: Sequence[JSON]) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round, not round {round_index}")
        return self.message(params, plan)

    def message(self, params: P, plan: Plan) -> JSON:
        return {}

    def privatize(
        self,
        params: P,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        if task.round != 0:
            raise ValueError(f"{self.name} has a single round, not round {task.round}")
        eps = est.capped_epsilons(epsilon, params.eps_cap)
        if eps.shape != (data.n_users,):
            raise ValueError("epsilon must hold one value per user of the block")
        return self.report(params, task, data, eps, rng)

    def aggregate(
        self,
        params: P,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round, not round {round_index}")
        task = RoundTask.of(plan.rounds[0], broadcast)
        acc = est.Accumulator(num=np.zeros(self.num_shape(params, broadcast)))
        for chunk in chunks:
            eps = est.capped_epsilons(chunk.epsilon, params.eps_cap)
            if not np.all(self.check(params, task, eps, chunk.payloads)):
                raise ValueError(f"{self.name}: a report fails the check; it cannot be aggregated")
            self.add(
                params, broadcast, acc, ReportChunk(chunk.slots, eps, chunk.group, chunk.payloads)
            )
        estimate, half_width, extra = self.finish(params, broadcast, acc)
        return {
            "estimate": estimate,
            "half_width": half_width,
            "error_bar_kind": self.bar_kind,
            "approximate": self.bar_approximate,
            "norm": self.bar_norm,
            **acc.sizes(),
            "sum_w2": acc.sum_w2,
            **extra,
        }

    def finalize(self, params: P, plan: Plan, outputs: Sequence[JSON]) -> Result:
        if len(outputs) != 1:
            raise ValueError(f"{self.name} finalizes after its single round")
        out = dict(outputs[0])
        bar = ErrorBar(
            float(out.pop("half_width")),
            1.0 - params.beta,
            str(out.pop("error_bar_kind")),
            bool(out.pop("approximate")),
            str(out.pop("norm")),
        )
        estimate = out.pop("estimate")
        return Result(estimate, bar, out | {"weights": params.weights}, plan.warnings)


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


class HeteroLaplaceMean(_Hetero[LaplaceParams]):
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
        "(inverse_variance); " + _WEIGHTS_TEXT + " A user with several samples reports its "
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


class HeteroRRMean(_Hetero[RRParams]):
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
        "(paper and inverse_variance); " + _WEIGHTS_TEXT + " input='binary': each user's "
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


class HeteroDuchiMean(_Hetero[DuchiParams]):
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
        "tanh²(ε_i/2) ∝ 1/B_i² (inverse_variance); " + _WEIGHTS_TEXT + " A user with several "
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


# --------------------------------------------------------------------------- Alg 5


class HeteroFrequency(_Hetero[FrequencyParams]):
    """Alg 5 (§2.5, γ and m [FIX]): public JL sign matrix Φ = σ/√m, 1-bit RR of one coordinate.

    The plan sizes m from S_RR of all enrolled ε's (§2.9: enrollment must close first) and
    derives the public seed of σ from the study seed. Each user reports one item chosen uniformly
    at random from its samples (one uniform of its own stream, always drawn). The estimate is the
    raw p̂ (its ℓ∞ guarantee, §6 item 15); the simplex projection is a diagnostic. Error bar:
    §4.2(d) in ℓ∞, rigorous over Φ and the data."""

    name: ClassVar[str] = "hetero-frequency"
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "m",
        "jl_seed",
        "k",
        m="dimension of the Johnson-Lindenstrauss projection (the index payload is in 0..m-1)",
    )
    summary: ClassVar[str] = (
        "Distribution over k items in ℓ∞ under per-user ε: Bassily–Smith JL frequency oracle, "
        "each user sends (row j, sign) for one item drawn from its samples."
    )
    source: ClassVar[str] = (
        "Aliakbarpour et al. 2025 (arXiv:2510.11895), Alg. 5, Thm 4.1 (γ and m corrected, "
        "spec §2.5)"
    )
    heterogeneity: ClassVar[str] = (
        "z̄ = Σ a_i z_i / Σ a_i, p̂ = Φᵀz̄, with z_i = ς_i c_i √m e_{j_i}, c_i = 1/tanh(ε_i/2) "
        "and a_i = tanh²(ε_i/2) (paper and inverse_variance); m is sized from S_RR of all enrolled "
        "ε's, so enrollment must close first. " + _WEIGHTS_TEXT + " A user with several samples "
        "reports one of them chosen uniformly at random with its own stream (user-level ε_i-LDP)."
    )
    data_kind: ClassVar[DataKind] = "categorical"
    params_model = FrequencyParams
    population_probe: ClassVar[Mapping[str, Any]] = {"domain_size": 2}
    mechanism: ClassVar[est.Mechanism] = "jl"
    payload_kind: ClassVar[PayloadKind] = "index-sign"

    def payload_shape(self, params: FrequencyParams) -> tuple[int, ...]:
        return (2,)

    def public(self, params: FrequencyParams, run_eps: FloatArray, seed: int) -> JSON:
        k = params.domain_size
        s_rr = est.effective_sizes(run_eps)["S_RR"]
        m = jl_dimension(k, params.beta, s_rr, at_least_s_rr=params.m_at_least_s_rr)
        if m * k > JL_MAX_ENTRIES:
            raise ValueError(f"m·k = {m}·{k} is too large for the public sign matrix")
        return {"m": m, "jl_seed": jl_public_seed(seed), "k": k}

    def message(self, params: FrequencyParams, plan: Plan) -> JSON:
        return {key: plan.public[key] for key in ("m", "jl_seed", "k")}

    def report(
        self,
        params: FrequencyParams,
        task: RoundTask,
        data: UserData,
        eps: FloatArray,
        rng: RandomSource,
    ) -> FloatArray:
        m, seed, k = (int(task.broadcast[key]) for key in ("m", "jl_seed", "k"))
        values = np.asarray(data.values)
        if values.ndim != 1:
            raise ValueError("categorical data is one item per sample")
        u = np.asarray(rng.random(size=(data.n_users,)), dtype=np.float64)
        counts = data.counts
        pick = data.offsets[:-1] + np.minimum(np.floor(u * counts).astype(np.int64), counts - 1)
        j, sign = jl_report(values[pick], eps, m, seed, rng, d=k)
        return np.column_stack([j.astype(np.float64), sign])

    def check(
        self, params: FrequencyParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        ok = valid_payloads(task, payloads)
        p = np.nan_to_num(np.asarray(payloads, dtype=np.float64))
        m = int(task.broadcast["m"])
        j, sign = p[:, 0], p[:, 1]
        good = (np.floor(j) == j) & (j >= 0) & (j < m) & (np.abs(sign) == 1.0)
        return np.asarray(ok & good, dtype=np.bool_)

    bar_kind: ClassVar[str] = "hoeffding-jl"
    bar_norm: ClassVar[str] = "linf"

    def num_shape(self, params: FrequencyParams, broadcast: JSON) -> tuple[int, ...]:
        return (int(broadcast["m"]),)

    def add(
        self, params: FrequencyParams, broadcast: JSON, acc: est.Accumulator, chunk: ReportChunk
    ) -> None:
        m = int(broadcast["m"])
        c_i = rr_debias(chunk.epsilon)
        a = est.weights("jl", chunk.epsilon, params.weights)
        j = chunk.payloads[:, 0].astype(np.int64)
        z = chunk.payloads[:, 1] * c_i * math.sqrt(m)  # z_{i,j_i} = ς_i·c_i·√m (§1.3)
        acc.add_sparse(chunk.epsilon, a, c_i, j, z, m)

    def finish(
        self, params: FrequencyParams, broadcast: JSON, acc: est.Accumulator
    ) -> tuple[Any, float, JSON]:
        m, seed, k = (int(broadcast[key]) for key in ("m", "jl_seed", "k"))
        p_hat = jl_estimate(acc.mean(), m, k, seed)
        extra = {
            "projected": est.as_float_list(est.project_simplex(p_hat)),
            "m": m,
            "jl_seed": seed,
            "variance_bound": acc.sum_w2_spread2,
        }
        width = est.jl_half_width(acc.sum_w2_spread2, k, m, params.beta)
        return est.as_float_list(p_hat), width, extra


PROTOCOLS: tuple[Protocol[Any], ...] = (
    HeteroLaplaceMean(),
    HeteroRRMean(),
    HeteroDuchiMean(),
    HeteroFrequency(),
)
