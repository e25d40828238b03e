"""The kit's checks that run in process: a protocol's simulated run replayed round by round
(its tasks and its honest reports, with the simulator's own streams), then its ledger, its report
checks, its aggregation under other chunkings, its pickling and its catalogue entry.

Each check is a function of a ``Subject`` that returns what it covered and raises
``CheckFailed`` (an AssertionError) with the reason when the protocol breaks the contract of
``fedldp.protocol.core.base.protocol.Protocol`` it checks.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import pickle
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedldp.client.behaviour import Behaviour, attack_payloads
from fedldp.client.population.build import AnyPopulation
from fedldp.client.seeds import derive_seeds, noise_seed, round_key
from fedldp.client.simulate import SimulationResult, simulate
from fedldp.protocol.core.base.protocol import Params, Protocol
from fedldp.protocol.core.base.records import (
    BoolArray,
    FloatArray,
    IntArray,
    ReportChunk,
    RoundPlan,
    RoundTask,
    jsonable,
)
from fedldp.protocol.core.ledger import TOLERANCE
from fedldp.protocol.core.streams import UserStreams

__all__ = [
    "CheckFailed",
    "CheckSkipped",
    "Replayed",
    "Subject",
    "check_chunking",
    "check_describe",
    "check_ledger",
    "check_pickle",
    "check_reports",
    "check_same_seed",
    "same_estimate",
]

OUTSIDE_COORDINATES = 4
"""How many coordinates of a report the bounds check moves past each end of its bounds."""


class CheckFailed(AssertionError):
    """A protocol broke the part of its contract a check tests (the message says how)."""


class CheckSkipped(Exception):
    """A check that does not apply to the protocol (the message says why)."""


def ensure(condition: bool, reason: str) -> None:
    if not condition:
        raise CheckFailed(reason)


@dataclass(frozen=True)
class Subject:
    """What the kit checks: a protocol, its raw parameters (filled from the population), a
    population built for ``seed`` and the simulator's run of them."""

    protocol: Protocol[Any]
    raw_params: Mapping[str, Any]
    params: Params
    population: AnyPopulation
    seed: int
    run: SimulationResult

    @property
    def name(self) -> str:
        return self.protocol.name


@dataclass(frozen=True)
class Replayed:
    """One round of the subject's run as the server saw it: the whole broadcast (``task``),
    what clients were sent (``sent``), the cohort's ids, charges and groups, and the honest
    reports of the cohort, in slot order."""

    index: int
    round: RoundPlan
    task: RoundTask
    sent: RoundTask
    payloads: FloatArray

    @property
    def slots(self) -> IntArray:
        return self.round.cohort

    @property
    def epsilon(self) -> FloatArray:
        return self.round.epsilon

    @property
    def groups(self) -> IntArray:
        return self.round.groups()


def replay(subject: Subject) -> Iterator[Replayed]:
    """Every round of the subject's run: broadcasts from the run's outputs, reports from each
    participant's own stream (``round_key``), exactly what ``simulate`` computed."""
    protocol, params, plan = subject.protocol, subject.params, subject.run.plan
    outputs = subject.run.outputs
    pop = subject.population
    for k, rp in enumerate(plan.rounds):
        task = RoundTask.of(rp, protocol.broadcast(params, plan, k, outputs[:k]))
        sent = dataclasses.replace(task, broadcast=protocol.client_broadcast(task.broadcast))
        streams = UserStreams(round_key(pop.population_seed, k), rp.cohort)
        rows = protocol.privatize(
            params, sent, pop.data(rp.cohort), rp.epsilon, rp.groups(), streams
        )
        yield Replayed(k, rp, task, sent, np.asarray(rows, dtype=np.float64))


def simulate_subject(
    protocol: Protocol[Any], raw: Mapping[str, Any], population: AnyPopulation, seed: int
) -> SimulationResult:
    return simulate(protocol, protocol.parse_params(raw), population, seed)


def same_estimate(a: float | list[float] | None, b: float | list[float] | None) -> str | None:
    """None when the two estimates are equal to the last digit, else how they differ."""
    if a is None or b is None:
        return None if a is b else f"{a!r} against {b!r}"
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        return f"shapes {x.shape} and {y.shape}"
    if np.array_equal(x, y, equal_nan=True):
        return None
    worst = float(np.max(np.abs(x - y) / np.maximum(np.abs(y), 1e-300)))
    return f"{a!r} against {b!r} (largest relative difference {worst:.3g})"


# --------------------------------------------------------------------------- same seed


