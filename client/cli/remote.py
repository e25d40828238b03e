"""``fedldp server | swarm | studies | run``: the deployment path on the command line.

* ``server`` becomes ``python -m fedldp.server`` (client/ never imports server/; ``os.execve`` on
  POSIX, so the pid that ``fedldp server`` started with is the server's: signals, SIGKILL
  included, reach it, and nothing is left serving when that pid dies);
* ``swarm`` runs a simulated population against a server (``fedldp.client.swarm.run``) and prints
the result
  next to the ground truth, or with ``--json`` the object of ``fedldp simulate --json`` plus
  ``study_id``;
* ``studies list|show|result|watch`` reads studies from a server;
* ``run`` is the first experience: a server on a temporary SQLite database, a batch-mode swarm
  against it, the result, and the in-process simulation of the same seed beside it.

Errors print one line ``error: <code>: <detail>`` and exit with 2 (the request) or 1 (the server,
the network, a failed study), never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedldp.client.api.client import ApiClient
from fedldp.client.api.retry import RetryPolicy
from fedldp.client.cli.output import render_table
from fedldp.client.cli.params import add_behaviour_arguments, behaviour_from_args, parse_params
from fedldp.client.cli.studies import (
    add_server_option,
    add_studies_parser,
    remote,
    resolve_study_id,
    retry_policy,
)
from fedldp.client.extras import require_database_driver
from fedldp.client.population.build import (
    AnyPopulation,
    add_population_arguments,
    build_population,
    population_spec_from_args,
)
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.driving import MAX_THREADS, MIN_BLOCK, auto_batch
from fedldp.client.swarm.run import SwarmResult, run_swarm
from fedldp.client.swarm.server_process import ServerProcess, exec_server, free_port, sqlite_url
from fedldp.client.swarm.spread import run_swarm_cluster
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import EPSILON_MAX, EPSILON_MIN, MAX_BATCH

__all__ = ["REMOTE_COMMANDS", "add_run_parser", "add_server_parser", "add_swarm_parser"]

Subparsers = Any
AUTO = "auto"
"""``--batch``'s default: ``auto_batch`` of the population (``fedldp.client.swarm.driving``)."""
RUN_DEFAULTS: dict[str, Any] = {
    "users": 20_000,
    "samples": 256,
    "distribution": "two-point",
    "mean": 0.3,
}


def _add_param_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--param", action="append", metavar="KEY=VALUE", help="one protocol parameter (repeat)"
    )
    parser.add_argument("--params-json", metavar="JSON", help="protocol parameters as an object")


def _batch_size(text: str) -> int | str:
    """``--batch``'s value: a number of users, or ``auto``."""
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid batch size {text!r}: give a number of users or {AUTO}"
        ) from None


