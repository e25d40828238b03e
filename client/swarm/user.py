"""Simulated users: the client side of a study (docs/architecture.md, "Concepts": participant,
ledger).

A user holds its slot (its index in the population = its enrollment order), its local data (drawn
lazily from the population, never sent anywhere), its declared ε and its own budget ledger. For a
round task it checks the ε the round charges against its ledger, then privatizes with the protocol's
pure ``privatize`` step and its own random stream: ``UserStreams(round_key(population_seed, k),
[slot])`` (docs/architecture.md, convention 9). Only the privatized payload leaves it.

``UserBlock`` is the same for many users at once: one vectorised ``privatize`` call per round over
the cohort members of a block (the swarm's batch mode) or over the users who just got the same
round's task (its per-user mode, ``fedldp.client.swarm.peruser``), with one ledger entry per user.
Because every user draws from its own counter-based stream, it produces, row for row, exactly the
payloads its users would produce one by one (``SimulatedUser``, the lone user they are tested
against).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fedldp.client.behaviour import Roles, respond
from fedldp.client.seeds import round_key
from fedldp.protocol.core.base.protocol import Params
from fedldp.protocol.core.base.protocol import Protocol as LdpProtocol
from fedldp.protocol.core.base.records import FloatArray, IntArray, RoundTask, UserData
from fedldp.protocol.core.ledger import TOLERANCE, BudgetExceededError, Ledger
from fedldp.protocol.core.wire import Payload, TaskReport, payload_from_row

__all__ = ["LocalData", "Privatizer", "SimulatedUser", "UserBlock", "round_task"]


class LocalData(Protocol):
    """Where users' local datasets come from (``fedldp.client.population.build.Population``)."""

    def data(self, slots: IntArray) -> UserData: ...


def round_task(task: TaskReport) -> RoundTask:
    """The protocol's view of a report task (all public)."""
    return RoundTask(
        task.round, task.name, dict(task.broadcast), task.payload_kind, tuple(task.payload_shape)
    )


@dataclass(frozen=True)
class Privatizer:
    """A study's protocol and parameters, and the population's private seed and data; with
    ``roles`` (``fedldp.client.behaviour``), the attackers among the users follow their attack."""

    protocol: LdpProtocol[Any]
    params: Params
    population: LocalData
    population_seed: int
    roles: Roles | None = None
    occurrence: int = 0  # of a campaign: fresh noise from the same device secret

    def privatize(
        self,
        task: RoundTask,
        slots: IntArray,
        epsilon: FloatArray,
        group: IntArray,
        data: UserData | None = None,
    ) -> FloatArray:
        """Payload rows (one flattened row per slot) of the users ``slots`` for ``task``."""
        slots = np.asarray(slots, dtype=np.int64)

        def data_of(asked: IntArray) -> UserData:
            if data is not None and np.array_equal(asked, slots):
                return data
            return self.population.data(asked)

        key = round_key(self.population_seed, task.round, self.occurrence)
        payloads = respond(
            self.protocol, self.params, task, slots, epsilon, group, data_of, key, self.roles
        )
        return np.asarray(payloads, dtype=np.float64).reshape(slots.shape[0], -1)


def _label(task: TaskReport) -> str:
    return f"round {task.round} ({task.name})"


@dataclass
class SimulatedUser:
    """One simulated participant (see the module docstring)."""

    slot: int
    epsilon: float
    privatizer: Privatizer
    participant_id: int | None = None
    token: str | None = None
    ledger: Ledger = field(init=False)
    _data: UserData | None = field(default=None, init=False, repr=False)
    _sent: dict[int, Payload] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.epsilon)

    @property
    def data(self) -> UserData:
        """The user's local dataset, drawn on first use."""
        if self._data is None:
            self._data = self.privatizer.population.data(np.array([self.slot], dtype=np.int64))
        return self._data

    def respond(self, task: TaskReport) -> Payload:
        """The privatized payload for ``task``; BudgetExceededError if it would overspend.

        A round is answered once: asked again (e.g. after a lost answer), the user returns the same
        payload without a new charge, so a retry never releases a second randomization.
        """
        sent = self._sent.get(task.round)
        if sent is not None:
            return sent
        if not self.ledger.can_spend(task.epsilon):
            raise BudgetExceededError(
                f"participant {self.slot}: {_label(task)} charges ε={task.epsilon:g} but only "
                f"{self.ledger.remaining:g} of its ε={self.epsilon:g} is left"
            )
        rows = self.privatizer.privatize(
            round_task(task),
            np.array([self.slot], dtype=np.int64),
            np.array([task.epsilon], dtype=np.float64),
            np.array([task.group], dtype=np.int64),
            self.data,
        )
        self.ledger.charge(_label(task), task.epsilon)
        payload = payload_from_row(task.payload_kind, rows[0])
        self._sent[task.round] = payload
        return payload


class UserBlock:
    """A contiguous block of simulated users handled together (the swarm's batch mode).

    The ledger is the vectorised twin of ``fedldp.protocol.core.ledger.Ledger``: declared budgets, ε
    spent so far, and which rounds each user has been charged for (a round is charged at most once).
    """

    def __init__(self, slots: IntArray, epsilon: FloatArray, privatizer: Privatizer) -> None:
        self.slots = np.asarray(slots, dtype=np.int64)
        self.budget = np.asarray(epsilon, dtype=np.float64)
        if self.slots.shape != self.budget.shape or self.slots.ndim != 1:
            raise ValueError("one declared ε per slot is needed")
        self.spent = np.zeros_like(self.budget)
        self.privatizer = privatizer
        self._charged: dict[int, np.ndarray[Any, np.dtype[np.bool_]]] = {}

    def respond(
        self, task: TaskReport, positions: IntArray, epsilon: FloatArray, group: IntArray
    ) -> FloatArray:
        """Payload rows for ONE round's report task, for the users at ``positions`` of the block:
        ``task`` is what they share (round, broadcast), ``epsilon`` and ``group`` each user's ε
        charge and sub-task group. Raises BudgetExceededError (and privatizes nothing) if any of
        them would overspend.
        """
        pos = np.asarray(positions, dtype=np.int64)
        charge = np.asarray(epsilon, dtype=np.float64)
        if charge.shape != pos.shape or np.shape(group) != pos.shape:
            raise ValueError("one ε charge and one group per position are needed")
        charged = self._charged.setdefault(task.round, np.zeros(self.slots.shape, dtype=np.bool_))
        new = ~charged[pos]
        over = new & (self.spent[pos] + charge > self.budget[pos] + TOLERANCE)
        if np.any(over):
            i = int(np.flatnonzero(over)[0])
            raise BudgetExceededError(
                f"participant {int(self.slots[pos[i]])}: {_label(task)} charges "
                f"ε={charge[i]:g} but only {self.budget[pos[i]] - self.spent[pos[i]]:g} "
                f"of its ε={self.budget[pos[i]]:g} is left"
            )
        rows = self.privatizer.privatize(
            round_task(task), self.slots[pos], charge, np.asarray(group, dtype=np.int64)
        )
        self.spent[pos[new]] += charge[new]
        charged[pos] = True
        return rows
