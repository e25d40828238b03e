"""Enrollment of a swarm's population (docs/architecture.md, "Flow of a study"): the whole
population into a new study with participant id = population index, given explicitly from leases
of each batch's ids (leased one after the other while the first batches enroll, two batches in
flight), or, for swarms sharing a study, leased blocks until none are left; the start; and the
users who try to join after it (behaviour ``join_late``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedldp.client.api.client import ApiClient, AuthError, InvalidRequestError, PhaseError
from fedldp.client.api.errors import SwarmError
from fedldp.client.population.build import AnyPopulation
from fedldp.client.swarm.driving import first_error
from fedldp.client.swarm.progress import SwarmProgress
from fedldp.client.swarm.roster import Roster
from fedldp.protocol.catalogue import CATALOGUE, origin_mismatch
from fedldp.protocol.core.base.protocol import Protocol
from fedldp.protocol.core.base.records import IntArray, jsonable
from fedldp.protocol.core.wire import (
    EPSILON_MAX,
    EPSILON_MIN,
    MAX_BATCH,
    BlockToken,
    EnrollmentBatch,
    Lease,
    StudyCreate,
    StudyView,
)
from fedldp.protocol.core.wire.binary import encode_batch

__all__ = [
    "ENROLL_CHUNK",
    "LEASE_SHARES",
    "check_served",
    "enroll",
    "enroll_leases",
    "join",
    "local_protocol",
    "refuse_late_joiners",
    "start",
    "study_named",
    "study_protocol",
]

ENROLL_CHUNK = 10_000
ENROLL_IN_FLIGHT = 2
# A leasing swarm takes 1/LEASE_SHARES of the population per lease (at most ENROLL_CHUNK ids),
# so that swarms leasing at the same time each get a share (first come, first served: a swarm
# that asks after the others have leased every block serves 0 users; with enrollment blocks one
# swarm enrolls 20,000 users in well under a second). Below MAX_BLOCKS, so that a batch of users
# always spans few enough blocks for one request's credentials.
LEASE_SHARES = 100


def local_protocol(name: str) -> Protocol[Any]:
    """The catalogue protocol ``name``; SwarmError if this client does not know it."""
    protocol = CATALOGUE.get(name)
    if protocol is None:
        raise SwarmError(
            "unknown_protocol", f"the server runs {name!r}, which this client does not know"
        )
    return protocol


def study_protocol(study: StudyView) -> Protocol[Any]:
    """The local protocol of ``study``: SwarmError ``unknown_protocol`` if this client does not
    know it, ``protocol_version_mismatch`` if its code here has another origin or version than
    the one the study was created with (``StudyView.protocol_origin``/``protocol_version``;
    a study that recorded none is not checked): a swarm never privatizes with other code than
    the server aggregates with."""
    protocol = local_protocol(study.protocol)
    reason = origin_mismatch(
        study.protocol, study.protocol_origin, study.protocol_version, "this client"
    )
    if reason is not None:
        raise SwarmError("protocol_version_mismatch", f"study {study.id}: {reason}")
    return protocol


async def check_served(api: ApiClient, name: str) -> Protocol[Any]:
    """The local protocol ``name``, once the server's catalogue (``GET /v1/protocols``) shows it
    serves the same code: SwarmError ``unknown_protocol`` if this client does not know it,
    ``protocol_version_mismatch`` if the server's origin or version of it is another (before a
    study is created, so that a refused swarm leaves none behind). A protocol the server does
    not offer is left to its create route to refuse (``unknown_protocol``)."""
    protocol = local_protocol(name)
    served = {p.name: p for p in (await api.protocols()).protocols}
    entry = served.get(name)
    if entry is None:
        return protocol
    mine = CATALOGUE.origin(name)
    if (entry.origin, entry.origin_version) != (mine.package, mine.version):
        raise SwarmError(
            "protocol_version_mismatch",
            f"the server runs {name} of {entry.origin} {entry.origin_version}, and this client "
            f"has {name} of {mine.package} {mine.version}: install the same version on both "
            "sides (no study was created)",
        )
    return protocol


def _enroll_batch(
    population: AnyPopulation,
    start: int,
    stop: int,
    block_only: bool = False,
    members: IntArray | None = None,
    numbered: bool = True,
) -> bytes:
    """Participants ``start..stop-1`` as one columnar enrollment batch, a binary batch body
    (``fedldp.protocol.core.wire.binary``): participant id i is population slot ``members[i]``
    (slot i without ``members``; ``numbered=False``: no ids, the server numbers them);
    ``block_only`` asks for the block token alone (see ``enroll``)."""
    rows = slice(start, stop) if members is None else members[start:stop]
    arrays: dict[str | tuple[str, str], NDArray[Any]] = {"epsilons": population.epsilon[rows]}
    arrays |= {("metadata", key): values[rows] for key, values in population.metadata.items()}
    if numbered:
        arrays["participant_ids"] = np.arange(start, stop, dtype=np.int64)
    return encode_batch({"block_only": block_only}, arrays)


async def refuse_late_joiners(
    api: ApiClient, study: StudyView, population: AnyPopulation, joiners: IntArray
) -> int:
    """Behaviour ``join_late``: these users try to enroll after the study started (numbered by
    the server: explicit ids would need a lease); the server refuses them
    (``study_not_enrolling``). How many it refused."""
    for start in range(0, joiners.size, ENROLL_CHUNK):
        stop = min(start + ENROLL_CHUNK, joiners.size)
        batch = _enroll_batch(population, start, stop, members=joiners, numbered=False)
        try:
            await api.enroll_batch(study.id, batch)
        except PhaseError as exc:
            if exc.code != "study_not_enrolling":
                raise
        else:
            raise SwarmError(
                "late_join_accepted", f"study {study.id} enrolled users after it had started"
            )
    return int(joiners.size)


async def study_named(api: ApiClient, name: str) -> StudyView | None:
    """The study on the server called ``name`` (names are unique), or None."""
    found = [s for s in (await api.list_studies()).studies if s.name == name]
    return found[0] if found else None


async def join(api: ApiClient, name: str, create: StudyCreate) -> StudyView:
    """The study called ``name``: created by the first swarm to ask (with the population size
    as enrollment target and the population's digest), found by the others, whose declaration
    (protocol, params, study seed, target, population digest, enrollment policy, quorum, round
    deadline, ε range) must be the creator's: the server
    refuses another (``study_mismatch``), and so does this side, should the server not."""
    try:
        return await api.create_study(create.model_copy(update={"name": name}))
    except PhaseError as exc:
        if exc.code == "study_mismatch":
            raise SwarmError("study_mismatch", exc.detail) from None
        if exc.code != "study_exists":
            raise
    named = await study_named(api, name)
    if named is None:
        raise SwarmError("study_missing", f"study {name!r} exists but is not listed")
    study = named
    params = local_protocol(create.protocol).parse_params(create.params)
    mine = {
        "protocol": create.protocol,
        "params": jsonable(params.model_dump(mode="json", exclude_unset=True)),
        "seed": create.seed,
        "enrollment_target": create.enrollment_target,
        "population_digest": create.population_digest,
        "enrollment": create.enrollment,
        "quorum": create.quorum,
        "round_deadline_s": create.round_deadline_s,
        # the view shows the range enrollment accepts: the global bounds where none was given
        "epsilon_min": EPSILON_MIN if create.epsilon_min is None else create.epsilon_min,
        "epsilon_max": EPSILON_MAX if create.epsilon_max is None else create.epsilon_max,
    }
    for key, value in mine.items():
        if getattr(study, key) != value:
            raise SwarmError(
                "study_mismatch",
                f"study {name!r} was created with another {key} than this swarm's: give every "
                "swarm of a study the same protocol, params, seed, population, behaviour, quorum, "
                "round deadline and ε range (and a study that swarms lease must be created with "
                "the enrollment policy 'leased')",
            )
    return study


async def enroll_leases(
    api: ApiClient,
    study: StudyView,
    population: AnyPopulation,
    progress: SwarmProgress,
    *,
    block_only: bool = False,
) -> Roster:
    """Lease blocks of participant ids until none are left and enroll those users (participant
    id = population index): swarms sharing a study run disjoint parts of the population.
    ``block_only`` as for ``enroll``.

    A block is 1/``LEASE_SHARES`` of the population (at most ``ENROLL_CHUNK`` ids): a swarm that
    joins while another is still enrolling finds blocks left, where blocks of ``ENROLL_CHUNK``
    let the first swarm lease a population of 20,000 in two requests, before swarms started a
    second later had asked (docker compose ``--scale swarm=3``)."""
    size = min(ENROLL_CHUNK, max(1, -(-population.n // LEASE_SHARES)))
    slots: list[int] = []
    ids: list[int] = []
    tokens: list[str] = []
    blocks: list[BlockToken] = []
    while True:
        try:
            lease = await api.lease(study.id, size)
        except PhaseError as exc:
            if exc.code in ("nothing_to_lease", "study_not_enrolling"):
                break
            raise
        answer = await _enrolled(
            api,
            study.id,
            lease.start,
            lease.stop,
            _enroll_batch(population, lease.start, lease.stop, block_only),
            lease,
        )
        slots += range(lease.start, lease.stop)
        ids += answer.participant_ids
        tokens += answer.tokens
        blocks += [answer.block] if answer.block is not None else []
        progress.enrolled(len(slots), population.n)
    if ids != slots:
        raise SwarmError("enrollment_mismatch", "the server numbered leased participants itself")
    index = np.asarray(slots, dtype=np.int64)
    epsilon = np.asarray(population.epsilon[index], dtype=np.float64)
    return Roster(index, ids, tokens, epsilon, tuple(blocks))


async def enroll(
    api: ApiClient,
    study: StudyView,
    population: AnyPopulation,
    progress: SwarmProgress,
    *,
    block_only: bool = False,
    members: IntArray | None = None,
) -> Roster:
    """Enroll every user with participant id = slot (given explicitly, from a lease of each
    batch's ids, so that a few batches can be in flight at once). ``block_only`` asks for each
    batch's block token and not for every user's token: enough for the batch agents.
    ``members`` (the behaviour's users who enroll in time): only those slots, participant id
    i = ``members[i]``."""
    if study.phase != "enrolling" or study.n_participants != 0:
        raise SwarmError(
            "study_not_empty",
            f"study {study.id} is {study.phase} with {study.n_participants} participants; the "
            "swarm enrolls a whole population into a new, empty study",
        )
    # what each batch's answer holds beside its ids (checked to be start..stop-1, then dropped:
    # at 10^7 users the answers' lists of Python ints were 300 MB of the swarm's memory)
    answers: dict[int, tuple[list[str], BlockToken | None]] = {}
    enrolled = 0
    gate = asyncio.Semaphore(ENROLL_IN_FLIGHT)

    async def lease_all() -> None:
        # one chunk after the other (a new, empty study hands out each chunk's ids in turn),
        # while the first chunks enroll: 20 leases at 10^6 users took 0.2 s before any enrolled
        for (start, stop), lease in zip(chunks, leases, strict=True):
            lease.set_result(await _lease_chunk(api, study.id, start, stop))

    async def block(start: int, stop: int, lease: asyncio.Future[Lease]) -> None:
        nonlocal enrolled
        await lease
        async with gate:  # built inside the gate: one batch is built while another is stored
            batch = _enroll_batch(population, start, stop, block_only, members)
            answer = await _enrolled(api, study.id, start, stop, batch, lease.result())
        if answer.participant_ids != list(range(start, stop)):
            raise SwarmError(
                "enrollment_mismatch",
                f"enrolling population slots {start}..{stop - 1} of study {study.id} returned "
                "other participant ids",
                server_side=True,
            )
        answers[start] = (answer.tokens, answer.block)
        enrolled += stop - start
        progress.enrolled(enrolled, n)

    slots = np.arange(population.n, dtype=np.int64) if members is None else members
    n = int(slots.size)
    # as many users per request as a batch may hold: a request's own cost (its transaction, the
    # lease and study checks) was most of the server's time at 10^4 users a request (issue 27:
    # 20 requests of 50,000 users enroll 10^6 in two thirds of the time 100 of 10,000 took)
    chunks = [(start, min(start + MAX_BATCH, n)) for start in range(0, n, MAX_BATCH)]
    loop = asyncio.get_running_loop()
    leases: list[asyncio.Future[Lease]] = [loop.create_future() for _ in chunks]
    try:
        async with asyncio.TaskGroup() as group:  # a failure cancels the others
            group.create_task(lease_all())
            for (start, stop), lease in zip(chunks, leases, strict=True):
                group.create_task(block(start, stop, lease))
    except BaseExceptionGroup as errors:
        raise first_error(errors) from None
    # participant id i is slot slots[i] (checked above): without members, the slots themselves
    ids = slots if members is None else np.arange(n, dtype=np.int64)
    tokens = [token for start in sorted(answers) for token in answers[start][0]]
    blocks = tuple(b for _, b in answers.values() if b is not None)
    epsilon = np.asarray(population.epsilon, dtype=np.float64)
    return Roster(slots, ids, tokens, epsilon if members is None else epsilon[slots], blocks)


async def _enrolled(
    api: ApiClient, study_id: str, start: int, stop: int, batch: bytes, lease: Lease
) -> EnrollmentBatch:
    """The server's answer to enrolling population slots ``start..stop-1``; a refusal is the
    swarm's end at once (SwarmError ``enrollment_refused`` naming the ids and the server's
    reason): a user left out would only show as a round short of its quorum at the deadline."""
    try:
        return await api.enroll_batch(study_id, batch, lease)
    except (PhaseError, AuthError, InvalidRequestError) as exc:
        raise SwarmError(
            "enrollment_refused",
            f"study {study_id} did not enroll the users of participant ids {start}..{stop - 1} "
            f"({exc.code}: {exc.detail})",
        ) from None


async def _lease_chunk(api: ApiClient, study_id: str, start: int, stop: int) -> Lease:
    """A lease of a chunk's ids (in a new, empty study they come in order), so that the chunk
    enrolls with explicit ids (which only its lease's token enrolls)."""
    lease = await api.lease(study_id, stop - start)
    if (lease.start, lease.stop) != (start, stop):
        raise SwarmError(
            "enrollment_mismatch",
            f"study {study_id} leased ids {lease.start}..{lease.stop - 1}, not population "
            f"slots {start}..{stop - 1}: it is not new and empty",
            server_side=True,
        )
    return lease


async def start(api: ApiClient, study_id: str) -> StudyView:
    """Start the study (already started, e.g. by its enrollment target, is fine)."""
    try:
        return await api.start_study(study_id)
    except PhaseError as exc:
        study = await api.study(study_id)
        if exc.code == "study_not_enrolling" and study.phase in ("running", "finished"):
            return study
        raise
