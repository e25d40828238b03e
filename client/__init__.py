"""fedldp client side: simulated users, populations, the in-process simulator, the swarm."""

import fedldp.protocol  # noqa: F401  (first: it caps BLAS threads before numpy loads)
