"""Benchmark: time per user against the population's size, in process, over HTTP in batch mode and
over HTTP per user (issue 27 item 5), drawn as one figure.

For each size in ``--sizes`` (default 10^3 … 10^7 by decades) runs the ``user-mean`` study
(two-point data, ``--samples`` samples per user, ε = 1): the in-process simulation, a batch-mode
swarm (blocks of the swarm's default size, ``auto_batch``) against a real server on a temporary
SQLite database, and a per-user swarm (one agent per user, 64 requests in flight) up to
``--peruser-max`` users (the per-user path costs two requests per user: at 10^7 that would take
hours here). Every HTTP estimate must equal
the in-process one (1e-9 relative). Prints a table of seconds and microseconds per user, writes
it as CSV, and draws the curves (log-log, µs per user against users) to ``--figure``.

    python benchmarks/bench_scaling.py [--sizes 1000,10000,...] [--peruser-max N]
                                       [--samples M] [--figure PATH] [--csv PATH] [--seed S]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.driving import auto_batch
from fedldp.client.swarm.run import run_swarm
from fedldp.client.swarm.server_process import ServerProcess, sqlite_url
from fedldp.protocol.catalogue import get_protocol
from fedldp.threads import one_blas_thread

ROOT = Path(__file__).resolve().parents[1]
MODES = ("in process", "HTTP batch", "HTTP per user")
RELATIVE = 1e-9


def _http(population: Any, params: dict[str, Any], batch: int | None) -> tuple[float, Any]:
    """Seconds of one swarm against a fresh server, and its estimate."""
    with tempfile.TemporaryDirectory(prefix="fedldp-scaling-") as tmp:
        server = ServerProcess(
            database_url=sqlite_url(Path(tmp) / "scaling.db"),
            env={"FEDLDP_LOG_LEVEL": "warning"},
            log=Path(tmp) / "server.log",
        )
        with server:
            server.wait_healthy()
            run = asyncio.run(
                run_swarm(
                    server.url,
                    population=population,
                    create=("user-mean", params),
                    batch=batch,
                    progress=False,
                )
            )
    return run.elapsed_s, run.result.estimate


def measure(size: int, samples: int, seed: int, peruser_max: int) -> dict[str, float]:
    """Seconds per mode at ``size`` users (per user only up to ``peruser_max``)."""
    spec = PopulationSpec(
        users=size, samples=samples, distribution="two-point", mean=0.3, epsilon=1.0
    )
    population = build_population(spec, seed)
    protocol = get_protocol("user-mean")
    params = fill_from_population(protocol, {}, population)
    began = time.perf_counter()
    local = simulate(protocol, protocol.parse_params(params), population, seed)
    seconds = {"in process": time.perf_counter() - began}
    here = float(np.asarray(local.result.estimate))
    runs: dict[str, int | None] = {"HTTP batch": auto_batch(size)}
    if size <= peruser_max:
        runs["HTTP per user"] = None
    for mode, batch in runs.items():
        elapsed, estimate = _http(population, params, batch)
        remote = float(np.asarray(estimate))
        if abs(remote - here) > RELATIVE * max(abs(here), 1e-300):
            raise SystemExit(f"{mode} at {size} users: estimate {remote!r} != {here!r}")
        seconds[mode] = elapsed
    return seconds


def draw(rows: list[dict[str, Any]], path: Path, samples: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.4), constrained_layout=True)
    for mode, marker in zip(MODES, "osD", strict=True):
        points = [(r["users"], 1e6 * r[mode] / r["users"]) for r in rows if r.get(mode)]
        if points:
            x, y = zip(*points, strict=True)
            ax.plot(x, y, marker=marker, label=mode)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("users in the population")
    ax.set_ylabel("wall time per user (µs)")
    ax.set_title(
        f"user-mean, {samples} samples per user, ε = 1: one study end to end\n"
        f"({platform.machine()}, {os.cpu_count()} cores, one SQLite server; swarm on the same "
        "machine)",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    one_blas_thread()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000,10000,100000,1000000,10000000")
    parser.add_argument("--peruser-max", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--figure", type=Path, default=ROOT / "docs" / "figures" / "scaling.png")
    parser.add_argument("--csv", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    print(f"{'users':>10} " + " ".join(f"{m:>22}" for m in MODES))
    for size in (int(s) for s in args.sizes.split(",")):
        seconds = measure(size, args.samples, args.seed, args.peruser_max)
        rows.append({"users": size, **seconds})
        cells = [
            f"{seconds[m]:8.2f} s {1e6 * seconds[m] / size:7.2f} µs" if m in seconds else "-"
            for m in MODES
        ]
        print(f"{size:>10} " + " ".join(f"{c:>22}" for c in cells), flush=True)
    if args.csv is not None:
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=["users", *MODES])
            writer.writeheader()
            writer.writerows(rows)
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    draw(rows, args.figure, args.samples)
    print(f"figure: {args.figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
