"""Benchmark: what the observation middleware (request id, metrics; fedldp.server.web.observe) adds
to one request (issue 12: the per-user path must stay cheap).

Calls the ASGI callables directly (no server, no socket, no client library) in a loop, for
``GET /health`` (almost no work) and for a participant's ``GET …/participants/{id}/task`` (the
per-user path, one database read): the app as built, and the same app with the middleware taken
out, alternating, best of several repeats (the machine is shared: the best is the least
disturbed). Prints microseconds per request of each and their difference.

    python benchmarks/bench_overhead.py [--requests N] [--repeats R]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx

from fedldp.protocol.core.wire import EnrollmentBatch, StudyCreate, StudyView
from fedldp.server.settings import Settings
from fedldp.server.web.app import create_app
from fedldp.server.web.observe import Observe


async def call(app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]]) -> int:
    """One request through the ASGI app; its status."""
    status = 0
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"bench"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    return status


async def per_request_us(
    app: Any, path: str, headers: list[tuple[bytes, bytes]], n: int, repeats: int
) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            status = await call(app, "GET", path, headers)
            assert status == 200, status
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


async def main(requests: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{Path(tmp) / 'bench.db'}")
        app = create_app(settings, sweeper=False)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
            body = StudyCreate(protocol="hetero-mean-laplace", seed=1).model_dump(mode="json")
            study = StudyView.model_validate_json(
                (await http.post("/v1/studies", json=body)).content
            )
            enrolled = EnrollmentBatch.model_validate_json(
                (
                    await http.post(
                        f"/v1/studies/{study.id}/participants/batch",
                        json={"participants": [{"epsilon": 1.0}] * 2},
                    )
                ).content
            )
            await http.post(f"/v1/studies/{study.id}/start")
        token = enrolled.enrollments[0].token
        task = f"/v1/studies/{study.id}/participants/0/task"
        auth = [(b"authorization", f"Bearer {token}".encode())]
        bare = create_app(settings, sweeper=False)
        bare.user_middleware = [m for m in bare.user_middleware if m.cls is not Observe]  # type: ignore[comparison-overlap]
        print(f"{'':<12} {'with':>10} {'without':>10} {'added':>10}  (µs/request)")
        for name, path, headers in (("GET /health", "/health", []), ("GET task", task, auth)):
            best = {"with": float("inf"), "without": float("inf")}
            for _ in range(repeats):
                for label, application in (("with", app), ("without", bare)):
                    us = await per_request_us(application, path, headers, requests, 1)
                    best[label] = min(best[label], us)
            added = best["with"] - best["without"]
            print(f"{name:<12} {best['with']:10.1f} {best['without']:10.1f} {added:10.1f}")
        for application in (app, bare):
            application.state.ctx.db.dispose()
    # the middleware alone, around an app that answers at once: its own cost, without the noise
    # of the thread pool and the database that the shared machine adds to the rows above
    scope_route = SimpleNamespace(path="/health")  # what the router leaves in the scope

    async def instant(scope: Any, receive: Any, send: Any) -> None:
        scope["route"] = scope_route
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    observed = Observe(instant, app.state.ctx.metrics)
    best = {"with": float("inf"), "without": float("inf")}
    for _ in range(repeats):
        for label, callable_ in (("with", observed), ("without", instant)):
            us = await per_request_us(callable_, "/health", [], requests * 10, 1)
            best[label] = min(best[label], us)
    added = best["with"] - best["without"]
    print(f"{'no-op app':<12} {best['with']:10.1f} {best['without']:10.1f} {added:10.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.repeats))
