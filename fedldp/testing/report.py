"""The conformance kit's report: one ``CheckResult`` per check, by name, in a ``KitReport``
(what ``fedldp.testing.check_protocol`` returns), and the error that names the failed ones."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = ["CheckResult", "KitReport", "ProtocolCheckError", "Status"]

Status = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True)
class CheckResult:
    """One check of one protocol: its name (``fedldp.testing.CHECKS``), its status and why (the
    failure's message, what a skip left out, or what a pass covered)."""

    name: str
    status: Status
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def __str__(self) -> str:
        return f"{self.name}: {self.status}" + (f" ({self.reason})" if self.reason else "")


class ProtocolCheckError(AssertionError):
    """A protocol failed checks of the kit; the message names each with its reason."""

    def __init__(self, protocol: str, failures: tuple[CheckResult, ...]) -> None:
        self.protocol = protocol
        self.failures = failures
        lines = "\n".join(f"  {f.name}: {f.reason}" for f in failures)
        names = ", ".join(f.name for f in failures)
        super().__init__(f"protocol {protocol!r} failed {len(failures)} check(s): {names}\n{lines}")


@dataclass(frozen=True)
class KitReport:
    """Every check of one protocol, in the order they ran."""

    protocol: str
    results: tuple[CheckResult, ...]

    def __iter__(self) -> Iterator[CheckResult]:
        return iter(self.results)

    def __getitem__(self, name: str) -> CheckResult:
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(f"no check {name!r} in this report; ran: {', '.join(self.names)}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.results)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if r.failed)

    @property
    def ok(self) -> bool:
        """True when no check failed (skipped ones do not count against it)."""
        return not self.failures

    def raise_for_failures(self) -> KitReport:
        """This report, or ``ProtocolCheckError`` naming every failed check."""
        if self.failures:
            raise ProtocolCheckError(self.protocol, self.failures)
        return self

    def __str__(self) -> str:
        return "\n".join([f"protocol {self.protocol!r}:", *(f"  {r}" for r in self.results)])
