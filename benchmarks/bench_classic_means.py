"""Benchmark: the classic mean protocols (protocol/classic/means.py) in process, vectorised:
reports privatized per second (the client step over a block of users, each drawing from its own
stream, ``UserStreams``) and aggregated per second (check and aggregate, in chunks of 8192, then
finalize), per protocol.

Users hold one sample (scalar, or a vector in [−1, 1]^d), all at ε (default 1; the vector
protocols sample k = max(1, min(d, ⌊ε/2.5⌋)) coordinates). Prints one row per protocol.

    python benchmarks/bench_classic_means.py [--users N] [--dimension D] [--epsilon EPS] [--seed S]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fedldp.protocol.api import ReportChunk, RoundTask, UserData, UserStreams, stream_key
from fedldp.protocol.classic.means import PROTOCOLS, ClassicMean
from fedldp.threads import one_blas_thread

CHUNK = 8192


def measure(
    protocol: ClassicMean, users: int, d: int, eps: float, seed: int
) -> tuple[float, float, float]:
    """(reports privatized per second, reports aggregated per second, |estimate − truth|∞)."""
    rng = np.random.default_rng(seed)
    shape = (users, d) if protocol.vector else (users,)
    values = rng.uniform(-1.0, 1.0, shape)
    data = UserData(values, np.ones(users, dtype=np.int64))
    params = protocol.parse_params({"dimension": d} if protocol.vector else {})
    epsilon = np.full(users, eps)
    plan = protocol.plan(params, epsilon, {}, seed)
    rp = plan.rounds[0]
    broadcast = protocol.broadcast(params, plan, 0, [])
    task = RoundTask.of(rp, broadcast)
    started = time.perf_counter()
    payloads = protocol.privatize(
        params, task, data, rp.epsilon, rp.groups(), UserStreams(stream_key(seed, 26), rp.cohort)
    )
    privatize_s = time.perf_counter() - started
    started = time.perf_counter()
    chunks = (
        ReportChunk(
            rp.cohort[s : s + CHUNK],
            rp.epsilon[s : s + CHUNK],
            rp.groups()[s : s + CHUNK],
            payloads[s : s + CHUNK],
        )
        for s in range(0, users, CHUNK)
    )
    result = protocol.finalize(
        params, plan, [protocol.aggregate(params, plan, 0, broadcast, chunks)]
    )
    aggregate_s = time.perf_counter() - started
    truth = values.reshape(users, -1).mean(axis=0)
    error = float(np.max(np.abs(np.atleast_1d(np.asarray(result.estimate)) - truth)))
    return users / privatize_s, users / aggregate_s, error


def main(argv: list[str] | None = None) -> int:
    one_blas_thread()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--users", type=int, default=1_000_000, help="users (reports) n")
    parser.add_argument("--dimension", type=int, default=8, help="d of the vector protocols")
    parser.add_argument("--epsilon", type=float, default=1.0, help="every user's ε")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    print(f"classic means, in process: n = {args.users:,}, ε = {args.epsilon:g}")
    print(f"{'protocol':<24}{'d':>5}{'privatized/s':>16}{'aggregated/s':>16}{'error (linf)':>15}")
    for protocol in PROTOCOLS:
        assert isinstance(protocol, ClassicMean)
        d = args.dimension if protocol.vector else 1
        private, aggregated, error = measure(protocol, args.users, d, args.epsilon, args.seed)
        print(f"{protocol.name:<24}{d:>5}{private:>16,.0f}{aggregated:>16,.0f}{error:>15.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
