"""The ``behaviour`` keys of an experiment file: what simulated users do besides the protocol.

An experiment's trials run ``fedldp simulate``; its ``behaviour`` mapping (and ``behaviour.KEY``
grid axes) holds the behaviour options of ``fedldp simulate`` under the same names, ``-`` or
``_`` (``fedldp.client.behaviour``): ``dropout`` (P, a list per round, or "P0,P1"), ``late``
("F:S"), ``join-late``, ``attack``, ``attackers``, ``targets`` (a list, or "I,J"), and the rounds'
``round-deadline`` (seconds) and ``quorum``. ``attackers: 0`` means nobody attacks, whatever
``attack`` says, so an attacker-fraction axis may start at 0 beside a fixed ``attack``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fedldp.client.behaviour import ATTACKS, AttackName, Behaviour, parse_dropout, parse_late

__all__ = ["BEHAVIOUR_KEYS", "BehaviourKeyError", "Conduct", "conduct_of"]

BEHAVIOUR_KEYS = (
    "dropout",
    "late",
    "join_late",
    "attack",
    "attackers",
    "targets",
    "round_deadline",
    "quorum",
)


@dataclass(frozen=True)
class Conduct:
    """The ``simulate`` keyword arguments of a trial's behaviour keys."""

    behaviour: Behaviour | None
    round_deadline_s: float
    quorum: float


def _dropout(value: Any) -> tuple[float, ...]:
    if isinstance(value, list):
        return parse_dropout(",".join(str(float(v)) for v in value))
    return parse_dropout(str(value))


def _targets(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list) else str(value).split(",")
    try:
        return tuple(int(t) for t in items)
    except (TypeError, ValueError):
        raise ValueError(f"targets takes item indices (a list or I,J,...), got {value!r}") from None


class BehaviourKeyError(ValueError):
    """A bad behaviour value; ``key`` names the key it came from (for the file's line)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _fraction(keys: Mapping[str, Any], key: str) -> float:
    try:
        value = float(keys.get(key, 0.0))
    except (TypeError, ValueError):
        raise BehaviourKeyError(key, f"{key.replace('_', '-')} must be a number") from None
    if not 0.0 <= value <= 1.0:
        raise BehaviourKeyError(key, f"{key.replace('_', '-')} must lie in [0, 1], got {value:g}")
    return value


def conduct_of(raw: Mapping[str, Any]) -> Conduct:
    """The behaviour of a trial's ``behaviour`` keys (``-`` or ``_``); BehaviourKeyError (a
    ValueError) naming the bad key."""
    keys = {k.replace("-", "_"): v for k, v in raw.items()}
    unknown = sorted(set(keys) - set(BEHAVIOUR_KEYS))
    if unknown:
        known = ", ".join(k.replace("_", "-") for k in BEHAVIOUR_KEYS)
        raise BehaviourKeyError(
            unknown[0], f"unknown behaviour key {unknown[0]!r} (known: {known})"
        )
    attackers = _fraction(keys, "attackers")
    join_late = _fraction(keys, "join_late")
    attack: AttackName | None = keys.get("attack") if attackers > 0 else None
    if attack is not None and attack not in ATTACKS:
        raise BehaviourKeyError("attack", f"unknown attack {attack!r}; known: {', '.join(ATTACKS)}")
    parsed: dict[str, Any] = {}
    for key, parse in (("dropout", _dropout), ("late", parse_late), ("targets", _targets)):
        if key in keys:
            try:
                parsed[key] = parse(keys[key] if key != "late" else str(keys[key]))
            except ValueError as e:
                raise BehaviourKeyError(key, str(e)) from None
    late_fraction, late_delay = parsed.get("late", (0.0, 0.0))
    try:
        behaviour = Behaviour(
            dropout=parsed.get("dropout", ()),
            late_fraction=late_fraction,
            late_delay_s=late_delay,
            join_late=join_late,
            attack=attack,
            attackers=attackers if attack is not None else 0.0,
            targets=parsed.get("targets", ()),
        )
    except ValueError as e:  # an attack without what it needs (targets, a fraction)
        raise BehaviourKeyError("attack", str(e)) from None
    quorum = float(keys.get("quorum", 1.0))
    if not 0.0 < quorum <= 1.0:
        raise BehaviourKeyError("quorum", f"quorum must lie in (0, 1], got {quorum:g}")
    deadline = float(keys.get("round_deadline", 600.0))
    if not deadline > 0:
        raise BehaviourKeyError(
            "round_deadline", f"round-deadline must be > 0 seconds, got {deadline:g}"
        )
    return Conduct(None if behaviour.honest else behaviour, deadline, quorum)
