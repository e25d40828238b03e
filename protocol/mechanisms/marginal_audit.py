"""Protocol-agnostic privacy audit of a client step: the marginals of its reports.

The end-to-end audit (``fedldp.protocol.mechanisms.audit``) is only as strong as the scalar
statistic its case reduces a report to: a report that carries the data in a coordinate the
statistic ignores passes it. This audit needs no statistic. It draws the client step's reports
(``ClientStep.privatize``, at the charged ε) on the two neighbouring datasets A and B and looks
at every event of a fixed family on each report coordinate separately, and, when a report takes
few distinct values, on the whole report:

* a *discrete* target (at most ``OUTCOMES`` distinct values in the pilot): the events "equals v"
  for each value v the pilot showed, and "any other value";
* a *continuous* coordinate (more values): the threshold events "≤ t" and "> t" at ``THRESHOLDS``
  quantiles t of the pooled pilot (both tails, where a Laplace mechanism's loss is largest).

Each marginal of an ε-LDP report is ε-LDP (post-processing), so P_A(S) ≤ e^ε·P_B(S) for each of
these events S. The events come from a *pilot* sample (``PILOT`` reports per dataset) drawn
before and independently of the audited ones, so the audited counts are exactly binomial. With E
events in all, ``distinguishing_event`` bounds every event's two log-ratios with four one-sided
Clopper–Pearson bounds at level 1 − (1 − confidence)/(4E) each (Bonferroni over the 4E bounds:
2 directions × 2 counts × E events, E summed over the outcomes and thresholds of every audited
coordinate and the whole report): an ε-LDP step gives ``lower`` > ε with probability at most
1 − confidence, the same false-failure probability as the end-to-end audit.

Cost: a report wider than ``COORDINATES`` coordinates is audited on the ``COORDINATES`` whose
pilot marginals differ most between A and B (a choice made on the pilot alone, so the audit
stays exact); E ≤ COORDINATES·max(OUTCOMES + 1, 2·THRESHOLDS) + OUTCOMES + 1 = 561, and the
default ``DRAWS`` = 20 000 reports per dataset resolve a loss of 2ε from ε on an event of
probability 0.05 under A: at the smallest level, 1 − 4.5e-7 (E = 561), its 1 000 expected counts
bound log P_A within 0.16 and the e^{-2ε}·1 000 on B bound log P_B within 0.39 at ε = 1 (0.97 at
ε = 2), so ``lower`` is 1.45 at ε = 1 (2.87 at ε = 2). Every report is drawn by the protocol's
own ``privatize``: the audit costs 2·(PILOT + DRAWS) client steps per case and ε, under half of
the end-to-end audit's 2·50 000.

What it cannot see: a leak in the joint law of several coordinates that no single marginal shows
(a ±1 vector whose signs agree with the data only as a whole, a Laplace vector whose ε is split
across coordinates at twice its charge: each marginal then loses 2ε/d; a report with more than
``OUTCOMES`` distinct whole values gets no whole-report events), a leak on an event not made of
the events above (an interval between two pilot quantiles of a continuous coordinate, a part of
a tail beyond the outermost), and a leak smaller than its resolution. The case's own statistic
(the mechanism's worst case) remains the audit of record; this one catches what it overlooks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fedldp.protocol.core.base.records import FloatArray, IntArray, UserData
from fedldp.protocol.mechanisms.audit import ClientStep, distinguishing_event

__all__ = [
    "COORDINATES",
    "DRAWS",
    "OUTCOMES",
    "PILOT",
    "THRESHOLDS",
    "MarginalAudit",
    "audit_marginals",
    "run_marginal_audit",
]

PILOT = 2_000
"""Reports per dataset that fix the events (values, thresholds, audited coordinates)."""

DRAWS = 20_000
"""Reports per dataset the events are counted on (``run_marginal_audit``'s default)."""

OUTCOMES = 32
"""A target with at most this many distinct values in the pilot is audited value by value."""

THRESHOLDS = 15
"""Pooled pilot quantiles (levels k/16) a continuous coordinate is cut at."""

COORDINATES = 16
"""Coordinates audited at most (those whose pilot marginals differ most between A and B)."""


@dataclass(frozen=True)
class _Target:
    """A report coordinate (``columns`` of one index) or the whole report, and its events."""

    name: str
    columns: IntArray
    values: FloatArray | None  # discrete: the pilot's distinct rows (m × width), sorted
    thresholds: FloatArray | None  # continuous: the cut points, increasing

    @property
    def size(self) -> int:
        if self.values is not None:
            return int(self.values.shape[0]) + 1
        assert self.thresholds is not None
        return 2 * int(self.thresholds.size)

    def counts(self, z: FloatArray) -> IntArray:
        """How many rows of ``z`` fall in each event."""
        rows = z[:, self.columns]
        if self.values is not None:
            m = self.values.shape[0]
            if rows.shape[1] == 1:  # a coordinate: its values are sorted
                at = np.minimum(np.searchsorted(self.values[:, 0], rows[:, 0]), m - 1)
                cell = np.where(self.values[at, 0] == rows[:, 0], at, m)
            else:  # the whole report: at most OUTCOMES rows to compare with
                cell = np.full(rows.shape[0], m, dtype=np.int64)
                for i, value in enumerate(self.values):
                    cell[(cell == m) & np.all(rows == value, axis=1)] = i
            return np.bincount(cell, minlength=m + 1)
        assert self.thresholds is not None
        below = np.searchsorted(np.sort(rows[:, 0]), self.thresholds, side="right")
        return np.concatenate([below, rows.shape[0] - below]).astype(np.int64)

    def event(self, index: int) -> str:
        if self.values is not None:
            if index == self.values.shape[0]:
                return "a value the pilot never showed"
            shown = ", ".join(f"{v:.4g}" for v in self.values[index])
            return f"= ({shown})" if self.values.shape[1] > 1 else f"= {shown}"
        assert self.thresholds is not None
        k = self.thresholds.size
        return f"{'≤' if index < k else '>'} {self.thresholds[index % k]:.4g}"


def _target(name: str, columns: IntArray, pooled: FloatArray) -> _Target:
    values = np.unique(pooled, axis=0)
    if values.shape[0] <= OUTCOMES:
        return _Target(name, columns, values, None)
    levels = np.arange(1, THRESHOLDS + 1) / (THRESHOLDS + 1)
    return _Target(name, columns, None, np.unique(np.quantile(pooled[:, 0], levels)))


def _targets(pilot_a: FloatArray, pilot_b: FloatArray) -> list[_Target]:
    """The audited targets, fixed by the pilot alone (module docstring)."""
    pooled = np.concatenate([pilot_a, pilot_b])
    width = pooled.shape[1]
    found = [_target(f"coordinate {c}", np.array([c]), pooled[:, c : c + 1]) for c in range(width)]
    if width > COORDINATES:

        def gap(t: _Target) -> float:
            ka, kb = t.counts(pilot_a), t.counts(pilot_b)
            return float(np.max(np.abs(np.log((ka + 1.0) / (kb + 1.0)))))

        order = np.argsort([-gap(t) for t in found], kind="stable")
        found = [found[i] for i in sorted(order[:COORDINATES])]
    if width > 1:
        whole = _target("the whole report", np.arange(width), pooled)
        if whole.values is not None:
            found.append(whole)
    return found


@dataclass(frozen=True)
class MarginalAudit:
    """The marginal audit of one client step at one charged ε (module docstring): the most
    distinguishing event (``target``, ``event``, ``forward``: A over B), its point loss and
    simultaneous interval [``lower``, ``upper``]; ``events`` E, ``coordinates`` audited of
    ``width``, ``draws`` per dataset."""

    epsilon: float
    loss: float
    lower: float
    upper: float
    target: str
    event: str
    forward: bool
    events: int
    coordinates: int
    width: int
    draws: int
    confidence: float

    @property
    def where(self) -> str:
        return f"{self.target} {self.event} ({'A over B' if self.forward else 'B over A'})"


def _reports(z: ArrayLike) -> FloatArray:
    out = np.asarray(z, dtype=np.float64)
    out = out.reshape(out.shape[0], -1)
    if not np.all(np.isfinite(out)):
        raise ValueError("reports must be finite")
    return out


def audit_marginals(
    pilot_a: ArrayLike,
    pilot_b: ArrayLike,
    a: ArrayLike,
    b: ArrayLike,
    epsilon: float,
    *,
    confidence: float = 0.999,
) -> MarginalAudit:
    """The audit of ``epsilon``-LDP from reports (rows) on A and on its neighbour B: the
    ``pilot_*`` rows fix the events, the ``a`` and ``b`` rows (equally many, drawn
    independently of the pilot) are counted in them."""
    pa, pb, za, zb = (_reports(z) for z in (pilot_a, pilot_b, a, b))
    if za.shape != zb.shape or za.shape[0] < 1 or pa.shape[1:] != za.shape[1:]:
        raise ValueError("need equally many reports (>= 1) of one width on each input")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
    targets = _targets(pa, pb)
    ka = np.concatenate([t.counts(za) for t in targets])
    kb = np.concatenate([t.counts(zb) for t in targets])
    n = int(za.shape[0])
    found = distinguishing_event(ka, kb, n, confidence)
    ends = np.cumsum([t.size for t in targets])
    i = int(np.searchsorted(ends, found.event, side="right"))
    start = int(ends[i - 1]) if i else 0
    return MarginalAudit(
        epsilon=float(epsilon),
        loss=found.loss,
        lower=found.lower,
        upper=found.upper,
        target=targets[i].name,
        event=targets[i].event(found.event - start),
        forward=found.forward,
        events=int(ka.size),
        coordinates=sum(t.columns.size == 1 for t in targets),
        width=int(za.shape[1]),
        draws=n,
        confidence=float(confidence),
    )


def run_marginal_audit(
    step: ClientStep,
    a: UserData,
    b: UserData,
    *,
    seed: int,
    draws: int = DRAWS,
    pilot: int = PILOT,
    noise: float = 1.0,
    confidence: float = 0.999,
) -> MarginalAudit:
    """Audit ``step`` at its charged ε on neighbouring datasets ``a`` and ``b``: ``pilot`` and
    then ``draws`` reports on each, under seeds ``seed`` + 2 … ``seed`` + 5 (the end-to-end audit
    of ``seed`` draws under ``seed`` and ``seed`` + 1). ``noise`` < 1 runs the step at
    charge/noise (the negative control of ``run_client_audit``)."""
    if not (math.isfinite(noise) and noise > 0):
        raise ValueError(f"noise must be finite and > 0, got {noise}")
    if pilot < 1 or draws < 1:
        raise ValueError("pilot and draws must be >= 1")
    run_eps = step.epsilon / noise
    pa = step.privatize(a, pilot, seed + 2, run_eps)
    pb = step.privatize(b, pilot, seed + 3, run_eps)
    za = step.privatize(a, draws, seed + 4, run_eps)
    zb = step.privatize(b, draws, seed + 5, run_eps)
    return audit_marginals(pa, pb, za, zb, step.epsilon, confidence=confidence)
