"""Soak: minutes of mixed per-user and batch traffic against a real server on SQLite, with bounded
concurrency; the server must answer no 5xx and keep its memory flat.

Starts ``python -m fedldp.server`` (uvicorn) on a temporary SQLite database and runs study after
study (``hetero-mean-laplace``: one round, every participant reports), ``--parallel`` of them at a
time, for ``--minutes``. Each study goes through the whole API a deployment sees: create, enroll
(one batch), start; then half of its users hold their own conversation (``GET …/task`` and ``POST
…/reports`` with their bearer token) while the other half report in batches (``POST
…/reports/batch``), with study views read in between; the last report closes the round and the
result is read. Every request goes through one pool of ``--concurrency`` keep-alive connections
(the bound on requests in flight), written as raw HTTP/1.1 as in bench_ingest.py, so the client
costs little of the two cores.

Prints, per endpoint class, the request count, error rate and p50/p99 latency, and the server's
RSS at start, after the warm-up (``--warmup`` seconds, default a fifth of the run) and at the end.
Exits 1 on any 5xx, any other unexpected answer or lost connection, or RSS growth of more than 10%
after the warm-up.

    python benchmarks/bench_soak.py [--minutes M] [--users N] [--parallel P] [--concurrency C]
                                    [--batch B] [--warmup S] [--seed S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedldp.client.swarm.server_process import ServerProcess, sqlite_url
from fedldp.threads import one_blas_thread

PROTOCOL = "hetero-mean-laplace"
RSS_GROWTH_LIMIT = 0.10
"""Largest relative growth of the server's RSS from the end of the warm-up to the end."""


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


# --------------------------------------------------------------------------- raw HTTP/1.1


