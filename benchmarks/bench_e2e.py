"""Benchmark: a study over HTTP (server + batch-mode swarm) against the in-process simulation of the
same study, side by side in one run.

Two studies (``--study``):

* ``user-mean`` (issue #3): 10^5 participants with 256 two-point samples each, ε = 1;
* ``user-sgd`` (issue #5): linear regression by 20 gradient rounds (the spec's E9 problem:
  sparse-linear data, ridge λ = 0.4, G = 1.4, γ = 0.9, D = 2, Kashin gradients by default),
  10^5 participants with 64 samples each, ε = 1: 40 HTTP rounds, each waiting for the last.

For each worker count in ``--workers`` (default 1 and 2: issue 15), starts a real server (``python
-m fedldp.server --workers K``) on a temporary SQLite database and runs a swarm of ``--users``
participants in batch mode against it; then simulates the same seed in process (the median of three
runs, one at 10^6 users). Prints each HTTP time and its ratio to the in-process time (target <= 3 at
the best worker count, as bench_peruser judges its rate), where the HTTP time went (from the
server's own timestamps: enrollment and start, each round from opening to closing), the CPU seconds
and peak RSS of the server (all its processes) and of the swarm (this process while it ran the
swarm, and its worker processes), and checks that every run gives the in-process estimate (1e-9
relative, docs/architecture.md). At 10^6 users (``--users 1000000``) the targets are the peak RSS
instead (issue 15): server < 500 MiB, swarm < 1 GiB; the ratio is printed. Exits 1 if a target is
missed or the estimates differ.

    python benchmarks/bench_e2e.py [--study user-mean|user-sgd] [--users N] [--samples M]
                                   [--workers K[,K...]] [--batch B] [--concurrency C]
                                   [--processes P] [--seed S]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.run import DEFAULT_CONCURRENCY, SwarmResult, run_swarm
from fedldp.client.swarm.server_process import ServerProcess, sqlite_url
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import RoundsView, RoundView
from fedldp.threads import one_blas_thread

RATIO_TARGET = 3.0
IN_PROCESS_RUNS = 3
MILLION = 1_000_000
SERVER_RSS_TARGET_MIB = 500.0  # at 10^6 users (issue 15)
SWARM_RSS_TARGET_MIB = 1024.0
E9 = {"regularization": 0.4, "smoothness": 1.4, "strong_convexity": 0.9, "gradient_bound": 2.0}
STUDIES: dict[str, tuple[dict[str, Any], int, dict[str, Any]]] = {
    # protocol: (population law, samples per user, protocol parameters)
    "user-mean": ({"distribution": "two-point", "mean": 0.3}, 256, {}),
    "user-sgd": ({"distribution": "sparse-linear"}, 64, {**E9, "rounds": 20}),
}


@dataclass
class HttpRun:
    workers: int
    run: SwarmResult
    rounds: list[RoundView]
    server_cpu_s: float
    server_rss_mib: float  # the sum of the server processes' peak RSS
    server_rss_max_mib: float  # the largest of them
    swarm_cpu_s: float
    swarm_rss_mib: float


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux /proc)."""
    out = [pid]
    for p in out:
        children = Path(f"/proc/{p}/task/{p}/children")
        if children.exists():
            out += [int(c) for c in children.read_text().split()]
    return out


def _server_usage(pid: int) -> tuple[float, float, float]:
    """CPU seconds (user + system), the summed and the largest peak RSS (MiB) of the server's
    processes."""
    cpu, rss, top = 0.0, 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    rss += int(line.split()[1]) / 1024
                    top = max(top, int(line.split()[1]) / 1024)
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended meanwhile
    return cpu, rss, top


def _cpu_self() -> float:
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def over_http(
    args: argparse.Namespace, workers: int, population: Any, protocol: Any, params: Any
) -> HttpRun:
    with tempfile.TemporaryDirectory(prefix="fedldp-bench-") as tmp:
        database = Path(tmp) / "bench.db"
        server = ServerProcess(
            database_url=sqlite_url(database),
            env={"FEDLDP_LOG_LEVEL": "warning", "FEDLDP_WORKERS": str(workers)},
            log=Path(tmp) / "server.log",
        )
        with server:
            server.wait_healthy()
            assert server.process is not None
            cpu_before, _, _ = _server_usage(server.process.pid)
            swarm_before = _cpu_self()
            run = asyncio.run(
                run_swarm(
                    server.url,
                    population=population,
                    create=(protocol.name, params),
                    batch=args.batch,
                    concurrency=args.concurrency,
                    processes=args.processes,
                    progress=False,
                )
            )
            swarm_cpu = _cpu_self() - swarm_before
            own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            cpu_after, server_rss, server_top = _server_usage(server.process.pid)
            with httpx.Client(base_url=server.url, timeout=60.0) as http:
                answer = http.get(f"/v1/studies/{run.study_id}/rounds")
                answer.raise_for_status()
                rounds = RoundsView.model_validate_json(answer.content).rounds
    swarm_rss = own + (kids if args.processes > 1 else 0.0)
    server_cpu = cpu_after - cpu_before
    return HttpRun(workers, run, rounds, server_cpu, server_rss, server_top, swarm_cpu, swarm_rss)


