"""Benchmark: ``fedldp simulate`` against the bare cost of generating the population's data.

Runs, in one process, (1) ``population.data`` over every round cohort of the plan in the same
blocks the simulator uses, discarding the data, and (2) the full simulation of ``user-mean``
(n = 10^6 users, m = 256 two-point samples, ε = 1 by default). Prints both times, their ratio
(target <= 1.5: the protocol's own work should cost less than half the data generation) and the
process's peak resident memory (target < 2 GiB: memory must stay flat in n).

    python benchmarks/bench_simulate.py [--users N] [--samples M] [--chunk-size C] [--seed S]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.seeds import derive_seeds
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.protocol.catalogue import get_protocol
from fedldp.threads import one_blas_thread

RATIO_TARGET = 1.5
MEMORY_TARGET_GIB = 2.0


def peak_rss_gib() -> float:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**30


def main(argv: list[str] | None = None) -> int:
    one_blas_thread()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--protocol", default="user-mean")
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--chunk-size", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    spec = PopulationSpec(
        users=args.users, samples=args.samples, distribution="two-point", mean=0.3, epsilon=1.0
    )
    population = build_population(spec, args.seed)
    protocol = get_protocol(args.protocol)
    params = protocol.parse_params(fill_from_population(protocol, {}, population))
    plan = protocol.plan(
        params, population.epsilon, population.metadata, derive_seeds(args.seed)[0]
    )

    started = time.perf_counter()
    for rp in plan.rounds:
        for start in range(0, rp.cohort.size, args.chunk_size):
            population.data(rp.cohort[start : start + args.chunk_size])
    data_s = time.perf_counter() - started
    data_peak = peak_rss_gib()

    started = time.perf_counter()
    result = simulate(protocol, params, population, args.seed, chunk_size=args.chunk_size)
    simulate_s = time.perf_counter() - started
    peak = peak_rss_gib()

    ratio = simulate_s / data_s
    print(
        f"protocol {args.protocol}: n = {args.users}, m = {args.samples}, chunk {args.chunk_size}"
    )
    print(f"data generation only : {data_s:8.2f} s   (peak RSS {data_peak:.2f} GiB)")
    print(f"fedldp simulate      : {simulate_s:8.2f} s   (peak RSS {peak:.2f} GiB)")
    print(f"ratio                : {ratio:8.3f}     (target <= {RATIO_TARGET})")
    print(f"peak memory          : {peak:8.2f} GiB (target < {MEMORY_TARGET_GIB} GiB)")
    print(f"estimate {result.result.estimate!r}, truth {population.truth!r}")
    return 0 if ratio <= RATIO_TARGET and peak < MEMORY_TARGET_GIB else 1


if __name__ == "__main__":
    raise SystemExit(main())
