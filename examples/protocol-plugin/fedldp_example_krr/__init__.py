"""k-ary randomized response as a fedldp protocol plugin (``example-krr``)."""

from fedldp_example_krr.krr import KaryRR, KaryRRParams

__all__ = ["KaryRR", "KaryRRParams"]
