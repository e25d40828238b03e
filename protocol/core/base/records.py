"""The values a study passes between the steps of the protocol abstraction
(``fedldp.protocol.core.base.protocol``): the array and JSON aliases, a block of users' local
datasets (``UserData``, client side only), the plan and its rounds, a round's task and report
chunks, and the result with its error bar; with the generic checks every protocol applies (ε
finite and > 0, payloads of the right shape and finite) and the conversions to what JSON holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "JSON",
    "BoolArray",
    "DataKind",
    "ErrorBar",
    "FloatArray",
    "IntArray",
    "PayloadKind",
    "Plan",
    "ReportChunk",
    "Result",
    "RoundPlan",
    "RoundTask",
    "Trust",
    "UserData",
    "check_epsilons",
    "finite_or_none",
    "jsonable",
    "valid_payloads",
    "z_quantile",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
JSON = dict[str, Any]

PayloadKind = Literal["scalar", "vector", "bit", "index-sign", "histogram", "statistic"]
"""What one round's reports are on the wire (a ``RoundPlan``'s ``payload_kind``, with its
``payload_shape``). Every kind reaches the protocol's steps as a float64 array of shape
``(n, *payload_shape)``; the kind fixes the JSON a client sends and what the server checks before
the protocol's ``check``:

- ``scalar``: one real number (``{"kind": "scalar", "value": 0.3}``), shape ``()``. Finite.
  E.g. ``hetero-mean-laplace``, ``user-mean``'s stage 2, the ``example-krr`` plugin (an item's
  index, its ``check`` requiring an integer in 0..k−1).
- ``vector``: ``prod(payload_shape)`` real numbers (``"values": [...]``, row-major), any shape.
  Finite. E.g. ``hetero-mean-duchi`` (a d-vector), ``classic-oue`` (a 0/1 vector of k bits).
- ``bit``: one sign, −1 or +1 (``"bit": 1``), shape ``()``; the wire refuses anything else. E.g.
  ``hetero-mean-rr``, ``memo-1bitmean``.
