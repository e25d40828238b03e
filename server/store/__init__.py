"""Persistence: the database (``db``: engines, sessions, SQLite's and PostgreSQL's settings),
the typed tables, the schema and its Alembic migrations, and the repository modules, the only
place that builds SQL (``repository``: studies, rounds; ``participant_rows`` and
``report_rows``: enrollments and reports stored as blocks, ``blocks``; ``lease_rows``;
``eventlog``). Imports: nothing of the server but ``settings``."""
