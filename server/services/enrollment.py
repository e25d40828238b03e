"""Enrollment: participants join an enrolling study with their declared ε (and metadata), one at
a time or in batches, numbered by the server or, inside a lease, by the caller; reaching the
enrollment target starts the study."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy.exc import IntegrityError

from fedldp.protocol.core.base.records import FloatArray, IntArray
from fedldp.protocol.core.wire import EPSILON_MAX, EPSILON_MIN, BlockToken, EnrollmentBatch
from fedldp.server.errors import (
    EnrollmentClosed,
    EnrollmentFull,
    EpsilonOutOfRange,
    InvalidRequest,
    ParticipantExists,
    StudyNotEnrolling,
)
from fedldp.server.runtime.auth import block_token_for, tokens_for
from fedldp.server.runtime.context import Context
from fedldp.server.runtime.plans import Enrolled, MetadataRuns, runs_of
from fedldp.server.services import leases
from fedldp.server.services.rounds import advance, start_study
from fedldp.server.services.studies import require_study
from fedldp.server.store import lease_rows, participant_rows
from fedldp.server.store import repository as repo
from fedldp.server.store.tables import StudyRow, utcnow

__all__ = ["enroll"]


def _check_epsilons(study: StudyRow, epsilons: FloatArray) -> None:
    """EpsilonOutOfRange unless every ε is finite and inside the study's range (its own
    ``epsilon_min``/``epsilon_max``, else the global ``EPSILON_MIN``..``EPSILON_MAX``, which
    also keeps subnormal ε's out: they overflow the protocols' noise scales)."""
    low = EPSILON_MIN if study.epsilon_min is None else study.epsilon_min
    high = EPSILON_MAX if study.epsilon_max is None else study.epsilon_max
    eps = np.asarray(epsilons, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(~(np.isfinite(eps) & (eps >= low) & (eps <= high)))
    if bad.size:
        i = int(bad[0])
        raise EpsilonOutOfRange(
            f"participant {i} of the request declared ε = {float(eps[i])!r}; study {study.id} "
            f"accepts {low:g} <= ε <= {high:g}"
        )


def _exists(study_id: str, explicit: IntArray | None) -> ParticipantExists:
    # only explicit ids can be enrolled already: the server numbers the others outside leases
    span = (
        "numbered by the server"
        if explicit is None
        else f"{int(explicit.min())}..{int(explicit.max())}"
    )
    return ParticipantExists(
        f"some of participant ids {span} of study {study_id} are enrolled already"
    )


def _explicit_ids(requested: Sequence[int | None]) -> IntArray | None:
    """The participant ids a batch gives, as an array (None: it gives none, the server numbers
    them); InvalidRequest if it gives some and not others, or one twice. Checked on an array:
    a batch holds up to ``MAX_BATCH`` of them."""
    missing = requested.count(None)
    if missing == len(requested):
        return None
    if missing:
        raise InvalidRequest("give a participant_id for every participant of a batch, or none")
    ids = np.asarray(requested, dtype=np.int64)
    increasing = bool(np.all(ids[1:] > ids[:-1]))  # as a swarm's batches are: no sort
    if not increasing and np.unique(ids).size != ids.size:
        raise InvalidRequest("a participant_id appears twice in the batch")
    return ids


def enroll(
    ctx: Context,
    study_id: str,
    epsilons: Sequence[float],
    metadata: list[dict[str, Any]],
    requested: Sequence[int | None],
    *,
    block_only: bool = False,
    lease_token: str | None = None,
) -> EnrollmentBatch:
    """Enroll participants (their ε, metadata and requested ids), numbered by the server with ids
    outside every lease (only in a study whose enrollment policy is ``open``: EnrollmentClosed
    otherwise) or, all of them, with the ids they give, which must lie in the lease whose
    ``lease_token`` the caller holds (``fedldp.server.services.leases``); the enrollment target,
    when reached, starts the study. The answer holds each participant's token and, for consecutive
    ids, their block token; ``block_only``: the block token alone (the tokens are not even
    computed)."""
    explicit = _explicit_ids(requested)
    if block_only and explicit is not None and _block_span(explicit) is None:
        raise InvalidRequest("a block token alone needs consecutive participant ids")
    eps = np.asarray(epsilons, dtype=np.float64)
    # the metadata as runs of one object, walked once (the wire shares one dict between equal
    # rows, ``EnrollBatch.rows``): stored once per block when everyone's is the same
    runs = runs_of(metadata)
    declared = any(row for row, _ in runs)
    kept: Sequence[dict[str, Any]] | dict[str, Any] = (
        {} if not declared else dict(runs[0][0]) if len(runs) == 1 else metadata
    )
    now = utcnow()
    try:
        with ctx.transaction() as session:
            study = require_study(session, study_id)
            if study.phase != "enrolling":
                raise StudyNotEnrolling(f"study {study_id} is {study.phase}; enrollment is closed")
            _check_epsilons(study, eps)
            target = study.enrollment_target
            if target is not None and study.n_participants + eps.size > target:
                raise EnrollmentFull(
                    f"study {study_id} has {study.n_participants} of its {target} participants; "
                    f"{eps.size} more do not fit"
                )
            lease = None
            if explicit is not None:
                lease = leases.authorise(session, study, explicit, lease_token, now)
                ids = explicit
            else:
                if study.enrollment == "leased":
                    raise EnrollmentClosed(
                        f"study {study_id} enrolls only holders of a lease, with their block's "
                        "participant ids (its enrollment policy is 'leased')"
                    )
                first = lease_rows.take_ids(session, study_id, eps.size, None)
                if first is None:
                    raise StudyNotEnrolling(f"study {study_id} closed its enrollment")
                if target is not None and first + eps.size > target:
                    raise EnrollmentFull(
                        f"study {study_id} has no {eps.size} participant ids below its "
                        f"target {target} left outside its leases"
                    )
                ids = np.arange(first, first + eps.size, dtype=np.int64)
            total = repo.count_participants(session, study_id, eps.size)
            if total is None:
                raise StudyNotEnrolling(f"study {study_id} closed its enrollment")
            if lease is not None:
                lease_rows.count_enrolled(session, study_id, lease.serial, ids.size)
            fresh = participant_rows.add_participants(
                session,
                study_id,
                now,
                ids,
                eps,
                kept,
            )
            if not fresh:  # nothing stored; the transaction rolls back
                raise _exists(study_id, explicit)
            listed = ids.tolist()
            out = EnrollmentBatch(
                participant_ids=listed,
                tokens=[] if block_only else tokens_for(study.secret, study_id, listed),
                block=_block_token(study, ids),
            )
            # runs of one object, not a list of 10^4 references to walk again
            stored = MetadataRuns(runs if declared else [({}, ids.size)])
            enrolled = Enrolled(ids, eps, stored)
            full = target is not None and total >= target
            if full:
                start_study(ctx, session, require_study(session, study_id), now, enrolling=enrolled)
    except IntegrityError:  # a block stored meanwhile (the study row's lock makes it rare)
        raise _exists(study_id, explicit) from None
    if full:
        advance(ctx, study_id, 0)
    else:  # committed: a start may take them from here (Context.enrolled)
        ctx.enrolled.add(study_id, enrolled)
    return out


def _block_span(ids: IntArray) -> tuple[int, int] | None:
    """(first, last + 1) of distinct ``ids`` when they are consecutive, else None."""
    start, stop = int(ids.min()), int(ids.max()) + 1
    return (start, stop) if stop - start == ids.size else None


def _block_token(study: StudyRow, ids: IntArray) -> BlockToken | None:
    """The block token of a batch of distinct ids, when they are consecutive."""
    span = _block_span(ids)
    if span is None:
        return None
    start, stop = span
    return BlockToken(
        start=start, stop=stop, token=block_token_for(study.secret, study.id, start, stop)
    )
