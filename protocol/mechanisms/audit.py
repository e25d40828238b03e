"""Empirical privacy audit of a randomizer on two neighbouring inputs (the distinguishing test of
user-level-ldp.md §4.2 TP3; heterogeneous-ldp.md's spot checks are the same test).

A randomizer that is ε-LDP satisfies P(M(x) ∈ S) ≤ e^ε·P(M(x') ∈ S) for every event S and every
pair of inputs. The audit draws the randomizer's output many times on each of two inputs A and B,
reduces each output to a scalar statistic (any function of the output: DP survives
post-processing, and the privacy-loss statistic of the mechanism's own law is the most powerful
one, Neyman–Pearson), cuts the statistic's line into bins of equal probability (under A and
under B, so both tails are seen), and for every bin S bounds log P_A(S)/P_B(S) and its reverse
with Clopper–Pearson intervals. Atoms of the statistic (a clamped privacy loss, say) get a bin of
their own.

* ``lower``: a lower confidence bound of the largest log-ratio over the bins. Every per-bin bound
  holds with probability 1 − α/(2·comparisons) on each of its two counts (Bonferroni over the
  bins and both directions), so a randomizer that is ε-LDP gives ``lower`` > ε with probability at
  most α: ``lower <= epsilon`` is the audit's pass condition, and a randomizer with too little
  noise fails it (the negative control of TP3).
* ``upper``: the upper confidence bound of the log-ratio on the same event (the bin and direction
  of ``lower``). A randomizer whose loss reaches ε on some event (the Laplace mechanism in its
  tails, where that event is the one selected) gives ``upper >= epsilon``; one with too much
  noise (loss ε/2, say) gives ``upper`` < ε on every event: the tightness half.
* ``loss``: the point estimate log(k_A/k_B) (or its reverse) on that event, infinite when one
  input never produced it.

``audit_samples`` works on the two samples of statistics; ``laplace_loss_statistic`` is the
ℓ1 privacy-loss statistic of a Laplace mechanism of equal scale on every coordinate. The
mechanisms' own worst-case inputs live with their families (``fedldp.protocol.user_level.audit``
for the user-level randomizers); ``fedldp.protocol.catalogue.AUDITS`` lists them.

End to end (``ClientAudit``, ``run_client_audit``): the same test on the reports a catalogue
protocol's own client step (``Protocol.privatize``) produces in one round, with the broadcast of
that round (the earlier rounds run first, on a background population, through the protocol's own
privatize and aggregate), at the ε the plan charges the audited participant for that round (what
the ledger records), for two neighbouring datasets of that participant. A leak anywhere between
the plan and the randomizer (a client step that passes more ε than it is charged, or draws less
noise) shows here, where a randomizer-level case would not see it.
``fedldp.protocol.catalogue.CLIENT_AUDITS`` lists the cases of every local protocol.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import betaincinv

from fedldp.protocol.core.base.protocol import Params, Protocol
from fedldp.protocol.core.base.records import (
    JSON,
    FloatArray,
    Plan,
    ReportChunk,
    RoundTask,
    UserData,
    jsonable,
)
from fedldp.protocol.core.streams import UserStreams, stream_key

__all__ = [
    "AuditCase",
    "ClientAudit",
    "ClientStep",
    "Distinguishing",
    "Draw",
    "PrivacyAudit",
    "RepeatedDraw",
    "Statistic",
    "audit_samples",
    "client_step",
    "clopper_pearson",
    "distinguishing_event",
    "laplace_loss_statistic",
    "one_user",
    "run_audit",
    "run_client_audit",
    "scaled_loss",
]


def clopper_pearson(
    successes: ArrayLike, trials: int, alpha: float
) -> tuple[FloatArray, FloatArray]:
    """One-sided Clopper–Pearson bounds at level 1 − α each: (lower, upper) for every count.

    The bounds are Beta quantiles, taken as ``scipy.special.betaincinv`` (the regularized incomplete
    beta's inverse, which ``scipy.stats.beta.ppf`` calls): importing ``scipy.stats`` would add
    0.3 s to every start of the CLI and the server, which import the catalogue and so this module.
    """
    k = np.asarray(successes, dtype=np.float64)
    if trials < 1 or np.any((k < 0) | (k > trials)):
        raise ValueError("counts must lie in [0, trials] with trials >= 1")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, betaincinv(k, trials - k + 1, alpha), 0.0)
        hi = np.where(k < trials, betaincinv(k + 1, trials - k, 1.0 - alpha), 1.0)
    return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)


@dataclass(frozen=True)
class PrivacyAudit:
    """The audit of one randomizer at one claimed ε (module docstring)."""

    epsilon: float
    loss: float
    lower: float
    upper: float
    bins: int
    draws: int
    confidence: float

    def as_json(self) -> dict[str, float | int]:
        return {
            "epsilon": self.epsilon,
            "loss": self.loss,
            "lower": self.lower,
            "upper": self.upper,
            "bins": self.bins,
            "draws": self.draws,
            "confidence": self.confidence,
        }


def _edges(a: FloatArray, b: FloatArray, bins: int) -> FloatArray:
    """Interior bin edges: the k/bins quantiles of A and of B; every edge e also gets
    nextafter(e, +inf), so an atom at e (values equal to a quantile) is a bin of its own."""
    levels = np.arange(1, bins) / bins
    q = np.unique(np.concatenate([np.quantile(a, levels), np.quantile(b, levels)]))
    return np.unique(np.concatenate([q, np.nextafter(q, np.inf)]))


def audit_samples(
    a: ArrayLike, b: ArrayLike, epsilon: float, *, bins: int = 40, confidence: float = 0.999
) -> PrivacyAudit:
    """The audit of ``epsilon``-LDP from statistics of the randomizer's outputs on input A
    (``a``) and on its neighbour B (``b``), equally many draws of each."""
    sa = np.asarray(a, dtype=np.float64).reshape(-1)
    sb = np.asarray(b, dtype=np.float64).reshape(-1)
    if sa.size != sb.size or sa.size < 2:
        raise ValueError("need equally many draws (>= 2) on each input")
    if not (np.all(np.isfinite(sa)) and np.all(np.isfinite(sb))):
        raise ValueError("statistics must be finite")
    if bins < 2:
        raise ValueError(f"bins must be >= 2, got {bins}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
    n = int(sa.size)
    edges = _edges(sa, sb, bins)
    cells = edges.size + 1
    ka = np.bincount(np.searchsorted(edges, sa, side="right"), minlength=cells)
    kb = np.bincount(np.searchsorted(edges, sb, side="right"), minlength=cells)
    seen = (ka + kb) > 0
    found = distinguishing_event(ka[seen], kb[seen], n, confidence)
    return PrivacyAudit(
        epsilon=float(epsilon),
        loss=found.loss,
        lower=found.lower,
        upper=found.upper,
        bins=int(seen.sum()),
        draws=n,
        confidence=float(confidence),
    )


@dataclass(frozen=True)
class Distinguishing:
    """The most distinguishing of a family of events (``distinguishing_event``): its index in
    the family, its direction (``forward``: log P_A/P_B, else log P_B/P_A), the point estimate
    of that log-ratio and its simultaneous confidence interval [``lower``, ``upper``]."""

    event: int
    forward: bool
    loss: float
    lower: float
    upper: float


def distinguishing_event(
    ka: ArrayLike, kb: ArrayLike, draws: int, confidence: float
) -> Distinguishing:
    """The event of largest lower confidence bound on its privacy loss, among E events whose
    counts are ``ka`` in ``draws`` reports on A and ``kb`` in ``draws`` on B.

    Each event's two log-ratios (A over B, B over A) are bounded with the four one-sided
    Clopper–Pearson bounds of its two counts, each at level 1 − (1 − ``confidence``)/(4E)
    (Bonferroni over the 4E bounds): with probability at least ``confidence`` every interval
    holds at once, so for an ε-LDP randomizer the returned ``lower`` exceeds ε with probability
    at most 1 − ``confidence``. The counts must be binomial: the events are fixed before the
    reports are drawn (or, as ``audit_samples``'s quantile bins, nearly so)."""
    ca = np.asarray(ka, dtype=np.float64).reshape(-1)
    cb = np.asarray(kb, dtype=np.float64).reshape(-1)
    if ca.size == 0 or ca.size != cb.size:
        raise ValueError("need one count on A and one on B for each of >= 1 events")
    alpha = (1.0 - confidence) / (4.0 * ca.size)  # 2 directions × 2 counts per event
    lo_a, hi_a = clopper_pearson(ca, draws, alpha)
    lo_b, hi_b = clopper_pearson(cb, draws, alpha)
    with np.errstate(divide="ignore", invalid="ignore"):  # an event neither input produced
        # rows: the log-ratio A over B, then B over A, for every event
        lower = np.stack([np.log(lo_a) - np.log(hi_b), np.log(lo_b) - np.log(hi_a)])
        upper = np.stack([np.log(hi_a) - np.log(lo_b), np.log(hi_b) - np.log(lo_a)])
        point = np.stack([np.log(ca) - np.log(cb), np.log(cb) - np.log(ca)])
    # the most distinguishing event: the event and direction of the largest lower bound; its
    # interval [lower, upper] holds the loss on that event (simultaneously with every other)
    row, event = np.unravel_index(int(np.argmax(lower)), lower.shape)
    return Distinguishing(
        event=int(event),
        forward=bool(row == 0),
        loss=float(point[row, event]),
        lower=float(lower[row, event]),
        upper=float(upper[row, event]),
    )


def laplace_loss_statistic(z: ArrayLike, v_a: ArrayLike, v_b: ArrayLike) -> FloatArray:
    """‖z − v_B‖₁ − ‖z − v_A‖₁ per output row: (Δ1/ε)·the privacy loss log p(z|A)/p(z|B) of a
    Laplace mechanism with equal scale on every coordinate and noiseless outputs v_A, v_B."""
    out = np.asarray(z, dtype=np.float64)
    out = out.reshape(out.shape[0], -1)
    va = np.asarray(v_a, dtype=np.float64).reshape(1, -1)
    vb = np.asarray(v_b, dtype=np.float64).reshape(1, -1)
    # each coordinate's term depends on z only through clip(z, [v_A, v_B]): clipping first makes
    # the loss's atoms (z beyond either end) exact, not a cloud of rounding errors that the
    # audit's bins would split by the size of z
    c = np.clip(out, np.minimum(va, vb), np.maximum(va, vb))
    return np.asarray(np.abs(c - vb).sum(axis=1) - np.abs(c - va).sum(axis=1))


Draw = Callable[[float, int, np.random.Generator], tuple[FloatArray, FloatArray]]
"""``draw(epsilon, draws, rng)``: ``draws`` samples of a scalar statistic of a randomizer's
output at ``epsilon`` on input A, and ``draws`` on input B (``AuditCase``)."""

RepeatedDraw = Callable[[float, int, int, np.random.Generator], tuple[FloatArray, FloatArray]]
"""``repeated(epsilon, draws, collections, rng)``: as ``Draw``, but each sample is a statistic
of the ``collections`` reports one device sends when the same question is asked of it that many
times (each report at ``epsilon``): the transcript a repeated collection leaves with the
server, whose privacy loss is what memoization bounds (docs/longitudinal.md)."""


@dataclass(frozen=True)
class AuditCase:
    """A randomizer and its worst-case neighbouring inputs, for ``run_audit``.

    ``draw(epsilon, draws, rng)`` runs the randomizer as its protocol does at privacy
    ``epsilon``, ``draws`` times on input A and ``draws`` times on input B, and returns the two
    samples of a scalar statistic of the outputs. ``tight``: the randomizer's loss reaches ε on
    some event (so the audit's ``upper`` must reach ε too).

    A case of a repeated collection also has ``repeated`` (``RepeatedDraw``: the statistic of
    T reports of one device, ``run_audit``'s ``collections`` = T) and may give ``exact(epsilon,
    collections)``, the exact privacy loss of its statistic's law (the largest log-ratio over
    its values; ``math.inf`` when some value is possible on one input only), the theory an
    audit of T collections is drawn against.
    """

    name: str
    summary: str
    draw: Draw
    tight: bool = True
    repeated: RepeatedDraw | None = None
    exact: Callable[[float, int], float] | None = None


def run_audit(
    case: AuditCase,
    epsilon: float,
    *,
    draws: int,
    rng: np.random.Generator,
    noise: float = 1.0,
    bins: int = 40,
    confidence: float = 0.999,
    collections: int = 1,
) -> PrivacyAudit:
    """Audit ``case`` for ``epsilon``-LDP. ``noise`` < 1 runs the randomizer with that fraction
    of its noise scale (it is given ε/noise) while the audit still claims ε: the negative
    control (``noise`` = 0.5 is TP3's halved noise scale, a 2ε randomizer). ``collections`` = T
    > 1 audits the transcript of T reports of one device (a case with ``repeated`` only): its
    loss is bounded by T·ε (composition) and, under memoization, by the permanent response's
    ε whatever T."""
    if not (math.isfinite(noise) and noise > 0):
        raise ValueError(f"noise must be finite and > 0, got {noise}")
    if collections < 1:
        raise ValueError(f"collections must be >= 1, got {collections}")
    if case.repeated is not None:
        a, b = case.repeated(epsilon / noise, draws, collections, rng)
    elif collections == 1:
        a, b = case.draw(epsilon / noise, draws, rng)
    else:
        raise ValueError(f"audit case {case.name!r} audits one report: collections must be 1")
    return audit_samples(a, b, epsilon, bins=bins, confidence=confidence)


# --------------------------------------------------------------------------- end to end

NOISELESS_EPSILON = 1e200
"""The ε at which ``ClientStep.noiseless`` runs a Laplace client step: its noise scale (a
sensitivity over ε) is ~1e-200, below every rounding of the report, so the report is its
noiseless value, computed by the protocol's own code."""

_BLOCK = 10_000
"""Reports privatized per call of ``ClientStep.privatize`` (each gets its own copy of the data)."""

_PURPOSE = 0xA0D17
"""Purpose word of the audit's stream keys (``fedldp.protocol.core.streams.stream_key``)."""


@dataclass(frozen=True)
class ClientStep:
    """One participant's client step in one round of a planned study: the protocol's own
    ``privatize`` with that round's task (the broadcast as clients receive it,
    ``Protocol.client_broadcast``), the ε the plan charges the participant in that round
    (``RoundPlan.epsilon``, what the ledger records) and its group."""

    protocol: Protocol[Any]
    params: Params
    plan: Plan
    round: int
    task: RoundTask
    slot: int
    epsilon: float
    group: int

    def privatize(
        self, data: UserData, draws: int, seed: int, epsilon: float | None = None
    ) -> FloatArray:
        """``draws`` reports of a participant holding ``data`` (one user's dataset), each with
        its own stream under ``seed``, at the charged ε (or ``epsilon``)."""
        if data.n_users != 1:
            raise ValueError("the audited dataset is one user's")
        eps = self.epsilon if epsilon is None else float(epsilon)
        key = stream_key(seed, _PURPOSE, self.round)
        out = []
        for start in range(0, draws, _BLOCK):  # blocks keep the copies of the data small
            size = min(_BLOCK, draws - start)
            rows = self.protocol.privatize(
                self.params,
                self.task,
                data.take(np.zeros(size, dtype=np.int64)),
                np.full(size, eps),
                np.full(size, self.group, dtype=np.int64),
                UserStreams(key, np.arange(start, start + size)),
            )
            out.append(np.asarray(rows, dtype=np.float64).reshape(size, -1))
        return np.concatenate(out)

    def noiseless(self, data: UserData) -> FloatArray:
        """The report of a Laplace client step without its noise (``NOISELESS_EPSILON``)."""
        return np.asarray(self.privatize(data, 1, 0, NOISELESS_EPSILON)[0], dtype=np.float64)


def one_user(samples: ArrayLike, labels: ArrayLike | None = None) -> UserData:
    """One user's dataset of ``samples`` (and ``labels``, broadcast to one per sample)."""
    values = np.asarray(samples)
    y = None
    if labels is not None:
        y = np.broadcast_to(np.asarray(labels, dtype=np.float64), values.shape[:1]).copy()
    return UserData(values, np.array([values.shape[0]], dtype=np.int64), y)


def client_step(
    protocol: Protocol[Any],
    raw_params: Mapping[str, Any],
    epsilon: ArrayLike,
    background: UserData,
    round_index: int,
    *,
    metadata: Mapping[str, NDArray[Any]] | None = None,
    group: int | None = None,
    seed: int = 0,
) -> ClientStep:
    """Plan a study of ``background.n_users`` participants enrolled at ``epsilon``, run its
    rounds before ``round_index`` on ``background`` (each cohort member's own data, through the
    protocol's privatize, check and aggregate), and return the client step of round
    ``round_index`` for its first cohort member (of ``group``, when given)."""
    params = protocol.parse_params(raw_params)
    n = background.n_users
    eps = np.broadcast_to(np.asarray(epsilon, dtype=np.float64), (n,)).copy()
    plan = protocol.plan(params, eps, metadata or {}, seed)
    outputs: list[JSON] = []
    for k, rp in enumerate(plan.rounds[:round_index]):
        task = RoundTask.of(rp, protocol.broadcast(params, plan, k, outputs))
        sent = RoundTask.of(rp, protocol.client_broadcast(task.broadcast))
        streams = UserStreams(stream_key(seed, _PURPOSE, 1 << 20, k), rp.cohort)
        rows = protocol.privatize(
            params, sent, background.take(rp.cohort), rp.epsilon, rp.groups(), streams
        )
        ok = protocol.check(params, task, rp.epsilon, rows)
        ok &= protocol.check_members(params, plan, task, rp.cohort, rows)
        if not np.all(ok):
            raise ValueError(f"background reports of round {k} fail the protocol's checks")
        chunk = ReportChunk(rp.cohort, rp.epsilon, rp.groups(), rows)
        outputs.append(jsonable(protocol.aggregate(params, plan, k, task.broadcast, [chunk])))
    rp = plan.rounds[round_index]
    members = np.flatnonzero(rp.groups() == group) if group is not None else np.arange(1)
    if members.size == 0:
        raise ValueError(f"round {round_index} has no member in group {group}")
    i = int(members[0])
    task = RoundTask.of(rp, protocol.broadcast(params, plan, round_index, outputs))
    return ClientStep(
        protocol,
        params,
        plan,
        round_index,
        RoundTask.of(rp, protocol.client_broadcast(task.broadcast)),
        int(rp.cohort[i]),
        float(rp.epsilon[i]),
        int(rp.groups()[i]),
    )


Statistic = Callable[[ClientStep, UserData, UserData], Callable[[FloatArray], FloatArray]]
"""A statistic factory: ``statistic(step, a, b)`` is called once per audit, with the audited
client step (``client_step``: its task, params, charged ε, ``noiseless`` reports) and the two
neighbouring datasets A and B, and returns the function the audit applies to every block of
reports: ``reports`` of shape ``(draws, prod(payload_shape))`` (one flattened report a row, from
A or from B) → a float64 array of ``draws`` scalars. Any function of the report is sound (DP
survives post-processing); the audit's power depends on it, the best being the privacy loss of
the mechanism's own law (``scaled_loss`` for Laplace reports; for randomized response, the
indicator of the report the two inputs disagree most on, e.g. "the report is item 0"). The
factory may raise ValueError when A and B do not suit it."""


def scaled_loss(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
    """The ℓ1 privacy-loss statistic of a Laplace report vector whose noiseless values on A and
    B (``ClientStep.noiseless``) differ by Δ_c on coordinate c and whose noise scale is
    proportional to Δ_c (every coordinate saturated: Σ_c Δ_c/b_c = ε): each coordinate in units
    of its Δ_c, coordinates where A and B agree dropped, then ``laplace_loss_statistic``, a
    constant multiple of the exact privacy loss. Under any other law the audit stays sound (it is
    a statistic of the output) and only loses power."""
    va, vb = step.noiseless(a), step.noiseless(b)
    delta = np.abs(va - vb)
    keep = delta > 1e-9 * np.maximum(1.0, np.maximum(np.abs(va), np.abs(vb)))
    if not np.any(keep):
        raise ValueError("the two datasets give the same noiseless report")
    unit = delta[keep]

    def statistic(z: FloatArray) -> FloatArray:
        out = laplace_loss_statistic(z[:, keep] / unit, va[keep] / unit, vb[keep] / unit)
        return np.asarray(out, dtype=np.float64)

    return statistic


@dataclass(frozen=True)
class ClientAudit:
    """A catalogue protocol's client step in one round, on its worst-case neighbouring datasets.

    ``protocol``, ``round`` (the audited round's name), ``summary`` (one line on the case) and
    ``variant`` name the case (``name``). ``setup(epsilon)`` plans a study with every participant
    enrolled at ``epsilon`` and returns the audited participant's step in that round
    (``client_step``, whose ``background`` population is what the study is planned for and the
    earlier rounds run on; the audited participant is its first cohort member, whose own data
    there does not matter: the audit runs the step on ``a`` and ``b``). ``a`` and ``b`` are that
    participant's two datasets (``one_user``), neighbours under the protocol's privacy
    definition, chosen as far apart as the definition allows (the worst case). ``statistic`` is
    a ``Statistic`` factory, ``(step, a, b) → (reports → scalars)``: the audit calls it once, then
    applies the function to the draws on A and on B. ``tight``: the loss reaches the charged ε
    on some event (the audit then also checks that its upper bound reaches ε).
    """

    protocol: str
    round: str
    summary: str
    setup: Callable[[float], ClientStep]
    a: UserData
    b: UserData
    statistic: Statistic
    tight: bool = True
    variant: str = ""

    @property
    def name(self) -> str:
        return f"{self.protocol}:{self.round}" + (f":{self.variant}" if self.variant else "")


def run_client_audit(
    case: ClientAudit,
    epsilon: float,
    *,
    draws: int,
    seed: int,
    noise: float = 1.0,
    bins: int = 40,
    confidence: float = 0.999,
) -> PrivacyAudit:
    """Audit ``case`` with every participant enrolled at ``epsilon``: the audit's ε is what the
    plan charges the audited participant in the round. ``noise`` < 1 runs the client step at
    charge/noise (the negative control of ``run_audit``)."""
    if not (math.isfinite(noise) and noise > 0):
        raise ValueError(f"noise must be finite and > 0, got {noise}")
    step = case.setup(epsilon)
    statistic = case.statistic(step, case.a, case.b)
    run_eps = step.epsilon / noise
    za = step.privatize(case.a, draws, seed, run_eps)
    zb = step.privatize(case.b, draws, seed + 1, run_eps)
    return audit_samples(
        statistic(za), statistic(zb), step.epsilon, bins=bins, confidence=confidence
    )