def check_same_seed(subject: Subject) -> str:
    """A second run with the same seed gives the same plan and estimate, to the last digit."""
    again = simulate_subject(subject.protocol, subject.raw_params, subject.population, subject.seed)
    diff = same_estimate(again.result.estimate, subject.run.result.estimate)
    ensure(diff is None, f"two in-process runs with seed {subject.seed} differ: {diff}")
    ensure(
        np.array_equal(again.charges, subject.run.charges),
        "two plans with the same seed charge differently",
    )
    return f"two runs at seed {subject.seed} agree"


# --------------------------------------------------------------------------- ledger


def _plan_charges(subject: Subject, epsilon: FloatArray, what: str) -> FloatArray:
    """Plan the subject with ``epsilon`` and check each round's charges and the totals."""
    protocol, params, pop = subject.protocol, subject.params, subject.population
    study_seed = derive_seeds(subject.seed)[0]
    seed = noise_seed(subject.seed) if protocol.trust == "central" else study_seed
    plan = protocol.plan(params, epsilon, pop.metadata, seed)
    n = epsilon.shape[0]
    ensure(
        plan.n_participants == n, f"{what}: a plan for {n} participants says {plan.n_participants}"
    )
    for rp in plan.rounds:
        where = f"{what}, round {rp.index} ({rp.name})"
        ensure(
            rp.cohort.size == 0 or (rp.cohort[0] >= 0 and rp.cohort[-1] < n),
            f"{where}: a cohort slot outside 0..{n - 1}",
        )
        charge = rp.epsilon
        ensure(
            bool(np.all(np.isfinite(charge) & (charge > 0))),
            f"{where}: a charge that is not finite and > 0",
        )
        over = charge > epsilon[rp.cohort] + TOLERANCE
        ensure(
            not over.any(),
            f"{where}: participant {int(rp.cohort[np.argmax(over)])} is charged "
            f"{float(charge[np.argmax(over)]):g} in one round, beyond its declared "
            f"ε={float(epsilon[rp.cohort][np.argmax(over)]):g}",
        )
    total = plan.charges()
    over = total > epsilon + TOLERANCE
    ensure(
        not over.any(),
        f"{what}: participant {int(np.argmax(over))} is charged {float(total[np.argmax(over)]):g} "
        f"over the plan's rounds, beyond its declared ε={float(epsilon[np.argmax(over)]):g}",
    )
    again = protocol.plan(params, epsilon, pop.metadata, seed).charges()
    ensure(np.array_equal(again, total), f"{what}: the same plan twice charges differently")
    return total


def check_ledger(subject: Subject) -> str:
    """Nobody is charged more than its declared ε, in one round or over all of them
    (``fedldp.protocol.core.ledger``), with the population's ε's and with unequal ones."""
    declared = np.asarray(subject.population.epsilon, dtype=np.float64)
    _plan_charges(subject, declared, "the population's ε's")
    # unequal ε's: every other participant at twice its ε (a plan feasible at the population's
    # ε's stays feasible when some ε's grow, for the catalogue's rules; one refused is reported)
    unequal = declared * np.where(np.arange(declared.size) % 2 == 1, 2.0, 1.0)
    try:
        _plan_charges(subject, unequal, "unequal ε's (every other participant at twice its ε)")
    except ValueError as exc:
        return f"charges within the declared ε's; the unequal-ε plan was refused: {exc}"
    return "charges within the declared ε's, equal and unequal"


# --------------------------------------------------------------------------- report checks


def refused(subject: Subject, r: Replayed, rows: FloatArray) -> BoolArray:
    """Which of ``rows`` (one per cohort member, in slot order) the server refuses: the
    protocol's ``check``, ``check_members`` and plausibility bounds, as
    ``fedldp.server.services.ingest`` applies them (a ValueError refuses them all)."""
    p, params = subject.protocol, subject.params
    try:
        # numpy's floating-point warnings on injected values (the norm of a row of 1.8e308,
        # nan_to_num's inf) are not the finding, the verdict is
        with np.errstate(all="ignore"):
            ok = p.check(params, r.task, r.epsilon, rows)
            ok = ok & p.check_members(params, subject.run.plan, r.task, r.slots, rows)
            ok = ok & p.plausible(params, r.task, r.epsilon, r.groups, rows)
    except ValueError:
        return np.ones(rows.shape[0], dtype=np.bool_)
    return np.asarray(~np.asarray(ok, dtype=np.bool_), dtype=np.bool_)


