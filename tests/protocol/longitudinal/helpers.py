"""Collections of a memoizing protocol as the client runs them, outside any server: one study
per ``study`` word, each with its own per-study stream key carrying the population's device key
(``fedldp.client.seeds.round_key`` does the same for a simulated or swarm run)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedldp.client.seeds import device_key
from fedldp.protocol.api import (
    FloatArray,
    Protocol,
    ReportChunk,
    Result,
    RoundTask,
    UserData,
    UserStreams,
    stream_key,
)

POPULATION_SEED = 2024


def collect(
    protocol: Protocol[Any],
    raw: Mapping[str, Any],
    data: UserData,
    epsilon: FloatArray,
    study: int,
    population_seed: int = POPULATION_SEED,
) -> FloatArray:
    """The reports of ``data``'s users (participants 0..n−1, devices of ``population_seed``) in
    study number ``study``."""
    params = protocol.parse_params(raw)
    plan = protocol.plan(params, epsilon, {}, seed=study)
    rp = plan.rounds[0]
    task = RoundTask.of(rp, protocol.broadcast(params, plan, 0, []))
    key = stream_key(study, 0x5354)
    key.device = device_key(population_seed)
    streams = UserStreams(key, np.arange(data.n_users))
    group = np.zeros(data.n_users, dtype=np.int64)
    return protocol.privatize(params, task, data, epsilon, group, streams)


def estimate(
    protocol: Protocol[Any], raw: Mapping[str, Any], payloads: FloatArray, epsilon: FloatArray
) -> Result:
    """The server's result from a study's reports (one chunk)."""
    params = protocol.parse_params(raw)
    plan = protocol.plan(params, epsilon, {}, seed=0)
    n = epsilon.size
    chunk = ReportChunk(np.arange(n), epsilon, np.zeros(n, np.int64), payloads)
    broadcast = protocol.broadcast(params, plan, 0, [])
    out = protocol.aggregate(params, plan, 0, broadcast, [chunk])
    return protocol.finalize(params, plan, [out])


def users(values: Any) -> UserData:
    """One sample per user."""
    v = np.asarray(values)
    return UserData(v, np.ones(v.shape[0], dtype=np.int64))
