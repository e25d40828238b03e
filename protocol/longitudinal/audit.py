"""The end-to-end privacy audits of the one-shot reports (``ClientAudit``; the catalogue's
``CLIENT_AUDITS``): each protocol's own ``privatize`` on the worst-case neighbours of
docs/longitudinal.md, at the ε its plan charges. Each audited draw is another participant index,
so the memoized (device-stream) part is drawn afresh per draw: the audit sees the one-shot law,
whose ε the docs derive (the longitudinal guarantee is tests/protocol/test_longitudinal.py's).

* memo-rappor (k = 4, f = 0.1, ε_∞ = 5.9 above the audited ε's): every sample item 0 against
  item 1, statistic S_0 − S_1; the event {S_0 = 1, S_1 = 0} has probabilities q*² and
  (1 − q*)², e^ε apart (q* = e^{ε/2}/(1 + e^{ε/2})).
* memo-1bitmean (m = 1, s = 1 and s = 4): every sample 0 against every sample m, statistic the
  bit; its probabilities e^ε/(e^ε + 1) and 1/(e^ε + 1) are e^ε apart.
* memo-dbitflip (k = d = 2, so both buckets are sampled): bucket 0 against bucket 1, statistic
  b(bucket 0) − b(bucket 1); the event {1, 0} has probabilities e^ε/(e^{ε/2} + 1)² and
  1/(e^{ε/2} + 1)².
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedldp.protocol.api import (
    ClientAudit,
    ClientStep,
    FloatArray,
    Protocol,
    UserData,
    client_step,
    one_user,
)
from fedldp.protocol.longitudinal.rappor import MemoRappor
from fedldp.protocol.longitudinal.telemetry import MemoDBitFlip, MemoOneBitMean

__all__ = ["AUDIT_SAMPLES", "CLIENT_AUDITS"]

AUDIT_SAMPLES = 4
"""Samples of the audited user (all equal, so its value is that sample)."""
_BACKGROUND = 2
"""Participants of the audited study."""


def _setup(protocol: Protocol[Any], params: Mapping[str, Any]) -> Callable[[float], ClientStep]:
    background = one_user(np.zeros(AUDIT_SAMPLES)).take(np.zeros(_BACKGROUND, np.int64))

    def setup(epsilon: float) -> ClientStep:
        return client_step(protocol, params, epsilon, background, 0)

    return setup


def _rows(z: FloatArray) -> FloatArray:
    return np.asarray(z, dtype=np.float64).reshape(np.asarray(z).shape[0], -1)


def _difference(first: int) -> Callable[[ClientStep, UserData, UserData], Callable[..., Any]]:
    """The report's entry ``first`` minus entry ``first + 1``: RAPPOR's bits of items 0 and 1
    (first = 0); dBitFlip's two bits with k = d = 2 (first = 2: the sampled buckets are 0 and 1,
    sorted, then their bits)."""

    def statistic(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
        def stat(z: FloatArray) -> FloatArray:
            r = _rows(z)
            return np.asarray(r[:, first] - r[:, first + 1], dtype=np.float64)

        return stat

    return statistic


def _bit(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
    return lambda z: _rows(z)[:, 0]


def _items(item: int) -> UserData:
    return one_user(np.full(AUDIT_SAMPLES, item, dtype=np.int64))


def _scalars(value: float) -> UserData:
    return one_user(np.full(AUDIT_SAMPLES, value, dtype=np.float64))


_RAPPOR, _ONE_BIT, _FLIP = MemoRappor(), MemoOneBitMean(), MemoDBitFlip()

CLIENT_AUDITS: tuple[ClientAudit, ...] = (
    ClientAudit(
        _RAPPOR.name,
        "report",
        "item 0 against item 1 (one-hot PRR + IRR)",
        _setup(_RAPPOR, {"domain_size": 4, "f": 0.1}),
        _items(0),
        _items(1),
        _difference(0),
    ),
    ClientAudit(
        _ONE_BIT.name,
        "report",
        "0 against m (grid {0, m})",
        _setup(_ONE_BIT, {"bound": 1.0, "levels": 1}),
        _scalars(0.0),
        _scalars(1.0),
        _bit,
    ),
    ClientAudit(
        _ONE_BIT.name,
        "report",
        "0 against m (grid of 4 steps)",
        _setup(_ONE_BIT, {"bound": 1.0, "levels": 4}),
        _scalars(0.0),
        _scalars(1.0),
        _bit,
        variant="levels-4",
    ),
    ClientAudit(
        _FLIP.name,
        "report",
        "bucket 0 against bucket 1 (k = d = 2)",
        _setup(_FLIP, {"domain_size": 2, "buckets": 2}),
        _items(0),
        _items(1),
        _difference(2),
    ),
)
