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
    is empty when the block tokens cover every user (enrolled with the block tokens only).
    The ids are kept as an int64 array (given as a list or an array): at 10^7 users a list of
    Python ints was 360 MB of the swarm's memory, and a part's ids are a view of its roster's."""

    slots: IntArray
    participant_ids: IntArray
    tokens: list[str]
    epsilon: FloatArray
    blocks: tuple[BlockToken, ...] = ()

    def __init__(
        self,
        slots: IntArray,
        participant_ids: Sequence[int] | IntArray,
        tokens: list[str],
        epsilon: FloatArray,
        blocks: tuple[BlockToken, ...] = (),
    ) -> None:
        object.__setattr__(self, "slots", slots)
        object.__setattr__(self, "participant_ids", np.asarray(participant_ids, dtype=np.int64))
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "blocks", blocks)
        n = self.slots.shape[0]
        tokens_n = len(self.tokens) if self.tokens or not self._blocks_cover else n
        if not (self.participant_ids.shape[0] == tokens_n == self.epsilon.shape[0] == n):
            raise ValueError("a roster needs one id, token (or covering block) and ε per slot")

    def __len__(self) -> int:
        return int(self.slots.shape[0])

    def part(self, start: int, stop: int) -> Roster:
        ids = self.participant_ids[start:stop]
        low, high = (int(ids.min()), int(ids.max())) if ids.size else (0, -1)
        return Roster(
            self.slots[start:stop],
            ids,
            self.tokens[start:stop],
            self.epsilon[start:stop],
            tuple(b for b in self.blocks if b.start <= high and b.stop > low),  # its blocks
        )

    @property
    def ids(self) -> IntArray:
        """The participant ids as an array."""
        return self.participant_ids

    @functools.cached_property
    def _by_id(self) -> IntArray | None:
        """The order that sorts the ids; None when they are sorted (a swarm's usually are)."""
        if bool(np.all(self.ids[1:] > self.ids[:-1])):
            return None
        return np.argsort(self.ids, kind="stable")

    def positions(self, participant_ids: Sequence[int]) -> IntArray:
        """Where these participants are in the roster; SwarmError if one is not."""
        wanted = np.asarray(participant_ids, dtype=np.int64)
        order = self._by_id
        n = len(self)
        if order is None:
            found = np.minimum(np.searchsorted(self.ids, wanted), max(n - 1, 0))
        else:
            found = order[np.minimum(np.searchsorted(self.ids[order], wanted), n - 1)]
        if wanted.size and (not n or np.any(self.ids[found] != wanted)):
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
        # the blocks by start, each reaching as far as any block starting at or below it:
        # an id is covered iff the last block starting at or below it reaches past it
        spans = sorted((b.start, b.stop) for b in self.blocks)
        starts = np.array([a for a, _ in spans], dtype=np.int64)
        reach = np.maximum.accumulate(np.array([b for _, b in spans], dtype=np.int64))
        last = np.searchsorted(starts, self.ids, side="right") - 1
        return bool(np.all((last >= 0) & (self.ids < reach[np.maximum(last, 0)])))

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
