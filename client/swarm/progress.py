"""Progress of a swarm: enrollment, then received/expected reports per round.

The round bars are fed from the study view (``GET /v1/studies/{id}``), so they show what the server
has stored, whichever processes sent it. They are rich's bars, drawn live on stderr when it is a
terminal, or, in a Jupyter kernel, into the cell's output (``NotebookBars``: the same bars as HTML,
one output updated in place through IPython's display handle, so the notebook saved after the run
holds the final bars as plain HTML and text, with no widget or script to load); otherwise (or when
asked not to) ``SwarmProgress`` does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import time
from types import TracebackType
from typing import Any

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

__all__ = ["NotebookBars", "SwarmProgress", "in_notebook", "watch_study"]


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's ZMQ shell). IPython is not imported
    here: a kernel has imported it already."""
    ipython = sys.modules.get("IPython")
    shell = None if ipython is None else ipython.get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _columns() -> tuple[Any, ...]:
    return (
        TextColumn("{task.description:<22}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )


class NotebookBars:
    """Rich bars drawn into one output of the running notebook cell, redrawn at most every
    ``interval`` seconds and once more when closed (the final state, which a saved notebook
    keeps). The output is an HTML rendering of the bars with a text twin."""

    interval = 0.25

    def __init__(self, bars: Progress) -> None:
        from IPython.display import display  # in a kernel: IPython is there

        self._bars = bars
        self._drawn = time.monotonic()
        self._handle = display(  # type: ignore[no-untyped-call]
            self._bundle(), raw=True, display_id=True
        )

    def _bundle(self) -> dict[str, str]:
        console = Console(record=True, file=io.StringIO(), width=100, force_jupyter=False)
        console.print(self._bars.get_renderable())
        text = console.export_text(clear=False)
        html = console.export_html(
            inline_styles=True,
            code_format='<pre style="font-family:monospace;line-height:1.25">{code}</pre>',
        )
        return {"text/plain": text, "text/html": html}

    def refresh(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._drawn >= self.interval:
            self._drawn = now
            self._handle.update(self._bundle(), raw=True)


class SwarmProgress:
    """Progress bars for one swarm: rich's live bars on stderr (``mode`` "terminal"), the same
    bars in the notebook cell (``NotebookBars``, "notebook"), or nothing (None).

    ``enabled`` None draws them in a notebook, or on stderr when it is a terminal; True draws
    them in a notebook when in one, else on stderr; False draws nothing.
    """

    def __init__(self, enabled: bool | None = None) -> None:
        notebook = in_notebook()
        if enabled is None:
            enabled = notebook or sys.stderr.isatty()
        self.mode: str | None = None if not enabled else "notebook" if notebook else "terminal"
        self._bars: Progress | None = None
        self._view: NotebookBars | None = None
        if self.mode == "terminal":
            self._bars = Progress(*_columns(), console=Console(stderr=True), transient=False)
        elif self.mode == "notebook":
            # never started: no live thread, drawn by NotebookBars on each update
            self._bars = Progress(*_columns(), console=Console(file=io.StringIO()))
        self._enrollment: TaskID | None = None
        self._rounds: dict[int, TaskID] = {}

    def __enter__(self) -> SwarmProgress:
        if self.mode == "terminal" and self._bars is not None:
            self._bars.start()
        elif self.mode == "notebook" and self._bars is not None:
            self._view = NotebookBars(self._bars)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.mode == "terminal" and self._bars is not None:
            self._bars.stop()
        elif self._view is not None:
            self._view.refresh(force=True)

    def _drawn(self) -> None:
        if self._view is not None:
            self._view.refresh()

    @property
    def enabled(self) -> bool:
        return self._bars is not None

    def enrolled(self, done: int, total: int) -> None:
        if self._bars is None:
            return
        if self._enrollment is None:
            self._enrollment = self._bars.add_task("enrollment", total=total)
        self._bars.update(self._enrollment, completed=done)
        self._drawn()

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
        self._drawn()


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
