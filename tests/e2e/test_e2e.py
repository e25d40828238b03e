"""End to end: a real uvicorn server (``python -m fedldp.server`` on an SQLite file) and a real
swarm.

What docs/architecture.md and issue #3 ask the deployment path to show:

* for the same seed, the estimate over HTTP equals the in-process simulator's to 1e-9 relative,
  per user and in batch mode, for the two-stage user-level mean and for a heterogeneous-ε
  protocol with mixed ε's;
* a server SIGKILLed in the middle of a round and restarted on the same database and port loses
  and doubles no report: the swarm's retries carry the study on to the simulator's result;
* many clients submitting at once (single reports and overlapping duplicate batches for the same
  participants) never double a report or a round transition.

The reports table is read directly (``sqlite3``): exactly one row per (round, cohort member), and
each round's ``received`` counter equals its row count.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fedldp.client.api.client import ApiClient, PhaseError, RetryPolicy
from fedldp.client.population.build import AnyPopulation, PopulationSpec, build_population
from fedldp.client.seeds import derive_seeds
from fedldp.client.simulate import SimulationResult, fill_from_population, simulate
from fedldp.client.swarm.enrolling import enroll, start
from fedldp.client.swarm.progress import SwarmProgress
from fedldp.client.swarm.run import SwarmResult, run_swarm_sync
from fedldp.client.swarm.server_process import ServerProcess, sqlite_url
from fedldp.client.swarm.user import Privatizer, UserBlock
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.base.records import FloatArray, PayloadKind, jsonable
from fedldp.protocol.core.wire import (
    BatchReceipt,
    ErrorBody,
    ReportBatch,
    ReportSubmit,
    RoundsView,
    StudyCreate,
    StudyView,
    TaskBatchRequest,
    payload_from_row,
)
from fedldp.server.store import blocks

pytestmark = pytest.mark.e2e

RELATIVE = 1e-9
"""HTTP and in-process estimates agree to this (docs/architecture.md): only summation order may
differ."""


# --------------------------------------------------------------------------- servers


@dataclass(frozen=True)
class Server:
    process: ServerProcess
    database: Path
    log: Path

    @property
    def url(self) -> str:
        return self.process.url


def start_server(database: Path, log: Path, port: int | None = None) -> ServerProcess:
    """``python -m fedldp.server`` on the SQLite file ``database``, healthy (its log at info level:
    it records every round transition)."""
    process = ServerProcess(
        port=port, database_url=sqlite_url(database), log=log, env={"FEDLDP_LOG_LEVEL": "info"}
    )
    process.start()
    try:
        process.wait_healthy()
    except BaseException:
        process.stop()
        raise
    return process


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("e2e")
    database, log = tmp / "fedldp.db", tmp / "server.log"
    process = start_server(database, log)
    try:
        yield Server(process, database, log)
    finally:
        process.stop()


def study_view(url: str, study_id: str) -> StudyView:
    with httpx.Client(base_url=url, timeout=30.0) as http:
        response = http.get(f"/v1/studies/{study_id}")
        response.raise_for_status()
        return StudyView.model_validate_json(response.content)


def rounds_view(url: str, study_id: str) -> RoundsView:
    with httpx.Client(base_url=url, timeout=30.0) as http:
        response = http.get(f"/v1/studies/{study_id}/rounds")
        response.raise_for_status()
        return RoundsView.model_validate_json(response.content)


# --------------------------------------------------------------------------- expectations


@dataclass(frozen=True)
class Case:
    protocol: str
    spec: PopulationSpec
    seed: int
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Expected:
    """A case's population, the study parameters, and what the simulator makes of it."""

    population: AnyPopulation
    params: dict[str, Any]
    local: SimulationResult


def expected(case: Case) -> Expected:
    population = build_population(case.spec, case.seed)
    protocol = get_protocol(case.protocol)
    params = fill_from_population(protocol, case.params, population)
    local = simulate(protocol, protocol.parse_params(params), population, case.seed)
    return Expected(population, params, local)


def assert_same_estimate(remote: float | list[float] | None, local: float | list[float]) -> None:
    assert remote is not None
    r = np.asarray(remote, dtype=np.float64)
    l_ = np.asarray(local, dtype=np.float64)
    assert r.shape == l_.shape
    scale = max(float(np.max(np.abs(l_))), 1e-300)
    assert float(np.max(np.abs(r - l_))) <= RELATIVE * scale, (remote, local)


