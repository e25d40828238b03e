"""The swarm's batch mode draws its users' local data while it waits for the server to enroll them.

Drawing a simulated user's local dataset is the larger part of the swarm's CPU (a mean's
privatization is a sum and a noise draw; the 256 samples behind it are 256 draws), and a real
device holds its data already. While the server enrolls the swarm's users and starts the study,
the swarm has nothing else to do: ``Prefetch.draw_ahead`` draws its blocks' data then, block after
block, in the event loop between the enrollment requests, and stops when the study starts (the
agents draw what is left as they need it) or when ``budget`` bytes are held: by default what
keeps the process under ``SWARM_MEMORY`` (``prefetch_budget``). ``data`` takes a
block's users from what was drawn; a block's data are dropped once its agent is done
(``release``).

Every user draws from its own counter-based stream, so the data are the same, bit for bit,
whichever users they are drawn with (``Population.data``), and so are the payloads.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import resource
import sys

import numpy as np

from fedldp.client.population.build import Population
from fedldp.protocol.core.base.records import IntArray, UserData

__all__ = ["Prefetch", "prefetch_budget"]

SWARM_MEMORY = 2**30
"""The peak RSS a swarm process keeps under (issue 27: 1 GiB at 10^7 users): the draw-ahead takes
what this leaves once the process's own memory and ``HEADROOM`` are counted."""

HEADROOM = 384 * 2**20
"""What a swarm process comes to hold beyond its drawn-ahead data and the memory it had when the
drawing started: its agents' blocks, reports and request bodies, and the drawn data's pages,
which the allocator keeps after a block is released. Measured at 10^7 users × 16 samples, 240
MiB more during the rounds (10^6 × 256: 60 MiB); the rest is margin."""

PREFETCH_MIN = 64 * 2**20
"""The least a swarm draws ahead, however much memory it already holds."""


def prefetch_budget(rss: int | None = None) -> int:
    """The bytes of local data a swarm process may draw ahead when it holds ``rss`` bytes (its
    resident memory now, by default): ``SWARM_MEMORY - HEADROOM - rss``, at least
    ``PREFETCH_MIN``. At 10^6 users × 256 samples (2 GB of data in all) that is about 520 MiB, a
    quarter of the population drawn while the server enrolls it; at 10^7 users × 16 samples,
    whose metadata already hold 270 MiB, about 370 MiB."""
    if rss is None:
        rss = _resident_bytes()
    return max(PREFETCH_MIN, SWARM_MEMORY - HEADROOM - rss)


def _resident_bytes() -> int:
    """This process's resident memory in bytes: ``/proc/self/statm`` on Linux, elsewhere its peak
    so far (``getrusage``, never less than the resident memory)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes there, KiB elsewhere


STEP_SAMPLES = 2**17
"""Samples drawn between two turns of the event loop (a few ms of drawing)."""


def _steps(ends: IntArray, size: int) -> list[tuple[int, int]]:
    """Consecutive (lo, hi) user ranges of about ``size`` samples each (``ends``: the
    cumulative sample counts)."""
    cuts = np.searchsorted(ends, np.arange(size, int(ends[-1]), size), side="left") + 1
    edges = [0, *np.unique(cuts).tolist(), int(ends.size)]
    return [(lo, hi) for lo, hi in itertools.pairwise(edges) if hi > lo]


class _Drawn:
    """A block's data as drawn, step after step (consecutive users each; never joined into one
    copy: ``take`` gathers from them)."""

    def __init__(self, parts: list[UserData]) -> None:
        self.parts = parts
        self.starts = np.cumsum([0] + [p.n_users for p in parts[:-1]])

    def take(self, users: IntArray) -> UserData:
        """The data of the block's users at positions ``users`` (in that order)."""
        u = np.asarray(users, dtype=np.int64)
        if len(self.parts) == 1:
            return self.parts[0].take(u)
        part = np.searchsorted(self.starts, u, side="right") - 1
        pieces = [(int(k), np.flatnonzero(part == k)) for k in np.unique(part).tolist()]
        m = int(self.parts[0].counts[0])
        if all(np.all(p.counts == m) for p in self.parts):  # m samples each: one gather
            first = self.parts[0]
            item = first.values.shape[1:]
            values = np.empty((u.size, m, *item), dtype=first.values.dtype)
            labels = None if first.labels is None else np.empty((u.size, m))
            for k, at in pieces:
                p = self.parts[k]
                local = u[at] - self.starts[k]
                values[at] = p.values.reshape(p.n_users, m, *item)[local]
                if labels is not None and p.labels is not None:
                    labels[at] = p.labels.reshape(p.n_users, m)[local]
            flat = None if labels is None else labels.reshape(-1)
            return UserData(values.reshape(u.size * m, *item), np.full(u.size, m), flat)
        taken = [self.parts[k].take(u[at] - self.starts[k]) for k, at in pieces]
        if len(taken) == 1:
            return taken[0]
        labels = None if taken[0].labels is None else np.concatenate([t.labels for t in taken])
        joined = UserData(
            np.concatenate([t.values for t in taken]),
            np.concatenate([t.counts for t in taken]),
            labels,
        )
        order = np.concatenate([at for _, at in pieces])
        if np.all(order[1:] > order[:-1]):  # asked in block order (the agents do)
            return joined
        return joined.take(np.argsort(order, kind="stable"))


