"""Trials on a Dask distributed cluster: ``fedldp experiment run FILE --cluster ADDRESS``.

Paper-scale sweeps outgrow one machine. With ``--cluster`` the driver (the ``fedldp`` process)
connects to an existing Dask scheduler and submits each trial as a task; the workers run
``run_trial`` (the same function the local worker processes run) and send back the row, and the
driver alone writes the CSV as rows arrive, so the runner's guarantees hold unchanged: an
interrupted driver loses at most the trials in flight, rerunning resumes, and the sorted file
does not depend on which worker ran which trial or when (a trial's row is a function of the
trial alone). The workers must run the same fedldp (the compose profile ``cluster`` starts them
from the project image) and should run one thread each (``dask worker --nthreads 1`` with one
BLAS thread): ``scale out`` by adding workers.

Needs the optional extra ``fedldp[cluster]`` (``dask[distributed]``); without it, or when the
scheduler does not answer within ``CONNECT_TIMEOUT_S`` or has no worker within
``WORKER_TIMEOUT_S``, a ValueError says so before any trial runs.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from fedldp.client.experiments.spec import Trial
from fedldp.client.extras import optional_import

__all__ = ["CONNECT_TIMEOUT_S", "WORKER_TIMEOUT_S", "cluster_rows", "connect"]

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


def cluster_rows(
    client: Any, run: Callable[[Trial], dict[str, str]], todo: Sequence[Trial]
) -> Generator[dict[str, str]]:
    """The rows ``run`` makes of ``todo``'s trials on the cluster's workers, as they finish (any
    order). Leaving the iteration early (an error, Ctrl-C) cancels the trials not yet done."""
    from distributed import as_completed

    # the key names the trial: a rerun of the same trial on the same scheduler is the same task
    futures = [client.submit(run, t, key=f"fedldp-trial-{t.key}", pure=False) for t in todo]
    try:
        for future in as_completed(futures, loop=client.loop):
            try:
                row: dict[str, str] = future.result()
            except ModuleNotFoundError as e:
                raise ValueError(
                    f"a Dask worker cannot import {e.name}: the workers must run fedldp "
                    "(the same version as this driver)"
                ) from None
            yield row
    finally:
        client.cancel([f for f in futures if not f.done()])
