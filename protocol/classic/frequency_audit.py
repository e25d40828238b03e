"""The end-to-end privacy audits of the classic frequency oracles (``ClientAudit``, docs/
architecture.md, *Trust*): each protocol's own client step at the ε its plan charges, the audited
user's samples all item 0 against all item 1 (k = 4 items), and a statistic on which some event
has probability ratio exactly e^ε (the cases are tight):

* GRR: "the report is item 0": p against q;
* SUE, OUE, SS: bit 0 minus bit 1; the event "bit 0 set, bit 1 not" has p(1 − q) against
  q(1 − p) for unary encoding (e^ε for both SUE and OUE), and for subset selection the subsets
  holding item 0 but not item 1, each of weight e^ε under item 0 and 1 under item 1;
* BLH, OLH: 1[H(0) = y] − 1[H(1) = y] (the user's hash evaluated on both items); the event
  "H(0) = y ≠ H(1)" has Pr[H(0) ≠ H(1)]·p against Pr[H(0) ≠ H(1)]·p·e^−ε;
* HR: H[1, y] − H[2, y] (rows of items 0 and 1); the event "y in C_0 but not C_1" has p/2
  against (1 − p)/2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedldp.protocol.api import (
    ClientAudit,
    ClientStep,
    FloatArray,
    IntArray,
    Protocol,
    UserData,
    client_step,
    one_user,
)
from fedldp.protocol.classic import hashing
from fedldp.protocol.classic.frequency_oracles import PROTOCOLS, LocalHashing

__all__ = ["AUDIT_ITEMS", "CLIENT_AUDITS"]

AUDIT_ITEMS = 4
"""k of the audited studies."""
_SAMPLES = 3
"""Samples of the audited user (all one item, so whichever it picks is that item)."""

Statistic = Callable[[ClientStep, UserData, UserData], Callable[[FloatArray], FloatArray]]


def _items(item: int) -> UserData:
    return one_user(np.full(_SAMPLES, item, dtype=np.int64))


def _is_item_zero(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
    return lambda z: np.asarray(z[:, 0] == 0, dtype=np.float64)


def _bit_difference(
    step: ClientStep, a: UserData, b: UserData
) -> Callable[[FloatArray], FloatArray]:
    return lambda z: np.asarray(z[:, 0] - z[:, 1], dtype=np.float64)


def _hash_difference(
    step: ClientStep, a: UserData, b: UserData
) -> Callable[[FloatArray], FloatArray]:
    def statistic(z: FloatArray) -> FloatArray:
        w = z.astype(np.int64)
        bits = w.shape[1] - 2
        coefficients, offset, y = w[:, :bits], w[:, bits], w[:, bits + 1]
        g = _ranges(step, w.shape[0])  # the range at the charged ε (a function of the report)
        h0 = hashing.hash_values(coefficients, offset, g, np.zeros_like(y))
        h1 = hashing.hash_values(coefficients, offset, g, np.ones_like(y))
        return np.asarray((h0 == y).astype(np.float64) - (h1 == y), dtype=np.float64)

    return statistic


def _ranges(step: ClientStep, n: int) -> IntArray:
    protocol = step.protocol
    if not isinstance(protocol, LocalHashing):
        raise TypeError(f"{protocol.name} is not a local-hashing protocol")
    return protocol.ranges(np.full(n, float(step.epsilon)))


def _hadamard_difference(
    step: ClientStep, a: UserData, b: UserData
) -> Callable[[FloatArray], FloatArray]:
    def statistic(z: FloatArray) -> FloatArray:
        y = z[:, 0].astype(np.int64)
        row1 = 1 - 2 * (np.bitwise_count(y & 1).astype(np.int64) % 2)
        row2 = 1 - 2 * (np.bitwise_count(y & 2).astype(np.int64) % 2)
        return np.asarray(row1 - row2, dtype=np.float64)

    return statistic


_STATISTICS: dict[str, tuple[str, Statistic]] = {
    "classic-grr": ("statistic: the report is item 0", _is_item_zero),
    "classic-sue": ("statistic: bit 0 − bit 1", _bit_difference),
    "classic-oue": ("statistic: bit 0 − bit 1", _bit_difference),
    "classic-ss": ("statistic: bit 0 − bit 1 of the subset", _bit_difference),
    "classic-blh": ("statistic: 1[H(0) = y] − 1[H(1) = y]", _hash_difference),
    "classic-olh": ("statistic: 1[H(0) = y] − 1[H(1) = y]", _hash_difference),
    "classic-hr": ("statistic: H[1, y] − H[2, y]", _hadamard_difference),
}


def _case(protocol: Protocol[Any]) -> ClientAudit:
    summary, statistic = _STATISTICS[protocol.name]
    background = _items(0).take(np.zeros(2, dtype=np.int64))

    def setup(epsilon: float) -> ClientStep:
        return client_step(protocol, {"domain_size": AUDIT_ITEMS}, epsilon, background, 0)

    return ClientAudit(
        protocol.name,
        "report",
        f"every sample item 0 against item 1 (k = {AUDIT_ITEMS}); {summary}",
        setup,
        _items(0),
        _items(1),
        statistic,
    )


CLIENT_AUDITS: tuple[ClientAudit, ...] = tuple(_case(p) for p in PROTOCOLS)
"""One end-to-end audit per classic frequency oracle (``fedldp.protocol.catalogue``)."""