class Prefetch:
    """``population``'s data for ``slots`` (the users the swarm runs, increasing) in blocks
    of ``block`` consecutive entries of that list (the swarm's batch agents' blocks), drawn ahead
    by ``draw_ahead`` within ``budget`` bytes (see the module docstring)."""

    def __init__(
        self, population: Population, slots: IntArray, block: int, budget: int | None = None
    ) -> None:
        if block < 1:
            raise ValueError("block must be >= 1")
        self.population = population
        self.slots = np.asarray(slots, dtype=np.int64)
        if np.any(self.slots[1:] <= self.slots[:-1]):
            raise ValueError("the slots must be increasing (a roster's order)")
        self.block = block
        self.budget = budget
        """Bytes to draw ahead at most; None: ``prefetch_budget()`` when the drawing starts."""
        self._drawn: dict[int, _Drawn] = {}
        probe = population.data(self.slots[:1])  # the bytes of one sample, with its label
        labels = 0 if probe.labels is None else probe.labels.nbytes
        self._sample_bytes = (probe.values.nbytes + labels) // max(1, int(probe.counts.sum()))

    async def draw_ahead(self) -> None:
        """Draw the blocks in order, yielding to the event loop after each, until the budget is
        held (run it as a task; cancel it when the agents start)."""
        held = 0
        budget = prefetch_budget() if self.budget is None else self.budget
        samples = self.population.metadata["samples"]
        for i, a in enumerate(range(0, self.slots.size, self.block)):
            block = self.slots[a : a + self.block]
            held += int(samples[block].sum()) * self._sample_bytes
            if held > budget:
                return
            parts: list[UserData] = []
            ends = np.cumsum(samples[block])
            for lo, hi in _steps(ends, STEP_SAMPLES):
                parts.append(self.population.data(block[lo:hi]))
                await asyncio.sleep(0)  # the loop's I/O waits at most one step
            self._drawn[i] = _Drawn(parts)

    def _where(self, slots: IntArray) -> tuple[int, IntArray] | None:
        """The block holding every one of ``slots`` and their positions in it, or None."""
        if slots.size == 0:
            return None
        pos = np.searchsorted(self.slots, slots)
        inside = np.minimum(pos, self.slots.size - 1)
        if np.any(pos >= self.slots.size) or np.any(self.slots[inside] != slots):
            return None
        i = int(pos[0]) // self.block
        if np.any(pos // self.block != i):
            return None
        return i, pos - i * self.block

    def data(self, slots: IntArray) -> UserData:
        """The local data of ``slots`` (as ``Population.data``)."""
        s = np.asarray(slots, dtype=np.int64).reshape(-1)
        found = self._where(s)
        drawn = None if found is None else self._drawn.get(found[0])
        if drawn is None:
            return self.population.data(s)
        assert found is not None
        return drawn.take(found[1])

    def release(self, slots: IntArray) -> None:
        """The users ``slots`` (a block's) need no more data: drop their block's."""
        found = self._where(np.asarray(slots, dtype=np.int64).reshape(-1))
        if found is not None:
            self._drawn.pop(found[0], None)
