"""fedldp aggregation server, in four layers that import only downwards (tests/test_layering.py
checks it; docs/architecture.md draws them):

* ``web``: the FastAPI application, routes, bodies, credentials, replies;
* ``services``: what each endpoint does (studies, enrollment, tasks, ingest, rounds, …);
* ``runtime``: what a running process holds (the ``Context``, study states, plans, tokens, keys);
* ``store``: the database, tables, schema migrations and the repository, the only SQL.

``settings`` and ``errors`` sit beside them, used by all; ``__main__`` and ``worker`` start it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fedldp")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0+unknown"
