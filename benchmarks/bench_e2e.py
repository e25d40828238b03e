"""Benchmark: a study over HTTP (server + batch-mode swarm) against the in-process simulation of the
same study, side by side in one run.

Two studies (``--study``):

* ``user-mean`` (issue #3): 10^5 participants with 256 two-point samples each, ε = 1;
* ``user-sgd`` (issue #5): linear regression by 20 gradient rounds (the spec's E9 problem:
  sparse-linear data, ridge λ = 0.4, G = 1.4, γ = 0.9, D = 2, Kashin gradients by default),
  10^5 participants with 64 samples each, ε = 1: 40 HTTP rounds, each waiting for the last.

Starts a real server (``python -m fedldp.server``) on a temporary SQLite database, runs a swarm of
``--users`` participants in batch mode against it, then simulates the same seed in process (the
median of three runs). Prints both times, their ratio (target <= 10), where the HTTP time went
(from the server's own timestamps: enrollment and start, each round from opening to closing) and
checks that both paths give the same estimate (1e-9 relative, DESIGN.md). Exits 1 if the target
is missed or the estimates differ.

    python benchmarks/bench_e2e.py [--study user-mean|user-sgd] [--users N] [--samples M]
                                   [--batch B] [--concurrency C] [--processes K] [--seed S]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedldp.client.http.server_process import ServerProcess, sqlite_url
from fedldp.client.http.swarm import run_swarm
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.protocol.catalogue import get_protocol
from fedldp.protocol.core.wire import RoundsView

RATIO_TARGET = 10.0
IN_PROCESS_RUNS = 3
E9 = {"regularization": 0.4, "smoothness": 1.4, "strong_convexity": 0.9, "gradient_bound": 2.0}
STUDIES: dict[str, tuple[dict[str, Any], int, dict[str, Any]]] = {
    # protocol: (population law, samples per user, protocol parameters)
    "user-mean": ({"distribution": "two-point", "mean": 0.3}, 256, {}),
    "user-sgd": ({"distribution": "sparse-linear"}, 64, {**E9, "rounds": 20}),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--study", choices=sorted(STUDIES), default="user-mean")
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--samples", type=int, help="samples per user (default: the study's)")
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=4)
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

    with tempfile.TemporaryDirectory(prefix="fedldp-bench-") as tmp:
        database = Path(tmp) / "bench.db"
        server = ServerProcess(
            database_url=sqlite_url(database),
            env={"FEDLDP_LOG_LEVEL": "warning"},
            log=Path(tmp) / "server.log",
        )
        with server:
            server.wait_healthy()
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
            with httpx.Client(base_url=server.url, timeout=60.0) as http:
                answer = http.get(f"/v1/studies/{run.study_id}/rounds")
                answer.raise_for_status()
                rounds = RoundsView.model_validate_json(answer.content).rounds

    times: list[float] = []
    for _ in range(IN_PROCESS_RUNS):
        started = time.perf_counter()
        local = simulate(protocol, protocol.parse_params(params), population, args.seed)
        times.append(time.perf_counter() - started)
    in_process = statistics.median(times)

    remote_estimate = run.result.estimate
    assert remote_estimate is not None
    remote, here = np.asarray(remote_estimate), np.asarray(local.result.estimate)
    relative = float(np.max(np.abs(remote - here)) / np.max(np.abs(here)))
    ratio = run.elapsed_s / in_process
    print(f"{args.study}, n = {args.users}, m = {spec.samples}, seed {args.seed}")
    print(
        f"  over HTTP  : {run.elapsed_s:8.2f} s  (batch {args.batch}, concurrency "
        f"{args.concurrency}, {args.processes} proc.)"
    )
    accounted = 0.0
    if rounds and rounds[0].opened_at is not None:
        setup = (rounds[0].opened_at - run.study.created_at).total_seconds()
        accounted += setup
        print(f"    create, enroll and start : {setup:7.2f} s")
    for r in rounds:
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
    print(f"  in process : {in_process:8.2f} s  (median of {IN_PROCESS_RUNS})")
    print(f"  ratio      : {ratio:8.2f}   (target <= {RATIO_TARGET:g})")
    print(f"  estimates  : {remote_estimate!r} vs {local.result.estimate!r} (rel. {relative:.1e})")
    ok = ratio <= RATIO_TARGET and relative <= 1e-9
    print("  PASS" if ok else "  FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
