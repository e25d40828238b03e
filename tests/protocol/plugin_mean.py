"""A protocol as a plugin would write it: importing nothing of fedldp but ``fedldp.protocol.api``
(tests/protocol/test_plugins.py declares it through entry points, and the slow test installs a
copy of this file as a distribution of its own).

``plug-mean``: one round; each user sends its clipped sample mean plus Laplace noise of scale
2B/ε_i (sensitivity 2B of a mean clipped to [−B, B], ε_i-LDP); the estimate is the plain mean of
the reports, with the CLT error bar of their known variance Σ 2·(2B/ε_i)² / n².
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from fedldp.protocol.api import (
    JSON,
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
    cohort_plan,
    laplace,
    laplace_scale,
    laplace_variance,
    z_quantile,
)


class PlugParams(Params):
    bound: float = Field(1.0, gt=0, description="B: each user's mean is clipped to [-B, B]")


class PluginMean(Protocol[PlugParams]):
    name: ClassVar[str] = "plug-mean"
    version: ClassVar[str] = "2"  # the algorithm's revision; its distribution's is the origin's
    summary: ClassVar[str] = "clipped user mean plus Laplace noise (a test plugin)"
    source: ClassVar[str] = "tests/protocol/plugin_mean.py"
    heterogeneity: ClassVar[str] = "plain mean; each user at its own ε"
    data_kind: ClassVar[DataKind] = "scalar"
    params_model = PlugParams

    def plan(
        self,
        params: PlugParams,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        return cohort_plan(epsilon, seed, name="mean")

    def broadcast(
        self, params: PlugParams, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        return {"bound": params.bound}

    def privatize(
        self,
        params: PlugParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        b = float(task.broadcast["bound"])
        means = np.clip(data.user_means(), -b, b)
        return laplace(means, laplace_scale(2.0 * b, epsilon), rng)

    def aggregate(
        self,
        params: PlugParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        total, count, variance = 0.0, 0, 0.0
        for chunk in chunks:
            total += float(chunk.payloads.sum())
            count += int(chunk.slots.size)
            scale = laplace_scale(2.0 * params.bound, chunk.epsilon)
            variance += float(laplace_variance(scale).sum())
        if count == 0:
            raise ValueError("no reports to average")
        return {"mean": total / count, "count": count, "variance": variance / count**2}

    def finalize(self, params: PlugParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        (out,) = outputs
        half = z_quantile(0.95) * math.sqrt(float(out["variance"]))
        return Result(float(out["mean"]), ErrorBar(half, 0.95, "clt", approximate=True))


PROTOCOL = PluginMean()
"""The same protocol as an instance (an entry point may name either)."""


class Impostor(PluginMean):
    """A plugin protocol that takes a built-in's name."""

    name: ClassVar[str] = "user-mean"


class Misnamed(PluginMean):
    """A plugin protocol whose name is not its entry point's."""

    name: ClassVar[str] = "plug-misnamed"


class Undescribable(PluginMean):
    """A plugin protocol whose catalogue entry cannot be built (a bug in its own code)."""

    name: ClassVar[str] = "plug-undescribable"

    def describe(self, epsilon: float = 1.0) -> JSON:
        raise RuntimeError("no description today")
