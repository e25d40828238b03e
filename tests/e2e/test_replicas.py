"""The ledger under replicas: two real server processes (uvicorn, ``python -m fedldp.server``) on
one PostgreSQL database, and every report of every round sent to both at once, alone and in
overlapping batches (docs/architecture.md, "Scale": round transitions exactly once, in the
database). The same with each replica running two worker processes (``--workers 2``), and with one
two-worker server on SQLite (WAL: its workers take turns as writers in SQLite's busy handler) asked
twice over.

Afterwards: no participant is charged more than its ε (its ledger, read from either replica), no
round closed twice (each replica logs the transitions it makes: across both logs, each round and
the study's end appear once), and no report is stored twice (the reports table, read directly).
The PostgreSQL cases are skipped, saying so, without the local PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from fedldp.client.api.client import ApiClient
from fedldp.client.population.build import PopulationSpec
from fedldp.client.seeds import derive_seeds
from fedldp.client.swarm.enrolling import enroll, start
from fedldp.client.swarm.progress import SwarmProgress
from fedldp.client.swarm.server_process import ServerProcess, sqlite_url
from fedldp.client.swarm.user import Privatizer, UserBlock
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import StudyCreate, TaskBatchRequest
from tests.e2e.test_e2e import (
    Case,
    assert_same_estimate,
    check_rounds,
    expected,
    flood,
    stored_ids,
)
from tests.server.conftest import SERVER_URL, postgres_unreachable

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPLICAS = 2
CASE = Case(
    "user-mean",
    PopulationSpec(users=300, samples=16, distribution="two-point", epsilon_mix="0.5:0.5,2:0.5"),
    53,
)


@dataclass
class Deployment:
    urls: list[str]  # where the clients send (REPLICAS of them; the same one twice for one server)
    logs: list[Path]
    query: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]  # SQL with %s, on its database


@pytest.fixture(
    params=[
        pytest.param(("postgres", 1), marks=pytest.mark.postgres, id="postgres"),
        pytest.param(("postgres", 2), marks=pytest.mark.postgres, id="postgres-2-workers"),
        pytest.param(("sqlite", 2), id="sqlite-2-workers"),
    ]
)
def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    """Two servers on a PostgreSQL schema of their own (dropped afterwards), or one server on an
    SQLite file, each with the parametrized number of workers, logging at info level (every round
    transition), healthy."""
    backend, workers = request.param
    env = {"FEDLDP_LOG_LEVEL": "info", "FEDLDP_WORKERS": str(workers)}
    if backend == "sqlite":
        database = tmp_path / "fedldp.db"
        server = ServerProcess(database_url=sqlite_url(database), log=tmp_path / "s.log", env=env)

        def on_sqlite(sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            with contextlib.closing(sqlite3.connect(database)) as db:
                return db.execute(sql.replace("%s", "?"), args).fetchall()

        try:
            server.start().wait_healthy()
            assert server.log is not None
            yield Deployment([server.url] * REPLICAS, [server.log], on_sqlite)
        finally:
            server.stop()
        return
    reason = postgres_unreachable()
    if reason is not None:
        pytest.skip(reason)
    schema = f"fedldp_replicas_{uuid.uuid4().hex[:12]}"
    plain = SERVER_URL.replace("+psycopg", "")
    with psycopg.connect(plain, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    options = f"options=-csearch_path%3D{schema}"
    url = f"{SERVER_URL}{'&' if '?' in SERVER_URL else '?'}{options}"
    servers = [
        ServerProcess(database_url=url, log=tmp_path / f"replica-{i}.log", env=env)
        for i in range(REPLICAS)
    ]
    pg_url = f"{plain}{'&' if '?' in plain else '?'}{options}"

    def on_postgres(sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with psycopg.connect(pg_url) as connection:
            return connection.execute(sql, args).fetchall()

    try:
        for server in servers:  # together: the schema is created under an advisory lock
            server.start()
        for server in servers:
            server.wait_healthy()
        logs = [s.log for s in servers if s.log is not None]
        yield Deployment([s.url for s in servers], logs, on_postgres)
    finally:
        for server in servers:
            server.stop()
        with psycopg.connect(plain, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def test_reports_to_two_replicas_charge_no_one_twice_and_close_each_round_once(
    replicas: Deployment,
) -> None:
    want = expected(CASE)
    protocol = get_protocol(CASE.protocol)
    rng = random.Random(CASE.seed)
    async with contextlib.AsyncExitStack() as stack:
        apis = [await stack.enter_async_context(ApiClient(url)) for url in replicas.urls]
        study = await apis[0].create_study(
            StudyCreate(protocol=CASE.protocol, params=want.params, seed=derive_seeds(CASE.seed)[0])
        )
        with SwarmProgress(False) as bars:
            roster = await enroll(apis[1], study, want.population, bars)
        await start(apis[0], study.id)
        privatizer = Privatizer(
            protocol,
            protocol.parse_params(study.params),
            want.population,
            want.population.population_seed,
        )
        users = UserBlock(roster.slots, roster.epsilon, privatizer)
        everyone = TaskBatchRequest(participant_ids=roster.ids.tolist(), tokens=roster.tokens)
        last = len(want.local.plan.rounds) - 1
        for k, rp in enumerate(want.local.plan.rounds):
            # held: the other replica (or worker) closed round k - 1, and this one's snapshot
            # of the study may lag it by up to 0.25 s (docs/clients.md)
            batch = await apis[k % REPLICAS].tasks(study.id, everyone, hold=5.0)
            tasks = batch.reports[0]
            assert tasks.round == k
            pids = tasks.participant_ids
            rows = users.respond(
                tasks.task(0),
                np.asarray(pids, dtype=np.int64),
                np.asarray(tasks.epsilons),
                np.asarray(tasks.groups, dtype=np.int64),
            )
            # every report to every replica at once (each flood also resends it in batches)
            tallies = await asyncio.gather(
                *(
                    flood(
                        api,
                        study.id,
                        k,
                        tasks.payload_kind,
                        pids,
                        roster.tokens,
                        rows,
                        rng,
                        last=k == last,
                    )
                    for api in apis
                )
            )
            assert sum(t.accepted for t in tallies) == rp.cohort.size  # each once, somewhere
            digests: dict[int, set[str]] = {}
            for tally in tallies:
                for pid, seen in tally.digests.items():
                    digests.setdefault(pid, set()).update(seen)
            assert all(len(d) == 1 for d in digests.values())  # the same receipt from both
        result = await apis[1].result(study.id)
        assert result.phase == "finished"
        assert_same_estimate(result.estimate, want.local.result.estimate)
        check_rounds(replicas.urls[0], study.id, want.local)

        # the ledger, each participant asked of one replica or the other
        ledgers = await asyncio.gather(
            *(
                apis[pid % REPLICAS].budget(study.id, pid, token)
                for pid, token in zip(roster.participant_ids, roster.tokens, strict=True)
            )
        )
    declared = want.population.epsilon
    for ledger in ledgers:
        assert ledger.declared_epsilon == declared[ledger.participant_id]
        assert ledger.spent <= ledger.declared_epsilon * (1 + 1e-12)
        assert all(c.reported for c in ledger.planned)  # every planned charge was reported once
        assert len({c.round for c in ledger.planned}) == len(ledger.planned)

    # each round closed by exactly one replica, and the study finished once
    logs = "\n".join(log.read_text(errors="replace") for log in replicas.logs)
    closes = re.findall(rf"study {study.id}: round (\d+) \(.*?\) closed with (\d+) reports", logs)
    assert sorted((int(k), int(n)) for k, n in closes) == [
        (k, int(rp.cohort.size)) for k, rp in enumerate(want.local.plan.rounds)
    ]
    assert len(re.findall(rf"study {study.id} finished", logs)) == 1
    by_round = stored_ids(
        replicas.query(
            "SELECT round, low, high, size, ids FROM report_blocks WHERE study_id = %s",
            (study.id,),
        )
    )
    doubled = [k for k, ids in by_round.items() if len(set(ids)) != len(ids)]
    stored = [(k, len(ids)) for k, ids in by_round.items()]
    assert doubled == []
    assert stored == [(k, int(rp.cohort.size)) for k, rp in enumerate(want.local.plan.rounds)]
