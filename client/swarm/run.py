"""The swarm: a simulated population runs a study against a fedldp server over HTTP.

This is also the Python API for users' scripts and notebooks (``await run_swarm(...)`` in a
Jupyter cell, whose event loop is running; ``run_swarm_sync`` in a script), here against a server
this process starts (``fedldp.client.swarm.local.local_server``):

>>> from fedldp import PopulationSpec, local_server, run_swarm_sync
>>> spec = PopulationSpec(users=2000, samples=16, distribution="two-point", mean=0.3)
>>> with local_server() as server:
...     run = run_swarm_sync(
...         server.url,
...         create=("user-mean", {"samples_per_user": 16}),
...         population=spec,
...         seed=7,
...         batch=1000,
...         progress=False,
...     )
>>> run.result.phase, run.study.n_participants, run.truth
('finished', 2000, 0.3)
>>> run.to_frame()[["protocol", "n", "seed"]].to_dict("records")
[{'protocol': 'user-mean', 'n': 2000, 'seed': 7}]

Flow (docs/architecture.md, "Flow of a study"): optionally create the study with the public study
seed ``derive_seeds(seed)[0]`` (the population seed stays here); enroll the whole population with
participant id = population index, given explicitly from leases, two batch requests in flight; start
the study; let the users work (``fedldp.client.swarm.agents``) until every one is done; fetch the
result. With ``processes=K`` the users are split into K contiguous blocks run by K spawned worker
processes, each with its own HTTP client; enrollment and the result stay with the parent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import math
import multiprocessing
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from pydantic import ValidationError

from fedldp.client.api.client import ApiClient, PhaseError, RetryPolicy
from fedldp.client.behaviour import Behaviour, Roles
from fedldp.client.frames import run_frame
from fedldp.client.population.build import (
    AnyPopulation,
    Population,
    PopulationSpec,
    build_population,
)
from fedldp.client.population.features import SemiFeaturePopulation
from fedldp.client.population.learning import evaluate_summary
from fedldp.client.population.ranges import check_data_range
from fedldp.client.results import plain, result_summary
from fedldp.client.seeds import noise_seed, occurrence_study_seed, population_digest
from fedldp.client.swarm.agents import DriveStats, Roster, SwarmError, WaitPolicy, drive
from fedldp.client.swarm.driving import checked_threads
from fedldp.client.swarm.enrolling import (
    check_served,
    enroll,
    enroll_leases,
    join,
    local_protocol,
    refuse_late_joiners,
    start,
    study_protocol,
)
from fedldp.client.swarm.peruser import HOLDERS
from fedldp.client.swarm.prefetch import Prefetch
from fedldp.client.swarm.progress import SwarmProgress, watch_study
from fedldp.client.swarm.user import Privatizer
from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.protocol import Protocol, split_sizes
from fedldp.protocol.core.base.records import JSON, FloatArray, IntArray
from fedldp.protocol.core.wire import (
    MAX_BATCH,
    ResultView,
    StudyCreate,
    StudyView,
)

__all__ = ["SwarmError", "SwarmResult", "run_swarm", "run_swarm_sync", "view_summary"]

DEFAULT_CONCURRENCY = {"user": 64, "batch": 8}
"""Requests in flight per swarm process by default. In batch mode, report batches: with its
users' data drawn ahead (``fedldp.client.swarm.prefetch``) a swarm privatizes a block faster than
the server stores one, and eight in flight keep a queue at the server through a round (four let
it idle while the swarm's answers waited for a slot: bench_e2e 1.10 s against 1.00 s)."""


@dataclass(frozen=True)
class SwarmResult:
    """What a swarm run produced: the final study and result views, and the local truth."""

    study: StudyView
    result: ResultView
    population: AnyPopulation
    elapsed_s: float
    stats: DriveStats = field(default_factory=DriveStats)
    predictions: FloatArray | None = None  # at a semi-feature population's test features
    users_served: int | None = None
    """How many of the study's users this swarm enrolled and ran (all of them unless it shared
    the study through leases: then 0 for a swarm that leased no block)."""

    @property
    def study_id(self) -> str:
        return self.study.id

    @property
    def seed(self) -> int:
        return self.population.seed

    @property
    def estimate(self) -> float | list[float] | None:
        """The server's estimate (``result.estimate``; None unless the study finished)."""
        return self.result.estimate

    @property
    def diagnostics(self) -> JSON:
        """The server's diagnostics of the result (``result.diagnostics``; empty unless the
        study finished), as ``SimulationResult.diagnostics``."""
        return self.result.diagnostics

    @property
    def truth(self) -> float | list[float] | None:
        """The population's true mean (known only here, never sent to the server)."""
        return plain(self.population.truth)

    def to_dict(self) -> JSON:
        """The object ``fedldp simulate --json`` prints for the same run (its ``to_dict()``),
        with ε spent as the server counted it, plus ``study_id``, ``users_served`` and
        ``stats``: what this swarm's users did (``DriveStats``: reports sent, late, dropped,
        refused, joined late, and the task, report and wait requests it made)."""
        pop = self.population
        out = view_summary(
            self.study,
            self.result,
            truth=pop.truth,
            seed=pop.seed,
            elapsed_s=self.elapsed_s,
            data_kind=pop.data_kind,
            warnings=pop.warnings,
        )
        out["population"] = pop.describe()
        out["users_served"] = pop.n if self.users_served is None else self.users_served
        out["stats"] = dict(vars(self.stats))
        return evaluate_summary(out, pop, self.predictions)

    def to_frame(self) -> Any:
        """``to_dict()`` as a pandas DataFrame, in the columns of ``SimulationResult.to_frame``
        (``fedldp.client.frames.run_frame``) plus ``study_id``; needs the ``notebook`` extra."""
        return run_frame(self.to_dict())


def view_summary(
    study: StudyView,
    result: ResultView,
    *,
    truth: float | FloatArray | None = None,
    seed: int | None = None,
    elapsed_s: float | None = None,
    data_kind: str | None = None,
    warnings: Sequence[str] = (),
) -> JSON:
    """``fedldp.client.results.result_summary`` of a server's result (ε spent as the server
    counted it), with ``study_id``; the truth and the run seed only when known locally."""
    bar = result.error_bar
    out = result_summary(
        protocol=result.protocol,
        params=study.params,
        n=study.n_participants,
        seed=seed,
        estimate=result.estimate,
        truth=truth,
        error_bar=None if bar is None else bar.model_dump(),
        charges=np.zeros(0),
        diagnostics=result.diagnostics,
        warnings=(*warnings, *result.warnings),
        elapsed_s=elapsed_s,
        data_kind=data_kind,
    )
    out["epsilon_spent"] = result.epsilon_spent.model_dump()
    out["study_id"] = study.id
    return out


def _population(
    population: AnyPopulation | PopulationSpec, seed: int | None, behaviour: Behaviour | None
) -> tuple[AnyPopulation, str]:
    """The population and its digest: ``population_digest`` of its spec (or of its public
    description when given built), with the behaviour's options when some users misbehave (they
    draw other users' roles, so swarms that share a study must agree on them too; an honest
    swarm's digest is its population's alone)."""
    if isinstance(population, PopulationSpec):
        if seed is None:
            raise ValueError("a PopulationSpec needs a seed")
        pop: AnyPopulation = build_population(population, seed)
        spec: JSON = population.model_dump(mode="json")
    else:
        if seed is not None and seed != population.seed:
            raise ValueError(f"seed {seed} differs from the population's seed {population.seed}")
        pop, spec = population, population.describe()
    if behaviour is not None and not behaviour.honest:
        spec = {**spec, "behaviour": behaviour.describe()}
    return pop, population_digest(pop.seed, spec)


async def _join(api: ApiClient, name: str, spec: StudyCreate) -> StudyView:
    """``join``, whose refusal (``study_mismatch``) also says what the population digest
    covers: the field it names may be that digest when only the behaviour options differ."""
    try:
        return await join(api, name, spec)
    except SwarmError as exc:
        if exc.code != "study_mismatch":
            raise
        raise SwarmError(
            exc.code,
            f"{exc.detail} (population_digest covers the population, the seed and the behaviour "
            "options: --dropout, --late, --join-late, --attack, --attackers, --targets)",
        ) from None


def _central(protocol_name: str) -> bool:
    """Whether a catalogue protocol trusts the server (False for a name the server may know
    and this side does not: the server then draws the noise seed itself)."""
    protocol = CATALOGUE.get(protocol_name)
    return protocol is not None and protocol.trust == "central"


def _check_data(protocol: Protocol[Any], raw: Mapping[str, Any], population: AnyPopulation) -> None:
    if protocol.data_kind != population.data_kind:
        raise SwarmError(
            "invalid_population",
            f"{protocol.name} needs {protocol.data_kind} data; the population holds "
            f"{population.data_kind} data",
        )
    try:
        check_data_range(protocol, protocol.parse_params(raw), population)
    except ValidationError:
        return  # the server refuses such parameters with its own message
    except ValueError as exc:
        raise SwarmError("invalid_population", str(exc)) from None


async def final_result(
    api: ApiClient, study_id: str, patience_s: float | None = 60.0
) -> ResultView:
    """The study's result once it is finished; SwarmError if it failed or was cancelled, or
    (``not_finished``, naming the round deadline and ``fedldp studies watch``) if it is still
    going ``patience_s`` seconds after the swarm's users reported: a round that got fewer
    reports than its quorum waits for its deadline. ``patience_s`` None waits as long as the
    server says the study is still going (its round and enrollment deadlines bound that)."""
    deadline = math.inf if patience_s is None else time.monotonic() + patience_s
    delay = 0.05
    while True:
        try:
            result = await api.result(study_id)
        except PhaseError as exc:
            if exc.code != "not_finished":
                raise
            if time.monotonic() > deadline:
                raise SwarmError(
                    "not_finished",
                    f"{exc.detail} after the swarm's users reported and it waited "
                    f"{patience_s:g} s: a round with fewer reports than its quorum waits for its "
                    "deadline (--round-deadline, 600 s by default; with --dropout, give a "
                    f"shorter one); follow it with `fedldp studies watch {study_id}`",
                ) from None
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)
            continue
        if result.phase != "finished":
            reason = result.failure_reason or "no reason given"
            raise SwarmError(f"study_{result.phase}", f"study {study_id} {result.phase}: {reason}")
        return result


