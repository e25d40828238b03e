"""Study services: create, inspect, start, cancel (no HTTP here; see fedldp.server.web.routes;
enrollment is fedldp.server.services.enrollment)."""

from __future__ import annotations

import functools
import json
import secrets
import uuid
from datetime import timedelta
from typing import Any

import numpy as np
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from fedldp.protocol.catalogue import CATALOGUE
from fedldp.protocol.core.base.protocol import Params, Predictor, Protocol
from fedldp.protocol.core.base.records import jsonable
from fedldp.protocol.core.wire import (
    EPSILON_MAX,
    BrokenProtocol,
    EpsilonLedgerView,
    PredictRequest,
    PredictView,
    ProtocolInfo,
    ProtocolList,
    ResultView,
    RoundsView,
    RoundView,
    StudyCreate,
    StudyView,
)
from fedldp.server.errors import (
    InvalidParams,
    InvalidRequest,
    KeyUnavailable,
    NotFinished,
    PlanInfeasible,
    PopulationTooSmall,
    PredictionUnsupported,
    StudyEnded,
    StudyExists,
    StudyMismatch,
    StudyNotEnrolling,
    UnknownProtocol,
    UnknownRound,
    UnknownStudy,
)
from fedldp.server.runtime.auth import new_secret
from fedldp.server.runtime.context import Context
from fedldp.server.services.rounds import advance, forget_contributions, start_study
from fedldp.server.services.views import result_view, round_view, study_view
from fedldp.server.store import eventlog, participant_rows, report_rows
from fedldp.server.store import repository as repo
from fedldp.server.store.tables import StudyRow, utcnow

__all__ = [
    "cancel",
    "catalogue",
    "count_by_phase",
    "create",
    "epsilon_ledger",
    "get",
    "list_all",
    "require_study",
    "result",
    "round_of",
    "rounds_of",
    "start",
]


def require_study(session: Session, study_id: str) -> StudyRow:
    """The study, or UnknownStudy."""
    study = repo.get_study(session, study_id)
    if study is None:
        raise UnknownStudy(f"no study {study_id!r}")
    return study


def _view(session: Session, study: StudyRow) -> StudyView:
    return study_view(study, repo.list_rounds(session, study.id), utcnow())


def _parse_params(protocol: Protocol[Any], raw: dict[str, Any]) -> Any:
    """The protocol's parameters, validated strictly (as JSON: no string or boolean for a
    number, no float for an integer) and against their bounds; InvalidParams otherwise."""
    try:
        text = json.dumps(raw, allow_nan=False)
    except ValueError:
        raise InvalidParams(f"invalid parameters for {protocol.name}: not finite") from None
    return protocol.params_model.model_validate_json(text, strict=True)


def _declared(study: StudyRow) -> dict[str, Any]:
    """What a study's creator declared and a swarm joining it must declare alike."""
    return {
        "protocol": study.protocol,
        "params": study.params,
        "seed": study.seed,
        "enrollment_target": study.enrollment_target,
        "population_digest": study.population_digest,
        "enrollment": study.enrollment,
        # what decides a round's close and who may enroll: a joiner with other values would
        # print the creator's result under its own
        "quorum": study.quorum,
        "round_deadline_s": study.round_deadline_s,
        "epsilon_min": study.epsilon_min,
        "epsilon_max": study.epsilon_max,
    }


def _mismatch(ctx: Context, name: str, mine: dict[str, Any]) -> None:
    """StudyMismatch naming the first field in which the study called ``name`` differs from
    ``mine`` (nothing when it does not)."""
    with ctx.transaction() as session:
        study = repo.study_named(session, name)
        if study is None:
            return
        theirs = _declared(study)
    for field, value in mine.items():
        if theirs[field] != value:
            raise StudyMismatch(
                f"study {name!r} was created with another {field} than this request's: joining "
                "swarms must declare the same protocol, params, seed, enrollment target, "
                "population, enrollment policy, quorum, round deadline and ε range"
            )


def catalogue(ctx: Context, epsilon: float) -> ProtocolList:
    """The protocols this server offers, at ``epsilon``, and the installed plugins it cannot
    serve (``CATALOGUE.broken``)."""
    return _catalogue(ctx.offered, epsilon, CATALOGUE.generation)


