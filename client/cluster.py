"""A Dask distributed cluster, for work that outgrows one machine: an experiment's trials
(``fedldp experiment run FILE --cluster ADDRESS``, ``fedldp.client.experiments.cluster``) and a
swarm's users (``fedldp swarm --cluster ADDRESS``, ``fedldp.client.swarm.spread``).

The workers must run the same fedldp as the driver, plugins included (the compose profile
``cluster`` starts them from the project image), and should run one thread each
(``dask worker --nthreads 1``, with one BLAS thread): scale out by adding workers.

Needs the optional extra ``fedldp[cluster]`` (``dask[distributed]``); without it, or when the
scheduler does not answer within ``CONNECT_TIMEOUT_S`` or has no worker within
``WORKER_TIMEOUT_S``, ``connect`` raises a ValueError saying so before any work is submitted.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fedldp.client.extras import optional_import

__all__ = ["CONNECT_TIMEOUT_S", "WORKER_TIMEOUT_S", "connect", "worker_count"]

CONNECT_TIMEOUT_S = 10.0
"""Seconds to reach the scheduler."""
WORKER_TIMEOUT_S = 120.0
"""Seconds to wait for the scheduler's first worker (compose starts workers beside it)."""


@contextmanager
def connect(address: str) -> Iterator[Any]:
    """A ``distributed.Client`` of the scheduler at ``address`` with at least one worker,
    closed on exit; ValueError when the extra is missing or the scheduler cannot be used."""
    distributed = optional_import("distributed", "cluster")
    try:
        client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        raise ValueError(
            f"cannot reach the Dask scheduler at {address} "
            f"(within {CONNECT_TIMEOUT_S:g} s): {' '.join(str(e).split())}"
        ) from None
    try:
        try:
            client.wait_for_workers(1, timeout=WORKER_TIMEOUT_S)
        except TimeoutError:
            raise ValueError(
                f"the Dask scheduler at {address} has no worker "
                f"(waited {WORKER_TIMEOUT_S:g} s); start some: dask worker {address}"
            ) from None
        yield client
    finally:
        client.close()


def worker_count(client: Any) -> int:
    """How many workers the scheduler of ``client`` has now."""
    return len(client.scheduler_info()["workers"])