def _add_swarm_options(parser: argparse.ArgumentParser, *, per_user: bool) -> None:
    parser.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="requests in flight per process (default 64 per-user, 8 in batch mode)",
    )
    auto = f"auto: two blocks per privatizing thread, each of {MIN_BLOCK} to {MAX_BATCH} users"
    if per_user:
        parser.add_argument(
            "--batch",
            type=_batch_size,
            nargs="?",
            const=AUTO,
            metavar="SIZE",
            help=f"batch mode: blocks of SIZE users on the batch endpoints (default size {auto}); "
            "without it every user polls and reports on its own",
        )
    else:
        parser.add_argument(
            "--batch",
            type=_batch_size,
            default=AUTO,
            metavar="SIZE",
            help=f"users per batch request (default {auto})",
        )
    parser.add_argument(
        "--processes", type=int, default=1, metavar="K", help="worker processes (default 1)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="T",
        help="threads privatizing the blocks of batch mode, per process (default: one per CPU, "
        f"at most {MAX_THREADS})",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--progress", action="store_true", help="progress bars on stderr")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _progress(args: argparse.Namespace) -> bool | None:
    return False if args.quiet else (True if args.progress else None)


def _batch(args: argparse.Namespace, users: int) -> int | None:
    """The swarm's block size: ``--batch`` (None: per user), ``auto`` worked out for ``users``
    (``auto_batch``); ValueError outside [1, MAX_BATCH]."""
    batch: int | str | None = args.batch
    if batch == AUTO:
        return auto_batch(users, args.threads, args.processes)
    if batch is not None and not (isinstance(batch, int) and 1 <= batch <= MAX_BATCH):
        raise ValueError(f"--batch must lie in [1, {MAX_BATCH}], got {batch}")
    return batch


# --------------------------------------------------------------------------- fedldp server


def _run_server(args: argparse.Namespace) -> int:
    require_database_driver(args.database_url)
    env = {"FEDLDP_ADMIN_KEY": args.admin_key} if args.admin_key else {}
    if args.database_url:
        env["FEDLDP_DATABASE_URL"] = args.database_url
    command = []  # what is not given here, the server takes from $FEDLDP_* or its defaults
    if args.host is not None:
        command += ["--host", args.host]
    if args.port is not None:
        command += ["--port", str(args.port)]
    if args.workers is not None:
        command += ["--workers", str(args.workers)]
    if args.protocols is not None:
        command += ["--protocols", args.protocols]
    return exec_server(command, env)


def add_server_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "server",
        help="run the aggregation server",
        description="Run the fedldp aggregation server in the foreground (python -m fedldp.server)",
        epilog="examples:\n  fedldp server\n"
        "  fedldp server --port 8080 --database-url sqlite:///studies.db\n"
        "  fedldp server --database-url postgresql+psycopg://fedldp@db/fedldp --workers 2",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", help="interface (default $FEDLDP_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default $FEDLDP_PORT or 8000)")
    parser.add_argument(
        "--workers",
        type=int,
        metavar="K",
        help="worker processes sharing the port (default $FEDLDP_WORKERS or 1); they stop when "
        "this process stops or dies",
    )
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="SQLAlchemy URL (default $FEDLDP_DATABASE_URL or the server's SQLite file)",
    )
    parser.add_argument(
        "--admin-key",
        default=None,
        metavar="KEY",
        help="require this X-Admin-Key for admin requests (default $FEDLDP_ADMIN_KEY)",
    )
    parser.add_argument(
        "--protocols",
        metavar="A,B",
        help="offer only these protocols, comma-separated (default $FEDLDP_PROTOCOLS, or every "
        "installed one, plugins included: fedldp protocols lists them)",
    )
    parser.set_defaults(handler=remote(_run_server))


# --------------------------------------------------------------------------- fedldp swarm


def _run_swarm(args: argparse.Namespace) -> int:
    population = build_population(population_spec_from_args(args), args.seed)
    batch = _batch(args, population.n)
    create = None
    if args.create is not None:
        protocol = get_protocol(args.create)
        params = fill_from_population(protocol, parse_params(args), population)
        protocol.parse_params(params)  # a clear local error before anything is created
        create = (args.create, params)
    elif args.param or args.params_json or {args.epsilon_min, args.epsilon_max} != {None}:
        raise ValueError(
            "--param/--params-json/--epsilon-min/--epsilon-max go with --create (a study's are "
            "fixed)"
        )
    if args.lease and (create is None or not args.name):
        raise ValueError("--lease needs --create PROTOCOL and --name NAME (the study to share)")
    retry = retry_policy(args)
    if args.cluster is not None:
        return _run_swarm_cluster(args, create, retry, batch)
    study_id = None if args.study is None else asyncio.run(_resolve(args.server, args.study, retry))
    run = asyncio.run(
        run_swarm(
            args.server,
            population=population,
            study_id=study_id,
            create=create,
            concurrency=args.concurrency,
            batch=batch,
            processes=args.processes,
            threads=args.threads,
            progress=_progress(args),
            admin_key=args.admin_key,
            name=args.name,
            lease=args.lease,
            epsilon_min=args.epsilon_min,
            epsilon_max=args.epsilon_max,
            retry=retry,
            round_deadline_s=args.round_deadline,
            quorum=args.quorum,
            behaviour=behaviour_from_args(args),
        )
    )
    _print_summary(run.to_dict(), args.json)
    return 0


