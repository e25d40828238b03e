"""Seeds of a simulation run: the public study seed and the private population seed.

One user-facing ``--seed`` fixes a whole run. It is split (numpy SeedSequence spawning) into the
*study seed*, which the server stores and uses for public randomness (cohort permutations, public
matrices), and the *population seed*, which never leaves the client side: it drives every user's
data and privatization noise. A server that knew the population seed could recompute the noise and
undo the privatization, so it is never sent.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedldp.protocol.core.streams import StreamKey, stream_key
from fedldp.protocol.core.wire import occurrence_seed

__all__ = [
    "BEHAVIOUR_PURPOSE",
    "DATA_PURPOSE",
    "DEVICE_PURPOSE",
    "DIGEST_PURPOSE",
    "NOISE_PURPOSE",
    "ROUND_PURPOSE",
    "behaviour_key",
    "data_key",
    "derive_seeds",
    "device_key",
    "noise_seed",
    "occurrence_study_seed",
    "population_digest",
    "round_key",
]

DATA_PURPOSE = 0
ROUND_PURPOSE = 1
BEHAVIOUR_PURPOSE = 2
DEVICE_PURPOSE = 3


def derive_seeds(seed: int) -> tuple[int, int]:
    """``(study_seed, population_seed)`` from one user-facing seed, both in [0, 2**63)."""
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    study, population = np.random.SeedSequence(seed).spawn(2)
    return (
        int(study.generate_state(1, np.uint64)[0] >> np.uint64(1)),
        int(population.generate_state(1, np.uint64)[0] >> np.uint64(1)),
    )


NOISE_PURPOSE = 0x4E


def noise_seed(seed: int, occurrence: int = 0) -> int:
    """The seed of a central-trust server's noise for a run: derived from the private population
    seed (so only the run's owner, who gives it to the server at study creation, can reproduce the
    release in process), in [0, 2**63). Occurrence k > 0 of a campaign gets a fresh one
    (``occurrence_seed`` of occurrence 0's, as the server derives it from the campaign's): each
    release's noise is independent of the others', which composing them assumes."""
    population_seed = derive_seeds(seed)[1]
    state = np.random.SeedSequence(population_seed, spawn_key=(NOISE_PURPOSE,))
    return occurrence_seed(int(state.generate_state(1, np.uint64)[0] >> np.uint64(1)), occurrence)


def data_key(population_seed: int) -> StreamKey:
    """Key of the streams that generate every user's local dataset."""
    return stream_key(population_seed, DATA_PURPOSE)


def round_key(population_seed: int, round_index: int, occurrence: int = 0) -> StreamKey:
    """Key of the streams a user privatizes with in round ``round_index`` of occurrence
    ``occurrence`` of a campaign (``fedldp.client.campaign``; 0 for a one-off study, whose key
    predates campaigns and is kept), carrying the population's ``device_key``
    (``UserStreams.device``: memoized responses). Each occurrence draws fresh noise from the
    same device secret (the population seed); the device streams stay the same."""
    if occurrence == 0:
        key = stream_key(population_seed, ROUND_PURPOSE, round_index)
    else:
        key = stream_key(population_seed, ROUND_PURPOSE, round_index, occurrence)
    key.device = device_key(population_seed)
    return key


def device_key(population_seed: int) -> StreamKey:
    """Key of every device's persistent streams: a function of the private population seed
    only, so device i (same population seed, same index) draws the same persistent randomness
    in every study, occurrence and round (the memoized responses of docs/longitudinal.md).
    Unlike the round keys it does not change from one study to the next: what a protocol draws
    from it must be what it means to repeat."""
    return stream_key(population_seed, DEVICE_PURPOSE)


def occurrence_study_seed(seed: int, occurrence: int) -> int:
    """The public study seed of occurrence ``occurrence`` of a campaign run with ``seed``: the run's
    own study seed for occurrence 0, a fresh one for each later occurrence
    (``fedldp.protocol.core.wire.occurrence_seed``, which the server derives too), so each
    occurrence's public randomness is new while the devices (the population seed) stay."""
    return occurrence_seed(derive_seeds(seed)[0], occurrence)


def behaviour_key(population_seed: int) -> StreamKey:
    """Key of the streams that draw each user's behaviour (``fedldp.client.behaviour``)."""
    return stream_key(population_seed, BEHAVIOUR_PURPOSE)


DIGEST_PURPOSE = 0x44


def population_digest(seed: int, spec: Mapping[str, Any]) -> str:
    """A public fingerprint of a run's population: HMAC-SHA256 of the canonical JSON of its spec
    (sorted keys, no spaces) under a key derived from the private population seed (a swarm's spec
    includes its behaviour options when some users misbehave). Swarms of one run (same seed,
    same spec) declare the same digest, so a server can refuse a swarm whose population differs;
    without the private seed it cannot tell which spec a digest belongs to."""
    population_seed = derive_seeds(seed)[1]
    state = np.random.SeedSequence(population_seed, spawn_key=(DIGEST_PURPOSE,))
    key = state.generate_state(8, np.uint32).tobytes()
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
