"""The swarm's progress bars (client/swarm/progress.py): rich's bars in a terminal, the same bars
in a notebook cell through one display handle updated in place, nothing otherwise."""

from __future__ import annotations

import sys
import types
from datetime import UTC, datetime
from typing import Any

import pytest

from fedldp.client.swarm import progress
from fedldp.client.swarm.progress import SwarmProgress, in_notebook
from fedldp.protocol.core.wire import StudyView


class Handle:
    """Stands in for IPython's DisplayHandle: keeps every bundle shown."""

    def __init__(self, shown: list[dict[str, str]]) -> None:
        self.shown = shown

    def update(self, bundle: dict[str, str], raw: bool = False) -> None:
        assert raw
        self.shown.append(bundle)


@pytest.fixture
def notebook(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    """A fake Jupyter kernel: ``IPython.get_ipython()`` is a ZMQInteractiveShell and
    ``IPython.display.display`` records what it shows."""
    shown: list[dict[str, str]] = []

    class ZMQInteractiveShell:
        pass

    def display(bundle: dict[str, str], raw: bool = False, display_id: bool = False) -> Handle:
        assert raw
        assert display_id
        shown.append(bundle)
        return Handle(shown)

    ipython = types.ModuleType("IPython")
    ipython.get_ipython = ZMQInteractiveShell  # type: ignore[attr-defined]
    shell_display = types.ModuleType("IPython.display")
    shell_display.display = display  # type: ignore[attr-defined]
    ipython.display = shell_display  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", shell_display)
    return shown


def view(received: int) -> StudyView:
    rounds: list[dict[str, Any]] = [
        {
            "index": 0,
            "name": "stage-1",
            "status": "open",
            "expected": 50,
            "received": received,
            "deadline": None,
            "seconds_left": None,
        },
        {
            "index": 1,
            "name": "stage-2",
            "status": "pending",
            "expected": 50,
            "received": 0,
            "deadline": None,
            "seconds_left": None,
        },
    ]
    return StudyView.model_validate(
        {
            "id": "s",
            "name": None,
            "protocol": "user-mean",
            "trust": "local",
            "params": {},
            "seed": 1,
            "phase": "running",
            "created_at": datetime(2026, 1, 1, tzinfo=UTC),
            "n_participants": 100,
            "enrollment_target": None,
            "enrollment_deadline": None,
            "round_deadline_s": 600.0,
            "quorum": 1.0,
            "current_round": 0,
            "rounds": rounds,
            "failure_reason": None,
            "warnings": [],
        }
    )


def test_outside_a_kernel_and_a_terminal_nothing_is_drawn() -> None:
    assert not in_notebook()  # pytest is no kernel
    with SwarmProgress() as bars:  # stderr is captured: no terminal
        bars.enrolled(10, 100)
        bars.study(view(3))
    assert bars.mode is None
    assert not bars.enabled


def test_in_a_kernel_the_bars_are_one_output_updated_in_place(
    notebook: list[dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert in_notebook()
    monkeypatch.setattr(progress.NotebookBars, "interval", 0.0)  # draw every update
    with SwarmProgress() as bars:
        assert bars.mode == "notebook"
        bars.enrolled(100, 100)
        bars.study(view(20))
        bars.study(view(50))
    first, last = notebook[0], notebook[-1]
    assert set(last) == {"text/plain", "text/html"}
    assert "round 0 stage-1" not in first["text/plain"]  # the empty bars, shown on entering
    assert "enrollment" in last["text/plain"]
    assert "100/100" in last["text/plain"]
    assert "round 0 stage-1" in last["text/plain"]
    assert "50/50" in last["text/plain"]
    assert "round 1" not in last["text/plain"]  # a pending round has no bar yet
    assert last["text/html"].startswith("<pre")
    assert "<script" not in last["text/html"]
    assert len(notebook) == 1 + 3 + 1  # shown, each update, the final state


def test_updates_closer_than_the_interval_are_drawn_once_at_the_end(
    notebook: list[dict[str, str]],
) -> None:
    with SwarmProgress(True) as bars:
        for received in range(50):
            bars.study(view(received))
    assert len(notebook) <= 3  # shown, perhaps one update, the final state
    assert "49/50" in notebook[-1]["text/plain"]


def test_false_draws_nothing_even_in_a_kernel(notebook: list[dict[str, str]]) -> None:
    with SwarmProgress(False) as bars:
        bars.enrolled(1, 2)
    assert bars.mode is None
    assert notebook == []
