"""Prometheus metrics of one server process (``GET /metrics``), in a registry of its own per app.

What is counted: HTTP requests by method, route template and status, with a latency histogram by
method and route template; reports accepted, resent (duplicates) and refused by error code; rounds
closed; time spent in database statements; and, read from the database when scraped, the studies
in each phase (``fedldp_studies{phase="running"}`` and ``…"enrolling"`` are the open ones).

Not multi-process safe: each process counts its own requests (prometheus-client's multiprocess
mode is not used). Run one server process per container (as docker-compose.yml does) and let
Prometheus scrape every replica as its own target, then ``sum`` the counters across them. The
``fedldp_studies`` gauge is read from the shared database, so every replica reports the same
values: aggregate it with ``max``, not ``sum``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import Engine, event

from fedldp.protocol.core.wire import BatchReceipt, StudyPhase

__all__ = ["LATENCY_BUCKETS", "Metrics"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DB_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)
PHASES: tuple[StudyPhase, ...] = ("enrolling", "running", "finished", "failed", "cancelled")


class _Studies(Collector):
    """``fedldp_studies{phase}``, counted in the database when scraped."""

    def __init__(self, count: Callable[[], dict[str, int]]) -> None:
        self.count = count

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "fedldp_studies", "Studies in each phase (from the database)", labels=["phase"]
        )
        counts: dict[str, int] = self.count()
        for phase in PHASES:
            family.add_metric([phase], counts.get(phase, 0))
        yield family


class Metrics:
    """The app's metrics; ``count_studies`` returns the number of studies per phase."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "fedldp_http_requests",
            "HTTP requests by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "fedldp_http_request_duration_seconds",
            "Time from a request's arrival to its response's end (event streams: their length)",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.reports = Counter(
            "fedldp_reports",
            "Reports by outcome (accepted, duplicate, refused) and error code (refused ones)",
            ["outcome", "code"],
            registry=self.registry,
        )
        self.rounds_closed = Counter(
            "fedldp_rounds_closed", "Rounds this process closed", registry=self.registry
        )
        self.db_seconds = Histogram(
            "fedldp_db_statement_duration_seconds",
            "Time spent executing each database statement",
            buckets=DB_BUCKETS,
            registry=self.registry,
        )
        # labelled children cost a dictionary lookup and a lock each time; these are reused
        self._request_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def watch_studies(self, count: Callable[[], dict[str, int]]) -> None:
        """Export ``fedldp_studies{phase}`` from ``count()`` (a dict phase → studies)."""
        self.registry.register(_Studies(count))

    def watch_engine(self, engine: Engine) -> None:
        """Time every statement ``engine`` executes."""
        observe = self.db_seconds.observe

        @event.listens_for(engine, "before_cursor_execute")
        def _before(conn: Any, cursor: Any, statement: Any, *args: Any) -> None:
            conn.info.setdefault("fedldp_t0", []).append(time.perf_counter())

        @event.listens_for(engine, "after_cursor_execute")
        def _after(conn: Any, cursor: Any, statement: Any, *args: Any) -> None:
            observe(time.perf_counter() - conn.info["fedldp_t0"].pop())

        @event.listens_for(engine, "handle_error")
        def _failed(context: Any) -> None:
            starts = context.connection.info.get("fedldp_t0") if context.connection else None
            if starts:
                observe(time.perf_counter() - starts.pop())

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._request_children.get(key)
        if children is None:
            children = (
                self.requests.labels(method, route, str(status)),
                self.latency.labels(method, route),
            )
            self._request_children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def reports_stored(self, accepted: int, duplicates: int) -> None:
        if accepted:
            self.reports.labels("accepted", "").inc(accepted)
        if duplicates:
            self.reports.labels("duplicate", "").inc(duplicates)

    def reports_refused(self, code: str, count: int = 1) -> None:
        self.reports.labels("refused", code).inc(count)

    def batch(self, receipt: BatchReceipt) -> None:
        self.reports_stored(receipt.accepted, receipt.duplicates)
        for item in receipt.items:
            if item.code is not None:
                self.reports_refused(item.code)

    def latest(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)
