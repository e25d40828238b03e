"""The HTTP layer: the FastAPI application (``app``), its routes and the per-user fast path,
request bodies, credentials, error replies, limits and observation. It parses, calls a service
and answers; the rules live in ``fedldp.server.services``. Imports: ``services``, ``runtime``,
``store`` (the application's start-up opens the database), never the other way round."""
