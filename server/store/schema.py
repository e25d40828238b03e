"""The database follows the code: the Alembic revisions of ``fedldp.server.store.migrations``,
applied on start (``fedldp.server.store.db``) and by ``python -m fedldp.server db upgrade``.

``upgrade`` runs in the caller's transaction, which holds the schema lock (a PostgreSQL advisory
lock; SQLite's ``BEGIN IMMEDIATE``), so replicas starting together migrate once, and a failed
revision leaves nothing half done (both databases roll DDL back). What it does with a database:

* empty: every revision, from the first;
* at a revision this code knows: the revisions after it (none at the head);
* made by ``create_all`` before migrations existed (fedldp's tables, no ``alembic_version``):
  compared with the schemas earlier releases made (``migrations.legacy``), stamped with the
  revision it equals, then upgraded; if it equals none, ``UnknownSchema`` and it is not touched;
* at a revision this code does not know (a newer fedldp wrote it): ``SchemaTooNew``, and it is
  never touched, since this code would misread tables it does not know.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from sqlalchemy import Connection, inspect

from fedldp.server.store import migrations
from fedldp.server.store.migrations.legacy import LEGACY_INDEXES, LEGACY_REVISIONS, legacy_metadata

__all__ = [
    "SchemaError",
    "SchemaStatus",
    "SchemaTooNew",
    "UnknownSchema",
    "alembic_config",
    "head",
    "revisions",
    "schema_status",
    "upgrade",
]

log = logging.getLogger("fedldp.server.store.schema")

MIGRATIONS = Path(migrations.__file__).parent
TABLES = frozenset(legacy_metadata(LEGACY_REVISIONS[-1]).tables)
"""fedldp's tables in every schema so far: a database holding none of them is empty to us."""


class SchemaError(Exception):
    """The database's schema cannot be brought to the code's; nothing was changed."""

    code = "schema_error"


class SchemaTooNew(SchemaError):
    code = "schema_too_new"


class UnknownSchema(SchemaError):
    code = "unknown_schema"


@dataclass(frozen=True)
class SchemaStatus:
    """Where a database stands. ``revision``: its ``alembic_version`` (None: none); ``adopt``:
    for a ``create_all`` database, the revision its schema equals; ``empty``: no fedldp table."""

    revision: str | None
    head: str
    adopt: str | None = None
    empty: bool = False

    @property
    def effective(self) -> str | None:
        """The revision the database's schema is at (None when empty)."""
        return self.revision or self.adopt


@functools.cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory(str(MIGRATIONS))


def revisions() -> list[Script]:
    """Every revision, oldest first."""
    return list(reversed(list(_scripts().walk_revisions())))


def head() -> str:
    """The newest revision (a second head, from two revisions on one parent, is an error)."""
    current = _scripts().get_current_head()
    if current is None:
        raise SchemaError("fedldp.server.store.migrations holds no revision")
    return current


def schema_status(connection: Connection) -> SchemaStatus:
    """Where the database stands; ``SchemaTooNew``/``UnknownSchema`` if it cannot be upgraded.
    Reads only."""
    newest = head()
    heads = MigrationContext.configure(connection).get_current_heads()
    known = {script.revision for script in revisions()}
    if heads:
        if len(heads) > 1 or heads[0] not in known:
            raise SchemaTooNew(
                f"the database is at schema revision {', '.join(heads)}, which this fedldp does "
                f"not know (its newest is {newest}): a newer release wrote it. It was left "
                "untouched; run that release (or a newer one) on it, or use another database"
            )
        return SchemaStatus(heads[0], newest)
    if not TABLES & set(inspect(connection).get_table_names()):
        return SchemaStatus(None, newest, empty=True)
    differences: dict[str, list[str]] = {}
    for candidate in LEGACY_REVISIONS:
        differences[candidate] = _legacy_differences(connection, candidate)
        if not differences[candidate]:
            return SchemaStatus(None, newest, adopt=candidate)
    closest = min(LEGACY_REVISIONS, key=lambda r: len(differences[r]))
    raise UnknownSchema(
        "the database has fedldp tables but no alembic_version, and they match no schema an "
        f"earlier release made ({', '.join(reversed(LEGACY_REVISIONS))}). To equal the closest, "
        f"{closest}, it would need: {'; '.join(differences[closest][:5])}. "
        "It was left untouched"
    )


def alembic_config(connection: Connection) -> Config:
    """Alembic's configuration for running ``command``s on ``connection`` (in its transaction)."""
    config = Config(attributes={"connection": connection})
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    return config


def upgrade(connection: Connection) -> SchemaStatus:
    """Bring the database to the head, in the caller's transaction; its status before."""
    status = schema_status(connection)
    if status.adopt is not None:
        log.info("database made by an earlier release without migrations: stamped %s", status.adopt)
        MigrationContext.configure(connection).stamp(_scripts(), status.adopt)
    if status.effective != status.head:
        command.upgrade(alembic_config(connection), "head")
        log.info("database schema upgraded from %s to %s", status.effective or "empty", status.head)
    return status


def _legacy_differences(connection: Connection, revision: str) -> list[str]:
    expected = legacy_metadata(revision)

    def ours(name: str | None, kind: str, parent: Any) -> bool:
        return kind != "table" or name in expected.tables

    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_name": ours}
    )
    return [_describe(d) for d in compare_metadata(context, expected) if not _tolerated(d)]


def _tolerated(difference: Any) -> bool:
    if isinstance(difference, tuple) and difference[0] == "remove_index":
        index = difference[1]
        return (index.table.name, index.name) in LEGACY_INDEXES
    return False


def _describe(difference: Any) -> str:
    """One line for an autogenerate difference: ``("add_column", schema, table, column)``, or a
    list of column changes ``[("modify_type", schema, table, column, …)]``."""
    if isinstance(difference, list):
        return ", ".join(_describe(d) for d in difference)
    kind, *rest = difference
    if kind.startswith("modify_"):
        return f"{kind} {rest[1]}.{rest[2]}"
    if kind.endswith("_column"):
        return f"{kind} {rest[1]}.{rest[2].name}"
    thing = rest[0]
    table = getattr(thing, "table", None)
    return f"{kind} {table.name + '.' if table is not None else ''}{getattr(thing, 'name', thing)}"
