"""What simulated users do besides the protocol: drop out, answer late, join late, or attack.

docs/architecture.md, "Events, behaviour, experiments": behaviour is drawn from the *private*
population seed (never sent to the server), per user, from the counter-based stream
``behaviour_key(population_seed)`` keyed by the user's population slot
(``fedldp.protocol.core.streams``), so ``fedldp simulate``, ``fedldp swarm`` and the Python API draw
exactly the same roles and agree to 1e-9 whenever the server closes its rounds on the same reports.
Draw ``j`` of a user's stream is fixed:

* draw 0: it **joins late** (enrolls after the study started; the server refuses it, so it is not
  among the n participants) when below ``join_late``;
* draw 1: it **answers late** (``late_delay_s`` seconds after getting each task) when below
  ``late_fraction``. If the delay exceeds the round deadline the server has closed the round by
  then and refuses the report (``round_closed``): the simulator refuses it too (counted ``late``);
  a shorter delay only slows the round down;
* draw 2: it is a **fake user** following ``attack`` instead of the protocol when below
  ``attackers`` (attackers are counted in n, they enroll like everyone else);
* draw 3 + k: it **leaves** before round k when below the dropout probability of round k; once
  gone it never comes back (so it is absent from every round from k on).

Attacks (fake users' reports, which still go through the server's checks; a report that fails
them is refused and counted, in process as over HTTP):

* ``input``: the honest randomizer on the worst-case input: every sample far above the domain
  (``INPUT_EXTREME``, which the protocol's own clipping brings to the domain's upper end), or, for
  categorical data, the first target item;
* ``output``: the plausible report that shifts the estimate most: the protocol's own when it
  defines ``Protocol.output_attack_reports`` (the admissible reports that shift its estimate
  most upwards: ``classic-ss``'s top d items, a sampled vector mean's k coordinates at their
  bound, ...), else the upper end of the protocol's report bounds (``Protocol.report_bounds``:
  the largest plausible Laplace value, the +1 bit of randomized response, ...). That lies within
  the plausibility bounds, but a protocol whose own ``check`` constrains reports further refuses
  it (``hetero-mean-duchi``'s reports lie on a sphere, ``krr-tree``'s coordinates are bin
  centres): the round counts it as refused;
* ``max-gain`` (the frequency oracles): the report that raises the target items' estimates most
  (Cao et al., USENIX Security 2021, maximal gain attack): the protocol's own when it defines
  ``Protocol.max_gain_reports`` (the classic oracles do, a plugin may), else
  ``hetero-frequency`` (JL oracle): the attacker's row j with the sign that the targets' column
  entries agree on. ``user-frequency`` (Hadamard coefficients): in stage two every component at
  the end of its plausible range (``report_bounds``) on the targets' side, in stage one the
  honest randomizer on the first target (``_max_gain_hadamard``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from fedldp.client.seeds import behaviour_key
from fedldp.protocol.core.base.protocol import Params, Protocol
from fedldp.protocol.core.base.records import BoolArray, FloatArray, IntArray, RoundTask, UserData
from fedldp.protocol.core.streams import StreamKey, UserStreams
from fedldp.protocol.mechanisms.randomizers import jl_sign
from fedldp.protocol.user_level import components as comp
from fedldp.protocol.user_level.multi_d import FrequencyParams, UserFrequency

__all__ = [
    "ATTACKS",
    "INPUT_EXTREME",
    "AttackName",
    "Behaviour",
    "Roles",
    "attack_payloads",
    "parse_dropout",
    "parse_late",
    "respond",
]

AttackName = Literal["input", "output", "max-gain"]
ATTACKS: tuple[str, ...] = get_args(AttackName)
INPUT_EXTREME = 1e6
"""The ``input`` attacker's sample value: far above any domain, clipped to its upper end."""

_JOIN, _LATE, _ATTACK, _DROP = 0, 1, 2, 3


def _fraction(value: float, name: str) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value:g}")
    return float(value)


