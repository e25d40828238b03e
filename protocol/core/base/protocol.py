"""The protocol abstraction: what the server and the in-process simulator drive.

A protocol is a named algorithm of the catalogue (docs/architecture.md, "Concepts"). Everything in
it is pure:

1. ``plan``: from the validated parameters, the enrolled participants' ε's (and public metadata)
   and the study seed, fix the rounds: each round's cohort (participant slots), the ε each cohort
   member is charged in it, its group (which sub-task a member serves), and its payload kind and
   shape. Infeasible plans (e.g. the stage-one condition of user-level-ldp.md §1.5) raise
   ``ValueError`` with a message a user can act on.
2. ``broadcast``: the public message of round k, computed from the plan and the outputs of the
   rounds before it (e.g. the interval [L, R] found by stage one). It carries every public constant
   a client needs, so the client never sees the plan.
3. ``privatize``: the client step. Vectorised over a block of users who share a round; each user's
   randomness comes from its own stream (``fedldp.protocol.core.streams``). Raw data never leaves
   it.
4. ``check``: which payloads are valid for the round (shape and finiteness are checked generically
   by ``valid_payloads``; a protocol adds its range checks: a bit is ±1, ‖Y‖ = B, ...);
   ``check_members`` the same per sender, from public enrollment metadata kept in the plan.
5. ``aggregate``: the server step, fed in chunks ordered by participant slot (so memory stays flat
   and arrival order never changes a result); returns the round's public output.
6. ``finalize``: the result (estimate, error bar, diagnostics) from the rounds' outputs.

Participants are identified by their *slot*: 0..n-1 in enrollment order. A participant's private
randomness is keyed by its slot under the population's private seed (never sent to the server);
cohorts are drawn from the public study seed.

The values these steps exchange (plans, tasks, report chunks, results) are in
``fedldp.protocol.core.base.records``. Each step's docstring below is its contract, the one a
plugin written against ``fedldp.protocol.api`` implements: what it may assume, what it may raise,
and what must be deterministic. In short: every step is a pure function of its arguments (the
server recomputes plans and broadcasts on every replica and after a restart, and the in-process
simulator must agree with a deployment to the last digit), ``privatize`` draws its randomness
only from the stream it is given, and steps signal bad input with ``ValueError`` alone (the
server fails the study with its message; any other exception is a bug, which fails only that
study, with a stack trace's last line for a reason).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from pydantic import BaseModel, ConfigDict

from fedldp.protocol.core.base.records import (
    JSON,
    BoolArray,
    DataKind,
    FloatArray,
    IntArray,
    PayloadKind,
    Plan,
    ReportChunk,
    Result,
    RoundPlan,
    RoundTask,
    Trust,
    UserData,
    check_epsilons,
    valid_payloads,
)
from fedldp.protocol.core.streams import RandomSource

if TYPE_CHECKING:  # dp_accounting takes half a second to import: only composing code pays it
    from dp_accounting import DpEvent

__all__ = [
    "Params",
    "Predictor",
    "Protocol",
    "cohort_permutation",
    "cohort_plan",
    "split_sizes",
]


class Params(BaseModel):
    """Base of every protocol's parameter model: validated, immutable, no unknown fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)


ParamsT = TypeVar("ParamsT", bound=Params)


