"""``python -m fedldp.server [--host H] [--port P]``: run the aggregation server with uvicorn;
``python -m fedldp.server db upgrade|current|history`` shows or upgrades the database's schema
(``fedldp.server.schema_cli``).

Settings come from the environment (``FEDLDP_DATABASE_URL``, ``FEDLDP_ADMIN_KEY``,
``FEDLDP_LOG_LEVEL``, …; see ``fedldp.server.settings``); the flags override host and port. On
start the server brings the database to the newest schema revision; one it cannot upgrade (written
by a newer fedldp, or of an unknown schema) stops it with ``error: <code>: <detail>`` and exit
status 1, untouched.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys

import uvicorn

from fedldp.server.app import create_app
from fedldp.server.schema import SchemaError
from fedldp.server.schema_cli import add_db_parser, run_db
from fedldp.server.settings import Settings

GC_THRESHOLDS = (50_000, 10, 10)
"""The collector's generation thresholds. A batch request allocates a few hundred thousand
objects (rows, ids, receipts), nearly all alive until it ends; at the default 700 allocations per
young collection, the collector ran ~1,900 times in bench_e2e, a tenth of the server's CPU,
mostly tracing those live objects again and again. At 50,000 it runs a few times per study."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fedldp.server", description=__doc__)
    parser.add_argument("--host", help="interface to bind (default $FEDLDP_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default $FEDLDP_PORT or 8000)")
    add_db_parser(parser.add_subparsers(dest="command", metavar="{db}"))
    args = parser.parse_args(argv)
    if args.command == "db":
        raise SystemExit(run_db(args))
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = Settings(**overrides)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        app = create_app(settings)
    except SchemaError as exc:
        sys.stderr.write(f"error: {exc.code}: {exc}\n")
        raise SystemExit(1) from None
    # The long-lived objects made so far (modules, the app) need never be traced again: frozen,
    # they leave the collector only the short-lived ones a request makes (the batch endpoints
    # make tens of thousands of them).
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.log_level == "debug",
    )


if __name__ == "__main__":
    main()
