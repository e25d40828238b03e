"""The swarm's work loops (client/agents.py): pieces that need no server.

The loops themselves run against the real app in tests/client/test_swarm.py and against a real
server process in tests/test_e2e.py.
"""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.agents import Roster, SwarmError, WaitPolicy, first_error
from client.api import PhaseError


@given(
    hint=st.floats(0.0, 30.0),
    waits=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_waits_follow_the_hint_grow_and_stay_bounded(hint: float, waits: int, seed: int) -> None:
    policy = WaitPolicy(min_delay=0.05, max_delay=2.0)
    delay = policy.delay(hint, waits, random.Random(seed))
    step = min(2.0, max(0.05, hint) * 1.5 ** (waits - 1))
    assert step / 2 <= delay <= step
    assert delay <= policy.max_delay


def test_roster_parts_are_contiguous_slices() -> None:
    roster = Roster(np.arange(10), list(range(10)), [f"t{i}" for i in range(10)], np.ones(10))
    part = roster.part(3, 7)
    assert part.slots.tolist() == [3, 4, 5, 6]
    assert part.participant_ids == [3, 4, 5, 6]
    assert part.tokens == ["t3", "t4", "t5", "t6"]
    assert len(part) == 4
    with pytest.raises(ValueError, match="one id, token and ε per slot"):
        Roster(np.arange(3), [0, 1], ["a", "b", "c"], np.ones(3))


def test_the_first_failure_is_unwrapped_from_task_groups() -> None:
    inner = SwarmError("study_failed", "why")
    nested = BaseExceptionGroup("outer", [ExceptionGroup("inner", [inner]), ValueError("x")])
    assert first_error(nested) is inner


@pytest.mark.parametrize(
    "error", [SwarmError("study_cancelled", "by admin", True), PhaseError("round_closed", "x", 409)]
)
def test_errors_cross_process_boundaries(error: Exception) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert vars(back) == vars(error)
    assert str(back) == str(error)