@functools.lru_cache(maxsize=64)
def _catalogue(offered: tuple[str, ...], epsilon: float, generation: int) -> ProtocolList:
    """The catalogue of ``offered`` at ``epsilon`` (each minimum population is searched once
    per ε and ``CATALOGUE.generation``). A plugin whose description raises is listed as
    broken, not served."""
    protocols: list[ProtocolInfo] = []
    broken = [
        BrokenProtocol(name=b.name, package=b.package, version=b.version, error=b.error)
        for b in CATALOGUE.broken
    ]
    for name in offered:
        if name not in CATALOGUE:  # gone since the server started (only tests reload it)
            continue
        origin = CATALOGUE.origin(name)
        try:
            described = CATALOGUE[name].describe(epsilon)
            info = ProtocolInfo(**described, origin=origin.package, origin_version=origin.version)
        except Exception as exc:  # a plugin's bug must not keep the rest from being listed
            error = f"its catalogue entry could not be built: {type(exc).__name__}: {exc}"
            broken.append(
                BrokenProtocol(
                    name=name, package=origin.package, version=origin.version, error=error
                )
            )
            continue
        protocols.append(info)
    return ProtocolList(protocols=protocols, broken=broken)


def _check_target(protocol: Protocol[Any], params: Params, body: StudyCreate) -> None:
    """PopulationTooSmall if ``enrollment_target`` participants could never be planned for,
    even with every one at the largest ε the study accepts (the most favourable case)."""
    if body.enrollment_target is None:
        return
    best = EPSILON_MAX if body.epsilon_max is None else body.epsilon_max
    try:
        needed = protocol.min_participants(best, params)
    except ValueError:
        return  # the plan refuses these parameters whatever n: start reports why
    if needed is not None and body.enrollment_target < needed:
        raise PopulationTooSmall(
            f"{protocol.name} cannot plan for an enrollment_target of "
            f"{body.enrollment_target}: it needs at least {needed} participants even at "
            f"ε = {best:g} ({protocol.population_rule})"
        )


def create(ctx: Context, body: StudyCreate) -> StudyView:
    """A new study of an offered protocol, recording its origin (UnknownProtocol for another
    name, InvalidParams, PopulationTooSmall; StudyExists or StudyMismatch for a taken name)."""
    if body.protocol not in ctx.offered or body.protocol not in CATALOGUE:
        raise UnknownProtocol(
            f"no protocol {body.protocol!r} on this server; it offers {', '.join(ctx.offered)}"
        )
    protocol = CATALOGUE[body.protocol]
    origin = CATALOGUE.origin(protocol.name)
    try:
        params = _parse_params(protocol, body.params)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidParams(f"invalid parameters for {protocol.name}: {problems}") from None
    except ValueError as exc:
        raise InvalidParams(f"invalid parameters for {protocol.name}: {exc}") from None
    _check_target(protocol, params, body)
    now = utcnow()
    study = StudyRow(
        id=uuid.uuid4().hex,
        name=body.name,
        protocol=protocol.name,
        # what was given, not the filled-in defaults: re-parsing it (plans on every replica, the
        # swarm's own client step) must give the same parameters, and some parameters refuse to
        # be set together with others (heavy_tail derives bound)
        params=jsonable(params.model_dump(mode="json", exclude_unset=True)),
        seed=body.seed,
        secret=new_secret(),
        noise_seed=(
            (body.noise_seed if body.noise_seed is not None else secrets.randbits(63))
            if protocol.trust == "central"
            else None
        ),
        phase="enrolling",
        created_at=now,
        enrollment_target=body.enrollment_target,
        enrollment_deadline=(
            None
            if body.enrollment_deadline_s is None
            else now + timedelta(seconds=body.enrollment_deadline_s)
        ),
        round_deadline_s=body.round_deadline_s,
        quorum=body.quorum,
        epsilon_min=body.epsilon_min,
        epsilon_max=body.epsilon_max,
        population_digest=body.population_digest,
        enrollment=body.enrollment,
        protocol_origin=origin.package,
        protocol_version=origin.version,
        n_participants=0,
        current_round=None,
        failure_reason=None,
        warnings=[],
        result=None,
    )
    if (
        protocol.trust == "central"
    ):  # its contributions are stored encrypted (server/runtime/keys.py)
        try:
            ctx.keys.create(study.id)
        except OSError as exc:
            detail = f"cannot write the study's key in {ctx.keys.directory}: {exc}"
            raise KeyUnavailable(detail) from None
    try:
        with ctx.transaction() as session:
            repo.add_study(session, study)
            eventlog.phase_changed(session, study.id, "enrolling")
            return _view(session, study)
    except IntegrityError:
        assert body.name is not None  # the only unique column a new study can collide on
        ctx.keys.destroy(study.id)
        _mismatch(ctx, body.name, _declared(study))
        raise StudyExists(f"a study named {body.name!r} exists already") from None


def count_by_phase(ctx: Context) -> dict[str, int]:
    """How many studies are in each phase."""
    with ctx.transaction() as session:
        return repo.count_by_phase(session)