def assert_same_json(remote: Any, local: Any, where: str = "output") -> None:
    """Equal JSON documents, floats to 1e-9 relative (sums may be taken in another order)."""
    if isinstance(local, dict):
        assert isinstance(remote, dict), where
        assert remote.keys() == local.keys(), where
        for key in local:
            assert_same_json(remote[key], local[key], f"{where}.{key}")
    elif isinstance(local, list):
        assert isinstance(remote, list), where
        assert len(remote) == len(local), where
        for i, (r, l_) in enumerate(zip(remote, local, strict=True)):
            assert_same_json(r, l_, f"{where}[{i}]")
    elif isinstance(local, float):
        assert remote == pytest.approx(local, rel=RELATIVE, abs=1e-12), where
    else:
        assert remote == local, where


def check_rounds(url: str, study_id: str, local: SimulationResult) -> None:
    """Every round closed once, with the simulator's outputs; each round opened when the one
    before it closed (one transaction)."""
    rounds = rounds_view(url, study_id).rounds
    assert [r.index for r in rounds] == list(range(len(local.plan.rounds)))
    for r, rp, out in zip(rounds, local.plan.rounds, local.outputs, strict=True):
        assert r.status == "closed"
        assert r.expected == r.received == rp.cohort.size
        assert r.opened_at is not None
        assert r.closed_at is not None
        assert r.opened_at <= r.closed_at
        assert_same_json(r.output, jsonable(out), f"round {r.index} output")
    for before, after in itertools.pairwise(rounds):
        assert after.opened_at == before.closed_at


def stored_ids(rows: list[tuple[Any, ...]]) -> dict[int, list[int]]:
    """Round → the participant ids of every stored report (ascending; an id twice if stored
    twice), from rows ``round, low, high, size, ids`` of report_blocks."""
    out: dict[int, list[int]] = {}
    for k, *block in rows:
        out.setdefault(int(k), []).extend(blocks.block_ids(*block).tolist())
    return {k: sorted(ids) for k, ids in sorted(out.items())}


def check_storage(database: Path, study_id: str, local: SimulationResult) -> None:
    """The report blocks hold exactly one report per (round, cohort member), none lost, doubled
    or foreign, and each round's ``received`` counter equals its count."""
    with contextlib.closing(sqlite3.connect(database)) as db:
        stored_by_round = stored_ids(
            db.execute(
                "SELECT round, low, high, size, ids FROM report_blocks WHERE study_id = ?",
                (study_id,),
            ).fetchall()
        )
        rounds = db.execute(
            'SELECT "index", status, expected, received, closed_at FROM rounds '
            'WHERE study_id = ? ORDER BY "index"',
            (study_id,),
        ).fetchall()
        assert len(rounds) == len(local.plan.rounds)
        for (k, status, expected, received, closed_at), rp in zip(
            rounds, local.plan.rounds, strict=True
        ):
            stored = stored_by_round.get(k, [])
            assert stored == rp.cohort.tolist(), f"round {k}"
            assert expected == received == len(stored), f"round {k}"
            assert status == "closed"
            assert closed_at is not None
        total = sum(map(len, stored_by_round.values()))
        assert total == sum(rp.cohort.size for rp in local.plan.rounds)


def check_run(run: SwarmResult, want: Expected, url: str, database: Path) -> None:
    assert run.result.phase == "finished"
    assert_same_estimate(run.result.estimate, want.local.result.estimate)
    check_rounds(url, run.study_id, want.local)
    check_storage(database, run.study_id, want.local)


# --------------------------------------------------------------------------- HTTP = in process

MIXED = ((0.5, 0.5), (2.0, 0.5))
"""Half the users declare ε = 0.5, half ε = 2."""