def _check_round(subject: Subject, r: Replayed) -> str:
    where = f"round {r.index} ({r.round.name})"
    honest = refused(subject, r, r.payloads)
    ensure(
        not honest.any(),
        f"{where}: an honest report is refused (slot {int(r.slots[np.argmax(honest)])})",
    )
    for bad in (np.nan, np.inf, -np.inf):
        rows = r.payloads.copy()
        rows.reshape(rows.shape[0], -1)[0, 0] = bad
        ensure(bool(refused(subject, r, rows)[0]), f"{where}: a report holding {bad} is accepted")
    longer = np.concatenate([r.payloads.reshape(r.payloads.shape[0], -1)] * 2, axis=1)
    ensure(
        bool(refused(subject, r, longer).all()), f"{where}: a report of the wrong shape is accepted"
    )
    bounds = subject.protocol.report_bounds(subject.params, r.task, r.epsilon, r.groups)
    if bounds is None:
        return f"{where}: no report bounds declared"
    attacker = np.asarray(
        attack_payloads(
            Behaviour(attack="output", attackers=1.0),
            subject.protocol,
            subject.params,
            r.sent,
            subject.population.data(r.slots),
            r.epsilon,
            r.groups,
            UserStreams(round_key(subject.population.population_seed, r.index), r.slots),
        ),
        dtype=np.float64,
    )
    plausible = subject.protocol.plausible(subject.params, r.task, r.epsilon, r.groups, attacker)
    ensure(
        bool(np.all(plausible)),
        f"{where}: the output attacker's report (the upper report bound itself, or the "
        f"protocol's output_attack_reports; fedldp.client.behaviour) fails the plausibility "
        f"bounds for slot {int(r.slots[np.argmin(plausible)])}: the bounds must include their "
        "ends",
    )
    crafted = refused(subject, r, attacker)
    attack = (
        "the output attacker's report passes every check"
        if not crafted.any()
        else f"the output attacker's report is refused by the protocol's checks for "
        f"{int(crafted.sum())} of {crafted.size} senders (its valid reports are not the whole "
        "box of its bounds)"
    )
    shape = attacker.shape
    lo, hi = (
        np.broadcast_to(np.asarray(b, dtype=np.float64), shape).reshape(shape[0], -1)
        for b in bounds
    )
    width = lo.shape[1]
    for c in range(min(width, OUTSIDE_COORDINATES)):
        for end, past in ((hi, np.inf), (lo, -np.inf)):
            rows = attacker.reshape(shape[0], -1).copy()
            rows[:, c] = np.nextafter(end[:, c], past)
            out = ~refused(subject, r, rows.reshape(shape))
            ensure(
                not out.any(),
                f"{where}: a report just {'above' if past > 0 else 'below'} its declared bound "
                f"in coordinate {c} is accepted (slot {int(r.slots[np.argmax(out)])})",
            )
    return f"{where}: bounds enforced on {min(width, OUTSIDE_COORDINATES)} coordinate(s), {attack}"


def check_reports(subject: Subject) -> str:
    """Every round: honest reports pass the server's checks; non-finite and misshapen ones are
    refused; where the protocol declares report bounds, the output attacker's crafted report
    (the upper bound itself, or the protocol's ``output_attack_reports`` when it defines them)
    lies within them, and a report just past either bound is refused. Whether the protocol's
    own checks accept the crafted report is reported, not required: a protocol whose valid
    reports are a strict part of the box of its bounds (Duchi's sphere, bin centres) refuses the
    upper bound, as the server then does (``fedldp.client.behaviour``), unless its hook sends
    reports it admits."""
    return "; ".join(_check_round(subject, r) for r in replay(subject))


# --------------------------------------------------------------------------- chunking


CHUNK = 8192
"""Reports per chunk of the simulator's ``chunk_size`` and the server's ``aggregate_chunk``
defaults."""
SIMULATOR_CHUNKS = f"chunks of {CHUNK}"


def _chunkings(n: int, rng: np.random.Generator) -> dict[str, list[tuple[int, int]]]:
    """Ways to cut n reports in slot order into chunks: (start, stop) pairs."""
    cuts: list[int] = []
    if n > 1:
        cuts = sorted(int(c) for c in rng.choice(np.arange(1, n), min(n - 1, 7), replace=False))
    edges = [0, *cuts, n] if n else []
    return {
        SIMULATOR_CHUNKS: [(a, min(a + CHUNK, n)) for a in range(0, n, CHUNK)],
        "one report per chunk": [(i, i + 1) for i in range(n)],
        "uneven chunks": list(itertools.pairwise(edges)),
    }


RELATIVE = 1e-9
"""Outputs of one round aggregated over other chunkings agree to this, relative (docs/
architecture.md: only the grouping of sums may differ; absolute 1e-12 near zero)."""