def list_all(ctx: Context) -> list[StudyView]:
    with ctx.transaction() as session:
        return [_view(session, s) for s in repo.list_studies(session)]


def get(ctx: Context, study_id: str) -> StudyView:
    with ctx.transaction() as session:
        return _view(session, require_study(session, study_id))


def start(ctx: Context, study_id: str) -> StudyView:
    """Close enrollment now; PlanInfeasible if no plan fits the participants enrolled so far
    (the study stays enrolling: more may enroll, then start again)."""
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        if study.phase != "enrolling":
            raise StudyNotEnrolling(f"study {study_id} is {study.phase}, not enrolling")
        reason = start_study(ctx, session, study, utcnow(), recoverable=True)
    if reason is not None:
        phase = get(ctx, study_id).phase
        more = "; it is still enrolling" if phase == "enrolling" else f"; it {phase}"
        raise PlanInfeasible(f"study {study_id} cannot start: {reason}{more}")
    advance(ctx, study_id, 0)  # a round with an empty cohort closes at once
    return get(ctx, study_id)


def cancel(ctx: Context, study_id: str) -> StudyView:
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        if not repo.transition_study(
            session,
            study_id,
            ["enrolling", "running"],
            phase="cancelled",
            current_round=None,
            failure_reason="cancelled by the administrator",
        ):
            raise StudyEnded(f"study {study_id} is {study.phase} already; it cannot be cancelled")
        forget_contributions(session, study_id)
        eventlog.phase_changed(session, study_id, "cancelled", "cancelled by the administrator")
        return _view(session, require_study(session, study_id))


def rounds_of(ctx: Context, study_id: str) -> RoundsView:
    with ctx.transaction() as session:
        require_study(session, study_id)
        return RoundsView(rounds=[round_view(r) for r in repo.list_rounds(session, study_id)])


def round_of(ctx: Context, study_id: str, index: int) -> RoundView:
    with ctx.transaction() as session:
        require_study(session, study_id)
        r = repo.get_round(session, study_id, index)
        if r is None:
            raise UnknownRound(f"study {study_id} has no round {index}")
        return round_view(r)


def epsilon_ledger(ctx: Context, study_id: str, bins: int) -> EpsilonLedgerView:
    """Histograms of the declared and the spent ε (a participant's spent ε: the sum its stored
    reports charged), computed here so that no client scans participants one by one."""
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        declared = participant_rows.declared_epsilons(session, study_id)
        rounds = len(repo.list_rounds(session, study_id))
        spent = report_rows.spent_per_participant(session, study_id, declared.size, rounds)
    top = float(declared.max()) if declared.size else 1.0
    # the ledger keeps spent <= declared; a float sum may pass it by an ulp: into the top bin
    edges = np.linspace(0.0, top, bins + 1)
    return EpsilonLedgerView(
        study_id=study.id,
        participants=int(declared.size),
        edges=edges.tolist(),
        declared=np.histogram(declared, edges)[0].tolist(),
        spent=np.histogram(np.minimum(spent, top), edges)[0].tolist(),
        spent_total=float(spent.sum()),
        spent_max=float(spent.max()) if spent.size else 0.0,
    )


def predict(ctx: Context, study_id: str, body: PredictRequest) -> PredictView:
    """Predictions of a finished nonparametric study for feature rows (post-processing of its
    public round outputs)."""
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        protocol = CATALOGUE[study.protocol]
        if not isinstance(protocol, Predictor):
            raise PredictionUnsupported(
                f"{study.protocol} does not predict; user-classify and user-regress studies do"
            )
        if study.phase != "finished":
            raise NotFinished(f"study {study_id} is {study.phase}; only a finished study predicts")
        splan = ctx.plans.get(session, study)
        outputs = [r.output or {} for r in repo.list_rounds(session, study_id)]
    width = protocol.feature_dimension(splan.params)
    bad = next((i for i, row in enumerate(body.features) if len(row) != width), None)
    if bad is not None:
        raise InvalidRequest(
            f"feature row {bad} has {len(body.features[bad])} values; this study's features "
            f"have dimension {width}"
        )
    try:
        predictions = protocol.predict(splan.params, splan.plan, outputs, body.features)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    return PredictView(study_id=study_id, protocol=study.protocol, predictions=predictions.tolist())


def result(ctx: Context, study_id: str) -> ResultView:
    with ctx.transaction() as session:
        study = require_study(session, study_id)
        if study.phase in ("enrolling", "running"):
            raise NotFinished(f"study {study_id} is {study.phase}; its result is not ready")
        return result_view(study)
