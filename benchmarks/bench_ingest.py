"""Benchmark: reports a real server accepts per second into SQLite, and its memory as they grow.

Starts ``python -m fedldp.server`` (uvicorn) on a temporary SQLite database and measures, with the
load generator in this process on the same machine:

* the batch endpoint (``POST /v1/studies/{id}/reports/batch``): reports accepted per second, in
  stages, with the server's peak RSS after each stage, which must stay flat as the reports table
  grows (target >= 50,000 reports/s): the RSS after the last stage and after the round closed
  may exceed the RSS after the first stage (the warm-up) by at most 10%;
* single-report requests (``POST /v1/studies/{id}/reports``), many in flight at once: requests
  accepted per second (target >= 1,500 requests/s).

Each study (``hetero-mean-laplace``: one round, every participant reports) enrolls one participant
more than it ingests, so its round stays open while the rates are measured; that last report is
sent afterwards and closes the round, which streams every report into the aggregation in chunks:
the peak RSS after it shows that aggregation does not hold the round in memory either. The peak
(``VmHWM``) is reset once the study is set up (``/proc/PID/clear_refs``), so it shows ingestion,
not enrollment.

The load generator is deliberately thin, like ``wrk``: request bodies are encoded before the clock
starts, and each of the concurrent keep-alive connections writes raw HTTP/1.1 requests and reads
the answers, so the rates measure the server, not a client library (an ``httpx`` client spends
about as much CPU per request as the server does, on the same two cores). Every answer is checked.
Exits 1 if a target is missed.

    python benchmarks/bench_ingest.py [--reports N] [--batch B] [--stages S] [--concurrency C]
                                      [--requests R] [--request-concurrency Q] [--seed S]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from fedldp.client.api.client import ApiClient
from fedldp.client.swarm.server_process import ServerProcess, sqlite_url
from fedldp.protocol.core.wire import (
    MAX_BATCH,
    BatchReceipt,
    EnrollBatch,
    EnrollRequest,
    Receipt,
    ReportBatch,
    ReportSubmit,
    ScalarPayload,
    StudyCreate,
)
from fedldp.threads import one_blas_thread

RSS_GROWTH_LIMIT = 0.10
"""Largest relative growth of the server's RSS after the first stage (the warm-up)."""
BATCH_TARGET = 50_000.0
"""Reports per second through the batch endpoint."""
SINGLE_TARGET = 1_500.0
"""Single-report requests per second."""
PROTOCOL = "hetero-mean-laplace"
ENROLL_CHUNK = 20_000

Answer = tuple[int, bytes]
"""An HTTP answer: status and body."""


# --------------------------------------------------------------------------- server memory


def memory_mib(pid: int) -> tuple[float, float]:
    """(peak, current) resident set size of process ``pid`` in MiB (Linux ``/proc``)."""
    fields: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = float(value.split()[0]) / 1024  # kB
    return fields["VmHWM"], fields["VmRSS"]


def reset_peak(pid: int) -> bool:
    """Reset the peak RSS of ``pid`` to its current RSS (False where the kernel refuses)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def memory_line(pid: int) -> str:
    peak, rss = memory_mib(pid)
    return f"server peak RSS {peak:7.1f} MiB, RSS {rss:7.1f} MiB"


# --------------------------------------------------------------------------- load generator


async def _answer(reader: asyncio.StreamReader) -> Answer:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("the server closed the connection")
    status = int(status_line.split()[1])
    length: int | None = None
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length is None:
        raise ConnectionError("an answer without Content-Length")
    return status, await reader.readexactly(length)


async def _connection(
    host: str, port: int, requests: Iterator[tuple[int, bytes]], answers: list[Answer | None]
) -> None:
    """One keep-alive connection: send the next request, read its answer, until none are left
    (``requests`` is shared by every connection)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for i, request in requests:
            writer.write(request)
            answers[i] = await _answer(reader)
    finally:
        writer.close()
        await writer.wait_closed()


