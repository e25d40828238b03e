"""The client's exception tree for the server's error answers (docs/architecture.md, convention 4),
keyed by the stable ``code`` of the body ``{"code", "detail"}`` (never by message text), with the
status's family as fallback for a code this client does not know; and ``SwarmError``, the swarm's
own reason to stop.
"""

from __future__ import annotations

from http import HTTPStatus

from pydantic import ValidationError

from fedldp.client.api.connection import Answer
from fedldp.protocol.core.wire import ErrorBody

__all__ = [
    "ApiError",
    "AuthError",
    "InvalidRequestError",
    "NotFoundError",
    "PhaseError",
    "ReportRejectedError",
    "ServerError",
    "StudyConfigError",
    "SwarmError",
    "UnavailableError",
    "bad_answer",
    "error_for",
    "error_from_answer",
]


class ApiError(Exception):
    """An error answer of the server (or the failure to get one): a stable ``code`` and a status."""

    server_side = False
    """True when the fault lies with the server (or the network), not with the request."""

    def __init__(self, code: str, detail: str, status: int) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.status = status

    def __reduce__(self) -> tuple[type[ApiError], tuple[str, str, int]]:
        return (type(self), (self.code, self.detail, self.status))  # crosses processes


class NotFoundError(ApiError):
    """unknown_study, unknown_participant."""


class AuthError(ApiError):
    """invalid_token, token_required, not_leased, enrollment_closed, admin_key_required,
    admin_key_invalid."""


class PhaseError(ApiError):
    """The study or round is not in a state that allows the request: study_not_enrolling,
    study_not_running, round_closed, wrong_round, not_finished, lease_expired, study_mismatch,
    protocol_version_mismatch (the study was created with other code of its protocol than the
    server's) (and the other conflicts listed in ``_FAMILIES``)."""


class InvalidRequestError(ApiError):
    """invalid_request: a body or query the server could not parse (invalid_encoding,
    duplicate_key, body_too_large: before parsing it);
    epsilon_out_of_range: an ε outside the range the study accepts at enrollment."""


class ReportRejectedError(InvalidRequestError):
    """invalid_payload, implausible_report, invalid_epsilon, budget_exceeded,
    duplicate_conflict."""


class StudyConfigError(InvalidRequestError):
    """unknown_protocol, invalid_params, plan_infeasible, population_too_small."""


class ServerError(ApiError):
    """internal_error, and any 5xx answer without a known code."""

    server_side = True


class UnavailableError(ServerError):
    """No usable answer after every retry: code ``unreachable`` (network) or the last 429/503's."""


_FAMILIES: dict[str, type[ApiError]] = {
    **dict.fromkeys(
        ("unknown_study", "unknown_participant", "unknown_campaign", "unknown_occurrence"),
        NotFoundError,
    ),
    **dict.fromkeys(
        (
            "invalid_token",
            "token_required",
            "not_leased",
            "enrollment_closed",
            "admin_key_required",
            "admin_key_invalid",
        ),
        AuthError,
    ),
    **dict.fromkeys(
        (
            "study_not_enrolling",
            "study_not_running",
            "study_ended",
            "round_closed",
            "wrong_round",
            "not_finished",
            "study_exists",
            "nothing_to_lease",
            "participant_exists",
            "enrollment_full",
            "lease_expired",
            "study_mismatch",
            "protocol_version_mismatch",
            "campaign_exists",
            "campaign_complete",
        ),
        PhaseError,
    ),
    **dict.fromkeys(
        (
            "invalid_payload",
            "implausible_report",
            "invalid_epsilon",
            "budget_exceeded",
            "duplicate_conflict",
        ),
        ReportRejectedError,
    ),
    **dict.fromkeys(
        ("unknown_protocol", "invalid_params", "plan_infeasible", "population_too_small"),
        StudyConfigError,
    ),
    **dict.fromkeys(
        (
            "invalid_request",
            "invalid_encoding",
            "duplicate_key",
            "body_too_large",
        ),
        InvalidRequestError,
    ),
    "epsilon_out_of_range": InvalidRequestError,
    "internal_error": ServerError,
}


def error_for(code: str, detail: str, status: int) -> ApiError:
    """The exception for an error answer: by code, else by the status's family."""
    cls = _FAMILIES.get(code)
    if cls is None:
        if status >= 500:
            cls = ServerError
        elif status == 404:
            cls = NotFoundError
        elif status in (401, 403):
            cls = AuthError
        elif status == 409:
            cls = PhaseError
        elif status in (400, 422):
            cls = InvalidRequestError
        else:
            cls = ApiError
    return cls(code, detail, status)


def error_from_answer(answer: Answer) -> ApiError:
    """The exception for an error answer (its body, or its status when the body is not ours)."""
    try:
        body = ErrorBody.model_validate_json(answer.content)
    except ValidationError:
        text = answer.content.decode(errors="replace").strip().replace("\n", " ")[:300]
        if not text:
            try:
                text = HTTPStatus(answer.status).phrase
            except ValueError:
                text = "no reason given"
        return error_for(f"http_{answer.status}", text, answer.status)
    return error_for(body.code, body.detail, answer.status)


def bad_answer(method: str, path: str, status: int, exc: ValidationError) -> ServerError:
    """A 2xx answer that is not the documented body: the server (or a proxy) is at fault."""
    first = exc.errors()[0] if exc.errors() else {"msg": str(exc), "loc": ()}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return ServerError(
        "invalid_response",
        f"{method} {path} answered {status} with an unexpected body ({where}: {first.get('msg')})",
        status,
    )


class SwarmError(Exception):
    """The swarm cannot go on: a stable ``code`` and a ``detail`` (like ``ApiError``)."""

    def __init__(self, code: str, detail: str, server_side: bool = False) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.server_side = server_side

    def __reduce__(self) -> tuple[type[SwarmError], tuple[str, str, bool]]:
        return (type(self), (self.code, self.detail, self.server_side))  # crosses processes
