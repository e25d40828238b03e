"""The extension API: everything a protocol author needs, and nothing internal.

A protocol is a subclass of ``Protocol`` (with its parameters a subclass of ``Params``) that an
installed distribution declares as an entry point of group ``fedldp.protocols``::

    [project.entry-points."fedldp.protocols"]
    my-mean = "my_package.protocols:MyMean"

The catalogue (``fedldp.protocol.catalogue``) then serves it by its ``name`` on the server, the
simulator, swarms, experiments and Dask workers, with its origin (the distribution's name and
version), which every study records and every swarm must match. This module is the contract:
the names below are stable, everything else in ``fedldp.protocol`` may change. The built-in
families import these names from here too.

**The steps** (their docstrings on ``Protocol`` state each contract in full): ``plan`` fixes the
rounds from the validated parameters, the enrolled ε's, public metadata and the study seed
(``ValueError`` when no plan fits, with a message a user can act on); ``broadcast`` gives round
k's public message from the earlier rounds' outputs; ``privatize`` is the client step, vectorised
over a block of users (``UserData``), drawing every random number from the given stream
(``UserStreams``); ``check`` / ``check_members`` / ``report_bounds`` say which reports the
server accepts; ``aggregate`` folds a round's reports (``ReportChunk``, ascending participant
slot, in chunks of any size) into the round's public output; ``finalize`` turns the outputs into
a ``Result`` (estimate and ``ErrorBar``). Optional, for repeated collection (a campaign):
``memo_state`` (the device's memoized state) and ``repeated_epsilon`` (the charge rule: what a
device has spent over a campaign's collections, by the device's rule or, without states, the
server's bound; basic composition by default; docs/longitudinal.md §5); for a central (ε, δ)
release, ``release_event`` (its privacy loss as a ``dp_accounting`` ``DpEvent``, which a campaign
composes with dp-accounting's PLD accountant: ``composed_epsilon`` gives the ε at a δ of a list
of events, and ``EpsilonDeltaDpEvent`` describes a release known only by its (ε, δ) guarantee;
these two load dp-accounting when first used: docs/campaigns.md). Every step but
``privatize`` is a deterministic function of its arguments; ``privatize`` is one of its
arguments and the stream's key. Steps raise only ``ValueError`` (and ``TypeError``) on bad
input: the server fails the study with the message; anything else is a bug, which the server
isolates to the study.

**The records** a plan is made of (``Plan``, ``RoundPlan``; ``cohort_plan`` builds the plan in
which everyone reports once, in one round or in disjoint cohorts) and that the steps exchange
(``RoundTask``, ``ReportChunk``, ``Result``, ``ErrorBar``, ``UserData``), with the generic checks
(``check_epsilons``, ``valid_payloads``) and JSON conversions (``jsonable``, ``finite_or_none``).
Type aliases: ``FloatArray``, ``IntArray``, ``BoolArray`` (numpy arrays of float64, int64,
bool), ``JSON`` (a dict that JSON can hold: broadcasts, outputs, diagnostics), ``PayloadKind``
(what a round's reports are: scalar, vector, bit, index-sign, histogram, statistic; its
docstring gives each kind's shape, wire form, server checks and a protocol using it),
``DataKind`` (what users hold: scalar, vector, categorical, labeled) and ``Trust`` (local or
central).

**Mechanisms**: the randomizers with their theory (``randomized_response``, ``laplace``,
``duchi_report``, ``one_bit_report``, ``jl_report``, … with keep probabilities, debiasing factors,
variances: convention 8 of docs/architecture.md; ``JL_MAX_ENTRIES`` bounds the JL sign matrix,
m·d),
the central noise calibrations (``gaussian_coefficient``, ``calibrated_alpha``, ``Calibration``,
…; ``ONE_D_EPSILON_CAP`` and ``MULTI_D_EPSILON_CAP`` cap their ε), the per-user random streams
(``UserStreams``, ``stream_key``, ``StreamKey``, ``RandomSource``: participant i's randomness is
a function of the key and i only; ``UserStreams.device`` and ``labelled`` are the persistent device
streams a memoized response is drawn from, the same in every study: docs/longitudinal.md;
``random_words`` the raw 64-bit words of either kind of source, ``random_word_blocks`` the
same words a block of users at a time (``random_blocks``: uniforms), ``unit`` their uniforms
and ``halves`` their 32-bit halves, for samplers that spend bits rather than uniforms), the
plausibility bounds of unbounded reports (``laplace_reach``, ``around``, …;
``IMPLAUSIBLE_PROBABILITY`` is the per-entry probability an honest report lands outside them,
``LAPLACE_TAIL`` the matching Laplace tail in scales), and the privacy audit of a protocol's own
client step (``ClientAudit``, ``client_step``, ``run_client_audit``, ``scaled_loss``, ``one_user``;
a ``Statistic`` is a factory, ``(step, a, b) → (reports → scalars)``, whose function reduces
each of a block of reports to the audited scalar; ``AuditCase`` and ``run_audit``
for a bare randomizer, whose ``Draw`` samples it on the two neighbouring inputs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedldp.protocol.core.base.protocol import (
    Params,
    Predictor,
    Protocol,
    cohort_permutation,
    cohort_plan,
    split_sizes,
)
from fedldp.protocol.core.base.records import (
    JSON,
    BoolArray,
    DataKind,
    ErrorBar,
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
    finite_or_none,
    jsonable,
    valid_payloads,
    z_quantile,
)
from fedldp.protocol.core.streams import (
    RandomSource,
    StreamKey,
    UserStreams,
    halves,
    ragged_random,
    random_blocks,
    random_word_blocks,
    random_words,
    stream_key,
    unit,
)
from fedldp.protocol.mechanisms.audit import (
    AuditCase,
    ClientAudit,
    ClientStep,
    Draw,
    PrivacyAudit,
    Statistic,
    client_step,
    laplace_loss_statistic,
    one_user,
    run_audit,
    run_client_audit,
    scaled_loss,
)
from fedldp.protocol.mechanisms.dp_noise import (
    MULTI_D_EPSILON_CAP,
    ONE_D_EPSILON_CAP,
    Calibration,
    as_user_means,
    calibrated_alpha,
    check_delta,
    check_positive,
    gaussian_coefficient,
    gaussian_hockey_stick,
    noise_constants,
    paper_alpha_beta,
    smooth_beta,
    smooth_gaussian_delta,
)
from fedldp.protocol.mechanisms.plausibility import (
    IMPLAUSIBLE_PROBABILITY,
    LAPLACE_TAIL,
    around,
    gaussian_reach,
    laplace_false_refusal,
    laplace_mean_reach,
    laplace_reach,
)
from fedldp.protocol.mechanisms.randomizers import (
    JL_MAX_ENTRIES,
    duchi_density,
    duchi_hemisphere_probability,
    duchi_radius,
    duchi_report,
    from_unit,
    jl_dimension,
    jl_estimate,
    jl_items,
    jl_report,
    jl_report_probability,
    jl_sign,
    jl_signs,
    kappa,
    laplace,
    laplace_log_density,
    laplace_mean_report,
    laplace_scale,
    laplace_variance,
    one_bit_report,
    randomized_response,
    rr_debias,
    rr_keep_probability,
    rr_plus_probability,
    rr_variance,
    to_unit,
)

if TYPE_CHECKING:
    from fedldp.protocol.core.accounting import EpsilonDeltaDpEvent, composed_epsilon

_ACCOUNTING = ("EpsilonDeltaDpEvent", "composed_epsilon")


def __getattr__(name: str) -> Any:
    """The accounting names, imported on first use (dp-accounting takes half a second)."""
    if name in _ACCOUNTING:
        from fedldp.protocol.core import accounting

        return getattr(accounting, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "IMPLAUSIBLE_PROBABILITY",
    "JL_MAX_ENTRIES",
    "JSON",
    "LAPLACE_TAIL",
    "MULTI_D_EPSILON_CAP",
    "ONE_D_EPSILON_CAP",
    "AuditCase",
    "BoolArray",
    "Calibration",
    "ClientAudit",
    "ClientStep",
    "DataKind",
    "Draw",
    "EpsilonDeltaDpEvent",
    "ErrorBar",
    "FloatArray",
    "IntArray",
    "Params",
    "PayloadKind",
    "Plan",
    "Predictor",
    "PrivacyAudit",
    "Protocol",
    "RandomSource",
    "ReportChunk",
    "Result",
    "RoundPlan",
    "RoundTask",
    "Statistic",
    "StreamKey",
    "Trust",
    "UserData",
    "UserStreams",
    "around",
    "as_user_means",
    "calibrated_alpha",
    "check_delta",
    "check_epsilons",
    "check_positive",
    "client_step",
    "cohort_permutation",
    "cohort_plan",
    "composed_epsilon",
    "duchi_density",
    "duchi_hemisphere_probability",
    "duchi_radius",
    "duchi_report",
    "finite_or_none",
    "from_unit",
    "gaussian_coefficient",
    "gaussian_hockey_stick",
    "gaussian_reach",
    "halves",
    "jl_dimension",
    "jl_estimate",
    "jl_items",
    "jl_report",
    "jl_report_probability",
    "jl_sign",
    "jl_signs",
    "jsonable",
    "kappa",
    "laplace",
    "laplace_false_refusal",
    "laplace_log_density",
    "laplace_loss_statistic",
    "laplace_mean_reach",
    "laplace_mean_report",
    "laplace_reach",
    "laplace_scale",
    "laplace_variance",
    "noise_constants",
    "one_bit_report",
    "one_user",
    "paper_alpha_beta",
    "ragged_random",
    "random_blocks",
    "random_word_blocks",
    "random_words",
    "randomized_response",
    "rr_debias",
    "rr_keep_probability",
    "rr_plus_probability",
    "rr_variance",
    "run_audit",
    "run_client_audit",
    "scaled_loss",
    "smooth_beta",
    "smooth_gaussian_delta",
    "split_sizes",
    "stream_key",
    "to_unit",
    "unit",
    "valid_payloads",
    "z_quantile",
]
