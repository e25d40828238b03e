"""``python -m fedldp.server [--host H] [--port P] [--workers K] [--protocols A,B]``: run the
aggregation server with uvicorn (K worker processes behind one supervisor:
``fedldp.server.worker``), offering the protocols named (default: every installed one);
``python -m fedldp.server db upgrade|current|history`` shows or upgrades the database's schema
(``fedldp.server.store.schema_cli``).

Settings come from the environment (``FEDLDP_DATABASE_URL``, ``FEDLDP_ADMIN_KEY``,
``FEDLDP_LOG_LEVEL``, ``FEDLDP_LOG_FORMAT``, …; see ``fedldp.server.settings``); the flags
override host and port. On start the server brings the database to the newest schema revision;
one it cannot upgrade (written by a newer fedldp, or of an unknown schema) stops it with
``error: <code>: <detail>`` and exit status 1, untouched, as does ``--protocols`` naming a
protocol not installed (``unknown_protocol``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import uvicorn

from fedldp.server.errors import UnknownProtocol
from fedldp.server.runtime.protocols import offered_protocols
from fedldp.server.settings import Settings
from fedldp.server.store.db import Database
from fedldp.server.store.schema import SchemaError
from fedldp.server.store.schema_cli import add_db_parser, run_db
from fedldp.server.web import wire_io
from fedldp.server.web.app import create_app
from fedldp.server.web.observe import configure_logging
from fedldp.server.worker import SUPERVISOR_PID, tune_memory
from fedldp.threads import one_blas_thread

SHUTDOWN_GRACE_S = 5
"""How long a stopping server waits for open requests (event streams among them) to end."""


def main(argv: list[str] | None = None) -> None:
    one_blas_thread()  # before the workers start: they inherit the environment
    parser = argparse.ArgumentParser(prog="python -m fedldp.server", description=__doc__)
    parser.add_argument("--host", help="interface to bind (default $FEDLDP_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default $FEDLDP_PORT or 8000)")
    parser.add_argument(
        "--workers",
        type=int,
        metavar="K",
        help="worker processes (default $FEDLDP_WORKERS or 1); with K > 1 this process "
        "supervises them, and they stop when it does or dies",
    )
    parser.add_argument(
        "--protocols",
        metavar="A,B",
        help="offer only these protocols, comma-separated (default $FEDLDP_PROTOCOLS, or every "
        "installed one: fedldp protocols lists them)",
    )
    add_db_parser(parser.add_subparsers(dest="command", metavar="{db}"))
    args = parser.parse_args(argv)
    if args.command == "db":
        raise SystemExit(run_db(args))
    given = {
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "protocols": args.protocols,
    }
    settings = Settings(**{k: v for k, v in given.items() if v is not None})
    configure_logging(settings.log_level, settings.log_format)
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "log_config": None,  # configure_logging did it (text or JSON, with request ids)
        "access_log": False,  # fedldp.server.web.observe logs each request at debug level
        # open event streams of running studies would otherwise hold a shutdown until they end
        "timeout_graceful_shutdown": SHUTDOWN_GRACE_S,
        "http": wire_io.PROTOCOL,  # one send per answer
    }
    try:
        offered_protocols(settings)  # before any worker starts: a name not installed stops it
        if settings.workers > 1:
            # the schema is brought up to date (or refused) once, here, before any worker starts
            Database(settings).dispose()
        else:
            app = create_app(settings)
    except (SchemaError, UnknownProtocol) as exc:
        sys.stderr.write(f"error: {exc.code}: {exc}\n")
        raise SystemExit(1) from None
    if settings.workers > 1:
        # the workers read their settings from the environment, as this process did
        os.environ.update(
            {
                "FEDLDP_HOST": settings.host,
                "FEDLDP_PORT": str(settings.port),
                "FEDLDP_WORKERS": str(settings.workers),
                SUPERVISOR_PID: str(os.getpid()),
            }
        )
        if settings.protocols is not None:
            os.environ["FEDLDP_PROTOCOLS"] = ",".join(settings.protocols)
        uvicorn.run("fedldp.server.worker:app", factory=True, workers=settings.workers, **common)
        return
    # The long-lived objects made so far (modules, the app) need never be traced again: frozen,
    # they leave the collector only the short-lived ones a request makes (the batch endpoints
    # make tens of thousands of them).
    tune_memory()
    uvicorn.run(app, **common)


if __name__ == "__main__":
    main()
