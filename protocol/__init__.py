"""fedldp protocol core: pure math and wire schema (numpy, scipy and pydantic only, no I/O)."""

import os

# Clients run numpy on many small matrix products (a block's samples times a d×2d Kashin frame,
# say): BLAS threads only contend with each other and with a swarm's own worker processes, and on
# a 2-core machine that halves throughput. One BLAS thread per process unless the environment says
# otherwise (effective when this package is imported before numpy, as the CLI and server do).
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
