"""What ``ApiClient`` returns for studies, rounds and results: the wire models of
``fedldp.protocol.core.wire`` (so every field, type and check is theirs), with ``to_dict()`` (the
JSON object the server sent, as plain Python values) and ``to_frame()`` (a pandas DataFrame;
``fedldp.client.frames``, the ``notebook`` extra). Each is an instance of its wire model too.

The tables, by view:

* ``StudyView``, ``RoundsView``: one row per round (index, name, status, expected, received,
  refused, late, and the deadline or the open and close times);
* ``StudyList``: one row per study;
* ``ResultView``: the run summary's table (``fedldp.client.frames.run_frame``): one row, or one
  per coordinate of a vector estimate;
* ``ProtocolList``: one row per protocol the server offers;
* ``BudgetView``: one row per ε charge a participant's plan holds;
* ``PredictView``: one row per prediction.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from fedldp.client.frames import records_frame, run_frame
from fedldp.protocol.core import wire

__all__ = [
    "BudgetView",
    "PredictView",
    "ProtocolList",
    "ResultView",
    "RoundView",
    "RoundsView",
    "StudyList",
    "StudyView",
]

_PROGRESS_COLUMNS = ("index", "name", "status", "expected", "received", "refused", "late")
_STUDY_COLUMNS = (
    "id",
    "name",
    "protocol",
    "phase",
    "n_participants",
    "current_round",
    "created_at",
    "seed",
    "failure_reason",
)


class _Tabular:
    """``to_dict`` for the pydantic views below (their ``model_dump`` in JSON mode)."""

    def to_dict(self) -> dict[str, Any]:
        """The view as the JSON object the server sent (plain dicts, lists and numbers)."""
        assert isinstance(self, BaseModel)
        out: dict[str, Any] = self.model_dump(mode="json")
        return out


class RoundView(_Tabular, wire.RoundView):
    """One round (``GET /v1/studies/{id}/rounds/{k}``)."""

    def to_frame(self) -> Any:
        """One row: the round's counters, ``opened_at`` and ``closed_at`` (broadcast and output
        stay in ``to_dict()``)."""
        return RoundsView(rounds=[self]).to_frame()


class RoundsView(_Tabular, wire.RoundsView):
    """Every round of a study (``GET /v1/studies/{id}/rounds``)."""

    rounds: list[RoundView]  # type: ignore[assignment]  # validated as these, a subclass

    def to_frame(self) -> Any:
        """One row per round: its counters, ``opened_at`` and ``closed_at``."""
        columns = (*_PROGRESS_COLUMNS, "opened_at", "closed_at")
        rows = [{c: getattr(r, c) for c in columns} for r in self.rounds]
        return records_frame(rows, columns)


class StudyView(_Tabular, wire.StudyView):
    """One study (``GET /v1/studies/{id}``).

    >>> from datetime import UTC, datetime
    >>> study = StudyView(
    ...     id="s1", name=None, protocol="user-mean", trust="local", params={}, seed=1,
    ...     phase="running", created_at=datetime(2026, 1, 1, tzinfo=UTC), n_participants=10,
    ...     enrollment_target=None, enrollment_deadline=None, round_deadline_s=600.0,
    ...     quorum=1.0, current_round=0, failure_reason=None, warnings=[],
    ...     rounds=[{"index": 0, "name": "stage1", "status": "open", "expected": 10,
    ...              "received": 4, "deadline": None, "seconds_left": None}],
    ... )
    >>> study.to_frame()[["index", "name", "status", "received"]].to_dict("records")
    [{'index': 0, 'name': 'stage1', 'status': 'open', 'received': 4}]
    >>> first = study.to_dict()["rounds"].pop(0)
    >>> first["expected"]
    10
    """

    def to_frame(self) -> Any:
        """One row per round of the plan: its counters, ``deadline`` and ``seconds_left``."""
        columns = (*_PROGRESS_COLUMNS, "deadline", "seconds_left")
        rows = [{c: getattr(r, c) for c in columns} for r in self.rounds]
        return records_frame(rows, columns)


class StudyList(_Tabular, wire.StudyList):
    """The server's studies (``GET /v1/studies``)."""

    studies: list[StudyView]  # type: ignore[assignment]  # validated as these, a subclass

    def to_frame(self) -> Any:
        """One row per study: id, name, protocol, phase, participants, current round, creation
        time, seed and failure reason."""
        rows = [{c: getattr(s, c) for c in _STUDY_COLUMNS} for s in self.studies]
        return records_frame(rows, _STUDY_COLUMNS)


class ResultView(_Tabular, wire.ResultView):
    """A study's result (``GET /v1/studies/{id}/result``)."""

    def to_frame(self) -> Any:
        """The run summary's table (``fedldp.client.frames.run_frame``): ``estimate``, then
        study_id, protocol, trust, phase, failure_reason, ``error_bar.*`` and
        ``epsilon_spent.*``; one row per coordinate of a vector estimate. The truth is not
        the server's to know: ``SwarmResult.to_frame`` adds it."""
        return run_frame(self.to_dict())


class ProtocolList(_Tabular, wire.ProtocolList):
    """The protocols a server offers (``GET /v1/protocols``)."""

    def to_frame(self) -> Any:
        """One row per protocol: name, version, trust, data kind, its minimum population rule
        and summary (parameters and the rest stay in ``to_dict()``)."""
        columns = ("name", "version", "trust", "data_kind", "min_participants", "summary")
        rows = [
            {
                **{c: getattr(p, c) for c in ("name", "version", "trust", "data_kind")},
                "min_participants": p.population.min_participants,
                "summary": p.summary,
            }
            for p in self.protocols
        ]
        return records_frame(rows, columns)


class BudgetView(_Tabular, wire.BudgetView):
    """One participant's privacy budget (``GET …/participants/{id}/budget``)."""

    def to_frame(self) -> Any:
        """One row per planned charge: round, name, ε, messages and whether it was reported."""
        columns = ("round", "name", "epsilon", "messages", "reported")
        return records_frame([c.model_dump() for c in self.planned], columns)


class PredictView(_Tabular, wire.PredictView):
    """A finished study's predictions (``POST …/predict``)."""

    def to_frame(self) -> Any:
        """One row per feature row sent, in its order: ``prediction``."""
        return records_frame([{"prediction": p} for p in self.predictions], ("prediction",))
