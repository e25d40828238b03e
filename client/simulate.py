"""The in-process simulator: drive any catalogue protocol over a population, chunk by chunk.

This is the fast path of docs/architecture.md, "The three parts": the same
plan → broadcast → privatize → check → aggregate → finalize steps the server and the swarm run,
with the same seeds, so the HTTP path must reproduce its estimate. One run seed is split by
``derive_seeds`` into the public study seed (plans, cohorts) and the private population seed (data,
and each round's privatization streams ``round_key(population_seed, k)``).

Memory stays flat: for each round the cohort is walked in blocks of ``chunk_size`` participants in
slot order; each block's data is generated, privatized and checked, and its reports are streamed
to ``aggregate`` through a generator. No round ever holds all users' data, but for a protocol with
simulation-only diagnostics (``Protocol.internal``: a central release's data-dependent values),
whose round reports are kept for that call (a central release holds them anyway).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedldp.client.behaviour import Behaviour, Roles, respond
from fedldp.client.frames import run_frame
from fedldp.client.population.build import AnyPopulation
from fedldp.client.population.features import SemiFeaturePopulation
from fedldp.client.population.learning import evaluate_summary
from fedldp.client.population.ranges import check_data_range
from fedldp.client.results import plain, result_summary
from fedldp.client.seeds import derive_seeds, noise_seed, occurrence_study_seed, round_key
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.base.protocol import Params, Predictor, Protocol
from fedldp.protocol.core.base.records import (
    JSON,
    BoolArray,
    FloatArray,
    IntArray,
    Plan,
    ReportChunk,
    Result,
    RoundTask,
)
from fedldp.protocol.core.ledger import check_plan_budget

__all__ = [
    "ProgressFn",
    "RoundCount",
    "SimulationError",
    "SimulationResult",
    "StudyFailed",
    "check_data_range",
    "fill_from_population",
    "simulate",
]

ProgressFn = Callable[[int, int], None]
"""Called after each chunk with (reports done, reports planned in all rounds)."""


class SimulationError(RuntimeError):
    """The client side produced reports the protocol rejects: a bug, not a user error."""


@dataclass(frozen=True)
class SimulationResult:
    """Everything one simulated run produced."""

    protocol: str
    params: Params
    population: AnyPopulation
    seed: int
    result: Result
    plan: Plan
    charges: FloatArray
    outputs: tuple[JSON, ...]
    elapsed_s: float
    data_kind: str = field(default="scalar")

    @property
    def estimate(self) -> float | list[float] | None:
        """The estimate (``result.estimate``) as a float or a list of floats."""
        return plain(self.result.estimate)

    @property
    def truth(self) -> float | list[float] | None:
        """The population's true value (its mean, or distribution), which the protocol
        estimates; learning protocols' targets are in ``to_dict()["truth"]``."""
        return plain(self.population.truth)

    @property
    def diagnostics(self) -> JSON:
        """The protocol's diagnostics (``result.diagnostics``, what ``to_dict()["diagnostics"]``
        holds JSON-ready): named as in ``fedldp.protocol.diagnostics.DIAGNOSTICS``."""
        return self.result.diagnostics

    @property
    def warnings(self) -> tuple[str, ...]:
        # a protocol may repeat a plan warning in its result: each is shown once
        every = (*self.population.warnings, *self.plan.warnings, *self.result.warnings)
        return tuple(dict.fromkeys(every))

    def to_dict(self) -> JSON:
        """The result summary (``fedldp.client.results.result_summary``, what ``fedldp simulate
        --json`` prints) plus the population description: JSON-ready."""
        summary = result_summary(
            protocol=self.protocol,
            params=self.params.model_dump(mode="json"),
            n=self.population.n,
            seed=self.seed,
            estimate=self.result.estimate,
            truth=self.population.truth,
            error_bar=None if self.result.error_bar is None else self.result.error_bar.as_json(),
            charges=self.charges,
            diagnostics=self.result.diagnostics,
            warnings=self.warnings,
            elapsed_s=self.elapsed_s,
            data_kind=self.data_kind,
        )
        summary["population"] = self.population.describe()
        return evaluate_summary(summary, self.population, self.test_predictions())

    def to_frame(self) -> Any:
        """``to_dict()`` as a pandas DataFrame (``fedldp.client.frames.run_frame``: one row, or
        one per coordinate of a vector estimate); needs the ``notebook`` extra.

        >>> from fedldp import PopulationSpec, build_population, get_protocol, simulate
        >>> spec = PopulationSpec(users=2000, samples=16, distribution="two-point", mean=0.3)
        >>> mean = get_protocol("user-mean")
        >>> params = mean.parse_params({"samples_per_user": 16})
        >>> run = simulate(mean, params, build_population(spec, 7), seed=7)
        >>> run.estimate == run.result.estimate, run.truth
        (True, 0.3)
        >>> frame = run.to_frame()
        >>> frame[["protocol", "n", "seed", "truth"]].to_dict("records")
        [{'protocol': 'user-mean', 'n': 2000, 'seed': 7, 'truth': 0.3}]
        >>> frame[["estimate", "error", "error_bar.half_width", "epsilon_spent.max"]].shape
        (1, 4)
        """
        return run_frame(self.to_dict())

    def test_predictions(self) -> FloatArray | None:
        """The finished predictor at a semi-feature population's test features (else None)."""
        if not isinstance(self.population, SemiFeaturePopulation):
            return None
        protocol = get_protocol(self.protocol)
        if not isinstance(protocol, Predictor):
            return None
        features = self.population.test_features
        return protocol.predict(self.params, self.plan, self.outputs, features)


