"""What the classic mean protocols on [−1, 1] share (the named protocols are in
``fedldp.protocol.classic.means``): the Laplace mechanism, Duchi et al.'s mechanism, the
Piecewise (PM) and the Hybrid mechanism (HM) of Wang et al., ICDE 2019 (mechanisms and
variances: ``fedldp.protocol.classic.means_theory``), written only against
``fedldp.protocol.api``.

One round, one report per user, every user at its own ε_i (what the plan charges).

**What a user reports.** A user holds one or several samples; it reports its local mean, clipped
to [−1, 1] (coordinate-wise for vectors), through the mechanism at ε_i, so the report is
ε_i-LDP for the whole local dataset (user-level privacy, as the heterogeneous-ε means of
``fedldp.protocol.heterogeneous`` do). The target is the mean of the users' clipped means.

**Scalar and vector.** ``classic-<mech>`` takes scalar data; ``classic-<mech>-vector`` takes
vectors in [−1, 1]^d: PM, HM and Laplace through Alg. 4 (k = max(1, min(d, ⌊ε_i/2.5⌋))
coordinates sampled, each at ε_i/k and scaled by d/k, the others 0), Duchi through its own
multidimensional mechanism (every coordinate ±B). At d = 1 a vector protocol is its scalar one
(same reports from the same streams).

**Estimate and weights.** The server takes every report as it is (each is already unbiased for
its sender's t_i, de-biased with the sender's own ε_i: Duchi's ±c_i, PM's C_i, the d/k_i of Alg.
4) and outputs θ̂ = Σ a_i Y_i / Σ a_i. ``weights="inverse-variance"`` (default): a_i = 1/V*_i,
V*_i = sup over t ∈ [−1, 1] of the variance of a coordinate of user i's report (A_i + max(B_i,
0) with Var = A_i + B_i·t², ``variance_terms``). Optimality: among weighted averages with weights
fixed by the public ε's, the variance is Σ w_i² V_i(t_i); each V_i reaches V*_i independently of
the others, so the worst case over all data is Σ w_i² V*_i, which w_i ∝ 1/V*_i minimises (Lagrange:
2 w_i V*_i = λ): the inverse-variance weights are minimax-optimal, and exactly optimal (the BLUE)
for Laplace, whose variance does not depend on t. ``weights="uniform"``: a_i = 1, the textbook
average. With equal ε's the two are the same estimator, exactly. As with the heterogeneous-ε
paper's weights, unequal weights estimate the mean of the law the users' means are drawn from
when ε is independent of the data; when it is not, Σ a_i t_i/Σ a_i differs from the plain mean of
the t_i and ``uniform`` is the unbiased choice.

**Predicted error.** ``predicted_mse`` is the paper's exact variance formula Σ_i w_i² Σ_j (A_i +
B_i t_ij²) on the population's own data, the unknown t_ij² replaced by an unbiased estimate from
the report itself, τ̂_ij = (Y_ij² − A_i)/(B_i + 1) (E[Y_ij²] = A_i + (B_i + 1)t_ij²), so the
diagnostic is an unbiased estimate of the exact variance whatever the data. Duchi's reports
(and HM's below ε*, which is Duchi) have B_i = −1: |Y| is constant and says nothing of t², so
there t_ij² is replaced by clip(θ̂_j)², a lower bound of the users' mean t² when their means scatter
(Jensen), which makes the prediction an upper bound. ``worst_case_mse`` is Σ w_i² Σ_j V*_i (the
papers' worst-case formulas). The error bar is the CLT one from ``coordinate_mse``: z·sqrt(mse)
for scalars; for vectors the ℓ2 radius sqrt(χ²_{d, level}·max_j coordinate_mse), which holds for
independent Gaussian coordinates (approximate: Alg. 4's sampling correlates them slightly). The
predictions concern the error around the users' own (weighted) mean; against the mean of the law
the users were drawn from, the users' spread adds Var(t)/n.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import NDArray
from pydantic import ConfigDict, Field
from scipy import special

from fedldp.protocol.api import (
    JSON,
    BoolArray,
    ErrorBar,
    FloatArray,
    IntArray,
    Params,
    PayloadKind,
    Plan,
    Protocol,
    RandomSource,
    ReportChunk,
    Result,
    RoundPlan,
    RoundTask,
    UserData,
    around,
    check_epsilons,
    laplace_reach,
    laplace_scale,
    valid_payloads,
    z_quantile,
)
from fedldp.protocol.classic import means_theory as th

__all__ = [
    "LEVEL_MAX",
    "VARIANCE_FLOOR",
    "ClassicMean",
    "ClassicMeanParams",
    "ClassicVectorParams",
]

VARIANCE_FLOOR = 1e-100
"""The inverse-variance weights use max(V*_i, 1e-100): PM's and HM's variances vanish like
e^{−ε/2}, and 1/V*² would overflow past ε ≈ 460 (no weight changes below)."""
LEVEL_MAX = 1.0 - 1e-12
"""The highest error-bar level (its normal quantile stays finite)."""
_TOLERANCE = 1e-9
"""Relative slack of the report checks (the reports are computed in float64)."""


class ClassicMeanParams(Params):
    """Parameters of the scalar classic means."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    weights: Literal["inverse-variance", "uniform"] = Field(
        "inverse-variance",
        description="inverse-variance: a_i = 1/V*_i (worst-case report variance, minimax-"
        "optimal); uniform: the plain average (the same estimator when every ε is equal)",
    )
    clip: bool = Field(True, description="clip the estimate into [-1, 1]")
    level: float = Field(0.95, gt=0.0, le=LEVEL_MAX, description="level of the (CLT) error bar")


