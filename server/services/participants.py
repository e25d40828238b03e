"""Participant services: who a request speaks for, and the ε ledger.

Batch requests prove who sent them with each participant's token or with block tokens, each of which
stands for a block of consecutive participants (``fedldp.server.runtime.auth``). The services that
use these checks: tasks (``fedldp.server.services.tasks``) and report ingestion
(``fedldp.server.services.ingest``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedldp.protocol.core.base.records import BoolArray, IntArray
from fedldp.protocol.core.wire import BudgetCharge, BudgetView, Credentials
from fedldp.server.errors import InvalidRequest, InvalidToken, UnknownParticipant
from fedldp.server.runtime.auth import block_token_ok
from fedldp.server.runtime.context import Context
from fedldp.server.runtime.states import StudyState
from fedldp.server.services.studies import require_study
from fedldp.server.store import participant_rows, report_rows
from fedldp.server.store import repository as repo
from fedldp.server.store.tables import StudyRow

__all__ = ["budget", "check_participants", "one_token", "signed"]


def one_token(token: str | None) -> Credentials:
    """The credentials of a single-participant request (no token: an invalid one)."""
    return Credentials(tokens=[token or ""])


def signed(
    ctx: Context,
    study: StudyRow | StudyState,
    ids: Sequence[int] | IntArray,
    credentials: Credentials,
) -> BoolArray:
    """Which of the participants ``ids`` the credentials authorise: their own token, or a valid
    block token whose block holds them. A block token costs one HMAC however many participants
    it covers; the tokens' are cached (``TokenCache``)."""
    if credentials.tokens is not None:
        if len(credentials.tokens) != len(ids):
            raise InvalidRequest(f"{len(ids)} participant ids but {len(credentials.tokens)} tokens")
        listed = ids.tolist() if isinstance(ids, np.ndarray) else ids  # Python ints: the cache's
        valid = ctx.tokens.verify(study.secret, study.id, listed, credentials.tokens)
        return np.array(valid, dtype=np.bool_)
    assert credentials.blocks is not None  # the wire model holds one kind or the other
    blocks = sorted(
        (b.start, b.stop)
        for b in credentials.blocks
        if block_token_ok(study.secret, study.id, b.start, b.stop, b.token)
    )
    pids = np.asarray(ids, dtype=np.int64)
    if not blocks:
        return np.zeros(pids.shape, dtype=np.bool_)
    starts = np.array([b[0] for b in blocks], dtype=np.int64)
    reach = np.maximum.accumulate(np.array([b[1] for b in blocks], dtype=np.int64))
    last = np.searchsorted(starts, pids, side="right") - 1  # the last block starting at or below
    # (blocks may overlap: a pid is covered iff a block starting at or below it reaches past it)
    return (last >= 0) & (pids < reach[np.maximum(last, 0)])


def check_participants(
    ctx: Context,
    study: StudyRow | StudyState,
    ids: Sequence[int] | IntArray,
    credentials: Credentials,
) -> None:
    refused = np.flatnonzero(~signed(ctx, study, ids, credentials))
    if refused.size == 0:
        return
    # Tokens are only issued at enrollment, so a valid one names an enrolled participant
    # (leased ids may lie above the count while a lower block is still enrolling).
    pid = int(ids[int(refused[0])])
    if not 0 <= pid < study.n_participants:
        raise UnknownParticipant(f"study {study.id} has no participant {pid}")
    raise InvalidToken(f"the token of participant {pid} is not valid for study {study.id}")


def budget(ctx: Context, study_id: str, participant_id: int, token: str | None) -> BudgetView:
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        check_participants(ctx, study, [participant_id], one_token(token))
        p = participant_rows.participant(session, study_id, participant_id)
        if p is None:  # tokens are issued at enrollment: only one made with the key gets here
            raise UnknownParticipant(f"study {study_id} has no participant {participant_id}")
        reported = set(
            report_rows.reported_rounds(session, study_id, [participant_id])[participant_id]
        )
        planned: list[BudgetCharge] = []
        if repo.list_rounds(session, study_id):  # a plan was fixed
            splan = ctx.plans.get(session, study)
            pid = np.array([participant_id], dtype=np.int64)
            for rp in splan.plan.rounds:
                m = splan.membership(rp.index, pid)
                if m.member[0]:
                    planned.append(
                        BudgetCharge(
                            round=rp.index,
                            name=rp.name,
                            epsilon=float(rp.epsilon[m.position[0]]),
                            messages=int(rp.message_counts()[m.position[0]]),
                            reported=rp.index in reported,
                        )
                    )
        spent = sum(c.epsilon for c in planned if c.reported)
        return BudgetView(
            participant_id=participant_id,
            declared_epsilon=p.epsilon,
            planned=planned,
            spent=spent,
            remaining=max(0.0, p.epsilon - spent),
        )