def fill_from_population(
    protocol: Protocol[Any], raw: Mapping[str, Any], population: AnyPopulation
) -> dict[str, Any]:
    """``raw`` with the parameters the population determines filled in where the protocol has
    them and they were not given: ``samples_per_user`` (the smallest per-user sample count: every
    user then holds at least m samples; those with more keep their first m), ``dimension`` (d of
    vector data), ``domain_size`` (k of categorical data), ``radius`` (of the ℓ2 ball holding
    a synthetic vector law's support, e.g. √d·D for the box [-D, D]^d) and ``gamma`` (central
    Huber's Assumption-3 constant: the γ >= 1 of imbalanced sample counts s_i = ⌈N (i/n)^γ⌉,
    which satisfy it with that γ, huber-user-level-dp.md §6.3)."""
    imbalance = getattr(population, "imbalance", None)
    known: dict[str, float | None] = {
        "samples_per_user": int(population.metadata["samples"].min()),
        "dimension": population.dimension,
        "domain_size": population.items,
        "radius": population.l2_radius,
        "label_low": getattr(population, "label_low", None),
        "label_high": getattr(population, "label_high", None),
        "gamma": imbalance if imbalance is not None and imbalance >= 1 else None,
    }
    out = dict(raw)
    fields = protocol.params_model.model_fields
    for name, value in known.items():
        if name in fields and name not in out and value is not None:
            out[name] = value
    return out


@dataclass
class RoundCount:
    """Who took part in one round: planned (the cohort), dropped (left before it), late (answered
    after its deadline, refused), refused (a failed check or an implausible report) and received
    (accepted). The server's round view and result hold the same counts."""

    round: int
    name: str
    planned: int
    dropped: int = 0
    late: int = 0
    refused: int = 0
    received: int = 0

    def as_json(self) -> JSON:
        return dataclasses.asdict(self)


class StudyFailed(RuntimeError):
    """The simulated study fails where the server would fail it (quorum not met, a protocol step
    that raises ValueError); the message is the server's reason."""


