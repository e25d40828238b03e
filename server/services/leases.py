"""Leases: blocks of participant ids reserved for one caller (a swarm), and their enforcement.

A study hands out ids from one counter (``StudyRow.leased``): a lease takes the next block, and
so does an enrollment the server numbers itself, so server-numbered ids never fall inside a
leased block, and ids never collide. A lease answers with a token (``auth.lease_token_for``);
enrolling explicit ids needs it (``Authorization: Bearer``), and every id must lie in that
lease's block: nobody else enrolls a swarm's ids. A lease not fully enrolled within
``Settings.lease_ttl_s`` expires; the next lease request takes its block again (under a new serial,
so a new token), and the old token no longer enrolls. Ids of an expired block that did enroll
stay enrolled (the new holder gets ``participant_exists`` for those).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from fedldp.protocol.core.base.records import IntArray
from fedldp.protocol.core.wire import MAX_ID, Lease
from fedldp.server.errors import (
    LeaseExpired,
    NothingToLease,
    NotLeased,
    StudyNotEnrolling,
    UnknownStudy,
)
from fedldp.server.runtime.auth import lease_token_for, lease_token_ok
from fedldp.server.runtime.context import Context
from fedldp.server.store import lease_rows
from fedldp.server.store import repository as repo
from fedldp.server.store.tables import LeaseRow, StudyRow, utcnow

__all__ = ["authorise", "grant"]


def grant(ctx: Context, study_id: str, size: int) -> Lease:
    """Reserve a block of at most ``size`` participant ids (an expired lease's block first, else
    the next ids, below the enrollment target when the study has one)."""
    now = utcnow()
    expires = now + timedelta(seconds=ctx.settings.lease_ttl_s)
    with ctx.transaction() as session:
        study = repo.get_study(session, study_id)
        if study is None:
            raise UnknownStudy(f"no study {study_id!r}")
        if study.phase != "enrolling":
            raise StudyNotEnrolling(f"study {study_id} is {study.phase}; enrollment is closed")
        old = lease_rows.expired_lease(session, study_id, now)
        if old is not None:
            row = lease_rows.add_lease(session, study_id, old.start, old.stop, expires)
        else:
            limit = MAX_ID + 1 if study.enrollment_target is None else study.enrollment_target
            first = lease_rows.take_ids(session, study_id, size, limit)
            if first is None:
                raise NothingToLease(
                    f"all {limit} participant ids of study {study_id} are leased or enrolled"
                )
            row = lease_rows.add_lease(session, study_id, first, min(first + size, limit), expires)
        token = lease_token_for(study.secret, study_id, row.serial, row.start, row.stop)
        return Lease(
            study_id=study_id,
            start=row.start,
            stop=row.stop,
            token=token,
            expires_at=row.expires_at,
        )


def authorise(
    session: Session, study: StudyRow, ids: IntArray, token: str | None, now: datetime
) -> LeaseRow:
    """The caller's lease, which must hold every one of ``ids`` and match ``token``; NotLeased
    or LeaseExpired otherwise."""
    if ids.size == 0:
        raise NotLeased("no participant ids to enroll")
    low, high = int(ids.min()), int(ids.max())
    lease = lease_rows.lease_of(session, study.id, low)
    if (
        lease is None
        or token is None
        or not lease_token_ok(study.secret, study.id, lease.serial, lease.start, lease.stop, token)
    ):
        raise NotLeased(
            f"participant id {low} of study {study.id} is not in a lease of this caller (give the "
            "lease's token as Authorization: Bearer)"
        )
    if high >= lease.stop:
        raise NotLeased(
            f"participant ids {low}..{high} leave the lease {lease.start}..{lease.stop - 1}"
        )
    if lease.expires_at <= now:
        raise LeaseExpired(
            f"the lease of ids {lease.start}..{lease.stop - 1} of study {study.id} expired at "
            f"{lease.expires_at.isoformat()}; lease again"
        )
    return lease
