"""Benchmark: the per-user swarm (every simulated user its own conversation with the server) against
a real server, next to the batch mode on the same population, in one run (issue 15, item 1).

For each server worker count in ``--workers`` (default 1 and 2), starts a real server (``python -m
fedldp.server``, ``FEDLDP_WORKERS=K``) on a temporary SQLite database. For each protocol (one-round
``baseline-clipped-laplace`` and two-round ``user-mean``; ``--users`` N = 10,000 users with 64
two-point samples each, ε = 1) it runs the swarm twice in a fresh spawned process each: per user
(``fedldp swarm`` without ``--batch``: one task request and one report request per user and round,
each with the user's own token) and in batch mode. For each run it prints users/s (end to end:
create, enroll, start, every user's rounds, the result), requests per user (the swarm's own count of
task and report requests), the CPU seconds and peak RSS of the swarm process and of the server (its
processes together; the peak is reset before each run), and the per-user run's ratio to the batch
run. It checks that every run's estimate equals ``fedldp simulate`` of the same seed (relative 1e-9,
docs/architecture.md). Exits 1 if an estimate differs or, unless ``--no-targets``, if a protocol's
per-user runs are all below the target of 1,000 users/s (the best worker count counts: the target is
for this machine, used as well as it can be).

Both processes share this machine's cores (and whatever else runs on it): the users/s are
end-to-end rates under that contention, and the CPU seconds say where the time went.

    python benchmarks/bench_peruser.py [--users N] [--samples M] [--protocol P ...]
        [--concurrency C] [--workers K[,K...]] [--seed S] [--no-batch] [--no-targets]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.run import run_swarm_sync
from fedldp.client.swarm.server_process import ServerProcess, sqlite_url
from fedldp.protocol.catalogue import get_protocol
from fedldp.threads import one_blas_thread

USERS_PER_S_TARGET = 1_000.0
PROTOCOLS = ("baseline-clipped-laplace", "user-mean")
REL = 1e-9
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- process accounting


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a server with workers is several processes)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue  # the thread ended meanwhile
    return found


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of these live processes (Linux ``/proc``)."""
    total = 0.0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime
    return total


def peak_rss_mib(pids: list[int]) -> float:
    """The sum of the processes' peak resident set sizes (``VmHWM``), in MiB."""
    total = 0.0
    for p in pids:
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += float(line.split()[1]) / 1024
    return total


def reset_peaks(pids: list[int]) -> None:
    """Reset each process's peak RSS to its current RSS (where the kernel allows it)."""
    for p in pids:
        with contextlib.suppress(OSError):
            Path(f"/proc/{p}/clear_refs").write_text("5")


# --------------------------------------------------------------------------- one swarm run


@dataclass(frozen=True)
class Run:
    """What one swarm process measured of itself."""

    estimate: Any
    elapsed_s: float
    cpu_s: float
    peak_rss_mib: float
    task_requests: int
    report_requests: int
    waits: int


def swarm_process(
    url: str, protocol: str, spec: PopulationSpec, seed: int, batch: int | None, concurrency: int
) -> Run:
    """Run one swarm (in a fresh spawned process: its CPU and peak RSS are its own)."""
    population = build_population(spec, seed)
    p = get_protocol(protocol)
    params = fill_from_population(p, {}, population)
    began = time.process_time()
    run = run_swarm_sync(
        url,
        population=population,
        create=(protocol, params),
        batch=batch,
        concurrency=concurrency or None,
        progress=False,
    )
    cpu = time.process_time() - began
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    stats = run.stats
    return Run(
        run.result.estimate,
        run.elapsed_s,
        cpu,
        peak,
        stats.task_requests,
        stats.report_requests,
        stats.waits,
    )


def measure(
    server: ServerProcess, protocol: str, spec: PopulationSpec, args: argparse.Namespace, batch: Any
) -> tuple[Run, float, float]:
    """One swarm run: what it measured, and the server's CPU seconds and peak RSS meanwhile."""
    assert server.process is not None
    pids = process_tree(server.process.pid)
    reset_peaks(pids)
    before = cpu_s(pids)
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        run = pool.apply(
            swarm_process, (server.url, protocol, spec, args.seed, batch, args.concurrency)
        )
    pids = process_tree(server.process.pid)
    return run, cpu_s(pids) - before, peak_rss_mib(pids)


