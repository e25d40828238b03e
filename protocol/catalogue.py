"""The protocol catalogue: every protocol the server and the simulator can run, by name."""

from __future__ import annotations

from typing import Any

from protocol import central, hetero, histoftree, learning, multi_d, semi_baselines, user_level
from protocol.base import Protocol

__all__ = ["CATALOGUE", "get_protocol"]

CATALOGUE: dict[str, Protocol[Any]] = {
    p.name: p
    for p in (
        *user_level.PROTOCOLS,
        *multi_d.PROTOCOLS,
        *learning.PROTOCOLS,
        *histoftree.PROTOCOLS,
        *semi_baselines.PROTOCOLS,
        *central.PROTOCOLS,
        *hetero.PROTOCOLS,
    )
}


def get_protocol(name: str) -> Protocol[Any]:
    """The protocol called ``name``; ValueError naming the known ones otherwise."""
    try:
        return CATALOGUE[name]
    except KeyError:
        known = ", ".join(sorted(CATALOGUE))
        raise ValueError(f"unknown protocol {name!r}; known protocols: {known}") from None
