"""One BLAS/OpenMP thread per process, set where a process starts (the ``fedldp`` command, the
server and its workers, experiment and Dask workers, the test suite), never as a side effect of
an import.

Clients run numpy on many small matrix products (a block's samples times a d×2d Kashin frame,
say): BLAS threads only contend with each other and with a swarm's own worker processes, and on
a 2-core machine that halves throughput. A value the environment already gives wins.
"""

from __future__ import annotations

import os

from threadpoolctl import threadpool_limits

__all__ = ["VARIABLES", "one_blas_thread"]

VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""The environment variables the BLAS and OpenMP runtimes read when they load."""


def one_blas_thread() -> None:
    """Set ``VARIABLES`` to 1 where the environment does not set them (for the libraries not
    loaded yet and the processes this one starts), and limit the libraries already loaded to
    what they now say (``threadpoolctl``)."""
    for variable in VARIABLES:
        os.environ.setdefault(variable, "1")
    threadpool_limits(
        limits={
            "blas": int(os.environ["OPENBLAS_NUM_THREADS"]),
            "openmp": int(os.environ["OMP_NUM_THREADS"]),
        }
    )
