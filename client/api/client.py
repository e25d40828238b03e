"""Typed async client of the fedldp REST API (docs/architecture.md: "Flow of a study" and convention
4).

One ``ApiClient`` holds ONE pool of keep-alive connections (a process runs one, however many users
it simulates): the lean HTTP/1.1 pool of ``fedldp.client.api.connection`` for a plain ``http://``
server, ``httpx.AsyncClient`` for ``https://``, for an injected ``transport`` (the tests' in-process
app) and for the event stream. Every method sends and returns the wire models of
``fedldp.protocol.core.wire``; studies, rounds, results, protocols, budgets and predictions come
back as those models with ``to_dict()`` and ``to_frame()`` (``fedldp.client.api.views``). Errors
come back as the exception tree of ``fedldp.client.api.errors``, keyed by the server's stable
``code`` (never by message text).

Retries (exponential backoff with jitter, ``RetryPolicy``):

* always, for failures where the server cannot have acted: connection refused or timed out while
  connecting, no free pooled connection, and the 429 and 503 answers (``Retry-After`` honoured);
* for idempotent requests also on read/write errors and timeouts, where the request may or may not
  have reached the server, and on a gateway's 502 and 504 (a load balancer whose server died or
  timed out with the request: a lost answer too). GETs are idempotent, and so are the task batch
  and both report submissions: a report resent after a lost answer is stored once and comes back
  as a duplicate.

A 4xx answer is never retried: it would fail the same way again. The policy may also bound the
retries by time and report each wait (``fedldp.client.api.retry``; the command line prints them).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from fedldp.client.api.connection import Answer, ConnectionPool
from fedldp.client.api.errors import (
    ApiError,
    AuthError,
    InvalidRequestError,
    NotFoundError,
    PhaseError,
    ReportRejectedError,
    ServerError,
    StudyConfigError,
    UnavailableError,
    bad_answer,
    error_for,
    error_from_answer,
)
from fedldp.client.api.retry import RetryPolicy, failure_reason, parse_retry_after
from fedldp.client.api.sse import messages
from fedldp.client.api.views import (
    BudgetView,
    PredictView,
    ProtocolList,
    ResultView,
    RoundsView,
    RoundView,
    StudyList,
    StudyView,
)
from fedldp.protocol.core.wire import (
    ENDED_PHASES,
    EVENT_ADAPTER,
    BatchReceipt,
    CampaignCreate,
    CampaignList,
    CampaignView,
    DeviceAdmission,
    DeviceBatch,
    DeviceBudgetView,
    EnrollBatch,
    Enrollment,
    EnrollmentBatch,
    EnrollRequest,
    Health,
    Lease,
    LeaseRequest,
    OccurrenceTruth,
    OccurrenceView,
    PredictRequest,
    Receipt,
    ReportBatch,
    ReportSubmit,
    StudyCreate,
    StudyEvent,
    Task,
    TaskBatch,
    TaskBatchRequest,
)
from fedldp.protocol.core.wire.binary import BATCH_MEDIA_TYPE

__all__ = [
    "ApiClient",
    "ApiError",
    "AuthError",
    "InvalidRequestError",
    "NotFoundError",
    "PhaseError",
    "ReportRejectedError",
    "ResultView",
    "RetryPolicy",
    "RoundView",
    "RoundsView",
    "ServerError",
    "StudyConfigError",
    "StudyList",
    "StudyView",
    "UnavailableError",
    "error_for",
    "parse_retry_after",
]

M = TypeVar("M", bound=BaseModel)
_TASK: TypeAdapter[Task] = TypeAdapter(Task)


# --------------------------------------------------------------------------- retries


def _batch_body(batch: BaseModel | bytes) -> dict[str, Any]:
    """The ``_call`` arguments of a batch body: a wire model (sent as JSON), or the bytes of a
    binary batch body (``fedldp.protocol.core.wire.binary``)."""
    if isinstance(batch, bytes):
        return {"content": batch, "media_type": BATCH_MEDIA_TYPE}
    return {"content": batch.model_dump_json().encode()}


_ALWAYS_RETRIED = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_IDEMPOTENT_RETRIED = (
    httpx.ReadError,
    httpx.WriteError,
    httpx.CloseError,
    httpx.RemoteProtocolError,
    httpx.ReadTimeout,
    httpx.WriteTimeout,
)
_RETRIED_STATUSES = frozenset({429, 503})
_IDEMPOTENT_RETRIED_STATUSES = frozenset({502, 504})
"""A gateway's answers for a server that failed or timed out with the request: it may have acted
(nginx passes a POST on to another replica only when it was not sent yet)."""


# --------------------------------------------------------------------------- the client

Sleep = Callable[[float], Awaitable[None]]


class ApiClient:
    """The fedldp API over one shared connection pool (see the module docstring).

    ``transport`` (e.g. ``httpx.ASGITransport`` or ``httpx.MockTransport`` in tests), ``sleep`` and
    ``clock`` are injectable; ``retries`` counts the retries made so far.
    """

    def __init__(
        self,
        base_url: str,
        *,
        admin_key: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 100,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.admin_key = admin_key
        self.retry = retry or RetryPolicy()
        self.retries = 0
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._timeout = timeout
        self._transport = transport
        self._max_connections = max_connections
        self._httpx: httpx.AsyncClient | None = None  # made when first needed (see _http)
        self._pool: ConnectionPool | None = None
        if transport is None and self.base_url.startswith("http://"):
            self._pool = ConnectionPool(
                self.base_url,
                max_connections=max_connections,
                timeout=timeout,
                connect_timeout=min(timeout, 10.0),
                headers={"accept": "application/json"},
            )

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()
        if self._httpx is not None:
            await self._httpx.aclose()

    @property
    def _http(self) -> httpx.AsyncClient:
        """The httpx client, made on first use: a plain ``http://`` swarm needs it only for the
        event stream, and making and closing one cost it ~0.1 s (an SSL context, and imports on
        closing)."""
        if self._httpx is None:
            limits = httpx.Limits(
                max_connections=self._max_connections,
                max_keepalive_connections=self._max_connections,
            )
            self._httpx = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=httpx.Timeout(self._timeout, connect=min(self._timeout, 10.0)),
                limits=limits,
                transport=self._transport,
                headers={"accept": "application/json"},
            )
        return self._httpx

    # ------------------------------------------------------------------- transport

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        token: str | None = None,
        admin: bool = False,
        idempotent: bool | None = None,
        exclude: set[str] | None = None,
        content: bytes | None = None,
        media_type: str = "application/json",
    ) -> Answer:
        """Send one request with the retry policy; the 2xx answer, or raise an ``ApiError``
        (``exclude``: fields of ``body`` not to send; ``content``: a body encoded already,
        instead of ``body``, of the ``media_type`` given)."""
        if idempotent is None:
            idempotent = method in ("GET", "HEAD")
        headers: dict[str, str] = {}
        if body is not None:
            content = body.model_dump_json(exclude=exclude).encode()
        if content is not None:
            headers["content-type"] = media_type
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        if admin and self.admin_key is not None:
            headers["x-admin-key"] = self.admin_key
        retryable = _ALWAYS_RETRIED + _IDEMPOTENT_RETRIED if idempotent else _ALWAYS_RETRIED
        statuses = (
            _RETRIED_STATUSES | _IDEMPOTENT_RETRIED_STATUSES if idempotent else _RETRIED_STATUSES
        )
        attempt, began = 1, self._clock()
        while True:
            retry_after: float | None = None
            try:
                answer = await self._send(method, path, content, headers)
            except retryable as exc:
                reason = failure_reason(exc)
                unavailable = UnavailableError(
                    "unreachable",
                    f"{method} {self.base_url}{path} failed {attempt} times in "
                    f"{self._clock() - began:.3g} s, last: {reason}",
                    0,
                )
                cause: Exception = exc
            except httpx.TransportError as exc:
                raise UnavailableError(
                    "unreachable", f"{method} {self.base_url}{path}: {exc}", 0
                ) from exc
            else:
                if 200 <= answer.status < 300:
                    return answer
                error = error_from_answer(answer)
                if answer.status not in statuses:
                    raise error
                unavailable = UnavailableError(error.code, error.detail, error.status)
                cause, reason = error, f"{error.status} {error.code}"
                retry_after = parse_retry_after(answer.headers.get("retry-after"))
            delay = self.retry.delay(attempt, self._rng, retry_after)
            if self.retry.gives_up(attempt, self._clock() - began, delay):
                raise unavailable from cause
            if self.retry.notify is not None:
                self.retry.notify(
                    f"{method} {self.base_url}{path}: retrying in {delay:.2g} s ({reason}; "
                    f"{self.retry.progress(attempt)})…"
                )
            await self._sleep(delay)
            self.retries += 1
            attempt += 1

    async def _send(
        self, method: str, path: str, content: bytes | None, headers: dict[str, str]
    ) -> Answer:
        if self._pool is not None:
            return await self._pool.request(method, path, headers, content)
        response = await self._http.request(method, path, content=content, headers=headers)
        return Answer(response.status_code, dict(response.headers), response.content)

    async def _call(
        self,
        model: type[M],
        method: str,
        path: str,
        *,
        body: BaseModel | None = None,
        token: str | None = None,
        admin: bool = False,
        idempotent: bool | None = None,
        exclude: set[str] | None = None,
        content: bytes | None = None,
        media_type: str = "application/json",
    ) -> M:
        answer = await self.request(
            method,
            path,
            body=body,
            token=token,
            admin=admin,
            idempotent=idempotent,
            exclude=exclude,
            content=content,
            media_type=media_type,
        )
        try:
            return model.model_validate_json(answer.content)
        except ValidationError as exc:
            raise bad_answer(method, path, answer.status, exc) from exc

    # ------------------------------------------------------------------- endpoints

    async def health(self) -> Health:
        return await self._call(Health, "GET", "/health")

    async def protocols(self) -> ProtocolList:
        return await self._call(ProtocolList, "GET", "/v1/protocols")

    async def create_study(self, create: StudyCreate) -> StudyView:
        return await self._call(StudyView, "POST", "/v1/studies", body=create, admin=True)

    async def list_studies(self) -> StudyList:
        return await self._call(StudyList, "GET", "/v1/studies")

    async def study(self, study_id: str) -> StudyView:
        return await self._call(StudyView, "GET", f"/v1/studies/{study_id}")

    async def start_study(self, study_id: str) -> StudyView:
        return await self._call(StudyView, "POST", f"/v1/studies/{study_id}/start", admin=True)

    async def cancel_study(self, study_id: str) -> StudyView:
        return await self._call(StudyView, "POST", f"/v1/studies/{study_id}/cancel", admin=True)

    async def create_campaign(self, create: CampaignCreate) -> CampaignView:
        return await self._call(CampaignView, "POST", "/v1/campaigns", body=create, admin=True)

    async def list_campaigns(self) -> CampaignList:
        return await self._call(CampaignList, "GET", "/v1/campaigns")

    async def campaign(self, campaign_id: str) -> CampaignView:
        return await self._call(CampaignView, "GET", f"/v1/campaigns/{campaign_id}")

    async def next_occurrence(self, campaign_id: str) -> OccurrenceView:
        """The campaign's open occurrence, or the next one opened (``campaign_complete``, a
        PhaseError, after the last)."""
        return await self._call(
            OccurrenceView, "POST", f"/v1/campaigns/{campaign_id}/occurrences/next", admin=True
        )

    async def admit_devices(
        self, campaign_id: str, index: int, devices: DeviceBatch
    ) -> DeviceAdmission:
        """Charge the devices their ε for occurrence ``index`` (``budget_exceeded``: refused)."""
        return await self._call(
            DeviceAdmission,
            "POST",
            f"/v1/campaigns/{campaign_id}/occurrences/{index}/devices",
            body=devices,
            admin=True,
        )

    async def declare_truth(
        self, campaign_id: str, index: int, truth: OccurrenceTruth
    ) -> OccurrenceView:
        """Record occurrence ``index``'s truth, which the server shows beside its estimate."""
        return await self._call(
            OccurrenceView,
            "PUT",
            f"/v1/campaigns/{campaign_id}/occurrences/{index}/truth",
            body=truth,
            admin=True,
        )

    async def device_budget(self, campaign_id: str, device: str) -> DeviceBudgetView:
        return await self._call(
            DeviceBudgetView, "GET", f"/v1/campaigns/{campaign_id}/devices/{device}/budget"
        )

    async def enroll(
        self, study_id: str, request: EnrollRequest, lease: Lease | None = None
    ) -> Enrollment:
        """Enroll one participant (an explicit ``participant_id`` needs its ``lease``)."""
        return await self._call(
            Enrollment,
            "POST",
            f"/v1/studies/{study_id}/participants",
            body=request,
            token=None if lease is None else lease.token,
        )

    async def enroll_batch(
        self, study_id: str, batch: EnrollBatch | bytes, lease: Lease | None = None
    ) -> EnrollmentBatch:
        """Enroll many participants (explicit ``participant_ids`` need their ``lease``);
        ``batch`` as bytes: a binary batch body (``fedldp.protocol.core.wire.binary``)."""
        return await self._call(
            EnrollmentBatch,
            "POST",
            f"/v1/studies/{study_id}/participants/batch",
            token=None if lease is None else lease.token,
            **_batch_body(batch),
        )

    async def lease(self, study_id: str, size: int) -> Lease:
        """Reserve the next block of participant ids (not retried once it may have reached the
        server: a lost lease would leave its ids unenrolled)."""
        return await self._call(
            Lease,
            "POST",
            f"/v1/studies/{study_id}/leases",
            body=LeaseRequest(size=size),
            admin=True,
        )

    async def task(self, study_id: str, participant_id: int, token: str, hold: float = 0.0) -> Task:
        """One participant's task; ``hold`` > 0 lets the server keep a "wait" answer up to that
        many seconds, answering as soon as the study moves on (a long poll)."""
        path = f"/v1/studies/{study_id}/participants/{participant_id}/task" + (
            f"?hold={hold:g}" if hold > 0 else ""
        )
        answer = await self.request("GET", path, token=token)
        try:
            return _TASK.validate_json(answer.content)
        except ValidationError as exc:
            raise bad_answer("GET", path, answer.status, exc) from exc

    async def tasks(
        self, study_id: str, request: TaskBatchRequest | bytes, hold: float = 0.0
    ) -> TaskBatch:
        """The tasks of many participants; ``hold`` > 0 lets the server keep the answer up to
        that many seconds while they would all only wait (a long poll). ``request`` as bytes: a
        binary batch body."""
        path = f"/v1/studies/{study_id}/tasks" + (f"?hold={hold:g}" if hold > 0 else "")
        # the request's bytes alone are kept through a held poll, not its list of Python ints
        body = _batch_body(request)
        del request
        return await self._call(TaskBatch, "POST", path, idempotent=True, **body)

    async def submit_report(self, study_id: str, report: ReportSubmit) -> Receipt:
        """One report; its token travels as ``Authorization: Bearer``, not in the body."""
        return await self._call(
            Receipt,
            "POST",
            f"/v1/studies/{study_id}/reports",
            body=report,
            token=report.token,
            idempotent=True,
            exclude={"token"},
        )

    async def submit_reports(self, study_id: str, batch: ReportBatch | bytes) -> BatchReceipt:
        """Many participants' reports for one round; ``batch`` as bytes: a binary batch body."""
        return await self._call(
            BatchReceipt,
            "POST",
            f"/v1/studies/{study_id}/reports/batch",
            idempotent=True,
            **_batch_body(batch),
        )

    async def rounds(self, study_id: str) -> RoundsView:
        return await self._call(RoundsView, "GET", f"/v1/studies/{study_id}/rounds")

    async def round(self, study_id: str, index: int) -> RoundView:
        return await self._call(RoundView, "GET", f"/v1/studies/{study_id}/rounds/{index}")

    async def result(self, study_id: str) -> ResultView:
        return await self._call(ResultView, "GET", f"/v1/studies/{study_id}/result")

    async def predict(self, study_id: str, features: Sequence[Sequence[float]]) -> PredictView:
        """Predictions of a finished user-classify or user-regress study for feature rows."""
        body = PredictRequest(features=[list(map(float, row)) for row in features])
        return await self._call(
            PredictView, "POST", f"/v1/studies/{study_id}/predict", body=body, idempotent=True
        )

    async def budget(self, study_id: str, participant_id: int, token: str) -> BudgetView:
        return await self._call(
            BudgetView,
            "GET",
            f"/v1/studies/{study_id}/participants/{participant_id}/budget",
            token=token,
        )

    async def events(self, study_id: str, *, after: int = 0) -> AsyncIterator[StudyEvent]:
        """The study's events (Server-Sent Events, ``fedldp.protocol.core.wire.events``) after
        event number ``after``, until the study has ended. A dropped connection is resumed with
        ``Last-Event-ID`` (so no stored event is lost or repeated) under the retry policy; a 4xx
        answer raises at once."""
        last, failures, ended = after, 0, False
        path = f"/v1/studies/{study_id}/events"
        while True:
            headers = {"accept": "text/event-stream", "last-event-id": str(last)}
            try:
                async with self._http.stream("GET", path, headers=headers) as response:
                    if not response.is_success:
                        await response.aread()
                        error = error_from_answer(
                            Answer(response.status_code, dict(response.headers), response.content)
                        )
                        if response.status_code not in (
                            _RETRIED_STATUSES | _IDEMPOTENT_RETRIED_STATUSES
                        ):
                            raise error
                        raise UnavailableError(error.code, error.detail, error.status)
                    async for message in messages(response.aiter_lines()):
                        event = EVENT_ADAPTER.validate_json(message.data)
                        failures = 0
                        last = event.id if event.id is not None else last
                        if event.kind in ("phase", "progress"):
                            ended = event.phase in ENDED_PHASES
                        yield event
                if ended:  # the server ends the stream only after the study's last event
                    return
                problem = "the event stream closed before the study ended"
            except (httpx.TransportError, UnavailableError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            except ValidationError as exc:
                raise ServerError("invalid_response", f"GET {path}: bad event: {exc}", 200) from exc
            failures += 1
            if failures >= self.retry.attempts:
                raise UnavailableError("unreachable", f"GET {self.base_url}{path}: {problem}", 0)
            await self._sleep(self.retry.delay(failures, self._rng, None))
            self.retries += 1