class _ClientSide(Exception):
    """A ValueError of the client step, carried through ``aggregate`` unchanged."""

    def __init__(self, error: ValueError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class _Run:
    protocol: Protocol[Any]
    params: Params
    population: AnyPopulation
    plan: Plan
    members: IntArray  # population slot of each participant id
    roles: Roles | None
    round_deadline_s: float
    chunk_size: int
    gone: BoolArray  # by participant id: attackers whose report was refused give up


def _round_chunks(
    run: _Run, task: RoundTask, round_index: int, count: RoundCount, on_chunk: Callable[[int], None]
) -> Iterator[ReportChunk]:
    protocol, params, plan, roles = run.protocol, run.params, run.plan, run.roles
    rp = plan.rounds[round_index]
    groups = rp.groups()
    key = round_key(run.population.population_seed, round_index, run.population.occurrence)
    # clients see what the server sends them; its checks see the whole broadcast
    sent = dataclasses.replace(task, broadcast=protocol.client_broadcast(task.broadcast))
    for start in range(0, rp.cohort.size, run.chunk_size):
        ids = rp.cohort[start : start + run.chunk_size]
        eps = rp.epsilon[start : start + run.chunk_size]
        group = groups[start : start + run.chunk_size]
        slots = run.members[ids]
        keep = np.ones(ids.shape, dtype=np.bool_)
        attackers = np.zeros(ids.shape, dtype=np.bool_)
        if roles is not None:
            present = roles.present(slots, round_index) & ~run.gone[ids]
            late = present & roles.too_late(slots, run.round_deadline_s)
            count.dropped += int(np.count_nonzero(~present))
            count.late += int(np.count_nonzero(late))
            keep = present & ~late
            attackers = roles.attackers(slots)[keep]
            ids, eps, group, slots = ids[keep], eps[keep], group[keep], slots[keep]
        on_chunk(int(keep.size))
        if ids.size == 0:
            continue
        try:
            payloads = np.asarray(
                respond(protocol, params, sent, slots, eps, group, run.population.data, key, roles),
                dtype=np.float64,
            )
        except ValueError as exc:  # the client's own error, not the server's aggregation's
            raise _ClientSide(exc) from exc
        valid = protocol.check(params, task, eps, payloads) & protocol.check_members(
            params, plan, task, ids, payloads
        )
        if not np.all(valid | attackers):
            bad = int(ids[np.flatnonzero(~valid & ~attackers)[0]])
            raise SimulationError(
                f"{protocol.name} round {round_index} ({rp.name}): the client's report for "
                f"participant {bad} fails the server's check"
            )
        # an honest report is implausible with probability <= 1e-12 per entry: refused too
        ok = valid & protocol.plausible(params, task, eps, group, payloads)
        run.gone[ids[~ok & attackers]] = True
        count.refused += int(np.count_nonzero(~ok))
        count.received += int(np.count_nonzero(ok))
        if ok.any():
            yield ReportChunk(ids[ok], eps[ok], group[ok], payloads[ok])


def _keeping(chunks: Iterator[ReportChunk], kept: list[ReportChunk]) -> Iterator[ReportChunk]:
    """``chunks``, each also appended to ``kept`` (for ``Protocol.internal``)."""
    for chunk in chunks:
        kept.append(chunk)
        yield chunk


def _quorum_reason(count: RoundCount, quorum: float, received: int) -> str | None:
    """The server's failure reason when a round closed at its deadline misses the quorum."""
    needed = math.ceil(quorum * count.planned - 1e-9)
    if received >= count.planned or received >= needed:
        return None
    return (
        f"round {count.round} ({count.name}) got {received} of {count.planned} reports by its "
        f"deadline; the quorum {quorum:g} needs {needed}"
    )


def _eligible(run: _Run, round_index: int) -> int:
    """How many of the round's cohort are there and on time (before any check)."""
    rp = run.plan.rounds[round_index]
    if run.roles is None:
        return int(rp.cohort.size)
    slots = run.members[rp.cohort]
    there = run.roles.present(slots, round_index) & ~run.gone[rp.cohort]
    return int(np.count_nonzero(there & ~run.roles.too_late(slots, run.round_deadline_s)))


def simulate(
    protocol: Protocol[Any],
    params: Params,
    population: AnyPopulation,
    seed: int,
    *,
    chunk_size: int = 8192,
    progress: ProgressFn | None = None,
    behaviour: Behaviour | None = None,
    round_deadline_s: float = 600.0,
    quorum: float = 1.0,
    members: IntArray | None = None,
) -> SimulationResult:
    """Run ``protocol`` with ``params`` on ``population`` in process; ValueError on bad input.

    ``population`` must have been built for the same run ``seed`` (``build_population(spec,
    seed)``): it carries the private half of the seed. The result is identical whatever
    ``chunk_size`` is, up to the rounding of sums taken in a different grouping.

    ``behaviour`` (``fedldp.client.behaviour``) makes users drop out, answer late, join late or
    attack, drawn from the private seed as the swarm draws them; the rounds then close as the
    server closes them with ``round_deadline_s`` and ``quorum`` (a round missing its quorum, or
    a protocol step raising ValueError, raises ``StudyFailed`` with the server's reason). The
    result's diagnostics hold each round's ``participation`` (``RoundCount``).

    ``members`` (increasing population slots; not with misbehaving users): only those users
    enroll, participant id i being slot ``members[i]`` (a campaign's devices whose budget admits
    the occurrence, ``fedldp.client.campaign``); ``fedldp.client.swarm.run_swarm`` takes the same.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if not 0.0 < quorum <= 1.0:
        raise ValueError(f"quorum must lie in (0, 1], got {quorum:g}")
    population_seed = derive_seeds(seed)[1]
    # a campaign's occurrence k (fedldp.client.campaign): the same devices, a fresh public seed
    study_seed = occurrence_study_seed(seed, population.occurrence)
    if population_seed != population.population_seed:
        raise ValueError(f"the population was built for seed {population.seed}, not {seed}")
    if population.data_kind != protocol.data_kind:
        raise ValueError(
            f"protocol {protocol.name} takes {protocol.data_kind} data, but the population "
            f"holds {population.data_kind} data"
        )
    check_data_range(protocol, params, population)
    started = time.perf_counter()
    roles = None if behaviour is None or behaviour.honest else Roles(behaviour, population_seed)
    if members is not None:
        if roles is not None:
            raise ValueError("members exclude misbehaving users")
        members = np.asarray(members, dtype=np.int64).reshape(-1)
        if members.size and (
            members[0] < 0 or members[-1] >= population.n or np.any(np.diff(members) <= 0)
        ):
            raise ValueError(f"members must be increasing population slots in [0, {population.n})")
    elif roles is not None:
        members = roles.enrolled(population.n)
    else:
        members = np.arange(population.n, dtype=np.int64)
    if members.size == 0:
        raise StudyFailed("no participants enrolled")
    epsilon = np.asarray(population.epsilon, dtype=np.float64)[members]
    metadata = {k: v[members] for k, v in population.metadata.items()}
    # a central-trust protocol's server draws its noise from a secret seed (fedldp.client.seeds)
    plan_seed = (
        noise_seed(seed, population.occurrence) if protocol.trust == "central" else study_seed
    )
    try:
        plan = protocol.plan(params, epsilon, metadata, plan_seed)
    except ValueError as exc:
        if roles is None:
            raise
        raise StudyFailed(f"the plan is infeasible: {exc}") from None
    charges = check_plan_budget(plan, epsilon)
    gone = np.zeros(plan.n_participants, dtype=np.bool_)
    run = _Run(
        protocol, params, population, plan, members, roles, round_deadline_s, chunk_size, gone
    )
    total = int(sum(rp.cohort.size for rp in plan.rounds))
    done = 0

    def on_chunk(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total)

    outputs: list[JSON] = []
    counts: list[RoundCount] = []
    internal: JSON = {}  # Protocol.internal over the rounds: simulation-only, never served
    for k, rp in enumerate(plan.rounds):
        count = RoundCount(k, rp.name, int(rp.cohort.size))
        counts.append(count)
        reason = _quorum_reason(count, quorum, _eligible(run, k))
        if reason is not None:
            raise StudyFailed(reason)
        broadcast = protocol.broadcast(params, plan, k, outputs)
        task = RoundTask.of(rp, broadcast)
        kept: list[ReportChunk] = []
        chunks = _round_chunks(run, task, k, count, on_chunk)
        if protocol.internal_diagnostics:
            chunks = _keeping(chunks, kept)
        try:
            output = protocol.aggregate(params, plan, k, broadcast, chunks)
        except _ClientSide as exc:
            raise exc.error from None
        except ValueError as exc:
            if roles is None and count.refused == 0:
                raise
            raise StudyFailed(f"round {k} ({rp.name}) could not aggregate: {exc}") from None
        reason = _quorum_reason(count, quorum, count.received)
        if reason is not None:  # refusals took it below the quorum
            raise StudyFailed(reason)
        outputs.append(output)
        if protocol.internal_diagnostics:
            internal |= protocol.internal(params, plan, k, kept)
    result = protocol.finalize(params, plan, outputs)
    participation: JSON = {"rounds": [c.as_json() for c in counts]}
    if roles is not None:
        participation["joined_late"] = int(population.n - members.size)
    diagnostics = {**result.diagnostics, "participation": participation}
    if internal:
        diagnostics["internal"] = internal
    return SimulationResult(
        protocol=protocol.name,
        params=params,
        population=population,
        seed=seed,
        result=dataclasses.replace(result, diagnostics=diagnostics),
        plan=plan,
        charges=charges,
        outputs=tuple(outputs),
        elapsed_s=time.perf_counter() - started,
        data_kind=protocol.data_kind,
    )