def parse_dropout(text: str) -> tuple[float, ...]:
    """``"P"`` or ``"P0,P1,…"`` (per round; the last one holds for later rounds)."""
    try:
        values = tuple(float(p) for p in text.split(","))
    except ValueError:
        raise ValueError(f"--dropout takes P or P0,P1,…, got {text!r}") from None
    for p in values:
        _fraction(p, "a dropout probability")
    return values


def parse_late(text: str) -> tuple[float, float]:
    """``"F:S"``: a fraction F of the users answers S seconds late."""
    try:
        f, s = (float(v) for v in text.split(":"))
    except ValueError:
        raise ValueError(f"--late takes F:S (fraction:seconds), got {text!r}") from None
    if not s >= 0.0:
        raise ValueError(f"the late delay must be >= 0 seconds, got {s:g}")
    return _fraction(f, "the late fraction"), s


@dataclass(frozen=True)
class Behaviour:
    """The behaviour options (module docstring); the default is everyone online, fast, honest."""

    dropout: tuple[float, ...] = ()
    late_fraction: float = 0.0
    late_delay_s: float = 0.0
    join_late: float = 0.0
    attack: AttackName | None = None
    attackers: float = 0.0
    targets: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for p in self.dropout:
            _fraction(p, "a dropout probability")
        _fraction(self.late_fraction, "the late fraction")
        _fraction(self.join_late, "the join-late fraction")
        _fraction(self.attackers, "the attacker fraction")
        if not self.late_delay_s >= 0.0:
            raise ValueError("the late delay must be >= 0 seconds")
        if self.attack is not None and self.attack not in ATTACKS:
            raise ValueError(f"unknown attack {self.attack!r}; known: {', '.join(ATTACKS)}")
        if (self.attack is None) != (self.attackers == 0.0):
            raise ValueError("give an attack together with a fraction of attackers > 0")
        if self.attack == "max-gain" and not self.targets:
            raise ValueError("the max-gain attack needs target items (--targets)")
        if any(t < 0 for t in self.targets):
            raise ValueError("target items are indices >= 0")

    @property
    def honest(self) -> bool:
        """True when nobody drops out, answers late, joins late or attacks."""
        return self == Behaviour()

    def dropout_at(self, round_index: int) -> float:
        if not self.dropout:
            return 0.0
        return self.dropout[min(round_index, len(self.dropout) - 1)]

    def describe(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Roles:
    """The behaviour drawn for a population under its private seed (module docstring)."""

    def __init__(self, behaviour: Behaviour, population_seed: int) -> None:
        self.behaviour = behaviour
        self.key: StreamKey = behaviour_key(population_seed)

    def _draws(self, slots: IntArray, count: int) -> FloatArray:
        s = np.asarray(slots, dtype=np.int64)
        return UserStreams(self.key, s).random((s.shape[0], count))

    def joins_late(self, slots: IntArray) -> BoolArray:
        return self._draws(slots, 1)[:, _JOIN] < self.behaviour.join_late

    def enrolled(self, n: int) -> IntArray:
        """The population slots that enroll in time (all but the late joiners), in order."""
        return np.flatnonzero(~self.joins_late(np.arange(n, dtype=np.int64))).astype(np.int64)

    def attackers(self, slots: IntArray) -> BoolArray:
        if self.behaviour.attack is None:
            return np.zeros(np.asarray(slots).shape[0], dtype=np.bool_)
        return self._draws(slots, _ATTACK + 1)[:, _ATTACK] < self.behaviour.attackers

    def late(self, slots: IntArray) -> BoolArray:
        """Users who answer ``late_delay_s`` seconds late."""
        return self._draws(slots, _LATE + 1)[:, _LATE] < self.behaviour.late_fraction

    def present(self, slots: IntArray, round_index: int) -> BoolArray:
        """Users still there at round ``round_index`` (none left before any round up to it)."""
        u = self._draws(slots, _DROP + round_index + 1)[:, _DROP:]
        p = np.array([self.behaviour.dropout_at(j) for j in range(round_index + 1)])
        return np.asarray(np.all(u >= p[None, :], axis=1), dtype=np.bool_)

    def too_late(self, slots: IntArray, round_deadline_s: float) -> BoolArray:
        """Late users whose delay passes the round deadline: the server refuses their reports."""
        if self.behaviour.late_delay_s <= round_deadline_s:
            return np.zeros(np.asarray(slots).shape[0], dtype=np.bool_)
        return self.late(slots)


def _worst_case(protocol: Protocol[Any], data: UserData, targets: tuple[int, ...]) -> UserData:
    """The ``input`` attacker's data: every sample at ``INPUT_EXTREME`` (labels too), or the
    first target item (item 0 without targets) for categorical data."""
    if protocol.data_kind == "categorical":
        item = targets[0] if targets else 0
        return UserData(np.full_like(data.values, item), data.counts, data.labels)
    if protocol.data_kind == "labeled":
        assert data.labels is not None
        return UserData(data.values, data.counts, np.full_like(data.labels, INPUT_EXTREME))
    return UserData(np.full_like(data.values, INPUT_EXTREME), data.counts, data.labels)


def attack_payloads(
    behaviour: Behaviour,
    protocol: Protocol[Any],
    params: Params,
    task: RoundTask,
    data: UserData,
    epsilon: FloatArray,
    group: IntArray,
    rng: UserStreams,
) -> FloatArray:
    """The attackers' payloads for ``task`` (shape ``(n, *task.payload_shape)``); ValueError
    when the attack is not defined for the protocol."""
    attack = behaviour.attack
    shape = (epsilon.shape[0], *task.payload_shape)
    if attack == "output":
        crafted = protocol.output_attack_reports(params, task, epsilon, group, rng)
        if crafted is not None:  # the protocol's own
            return np.asarray(crafted, dtype=np.float64).reshape(shape)
        bounds = protocol.report_bounds(params, task, epsilon, group)
        if bounds is None:
            raise ValueError(
                f"the output attack needs report bounds, which {protocol.name} round "
                f"{task.round} does not declare: define {protocol.name}'s report_bounds(params, "
                "task, epsilon, group) to return (lo, hi), the range of its honest reports "
                "(e.g. (0, k - 1) for an item, (-1, 1) for a sign; Laplace: "
                "fedldp.protocol.api.laplace_reach)"
            )
        return np.broadcast_to(np.asarray(bounds[1], dtype=np.float64), shape).copy()
    if attack == "input":
        worst = _worst_case(protocol, data, behaviour.targets)
        return protocol.privatize(params, task, worst, epsilon, group, rng)
    if attack == "max-gain":
        crafted = protocol.max_gain_reports(params, task, behaviour.targets, epsilon, group, rng)
        if crafted is not None:  # the protocol's own (the classic oracles', a plugin's)
            return np.asarray(crafted, dtype=np.float64).reshape(shape)
        if task.payload_kind == "index-sign":
            return _max_gain_jl(
                behaviour.targets, protocol, params, task, data, epsilon, group, rng
            )
        if isinstance(protocol, UserFrequency):
            return _max_gain_hadamard(
                behaviour.targets, protocol, params, task, data, epsilon, group, rng
            )
        raise ValueError(
            f"the max-gain attack is defined for the frequency oracles hetero-frequency and "
            f"user-frequency and for protocols that define Protocol.max_gain_reports, not "
            f"{protocol.name}"
        )
    raise ValueError("no attack was given")


def _max_gain_jl(
    targets: tuple[int, ...],
    protocol: Protocol[Any],
    params: Params,
    task: RoundTask,
    data: UserData,
    epsilon: FloatArray,
    group: IntArray,
    rng: UserStreams,
) -> FloatArray:
    """The JL oracle: the honest row j, with the sign the targets' column entries agree on."""
    honest = protocol.privatize(params, task, _worst_case(protocol, data, ()), epsilon, group, rng)
    m, seed, k = (int(task.broadcast[key]) for key in ("m", "jl_seed", "k"))
    if max(targets) >= k:
        raise ValueError(f"target items must lie in [0, {k})")
    rows = honest[:, 0].astype(np.int64)
    votes = np.zeros(rows.shape[0])
    for t in targets:
        votes += jl_sign(seed, m, k, rows, np.full_like(rows, t)).astype(np.float64)
    first = jl_sign(seed, m, k, rows, np.full_like(rows, targets[0]))
    honest[:, 1] = np.where(votes != 0, np.sign(votes), first.astype(np.float64))
    return honest


def _max_gain_hadamard(
    targets: tuple[int, ...],
    protocol: UserFrequency,
    params: Params,
    task: RoundTask,
    data: UserData,
    epsilon: FloatArray,
    group: IntArray,
    rng: UserStreams,
) -> FloatArray:
    """user-frequency (Hadamard coefficients, two stages per invocation). Stage one: the honest
    randomizer on the first target item (its histograms pull the intervals the targets' way).
    Stage two: each of the attacker's components at the end of its plausible range that raises
    the targets: p̂_t = Σ_j H_tj θ̂_j / √c, so component j goes to its upper bound where the
    targets' Hadamard entries sum to > 0, to its lower bound where < 0, and to the middle of its
    range on a tie (either end would raise some targets as much as it lowers the others: the
    targets' total gain is the same, and no target is sacrificed). Every value passes the
    server's range checks."""
    assert isinstance(params, FrequencyParams)
    if max(targets) >= params.domain_size:
        raise ValueError(f"target items must lie in [0, {params.domain_size})")
    if task.round % 2 == 0:
        item = UserData(np.full_like(data.values, targets[0]), data.counts, data.labels)
        return protocol.privatize(params, task, item, epsilon, group, rng)
    m = params.samples_per_user
    columns = [
        protocol.component_values(
            params, task.broadcast, UserData(np.full(m, t, dtype=data.values.dtype), np.array([m]))
        )[0]
        for t in targets
    ]
    votes = np.sign(np.sum(columns, axis=0))
    layout = comp.Layout.from_json(task.broadcast["layout"])
    own, mask, _ = comp.gather_components(
        np.broadcast_to(votes, (group.shape[0], votes.shape[0])), layout, group
    )
    lo, hi = protocol.report_bounds(params, task, epsilon, group)
    ends = np.where(own > 0, hi, np.where(own < 0, lo, (lo + hi) / 2.0))
    return np.asarray(np.where(mask, ends, 0.0), dtype=np.float64)


def respond(
    protocol: Protocol[Any],
    params: Params,
    task: RoundTask,
    slots: IntArray,
    epsilon: FloatArray,
    group: IntArray,
    data_of: Callable[[IntArray], UserData],
    key: StreamKey,
    roles: Roles | None,
) -> FloatArray:
    """Payloads of the users ``slots`` (population indices) for ``task``: honest users run the
    protocol's ``privatize`` with their own streams under ``key``, the attackers among them their
    attack (also with their own streams). Rows are in ``slots`` order."""
    s = np.asarray(slots, dtype=np.int64)
    bad = np.zeros(s.shape[0], dtype=np.bool_) if roles is None else roles.attackers(s)
    if not bad.any():
        return protocol.privatize(params, task, data_of(s), epsilon, group, UserStreams(key, s))
    out = np.zeros((s.shape[0], *task.payload_shape), dtype=np.float64)
    good = ~bad
    if good.any():
        g = s[good]
        out[good] = protocol.privatize(
            params, task, data_of(g), epsilon[good], group[good], UserStreams(key, g)
        )
    assert roles is not None
    b = s[bad]
    out[bad] = attack_payloads(
        roles.behaviour,
        protocol,
        params,
        task,
        data_of(b),
        epsilon[bad],
        group[bad],
        UserStreams(key, b),
    )
    return out