def line(mode: str, n: int, run: Run, server_cpu: float, server_peak: float) -> str:
    requests = (run.task_requests + run.report_requests) / n
    return (
        f"    {mode:<9}: {n / run.elapsed_s:8.0f} users/s  ({run.elapsed_s:6.2f} s; "
        f"{run.task_requests} task + {run.report_requests} report requests, "
        f"{requests:.2f}/user, {run.waits} waits)\n"
        f"               swarm  {run.cpu_s:6.2f} CPU s ({run.cpu_s / n * 1e3:5.2f} ms/user), "
        f"peak RSS {run.peak_rss_mib:6.1f} MiB\n"
        f"               server {server_cpu:6.2f} CPU s ({server_cpu / n * 1e3:5.2f} ms/user), "
        f"peak RSS {server_peak:6.1f} MiB"
    )


def relative_error(remote: Any, local: Any) -> float:
    r, here = np.asarray(remote, dtype=np.float64), np.asarray(local, dtype=np.float64)
    return float(np.max(np.abs(r - here)) / max(float(np.max(np.abs(here))), 1e-300))


def run_protocol(
    server: ServerProcess, protocol: str, spec: PopulationSpec, args: argparse.Namespace
) -> tuple[float, bool]:
    """Both modes of one protocol: the per-user users/s, and whether every estimate was the
    simulator's."""
    population = build_population(spec, args.seed)
    p = get_protocol(protocol)
    params = p.parse_params(fill_from_population(p, {}, population))
    local = simulate(p, params, population, args.seed).result.estimate
    print(f"  {protocol}:")
    runs: dict[str, Run] = {}
    same = True
    for mode, batch in (("per-user", None), ("batch", args.batch)):
        if mode == "batch" and args.no_batch:
            continue
        run, server_cpu, server_peak = measure(server, protocol, spec, args, batch)
        runs[mode] = run
        print(line(mode, args.users, run, server_cpu, server_peak))
        rel = relative_error(run.estimate, local)
        same &= rel <= REL
        print(
            f"               estimate {run.estimate!r} vs simulate {local!r} (rel. {rel:.1e}) "
            + ("same" if rel <= REL else "DIFFERENT")
        )
    if "batch" in runs:
        ratio = runs["per-user"].elapsed_s / runs["batch"].elapsed_s
        print(f"    per-user time / batch time: {ratio:.2f}")
    return args.users / runs["per-user"].elapsed_s, same


def main(argv: list[str] | None = None) -> int:
    one_blas_thread()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--protocol", action="append", choices=PROTOCOLS, help="(repeat)")
    parser.add_argument("--concurrency", type=int, default=0, help="0: the swarm's default")
    parser.add_argument("--batch", type=int, default=10_000, help="users per block, batch mode")
    parser.add_argument(
        "--workers", default="1,2", help="server worker counts to run, comma-separated (1,2)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-batch", action="store_true", help="skip the batch-mode runs")
    parser.add_argument("--no-targets", action="store_true", help="print, do not judge")
    args = parser.parse_args(argv)

    spec = PopulationSpec(
        users=args.users, samples=args.samples, distribution="two-point", mean=0.3, epsilon=1.0
    )
    protocols = args.protocol or list(PROTOCOLS)
    load = os.getloadavg()
    print(
        f"n = {args.users} users x {args.samples} samples, seed {args.seed}; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    ok = True
    best = dict.fromkeys(protocols, 0.0)
    for workers in (int(k) for k in args.workers.split(",")):
        print(f"server with {workers} worker(s):")
        with tempfile.TemporaryDirectory(prefix="fedldp-bench-") as tmp:
            server = ServerProcess(
                database_url=sqlite_url(Path(tmp) / "bench.db"),
                env={"FEDLDP_LOG_LEVEL": "warning", "FEDLDP_WORKERS": str(workers)},
                log=Path(tmp) / "server.log",
            )
            with server:
                server.wait_healthy()
                for protocol in protocols:
                    rate, same = run_protocol(server, protocol, spec, args)
                    ok &= same
                    best[protocol] = max(best[protocol], rate)
    for protocol, rate in best.items():
        met = rate >= USERS_PER_S_TARGET
        ok &= met or args.no_targets
        print(
            f"{protocol}: per user at best {rate:.0f} users/s, target >= "
            f"{USERS_PER_S_TARGET:,.0f}: " + ("met" if met else "MISSED")
        )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
