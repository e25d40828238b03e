"""Group commit for single-participant reports.

Each ``POST /v1/studies/{id}/reports`` request waits here while one worker thread stores the
reports that arrived together, grouped by (study, round, payload kind), each group in one
transaction through the batch path (``ingest.submit_many``). A receipt is returned only
after its transaction committed, so nothing acknowledged is lost in a crash; the database does
one commit per group instead of one per request, and the event loop serves new requests while
a group is stored. A group that fails as a whole is retried report by report, so one bad report
cannot refuse the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from fedldp.protocol.core.wire import Receipt, ReportSubmit
from fedldp.server.errors import FedldpError
from fedldp.server.runtime.context import Context
from fedldp.server.services.ingest import submit_many

__all__ = ["ReportGrouper"]

log = logging.getLogger("fedldp.server")

Outcome = Receipt | Exception


@dataclass
class _Pending:
    study_id: str
    report: ReportSubmit
    future: asyncio.Future[Receipt]


@dataclass
class ReportGrouper:
    ctx: Context
    max_group: int = 2000
    linger_s: float = 0.003
    """How long the first report of a group waits for others. Each group's transaction has a
    fixed cost (the study and round rows, the counter, the commit) several times a report's:
    without the wait, per-user clients that send one report each left groups of two on average;
    a few milliseconds gather the reports that the event loop is still parsing."""
    _pending: list[_Pending] = field(default_factory=list)
    _worker: asyncio.Task[None] | None = None

    async def submit(self, study_id: str, report: ReportSubmit) -> Receipt:
        """Store ``report`` with whatever arrived with it: its receipt, or its refusal raised."""
        future: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(study_id, report, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            if len(self._pending) < self.max_group:
                await asyncio.sleep(self.linger_s)
            taken, self._pending = self._pending[: self.max_group], self._pending[self.max_group :]
            try:
                outcomes = await asyncio.to_thread(
                    self._store, [(p.study_id, p.report) for p in taken]
                )
            except Exception as exc:  # a bug: every waiting request gets the 500
                outcomes = [exc] * len(taken)
            metrics = self.ctx.metrics
            for pending, outcome in zip(taken, outcomes, strict=True):
                if isinstance(outcome, FedldpError):
                    metrics.reports_refused(outcome.code)
                elif isinstance(outcome, Receipt):
                    metrics.reports_stored(int(not outcome.duplicate), int(outcome.duplicate))
                if pending.future.done():  # the client went away
                    continue
                if isinstance(outcome, Exception):
                    pending.future.set_exception(outcome)
                else:
                    pending.future.set_result(outcome)

    def _store(self, items: list[tuple[str, ReportSubmit]]) -> list[Outcome]:
        """In a worker thread: each group in its own transaction; outcomes in input order."""
        groups: dict[tuple[str, int, str, int], list[int]] = defaultdict(list)
        seen: dict[tuple[str, int, str, int], int] = defaultdict(int)
        for i, (study_id, report) in enumerate(items):
            key = (study_id, report.round, report.payload.kind, report.participant_id)
            # a participant sending twice at once goes into a later group (a batch holds each
            # participant once); the second then is a duplicate or a conflict, as sent alone
            turn = seen[key]
            seen[key] += 1
            groups[(study_id, report.round, report.payload.kind, turn)].append(i)
        outcomes: list[Outcome | None] = [None] * len(items)
        for (study_id, _, _, _), members in groups.items():
            reports = [items[i][1] for i in members]
            for i, outcome in zip(members, self._store_group(study_id, reports), strict=True):
                outcomes[i] = outcome
        return [o if o is not None else RuntimeError("report not stored") for o in outcomes]

    def _store_group(self, study_id: str, reports: list[ReportSubmit]) -> list[Outcome]:
        try:
            return list(submit_many(self.ctx, study_id, reports))
        except FedldpError as exc:
            if len(reports) == 1:
                return [exc]
        # one transaction per report, so that whatever refused the group refuses only its cause
        out: list[Outcome] = []
        for report in reports:
            try:
                out += submit_many(self.ctx, study_id, [report])
            except FedldpError as exc:
                out.append(exc)
        return out