class ClassicVectorParams(ClassicMeanParams):
    """Parameters of the d-dimensional classic means."""

    dimension: int = Field(ge=1, le=th.MAX_DIMENSION, description="d: dimension of the data")


def _clipped_means(data: UserData, d: int | None) -> FloatArray:
    """Each user's local mean clipped to [−1, 1], as (n, 1) for scalars or (n, d)."""
    values = np.asarray(data.values, dtype=np.float64)
    want = 1 if d is None else 2
    if values.ndim != want or (d is not None and values.shape[1] != d):
        shape = "scalars" if d is None else f"vectors of dimension {d}"
        raise ValueError(f"this protocol takes {shape}, got samples of shape {values.shape[1:]}")
    if not np.all(np.isfinite(values)):
        raise ValueError("data must be finite")
    means = np.clip(data.user_means(values), -1.0, 1.0)
    return np.asarray(means.reshape(data.n_users, -1), dtype=np.float64)


class ClassicMean(Protocol[Any]):
    """One round: each user's clipped mean through ``mechanism`` at its ε_i; weighted average
    (module docstring). Subclasses set the names and ``mechanism``; ``vector`` protocols take
    (n, d) data."""

    mechanism: ClassVar[th.Mechanism]
    vector: ClassVar[bool] = False
    population_rule: ClassVar[str] = (
        "any population of at least 1 participant, whatever its parameters"
    )
    heterogeneity: ClassVar[str] = (
        "Each report is unbiased with its sender's own ε_i (its own constants); θ̂ = Σ a_i Y_i / "
        "Σ a_i with a_i = 1/V*_i, V*_i the worst-case variance of user i's report "
        "(weights='inverse-variance', minimax-optimal among weights fixed by the ε's) or a_i = 1 "
        "(weights='uniform'); equal ε's give the textbook average either way. A user with "
        "several samples reports its local mean clipped to [-1, 1] (user-level ε_i-LDP)."
    )

    @property
    def sampled(self) -> bool:
        """Whether the vector reports go through Alg. 4's coordinate sampling."""
        return self.vector and self.mechanism != "duchi"

    def _d(self, params: Any) -> int:
        return int(params.dimension) if self.vector else 1

    def _terms(self, params: Any, eps: FloatArray) -> tuple[FloatArray, FloatArray]:
        return th.variance_terms(self.mechanism, eps, self._d(params), self.sampled)

    def _shape(self, params: Any) -> tuple[int, ...]:
        return (self._d(params),) if self.vector else ()

    # ------------------------------------------------------------------ plan and client step

    def plan(
        self, params: Any, epsilon: FloatArray, metadata: Mapping[str, NDArray[Any]], seed: int
    ) -> Plan:
        eps = check_epsilons(epsilon)
        if eps.ndim != 1 or eps.size < 1:
            raise ValueError(f"{self.name} needs at least one participant")
        n = int(eps.size)
        kind: PayloadKind = "vector" if self.vector else "scalar"
        rp = RoundPlan(
            0, "report", np.arange(n, dtype=np.int64), eps.copy(), kind, self._shape(params)
        )
        return Plan(n, (rp,), {"dimension": self._d(params)})

    def broadcast(self, params: Any, plan: Plan, round_index: int, outputs: Sequence[JSON]) -> JSON:
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round, not round {round_index}")
        return {"dimension": self._d(params)}

    def privatize(
        self,
        params: Any,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        if task.round != 0:
            raise ValueError(f"{self.name} has a single round, not round {task.round}")
        eps = check_epsilons(epsilon)
        if eps.shape != (data.n_users,):
            raise ValueError("epsilon must hold one value per user of the block")
        d = self._d(params)
        t = _clipped_means(data, d if self.vector else None)
        out = self._report(t, eps, d, rng)
        return out if self.vector else out[:, 0]

    def _report(self, t: FloatArray, eps: FloatArray, d: int, rng: RandomSource) -> FloatArray:
        """(n, d) reports of the clipped means t (n, d): the draws per user are fixed by d."""
        n = t.shape[0]
        if self.mechanism == "duchi" and d > 1:
            u = np.asarray(rng.random((n, 2 * d + 2)), dtype=np.float64)
            return th.duchi_multi_sample(t, eps, u[:, :d], u[:, d], u[:, d + 1], u[:, d + 2 :])
        k = th.sampled_coordinates(eps, d)
        e = (eps / k)[:, None]
        if self.mechanism == "laplace":
            y = th.laplace_sample(t, e, rng.laplace(0.0, 1.0, size=(n, d)))
        elif self.mechanism == "duchi":
            y = th.duchi_sample(t, e, np.asarray(rng.random((n, 1)))[:, :1])
        else:
            u = np.asarray(rng.random((n, d, 3 if self.mechanism == "hm" else 2)))
            if self.mechanism == "pm":
                y = th.pm_sample(t, e, u[..., 0], u[..., 1])
            else:
                y = th.hm_sample(t, e, u[..., 0], u[..., 1], u[..., 2])
        if d == 1:
            return y
        pick = np.asarray(rng.random((n, d)), dtype=np.float64)
        chosen = np.argsort(np.argsort(pick, axis=1), axis=1) < k[:, None]
        return np.asarray(np.where(chosen, (d / k)[:, None] * y, 0.0), dtype=np.float64)

    # ------------------------------------------------------------------ report checks

    def _reach(self, params: Any, eps: FloatArray) -> FloatArray:
        """The largest |Y_j| of an honest report (per user; Laplace: its 10^-12 reach)."""
        d = self._d(params)
        if self.mechanism == "duchi":
            return th.duchi_bound(eps, d)
        k = th.sampled_coordinates(eps, d)
        e = eps / k
        if self.mechanism == "laplace":
            one = 1.0 + laplace_reach(laplace_scale(2.0, e))
        else:  # PM's C exceeds Duchi's c = coth(ε/2): HM's reports lie in [−C, C] too
            one = th.pm_bound(e)
        return np.asarray(d / k * one, dtype=np.float64)

    def check(
        self, params: Any, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        """Finite rows of the round's shape, every entry within the mechanism's range (Duchi:
        exactly ±B_i, so a sphere of its own); a sampled vector has at most k_i non-zero
        entries (exactly k_i but with probability 0)."""
        ok = valid_payloads(task, payloads)
        eps = check_epsilons(epsilon)
        y = np.nan_to_num(np.asarray(payloads, dtype=np.float64)).reshape(eps.shape[0], -1)
        reach = self._reach(params, eps)[:, None]
        if self.mechanism == "duchi":
            inside = np.abs(np.abs(y) - reach) <= _TOLERANCE * reach
        else:
            inside = np.abs(y) <= reach * (1.0 + _TOLERANCE)
        ok &= np.all(inside, axis=1)
        if self.sampled:
            k = th.sampled_coordinates(eps, self._d(params))
            ok &= np.count_nonzero(y, axis=1) <= k
        return np.asarray(ok, dtype=np.bool_)

    def output_attack_reports(
        self, params: Any, task: RoundTask, epsilon: FloatArray, group: IntArray, rng: RandomSource
    ) -> FloatArray | None:
        """The sampled vector means (PM, HM, Laplace through Alg. 4): k_i coordinates drawn
        uniformly (the honest sampling, from the attacker's stream) at their bound +(d/k_i)·M_i,
        M_i the scalar mechanism's largest report at ε_i/k_i (``report_bounds``), the others 0.
        A report enters the estimate as it is (it is already de-biased), and ``check`` admits at
        most k_i non-zero coordinates of at most that size, so Σ_j Y_j ≤ k_i·(d/k_i)·M_i: these
        reports reach it, and, the coordinates being uniform, they raise every coordinate of the
        estimate by the same expected amount, M_i per attacker (times its weight), the largest
        that the smallest coordinate's expected shift can be (their sum is at most d·M_i).
        The generic report, every coordinate at its bound, has d > k_i non-zero entries and is
        refused. None for the others: the generic report is the best there (the scalar
        mechanisms' largest value; Duchi's multidimensional reports are ±B in every coordinate,
        so +B everywhere is one)."""
        if not self.sampled:
            return None
        eps = check_epsilons(epsilon)
        d = self._d(params)
        k = th.sampled_coordinates(eps, d)
        pick = np.asarray(rng.random((eps.shape[0], d)), dtype=np.float64)
        chosen = np.argsort(np.argsort(pick, axis=1), axis=1) < k[:, None]
        return np.asarray(np.where(chosen, self._reach(params, eps)[:, None], 0.0))

    def report_bounds(
        self, params: Any, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Every entry within ±(d/k_i)·(the scalar mechanism's range at ε_i/k_i): PM's and HM's
        C, Duchi's B, Laplace's 1 + its 10^-12 reach (the only unbounded one)."""
        reach = self._reach(params, check_epsilons(epsilon))
        return around(0.0, 0.0, reach, 1 if self.vector else 0)

    # ------------------------------------------------------------------ server

    def _weights(self, params: Any, eps: FloatArray) -> FloatArray:
        if params.weights == "uniform":
            return np.ones_like(eps)
        a, b = self._terms(params, eps)
        return np.asarray(1.0 / np.maximum(th.worst_variance(a, b), VARIANCE_FLOOR))

    def aggregate(
        self,
        params: Any,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        """Sums over the reports, in any chunking: Σa, Σa·Y, Σa²·A, Σa²·B·τ̂ (where B + 1 > 0),
        Σa²·B (where B + 1 = 0, Duchi) and Σa²·V*."""
        if round_index != 0:
            raise ValueError(f"{self.name} has a single round, not round {round_index}")
        d = self._d(params)
        task = RoundTask.of(plan.rounds[0], broadcast)
        s_a = s_a2a = s_a2b_blind = s_a2v = 0.0
        s_ay, s_a2bt = np.zeros(d), np.zeros(d)
        count = 0
        for chunk in chunks:
            eps = check_epsilons(chunk.epsilon)
            if not np.all(self.check(params, task, eps, chunk.payloads)):
                raise ValueError(f"{self.name}: a report fails the check; it cannot be aggregated")
            y = np.asarray(chunk.payloads, dtype=np.float64).reshape(eps.shape[0], d)
            a, b = self._terms(params, eps)
            w = self._weights(params, eps)
            w2 = w**2
            seen = b + 1.0 > 1e-12  # E[Y²] = A + (B + 1)t²: t² estimable from the report
            tau = (y**2 - a[:, None]) / np.where(seen, b + 1.0, 1.0)[:, None]
            s_a += float(w.sum())
            s_ay += w @ y
            s_a2a += float(np.sum(w2 * a))
            s_a2bt += np.where(seen, w2 * b, 0.0) @ tau
            s_a2b_blind += float(np.sum(np.where(seen, 0.0, w2 * b)))
            s_a2v += float(np.sum(w2 * th.worst_variance(a, b)))
            count += int(eps.size)
        if count == 0:
            raise ValueError(f"{self.name}: no reports to aggregate")
        return {
            "n_reports": count,
            "sum_a": s_a,
            "sum_ay": s_ay.tolist(),
            "sum_a2_a": s_a2a,
            "sum_a2_b_tau": s_a2bt.tolist(),
            "sum_a2_b_blind": s_a2b_blind,
            "sum_a2_worst": s_a2v,
        }

    def finalize(self, params: Any, plan: Plan, outputs: Sequence[JSON]) -> Result:
        if len(outputs) != 1:
            raise ValueError(f"{self.name} finalizes after its single round")
        out = outputs[0]
        d = self._d(params)
        s_a = float(out["sum_a"])
        raw = np.asarray(out["sum_ay"], dtype=np.float64) / s_a
        value = np.clip(raw, -1.0, 1.0) if params.clip else raw
        t2 = np.clip(raw, -1.0, 1.0) ** 2
        blind = float(out["sum_a2_b_blind"]) * t2
        per = (float(out["sum_a2_a"]) + np.asarray(out["sum_a2_b_tau"]) + blind) / s_a**2
        per = np.maximum(per, 0.0)  # an unbiased estimate may dip below 0 on few reports
        mse = float(per.sum())
        worst = d * float(out["sum_a2_worst"]) / s_a**2
        diagnostics: JSON = {
            "n_reports": int(out["n_reports"]),
            "weights": params.weights,
            "predicted_mse": mse,
            "worst_case_mse": worst,
        }
        level = float(params.level)
        if self.vector:  # ‖e‖² ≤ max_j v_j · χ²_d for independent Gaussian coordinates
            half = float(np.sqrt(special.chdtri(d, 1.0 - level) * per.max()))
            bar = ErrorBar(half, level, "clt-chi2", True, "l2")
            diagnostics |= {
                "d": d,
                "raw_estimate": [float(v) for v in raw],
                "coordinate_mse": [float(v) for v in per],
            }
            if self.sampled:
                k = th.sampled_coordinates(plan.rounds[0].epsilon, d)
                diagnostics["sampled_coordinates"] = [int(k.min()), int(k.max())]
            return Result([float(v) for v in value], bar, diagnostics)
        bar = ErrorBar(z_quantile(level) * float(np.sqrt(mse)), level, "clt", True, "abs")
        diagnostics["raw_estimate"] = float(raw[0])
        return Result(float(value[0]), bar, diagnostics)
