"""The §3.10 baselines of Zhao et al. 2024 (arXiv:2405.17079, user-level-ldp.md) for scalar data,
as catalogue protocols beside the two-stage mean (``fedldp.protocol.user_level.means``): B0
(item-level LDP at ε/m per sample), B1 (one sample per user) and B2 (the clipped user mean plus
Laplace noise). One round each; unequal ε's are pooled by ``fedldp.protocol.user_level.weighting``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from pydantic import ConfigDict, Field

from fedldp.protocol.api import (
    JSON,
    DataKind,
    FloatArray,
    IntArray,
    Params,
    Plan,
    Protocol,
    RandomSource,
    ReportChunk,
    Result,
    RoundTask,
    UserData,
    around,
    check_epsilons,
    cohort_plan,
    laplace,
    laplace_mean_reach,
    laplace_reach,
    laplace_scale,
)
from fedldp.protocol.core.base.bounds import Level, Scale
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.user_level.weighting import (
    MAX_SAMPLES_PER_USER,
    clt_error_bar,
    plan_epsilons,
    user_samples,
    weighted_mean,
)

__all__ = [
    "PROTOCOLS",
    "BaselineClippedLaplace",
    "BaselineItemLevel",
    "BaselineOneSample",
    "BaselineParams",
    "baseline_variances",
]


class BaselineParams(Params):
    """Parameters shared by the §3.10 baselines."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    samples_per_user: int = Field(
        ge=1, le=MAX_SAMPLES_PER_USER, description="m: samples each user contributes"
    )
    bound: Scale = Field(1.0, description="D: every sample lies in [-D, D]")
    level: Level = Field(0.95, description="level of the error bar")


def baseline_variances(
    kind: str, epsilon: NDArray[Any], bound: float, m: int, sample_var: float
) -> FloatArray:
    """Exact per-user report variance of a §3.10 baseline (σ² = ``sample_var``).

    B0 ("clipped-laplace"): σ²/m + 8D²/ε²; B1 ("item-level"): σ²/m + 8D²m/ε²;
    B2 ("one-sample"): σ² + 8D²/ε². With n equal ε's, ``inverse_variance_mse`` of these is the
    §3.10 MSE (V/n).
    """
    eps = check_epsilons(epsilon)
    d2 = float(bound) ** 2
    if kind == "clipped-laplace":
        return np.asarray(sample_var / m + 8.0 * d2 / eps**2, dtype=np.float64)
    if kind == "item-level":
        return np.asarray(sample_var / m + 8.0 * d2 * m / eps**2, dtype=np.float64)
    if kind == "one-sample":
        return np.asarray(sample_var + 8.0 * d2 / eps**2, dtype=np.float64)
    raise ValueError(f"unknown baseline {kind!r}")