class Connection:
    """One keep-alive connection (reopened after the server closes it)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes | None, token: str | None
    ) -> tuple[int, bytes]:
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = [f"{method} {path} HTTP/1.1", f"host: {self.host}"]
        if token is not None:
            head.append(f"authorization: Bearer {token}")
        if body is not None:
            head += ["content-type: application/json", f"content-length: {len(body)}"]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""))
        try:
            return await self._answer(self.reader)
        except BaseException:
            self.close()
            raise

    @staticmethod
    async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


@dataclass
class Stats:
    """Latencies and failures per endpoint class."""

    requests: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    server_errors: int = 0
    examples: list[str] = field(default_factory=list)

    def failed(self, kind: str, what: str) -> None:
        self.errors[kind] += 1
        if len(self.examples) < 5:
            self.examples.append(f"{kind}: {what}")


class Pool:
    """``size`` connections: at most ``size`` requests in flight."""

    def __init__(self, host: str, port: int, size: int, stats: Stats) -> None:
        self.free: asyncio.Queue[Connection] = asyncio.Queue()
        for _ in range(size):
            self.free.put_nowait(Connection(host, port))
        self.stats = stats

    async def call(
        self,
        kind: str,
        method: str,
        path: str,
        payload: Any = None,
        *,
        token: str | None = None,
        expect: tuple[int, ...] = (200, 201),
    ) -> tuple[int, Any]:
        """One request, timed under ``kind``: its status and parsed JSON (status 0: the
        connection failed, counted as an error)."""
        body = None if payload is None else json.dumps(payload).encode()
        connection = await self.free.get()
        self.stats.requests[kind] += 1
        started = time.perf_counter()
        try:
            status, data = await connection.request(method, path, body, token)
        except (OSError, asyncio.IncompleteReadError) as exc:
            self.stats.failed(kind, f"{method} {path}: {type(exc).__name__}: {exc}")
            return 0, None
        finally:
            self.free.put_nowait(connection)
        self.stats.latencies[kind].append(time.perf_counter() - started)
        if status >= 500:
            self.stats.server_errors += 1
        if status not in expect:
            self.stats.failed(kind, f"{method} {path} answered {status}: {data[:200]!r}")
        return status, json.loads(data) if data else None

    def close(self) -> None:
        while not self.free.empty():
            self.free.get_nowait().close()


# --------------------------------------------------------------------------- one study


async def one_study(pool: Pool, args: argparse.Namespace, seed: int) -> bool:
    """Create, enroll, start, report (half per user, half in batches), read the result: True
    if the study finished."""
    status, study = await pool.call(
        "admin", "POST", "/v1/studies", {"protocol": PROTOCOL, "seed": seed}
    )
    if status != 201:
        return False
    base = f"/v1/studies/{study['id']}"
    enrollment = {"participants": [{"epsilon": 1.0}] * args.users}
    status, enrolled = await pool.call(
        "enroll_batch", "POST", f"{base}/participants/batch", enrollment
    )
    if status != 201:
        return False
    ids: list[int] = enrolled["participant_ids"]
    tokens: list[str] = enrolled["tokens"]
    if (await pool.call("admin", "POST", f"{base}/start"))[0] != 200:
        return False
    rng = np.random.default_rng(seed)
    values = (rng.uniform(-1.0, 1.0, args.users) + rng.laplace(0.0, 2.0, args.users)).tolist()
    half = args.users // 2

    async def user(i: int) -> None:
        path = f"{base}/participants/{ids[i]}/task"
        if (await pool.call("task", "GET", path, token=tokens[i]))[0] != 200:
            return
        report = {"participant_id": ids[i], "round": 0,
                  "payload": {"kind": "scalar", "value": values[i]}}  # fmt: skip
        await pool.call("report", "POST", f"{base}/reports", report, token=tokens[i])

    async def batch(lo: int, hi: int) -> None:
        body = {"round": 0, "kind": "scalar", "participant_ids": ids[lo:hi],
                "tokens": tokens[lo:hi], "payloads": [[v] for v in values[lo:hi]]}  # fmt: skip
        await pool.call("report_batch", "POST", f"{base}/reports/batch", body)

    async def views() -> None:
        for _ in range(4):
            await pool.call("read", "GET", base)
            await asyncio.sleep(0.2)

    # the last report (a per-user one, sent after everything else) closes the round
    await asyncio.gather(
        *(user(i) for i in range(half, args.users - 1)),
        *(batch(lo, min(lo + args.batch, half)) for lo in range(0, half, args.batch)),
        views(),
    )
    await user(args.users - 1)
    for _ in range(50):  # the round closes with the last report; its result follows
        status, result = await pool.call("read", "GET", f"{base}/result", expect=(200, 409))
        if status == 200:
            return bool(result["phase"] == "finished")
        await asyncio.sleep(0.1)
    return False


# --------------------------------------------------------------------------- the soak


async def soak(
    server: ServerProcess, pid: int, args: argparse.Namespace
) -> tuple[Stats, dict[str, float], int, int]:
    stats = Stats()
    pool = Pool(server.host, server.port, args.concurrency, stats)
    rss = {"start": rss_mib(pid)}
    started = time.monotonic()
    end = started + args.minutes * 60.0
    warmup = args.warmup if args.warmup is not None else args.minutes * 60.0 / 5
    seeds = iter(range(args.seed, args.seed + 10**9))
    finished = unfinished = 0

    async def driver() -> None:
        nonlocal finished, unfinished
        while time.monotonic() < end:
            if await one_study(pool, args, next(seeds)):
                finished += 1
            else:
                unfinished += 1

    async def monitor() -> None:
        await asyncio.sleep(warmup)
        rss["after warm-up"] = rss_mib(pid)
        print(
            f"  after warm-up ({warmup:.0f} s): server RSS {rss['after warm-up']:.1f} MiB",
            flush=True,
        )
        while time.monotonic() < end:
            await asyncio.sleep(min(30.0, max(0.0, end - time.monotonic())))
            elapsed = time.monotonic() - started
            print(f"  {elapsed:5.0f} s: {finished} studies finished, server RSS "
                  f"{rss_mib(pid):.1f} MiB", flush=True)  # fmt: skip

    try:
        await asyncio.gather(monitor(), *(driver() for _ in range(args.parallel)))
    finally:
        pool.close()
    rss["end"] = rss_mib(pid)
    return stats, rss, finished, unfinished


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) * 1000.0


def report(
    stats: Stats, rss: dict[str, float], finished: int, unfinished: int, minutes: float
) -> bool:
    """Print the results: True when the soak passed."""
    total = sum(stats.requests.values())
    errors = sum(stats.errors.values())
    print(f"{'endpoint class':14s} {'requests':>9s} {'errors':>7s} {'p50 ms':>8s} {'p99 ms':>8s}")
    for kind in sorted(stats.requests):
        lat = stats.latencies[kind] or [float("nan")]
        print(f"{kind:14s} {stats.requests[kind]:9d} {stats.errors.get(kind, 0):7d} "
              f"{percentile(lat, 50):8.1f} {percentile(lat, 99):8.1f}")  # fmt: skip
    rate = errors / total if total else 0.0
    print(f"{total} requests in {minutes:g} min ({total / (minutes * 60):.0f}/s), {finished} "
          f"studies finished, {unfinished} not; error rate {rate:.2%}, "
          f"5xx {stats.server_errors}")  # fmt: skip
    for example in stats.examples:
        print(f"  e.g. {example}")
    warm = rss["after warm-up"]
    growth = rss["end"] / warm - 1.0
    print(f"server RSS: start {rss['start']:.1f} MiB, after warm-up {warm:.1f} MiB, end "
          f"{rss['end']:.1f} MiB ({growth:+.1%} after warm-up; "
          f"limit +{RSS_GROWTH_LIMIT:.0%})")  # fmt: skip
    ok = stats.server_errors == 0 and errors == 0 and unfinished == 0
    ok = ok and growth <= RSS_GROWTH_LIMIT
    print("PASS" if ok else "FAIL")
    return ok


def main(argv: list[str] | None = None) -> int:
    one_blas_thread()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to run")
    parser.add_argument("--users", type=int, default=2_000, help="participants per study")
    parser.add_argument("--parallel", type=int, default=2, help="studies under way at once")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    parser.add_argument("--batch", type=int, default=250, help="reports per batch request")
    parser.add_argument(
        "--warmup", type=float, default=None, help="seconds before the reference RSS (a fifth)"
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.users < 4 or args.concurrency < 1 or args.batch < 1:
        parser.error("--minutes > 0, --users >= 4, --concurrency >= 1 and --batch >= 1")
    if args.warmup is not None and not 0 <= args.warmup < args.minutes * 60:
        parser.error("--warmup must lie in [0, the run's length)")
    with tempfile.TemporaryDirectory(prefix="fedldp-soak-") as tmp:
        server = ServerProcess(
            database_url=sqlite_url(Path(tmp) / "soak.db"),
            env={"FEDLDP_LOG_LEVEL": "warning"},
            log=Path(tmp) / "server.log",
        )
        with server:
            server.wait_healthy()
            assert server.process is not None
            print(f"soak: {args.minutes:g} min of {PROTOCOL} studies of {args.users} users, "
                  f"{args.parallel} at a time, {args.concurrency} requests in flight",
                  flush=True)  # fmt: skip
            stats, rss, finished, unfinished = asyncio.run(soak(server, server.process.pid, args))
    return 0 if report(stats, rss, finished, unfinished, args.minutes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