PARITY = [
    pytest.param(
        Case("user-mean", PopulationSpec(users=3000, samples=64, distribution="two-point"), 11),
        500,
        id="user-mean-batch",
    ),
    pytest.param(  # 16 samples: with more, 300 users are too few for stage one's bins
        Case("user-mean", PopulationSpec(users=300, samples=16, distribution="two-point"), 12),
        None,
        id="user-mean-per-user",
    ),
    pytest.param(
        Case(
            "hetero-mean-laplace",
            PopulationSpec(users=3000, samples=16, distribution="two-point", epsilon_mix=MIXED),
            13,
        ),
        500,
        id="hetero-laplace-batch",
    ),
    pytest.param(
        Case(
            "hetero-mean-laplace",
            PopulationSpec(users=300, samples=16, distribution="two-point", epsilon_mix=MIXED),
            14,
        ),
        None,
        id="hetero-laplace-per-user",
    ),
]


PARITY += [
    pytest.param(  # several gradient rounds: θ_t reaches clients through the broadcasts
        Case(
            "user-sgd",
            PopulationSpec(users=3000, samples=16, distribution="sparse-linear", epsilon=2.0),
            15,
            {"rounds": 4, "regularization": 0.4, "gradient_bound": 2.0},
        ),
        500,
        id="user-sgd-batch",
    ),
    pytest.param(
        Case(
            "user-classify",
            PopulationSpec(
                users=3000, samples=16, distribution="binned-classification", epsilon=1.0
            ),
            16,
        ),
        500,
        id="user-classify-batch",
    ),
    pytest.param(  # Kashin coefficients with mixed ε's, one report per request
        Case(
            "user-mean-l2",
            PopulationSpec(
                users=400,
                samples=4,
                distribution="uniform",
                dimension=3,
                ball="l2",
                epsilon_mix=MIXED,
            ),
            17,
        ),
        None,
        id="user-mean-l2-per-user",
    ),
    pytest.param(  # semi-feature LDP: masks and public features enrolled, ε split over 2 rounds
        Case(
            "histoftree",
            PopulationSpec(users=2000, distribution="sin-sum", private=2, epsilon_mix=MIXED),
            18,
        ),
        500,
        id="histoftree-batch",
    ),
    pytest.param(  # central trust: statistics in clear, the server's noise from a secret seed
        Case(
            "central-huber",
            PopulationSpec(users=2000, samples=8, distribution="gaussian", mean=0.2, sd=0.5),
            19,
        ),
        500,
        id="central-huber-batch",
    ),
]


@pytest.mark.parametrize(("case", "batch"), PARITY)
def test_http_estimate_equals_the_simulators(server: Server, case: Case, batch: int | None) -> None:
    want = expected(case)
    if case.spec.epsilon_mix is not None:  # the heterogeneous case really mixes its ε's
        assert set(want.population.epsilon.tolist()) == {0.5, 2.0}
    run = run_swarm_sync(
        server.url,
        population=want.population,
        create=(case.protocol, want.params),
        batch=batch,
        progress=False,
    )
    check_run(run, want, server.url, server.database)
    planned = sum(rp.cohort.size for rp in want.local.plan.rounds)
    assert (run.stats.reports, run.stats.late) == (planned, 0)
    assert run.result.epsilon_spent.max == pytest.approx(float(want.local.charges.max()))


# --------------------------------------------------------------------------- crash and restart


