"""``example-krr``: the distribution of a categorical value over k items by k-ary randomized
response, each user at its own ε, written only against ``fedldp.protocol.api``.

One round. User i picks one of its samples uniformly at random (its own stream) and reports it
through k-RR at its ε_i: the item itself with probability p_i = e^ε_i / (e^ε_i + k − 1), each
other item with probability q_i = 1 / (e^ε_i + k − 1). The ratio of any output's probability
under two datasets is at most p_i / q_i = e^ε_i, so the report is ε_i-LDP for the whole local
dataset. The server debiases each report with its sender's parameters, (1[y_i = j] − q_i) /
(p_i − q_i) is unbiased for the probability of item j, and averages them. The error bar is the
CLT one in ℓ∞ over the k coordinates (Bonferroni), from the variance bound
Var(1[y_i = j]) ≤ 1/4. The diagnostic ``predicted_mse`` is the theory's squared ℓ2 error:
Σ_j Var(f̂_j) = (1/n²) Σ_i (1 − Σ_j r_ij²)/(p_i − q_i)², r_ij = P(y_i = j), at most
(1 − 1/k)/n² · Σ_i 1/(p_i − q_i)², with equality under the uniform law (every r_ij = 1/k).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from fedldp.protocol.api import (
    JSON,
    BoolArray,
    ClientAudit,
    ClientStep,
    DataKind,
    ErrorBar,
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
    client_step,
    cohort_plan,
    one_user,
    valid_payloads,
    z_quantile,
)

LEVEL = 0.95
"""The error bar's confidence level."""


class KaryRRParams(Params):
    domain_size: int = Field(ge=2, le=1 << 16, description="k: items are 0..k−1")


def krr_probabilities(epsilon: FloatArray, k: int) -> tuple[FloatArray, FloatArray]:
    """(p, q): k-RR's probability of reporting the true item and each other one, written with
    e^−ε so that a large ε does not overflow."""
    shrink = np.exp(-np.asarray(epsilon, dtype=np.float64))
    p = 1.0 / (1.0 + (k - 1) * shrink)
    return p, shrink * p


class KaryRR(Protocol[KaryRRParams]):
    name: ClassVar[str] = "example-krr"
    summary: ClassVar[str] = "item frequencies by k-ary randomized response (example plugin)"
    source: ClassVar[str] = "Warner 1965; Kairouz, Bonawitz, Ramage 2016 (k-RR)"
    heterogeneity: ClassVar[str] = "each report debiased with its sender's ε, plain average"
    data_kind: ClassVar[DataKind] = "categorical"
    params_model = KaryRRParams

    def plan(
        self,
        params: KaryRRParams,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        return cohort_plan(epsilon, seed)  # one round: everyone reports once, at its own ε

    def broadcast(
        self, params: KaryRRParams, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        return {"k": params.domain_size}

    def privatize(
        self,
        params: KaryRRParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        k = int(task.broadcast["k"])
        items = np.asarray(data.values, dtype=np.int64)
        if items.size and (items.min() < 0 or items.max() >= k):
            raise ValueError(f"items must lie in 0..{k - 1}")
        u = rng.random((data.n_users, 3))  # which sample, keep or not, which other item
        pick = np.minimum(np.floor(u[:, 0] * data.counts).astype(np.int64), data.counts - 1)
        item = items[data.offsets[:-1] + pick]
        p, _ = krr_probabilities(epsilon, k)
        other = np.minimum(np.floor(u[:, 2] * (k - 1)).astype(np.int64), k - 2)
        other += other >= item  # uniform over the k − 1 items but the true one
        return np.where(u[:, 1] < p, item, other).astype(np.float64)

    def check(
        self, params: KaryRRParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        ok = valid_payloads(task, payloads)
        y = np.where(ok, np.asarray(payloads, dtype=np.float64), 0.0)
        inside = ok & (y == np.round(y)) & (y >= 0) & (y < params.domain_size)
        return np.asarray(inside, dtype=np.bool_)

    def aggregate(
        self,
        params: KaryRRParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        k = params.domain_size
        sums, count, variance = np.zeros(k), 0, 0.0
        for chunk in chunks:
            p, q = krr_probabilities(chunk.epsilon, k)
            gap = p - q
            y = chunk.payloads.astype(np.int64)
            sums += np.bincount(y, weights=1.0 / gap, minlength=k) - float(np.sum(q / gap))
            count += int(chunk.slots.size)
            variance += float(np.sum(0.25 / gap**2))
        if count == 0:
            raise ValueError("no reports to aggregate")
        return {"frequencies": (sums / count).tolist(), "count": count, "variance": variance}

    def finalize(self, params: KaryRRParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        (out,) = outputs
        k, n = params.domain_size, int(out["count"])
        half = z_quantile(1.0 - (1.0 - LEVEL) / k) * math.sqrt(float(out["variance"])) / n
        bar = ErrorBar(half, LEVEL, "clt-bonferroni", approximate=True, norm="linf")
        # Σ_i 1/(p_i − q_i)² is 4 × the variance bound's sum: the squared ℓ2 error's bound
        predicted = (1.0 - 1.0 / k) * 4.0 * float(out["variance"]) / n**2
        diagnostics = {"n": n, "predicted_mse": predicted}  # names of fedldp's vocabulary
        return Result([float(f) for f in out["frequencies"]], bar, diagnostics)

    def report_bounds(
        self, params: KaryRRParams, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Every honest report is an item of 0..k−1 (the output attack sends k − 1)."""
        return np.zeros(1), np.full(1, params.domain_size - 1.0)

    def client_audits(self) -> tuple[ClientAudit, ...]:
        """The privacy audit's case (``fedldp.testing.check_protocol`` calls this hook): the
        audited user's samples all item 0 against all item 1, statistic "the report is item 0",
        whose probabilities p and q are e^ε apart (the audit must see the full ε)."""
        background = one_user(np.zeros(AUDIT_SAMPLES, dtype=np.int64)).take(np.zeros(2, np.int64))

        def setup(epsilon: float) -> ClientStep:
            return client_step(self, {"domain_size": AUDIT_ITEMS}, epsilon, background, 0)

        def is_item_zero(
            step: ClientStep, a: UserData, b: UserData
        ) -> Callable[[FloatArray], FloatArray]:
            return lambda z: np.asarray(z[:, 0] == 0, dtype=np.float64)

        a = one_user(np.zeros(AUDIT_SAMPLES, dtype=np.int64))
        b = one_user(np.ones(AUDIT_SAMPLES, dtype=np.int64))
        return (
            ClientAudit(self.name, "report", "item 0 against item 1", setup, a, b, is_item_zero),
        )


AUDIT_ITEMS = 4
"""k of the audited study."""
AUDIT_SAMPLES = 4
"""Samples of the audited user (all the same item, so whichever it picks is that item)."""
