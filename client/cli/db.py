"""``fedldp db upgrade|current|history [--database-url URL]``: the server database's schema.

Runs ``python -m fedldp.server db …`` in place of this process (client/ never imports server/):
``upgrade`` brings the database to the newest schema revision, as a starting server does;
``current`` says which revision it is at (reads only); ``history`` lists the revisions. A
database written by a newer fedldp is refused (``error: schema_too_new: …``, exit status 1) and
left untouched.
"""

from __future__ import annotations

import argparse
from typing import Any

from fedldp.client.swarm.server_process import exec_server

__all__ = ["add_db_parser"]

COMMANDS = (
    ("upgrade", "bring the database to the newest schema revision (as a starting server does)"),
    ("current", "the database's schema revision (reads only)"),
    ("history", "every schema revision, oldest first"),
)


def _run_db(args: argparse.Namespace) -> int:
    argv = ["db", args.db_command]
    if args.database_url:
        argv += ["--database-url", args.database_url]
    return exec_server(argv)


def add_db_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "db",
        help="the server database's schema: upgrade, current, history",
        description="Show or upgrade the schema revision of a server's database. The server "
        "upgrades its database on start; this is for operators who want to do it, or look, "
        "first.",
        epilog="examples:\n  fedldp db current --database-url sqlite:///studies.db\n"
        "  fedldp db upgrade --database-url postgresql+psycopg://fedldp@db/fedldp\n"
        "  fedldp db history",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    for name, text in COMMANDS:
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument(
            "--database-url",
            metavar="URL",
            help="SQLAlchemy URL (default $FEDLDP_DATABASE_URL or the server's SQLite file)",
        )
    parser.set_defaults(handler=_run_db)
