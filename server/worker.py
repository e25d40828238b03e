"""The worker processes of ``python -m fedldp.server --workers K``.

With K > 1 the command's process becomes uvicorn's supervisor: it binds the port, starts K
workers (each a fresh interpreter that builds the app with ``app()``, from the same environment)
and restarts one that dies; SIGTERM or SIGINT to it stops them all. Each worker asks Linux to
send it SIGTERM when the supervisor dies (``PR_SET_PDEATHSIG``), so a SIGKILL of the pid the
caller holds leaves no worker serving the port (issue 17).

What lives in a worker's memory and stays correct across workers:

* round transitions and study starts are decided by the database (conditional updates,
  ``SELECT … FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite), as for replicas: any
  worker's request or sweeper may close a round, exactly one does. Every worker runs the deadline
  sweeper; its passes are transitions of that kind, so two sweeping at once is only redundant;
* caches hold what never changes once written (plans of started studies, token HMACs, study
  secrets) or snapshots that expire (``fedldp.server.runtime.states``: at most 0.25 s behind a
  transition another worker made);
* long polls and event streams wake at once on their own worker's transitions and read the
  database every quarter second (``events_poll_s``) for the others'; events are rows, so every
  worker serves the same numbered stream;
* contribution keys are files in the key directory, read on each use, never cached;
* ``/metrics`` counts the requests of the worker that answers the scrape (per process).

SQLite with several workers: the file is in WAL mode, so readers never wait; writers take turns
in SQLite's busy handler across processes (within one process, on a lock: ``Context.transaction``).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import sys

from fastapi import FastAPI

from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app
from fedldp.server.web.observe import configure_logging
from fedldp.threads import one_blas_thread

__all__ = ["GC_THRESHOLDS", "MALLOC_ARENAS", "SUPERVISOR_PID", "app", "tune_memory"]

GC_THRESHOLDS = (50_000, 10, 10)
"""The collector's generation thresholds. A batch request allocates a few hundred thousand
objects (rows, ids, receipts), nearly all alive until it ends; at the default 700 allocations per
young collection, the collector ran ~1,900 times in bench_e2e, a tenth of the server's CPU,
mostly tracing those live objects again and again. At 50,000 it runs a few times per study."""

SUPERVISOR_PID = "FEDLDP_SUPERVISOR_PID"
"""The environment variable through which the workers learn their supervisor's pid."""

_PR_SET_PDEATHSIG = 1
_M_ARENA_MAX = -8  # glibc's mallopt parameter
MALLOC_ARENAS = 2
"""glibc malloc arenas of a server process. By default each thread that allocates may get an
arena of its own (up to 8 per core), and the worker threads of the batch endpoints each kept the
memory of the requests they had served: at 10^6 users (bench_e2e) the server's peak RSS was
580 MiB; with two arenas (and participants loaded in pages) 330 MiB."""


def tune_memory() -> None:
    """Freeze what exists now (modules, the app: never traced again) and collect the young
    generation less often (``GC_THRESHOLDS``); cap glibc's malloc arenas (``MALLOC_ARENAS``;
    ``MALLOC_ARENA_MAX`` in the environment overrides it)."""
    if sys.platform.startswith("linux") and "MALLOC_ARENA_MAX" not in os.environ:
        with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to tune
            ctypes.CDLL(None).mallopt(_M_ARENA_MAX, MALLOC_ARENAS)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _die_with_supervisor() -> None:
    """SIGTERM when the supervisor dies (Linux); exit now if it has died already."""
    supervisor = int(os.environ.get(SUPERVISOR_PID, "0"))
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if supervisor and os.getppid() != supervisor:  # it died before the call above
        raise SystemExit(0)


def app() -> FastAPI:
    """The app of one worker (uvicorn calls this factory in each worker process)."""
    _die_with_supervisor()
    one_blas_thread()
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    application = create_app(settings)
    tune_memory()
    return application
