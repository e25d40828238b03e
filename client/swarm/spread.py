"""One population spread over a Dask cluster's workers against one server:
``fedldp swarm --cluster ADDRESS`` (the Python API: ``run_swarm_cluster``).

A population too large for one machine's swarm runs as ``parts`` leasing swarms (default: one per
worker of the scheduler), each a task on a worker: every part gets the same population spec, run
seed, protocol, parameters and study name, so the first to ask creates the study (its enrollment
target the population size) and the others join it; each part leases disjoint blocks of
participant ids from the server, enrolls and runs those users, and the study starts once the whole
population is enrolled (``run_swarm(lease=True)``, the mechanism of ``docker compose --scale
swarm=K``). Each worker builds the population from the spec itself (users' data are drawn from
the private seed per block, never shipped), so the study, its reports and its estimate are those
of one swarm, and of ``fedldp simulate`` with the same seed. This process (the driver) runs no
user: it watches the study (progress bars on stderr), waits for every part, cancels the others
when one fails, and reads the result.

The workers must run the same fedldp and plugins as the driver (``fedldp.client.cluster``); each
part holds one HTTP client, so a part's concurrency and batch size are the options of one swarm.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedldp.client.api.client import ApiClient
from fedldp.client.api.errors import SwarmError
from fedldp.client.cluster import connect, worker_count
from fedldp.client.population.build import AnyPopulation, PopulationSpec, build_population
from fedldp.client.population.features import SemiFeaturePopulation
from fedldp.client.swarm.driving import DriveStats, checked_threads
from fedldp.client.swarm.enrolling import study_named
from fedldp.client.swarm.progress import SwarmProgress, watch_study
from fedldp.client.swarm.run import SwarmResult, final_result, run_swarm_sync
from fedldp.protocol.core.base.records import FloatArray
from fedldp.protocol.core.wire import ResultView, StudyView

__all__ = ["MAX_PARTS", "run_swarm_cluster"]

MAX_PARTS = 1024
"""At most this many parts (each holds a connection pool and leases blocks)."""
_POLL_S = 0.2


def _part(server_url: str, name: str, options: Mapping[str, Any]) -> tuple[DriveStats, int]:
    """One part, on a worker: a leasing swarm of the shared study; its stats and users run."""
    run = run_swarm_sync(server_url, name=name, lease=True, progress=False, **options)
    return run.stats, run.users_served or 0


def run_swarm_cluster(
    server_url: str,
    address: str,
    *,
    population: PopulationSpec,
    seed: int,
    create: tuple[str, Mapping[str, Any]],
    name: str | None = None,
    parts: int | None = None,
    progress: bool | None = None,
    admin_key: str | None = None,
    **options: Any,
) -> SwarmResult:
    """Run ``population`` (a spec: each worker builds it) through a new study on the server at
    ``server_url``, its users spread over ``parts`` leasing swarms on the workers of the Dask
    scheduler at ``address`` (default: one part per worker). ``name`` is the shared study's name
    (default: a fresh ``swarm-…`` name); the other keyword arguments are ``run_swarm``'s (batch,
    concurrency, round_deadline_s, quorum, ε range, retry, behaviour), applied to each part.

    ValueError before anything runs when the arguments do not fit (an unreachable scheduler, a
    built population, ``processes``); the first part to fail cancels the others and its error
    is raised here (a ``SwarmError`` with the server's code)."""
    if not isinstance(population, PopulationSpec):
        raise ValueError(
            "a cluster swarm needs a PopulationSpec: each worker builds the population"
        )
    if parts is not None and not 1 <= parts <= MAX_PARTS:
        raise ValueError(f"parts must lie in [1, {MAX_PARTS}]")
    for option in ("processes", "lease", "study_id", "transport"):
        if option in options:
            raise ValueError(f"{option} does not apply to a cluster swarm")
    checked_threads(options.get("threads"), options.get("batch"))  # here, not on the workers
    name = name or f"swarm-{uuid.uuid4().hex[:12]}"
    local = build_population(population, seed)  # the truth stays with the driver
    shared = {
        **options,
        "population": population,
        "seed": seed,
        "create": (create[0], dict(create[1])),
        "admin_key": admin_key,
    }
    began = time.perf_counter()
    with connect(address) as client:
        count = parts or worker_count(client)
        futures = [
            client.submit(_part, server_url, name, shared, key=f"fedldp-swarm-{name}-{i}")
            for i in range(count)
        ]
        try:
            outcomes = asyncio.run(_follow(server_url, name, futures, progress, admin_key))
        finally:
            client.cancel([f for f in futures if not f.done()])
        study, result, predictions = asyncio.run(_finish(server_url, name, local, admin_key))
    stats = DriveStats.total(o[0] for o in outcomes)
    served = sum(o[1] for o in outcomes)
    elapsed = time.perf_counter() - began
    return SwarmResult(study, result, local, elapsed, stats, predictions, served)


async def _follow(
    server_url: str, name: str, futures: list[Any], progress: bool | None, admin_key: str | None
) -> list[tuple[DriveStats, int]]:
    """Wait for every part (raising the first failure), with the study's progress bars once
    a part has created it."""
    async with ApiClient(server_url, admin_key=admin_key) as api:
        with SwarmProgress(progress) as bars:
            watcher: asyncio.Task[None] | None = None
            try:
                while True:
                    failed = [f for f in futures if f.status in ("error", "cancelled")]
                    if failed:
                        failed[0].result()  # raises the part's error
                        raise SwarmError("swarm_cancelled", "a part was cancelled on the cluster")
                    if all(f.done() for f in futures):
                        return [f.result() for f in futures]
                    if watcher is None and bars.enabled:
                        study = await study_named(api, name)
                        if study is not None:
                            watcher = asyncio.create_task(watch_study(api, study.id, bars))
                    await asyncio.sleep(_POLL_S)
            finally:
                if watcher is not None:
                    watcher.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await watcher


async def _finish(
    server_url: str, name: str, local: AnyPopulation, admin_key: str | None
) -> tuple[StudyView, ResultView, FloatArray | None]:
    """The shared study, its result and (semi-feature data) the predictions at the test set."""
    async with ApiClient(server_url, admin_key=admin_key) as api:
        study = await study_named(api, name)
        if study is None:
            raise SwarmError("study_missing", f"no study {name!r} on {server_url}")
        result = await final_result(api, study.id)
        study = await api.study(study.id)
        predictions: FloatArray | None = None
        if isinstance(local, SemiFeaturePopulation) and result.phase == "finished":
            answer = await api.predict(study.id, local.test_features.tolist())
            predictions = np.asarray(answer.predictions, dtype=np.float64)
        return study, result, predictions
