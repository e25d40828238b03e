"""The one-round flow the heterogeneous-ε protocols of Aliakbarpour, Fallah, Roy, Stevens 2025,
"High-Probability Bounds for Heterogeneous Local Differential Privacy" (arXiv:2510.11895; spec
heterogeneous-ldp.md) share: their common parameters and the plan, check, aggregation and
finalization of a weighted average of unbiased reports. The mechanisms are in
``fedldp.protocol.heterogeneous.means`` (Algs 1–4) and ``fedldp.protocol.heterogeneous.frequency``
(Alg 5).

Every protocol is one-round and non-interactive: every enrolled participant reports once at its
own ε_i (or min(ε_i, eps_cap), §2.6, which is what the plan charges), and the server outputs a
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

from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import ConfigDict, Field

from fedldp.protocol.api import (
    JSON,
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
    check_epsilons,
)
from fedldp.protocol.core.base.bounds import EpsilonParam, FailureProbability
from fedldp.protocol.heterogeneous import estimators as est

__all__ = [
    "WEIGHTS_TEXT",
    "HeteroParams",
    "HeteroProtocol",
]

WEIGHTS_TEXT = (
    "weights='uniform' gives every reporter a_i = 1 (the §2.7 baseline); eps_cap runs (and "
    "charges) every client at min(ε_i, eps_cap)."
)


class HeteroParams(Params):
    """Options shared by the four protocols (heterogeneous-ldp §2.6–2.8)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    weights: est.WeightKind = Field("paper", description="paper, uniform or inverse_variance")
    eps_cap: EpsilonParam | None = Field(None, description="clients run at min(ε_i, eps_cap)")
    beta: FailureProbability = Field(0.05, description="error-bar level is 1 − β")


P = TypeVar("P", bound=HeteroParams)


class HeteroProtocol(Protocol[P]):
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