def report(args: argparse.Namespace, h: HttpRun, in_process: float) -> bool:
    """Print one HTTP run; whether its RSS targets (at 10^6 users) are met."""
    run = h.run
    ratio = run.elapsed_s / in_process
    print(
        f"  over HTTP, {h.workers} worker(s): {run.elapsed_s:8.2f} s  (batch {args.batch}, "
        f"concurrency {args.concurrency}, {args.processes} proc.)  ratio {ratio:.2f}"
    )
    accounted = 0.0
    if h.rounds and h.rounds[0].opened_at is not None:
        setup = (h.rounds[0].opened_at - run.study.created_at).total_seconds()
        accounted += setup
        print(f"    create, enroll and start : {setup:7.2f} s")
    for r in h.rounds:
        if r.opened_at is not None and r.closed_at is not None:
            span = (r.closed_at - r.opened_at).total_seconds()
            accounted += span
            print(f"    round {r.index} ({r.name:>9}) : {span:7.2f} s  ({r.received} reports)")
    print(f"    the rest (client side)   : {run.elapsed_s - accounted:7.2f} s")
    stats = run.stats
    print(
        f"    swarm requests           : {stats.task_requests} task batches, "
        f"{stats.report_requests} report batches, {stats.waits} waits"
    )
    users = args.users
    print(
        f"    server: {h.server_cpu_s:7.2f} CPU s ({1e6 * h.server_cpu_s / users:.1f} µs/user), "
        f"peak RSS {h.server_rss_mib:.0f} MiB (largest process {h.server_rss_max_mib:.0f} MiB)"
    )
    print(
        f"    swarm : {h.swarm_cpu_s:7.2f} CPU s ({1e6 * h.swarm_cpu_s / users:.1f} µs/user), "
        f"peak RSS {h.swarm_rss_mib:.0f} MiB"
    )
    ok = True
    if users >= MILLION:
        # per server process: each worker holds its own copy of the plan and caches
        server_rss = h.server_rss_mib if h.workers == 1 else h.server_rss_max_mib
        fits = server_rss < SERVER_RSS_TARGET_MIB and h.swarm_rss_mib < SWARM_RSS_TARGET_MIB
        print(
            f"    RSS targets at 10^6: server process < {SERVER_RSS_TARGET_MIB:g} MiB, swarm < "
            f"{SWARM_RSS_TARGET_MIB:g} MiB: {'met' if fits else 'MISSED'}"
        )
        ok &= fits
    return ok


def main(argv: list[str] | None = None) -> int:
    one_blas_thread()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--study", choices=sorted(STUDIES), default="user-mean")
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--samples", type=int, help="samples per user (default: the study's)")
    parser.add_argument(
        "--workers", default="1,2", help="server worker counts to run, comma-separated (1,2)"
    )
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument(
        "--concurrency", type=int, default=DEFAULT_CONCURRENCY["batch"], help="the swarm's default"
    )
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    law, default_samples, raw = STUDIES[args.study]
    spec = PopulationSpec(
        users=args.users, samples=args.samples or default_samples, epsilon=1.0, **law
    )
    population = build_population(spec, args.seed)
    protocol = get_protocol(args.study)
    params = fill_from_population(protocol, raw, population)
    runs = [over_http(args, int(k), population, protocol, params) for k in args.workers.split(",")]

    times: list[float] = []
    for _ in range(1 if args.users >= MILLION else IN_PROCESS_RUNS):
        started = time.perf_counter()
        local = simulate(protocol, protocol.parse_params(params), population, args.seed)
        times.append(time.perf_counter() - started)
    in_process = statistics.median(times)

    print(f"{args.study}, n = {args.users}, m = {spec.samples}, seed {args.seed}")
    ok = True
    here = np.asarray(local.result.estimate)
    for h in runs:
        ok &= report(args, h, in_process)
        remote_estimate = h.run.result.estimate
        assert remote_estimate is not None
        remote = np.asarray(remote_estimate)
        relative = float(np.max(np.abs(remote - here)) / np.max(np.abs(here)))
        print(
            f"    estimate : {remote_estimate!r} vs {local.result.estimate!r} (rel. {relative:.1e})"
        )
        ok &= relative <= 1e-9
    print(f"  in process : {in_process:8.2f} s  (median of {len(times)})")
    # as bench_peruser: the target is the server's best worker count on this database and
    # machine (on SQLite with 2 cores, which the swarm shares, one worker; see
    # docs/benchmarks.md); at 10^6 users issue 15 sets targets for the peak RSS only, and the
    # ratio is printed
    best = min(runs, key=lambda h: h.run.elapsed_s)
    ratio = best.run.elapsed_s / in_process
    if args.users < MILLION:
        met = ratio <= RATIO_TARGET
        verdict = f", target <= {RATIO_TARGET:g}: " + ("met" if met else "MISSED")
        ok &= met
    else:
        verdict = " (the targets at 10^6 users are the peak RSS above)"
    print(f"  ratio at best ({best.workers} worker(s)) {ratio:.2f}{verdict}")
    print("  PASS" if ok else "  FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