class CrashGate(httpx.AsyncBaseTransport):
    """The swarm's transport: real HTTP, except that once ``after`` report batches have been
    stored it loses the answer to the last one (as a crash does), tells the test to kill the
    server, and holds every request until the test says so. It records the answer to the resend
    of the lost batch."""

    def __init__(self, after: int) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.after = after
        self.batches = 0
        self.refused = 0
        self.lost = 0
        self.lost_body = b""
        self.resent: list[tuple[int, bytes]] = []  # (status, body) of the resend's answer
        self.study_id = ""
        self.paused = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resume: asyncio.Event | None = None

    def resume(self) -> None:
        """Let the held requests go (called from the test's thread)."""
        assert self._loop is not None
        assert self._resume is not None
        self._loop.call_soon_threadsafe(self._resume.set)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._resume is None:
            self._loop, self._resume = asyncio.get_running_loop(), asyncio.Event()
        if self.paused.is_set():
            await self._resume.wait()
        try:
            response = await self.inner.handle_async_request(request)
        except httpx.ConnectError:
            self.refused += 1  # the server is down: the client retries
            raise
        if self.lost and request.content == self.lost_body:
            await response.aread()
            self.resent.append((response.status_code, response.content))
        elif request.url.path.endswith("/reports/batch") and response.status_code == 200:
            await response.aread()
            receipt = BatchReceipt.model_validate_json(response.content)
            self.batches += 1
            if self.batches == self.after:
                self.study_id = request.url.path.split("/")[3]
                self.lost, self.lost_body = receipt.accepted, request.content
                self.paused.set()
                await self._resume.wait()
                await response.aclose()
                raise httpx.ReadError("the server died before answering", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_server_killed_mid_round_restarts_and_loses_or_doubles_no_report(tmp_path: Path) -> None:
    case = Case("user-mean", PopulationSpec(users=4000, samples=32, distribution="two-point"), 31)
    want = expected(case)
    database, log = tmp_path / "fedldp.db", tmp_path / "server.log"
    first = start_server(database, log)
    second: ServerProcess | None = None
    gate = CrashGate(after=5)  # round 0 takes 20 batches (blocks of 200 users)
    runs: list[SwarmResult] = []
    errors: list[BaseException] = []

    def swarm() -> None:
        try:
            runs.append(
                run_swarm_sync(
                    first.url,
                    population=want.population,
                    create=(case.protocol, want.params),
                    batch=200,
                    concurrency=2,
                    progress=False,
                    # patient enough for a restart, with short steps so the test stays quick
                    retry=RetryPolicy(attempts=80, base_delay=0.05, max_delay=0.5),
                    transport=gate,
                )
            )
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=swarm, name="swarm", daemon=True)
    thread.start()
    try:
        assert gate.paused.wait(60), "the swarm never stored its first batches"
        view = study_view(first.url, gate.study_id)
        assert (view.phase, view.current_round) == ("running", 0)
        assert 0 < view.rounds[0].received < view.rounds[0].expected  # mid-round
        first.kill()  # SIGKILL: no shutdown, the last batch's answer is lost with it
        gate.resume()
        time.sleep(1.0)  # the swarm's requests are refused meanwhile
        second = start_server(database, log, port=first.port)
        thread.join(120)
        assert not thread.is_alive(), "the swarm did not finish after the restart"
        assert not errors, errors
        (run,) = runs
        check_run(run, want, second.url, database)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert gate.refused > 0  # the swarm did hit the dead server and retried
    # The batch whose answer was lost had been stored before the crash. Its resend came back
    # as duplicates, or, if the other blocks completed the round first (the check above found
    # its reports stored once), as round_closed.
    assert gate.lost > 0
    ((status, body),) = gate.resent
    if status == 200:
        receipt = BatchReceipt.model_validate_json(body)
        assert (receipt.accepted, receipt.duplicates, receipt.rejected) == (0, gate.lost, 0)
    else:
        assert (status, ErrorBody.model_validate_json(body).code) == (409, "round_closed")
        assert run.stats.late == gate.lost


# --------------------------------------------------------------------------- concurrency

CONCURRENT_SENDERS = 200
WINDOW = 100
"""Participants per duplicate batch; consecutive batches overlap by half of it."""


@dataclass
class Tally:
    """What the server answered to every submission of one round."""

    accepted: int = 0
    duplicates: int = 0
    late: int = 0  # refused as round_closed: sent after the round had every report
    digests: dict[int, set[str]] = field(default_factory=dict)


