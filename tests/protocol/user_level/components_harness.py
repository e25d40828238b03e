"""Drive an Alg-2 based protocol in process, with real data or on the spec's fast path.

Fast path (user-level-ldp.md §6.1): every client message depends on a user's data only through its
component averages, so a test may draw those averages from their exact law (binomial, multinomial)
instead of n·m samples. ``FastPath`` wraps a protocol so that a block's ``UserData.values`` *are*
its users' component averages (n, C); everything else (plan, broadcasts, the client's clipping and
noise, the server's aggregation and decoding) is the protocol's own code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from fedldp.protocol.core.base.protocol import Params, Protocol
from fedldp.protocol.core.base.records import (
    JSON,
    FloatArray,
    IntArray,
    Plan,
    ReportChunk,
    Result,
    RoundTask,
    UserData,
)
from fedldp.protocol.core.streams import RandomSource
from fedldp.protocol.user_level.driver import ComponentProtocol

ComponentSource = Callable[[RoundTask, IntArray], FloatArray]


def fast_path(proto: ComponentProtocol[Any], source: ComponentSource) -> ComponentProtocol[Any]:
    """``proto`` whose clients take their component averages from ``source(task, slots)``."""

    class Fast(type(proto)):  # type: ignore[misc]  # a dynamic subclass of the protocol's class
        def privatize(
            self,
            params: Any,
            task: RoundTask,
            data: UserData,
            epsilon: FloatArray,
            group: IntArray,
            rng: RandomSource,
        ) -> FloatArray:
            slots = np.asarray(data.values, dtype=np.int64)
            values = source(task, slots)
            out: FloatArray = self.privatize_components(params, task, values, epsilon, group, rng)
            return out

    fast: ComponentProtocol[Any] = Fast()
    return fast


def _chunks(
    slots: IntArray, eps: FloatArray, group: IntArray, payloads: FloatArray, size: int
) -> Iterator[ReportChunk]:
    for a in range(0, slots.size, size):
        b = slice(a, a + size)
        yield ReportChunk(slots[b], eps[b], group[b], payloads[b])


def run_protocol(
    proto: Protocol[Any],
    params: Params,
    eps: FloatArray,
    data: Callable[[IntArray], UserData],
    seed: int,
    rng: RandomSource,
    chunk: int = 4096,
) -> tuple[Plan, list[JSON], Result]:
    """plan → broadcast → privatize → check → aggregate (in chunks) → finalize.

    ``data(slots)`` gives the users' datasets; with a ``fast_path`` protocol, use
    ``slot_data`` so that each user's "data" is its slot.
    """
    plan = proto.plan(params, eps, {}, seed)
    outputs: list[JSON] = []
    for rp in plan.rounds:
        task = RoundTask.of(rp, proto.broadcast(params, plan, rp.index, outputs))
        z = proto.privatize(params, task, data(rp.cohort), rp.epsilon, rp.groups(), rng)
        assert z.shape == (rp.cohort.size, *rp.payload_shape)
        assert proto.check(params, task, rp.epsilon, z).all()
        chunks = _chunks(rp.cohort, rp.epsilon, rp.groups(), z, chunk)
        outputs.append(proto.aggregate(params, plan, rp.index, task.broadcast, chunks))
    return plan, outputs, proto.finalize(params, plan, outputs)


def slot_data(slots: IntArray) -> UserData:
    """Placeholder datasets for a fast-path protocol: each user's single "sample" is its slot."""
    return UserData(np.asarray(slots, dtype=np.float64), np.ones(slots.size, dtype=np.int64))