def post_request(host: str, path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def send_all(
    host: str, port: int, requests: Sequence[bytes], concurrency: int
) -> tuple[float, list[Answer]]:
    """Send every request over ``concurrency`` connections: (wall seconds, answers in order)."""
    answers: list[Answer | None] = [None] * len(requests)
    work = iter(enumerate(requests))
    started = time.perf_counter()
    await asyncio.gather(
        *(_connection(host, port, work, answers) for _ in range(min(concurrency, len(requests))))
    )
    elapsed = time.perf_counter() - started
    done = [a for a in answers if a is not None]
    if len(done) != len(requests):
        raise RuntimeError(f"{len(requests) - len(done)} requests got no answer")
    return elapsed, done


def check_batches(answers: Sequence[Answer], sizes: Sequence[int]) -> None:
    for (status, body), size in zip(answers, sizes, strict=True):
        if status != 200:
            raise RuntimeError(f"a batch answered {status}: {body[:300]!r}")
        receipt = BatchReceipt.model_validate_json(body)
        if receipt.accepted != size or receipt.rejected or receipt.duplicates:
            raise RuntimeError(f"a batch of {size} reports: {receipt.model_dump_json()[:300]}")


def check_singles(answers: Sequence[Answer]) -> None:
    for status, body in answers:
        if status != 201:
            raise RuntimeError(f"a report answered {status}: {body[:300]!r}")
        if Receipt.model_validate_json(body).duplicate:
            raise RuntimeError("a first report came back as a duplicate")


# --------------------------------------------------------------------------- the two measures


async def new_study(api: ApiClient, n: int, seed: int) -> tuple[str, list[str]]:
    """A running one-round study of ``n`` participants (ε = 1): its id and their tokens."""
    study = await api.create_study(StudyCreate(protocol=PROTOCOL, seed=seed))
    tokens: list[str] = []
    for start in range(0, n, ENROLL_CHUNK):
        size = min(ENROLL_CHUNK, n - start)
        batch = EnrollBatch(participants=[EnrollRequest(epsilon=1.0)] * size)
        answer = await api.enroll_batch(study.id, batch)
        if answer.participant_ids != list(range(start, start + size)):
            raise RuntimeError("the server numbered the participants unexpectedly")
        tokens += answer.tokens
    started = await api.start_study(study.id)
    if started.phase != "running" or started.rounds[0].expected != n:
        raise RuntimeError(f"study {study.id} did not start with one round of {n} reports")
    return study.id, tokens


def payloads(n: int, seed: int) -> list[float]:
    """Laplace-mechanism-like reports (ε = 1 on [-1, 1]): data plus Laplace(2/ε) noise."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1.0, 1.0, n) + rng.laplace(0.0, 2.0, n)
    return [float(v) for v in values]


async def bench_batches(
    api: ApiClient, server: ServerProcess, pid: int, args: argparse.Namespace
) -> tuple[float, float]:
    """Reports per second, and the server's largest RSS growth since the first stage."""
    n: int = args.reports
    study_id, tokens = await new_study(api, n + 1, args.seed)
    values = payloads(n + 1, args.seed)
    path = f"/v1/studies/{study_id}/reports/batch"
    print(f"batch endpoint: {n} reports in batches of {args.batch}, {args.concurrency} in flight")
    reset = reset_peak(pid)
    print(
        f"  before ingesting             : {memory_line(pid)}"
        + ("" if reset else " (the peak includes enrollment: it could not be reset)")
    )
    edges = np.linspace(0, n, args.stages + 1).astype(np.int64)
    total_s = 0.0
    warm = later = 0.0
    for stage, (lo, hi) in enumerate(itertools.pairwise(edges), start=1):
        starts = range(int(lo), int(hi), args.batch)
        sizes = [min(args.batch, int(hi) - s) for s in starts]
        requests = [
            post_request(
                server.host,
                path,
                ReportBatch(
                    round=0,
                    kind="scalar",
                    participant_ids=list(range(s, s + size)),
                    tokens=tokens[s : s + size],
                    payloads=[[v] for v in values[s : s + size]],
                )
                .model_dump_json()
                .encode(),
            )
            for s, size in zip(starts, sizes, strict=True)
        ]
        elapsed, answers = await send_all(server.host, server.port, requests, args.concurrency)
        check_batches(answers, sizes)
        total_s += elapsed
        rss = memory_mib(pid)[1]
        warm, later = (rss, later) if stage == 1 else (warm, max(later, rss))
        print(
            f"  stage {stage}: {hi:8d} stored, {sum(sizes) / elapsed:7.0f} reports/s; "
            f"{memory_line(pid)}"
        )
    last = ReportSubmit(
        participant_id=n, token=tokens[n], round=0, payload=ScalarPayload(value=values[n])
    )
    started = time.perf_counter()
    _, answers = await send_all(
        server.host,
        server.port,
        [
            post_request(
                server.host, f"/v1/studies/{study_id}/reports", last.model_dump_json().encode()
            )
        ],
        1,
    )
    check_singles(answers)
    closing_s = time.perf_counter() - started
    study = await api.study(study_id)
    if study.phase != "finished":
        raise RuntimeError(f"study {study_id} is {study.phase} after its last report")
    print(f"  round closed, {n + 1} reports aggregated in {closing_s:5.2f} s; {memory_line(pid)}")
    later = max(later, memory_mib(pid)[1])
    return n / total_s, (later / warm - 1.0) if args.stages > 1 else 0.0


async def bench_singles(
    api: ApiClient, server: ServerProcess, pid: int, args: argparse.Namespace
) -> float:
    n: int = args.requests
    study_id, tokens = await new_study(api, n + 1, args.seed + 1)
    path = f"/v1/studies/{study_id}/reports"
    requests = [
        post_request(
            server.host,
            path,
            ReportSubmit(participant_id=i, token=tokens[i], round=0, payload=ScalarPayload(value=v))
            .model_dump_json()
            .encode(),
        )
        for i, v in enumerate(payloads(n, args.seed + 1))
    ]
    print(f"single reports: {n} requests, {args.request_concurrency} in flight")
    elapsed, answers = await send_all(server.host, server.port, requests, args.request_concurrency)
    check_singles(answers)
    received = (await api.study(study_id)).rounds[0].received
    if received != n:
        raise RuntimeError(f"the round received {received} of {n} reports")
    print(f"  {n / elapsed:7.0f} requests/s; {memory_line(pid)}")
    return n / elapsed


async def bench(
    server: ServerProcess, pid: int, args: argparse.Namespace
) -> tuple[float, float, float]:
    async with ApiClient(server.url, timeout=300.0) as api:
        batch_rate, growth = await bench_batches(api, server, pid, args)
        single_rate = await bench_singles(api, server, pid, args)
    return batch_rate, growth, single_rate


def main(argv: list[str] | None = None) -> int:
    one_blas_thread()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--reports", type=int, default=400_000, help="reports sent in batches")
    parser.add_argument("--batch", type=int, default=10_000, help="reports per batch request")
    parser.add_argument("--stages", type=int, default=4, help="stages (memory shown after each)")
    parser.add_argument("--concurrency", type=int, default=2, help="batch requests in flight")
    parser.add_argument("--requests", type=int, default=6_000, help="single-report requests")
    parser.add_argument("--request-concurrency", type=int, default=64, help="requests in flight")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if not 1 <= args.batch <= MAX_BATCH:
        parser.error(f"--batch must lie in [1, {MAX_BATCH}]")

    with tempfile.TemporaryDirectory(prefix="fedldp-bench-") as tmp:
        server = ServerProcess(
            database_url=sqlite_url(Path(tmp) / "bench.db"),
            env={"FEDLDP_LOG_LEVEL": "warning"},
            log=Path(tmp) / "server.log",
        )
        with server:
            server.wait_healthy()
            assert server.process is not None
            batch_rate, growth, single_rate = asyncio.run(bench(server, server.process.pid, args))
    batch_ok = batch_rate >= BATCH_TARGET
    single_ok = single_rate >= SINGLE_TARGET
    print(
        f"batch endpoint : {batch_rate:7.0f} reports/s   ratio to target "
        f"{batch_rate / BATCH_TARGET:5.2f} (target >= {BATCH_TARGET:,.0f})  "
        + ("PASS" if batch_ok else "FAIL")
    )
    print(
        f"single reports : {single_rate:7.0f} requests/s  ratio to target "
        f"{single_rate / SINGLE_TARGET:5.2f} (target >= {SINGLE_TARGET:,.0f})   "
        + ("PASS" if single_ok else "FAIL")
    )
    flat = growth <= RSS_GROWTH_LIMIT
    print(
        f"server memory  : RSS {growth:+.1%} after the first stage (limit "
        f"+{RSS_GROWTH_LIMIT:.0%})                    " + ("PASS" if flat else "FAIL")
    )
    return 0 if batch_ok and single_ok and flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
