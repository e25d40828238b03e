"""A small protocol for the client tests, independent of the catalogue.

``toy-mean``: users are split by a public permutation into ``rounds`` cohorts; in round k each
cohort member sends clip(Ȳ_i − c_k, −B, B) + Lap(2B/ε_i), where c_k is the previous round's
estimate (0 in round 0), so later rounds depend on earlier broadcasts. The estimate is the
count-weighted mean of the round means.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from fedldp.protocol.core.base.protocol import Params, Protocol, cohort_plan
from fedldp.protocol.core.base.records import (
    JSON,
    BoolArray,
    DataKind,
    ErrorBar,
    FloatArray,
    IntArray,
    Plan,
    ReportChunk,
    Result,
    RoundTask,
    UserData,
    valid_payloads,
    z_quantile,
)
from fedldp.protocol.core.streams import RandomSource


class ToyParams(Params):
    bound: float = Field(1.0, gt=0, description="B: clipping radius")
    samples_per_user: int = Field(ge=1, description="m: samples each user contributes")
    rounds: int = Field(1, ge=1, le=4, description="number of cohorts / rounds")
    overspend: float = Field(1.0, gt=0, description="charge this multiple of ε (tests)")


class ToyMean(Protocol[ToyParams]):
    name: ClassVar[str] = "toy-mean"
    summary: ClassVar[str] = "clipped user mean plus Laplace noise (test protocol)"
    source: ClassVar[str] = "tests/client/toy_protocol.py"
    heterogeneity: ClassVar[str] = "count-weighted; each user at its own ε"
    data_kind: ClassVar[DataKind] = "scalar"
    params_model = ToyParams

    def plan(
        self,
        params: ToyParams,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        eps = epsilon * params.overspend
        return cohort_plan(
            eps, seed, rounds=params.rounds, name="round", public={"bound": params.bound}
        )

    def broadcast(
        self, params: ToyParams, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        center = float(outputs[-1]["mean"]) if outputs else 0.0
        return {"bound": params.bound, "center": center, "m": params.samples_per_user}

    def privatize(
        self,
        params: ToyParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        b, c = task.broadcast["bound"], task.broadcast["center"]
        means = data.truncated(task.broadcast["m"]).user_means()
        noise = rng.laplace(0.0, 2.0 * b / epsilon, size=(data.n_users,))
        return np.asarray(np.clip(means - c, -b, b) + noise, dtype=np.float64)

    def check(
        self, params: ToyParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        return valid_payloads(task, payloads)

    def aggregate(
        self,
        params: ToyParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        total, count, var = 0.0, 0, 0.0
        for chunk in chunks:
            total += float(chunk.payloads.sum())
            count += int(chunk.slots.size)
            var += float(np.sum(8.0 * params.bound**2 / chunk.epsilon**2))
        return {"mean": broadcast["center"] + total / count, "count": count, "var_sum": var}

    def finalize(self, params: ToyParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        n = sum(o["count"] for o in outputs)
        estimate = sum(o["mean"] * o["count"] for o in outputs) / n
        mse = sum(o["var_sum"] for o in outputs) / n**2
        bar = ErrorBar(z_quantile(0.95) * math.sqrt(mse), 0.95, "clt", approximate=True)
        return Result(float(estimate), bar, {"rounds": len(outputs)})


class RejectingToy(ToyMean):
    """A protocol whose server check refuses every report (to test the client-bug path)."""

    name: ClassVar[str] = "toy-rejecting"

    def check(
        self, params: ToyParams, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        return np.zeros(payloads.shape[0], dtype=np.bool_)
