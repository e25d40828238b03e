"""The two-stage mean of Zhao et al. 2024 (arXiv:2405.17079) for scalar data as the catalogue
protocol ``user-mean``: Alg 1 and its heavy-tail variant (the math is
``fedldp.protocol.user_level.two_stage``; the §3.10 baselines it is compared with are in
``fedldp.protocol.user_level.baselines``).

It takes one ε per participant. The paper fixes one ε for all users; unequal ε's are
combined with inverse-variance weights (user-level-ldp.md §8 [PROPOSAL], non-paper), which reduce
to the paper's plain means when every ε_i is equal. Users holding more than ``samples_per_user``
samples keep their first m (§1.1); fewer is an error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from pydantic import ConfigDict, Field, model_validator

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
    RoundPlan,
    RoundTask,
    UserData,
    around,
    check_epsilons,
    cohort_permutation,
    laplace_reach,
)
from fedldp.protocol.core.base.bounds import MAX_MOMENT_P, Level, Scale
from fedldp.protocol.core.broadcast import described
from fedldp.protocol.user_level import two_stage as ts
from fedldp.protocol.user_level.weighting import (
    MAX_SAMPLES_PER_USER,
    clt_error_bar,
    plan_epsilons,
    user_samples,
    weighted_mean,
)

__all__ = [
    "PROTOCOLS",
    "UserMean",
    "UserMeanParams",
]


EXACT_SCORE_USERS = 1 << 24
"""Up to this many stage-one users ``min_participants`` checks the §1.5 score by summing it as
the plan does (so floating-point rounding cannot make the answer off by one)."""


class UserMeanParams(Params):
    """Parameters of ``user-mean`` (Alg 1, or Alg 1-HT with ``heavy_tail``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    samples_per_user: int = Field(
        ge=1, le=MAX_SAMPLES_PER_USER, description="m: samples each user contributes"
    )
    bound: Scale = Field(1.0, description="D: every sample lies in [-D, D] (bounded case)")
    heavy_tail: bool = Field(False, description="Alg 1-HT: only E|X|^p <= M_p is assumed")
    moment_p: float = Field(
        3.0, ge=2, le=MAX_MOMENT_P, description="p of the moment bound (heavy_tail)"
    )
    moment_bound: Scale | None = Field(None, description="M_p (required with heavy_tail)")
    clip_output: bool = Field(False, description="post-process the estimate into [-D, D]")
    level: Level = Field(0.95, description="level of the error bar")
    enforce_feasibility: bool = Field(
        True,
        description="refuse a plan below the §1.5 stage-one score (false: run it with a "
        "warning, as the paper's analysis and spec §6.2 E2 do, to measure stage-one failures)",
    )

    @model_validator(mode="after")
    def _heavy_tail_inputs(self) -> UserMeanParams:
        if self.heavy_tail and self.moment_bound is None:
            raise ValueError("heavy_tail needs moment_bound (M_p with E|X|^p <= M_p)")
        if self.heavy_tail and "bound" in self.model_fields_set:
            raise ValueError("with heavy_tail the clip radius D is derived from M_p; omit bound")
        return self


class UserMean(Protocol[UserMeanParams]):
    """Alg 1 (§3.1): stage I finds an interval from noisy one-hot histograms, stage II averages
    clipped means; with ``heavy_tail`` the §3.2 parameters (c = 1, D = max(2s, 4Δ), h = 4s/√m).

    Plan: a public permutation of all n participants from the study seed; its first ⌊n/2⌋ are
    stage I, the rest stage II (§2.3); every participant is charged its ε_i once, in its stage.
    The error bar is the §5.3 prediction (conditional on stage-I success, clipping bias ignored)
    with σ² replaced by its public bound (D², or s² for heavy tails); ``k_hat`` in the outputs is
    the paper's 1-based bin index. Feasibility (§1.5, resolved in ``two_stage.check_stage_one``):
    the plan is refused when the stage-one score Σ min(ε_i², 1) is below 300 and carries a
    warning between 300 and 500; with at most 2 bins stage one cannot fail and nothing is required.
    """

    name: ClassVar[str] = "user-mean"
    dropout: ClassVar[str] = (
        "Stage one and stage two have disjoint cohorts, so a stage-one user who leaves never "
        "owed a stage-two report. Stage one's interval comes from its responders' summed "
        "histograms (the argmax does not depend on how many reported); stage two is the "
        "inverse-variance mean of its responders (unbiased on them), its error bar from their "
        "variances. A stage with no report fails the study."
    )
    summary: ClassVar[str] = (
        "Two-stage user-level LDP mean of scalars: noisy histograms find an interval, "
        "clipped Laplace means estimate inside it."
    )
    source: ClassVar[str] = (
        "Zhao et al. 2024, Learning with User-Level Local Differential Privacy "
        "(arXiv:2405.17079), Alg. 1 and Thm 1; heavy tails: Thm 3, App. A.5"
    )
    heterogeneity: ClassVar[str] = (
        "Non-paper extension (spec §8): per-user Laplace scales 2/ε_i (stage I) and "
        "(3h+2Δ)/ε_i (stage II); stage-I histograms weighted ∝ ε_i², stage-II reports by inverse "
        "variance ∝ 1/(σ²/m + 2(3h+2Δ)²/ε_i²) with σ² ≤ D²; the feasibility check uses "
        "Σ min(ε_i², 1) over stage-I users, and the heavy-tail Δ uses Σ ε_i² in place of nε². "
        "Equal ε's give the paper's plain sums and means."
    )
    data_kind: ClassVar[DataKind] = "scalar"
    params_model = UserMeanParams
    population_rule: ClassVar[str] = (
        "§1.5 feasibility: the ⌊n/2⌋ stage-one users need a score Σ min(ε_i², 1) of at least "
        f"{ts.MIN_SCORE:g} (warning below {ts.FEASIBLE_SCORE:g}), so at equal ε at least "
        f"2·⌈{ts.MIN_SCORE:g}/min(ε², 1)⌉ participants; with at most 2 stage-one bins "
        "(samples_per_user <= 16, bounded data) only 2"
    )
    population_probe: ClassVar[Mapping[str, Any]] = {"samples_per_user": MAX_SAMPLES_PER_USER}
    broadcast_fields: ClassVar[Mapping[str, str]] = described(
        "bound", "m", "h", "n_bins", "delta", "n_ref", "sample_var", "heavy_tail",
        "sensitivity", "L", "R", "lo", "hi",
    )  # fmt: skip

    def min_participants(self, epsilon: float, params: UserMeanParams | None = None) -> int | None:
        """With ``params``: the plan's own answer (``Protocol.min_participants``; 2 without
        ``enforce_feasibility``). Without: the
        §1.5 condition at equal ε, for the general case of more than 2 stage-one bins: the
        smallest n whose ⌊n/2⌋ stage-one users reach ``MIN_SCORE``."""
        if params is not None:
            return super().min_participants(epsilon, params)
        per_user = float(min(check_epsilons(np.array([epsilon]))[0] ** 2, 1.0))
        n1 = max(1, math.ceil(ts.MIN_SCORE / per_user))
        if n1 > EXACT_SCORE_USERS:  # summing that many ε's would not fit in memory (ε ≈ 1e-6
            return 2 * n1  # gives 3e14); the ±1 of the sum's rounding is immaterial there
        while ts.stage_one_score(np.full(n1, epsilon)) < ts.MIN_SCORE:  # rounding of the sum
            n1 += 1
        while n1 > 1 and ts.stage_one_score(np.full(n1 - 1, epsilon)) >= ts.MIN_SCORE:
            n1 -= 1
        return 2 * n1

    def design(self, params: UserMeanParams, epsilon: FloatArray) -> ts.Design:
        """The public Alg-1 constants for these parameters and enrolled ε's (N_ref = n)."""
        n = int(epsilon.size)
        m = params.samples_per_user
        if params.heavy_tail:
            assert params.moment_bound is not None  # enforced by the model validator
            sum_eps_sq = float(np.sum(epsilon**2))
            return ts.heavy_tail_design(params.moment_p, params.moment_bound, m, n, sum_eps_sq)
        return ts.bounded_design(params.bound, m, n)

    def plan(
        self,
        params: UserMeanParams,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        eps = plan_epsilons(epsilon, 2)
        n = int(eps.size)
        design = self.design(params, eps)
        order = cohort_permutation(n, seed)
        n1 = n // 2
        # each stage's part of the permutation sorted in place: the two cohorts are views of
        # the one array, with no sorted copies beside it (80 MB at 10^7, issue 27 item 4)
        one, two = order[:n1], order[n1:]
        one.sort()
        two.sort()
        eps_one = eps[one]
        warnings = ts.check_stage_one(eps_one, design.n_bins, n, refuse=params.enforce_feasibility)
        score = ts.stage_one_score(eps_one)  # its temporary freed before stage two's ε's
        rounds = (
            RoundPlan(0, "stage-1", one, eps_one, "histogram", (design.n_bins,)),
            RoundPlan(1, "stage-2", two, eps[two], "scalar", ()),
        )
        public = {
            "design": design.as_json(),
            "n1": n1,
            "n2": n - n1,
            "stage_one_score": score,
            "c_star": ts.c_star(n),
        }
        return Plan(n, rounds, public, warnings)

    def broadcast(
        self, params: UserMeanParams, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        message: JSON = dict(plan.public["design"])
        if round_index == 0:
            return message | {"sensitivity": ts.STAGE_ONE_SENSITIVITY}
        if round_index != 1 or len(outputs) < 1:
            raise ValueError(f"round {round_index} needs the output of stage one")
        first = outputs[0]
        lo, hi = float(first["lo"]), float(first["hi"])
        return message | {
            "L": first["L"],
            "R": first["R"],
            "lo": lo,
            "hi": hi,
            "sensitivity": hi - lo,
        }

    def privatize(
        self,
        params: UserMeanParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        design = ts.Design.from_json(task.broadcast)
        means = user_samples(data, params.samples_per_user).mean(axis=1)
        if task.round == 0:
            return ts.stage_one_report(means, design, epsilon, rng)
        if task.round == 1:
            lo, hi = float(task.broadcast["lo"]), float(task.broadcast["hi"])
            radius = design.bound if design.heavy_tail else None
            return ts.stage_two_report(means, lo, hi, epsilon, rng, radius)
        raise ValueError(f"user-mean has rounds 0 and 1, not {task.round}")

    def report_bounds(
        self, params: UserMeanParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Stage I: each bin entry is 0 or 1 plus Lap(2/ε_i); stage II: clip(Ȳ) in [lo, hi]
        plus Lap((hi − lo)/ε_i); each ± the Laplace reach (module plausibility)."""
        eps = check_epsilons(epsilon)
        if task.round == 0:
            return around(0.0, 1.0, laplace_reach(ts.stage_one_scale(eps)), 1)
        lo, hi = float(task.broadcast["lo"]), float(task.broadcast["hi"])
        return around(lo, hi, laplace_reach(ts.stage_two_scale(lo, hi, eps)), 0)

    def aggregate(
        self,
        params: UserMeanParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        design = ts.Design.from_json(plan.public["design"])
        planned = plan.rounds[round_index].epsilon
        if round_index == 1:
            normaliser = float(np.sum(1.0 / ts.stage_two_variances(planned, design)))
            return weighted_mean(chunks, lambda e: ts.stage_two_variances(e, design), normaliser)
        if round_index != 0:
            raise ValueError(f"user-mean has rounds 0 and 1, not {round_index}")
        norm = float(np.sum(planned**2))
        sums = np.zeros(design.n_bins, dtype=np.float64)
        count = 0
        for chunk in chunks:
            sums += (check_epsilons(chunk.epsilon) ** 2 / norm) @ chunk.payloads
            count += int(chunk.slots.shape[0])
        if count == 0:
            raise ValueError("no stage-one reports to aggregate")
        k, left, right = ts.select_interval(sums, design)
        lo, hi = float(left) - design.delta, float(right) + design.delta
        return {
            "k_hat": int(k) + 1,  # the paper's 1-based bin index
            "L": float(left),
            "R": float(right),
            "lo": lo,
            "hi": hi,
            "sums": sums.tolist(),
            "n_reports": count,
        }

    def finalize(self, params: UserMeanParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        if len(outputs) != 2:
            raise ValueError("user-mean finalizes after its two rounds")
        first, second = outputs
        design = ts.Design.from_json(plan.public["design"])
        estimate = float(second["estimate"])
        if params.clip_output:
            estimate = min(max(estimate, -design.bound), design.bound)
        mse = float(second["predicted_mse"])
        diagnostics: JSON = {
            "k_hat": first["k_hat"],
            "L": first["L"],
            "R": first["R"],
            "lo": first["lo"],
            "hi": first["hi"],
            "stage_one_interval": [first["L"], first["R"]],
            "n_bins": design.n_bins,
            "h": design.h,
            "delta": design.delta,
            "bound": design.bound,
            "n_ref": design.n_ref,
            "heavy_tail": design.heavy_tail,
            "predicted_mse": mse,
            "c_star": plan.public["c_star"],
            "stage_one_score": plan.public["stage_one_score"],
            "n1": first["n_reports"],
            "n2": second["n_reports"],
            "raw_estimate": float(second["estimate"]),
        }
        return Result(estimate, clt_error_bar(mse, params.level), diagnostics, plan.warnings)


PROTOCOLS: tuple[Protocol[Any], ...] = (UserMean(),)
