"""Benchmark: faults survived. A per-user and a batch-mode swarm run studies at once against real
server processes (``python -m fedldp.server``), and mid-round one fault is injected:

* ``postgres-restart``: a PostgreSQL cluster made for the run (``pg_createcluster``, as root;
  dropped afterwards) is stopped and started again (``pg_ctlcluster --skip-systemctl-redirect
  VERSION NAME stop``/``start``) under a server on it: the shared local cluster, which other
  tests and programs use, is never stopped;
* ``disk-full``: the SQLite database sits on a small tmpfs mounted for the run (as root); its WAL
  is emptied (a truncating checkpoint, so that the next write must grow it), and a file fills
  that disk to the last byte, then is deleted;
* ``migration-kill``: a PostgreSQL schema made by the first revision (``0001_initial``) is
  upgraded by a starting server, which is SIGKILLed in the middle of the upgrade (a table lock
  held by this script stops it at revision ``0003_round_counts``, after ``0002`` altered
  ``studies`` in the same transaction), then started again; the swarms are already running and
  waiting for a server to answer;
* ``replica-kill``: two replicas on one PostgreSQL schema behind nginx (``deploy/nginx.conf``,
  on loopback ports), one of them SIGKILLed and started again;
* ``none``: the baseline, no fault (SQLite; the swarms paused and resumed at once).

The swarms pause (in their transport) once a third of round 0's reports are stored; the fault
begins, the swarms go on into it, the fault ends after ``--fault-s`` seconds (the migration kill
ends when the restarted server answers; the killed replica's, when it answers again). The swarms
retry as ``fedldp swarm --timeout 60`` does (503 with ``Retry-After``, refused connections, and
for their idempotent requests lost answers and a balancer's 502/504). Each swarm must end with
the in-process simulator's estimate for the same seed (1e-9 relative, as the e2e tests), every
round closed with its whole cohort, and the database holding exactly one report per (round,
cohort member): no lost receipt, no double count. A swarm that stops instead must say why (a
code of the client's error tree: a clear failure); anything else is a wrong outcome, and exits 1.

Prints per scenario and swarm mode: the fault's duration, the 503 (and 502) answers, refused or
broken connections, retries, the time from the fault's end to the first report stored after it
and to the swarm's end, the swarm's whole run, and the outcome.
Scenarios that cannot run here (not root, no PostgreSQL, no nginx) are skipped with the reason.

    python benchmarks/bench_faults.py [--scenario NAME [--scenario NAME ...]] [--size ci|bench]
                                      [--fault-s S] [--seed S] [--json PATH] [--keep DIR]

``tests/e2e/test_faults.py`` runs the four faults at ``--size ci``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
from alembic import command
from sqlalchemy import create_engine

from fedldp.client.api.errors import ApiError, SwarmError
from fedldp.client.api.retry import RetryPolicy
from fedldp.client.population.build import AnyPopulation, PopulationSpec, build_population
from fedldp.client.simulate import SimulationResult, fill_from_population, simulate
from fedldp.client.swarm.run import SwarmResult, run_swarm
from fedldp.client.swarm.server_process import ServerProcess, free_port, sqlite_url
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import RoundsView, StudyView
from fedldp.server.store import blocks
from fedldp.server.store.schema import alembic_config, head

RELATIVE = 1e-9
"""HTTP and in-process estimates agree to this (the e2e tests' tolerance): summation order only."""

POSTGRES_URL = os.environ.get(
    "FEDLDP_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
ROOT = Path(__file__).resolve().parent.parent
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
PROTOCOL = "user-mean"
SWARM_TIMEOUT_S = 60.0
"""The swarms' retry deadline per request (``fedldp swarm --timeout 60``)."""
OLD_REVISION = "0001_initial"
"""``migration-kill``'s database starts here; the upgrade is stopped at ``0003_round_counts``
(which alters ``rounds``), after ``0002_study_epsilon_range`` altered ``studies``."""


@dataclass(frozen=True)
class Size:
    per_user_users: int
    per_user_concurrency: int
    batch_users: int
    batch: int
    batch_concurrency: int
    samples: int
    disk_mib: int


SIZES = {
    "ci": Size(300, 8, 1200, 100, 4, 16, 64),
    "bench": Size(4000, 64, 40_000, 1000, 8, 64, 128),
}


class Skip(Exception):
    """The scenario cannot run here (the reason says why)."""


# --------------------------------------------------------------------------- the swarms


class FaultGate(httpx.AsyncBaseTransport):
    """A swarm's transport: real HTTP, counting the answers by status and the failed connections,
    and holding every request once ``pause_after`` report requests were stored (``paused``) until
    ``resume``: the fault is injected while the swarm is mid-round."""

    def __init__(self, pause_after: int | None) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.pause_after = pause_after
        self.stored = 0
        self.stored_at: list[float] = []  # when each report request was answered 2xx
        self.statuses: Counter[int] = Counter()
        self.failures: Counter[str] = Counter()
        self.study_id = ""
        self.paused = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resume: asyncio.Event | None = None

    def resume(self) -> None:
        """Let the held requests go (from another thread)."""
        if self._loop is not None and self._resume is not None:
            self._loop.call_soon_threadsafe(self._resume.set)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._resume is None:
            self._loop, self._resume = asyncio.get_running_loop(), asyncio.Event()
        if self.paused.is_set():
            await self._resume.wait()
        parts = request.url.path.split("/")
        if not self.study_id and len(parts) > 4 and parts[2] == "studies":
            self.study_id = parts[3]
        try:
            response = await self.inner.handle_async_request(request)
        except httpx.TransportError as exc:
            self.failures[type(exc).__name__] += 1
            raise
        self.statuses[response.status_code] += 1
        if 200 <= response.status_code < 300 and parts[-1] in ("reports", "batch"):
            self.stored += 1
            self.stored_at.append(time.monotonic())
            if self.stored == self.pause_after:
                self.paused.set()
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class RetryCount:
    """A ``RetryPolicy.notify`` that counts the retries (the swarm runs in this process)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self._lock:
            self.count += 1


@dataclass
class Swarm:
    """One swarm mode's study: what the simulator expects of it, and what the run did."""

    mode: str
    population: AnyPopulation
    params: dict[str, Any]
    local: SimulationResult
    batch: int | None
    concurrency: int
    gate: FaultGate
    retries: RetryCount = field(default_factory=RetryCount)
    run: SwarmResult | None = None
    error: BaseException | None = None
    began: float = 0.0
    ended: float = 0.0


def swarms(size: Size, seed: int, *, pause: bool) -> list[Swarm]:
    """The per-user and the batch swarm, each pausing (with ``pause``) when a third of round 0
    is stored: per user, a third of its cohort's reports; in batch mode, of its blocks."""
    out = []
    for mode, users, batch, concurrency in (
        ("per-user", size.per_user_users, None, size.per_user_concurrency),
        ("batch", size.batch_users, size.batch, size.batch_concurrency),
    ):
        population = build_population(
            PopulationSpec(users=users, samples=size.samples, distribution="two-point"), seed
        )
        protocol = get_protocol(PROTOCOL)
        params = fill_from_population(protocol, {}, population)
        local = simulate(protocol, protocol.parse_params(params), population, seed)
        cohort = int(local.plan.rounds[0].cohort.size)
        third = cohort // 3 if batch is None else math.ceil(users / batch) // 3
        gate = FaultGate(max(1, third) if pause else None)
        out.append(Swarm(mode, population, params, local, batch, concurrency, gate))
        seed += 1
    return out


class SwarmThread:
    """The swarms, run together on one event loop in a thread of their own."""

    def __init__(self, url: str, members: list[Swarm]) -> None:
        self.url = url
        self.members = members
        self.thread = threading.Thread(target=lambda: asyncio.run(self._all()), daemon=True)

    async def _all(self) -> None:
        await asyncio.gather(*(self._one(s) for s in self.members))

    async def _one(self, s: Swarm) -> None:
        s.began = time.monotonic()
        try:
            s.run = await run_swarm(
                self.url,
                population=s.population,
                create=(PROTOCOL, s.params),
                batch=s.batch,
                concurrency=s.concurrency,
                progress=False,
                retry=RetryPolicy(attempts=10**6, deadline_s=SWARM_TIMEOUT_S, notify=s.retries),
                transport=s.gate,
            )
        except Exception as exc:
            s.error = exc
        finally:
            s.ended = time.monotonic()
            s.gate.paused.set()  # a swarm that failed before pausing does not hold up the rest

    def start(self) -> SwarmThread:
        self.thread.start()
        return self

    def wait_paused(self, timeout: float = 120.0) -> None:
        """Until every swarm holds its requests; then each study must be mid-round 0."""
        deadline = time.monotonic() + timeout
        for s in self.members:
            if not s.gate.paused.wait(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"the {s.mode} swarm never stored a third of round 0")
            if s.error is not None:
                raise RuntimeError(f"the {s.mode} swarm failed before the fault: {s.error}")
            view = get(self.url, f"/v1/studies/{s.gate.study_id}", StudyView)
            received, expected = view.rounds[0].received, view.rounds[0].expected
            if not (view.phase == "running" and 0 < received < expected):
                raise RuntimeError(
                    f"the {s.mode} study is not mid-round 0: {view.phase}, {received}"
                )

    def resume(self) -> None:
        for s in self.members:
            s.gate.resume()

    def join(self, timeout: float = 300.0) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise RuntimeError(f"the swarms did not finish in {timeout:g} s")


def get(url: str, path: str, model: Any) -> Any:
    with httpx.Client(base_url=url, timeout=30.0) as http:
        response = http.get(path)
        response.raise_for_status()
        return model.model_validate_json(response.content)


# --------------------------------------------------------------------------- outcomes

Query = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]
"""SQL with ``%s`` placeholders on the scenario's database."""


@dataclass
class Row:
    scenario: str
    mode: str
    fault_s: float
    got_503: int
    got_502: int
    broken: int
    """Requests whose connection was refused or lost (to the server or the balancer)."""
    retries: int
    resumed_s: float | None
    """From the fault's end to the first report stored after it (None: none was left)."""
    after_fault_s: float
    """From the fault's end to the swarm's end (negative: it ended during the fault)."""
    swarm_s: float
    """The swarm's whole run."""
    outcome: str
    """``estimate equal``, ``clear failure: CODE: …``, or ``WRONG: …``."""


def outcome(s: Swarm, url: str, query: Query) -> str:
    if s.error is not None:
        if isinstance(s.error, ApiError | SwarmError):
            return f"clear failure: {s.error}"
        return f"WRONG: unexplained {type(s.error).__name__}: {s.error}"
    assert s.run is not None
    want = s.local.result.estimate
    got = s.run.result.estimate
    if s.run.result.phase != "finished" or got is None:
        return f"WRONG: the study is {s.run.result.phase} without an estimate"
    scale = max(float(np.max(np.abs(np.asarray(want)))), 1e-300)
    if float(np.max(np.abs(np.asarray(got) - np.asarray(want)))) > RELATIVE * scale:
        return f"WRONG: estimate {got} where the simulator has {want}"
    cohorts = [int(rp.cohort.size) for rp in s.local.plan.rounds]
    rounds = get(url, f"/v1/studies/{s.run.study_id}/rounds", RoundsView).rounds
    seen = [(r.status, r.expected, r.received) for r in rounds]
    if seen != [("closed", n, n) for n in cohorts]:
        return f"WRONG: rounds (status, expected, received) {seen}, cohorts {cohorts}"
    stored_blocks = query(
        "SELECT round, low, high, size, ids FROM report_blocks WHERE study_id = %s",
        (s.run.study_id,),
    )
    by_round: dict[int, list[int]] = {}
    for k, *block in stored_blocks:
        by_round.setdefault(int(k), []).extend(blocks.block_ids(*block).tolist())
    stored = [(k, len(ids), len(set(ids))) for k, ids in sorted(by_round.items())]
    if [tuple(r) for r in stored] != [(k, n, n) for k, n in enumerate(cohorts)]:
        return f"WRONG: stored reports (round, rows, participants) {stored}, cohorts {cohorts}"
    return "estimate equal"


def resumed(stored_at: list[float], ended: float) -> float | None:
    after = [t - ended for t in stored_at if t >= ended]
    return round(min(after), 2) if after else None


def rows(
    scenario: str, members: list[Swarm], fault: tuple[float, float], url: str, query: Query
) -> list[Row]:
    began, ended = fault
    return [
        Row(
            scenario,
            s.mode,
            round(ended - began, 2),
            s.gate.statuses[503],
            s.gate.statuses[502],
            sum(s.gate.failures.values()),
            s.retries.count,
            resumed(s.gate.stored_at, ended),
            round(s.ended - ended, 2),
            round(s.ended - s.began, 1),
            outcome(s, url, query),
        )
        for s in members
    ]


# --------------------------------------------------------------------------- the databases


def with_options(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


def plain(url: str) -> str:
    return url.replace("+psycopg", "")


def postgres_unavailable() -> str | None:
    try:
        with psycopg.connect(plain(POSTGRES_URL), connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL at {POSTGRES_URL} is unreachable: {exc}".strip()


@contextlib.contextmanager
def postgres_schema() -> Iterator[str]:
    """A schema of this run's, dropped afterwards (PostgreSQL running again by then)."""
    reason = postgres_unavailable()
    if reason is not None:
        raise Skip(reason)
    schema = f"fedldp_faults_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(plain(POSTGRES_URL), autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with psycopg.connect(plain(POSTGRES_URL), autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def on_postgres(schema: str, url: str = POSTGRES_URL) -> Query:
    def query(sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with psycopg.connect(with_options(plain(url), schema)) as connection:
            return connection.execute(sql, args).fetchall()

    return query


def on_sqlite(database: Path) -> Query:
    def query(sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(database)) as db:
            return db.execute(sql.replace("%s", "?"), args).fetchall()

    return query


@dataclass(frozen=True)
class Cluster:
    """A PostgreSQL cluster of this run's (Debian's ``pg_createcluster``, trust authentication on
    a free loopback port): stopping it disturbs no one's sessions on the shared local cluster."""

    version: str
    name: str
    port: int

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def ctl(self, action: str) -> None:
        """``pg_ctlcluster … ACTION`` (stop: ``fast``, its default, ends every session)."""
        command = ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action]
        began = time.monotonic()
        subprocess.run(command, check=True, capture_output=True, timeout=120)
        print(f"pg_ctlcluster {action}: {time.monotonic() - began:.1f} s", file=sys.stderr)


@contextlib.contextmanager
def own_cluster() -> Iterator[Cluster]:
    """A running cluster of this run's, dropped (stopped first) on exit whatever happened."""
    if os.geteuid() != 0:
        raise Skip("a PostgreSQL cluster of the bench's own needs root (pg_createcluster)")
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not versions or shutil.which("pg_createcluster") is None:
        raise Skip("no PostgreSQL server here (Debian's pg_createcluster, /etc/postgresql)")
    cluster = Cluster(versions[-1], f"fedldpfaults{os.getpid()}", free_port())
    create = ["pg_createcluster", cluster.version, cluster.name, "-p", str(cluster.port)]
    # initdb's options: trust (loopback only), and no fsync of a throwaway cluster's files
    subprocess.run([*create, "--", "--auth=trust", "--no-sync"], check=True, capture_output=True)
    try:
        cluster.ctl("start")
        yield cluster
    finally:
        drop = ["pg_dropcluster", "--stop", cluster.version, cluster.name]
        subprocess.run(drop, check=False, capture_output=True)


# --------------------------------------------------------------------------- servers


@contextlib.contextmanager
def server(url: str, log: Path, port: int | None = None) -> Iterator[ServerProcess]:
    process = ServerProcess(
        port=port, database_url=url, log=log, env={"FEDLDP_LOG_LEVEL": "info"}
    ).start()
    try:
        process.wait_healthy()
        yield process
    finally:
        process.stop()


@contextlib.contextmanager
def nginx(ports: list[int], folder: Path) -> Iterator[str]:
    """nginx of ``deploy/nginx.conf`` on a loopback port, in front of the servers at ``ports``;
    its URL."""
    binary = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )
    if binary is None:
        raise Skip("nginx is not installed (apt-get install nginx; scripts/bootstrap does as root)")
    port = free_port()
    lines = []
    for line in NGINX_CONF.read_text().splitlines():
        if line.strip().startswith("server server-"):
            continue
        line = line.replace("pid /run/nginx.pid;", f"pid {folder}/nginx.pid;")
        line = line.replace("error_log /dev/stderr", f"error_log {folder}/error.log")
        line = line.replace("access_log /dev/stdout", f"access_log {folder}/access.log")
        line = line.replace("worker_processes auto;", "worker_processes 1;")
        line = line.replace("listen 80;", f"listen 127.0.0.1:{port};")
        lines.append(line)
        if line.strip() == "upstream fedldp {":
            lines += [f"        server 127.0.0.1:{p};" for p in ports]
    conf = folder / "nginx.conf"
    conf.write_text("\n".join(lines) + "\n")
    directives = "daemon off;" + (" user root;" if os.geteuid() == 0 else "")
    command = [binary, "-p", str(folder), "-e", str(folder / "error.log"), "-c", str(conf)]
    process = subprocess.Popen([*command, "-g", directives], stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if process.poll() is not None:
                _, err = process.communicate()
                raise RuntimeError(f"nginx exited: {err.decode(errors='replace').strip()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("nginx did not answer in 20 s")
            time.sleep(0.1)
        yield url
    finally:
        process.send_signal(signal.SIGQUIT)  # graceful: finish the requests in flight
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --------------------------------------------------------------------------- the scenarios


@dataclass(frozen=True)
class Run:
    size: Size
    fault_s: float
    seed: int
    folder: Path


def postgres_restart(run: Run) -> list[Row]:
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(own_cluster())
        process = stack.enter_context(server(cluster.url, run.folder / "server.log"))
        members = swarms(run.size, run.seed, pause=True)
        thread = SwarmThread(process.url, members).start()
        thread.wait_paused()
        began = time.monotonic()
        cluster.ctl("stop")
        thread.resume()
        time.sleep(run.fault_s)
        cluster.ctl("start")
        ended = time.monotonic()
        thread.join()
        query = on_postgres("public", cluster.url)
        return rows("postgres-restart", members, (began, ended), process.url, query)


def fill(path: Path) -> int:
    """Write zeros to ``path`` until its file system is full; the bytes written."""
    written = 0
    with path.open("wb", buffering=0) as f:
        for chunk in (2**20, 4096, 1):
            block = bytes(chunk)
            while True:
                try:
                    written += f.write(block) or 0
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written


def empty_wal(database: Path, timeout: float = 30.0) -> None:
    """Copy SQLite's WAL into the database and truncate it to zero bytes, so that the next write
    must grow it: on a full disk, a write that fits in WAL frames already copied would succeed."""
    deadline = time.monotonic() + timeout
    with contextlib.closing(sqlite3.connect(database, timeout=timeout)) as db:
        while db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:  # a reader in the WAL
            if time.monotonic() > deadline:
                raise RuntimeError(f"the WAL of {database} stayed busy for {timeout:g} s")
            time.sleep(0.05)


def disk_full(run: Run) -> list[Row]:
    if os.geteuid() != 0:
        raise Skip("mounting a small tmpfs for the full disk needs root")
    disk = run.folder / "disk"
    disk.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={run.size.disk_mib}m", "tmpfs", str(disk)],
        check=True,
        capture_output=True,
    )
    with contextlib.ExitStack() as stack:
        stack.callback(subprocess.run, ["umount", "--lazy", str(disk)], check=False)
        database = disk / "fedldp.db"
        process = stack.enter_context(server(sqlite_url(database), run.folder / "server.log"))
        members = swarms(run.size, run.seed, pause=True)
        thread = SwarmThread(process.url, members).start()
        thread.wait_paused()
        filler = disk / "filler"
        stack.callback(filler.unlink, missing_ok=True)
        empty_wal(database)
        began = time.monotonic()
        fill(filler)
        thread.resume()
        time.sleep(run.fault_s)
        filler.unlink()
        ended = time.monotonic()
        thread.join()
        return rows("disk-full", members, (began, ended), process.url, on_sqlite(database))


def migration_kill(run: Run) -> list[Row]:
    with contextlib.ExitStack() as stack:
        schema = stack.enter_context(postgres_schema())
        url = with_options(POSTGRES_URL, schema)
        engine = create_engine(url)
        stack.callback(engine.dispose)
        with engine.begin() as connection:
            command.upgrade(alembic_config(connection), OLD_REVISION)
        query = on_postgres(schema)
        # holding rounds stops the upgrade at 0003, inside its transaction
        lock = stack.enter_context(psycopg.connect(with_options(plain(POSTGRES_URL), schema)))
        lock.execute("LOCK TABLE rounds IN ACCESS SHARE MODE")
        port = free_port()
        first = ServerProcess(
            port=port, database_url=url, log=run.folder / "server.log", env={}
        ).start()
        stack.callback(first.stop)
        members = swarms(run.size, run.seed, pause=False)
        thread = SwarmThread(first.url, members).start()  # refused until a server listens
        backend = wait_for_blocked_upgrade(schema, first)
        began = time.monotonic()
        first.kill()
        lock.rollback()
        deadline = time.monotonic() + 30
        while query("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend,)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the killed server's backend {backend} lingers")
            time.sleep(0.05)
        version = query("SELECT version_num FROM alembic_version", ())
        columns = query(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'studies' AND column_name = 'epsilon_min'",
            (schema,),
        )
        if version != [(OLD_REVISION,)] or columns:
            raise RuntimeError(f"the killed upgrade left {version}, {columns}: half done")
        second = stack.enter_context(server(url, run.folder / "server.log", port=port))
        ended = time.monotonic()
        thread.join()
        if query("SELECT version_num FROM alembic_version", ()) != [(head(),)]:
            raise RuntimeError("the restarted server did not bring the schema to the head")
        return rows("migration-kill", members, (began, ended), second.url, query)


def wait_for_blocked_upgrade(schema: str, process: ServerProcess, timeout: float = 60.0) -> int:
    """The pid of the server's backend once its upgrade waits for ``rounds`` having altered
    ``studies`` (``0002``) in the same transaction: the upgrade is mid-way."""
    query = on_postgres(schema)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.process is not None and process.process.poll() is not None:
            raise RuntimeError(f"the upgrading server exited: {process.log_tail()}")
        found = query(
            "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
            "WHERE a.wait_event_type = 'Lock' AND a.query ILIKE 'ALTER TABLE rounds%%' "
            "AND l.granted AND l.mode = 'AccessExclusiveLock' "
            "AND l.relation = %s::regclass",
            (f"{schema}.studies",),
        )
        if found:
            return int(found[0][0])
        time.sleep(0.05)
    raise RuntimeError("the server's upgrade never reached revision 0003")


def replica_kill(run: Run) -> list[Row]:
    with contextlib.ExitStack() as stack:
        schema = stack.enter_context(postgres_schema())
        url = with_options(POSTGRES_URL, schema)
        replicas = [
            ServerProcess(database_url=url, log=run.folder / f"replica-{i}.log", env={}).start()
            for i in range(2)
        ]
        for replica in replicas:
            stack.callback(replica.stop)
        for replica in replicas:
            replica.wait_healthy()
        balancer = stack.enter_context(nginx([r.port for r in replicas], run.folder))
        members = swarms(run.size, run.seed, pause=True)
        thread = SwarmThread(balancer, members).start()
        thread.wait_paused()
        began = time.monotonic()
        replicas[1].kill()
        thread.resume()
        time.sleep(run.fault_s)
        stack.enter_context(server(url, run.folder / "replica-1.log", port=replicas[1].port))
        ended = time.monotonic()
        thread.join()
        return rows("replica-kill", members, (began, ended), balancer, on_postgres(schema))


def no_fault(run: Run) -> list[Row]:
    """The baseline: the same swarms on SQLite, paused mid-round and resumed at once."""
    with server(sqlite_url(run.folder / "fedldp.db"), run.folder / "server.log") as process:
        members = swarms(run.size, run.seed, pause=True)
        thread = SwarmThread(process.url, members).start()
        thread.wait_paused()
        began = time.monotonic()
        thread.resume()
        thread.join()
        query = on_sqlite(run.folder / "fedldp.db")
        return rows("none", members, (began, began), process.url, query)


SCENARIOS: dict[str, Callable[[Run], list[Row]]] = {
    "none": no_fault,
    "postgres-restart": postgres_restart,
    "disk-full": disk_full,
    "migration-kill": migration_kill,
    "replica-kill": replica_kill,
}


# --------------------------------------------------------------------------- main


def table(results: list[Row], skipped: dict[str, str]) -> str:
    lines = [
        "| scenario | swarm | fault | 503s | 502s | broken conn. | retries | first report after "
        "| end after | swarm's run | outcome |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.scenario} | {r.mode} | {r.fault_s:.1f} s | {r.got_503} | {r.got_502} | "
            f"{r.broken} | {r.retries} | {_seconds(r.resumed_s)} | {r.after_fault_s:.1f} s | "
            f"{r.swarm_s:.1f} s | {r.outcome} |"
        )
    lines += [f"| {name} |{' |' * 9} skipped: {why} |" for name, why in skipped.items()]
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--size", choices=sorted(SIZES), default="bench")
    parser.add_argument("--fault-s", type=float, default=3.0, help="how long a fault lasts")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--json", type=Path, help="also write the rows (and skips) here")
    parser.add_argument("--keep", type=Path, help="keep the logs and databases in this folder")
    args = parser.parse_args(argv)
    results: list[Row] = []
    skipped: dict[str, str] = {}
    for name in args.scenario or list(SCENARIOS):
        with contextlib.ExitStack() as stack:
            if args.keep is None:
                folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fedldp-")))
            else:
                folder = args.keep / name
                folder.mkdir(parents=True)
            began = time.monotonic()
            try:
                results += SCENARIOS[name](Run(SIZES[args.size], args.fault_s, args.seed, folder))
            except Skip as exc:
                skipped[name] = str(exc)
            print(f"{name}: {time.monotonic() - began:.1f} s in all", file=sys.stderr)
    print(table(results, skipped))
    if args.json is not None:
        args.json.write_text(
            json.dumps({"rows": [asdict(r) for r in results], "skipped": skipped}, indent=1)
        )
    return 1 if any(r.outcome.startswith("WRONG") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