@dataclass(frozen=True)
class _Job:
    """One worker process's share (pickled to it)."""

    server_url: str
    study_id: str
    protocol: str
    params: dict[str, Any]
    population: AnyPopulation
    roster: Roster
    batch: int | None
    concurrency: int
    retry: RetryPolicy | None
    behaviour: Behaviour | None = None
    threads: int | None = None


def _work(job: _Job) -> DriveStats:
    return asyncio.run(_work_async(job))


async def _work_async(job: _Job) -> DriveStats:
    protocol = local_protocol(job.protocol)
    params = protocol.parse_params(job.params)
    seed = job.population.population_seed
    roles = _roles(job.behaviour, seed)
    privatizer = Privatizer(
        protocol, params, job.population, seed, roles, job.population.occurrence
    )
    async with ApiClient(job.server_url, retry=job.retry) as api:
        return await drive(
            api,
            job.study_id,
            job.roster,
            privatizer,
            batch=job.batch,
            concurrency=job.concurrency,
            threads=job.threads,
        )


async def _drive_in_processes(jobs: list[_Job]) -> DriveStats:
    """Run the jobs in spawned worker processes; the first failure terminates the others."""
    loop = asyncio.get_running_loop()
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(jobs)) as pool:  # leaving the block terminates the workers
        futures: list[asyncio.Future[DriveStats]] = []
        for job in jobs:
            future: asyncio.Future[DriveStats] = loop.create_future()

            def done(stats: DriveStats, f: asyncio.Future[DriveStats] = future) -> None:
                loop.call_soon_threadsafe(f.set_result, stats)

            def failed(exc: BaseException, f: asyncio.Future[DriveStats] = future) -> None:
                loop.call_soon_threadsafe(f.set_exception, exc)

            pool.apply_async(_work, (job,), callback=done, error_callback=failed)
            futures.append(future)
        parts = await asyncio.gather(*futures)
    return DriveStats.total(parts)


