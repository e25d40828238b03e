"""Benchmark: what oversized batch bodies cost a real server (issue 23), and that a full batch
still passes.

Starts ``python -m fedldp.server`` (uvicorn) on a temporary SQLite database, then:

* sends an 80 MB body of ε's (``{"epsilons": [1.0, 1.0, …]}``, 16 million items) to
  ``POST /v1/studies/{id}/participants/batch`` from three uploaders at once (``--seconds S``:
  each sending one upload after another for S seconds), once with ``Content-Length`` and once
  chunked (``Transfer-Encoding: chunked``), each body written as fast as the server takes it
  until the answer arrives; meanwhile ``GET /health`` is asked every 10 ms. Targets: every upload is
  answered 413 ``body_too_large``; the server's peak RSS (``VmHWM``, reset before) exceeds its
  RSS before the uploads by less than 50 MB; no ``/health`` answer takes 100 ms or more. Also
  printed: the time to the answer, and the most bytes an upload wrote before it (into the
  sockets' buffers: the server stops reading at the refusal).
* enrolls one full batch (``MAX_BATCH`` ε's): target 201, with its time printed.

Before issue 23 the body was read and parsed whole: RSS went from 151 MB to 1.09 GB (1.25 GB for
three in parallel), the 422 came after 6 s and ``/health`` stalled 3-5 s.
Exits 1 if a target is missed.

    python benchmarks/bench_bodies.py [--megabytes M] [--uploads U] [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from fedldp.client.swarm.server_process import ServerProcess, sqlite_url
from fedldp.protocol.core.wire import MAX_BATCH

RSS_LIMIT_MB = 50.0
"""Most the server's peak RSS may grow during the uploads (MB, 10^6 bytes)."""
HEALTH_LIMIT_S = 0.100
"""Longest a ``/health`` answer may take during the uploads."""
HEALTH_EVERY_S = 0.010
CHUNK = 65_536


def memory_mb(pid: int) -> tuple[float, float]:
    """(peak, current) resident set size of process ``pid`` in MB (Linux ``/proc``)."""
    fields: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = float(value.split()[0]) * 1024 / 1e6  # kB
    return fields["VmHWM"], fields["VmRSS"]


