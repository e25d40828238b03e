"""The services: what the API does, as functions of a ``Context`` (studies, enrollment, leases,
participants' tasks and budgets, report ingest, rounds and their transitions, event streams,
views). They raise the errors of ``fedldp.server.errors`` and reach the database only through
the named functions of ``fedldp.server.store``. Imports: ``runtime`` and ``store``."""
