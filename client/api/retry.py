"""When and how long ``fedldp.client.api.client.ApiClient`` retries, and what it says meanwhile.

``RetryPolicy`` bounds the retries of one request by count (``attempts``) and, optionally, by time
(``deadline_s``); ``notify`` receives one line per retry (``retrying in 2 s (connection refused,
attempt 3 of 10)…``), so a client that waits for an unreachable server can say so. The policy is a
frozen, picklable value: the swarm hands it to its worker processes.
"""

from __future__ import annotations

import email.utils
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

__all__ = ["RetryNotice", "RetryPolicy", "failure_reason", "parse_retry_after", "stderr_notice"]

RetryNotice = Callable[[str], None]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry (the defaults ride out a server restart of ~20 s)."""

    attempts: int = 10
    """Total tries of one request, the first included."""
    base_delay: float = 0.1
    max_delay: float = 5.0
    max_retry_after: float = 60.0
    """Upper bound on a server-sent ``Retry-After``."""
    deadline_s: float | None = None
    """Give up once this many seconds have passed since the request's first try, instead of
    waiting for a retry that would end later (None: only ``attempts`` bounds the retries)."""
    notify: RetryNotice | None = None
    """Called with one line before each wait (a module-level function: it crosses processes)."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be >= 1")
        if not 0 <= self.base_delay <= self.max_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")
        if self.deadline_s is not None and not self.deadline_s >= 0:
            raise ValueError("deadline_s must be >= 0")

    def backoff(self, retry: int, rng: random.Random) -> float:
        """Delay before retry number ``retry`` (1, 2, ...): doubling, capped, "equal jitter"
        (uniform in [½, 1] of the step) so that a crowd of clients does not retry in lockstep."""
        step = min(self.max_delay, self.base_delay * 2.0 ** (retry - 1))
        return step * (0.5 + 0.5 * rng.random())

    def delay(self, retry: int, rng: random.Random, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        return self.backoff(retry, rng)

    def progress(self, attempt: int) -> str:
        """Where the retries stand before try ``attempt`` + 1, for a notice."""
        if self.deadline_s is not None:
            return f"giving up after {self.deadline_s:g} s"
        return f"attempt {attempt + 1} of {self.attempts}"

    def gives_up(self, attempt: int, elapsed_s: float, delay_s: float) -> bool:
        """True when try number ``attempt`` was the last: no tries left, or the next would start
        past the deadline."""
        if attempt >= self.attempts:
            return True
        return self.deadline_s is not None and elapsed_s + delay_s > self.deadline_s


def failure_reason(exc: httpx.TransportError) -> str:
    """A few words for a network failure: ``connection refused``, ``connect timed out``, …"""
    text = str(exc).lower()
    if isinstance(exc, httpx.ConnectTimeout):
        return "connect timed out"
    if isinstance(exc, httpx.ConnectError):
        if any(isinstance(e, ConnectionRefusedError) for e in _causes(exc)):
            return "connection refused"
        for words in ("connection refused", "name or service not known", "no route to host"):
            if words in text:
                return words
        return "cannot connect"
    if isinstance(exc, httpx.TimeoutException):
        return type(exc).__name__.replace("Timeout", " timed out").lower().strip()
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc``, its causes and contexts, and the members of exception groups among them (anyio
    reports a refused connection as "All connection attempts failed" caused by a group)."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 50:
        e = todo.pop()
        if any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
        if isinstance(e, BaseExceptionGroup):
            todo += list(e.exceptions)
    return seen


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


_last_notice = [float("-inf")]
_notice_lock = threading.Lock()
NOTICE_INTERVAL_S = 1.0


def stderr_notice(line: str) -> None:
    """``notify`` for the command line: the line on stderr, at most one a second per process
    (a swarm's many agents would otherwise repeat the same wait)."""
    with _notice_lock:
        now = time.monotonic()
        if now - _last_notice[0] < NOTICE_INTERVAL_S:
            return
        _last_notice[0] = now
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
