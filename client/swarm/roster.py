"""The users a swarm process runs: their population slots, server ids, tokens and declared ε's."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedldp.client.api.errors import SwarmError
from fedldp.protocol.core.base.records import FloatArray, IntArray
from fedldp.protocol.core.wire import MAX_BLOCKS, BlockToken, Credentials

__all__ = ["Roster"]


@dataclass(frozen=True)
class Roster:
    """Enrolled users: slots (population indices), their server ids and tokens, declared ε's,
    and the block tokens the server gave for blocks of them (see ``credentials``). ``tokens``
    is empty when the block tokens cover every user (enrolled with the block tokens only)."""

    slots: IntArray
    participant_ids: list[int]
    tokens: list[str]
    epsilon: FloatArray
    blocks: tuple[BlockToken, ...] = ()

    def __post_init__(self) -> None:
        n = self.slots.shape[0]
        tokens = len(self.tokens) if self.tokens or not self._blocks_cover else n
        if not (len(self.participant_ids) == tokens == self.epsilon.shape[0] == n):
            raise ValueError("a roster needs one id, token (or covering block) and ε per slot")

    def __len__(self) -> int:
        return int(self.slots.shape[0])

    def part(self, start: int, stop: int) -> Roster:
        ids = self.participant_ids[start:stop]
        low, high = (min(ids), max(ids)) if ids else (0, -1)
        return Roster(
            self.slots[start:stop],
            ids,
            self.tokens[start:stop],
            self.epsilon[start:stop],
            tuple(b for b in self.blocks if b.start <= high and b.stop > low),  # its blocks
        )

    @functools.cached_property
    def ids(self) -> IntArray:
        """The participant ids as an array."""
        return np.asarray(self.participant_ids, dtype=np.int64)

    @functools.cached_property
    def _by_id(self) -> IntArray:
        return np.argsort(self.ids, kind="stable")

    def positions(self, participant_ids: Sequence[int]) -> IntArray:
        """Where these participants are in the roster; SwarmError if one is not."""
        wanted = np.asarray(participant_ids, dtype=np.int64)
        order = self._by_id
        found = order[np.minimum(np.searchsorted(self.ids[order], wanted), len(order) - 1)]
        if wanted.size and (not len(order) or np.any(self.ids[found] != wanted)):
            raise SwarmError(
                "unknown_participants",
                "the server answered for participants this swarm did not ask about",
                server_side=True,
            )
        return found

    @functools.cached_property
    def _blocks_cover(self) -> bool:
        """Whether the block tokens cover every user of the roster."""
        if not self.blocks:
            return False
        inside = np.zeros(self.ids.shape, dtype=np.bool_)
        for b in self.blocks:
            inside |= (self.ids >= b.start) & (self.ids < b.stop)
        return bool(inside.all())

    def credentials(self, positions: IntArray) -> Credentials:
        """Credentials of the users at ``positions``: the block tokens of their blocks when the
        roster's blocks cover it (a short string for thousands of users), else their tokens."""
        if self._blocks_cover and positions.size:
            ids = self.ids[positions]
            low, high = int(ids.min()), int(ids.max())
            blocks = [b for b in self.blocks if b.start <= high and b.stop > low]
            if len(blocks) <= MAX_BLOCKS:
                return Credentials(blocks=blocks)
        return Credentials(tokens=[self.tokens[i] for i in positions])
