"""Trials on a Dask distributed cluster: ``fedldp experiment run FILE --cluster ADDRESS``.

Paper-scale sweeps outgrow one machine. With ``--cluster`` the driver (the ``fedldp`` process)
connects to an existing Dask scheduler (``fedldp.client.cluster.connect``) and submits each trial
as a task; the workers run ``run_trial`` (the same function the local worker processes run) and
send back the row, and the driver alone writes the CSV as rows arrive, so the runner's guarantees
hold unchanged: an interrupted driver loses at most the trials in flight, rerunning resumes, and
the sorted file does not depend on which worker ran which trial or when (a trial's row is a
function of the trial alone).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from fedldp.client.experiments.spec import Trial

__all__ = ["cluster_rows"]


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