def reset_peak(pid: int) -> None:
    """Reset the peak RSS of ``pid`` to its current RSS."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def flood(size: int) -> Iterator[bytes]:
    """``{"epsilons": [1.0, 1.0, …]}`` of about ``size`` bytes, in ``CHUNK``-byte pieces."""
    item = b"1.0, "
    yield b'{"epsilons": [1.0'
    piece = item * (CHUNK // len(item))
    for _ in range(size // len(piece)):
        yield piece
    yield b"1.0]}"


@dataclass(frozen=True)
class Upload:
    status: int
    code: str
    sent: int
    seconds: float


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def upload(host: str, port: int, path: str, size: int, chunked: bool) -> Upload:
    """POST the flood to ``path``, writing until the answer arrives (or the server closes)."""
    began = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    framing = "transfer-encoding: chunked" if chunked else f"content-length: {size}"
    head = f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
    writer.write(f"{head}{framing}\r\n\r\n".encode())
    answer = asyncio.create_task(_read_answer(reader))
    sent = 0
    try:
        for piece in flood(size):
            if answer.done():
                break
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            await writer.drain()
            sent += len(piece)
        else:
            writer.write(b"0\r\n\r\n" if chunked else b"")
            await writer.drain()
    except ConnectionError:
        pass  # the server answered and closed the connection: the answer is read below
    status, body = await answer
    seconds = time.perf_counter() - began
    writer.close()
    return Upload(status, json.loads(body).get("code", ""), sent, seconds)


async def health_latencies(host: str, port: int, stop: asyncio.Event) -> list[float]:
    """Times of ``GET /health`` on one keep-alive connection, every ``HEALTH_EVERY_S``, until
    ``stop``."""
    reader, writer = await asyncio.open_connection(host, port)
    times: list[float] = []
    request = f"GET /health HTTP/1.1\r\nhost: {host}\r\n\r\n".encode()
    while not stop.is_set():
        began = time.perf_counter()
        writer.write(request)
        status, _ = await _read_answer(reader)
        times.append(time.perf_counter() - began)
        if status != 200:
            raise RuntimeError(f"/health answered {status}")
        await asyncio.sleep(HEALTH_EVERY_S)
    writer.close()
    return times


async def floods(
    server: ServerProcess, pid: int, path: str, args: argparse.Namespace, chunked: bool
) -> tuple[list[Upload], list[float], float]:
    """``args.uploads`` uploaders at once, each sending upload after upload for ``args.seconds``,
    with ``/health`` polled meanwhile: the uploads, the health latencies and the growth of the
    server's peak RSS (MB)."""
    _, before = memory_mb(pid)
    reset_peak(pid)
    stop = asyncio.Event()
    health = asyncio.create_task(health_latencies(server.host, server.port, stop))
    size = args.megabytes * 10**6
    ends = time.perf_counter() + args.seconds

    async def uploader() -> list[Upload]:
        done = [await upload(server.host, server.port, path, size, chunked)]
        while time.perf_counter() < ends:
            done.append(await upload(server.host, server.port, path, size, chunked))
        return done

    uploads = await asyncio.gather(*(uploader() for _ in range(args.uploads)))
    await asyncio.sleep(0.2)  # the server's memory after it let go of the uploads
    stop.set()
    latencies = await health
    peak, _ = memory_mb(pid)
    return [u for each in uploads for u in each], latencies, peak - before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--megabytes", type=int, default=80, help="size of each upload (MB)")
    parser.add_argument("--uploads", type=int, default=3, help="uploads at once")
    parser.add_argument(
        "--seconds", type=float, default=0.0, help="each uploader's uploads go on this long"
    )
    args = parser.parse_args(argv)
    ok = True
    with tempfile.TemporaryDirectory(prefix="fedldp-bench-") as tmp:
        server = ServerProcess(
            database_url=sqlite_url(Path(tmp) / "bench.db"),
            env={"FEDLDP_LOG_LEVEL": "warning"},
            log=Path(tmp) / "server.log",
        )
        with server:
            server.wait_healthy()
            assert server.process is not None
            pid = server.process.pid
            with httpx.Client(base_url=server.url, timeout=300.0) as http:
                body = {"protocol": "hetero-mean-rr", "params": {}, "seed": 1}
                created = http.post("/v1/studies", json=body)
                created.raise_for_status()
                study = created.json()["id"]
                path = f"/v1/studies/{study}/participants/batch"
                http.post(path, json={"epsilons": [1.0] * 10}).raise_for_status()  # warm-up
                for chunked in (False, True):
                    uploads, latencies, growth = asyncio.run(
                        floods(server, pid, path, args, chunked)
                    )
                    refused = all(u.status == 413 and u.code == "body_too_large" for u in uploads)
                    slowest = max(latencies)
                    passed = refused and growth < RSS_LIMIT_MB and slowest < HEALTH_LIMIT_S
                    ok &= passed
                    framing = "chunked" if chunked else "Content-Length"
                    print(
                        f"{args.uploads} uploaders of {args.megabytes} MB bodies for "
                        f"{args.seconds:g} s, {framing}: {len(uploads)} uploads, "
                        f"{sum(u.status == 413 for u in uploads)} answered 413 body_too_large"
                    )
                    times = sorted(u.seconds for u in uploads)
                    print(
                        f"  answer after {times[len(times) // 2] * 1e3:.1f} ms (median), "
                        f"{times[-1] * 1e3:.1f} ms (slowest); at most "
                        f"{max(u.sent for u in uploads) / 1e6:.1f} MB written before it"
                    )
                    print(
                        f"  server peak RSS {growth:+6.1f} MB (limit +{RSS_LIMIT_MB:.0f}); "
                        f"/health slowest {slowest * 1e3:5.1f} ms of {len(latencies)} "
                        f"(limit {HEALTH_LIMIT_S * 1e3:.0f} ms)  " + ("PASS" if passed else "FAIL")
                    )
                began = time.perf_counter()
                full = http.post(path, json={"epsilons": [1.0] * MAX_BATCH})
                seconds = time.perf_counter() - began
                passed = full.status_code == 201
                ok &= passed
                print(
                    f"a full batch of {MAX_BATCH} ε's: {full.status_code} in {seconds:.2f} s  "
                    + ("PASS" if passed else "FAIL")
                )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
