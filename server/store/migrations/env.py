"""Alembic's environment: run the revisions on a connection, compared with the server's tables.

``fedldp.server.store.schema`` hands over its connection (``config.attributes["connection"]``),
inside the transaction that holds the schema lock, so the revisions commit or roll back with it. Run
by the ``alembic`` command line instead (a developer writing a revision, see ``__init__``), it
connects to ``sqlalchemy.url`` of ``alembic.ini``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from fedldp.server.store.tables import Base


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite alters a table by copying it
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    if context.is_offline_mode():
        raise SystemExit("fedldp's migrations run on a database connection (no --sql mode)")
    given: Connection | None = context.config.attributes.get("connection")
    if given is not None:
        run(given)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("set sqlalchemy.url in alembic.ini")
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            run(connection)
    finally:
        engine.dispose()


main()