def _run_swarm_cluster(
    args: argparse.Namespace,
    create: tuple[str, dict[str, Any]] | None,
    retry: RetryPolicy,
    batch: int | None,
) -> int:
    if create is None:
        raise ValueError("--cluster needs --create PROTOCOL (its parts share a new study)")
    if args.processes != 1 or args.lease:
        raise ValueError("--cluster runs leasing swarms on the workers: no --processes or --lease")
    run = run_swarm_cluster(
        args.server,
        args.cluster,
        population=population_spec_from_args(args),
        seed=args.seed,
        create=create,
        name=args.name,
        parts=args.parts,
        progress=_progress(args),
        admin_key=args.admin_key,
        concurrency=args.concurrency,
        batch=batch,
        threads=args.threads,
        epsilon_min=args.epsilon_min,
        epsilon_max=args.epsilon_max,
        retry=retry,
        round_deadline_s=args.round_deadline,
        quorum=args.quorum,
        behaviour=behaviour_from_args(args),
    )
    _print_summary(run.to_dict(), args.json)
    return 0


async def _resolve(server: str, given: str, retry: RetryPolicy) -> str:
    async with ApiClient(server, retry=retry) as api:
        return await resolve_study_id(api, given)


def _print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary))
    else:
        sys.stdout.write(render_table(summary))


def add_swarm_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "swarm",
        help="run a simulated population against a server",
        description="Enroll a simulated population into a study on a fedldp server, let every "
        "user privatize and report over HTTP, and print the result next to the ground truth.",
        epilog="examples:\n"
        "  fedldp swarm --server http://127.0.0.1:8000 --create user-mean --users 20000 \\\n"
        "      --samples 256 --distribution two-point --mean 0.3 --seed 7 --batch\n"
        "  fedldp swarm --create hetero-mean-rr --users 4000 --distribution two-point \\\n"
        "      --mean 0.2 --epsilon-mix 0.1:0.5,1:0.5 --seed 3 --concurrency 200 --json\n"
        "  fedldp swarm --study 6f1c... --users 5000 --samples 64 --seed 1 --processes 2 --batch\n"
        "  fedldp swarm --create user-mean --users 2000 --samples 16 --seed 1 --batch 500 \\\n"
        "      --dropout 0.2 --late 0.05:5 --round-deadline 2 --quorum 0.5\n"
        "  fedldp swarm --create user-mean --users 1000000 --samples 16 --seed 1 --batch \\\n"
        "      --cluster tcp://127.0.0.1:8786",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_server_option(parser)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--study", metavar="ID", help="join this (empty, enrolling) study: an id or unique prefix"
    )
    target.add_argument("--create", metavar="PROTOCOL", help="create a study of this protocol")
    _add_param_options(parser)
    parser.add_argument("--name", help="study name (with --create); unique on the server")
    parser.add_argument(
        "--lease",
        action="store_true",
        help="share the study NAME with other swarms: the first creates it, the others join; "
        "each leases disjoint blocks of participant ids and runs those users (for "
        "docker compose --scale swarm=K; every swarm gets the same seed, population and "
        "behaviour options)",
    )
    parser.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="spread the population over the workers of the Dask scheduler at ADDRESS (e.g. "
        "tcp://scheduler:8786): each worker runs a leasing swarm of the same new study (needs "
        "--create; pip install 'fedldp[cluster]')",
    )
    parser.add_argument(
        "--parts",
        type=int,
        metavar="K",
        help="with --cluster: leasing swarms to run (default: one per worker)",
    )
    for bound, default in (("min", EPSILON_MIN), ("max", EPSILON_MAX)):
        parser.add_argument(
            f"--epsilon-{bound}",
            type=float,
            metavar="E",
            help=f"with --create: the study's {bound}imum ε; the server refuses users outside "
            f"the range at enrollment (default {default:g}; set a minimum for central-* studies, "
            "whose release uses the smallest ε)",
        )
    parser.add_argument(
        "--seed",
        type=int,
        required=True,
        metavar="S",
        help="run seed: the study seed is derived from it, the data and noise seed stays local",
    )
    parser.add_argument(
        "--admin-key",
        default=os.environ.get("FEDLDP_ADMIN_KEY"),
        metavar="KEY",
        help="X-Admin-Key for creating and starting studies (default $FEDLDP_ADMIN_KEY)",
    )
    _add_swarm_options(parser, per_user=True)
    add_population_arguments(parser)
    add_behaviour_arguments(parser)
    parser.set_defaults(handler=remote(_run_swarm))


