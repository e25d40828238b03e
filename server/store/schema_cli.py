"""``python -m fedldp.server db upgrade|current|history [--database-url URL]``: the database's
schema revision, for operators (``fedldp db …`` runs this; the server upgrades on start anyway).

* ``upgrade`` brings the database to the head, as a starting server does (same lock);
* ``current`` says where it stands (reads only: the head, behind it, a database made before
  migrations, or newer than this fedldp);
* ``history`` lists the revisions, oldest first, marking the head and the database's.

A database this fedldp cannot upgrade (newer, or an unknown schema) prints
``error: <code>: <detail>`` and exits with 1; it is not touched.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, make_url
from sqlalchemy.exc import SQLAlchemyError

from fedldp.server.settings import Settings
from fedldp.server.store.db import Database
from fedldp.server.store.schema import SchemaError, SchemaStatus, head, revisions, schema_status

__all__ = ["add_db_parser", "run_db"]

UPGRADE_HINT = "the server upgrades it on start, or run `fedldp db upgrade`"


class NoDatabase(SchemaError):
    code = "no_database"


def add_db_parser(subparsers: Any) -> None:
    db = subparsers.add_parser(
        "db",
        help="the database schema: upgrade, current, history",
        description="Show or upgrade the database's schema revision (Alembic).",
    )
    commands = db.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    for name, text in (
        ("upgrade", "bring the database to the newest revision (as a starting server does)"),
        ("current", "the database's revision (reads only)"),
        ("history", "every revision, oldest first"),
    ):
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument(
            "--database-url",
            metavar="URL",
            help="SQLAlchemy URL (default $FEDLDP_DATABASE_URL or sqlite:///fedldp.db)",
        )


def run_db(args: argparse.Namespace) -> int:
    """Run ``db <command>``; the exit status (1 and one line on stderr for an error)."""
    overrides = {"database_url": args.database_url} if args.database_url else {}
    settings = Settings(**overrides)
    try:
        return COMMANDS[args.db_command](settings)
    except SchemaError as exc:
        print(f"error: {exc.code}: {exc}", file=sys.stderr)
    except SQLAlchemyError as exc:
        detail = " ".join(str(exc.__cause__ or exc).split())
        print(f"error: database_error: {detail}", file=sys.stderr)
    return 1


def _upgrade(settings: Settings) -> int:
    db = Database(settings)
    db.dispose()
    before, newest = db.schema_before, head()
    if before.empty:
        print(f"created the schema at {newest} (head)")
    elif before.effective == newest:
        print(f"{newest} (head): nothing to do")
    else:
        adopted = f"stamped {before.adopt} (made before migrations), " if before.adopt else ""
        print(f"{adopted}upgraded from {before.effective} to {newest} (head)")
    return 0


def _status(settings: Settings) -> SchemaStatus:
    url = make_url(settings.database_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        path = Path(url.database)
        if not path.exists():
            raise NoDatabase(f"no SQLite database at {path.resolve()}")
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return schema_status(connection)
    finally:
        engine.dispose()


def _current(settings: Settings) -> int:
    status = _status(settings)
    if status.empty:
        print(f"empty: no fedldp tables (the server creates them on start; head is {status.head})")
    elif status.adopt is not None:
        print(
            f"none: tables made before migrations, equal to revision {status.adopt} "
            f"({UPGRADE_HINT}: it is stamped, then upgraded to {status.head})"
        )
    elif status.revision == status.head:
        print(f"{status.revision} (head)")
    else:
        print(f"{status.revision} (behind: head is {status.head}; {UPGRADE_HINT})")
    return 0


def _history(settings: Settings) -> int:
    try:
        current = _status(settings).effective
    except NoDatabase:
        current = None
    newest = head()
    for script in revisions():
        marks = [
            m
            for m, on in (
                ("head", script.revision == newest),
                ("current", script.revision == current),
            )
            if on
        ]
        suffix = f" ({', '.join(marks)})" if marks else ""
        print(f"{script.revision}{suffix}: {script.doc}")
    return 0


COMMANDS: dict[str, Callable[[Settings], int]] = {
    "upgrade": _upgrade,
    "current": _current,
    "history": _history,
}
