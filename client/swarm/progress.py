"""Progress of a swarm on stderr: enrollment, then received/expected reports per round.

The round bars are fed from the study view (``GET /v1/studies/{id}``), so they show what the server
has stored, whichever processes sent it. Drawn with rich on stderr when it is a terminal (or when
asked for); otherwise ``SwarmProgress`` does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from fedldp.client.api.client import ApiClient, ApiError
from fedldp.protocol.core.wire import StudyView

__all__ = ["SwarmProgress", "watch_study"]


class SwarmProgress:
    """Rich progress bars for one swarm (a no-op when ``enabled`` is False)."""

    def __init__(self, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self._bars: Progress | None = None
        if enabled:
            self._bars = Progress(
                TextColumn("{task.description:<22}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
        self._enrollment: TaskID | None = None
        self._rounds: dict[int, TaskID] = {}

    def __enter__(self) -> SwarmProgress:
        if self._bars is not None:
            self._bars.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bars is not None:
            self._bars.stop()

    @property
    def enabled(self) -> bool:
        return self._bars is not None

    def enrolled(self, done: int, total: int) -> None:
        if self._bars is None:
            return
        if self._enrollment is None:
            self._enrollment = self._bars.add_task("enrollment", total=total)
        self._bars.update(self._enrollment, completed=done)

    def study(self, view: StudyView) -> None:
        """Show the rounds of ``view`` (opened rounds get a bar; closed ones fill up)."""
        if self._bars is None:
            return
        for r in view.rounds:
            if r.status == "pending":
                continue
            bar = self._rounds.get(r.index)
            if bar is None:
                bar = self._bars.add_task(f"round {r.index} {r.name}", total=r.expected)
                self._rounds[r.index] = bar
            self._bars.update(bar, completed=r.received, total=r.expected)


async def watch_study(
    api: ApiClient, study_id: str, progress: SwarmProgress, interval: float = 0.5
) -> None:
    """Feed ``progress`` from the study view until cancelled (errors only skip an update);
    nothing to feed without bars."""
    while progress.enabled:
        # a missed refresh (e.g. while the server restarts) is not the swarm's failure
        with contextlib.suppress(ApiError):
            progress.study(await api.study(study_id))
        await asyncio.sleep(interval)