class _Baseline(Protocol[BaselineParams]):
    """One round: every participant sends one privatized scalar at its ε_i; weighted mean."""

    population_rule: ClassVar[str] = (
        "any population of at least 1 participant, whatever samples_per_user"
    )
    population_probe: ClassVar[Mapping[str, Any]] = {"samples_per_user": 1}

    kind: ClassVar[str]
    data_kind: ClassVar[DataKind] = "scalar"
    params_model = BaselineParams
    heterogeneity: ClassVar[str] = (
        "Non-paper extension (spec §8): per-user Laplace scale ∝ 1/ε_i; reports are combined "
        "with inverse-variance weights from this baseline's exact per-user variance (σ² "
        "replaced by its bound D²), which give the plain mean when every ε_i is equal."
    )

    def variances(self, params: BaselineParams, epsilon: NDArray[Any]) -> FloatArray:
        """Per-user report variances with σ² → D² (the weights and the error bar)."""
        m, d = params.samples_per_user, params.bound
        return baseline_variances(self.kind, epsilon, d, m, d * d)

    @abstractmethod
    def report(
        self, params: BaselineParams, samples: FloatArray, epsilon: FloatArray, rng: RandomSource
    ) -> FloatArray:
        """The privatized scalar of each user from its (n, m) samples."""

    def reach(self, params: BaselineParams, epsilon: FloatArray) -> FloatArray:
        """How far past [−D, D] an honest report plausibly lands: one Lap(2D/ε_i) draw."""
        return laplace_reach(laplace_scale(2.0 * params.bound, epsilon))

    def report_bounds(
        self, params: BaselineParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        d = params.bound
        return around(-d, d, self.reach(params, check_epsilons(epsilon)), 0)

    def plan(
        self,
        params: BaselineParams,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        public: JSON = {"bound": params.bound, "m": params.samples_per_user}
        return cohort_plan(plan_epsilons(epsilon, 1), seed, public=public)

    def broadcast(
        self, params: BaselineParams, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round 0, not {round_index}")
        return dict(plan.public)

    def privatize(
        self,
        params: BaselineParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        eps = check_epsilons(epsilon)
        return self.report(params, user_samples(data, params.samples_per_user), eps, rng)

    def aggregate(
        self,
        params: BaselineParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round 0, not {round_index}")
        normaliser = float(np.sum(1.0 / self.variances(params, plan.rounds[0].epsilon)))
        return weighted_mean(chunks, lambda e: self.variances(params, e), normaliser)

    def finalize(self, params: BaselineParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        if len(outputs) != 1:
            raise ValueError(f"{self.name} finalizes after its single round")
        out = outputs[0]
        mse = float(out["predicted_mse"])
        diagnostics: JSON = {"predicted_mse": mse, "n_reports": out["n_reports"]}
        return Result(float(out["estimate"]), clt_error_bar(mse, params.level), diagnostics)


class BaselineItemLevel(_Baseline):
    """B1, Prop. 1(1): each sample gets Lap(2Dm/ε_i) (item-level ε_i/m, group privacy over m);
    the user sends the mean of its m noisy samples (m draws per user)."""

    name: ClassVar[str] = "baseline-item-level"
    broadcast_fields: ClassVar[Mapping[str, str]] = described("bound", "m")
    kind: ClassVar[str] = "item-level"
    summary: ClassVar[str] = "Item-level Laplace at ε/m on every sample, averaged (group privacy)."
    source: ClassVar[str] = (
        "Zhao et al. 2024 (arXiv:2405.17079), Prop. 1(1); user-level-ldp spec §3.10 B1"
    )

    def report(
        self, params: BaselineParams, samples: FloatArray, epsilon: FloatArray, rng: RandomSource
    ) -> FloatArray:
        d, m = params.bound, params.samples_per_user
        noisy = laplace(np.clip(samples, -d, d), laplace_scale(2.0 * d * m, epsilon), rng)
        return np.asarray(noisy.mean(axis=1), dtype=np.float64)

    def reach(self, params: BaselineParams, epsilon: FloatArray) -> FloatArray:
        """The mean of m Lap(2Dm/ε_i) draws: its Gamma-tail reach (module plausibility)."""
        m, d = params.samples_per_user, params.bound
        return laplace_mean_reach(laplace_scale(2.0 * d * m, epsilon), m)


class BaselineOneSample(_Baseline):
    """B2, Prop. 1(2): one sample per user, chosen uniformly with the user's own stream,
    plus Lap(2D/ε_i)."""

    name: ClassVar[str] = "baseline-one-sample"
    broadcast_fields: ClassVar[Mapping[str, str]] = described("bound", "m")
    kind: ClassVar[str] = "one-sample"
    summary: ClassVar[str] = "One random sample per user with Laplace noise at ε (item-level)."
    source: ClassVar[str] = (
        "Zhao et al. 2024 (arXiv:2405.17079), Prop. 1(2); user-level-ldp spec §3.10 B2"
    )

    def report(
        self, params: BaselineParams, samples: FloatArray, epsilon: FloatArray, rng: RandomSource
    ) -> FloatArray:
        d, n = params.bound, samples.shape[0]
        pick = np.asarray(rng.integers(0, samples.shape[1], size=n), dtype=np.int64)
        chosen = np.clip(samples[np.arange(n), pick], -d, d)
        return laplace(chosen, laplace_scale(2.0 * d, epsilon), rng)


class BaselineClippedLaplace(_Baseline):
    """B0 (not in the paper, the natural comparator, spec §3.10): clip(Ȳ, −D, D) + Lap(2D/ε_i)."""

    name: ClassVar[str] = "baseline-clipped-laplace"
    broadcast_fields: ClassVar[Mapping[str, str]] = described("bound", "m")
    kind: ClassVar[str] = "clipped-laplace"
    summary: ClassVar[str] = "Clipped user mean plus Laplace noise at sensitivity 2D."
    source: ClassVar[str] = (
        "user-level-ldp spec §3.10 B0 (comparator for Zhao et al. 2024, arXiv:2405.17079)"
    )

    def report(
        self, params: BaselineParams, samples: FloatArray, epsilon: FloatArray, rng: RandomSource
    ) -> FloatArray:
        d = params.bound
        return laplace(np.clip(samples.mean(axis=1), -d, d), laplace_scale(2.0 * d, epsilon), rng)


PROTOCOLS: tuple[Protocol[Any], ...] = (
    BaselineItemLevel(),
    BaselineOneSample(),
    BaselineClippedLaplace(),
)