class Protocol(ABC, Generic[ParamsT]):
    """A catalogue protocol. Subclasses set the class attributes and implement the steps.

    Required class attributes: ``name`` (the catalogue key, lower-case with hyphens; a plugin's
    is its entry point's name), ``summary`` (one line), ``source`` (paper and algorithm),
    ``heterogeneity`` (how unequal ε's are combined), ``data_kind`` and ``params_model`` (a
    ``Params`` subclass, instantiable from ``{}`` unless some fields are required). ``version``
    is the algorithm's own revision, shown in the catalogue (``GET /v1/protocols`` and
    ``fedldp protocols``, as ``version``); the code's version is its origin's
    (``fedldp.protocol.catalogue.Origin``: ``origin_version``, the one a study records and a
    server or swarm compares). One instance serves every study at once, from
    several threads: keep no per-study state on it."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    summary: ClassVar[str]  # one line
    source: ClassVar[str]  # paper and algorithm, e.g. "Zhao et al. 2024, Alg. 1"
    heterogeneity: ClassVar[str]  # how unequal ε's are combined
    dropout: ClassVar[str] = (
        "A round closed on a quorum (docs/architecture.md, 'Flow of a study') aggregates its "
        "responders: the estimator runs on them, its weights renormalised over who reported, and "
        "the error bar uses their count."
    )
    """What a round closed with fewer reports than planned estimates (the catalogue shows it)."""
    trust: ClassVar[Trust] = "local"
    data_kind: ClassVar[DataKind]
    params_model: type[ParamsT]

    def parse_params(self, raw: Mapping[str, Any] | None) -> ParamsT:
        """Validate raw parameters (pydantic ValidationError, a ValueError, on bad input)."""
        return self.params_model.model_validate(dict(raw or {}))

    def describe(self, epsilon: float = 1.0) -> JSON:
        """The catalogue entry: name, description, source, trust, parameter JSON schema, the
        fields of its broadcasts, and the smallest population it plans for at ``epsilon``."""
        return {
            "name": self.name,
            "version": self.version,
            "summary": self.summary,
            "source": self.source,
            "heterogeneity": self.heterogeneity,
            "dropout": self.dropout,
            "trust": self.trust,
            "data_kind": self.data_kind,
            "parameters": self.params_model.model_json_schema(),
            "broadcast_fields": dict(self.broadcast_fields),
            "population": self.population(epsilon),
        }

    def population(self, epsilon: float) -> JSON:
        """The catalogue's ``population`` entry at ``epsilon``: the minimum (``min_participants``
        without parameters), its rule in words, and the required parameters it depends on (when
        it depends on one, there is no single minimum and ``min_participants`` is None)."""
        return {
            "epsilon": epsilon,
            "min_participants": self.min_participants(epsilon),
            "rule": self.population_rule,
            "depends_on": self.population_depends_on(),
        }

    population_rule: ClassVar[str] = (
        "no condition on the number of participants beyond what its parameters imply: "
        "min_participants is the smallest population its default parameters plan for"
    )
    population_probe: ClassVar[Mapping[str, Any]] = {}
    """Values of required parameters for ``min_participants`` without parameters: ones the
    minimum does not depend on, or the least favourable value when it does and a worst case
    exists (``samples_per_user``: the largest, since more samples mean more stage-one bins). The
    population rule says which; tests/protocol/test_population.py checks the claim."""
    broadcast_fields: ClassVar[Mapping[str, str]] = {}
    """Each field of the protocol's round broadcasts (what a task's ``broadcast`` holds), with
    its meaning: what a client computes its payload from (docs/clients.md)."""

    def min_participants(self, epsilon: float, params: ParamsT | None = None) -> int | None:
        """The smallest number of participants, every one at ``epsilon``, for which ``plan``
        succeeds with ``params`` (by default: the default parameters with
        ``population_probe``; None when the minimum depends on a required parameter not given,
        see ``population_depends_on``, or when no population of up to ``2**21`` plans: a search
        beyond would take seconds per ε). The default searches ``plan`` itself, with
        ``population_metadata`` (feasibility is monotone in n for every catalogue protocol);
        protocols with a closed form override it."""
        if params is None:
            if self.population_depends_on():
                return None
            params = self.parse_params(self.population_probe)
        check_epsilons(np.array([epsilon]))

        def plans(n: int) -> bool:
            try:
                self.plan(
                    params, np.full(n, float(epsilon)), self.population_metadata(params, n), 0
                )
            except (ValueError, KeyError):
                return False
            return True

        high = 1
        while not plans(high):
            if high >= _MAX_PROBE:
                return None
            high *= 2
        low = high // 2  # plans(low) is False (or low == 0)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if plans(mid) else (mid, high)
        return high

    def population_depends_on(self) -> list[str]:
        """The required parameters (no default, not in ``population_probe``) that the minimum
        population depends on: with any of them, the catalogue states no single minimum."""
        fields = self.params_model.model_fields
        return sorted(
            name
            for name, info in fields.items()
            if info.is_required() and name not in self.population_probe
        )

    def data_range(self, params: ParamsT) -> tuple[float, float] | None:
        """The interval [lo, hi] every data value must lie in for the estimate to be the data's
        mean (each coordinate, for vector data), when the protocol clips or maps values outside
        it without telling (None, the default: any value). A simulation, swarm, experiment or
        campaign refuses a population whose law can produce a value outside it, naming the
        range and the law (``fedldp.client.simulate.check_data_range``); the server never sees
        the data and does not check it."""
        return None

    def population_metadata(self, params: ParamsT, n: int) -> Mapping[str, NDArray[Any]]:
        """Enrollment metadata for ``n`` participants with which ``min_participants`` probes
        the plan: none by default; protocols whose plan needs metadata give the most favourable
        (their rule says which)."""
        return {}

    @abstractmethod
    def plan(
        self,
        params: ParamsT,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        """Fix the rounds from the enrolled ε's (and public metadata) and the study seed.

        ``epsilon[i]`` is participant slot i's declared ε (finite, > 0, inside the study's
        range); ``metadata`` maps each public enrollment field to one array row per slot (a
        field some participant did not declare is absent); a ``Mapping``, not necessarily a
        ``dict``: the server builds a field's array when the plan first reads it, so a plan that
        reads none builds none (80 MB a field at 10^7 participants), and the arrays are not to
        be written to. Deterministic given its arguments:
        randomness (cohorts) comes from ``seed`` (``cohort_permutation``), since every replica
        and every restart plans again and must get the same plan. No round may charge a
        participant more than it declared in total (the server checks the plan's charges).
        Raises ``ValueError`` when no plan fits (too few participants, parameters the population
        cannot support), with a message a user can act on (the participants it needs): an
        explicit start answers it as ``422 plan_infeasible`` and the study stays enrolling."""

    @abstractmethod
    def broadcast(
        self, params: ParamsT, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        """Round ``round_index``'s public broadcast, given the outputs of the earlier rounds.

        ``outputs`` holds exactly rounds 0..round_index-1's ``aggregate`` results, as they came
        back from JSON (lists for arrays). Deterministic; the result must be JSON (``jsonable``)
        and carry every public constant a client needs (the client never sees the plan).
        ``ValueError`` fails the study with its message."""

    def client_broadcast(self, broadcast: JSON) -> JSON:
        """What of round k's broadcast its participants are sent with their task: by default all
        of it; a protocol drops what only its own aggregation needs (e.g. every earlier noisy
        label, O(n)), which stays in the stored broadcast and the public round view."""
        return broadcast

    @abstractmethod
    def privatize(
        self,
        params: ParamsT,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        """Client step for a block of users: payloads of shape ``(n, *task.payload_shape)``.

        Row u of ``data``, ``epsilon`` (the ε the round charges user u) and ``group`` (u's
        sub-task) belong to one user; the block may hold any subset of the round's cohort in any
        size, down to a single user on its own device. Every random number comes from ``rng``,
        and user u's from its own row (``UserStreams``: the first axis of every draw is the
        user axis), so a user's report depends only on its data, ε, group, the task and its own
        stream, never on who else is in the block. It must satisfy ε-LDP for each user at the
        ε it is charged (the privacy audit checks it). ``ValueError`` for data it cannot
        privatize (outside the declared domain), never a report computed from it. The swarm
        calls it for several blocks at once from threads of its own: it keeps no state between
        calls."""

    def check(
        self, params: ParamsT, task: RoundTask, epsilon: FloatArray, payloads: FloatArray
    ) -> BoolArray:
        """Which payloads are admissible; subclasses add range checks to the generic ones.

        ``payloads`` come from the network: any floats of the round's shape, NaN included.
        Returns one bool per row (False refuses that report with ``invalid_payload``); never
        raises for a bad payload. Deterministic, row by row."""
        return valid_payloads(task, payloads)

    def report_bounds(
        self, params: ParamsT, task: RoundTask, epsilon: FloatArray, group: IntArray
    ) -> tuple[FloatArray, FloatArray] | None:
        """Plausibility bounds of honest reports for senders charged ``epsilon`` in ``group``:
        ``(lo, hi)`` broadcastable to ``(n, *task.payload_shape)``, outside which the honest
        randomizer lands with probability below 10^-12 per entry
        (``fedldp.protocol.mechanisms.plausibility``), or None when it declares none. Protocols
        with unbounded (Laplace) reports declare them; the server refuses reports outside them
        (``implausible_report``) and an ``output`` attacker sends the bound itself, unless the
        protocol defines ``output_attack_reports`` (without it, the protocol's own ``check`` may
        still refuse the bound when it constrains reports further, as a sphere, a grid of bin
        centres or a fixed number of set bits does)."""
        return None

    def output_attack_reports(
        self,
        params: ParamsT,
        task: RoundTask,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray | None:
        """Optional: the reports that fake users charged ``epsilon`` in ``group`` send in round
        ``task`` under the ``output`` attack (``--attack output``): among the reports the
        protocol's own ``check`` (and ``report_bounds``) admits for them, those that shift the
        estimate the most upwards, shape ``(n, *task.payload_shape)``, random numbers from
        ``rng`` as in ``privatize``. None (the default) sends the generic report, the upper end
        of ``report_bounds`` in every entry: define the hook when ``check`` refuses that report
        (a fixed number of set bits, at most k non-zero coordinates, a sphere) or when another
        admissible report shifts the estimate more; the docstring of a protocol's hook says in
        which sense its reports are the largest. The reports still go through the server's
        checks, like every attacker's."""
        return None

    def max_gain_reports(
        self,
        params: ParamsT,
        task: RoundTask,
        targets: tuple[int, ...],
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray | None:
        """Optional: the reports that fake users charged ``epsilon`` in ``group`` send in round
        ``task`` to raise the estimates of the items ``targets`` most (the max-gain attack of
        Cao et al., USENIX Security 2021: ``--attack max-gain --targets I,J``), shape
        ``(n, *task.payload_shape)``, random numbers from ``rng`` as in ``privatize``;
        ``ValueError`` for a target outside the domain. None (the default) when the protocol
        defines none: the attack then runs only for the built-in frequency oracles that the
        simulator knows (``hetero-frequency``, ``user-frequency``) and is refused for the
        others. The reports still go through the server's checks, like every attacker's."""
        return None

    def plausible(
        self,
        params: ParamsT,
        task: RoundTask,
        epsilon: FloatArray,
        group: IntArray,
        payloads: FloatArray,
    ) -> BoolArray:
        """Which payloads lie inside ``report_bounds`` (all of them when it declares none)."""
        p = np.asarray(payloads, dtype=np.float64)
        n = p.shape[0]
        bounds = self.report_bounds(params, task, epsilon, group)
        if bounds is None or n == 0:
            return np.ones(n, dtype=np.bool_)
        lo, hi = (np.broadcast_to(b, p.shape) for b in bounds)
        inside = (p >= lo) & (p <= hi)
        return np.asarray(np.all(inside.reshape(n, -1), axis=1), dtype=np.bool_)

    def check_members(
        self,
        params: ParamsT,
        plan: Plan,
        task: RoundTask,
        slots: IntArray,
        payloads: FloatArray,
    ) -> BoolArray:
        """Which payloads are admissible *for their senders* (``slots``), given the plan's public
        metadata and the round's task (its broadcast): e.g. a cell index inside the sender's
        potential set. Default: all of them."""
        return np.ones(np.asarray(slots).shape[0], dtype=np.bool_)

    @abstractmethod
    def aggregate(
        self,
        params: ParamsT,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        """Server step: the round's public output from its reports (streamed in slot order).

        ``chunks`` yields the round's accepted reports in strictly increasing participant slot,
        each report once, in chunks of any size (the simulator's block size, the server's
        ``FEDLDP_AGGREGATE_CHUNK``): the output must not depend on where the chunks are cut
        (up to the rounding of sums grouped differently) nor hold them all in memory when it
        need not. They may be fewer than the cohort (a round closed on its quorum: aggregate
        who reported, see ``dropout``), or none. Called once per round (again, to the same
        output, if the closing transaction is rolled back). Deterministic; returns JSON, the
        round's public output. ``ValueError`` fails the study with its message."""

    @abstractmethod
    def finalize(self, params: ParamsT, plan: Plan, outputs: Sequence[JSON]) -> Result:
        """The result from all rounds' outputs (every round's, in order, as JSON gave them
        back). Deterministic; ``ValueError`` fails the study with its message."""

    internal_diagnostics: ClassVar[bool] = False
    """Whether ``internal`` reports anything: only then does the in-process simulator keep a
    round's reports (after ``aggregate``) to call it."""

    def internal(
        self, params: ParamsT, plan: Plan, round_index: int, chunks: Sequence[ReportChunk]
    ) -> JSON:
        """Simulation-only diagnostics of a round, from its reports: data-dependent values that
        its public output must not hold because the guarantee does not cover them (a central
        release's smooth sensitivity, say). The in-process simulator shows them under the
        result's ``diagnostics["internal"]``; the server never calls this. Default: none."""
        return {}

    # -- repeated collection: what a device is charged (docs/longitudinal.md §5) --------------

    def memo_state(
        self, params: ParamsT, data: UserData, epsilon: FloatArray, rng: RandomSource
    ) -> IntArray | None:
        """Device side: each user's *memoized state* for a collection, one non-negative int per
        row of ``data`` (the label its memoized response is drawn under: RAPPOR's value, the
        rounded value of α-point rounding, ...), computed as ``privatize`` would from the same
        persistent device streams (``rng.device``), so only the device can know it; None (the
        default) for a protocol that memoizes nothing, whose charge ignores states. Pure: draws
        nothing from ``rng``'s own counters."""
        return None

    def repeated_epsilon(
        self, params: ParamsT, epsilon: Sequence[float], states: Sequence[int] | None = None
    ) -> float:
        """The ε a device has spent over a sequence of collections of this protocol with the
        same parameters (one campaign), in order: ``epsilon[t]`` is the ε it declared for
        collection t, ``states[t]`` its ``memo_state`` then. ``states`` is known to the device
        only; ``None`` (the server, which sees no value) asks for a bound that holds for every
        sequence of states. Default: basic composition, Σ_t ε_t, whatever the states.

        A protocol that memoizes overrides it with its longitudinal guarantee. Contract
        (tests/protocol/longitudinal/test_charges.py checks the built-in ones): non-decreasing
        as collections are appended (no charge is negative); with ``states=None`` at least its
        value for any states (the server's charge is sound); with one collection, at most ε_0
        (a one-shot report's ε).
        ``ValueError`` for a sequence the guarantee does not cover (e.g. a memoized response
        asked again at another ε), which the device and the server refuse."""
        return float(math.fsum(float(e) for e in epsilon))

    def charge(
        self,
        params: ParamsT,
        before: Sequence[float],
        epsilon: float,
        states_before: Sequence[int] | None = None,
        state: int | None = None,
    ) -> float:
        """The ε a device is charged for a new collection at ``epsilon`` (its state ``state``)
        after collections at ``before`` (states ``states_before``): the increase of
        ``repeated_epsilon``; with ``state=None`` the server's charge (states unknown)."""
        if state is None or states_before is None:
            prior = self.repeated_epsilon(params, before)
            after = self.repeated_epsilon(params, [*before, epsilon])
        else:
            prior = self.repeated_epsilon(params, before, states_before)
            after = self.repeated_epsilon(params, [*before, epsilon], [*states_before, state])
        return max(after - prior, 0.0)  # rounding of the difference only

    # -- central releases: their privacy loss, for composition (docs/campaigns.md) ------------

    def release_event(self, params: ParamsT, epsilon: float) -> DpEvent | None:
        """The privacy loss of one study of this protocol for a participant that declares
        ``epsilon``, as a ``dp_accounting.DpEvent``, for a central-trust protocol whose release
        is (ε, δ)-DP rather than pure ε-LDP; None (the default) for a protocol charged by
        ``repeated_epsilon`` (pure ε: basic composition or its memo rule).

        A campaign composes a device's events across its occurrences with dp-accounting's PLD
        accountant and states the result as ε at the budget's δ
        (``fedldp.protocol.core.accounting``); the device and the server both call this hook,
        so it must be a deterministic function of its arguments. Contract
        (tests/protocol/test_accounting.py checks the built-in ones):

        * it describes the release's *actual* mechanism, as the protocol calibrates it: a
          Gaussian release of noise σ and ℓ2 sensitivity Δ is ``GaussianDpEvent(σ/Δ)``, a
          Laplace one of scale b and ℓ1 sensitivity Δ is ``LaplaceDpEvent(b/Δ)``, several
          releases of one study a ``ComposedDpEvent``; Δ is the sensitivity under the
          protocol's own neighbouring relation (accounting module docstring). A release known
          only by its (ε₀, δ₀) guarantee is ``EpsilonDeltaDpEvent(ε₀, δ₀)``
          (``fedldp.protocol.api``); one that is not differentially private is
          ``NonPrivateDpEvent()`` (a campaign refuses it);
        * it bounds what the study charges the participant: the release may run at a smaller ε
          than ``epsilon`` (the smallest declared, say), so the event at ``epsilon`` must
          dominate the events at every smaller ε (more noise, never less);
        * with a single study, its ε at a δ is at most the ε the study's guarantee states at
          that δ.

        ``ValueError`` for parameters it cannot describe."""
        return None


class Predictor(ABC, Generic[ParamsT]):
    """A protocol whose finished study is a predictor (nonparametric classification and
    regression): maps feature rows to predictions from the plan and the rounds' outputs only
    (public data: post-processing, no privacy cost)."""

    @abstractmethod
    def feature_dimension(self, params: ParamsT) -> int:
        """d of the feature rows ``predict`` takes."""

    @abstractmethod
    def predict(
        self, params: ParamsT, plan: Plan, outputs: Sequence[JSON], features: ArrayLike
    ) -> FloatArray:
        """Predictions for feature rows (k, d); ValueError on malformed rows."""


_MAX_PROBE = 1 << 21
"""The largest population ``Protocol.min_participants`` tries by default."""


def cohort_permutation(n: int, seed: int, *purpose: int) -> IntArray:
    """A public uniformly random permutation of 0..n-1 from the study seed (user-level-ldp §2.3)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0xC0, *purpose)))
    return rng.permutation(n).astype(np.int64, copy=False)  # int64 already: no second copy


def split_sizes(n: int, parts: int) -> IntArray:
    """Sizes of ``parts`` contiguous chunks of n items, differing by at most one."""
    if parts < 1:
        raise ValueError("parts must be >= 1")
    base, extra = divmod(n, parts)
    return np.array([base + (1 if g < extra else 0) for g in range(parts)], dtype=np.int64)


def cohort_plan(
    epsilon: FloatArray,
    seed: int,
    *,
    rounds: int = 1,
    name: str = "report",
    payload_kind: PayloadKind = "scalar",
    payload_shape: tuple[int, ...] = (),
    public: JSON | None = None,
) -> Plan:
    """The plan of a protocol in which every participant reports once, at the ε it is charged.

    ``epsilon[i]`` is what participant slot i is charged (its declared ε, or a fraction of it).
    One round (the default): everyone, in slot order, in round 0 called ``name``. ``rounds`` = k
    > 1: the participants split by a public random permutation of the study ``seed``
    (``cohort_permutation``) into k disjoint cohorts whose sizes differ by at most one
    (``split_sizes``), round j called ``f"{name}-{j}"``; each member is charged once, so nobody
    spends more than ``epsilon`` in total. Every report has ``payload_kind`` and
    ``payload_shape``; ``public`` is the plan's public constants. Deterministic given its
    arguments. ``ValueError`` when an ε is not finite and > 0, or with fewer participants than
    rounds (the message says how many are needed)."""
    eps = check_epsilons(epsilon)
    n = int(eps.size)
    if eps.ndim != 1 or rounds < 1:
        raise ValueError("cohort_plan needs one ε per participant and rounds >= 1")
    if n < rounds:
        raise ValueError(f"this protocol needs at least {rounds} participants, got {n}")
    if rounds == 1:
        cohorts = [np.arange(n, dtype=np.int64)]
    else:
        ends = np.cumsum(split_sizes(n, rounds))
        cohorts = [np.sort(c) for c in np.split(cohort_permutation(n, seed), ends[:-1])]
    plan = tuple(
        RoundPlan(
            j,
            name if rounds == 1 else f"{name}-{j}",
            cohort,
            eps[cohort],
            payload_kind,
            payload_shape,
        )
        for j, cohort in enumerate(cohorts)
    )
    return Plan(n, plan, dict(public or {}))