- ``index-sign``: an index and a sign (``"index": 17, "sign": -1``), shape ``(2,)``, row
  ``[index, sign]``; the wire refuses a negative or fractional index and a sign other than ±1,
  the protocol's ``check`` the index's upper bound. E.g. ``hetero-frequency`` (a row of the JL
  sign matrix and that entry's randomized sign).
- ``histogram``: ``prod(payload_shape)`` counts or noisy counts over bins (``"values"``), any
  shape; checked as ``vector``, named apart so that logs and clients can tell a per-bin report.
  E.g. ``user-mean``'s stage 1 (one noisy entry per bin).
- ``statistic``: a user-wise statistic sent in the clear to a trusted aggregator (central
  trust only: ``Protocol.trust == "central"``), ``"values"`` as ``vector``. E.g. ``central-wme``
  (the user's local mean, then its sample count: shape ``(d + 1,)``).

For every kind the server also refuses a report of another kind than the round's or whose
number of entries is not ``prod(payload_shape)`` (``invalid_payload``), then applies the
protocol's ``check``, ``check_members`` and ``report_bounds`` (``implausible_report``).
"""
DataKind = Literal["scalar", "vector", "categorical", "labeled"]
Trust = Literal["local", "central"]


def check_epsilons(epsilon: object, *, name: str = "epsilon") -> FloatArray:
    """Return ε as a float array, or raise ValueError if any value is not finite and > 0."""
    eps = np.asarray(epsilon, dtype=np.float64)
    if eps.size == 0:
        return eps.reshape(-1) if eps.ndim else eps.reshape(1)[:0]
    bad = ~np.isfinite(eps) | (eps <= 0)
    if np.any(bad):
        first = eps.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]]
        raise ValueError(f"{name} must be finite and > 0, got {first!r}")
    return eps


@dataclass(frozen=True)
class UserData:
    """The local datasets of a block of users (client side only; never sent anywhere).

    ``values`` holds every sample of every user, user after user: shape ``(total,)`` for scalar
    and categorical data, ``(total, d)`` for vectors (and for the features of labeled data).
    ``counts[u]`` is user u's number of samples. ``labels`` (``(total,)``) for labeled data.
    """

    values: NDArray[Any]
    counts: IntArray
    labels: FloatArray | None = None

    def __post_init__(self) -> None:
        if self.counts.ndim != 1 or np.any(self.counts < 1):
            raise ValueError("every user must hold at least one sample")
        if int(self.counts.sum()) != self.values.shape[0]:
            raise ValueError("counts do not add up to the number of samples")
        if self.labels is not None and self.labels.shape[0] != self.values.shape[0]:
            raise ValueError("labels and values differ in length")

    @property
    def n_users(self) -> int:
        return int(self.counts.shape[0])

    @property
    def offsets(self) -> IntArray:
        return np.concatenate(([0], np.cumsum(self.counts))).astype(np.int64)

    def user_sums(self, samples: NDArray[Any] | None = None) -> FloatArray:
        """Per-user sums of ``samples`` (default ``values``), shape ``(n_users, *item_shape)``."""
        x = np.asarray(self.values if samples is None else samples, dtype=np.float64)
        return np.add.reduceat(x, self.offsets[:-1], axis=0)

    def user_means(self, samples: NDArray[Any] | None = None) -> FloatArray:
        """Per-user sample means (of ``samples``, default ``values``)."""
        sums = self.user_sums(samples)
        return sums / self.counts.reshape((-1,) + (1,) * (sums.ndim - 1))

    def take(self, users: IntArray) -> UserData:
        """The datasets of the users at positions ``users`` (in that order)."""
        u = np.asarray(users, dtype=np.int64)
        counts = self.counts[u]
        if self.counts.size and np.all(self.counts == self.counts[0]):
            # every user holds m samples: a gather of whole rows
            m = int(self.counts[0])
            rows = self.values.reshape(self.counts.size, m, *self.values.shape[1:])[u]
            values = rows.reshape(u.size * m, *self.values.shape[1:])
            labels = None if self.labels is None else self.labels.reshape(-1, m)[u].reshape(-1)
            return UserData(values, counts, labels)
        starts = self.offsets[u]
        before = np.cumsum(counts) - counts  # where each taken user starts in the result
        idx = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(starts - before, counts)
        labels = None if self.labels is None else self.labels[idx]
        return UserData(self.values[idx], counts, labels)

    def truncated(self, m: int) -> UserData:
        """Each user keeps its first ``m`` samples (user-level-ldp.md §1.1: a common m)."""
        if np.all(self.counts <= m):
            return self
        keep_counts = np.minimum(self.counts, m)
        starts = self.offsets[:-1]
        idx = np.concatenate(
            [np.arange(s, s + c) for s, c in zip(starts, keep_counts, strict=True)]
        )
        labels = None if self.labels is None else self.labels[idx]
        return UserData(self.values[idx], keep_counts.astype(np.int64), labels)


@dataclass(frozen=True)
class RoundPlan:
    """One round of a plan: who reports, at what ε, with which payload."""

    index: int
    name: str
    cohort: IntArray  # participant slots, strictly increasing
    epsilon: FloatArray  # ε charged to each cohort member in this round (same order)
    payload_kind: PayloadKind
    payload_shape: tuple[int, ...]  # per-participant payload shape ((), (B,), (d,), ...)
    group: IntArray | None = None  # per-member sub-task index (e.g. the coordinate group)
    messages: IntArray | None = None  # per-member count of messages, each at epsilon/messages

    def __post_init__(self) -> None:
        if self.cohort.shape != self.epsilon.shape:
            raise ValueError("cohort and epsilon differ in shape")
        # each slot against the next, with no array of the differences (80 MB at 10^7)
        if self.cohort.size > 1 and np.any(self.cohort[1:] <= self.cohort[:-1]):
            raise ValueError("a cohort must be strictly increasing slots")
        if self.group is not None and self.group.shape != self.cohort.shape:
            raise ValueError("group and cohort differ in shape")
        if self.messages is not None and (
            self.messages.shape != self.cohort.shape or np.any(self.messages < 1)
        ):
            raise ValueError("messages must be one count >= 1 per cohort member")

    def message_counts(self) -> IntArray:
        """How many messages each member sends (its charge composes over them, §4.1)."""
        if self.messages is None:
            return np.ones(self.cohort.shape, dtype=np.int64)
        return self.messages

    def groups(self) -> IntArray:
        if self.group is None:
            return np.zeros(self.cohort.shape, dtype=np.int64)
        return self.group

    def groups_at(self, positions: IntArray) -> IntArray:
        """``groups()[positions]`` without the whole cohort's zeros when there is no group (a
        batch's lookup in a round of 10^6 members)."""
        if self.group is None:
            return np.zeros(np.shape(positions), dtype=np.int64)
        return self.group[positions]


@dataclass(frozen=True)
class Plan:
    """The full plan of a study, fixed when enrollment closes."""

    n_participants: int
    rounds: tuple[RoundPlan, ...]
    public: JSON = field(default_factory=dict)  # derived public constants (B, h, Δ, m, ...)
    warnings: tuple[str, ...] = ()
    # the participants' public enrollment metadata the protocol keeps (by slot), e.g. the masks
    # and public features of semi-feature LDP; never sent to clients (each knows its own)
    metadata: Mapping[str, NDArray[Any]] = field(default_factory=dict)

    def charges(self) -> FloatArray:
        """Total ε charged to each participant over all rounds (basic composition)."""
        total = np.zeros(self.n_participants, dtype=np.float64)
        for r in self.rounds:
            np.add.at(total, r.cohort, r.epsilon)
        return total


@dataclass(frozen=True)
class RoundTask:
    """What a cohort member receives for one round: all public."""

    round: int
    name: str
    broadcast: JSON
    payload_kind: PayloadKind
    payload_shape: tuple[int, ...]

    @classmethod
    def of(cls, rp: RoundPlan, broadcast: JSON) -> RoundTask:
        return cls(rp.index, rp.name, broadcast, rp.payload_kind, rp.payload_shape)


@dataclass(frozen=True)
class ReportChunk:
    """Reports of one round from a block of participants, ordered by slot."""

    slots: IntArray
    epsilon: FloatArray  # each reporter's ε charge in this round
    group: IntArray
    payloads: FloatArray  # shape (len(slots), *payload_shape)


@dataclass(frozen=True)
class ErrorBar:
    """A (1 − β) error bar on the estimate.

    ``half_width`` bounds the error ‖estimate − truth‖ with probability at least ``level``
    (1 − β). ``kind`` names its source (e.g. "hoeffding", "laplace-chernoff", "clt");
    ``approximate`` is True when it rests on a CLT or on a formula with unverified constants
    rather than a proof. ``norm`` says how the error is measured: "abs" (a scalar's |θ̂ − θ|),
    "l2" (‖θ̂ − θ‖₂) or "linf" (max_j |θ̂_j − θ_j|).

    The norm is also the one of the run's measured ``error`` (``fedldp simulate`` prints it as
    ``error (NORM)``; the ``error`` column of ``SimulationResult.to_dict`` and of an experiment's
    trials, beside ``error_norm``), so it decides what an experiment's ``stat: mse`` of ``error``
    measures: the mean of ``error²``, the squared ℓ∞ error for a "linf" bar, not the squared ℓ2
    error (derive that column, or report ``predicted_mse``, to compare with an ℓ2 theory). A
    result without an error bar is measured in "linf" for categorical data, "abs" for a scalar
    estimate and "l2" for a vector.
    """

    half_width: float
    level: float
    kind: str
    approximate: bool
    norm: str = "abs"

    def as_json(self) -> JSON:
        return {
            "half_width": self.half_width,
            "level": self.level,
            "kind": self.kind,
            "approximate": self.approximate,
            "norm": self.norm,
        }


@dataclass(frozen=True)
class Result:
    """The final output of a study."""

    estimate: float | list[float]
    error_bar: ErrorBar | None
    diagnostics: JSON = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def valid_payloads(task: RoundTask, payloads: NDArray[Any]) -> BoolArray:
    """Generic check: right per-participant shape and every entry finite."""
    p = np.asarray(payloads, dtype=np.float64)
    if p.ndim == 0 or p.shape[1:] != task.payload_shape:
        raise ValueError(f"payload shape {p.shape[1:]} != expected {task.payload_shape}")
    flat = p.reshape(p.shape[0], -1)
    return np.asarray(np.all(np.isfinite(flat), axis=1), dtype=np.bool_)


def z_quantile(level: float) -> float:
    """Two-sided standard normal quantile z_{(1+level)/2}, e.g. 1.96 for level 0.95."""
    from statistics import NormalDist

    if not 0.0 < level < 1.0:
        raise ValueError("level must lie in (0, 1)")
    return float(NormalDist().inv_cdf(0.5 + level / 2.0))


def jsonable(x: Any) -> Any:
    """``x`` with numpy values turned into Python ones and non-finite floats into None (what a
    JSON document, a database JSON column and the wire can hold)."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    return x


def finite_or_none(x: float) -> float | None:
    """``x``, or None when it is infinite or NaN (what JSON can hold)."""
    return x if math.isfinite(x) else None