# --------------------------------------------------------------------------- fedldp run


def _run_population(args: argparse.Namespace) -> AnyPopulation:
    given = {k for k, v in vars(args).items() if v is not None}
    if not given & {"population", "csv"}:
        if "users" not in given:
            args.users = RUN_DEFAULTS["users"]
        if not given & {"samples", "imbalance", "total_samples"}:
            args.samples = RUN_DEFAULTS["samples"]
        if "distribution" not in given:
            args.distribution = RUN_DEFAULTS["distribution"]
            if "mean" not in given:
                args.mean = RUN_DEFAULTS["mean"]
    return build_population(population_spec_from_args(args), args.seed)


def _run_run(args: argparse.Namespace) -> int:
    population = _run_population(args)
    batch = _batch(args, population.n)
    protocol = get_protocol(args.protocol)
    params = fill_from_population(protocol, parse_params(args), population)
    parsed = protocol.parse_params(params)
    workdir = Path(tempfile.mkdtemp(prefix="fedldp-run-"))
    database = workdir / "fedldp.db"
    server = ServerProcess(
        port=free_port(), database_url=sqlite_url(database), log=workdir / "server.log"
    )
    try:
        with server:
            server.wait_healthy()
            run = asyncio.run(
                run_swarm(
                    server.url,
                    population=population,
                    create=(protocol.name, params),
                    concurrency=args.concurrency,
                    batch=batch,
                    processes=args.processes,
                    threads=args.threads,
                    progress=_progress(args),
                )
            )
    finally:
        if args.keep_db:
            sys.stderr.write(f"database and server log kept in {workdir}\n")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    local = simulate(protocol, parsed, population, args.seed)
    summary = run.to_dict()
    summary["simulation"] = simulation_comparison(run, local.result.estimate, local.elapsed_s)
    if args.keep_db:
        summary["database"] = str(database)
    _print_summary(summary, args.json)
    if not args.json:
        sim = summary["simulation"]
        print(
            f"over HTTP: {run.elapsed_s:.3g} s; in process (same seed): estimate "
            f"{sim['estimate']} in {sim['elapsed_s']:.3g} s; relative difference "
            f"{sim['relative_difference']:.2g} ({'agree' if sim['agrees'] else 'DIFFER'})"
        )
    return 0


def simulation_comparison(
    run: SwarmResult, estimate: float | list[float], elapsed_s: float
) -> dict[str, Any]:
    """The in-process estimate beside the HTTP one: they agree to 1e-9 relative
    (docs/architecture.md, "The three parts")."""
    import numpy as np

    remote_estimate = np.asarray(run.result.estimate, dtype=np.float64)
    local = np.asarray(estimate, dtype=np.float64)
    scale = max(float(np.max(np.abs(local))), 1e-300)
    diff = float(np.max(np.abs(remote_estimate - local))) / scale
    return {
        "estimate": local.tolist(),
        "elapsed_s": elapsed_s,
        "relative_difference": diff,
        "agrees": diff <= 1e-9,
    }


def add_run_parser(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="server + swarm + result in one go (start here)",
        description="Start a server on a temporary SQLite database, run a simulated population "
        "against it over HTTP (batch mode), print the result next to the ground truth and next "
        "to the in-process simulation of the same seed, and stop the server. Defaults: "
        "user-mean, 20000 users with 256 two-point samples of mean 0.3, ε = 1.",
        epilog="examples:\n  fedldp run\n  fedldp run --users 2000 --samples 64 --json\n"
        "  fedldp run --protocol hetero-mean-rr --epsilon-mix 0.1:0.5,1:0.5 --seed 3",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--protocol", default="user-mean", help="protocol (default user-mean)")
    _add_param_options(parser)
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="run seed (default 0)")
    parser.add_argument(
        "--keep-db", action="store_true", help="keep the temporary database and server log"
    )
    _add_swarm_options(parser, per_user=False)
    add_population_arguments(parser)
    parser.set_defaults(handler=remote(_run_run))


REMOTE_COMMANDS: list[Callable[[Subparsers], None]] = [
    add_server_parser,
    add_swarm_parser,
    add_studies_parser,
    add_run_parser,
]