async def flood(
    api: ApiClient,
    study_id: str,
    k: int,
    kind: PayloadKind,
    pids: list[int],
    tokens: list[str],
    rows: FloatArray,
    rng: random.Random,
    *,
    last: bool,
) -> Tally:
    """Every report of round ``k`` at once: each participant once alone and once or twice in
    overlapping batches, from ``CONCURRENT_SENDERS`` single-report senders and one task per
    batch, over one client. Those that arrive after the round closed are refused: as
    ``round_closed``, or ``study_not_running`` once the last round closed and the study finished.
    """
    late_codes = {"round_closed", "study_not_running"} if last else {"round_closed"}
    tally = Tally()
    singles = [
        ReportSubmit(
            participant_id=p, token=tokens[p], round=k, payload=payload_from_row(kind, row)
        )
        for p, row in zip(pids, rows, strict=True)
    ]
    rng.shuffle(singles)
    batches = [
        ReportBatch(
            round=k,
            kind=kind,
            participant_ids=pids[a : a + WINDOW],
            tokens=[tokens[p] for p in pids[a : a + WINDOW]],
            payloads=rows[a : a + WINDOW].tolist(),
        )
        for a in range(0, len(pids), WINDOW // 2)
    ]

    async def send_singles(reports: list[ReportSubmit]) -> None:
        for report in reports:
            try:
                receipt = await api.submit_report(study_id, report)
            except PhaseError as exc:
                if exc.code not in late_codes:
                    raise
                tally.late += 1
                continue
            tally.digests.setdefault(receipt.participant_id, set()).add(receipt.digest)
            if receipt.duplicate:
                tally.duplicates += 1
            else:
                tally.accepted += 1

    async def send_batch(batch: ReportBatch) -> None:
        try:
            receipt = await api.submit_reports(study_id, batch)
        except PhaseError as exc:
            if exc.code not in late_codes:
                raise
            tally.late += len(batch.participant_ids)
            return
        assert receipt.rejected == 0, receipt.items
        tally.accepted += receipt.accepted
        tally.duplicates += receipt.duplicates

    jobs = [send_singles(singles[i::CONCURRENT_SENDERS]) for i in range(CONCURRENT_SENDERS)]
    jobs += [send_batch(b) for b in batches]
    rng.shuffle(jobs)
    await asyncio.gather(*jobs)
    submitted = len(singles) + sum(len(b.participant_ids) for b in batches)
    assert tally.accepted + tally.duplicates + tally.late == submitted
    return tally


async def test_concurrent_submissions_never_double_a_report_or_a_transition(
    server: Server,
) -> None:
    case = Case("user-mean", PopulationSpec(users=1200, samples=32, distribution="two-point"), 41)
    want = expected(case)
    protocol = get_protocol(case.protocol)
    rng = random.Random(case.seed)
    async with ApiClient(server.url) as api:
        study = await api.create_study(
            StudyCreate(protocol=case.protocol, params=want.params, seed=derive_seeds(case.seed)[0])
        )
        with SwarmProgress(False) as bars:
            roster = await enroll(api, study, want.population, bars)
        await start(api, study.id)
        privatizer = Privatizer(
            protocol,
            protocol.parse_params(study.params),
            want.population,
            want.population.population_seed,
        )
        users = UserBlock(roster.slots, roster.epsilon, privatizer)
        everyone = TaskBatchRequest(participant_ids=roster.ids.tolist(), tokens=roster.tokens)
        for k, rp in enumerate(want.local.plan.rounds):
            answer = await api.tasks(study.id, everyone)
            assert [rt.round for rt in answer.reports] == [k]
            tasks = answer.reports[0]
            pids = tasks.participant_ids
            assert pids == rp.cohort.tolist()
            rows = users.respond(  # slot = id
                tasks.task(0),
                np.asarray(pids, dtype=np.int64),
                np.asarray(tasks.epsilons),
                np.asarray(tasks.groups, dtype=np.int64),
            )
            tally = await flood(
                api,
                study.id,
                k,
                tasks.payload_kind,
                pids,
                roster.tokens,
                rows,
                rng,
                last=k == len(want.local.plan.rounds) - 1,
            )
            # each report accepted exactly once, whichever submission came first
            assert tally.accepted == rp.cohort.size
            assert tally.duplicates > 0
            assert all(len(d) == 1 for d in tally.digests.values())  # duplicates: same receipt
            closed = await api.round(study.id, k)
            assert closed.status == "closed"
            assert closed.received == closed.expected == rp.cohort.size
        result = await api.result(study.id)
    assert result.phase == "finished"
    assert_same_estimate(result.estimate, want.local.result.estimate)
    check_rounds(server.url, study.id, want.local)
    check_storage(server.database, study.id, want.local)
    # the server logs each transition as it makes it: each round closed once, the study
    # finished once
    text = server.log.read_text(errors="replace")
    closes = re.findall(rf"study {study.id}: round (\d+) \(.*?\) closed with (\d+) reports", text)
    assert sorted((int(k), int(n)) for k, n in closes) == [
        (k, int(rp.cohort.size)) for k, rp in enumerate(want.local.plan.rounds)
    ]
    assert len(re.findall(rf"study {study.id} finished", text)) == 1
