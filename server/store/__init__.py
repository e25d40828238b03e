"""Persistence: the database (``db``: engines, sessions, SQLite's and PostgreSQL's settings),
the typed tables, the schema and its Alembic migrations, and the repository modules, the only
place that builds SQL (``repository``: studies, rounds, participants; ``report_rows``;
``lease_rows``; ``eventlog``). Imports: nothing of the server but ``settings``."""
