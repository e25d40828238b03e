"""The one-round flow the memoizing protocols share, and the device-stream contract.

Every protocol of this family reports once per study: the plan is one round, every participant
in the cohort, each charged its declared ε (the one-shot report is ε_i-LDP); each report is
debiased into an unbiased per-user estimate, whose exact (or bounded) variance the client's
mechanism fixes; the estimate is their plain average, with the CLT error bar of that variance.

**Memoization contract** (docs/longitudinal.md §1). A memoized response is a deterministic
function of the device's *persistent* randomness and of its (discretized) value: it is drawn
with ``UserStreams.device(purpose).labelled(value, width)``, which the client keys by its
population seed and the device's index only (``fedldp.client.seeds.device_key``), so the same
device answers the same permanent response in every study, with no state on the server or the
device. Everything drawn afresh each collection comes from the round's stream ``rng`` itself.
``memoize=False`` draws the "permanent" part from ``rng`` too: the fresh-randomization baseline.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

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
    UserData,
    UserStreams,
    z_quantile,
)

__all__ = [
    "LEVEL",
    "MemoParams",
    "MemoProtocol",
    "device_uniforms",
    "first_values",
    "per_state_epsilon",
    "streams_of",
]

LEVEL = 0.95
"""The error bar's confidence level."""


class MemoParams(Params):
    memoize: bool = Field(
        True,
        description="memoize the permanent response per (device, value) across studies; "
        "false randomizes afresh every collection (the baseline)",
    )


P = TypeVar("P", bound=MemoParams)


def streams_of(rng: RandomSource) -> UserStreams:
    """The block's per-participant streams: memoization needs ``UserStreams`` (the client's
    per-participant streams), not a bare numpy Generator (TypeError)."""
    if not isinstance(rng, UserStreams):
        raise TypeError("the memoizing protocols draw from per-participant UserStreams")
    return rng


def device_uniforms(
    rng: RandomSource, memoize: bool, purpose: int, labels: IntArray, width: int
) -> FloatArray:
    """``width`` uniforms per user for the response memoized under ``labels`` (the device's
    discretized value): from the persistent device streams when ``memoize`` (the same numbers
    for the same device and label in every study), else fresh from the round's stream."""
    streams = streams_of(rng)
    if memoize:
        return streams.device(purpose).labelled(labels, width)
    return streams.random((streams.n, width))


def per_state_epsilon(
    name: str, epsilon: Sequence[float], states: Sequence[int] | None, n_states: int
) -> float:
    """The longitudinal ε of a protocol whose whole report is memoized per state (1BitMean,
    dBitFlip; docs/longitudinal.md §5): the device, knowing its states, has spent each distinct
    state's ε once; the server's bound, the states unknown, is min(T, n_states)·ε. One state's
    response drawn at two ε's is not covered (its bits are coupled through one uniform, so a
    collection at another ε can reveal the state with certainty): ValueError, as is a server
    asked for a bound over unequal ε's (any two collections may share a state)."""
    eps = [float(e) for e in epsilon]
    if not eps:
        return 0.0
    if states is None:
        if max(eps) != min(eps):
            raise ValueError(
                f"{name} memoizes its response at one ε: a device declared ε = {min(eps):g} "
                f"and {max(eps):g} in one campaign"
            )
        return min(len(eps), n_states) * eps[0]
    if len(states) != len(eps):
        raise ValueError(f"one state per collection: {len(eps)} ε's, {len(states)} states")
    first: dict[int, float] = {}
    for e, state in zip(eps, states, strict=True):
        seen = first.setdefault(int(state), e)
        if seen != e:
            raise ValueError(
                f"{name} memoizes its response at one ε: state {state} was revealed at "
                f"ε = {seen:g}, asked again at {e:g}"
            )
    return math.fsum(first.values())


def first_values(data: UserData) -> IntArray:
    """The device's current categorical value: its first sample (a deterministic choice, so a
    device whose data do not change reports the same memoized response; a random pick per
    study would expose one memoized response per sample)."""
    values = np.asarray(data.values)
    if values.ndim != 1:
        raise ValueError("categorical data is one item per sample")
    return np.asarray(values[data.offsets[:-1]], dtype=np.int64)


class MemoProtocol(Protocol[P]):
    """One round; subclasses give the payload, the client step and ``contributions``: each
    chunk's sum of per-user unbiased estimates and the sum of their variances."""

    data_kind: ClassVar[Any]
    payload_kind: ClassVar[PayloadKind]

    @abstractmethod
    def payload_shape(self, params: P) -> tuple[int, ...]:
        """Each report's shape."""

    @abstractmethod
    def public(self, params: P) -> JSON:
        """The round's public message (the parameters a client needs)."""

    @abstractmethod
    def contributions(self, params: P, chunk: ReportChunk) -> tuple[FloatArray, FloatArray]:
        """The chunk's sum of per-user unbiased estimates (one per coordinate) and the sum of
        their variances (per coordinate), both deterministic functions of the chunk."""

    def plan(
        self, params: P, epsilon: FloatArray, metadata: Mapping[str, NDArray[Any]], seed: int
    ) -> Plan:
        n = int(epsilon.size)
        if n < 1:
            raise ValueError(f"{self.name} needs at least 1 participant")
        if not np.all(np.isfinite(epsilon) & (epsilon > 0)):
            raise ValueError("every ε must be finite and > 0")
        cohort = np.arange(n, dtype=np.int64)
        shape = self.payload_shape(params)
        return Plan(n, (RoundPlan(0, "report", cohort, epsilon.copy(), self.payload_kind, shape),))

    def broadcast(self, params: P, plan: Plan, round_index: int, outputs: Sequence[JSON]) -> JSON:
        return self.public(params)

    def aggregate(
        self,
        params: P,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        total: FloatArray | None = None
        variance: FloatArray | None = None
        count = 0
        for chunk in chunks:
            s, v = self.contributions(params, chunk)
            total = s if total is None else total + s
            variance = v if variance is None else variance + v
            count += int(chunk.slots.size)
        if count == 0 or total is None or variance is None:
            raise ValueError("no reports to aggregate")
        return {
            "estimate": (total / count).tolist(),
            "count": count,
            "variance": (variance / count**2).tolist(),
        }

    def finalize(self, params: P, plan: Plan, outputs: Sequence[JSON]) -> Result:
        (out,) = outputs
        estimate = [float(e) for e in out["estimate"]]
        variance = np.asarray(out["variance"], dtype=np.float64)
        coordinates = len(estimate)
        z = z_quantile(1.0 - (1.0 - LEVEL) / coordinates)
        half = z * math.sqrt(max(float(variance.max()), 0.0))  # a plug-in may dip below 0
        norm = "abs" if coordinates == 1 else "linf"
        kind = "clt" if coordinates == 1 else "clt-bonferroni"
        bar = ErrorBar(half, LEVEL, kind, approximate=True, norm=norm)
        diagnostics: JSON = {
            "predicted_mse": float(variance.sum()),
            "n_reports": int(out["count"]),
            "memoize": params.memoize,
        }
        value: float | list[float] = estimate[0] if coordinates == 1 else estimate
        return Result(value, bar, diagnostics)