async def run_swarm(
    server_url: str,
    *,
    population: AnyPopulation | PopulationSpec,
    seed: int | None = None,
    study_id: str | None = None,
    create: tuple[str, Mapping[str, Any]] | None = None,
    concurrency: int | None = None,
    batch: int | None = None,
    processes: int = 1,
    threads: int | None = None,
    progress: bool | None = None,
    admin_key: str | None = None,
    name: str | None = None,
    lease: bool = False,
    round_deadline_s: float = 600.0,
    quorum: float = 1.0,
    epsilon_min: float | None = None,
    epsilon_max: float | None = None,
    retry: RetryPolicy | None = None,
    waits: WaitPolicy | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    behaviour: Behaviour | None = None,
    members: IntArray | None = None,
) -> SwarmResult:
    """Run ``population`` through a study on the server at ``server_url``.

    Give either ``create=(protocol, params)`` (a new study, seeded from ``seed``) or ``study_id``
    (an existing, empty study). ``batch`` None runs one agent per user on the single-participant
    endpoints with ``concurrency`` requests in flight (default 64); ``batch=B`` runs blocks of B
    users on the batch endpoints (default 8 requests in flight), privatized on ``threads`` threads
    per process (default: one per CPU, at most 4, ``default_threads`` in
    ``fedldp.client.swarm.driving``). ``progress`` None shows progress bars when stderr is a
    terminal. ``transport`` (tests) replaces the network; it cannot be combined with
    ``processes`` > 1.

    ``lease=True`` (with ``create`` and a ``name``) lets several swarms share one study: the
    first creates it (enrollment target = the population size), the others (same seed,
    population and ``behaviour``: ``study_mismatch`` otherwise) join it by name;
    each leases disjoint blocks of participant ids, enrolls and runs those users, and the study
    starts by itself once the whole population is enrolled (``docker compose --scale swarm=K``).
    ``epsilon_min``/``epsilon_max`` (with ``create``): the ε range the study accepts (the server
    refuses users outside it at enrollment).

    ``behaviour`` (``fedldp.client.behaviour``): users drop out, answer late, join late or
    attack, drawn from the private seed as ``fedldp simulate`` draws them (give the study a
    ``round_deadline_s`` and ``quorum`` that let its rounds close without the missing reports).

    ``members`` (increasing population slots): only those users enroll, participant id i being
    slot ``members[i]``, as ``fedldp.client.simulate.simulate``'s ``members`` (a campaign's
    devices whose budget admits the occurrence, ``fedldp.client.campaign``); not with
    misbehaving users nor leases.
    """
    if (study_id is None) == (create is None):
        raise ValueError("give exactly one of study_id and create")
    if lease and (create is None or not name):
        raise ValueError("lease needs create=(protocol, params) and a study name to join")
    if batch is not None and not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"batch must lie in [1, {MAX_BATCH}]")
    if processes < 1 or (processes > 1 and transport is not None):
        raise ValueError("processes must be >= 1 (and 1 with a custom transport)")
    checked_threads(threads, batch)
    pop, digest = _population(population, seed, behaviour)
    roles = _roles(behaviour, pop.population_seed)
    if roles is not None and roles.behaviour.join_late > 0 and lease:
        raise ValueError("join-late users need the whole population in one swarm (no lease)")
    if members is not None:
        if roles is not None or lease:
            raise ValueError("members exclude misbehaving users and leases")
        members = _checked_members(members, pop.n)
    else:
        members = None if roles is None else roles.enrolled(pop.n)
    if concurrency is None:
        concurrency = DEFAULT_CONCURRENCY["user" if batch is None else "batch"]
    began = time.perf_counter()
    predictions: FloatArray | None = None
    # the gate's requests, plus the held task requests: one per block of users in batch mode,
    # up to HOLDERS users' per user. Every block gets its own: with fewer (a cap of 64 at 100
    # blocks), the blocks done with a round held the connections with their polls for the next
    # (up to TASK_HOLD_S each) while the blocks still to be given the round's tasks queued for
    # one, and both processes sat idle: most of stage one's time at 10^6 users (issue 27 item 2)
    held = HOLDERS if batch is None else -(-pop.n // batch)
    connections = max(concurrency, 4) + held
    async with ApiClient(
        server_url,
        admin_key=admin_key,
        retry=retry,
        transport=transport,
        max_connections=connections,
    ) as api:
        with SwarmProgress(progress) as bars, contextlib.ExitStack() as stack:
            if create is not None:
                protocol_name, params = create
                await check_served(api, protocol_name)  # nothing created with other code
                if protocol_name in CATALOGUE:  # refused before a study is created for it
                    _check_data(CATALOGUE[protocol_name], params, pop)
                spec = StudyCreate(
                    protocol=protocol_name,
                    params=dict(params),
                    seed=occurrence_study_seed(pop.seed, pop.occurrence),
                    name=name,
                    round_deadline_s=round_deadline_s,
                    quorum=quorum,
                    epsilon_min=epsilon_min,
                    epsilon_max=epsilon_max,
                    enrollment_target=pop.n if lease else None,
                    # a swarm that leased ids and died must not hold the others forever
                    enrollment_deadline_s=round_deadline_s if lease else None,
                    # central trust: the server's secret noise seed, from the private seed, so
                    # that `fedldp simulate` reproduces the release
                    noise_seed=noise_seed(pop.seed, pop.occurrence)
                    if _central(protocol_name)
                    else None,
                    population_digest=digest,
                    # its users enroll through leases only: nobody else takes one of their ids
                    enrollment="leased",
                )
                if lease:
                    assert name is not None
                    study = await _join(api, name, spec)
                else:
                    study = await api.create_study(spec)
            else:
                assert study_id is not None
                study = await api.study(study_id)
            protocol = study_protocol(study)  # the same code as the study's, or refused
            _check_data(protocol, study.params, pop)
            prefetch = _prefetch(pop, batch, processes, lease, members)
            if prefetch is not None:  # while the server enrolls them (cancelled at the start)
                ahead = asyncio.create_task(prefetch.draw_ahead())
                stack.callback(ahead.cancel)
            block_only = batch is not None  # batch agents use the block tokens alone
            if lease:
                roster = await enroll_leases(api, study, pop, bars, block_only=block_only)
            else:
                roster = await enroll(api, study, pop, bars, block_only=block_only, members=members)
                study = await start(api, study.id)
            if prefetch is not None:
                ahead.cancel()
                if members is None and np.array_equal(prefetch.slots, roster.slots):
                    prefetch.slots = roster.slots  # one array of the slots, not two (80 MB at 10^7)
            joiners = np.zeros(0, dtype=np.int64)
            if members is not None:
                joiners = np.setdiff1d(np.arange(pop.n, dtype=np.int64), members)
            joined_late = await refuse_late_joiners(api, study, pop, joiners)
            watcher = asyncio.create_task(watch_study(api, study.id, bars))
            try:
                if processes == 1:
                    privatizer = Privatizer(
                        protocol,
                        protocol.parse_params(study.params),
                        pop if prefetch is None else prefetch,
                        pop.population_seed,
                        roles,
                        pop.occurrence,
                    )
                    stats = await drive(
                        api,
                        study.id,
                        roster,
                        privatizer,
                        batch=batch,
                        concurrency=concurrency,
                        waits=waits,
                        threads=threads,
                    )
                else:
                    stats = await _drive_in_processes(
                        [
                            _Job(
                                server_url,
                                study.id,
                                study.protocol,
                                study.params,
                                pop,
                                roster.part(int(lo), int(hi)),
                                batch,
                                concurrency,
                                retry,
                                behaviour,
                                threads,
                            )
                            for lo, hi in _bounds(len(roster), processes)
                        ]
                    )
                stats.joined_late = joined_late
                # with leases, other swarms may still be running their users
                result = await final_result(api, study.id, None if lease else 60.0)
                study = await api.study(study.id)
                bars.study(study)
                if isinstance(pop, SemiFeaturePopulation) and result.phase == "finished":
                    answer = await api.predict(study.id, pop.test_features.tolist())
                    predictions = np.asarray(answer.predictions, dtype=np.float64)
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
    elapsed = time.perf_counter() - began
    return SwarmResult(study, result, pop, elapsed, stats, predictions, len(roster))


def _prefetch(
    pop: AnyPopulation, batch: int | None, processes: int, lease: bool, members: IntArray | None
) -> Prefetch | None:
    """Batch mode in one process draws its users' data ahead (``fedldp.client.swarm.prefetch``)
    in the blocks its agents will run: all users, or the members, in order."""
    if batch is None or processes > 1 or lease or not isinstance(pop, Population):
        return None
    slots = np.arange(pop.n, dtype=np.int64) if members is None else members
    return Prefetch(pop, slots, batch)


def _checked_members(members: IntArray, n: int) -> IntArray:
    """``members`` as int64 slots; ValueError unless not empty, increasing and in [0, n)."""
    slots = np.asarray(members, dtype=np.int64).reshape(-1)
    if slots.size == 0:
        raise ValueError("members is empty: nobody would enroll")
    if slots[0] < 0 or slots[-1] >= n or np.any(np.diff(slots) <= 0):
        raise ValueError(f"members must be increasing population slots in [0, {n})")
    return slots


def _roles(behaviour: Behaviour | None, population_seed: int) -> Roles | None:
    return None if behaviour is None or behaviour.honest else Roles(behaviour, population_seed)


def _bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """K contiguous [lo, hi) blocks of 0..n-1 (differing in size by at most one)."""
    edges = np.concatenate(([0], np.cumsum(split_sizes(n, min(parts, max(n, 1))))))
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def run_swarm_sync(server_url: str, **options: Any) -> SwarmResult:
    """``run_swarm`` run to its end (same keyword arguments), for a script.

    Called where an event loop is already running in this thread (a Jupyter cell), the swarm
    runs on a loop of its own in a helper thread while this call waits for it; there ``await
    run_swarm(...)`` is the better form: it leaves the kernel's loop free, so other cells'
    tasks (an event stream followed, say) run beside it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_swarm(server_url, **options))
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fedldp-swarm") as pool:
        return pool.submit(asyncio.run, run_swarm(server_url, **options)).result()
