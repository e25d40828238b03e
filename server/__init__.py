"""fedldp aggregation server: FastAPI routes → services → repository → SQLAlchemy tables."""

from importlib.metadata import PackageNotFoundError, version

import fedldp.protocol  # noqa: F401  (first: it caps BLAS threads before numpy loads)

try:
    __version__ = version("fedldp")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0+unknown"