def json_difference(got: Any, want: Any, where: str = "output") -> str | None:
    """None when two JSON documents are equal, floats to ``RELATIVE``; else where they differ."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or got.keys() != want.keys():
            return f"{where}: other keys"
        return next(
            (d for k in want if (d := json_difference(got[k], want[k], f"{where}.{k}"))), None
        )
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{where}: another length"
        return next(
            (
                d
                for i, (g, w) in enumerate(zip(got, want, strict=True))
                if (d := json_difference(g, w, f"{where}[{i}]"))
            ),
            None,
        )
    if isinstance(want, float) and isinstance(got, float):
        close = abs(got - want) <= max(RELATIVE * abs(want), 1e-12)
        return None if close else f"{where}: {got!r} against {want!r}"
    return None if got == want else f"{where}: {got!r} against {want!r}"


def check_chunking(subject: Subject) -> str:
    """Every round's reports, in participant order (the order the server streams them in,
    whatever order they arrived in) and cut into chunks as the simulator cuts them, aggregate
    to the simulator's output to the last digit; cut into other chunks (one report each, uneven
    ones), to the same output up to the grouping of sums (``RELATIVE``). ``aggregate`` gets a
    one-pass iterator, as from the server."""
    p, params, plan = subject.protocol, subject.params, subject.run.plan
    rng = np.random.default_rng(subject.seed)
    for r in replay(subject):
        want = jsonable(subject.run.outputs[r.index])
        for how, spans in _chunkings(r.slots.size, rng).items():

            def chunks(
                spans: list[tuple[int, int]] = spans, r: Replayed = r
            ) -> Iterator[ReportChunk]:
                for a, b in spans:
                    yield ReportChunk(r.slots[a:b], r.epsilon[a:b], r.groups[a:b], r.payloads[a:b])

            got = jsonable(p.aggregate(params, plan, r.index, r.task.broadcast, chunks()))
            where = f"round {r.index} ({r.round.name}) in {how}"
            if how == SIMULATOR_CHUNKS:
                ensure(
                    json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True),
                    f"{where}: the output differs from the simulator's on the same reports "
                    f"({json_difference(got, want) or 'in the last digits'})",
                )
            else:
                diff = json_difference(got, want)
                ensure(diff is None, f"{where}: the output changes beyond rounding: {diff}")
    return f"{len(plan.rounds)} round(s) agree over {len(_chunkings(2, rng))} chunkings"


# --------------------------------------------------------------------------- pickle, describe


def check_pickle(subject: Subject) -> str:
    """The protocol and its parameters survive a pickle round trip (Dask ships them to its
    workers) and the copy simulates to the same estimate."""
    try:
        clone = pickle.loads(pickle.dumps(subject.protocol))
        params = pickle.loads(pickle.dumps(subject.params))
    except Exception as exc:  # any pickling error is the finding
        raise CheckFailed(f"does not pickle: {type(exc).__name__}: {exc}") from None
    ensure(type(clone) is type(subject.protocol), "unpickles as another class")
    ensure(params == subject.params, "its parameters unpickle to other values")
    again = simulate(clone, params, subject.population, subject.seed)
    diff = same_estimate(again.result.estimate, subject.run.result.estimate)
    ensure(diff is None, f"the unpickled copy simulates to another estimate: {diff}")
    return "the unpickled copy simulates to the same estimate"


def check_describe(subject: Subject) -> str:
    """``describe`` is the JSON catalogue entry it documents, and ``min_participants`` is the
    smallest population that plans (its plan succeeds there and fails one participant below)."""
    p = subject.protocol
    eps = float(np.max(subject.population.epsilon))
    entry = p.describe(eps)
    try:
        json.dumps(entry, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CheckFailed(f"describe() is not JSON: {exc}") from None
    ensure(entry.get("name") == p.name, f"describe() names {entry.get('name')!r}, not {p.name!r}")
    ensure(isinstance(entry.get("parameters"), dict), "describe() has no parameter schema")
    needed = p.min_participants(eps)
    ensure(
        needed is None or (isinstance(needed, int) and needed >= 1),
        f"min_participants({eps:g}) is {needed!r}, neither None nor a count >= 1",
    )
    ensure(
        entry["population"]["min_participants"] == needed,
        "describe()'s population minimum differs from min_participants",
    )
    if needed is None:
        return f"min_participants({eps:g}) states no single minimum"
    params = p.parse_params(p.population_probe)
    plans = _planner(p, params, eps)
    ensure(
        plans(needed),
        f"min_participants({eps:g}) = {needed}, but {needed} participants do not plan",
    )
    ensure(
        needed == 1 or not plans(needed - 1),
        f"{needed - 1} participants plan too: min_participants({eps:g}) = {needed} is not "
        "the smallest",
    )
    return f"min_participants({eps:g}) = {needed} holds"


def _planner(p: Protocol[Any], params: Params, eps: float) -> Callable[[int], bool]:
    def plans(n: int) -> bool:
        try:
            p.plan(params, np.full(n, eps), p.population_metadata(params, n), 0)
        except (ValueError, KeyError):
            return False
        return True

    return plans
