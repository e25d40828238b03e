"""The server's error tree (docs/architecture.md, convention 4): a stable ``code`` and an HTTP
status per error.

Services raise these; one exception handler in ``fedldp.server.web.app`` renders ``{"code",
"detail"}``. The client maps the codes back to its own exceptions (``fedldp.client.api.client``), so
tests assert on codes.
"""

from __future__ import annotations

__all__ = [
    "AdminKeyInvalid",
    "AdminKeyRequired",
    "BodyTooLarge",
    "BudgetExceeded",
    "CampaignComplete",
    "CampaignExists",
    "DuplicateConflict",
    "DuplicateKey",
    "EnrollmentClosed",
    "EnrollmentFull",
    "EpsilonOutOfRange",
    "FedldpError",
    "ImplausibleReport",
    "InvalidEncoding",
    "InvalidParams",
    "InvalidPayload",
    "InvalidRequest",
    "InvalidToken",
    "KeyUnavailable",
    "LeaseExpired",
    "NotFinished",
    "NotInCohort",
    "NotLeased",
    "NothingToLease",
    "ParticipantExists",
    "PlanInfeasible",
    "PopulationTooSmall",
    "PredictionUnsupported",
    "ProtocolVersionMismatch",
    "RoundClosed",
    "StudyEnded",
    "StudyExists",
    "StudyMismatch",
    "StudyNotEnrolling",
    "StudyNotRunning",
    "TokenRequired",
    "UnknownCampaign",
    "UnknownOccurrence",
    "UnknownParticipant",
    "UnknownProtocol",
    "UnknownRound",
    "UnknownStudy",
    "WrongRound",
]


class FedldpError(Exception):
    """Base of every error the API reports: ``code`` is stable, ``detail`` is for humans."""

    code: str = "internal_error"
    status: int = 500

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidRequest(FedldpError):
    code, status = "invalid_request", 422


class UnknownStudy(FedldpError):
    code, status = "unknown_study", 404


class UnknownParticipant(FedldpError):
    code, status = "unknown_participant", 404


class UnknownRound(FedldpError):
    code, status = "unknown_round", 404


class UnknownProtocol(FedldpError):
    code, status = "unknown_protocol", 422


class InvalidParams(FedldpError):
    code, status = "invalid_params", 422


class PlanInfeasible(FedldpError):
    code, status = "plan_infeasible", 422


class PopulationTooSmall(FedldpError):
    """A study's ``enrollment_target`` is below the protocol's minimum population."""

    code, status = "population_too_small", 422


class AdminKeyRequired(FedldpError):
    code, status = "admin_key_required", 401


class AdminKeyInvalid(FedldpError):
    code, status = "admin_key_invalid", 403


class InvalidToken(FedldpError):
    code, status = "invalid_token", 401


class StudyNotEnrolling(FedldpError):
    code, status = "study_not_enrolling", 409


class EnrollmentFull(FedldpError):
    code, status = "enrollment_full", 409


class EpsilonOutOfRange(FedldpError):
    code, status = "epsilon_out_of_range", 422


class StudyExists(FedldpError):
    code, status = "study_exists", 409


class ParticipantExists(FedldpError):
    code, status = "participant_exists", 409


class NothingToLease(FedldpError):
    code, status = "nothing_to_lease", 409


class StudyEnded(FedldpError):
    code, status = "study_ended", 409


class StudyNotRunning(FedldpError):
    code, status = "study_not_running", 409


class RoundClosed(FedldpError):
    code, status = "round_closed", 409


class WrongRound(FedldpError):
    code, status = "wrong_round", 409


class NotInCohort(FedldpError):
    code, status = "not_in_cohort", 409


class NotFinished(FedldpError):
    code, status = "not_finished", 409


class PredictionUnsupported(FedldpError):
    code, status = "prediction_unsupported", 422


class InvalidPayload(FedldpError):
    code, status = "invalid_payload", 422


class ImplausibleReport(FedldpError):
    """A report outside the protocol's plausibility bounds (probability below 10^-12 per entry
    under the honest randomizer at the declared ε; fedldp.protocol.mechanisms.plausibility)."""

    code, status = "implausible_report", 422


class BudgetExceeded(FedldpError):
    code, status = "budget_exceeded", 409


class UnknownCampaign(FedldpError):
    code, status = "unknown_campaign", 404


class UnknownOccurrence(FedldpError):
    code, status = "unknown_occurrence", 404


class CampaignExists(FedldpError):
    code, status = "campaign_exists", 409


class CampaignComplete(FedldpError):
    """Every occurrence of the campaign's schedule has been opened."""

    code, status = "campaign_complete", 409


class DuplicateConflict(FedldpError):
    code, status = "duplicate_conflict", 409


class TokenRequired(FedldpError):
    """A participant endpoint called without credentials (checked before the body is)."""

    code, status = "token_required", 401


class InvalidEncoding(FedldpError):
    """A request body that is not UTF-8 (JSON on the wire is UTF-8, RFC 8259 §8.1)."""

    code, status = "invalid_encoding", 415


class DuplicateKey(FedldpError):
    """A JSON object naming one key twice (parsers disagree on which value wins)."""

    code, status = "duplicate_key", 422


class BodyTooLarge(FedldpError):
    code, status = "body_too_large", 413


class NotLeased(FedldpError):
    """Explicit participant ids outside the caller's lease (or without a valid lease token)."""

    code, status = "not_leased", 403


class EnrollmentClosed(FedldpError):
    """Enrollment without a lease in a study whose policy is ``leased``: only holders of a
    lease enroll there, with their block's explicit participant ids."""

    code, status = "enrollment_closed", 403


class LeaseExpired(FedldpError):
    code, status = "lease_expired", 409


class ProtocolVersionMismatch(FedldpError):
    """The study was created with its protocol's code of another origin or version than the
    one installed here (fedldp.server.runtime.protocols): it is not run with different code."""

    code, status = "protocol_version_mismatch", 409


class StudyMismatch(FedldpError):
    """Joining a study by name with another declaration than its creator's."""

    code, status = "study_mismatch", 409


class KeyUnavailable(FedldpError):
    """A central-trust study's contribution key is not in this server's key directory (a replica
    configured with another ``FEDLDP_KEY_DIR``, or a key directory lost in a redeployment), or
    the directory cannot be written: nothing of the request was stored. 503, as for a service
    the server depends on: another replica, or this one once its operator points
    ``FEDLDP_KEY_DIR`` at the directory the study was created with, takes the request; the
    remedy is in docs/reliability.md, *Trust: what a central study keeps*."""

    code, status = "key_unavailable", 503


class DatabaseUnavailable(FedldpError):
    """The database refused, lost or timed out a connection or a lock (PostgreSQL's connection
    limit or a restart, a pool with no free connection, SQLite's busy timeout) or found its disk
    full: nothing of the request was committed. 503 with ``Retry-After``: fedldp's clients ask
    again."""

    code, status = "database_unavailable", 503
