"""The API client's views (client/api/views.py): the client returns them for studies, rounds and
results, each is still its wire model, ``to_dict`` is the JSON the server sent and ``to_frame`` a
table of the documented shape."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from fedldp.client.api.client import ApiClient
from fedldp.client.api.views import ResultView, RoundsView, StudyList, StudyView
from fedldp.protocol.core import wire

ROUND = {
    "index": 0,
    "name": "stage-1",
    "status": "closed",
    "expected": 10,
    "received": 9,
    "refused": 1,
    "late": 0,
    "deadline": None,
    "seconds_left": None,
}
STUDY: dict[str, Any] = {
    "id": "s1",
    "name": "demo",
    "protocol": "user-mean",
    "trust": "local",
    "params": {"samples_per_user": 16},
    "seed": 5,
    "phase": "running",
    "created_at": "2026-01-01T00:00:00Z",
    "n_participants": 10,
    "enrollment_target": None,
    "enrollment_deadline": None,
    "round_deadline_s": 600.0,
    "quorum": 1.0,
    "current_round": 1,
    "rounds": [ROUND, {**ROUND, "index": 1, "name": "stage-2", "status": "open", "received": 3}],
    "failure_reason": None,
    "warnings": [],
}
ROUNDS = {
    "rounds": [
        {
            "index": 0,
            "name": "stage-1",
            "status": "closed",
            "expected": 10,
            "received": 10,
            "opened_at": "2026-01-01T00:00:01Z",
            "closed_at": "2026-01-01T00:00:02Z",
            "broadcast": {"L": 0},
            "output": {"k_hat": 1},
        }
    ]
}
RESULT: dict[str, Any] = {
    "study_id": "s1",
    "protocol": "user-mean-l2",
    "trust": "local",
    "phase": "finished",
    "estimate": [0.25, -0.5],
    "error_bar": {
        "half_width": 0.1,
        "level": 0.95,
        "kind": "theory",
        "approximate": False,
        "norm": "l2",
    },
    "diagnostics": {"n_bins": 4},
    "epsilon_spent": {"participants": 10, "charged": 10, "max": 1.0, "median": 1.0, "mean": 1.0},
    "warnings": [],
    "failure_reason": None,
}


def client() -> ApiClient:
    answers = {
        "/v1/studies/s1": STUDY,
        "/v1/studies": {"studies": [STUDY]},
        "/v1/studies/s1/rounds": ROUNDS,
        "/v1/studies/s1/result": RESULT,
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answers[request.url.path])

    return ApiClient("http://test", transport=httpx.MockTransport(handler))


async def test_the_client_returns_views_that_are_still_wire_models() -> None:
    async with client() as api:
        study, studies = await api.study("s1"), await api.list_studies()
        rounds, result = await api.rounds("s1"), await api.result("s1")
    assert isinstance(study, StudyView)
    assert isinstance(study, wire.StudyView)
    assert isinstance(studies, StudyList)
    assert isinstance(studies.studies[0], StudyView)
    assert isinstance(rounds, RoundsView)
    assert isinstance(rounds.rounds[0], wire.RoundView)
    assert isinstance(result, ResultView)
    assert isinstance(result, wire.ResultView)
    # to_dict is the JSON object the server sent (datetimes as text again)
    assert study.to_dict() == wire.StudyView.model_validate(STUDY).model_dump(mode="json")
    assert json.loads(json.dumps(result.to_dict())) == result.to_dict()


async def test_frames_have_one_row_per_round_study_or_coordinate() -> None:
    async with client() as api:
        study, studies = await api.study("s1"), await api.list_studies()
        rounds, result = await api.rounds("s1"), await api.result("s1")
    frame = study.to_frame()
    assert frame[["index", "name", "status", "received", "refused"]].to_dict("list") == {
        "index": [0, 1],
        "name": ["stage-1", "stage-2"],
        "status": ["closed", "open"],
        "received": [9, 3],
        "refused": [1, 1],
    }
    table = rounds.to_frame()
    assert list(table.columns) == [
        "index",
        "name",
        "status",
        "expected",
        "received",
        "refused",
        "late",
        "opened_at",
        "closed_at",
    ]
    assert (table["closed_at"] - table["opened_at"]).dt.total_seconds().tolist() == [1.0]
    assert rounds.rounds[0].to_frame().equals(table)
    listed = studies.to_frame()
    assert listed[["id", "phase", "n_participants"]].to_dict("records") == [
        {"id": "s1", "phase": "running", "n_participants": 10}
    ]
    estimate = result.to_frame()
    assert estimate["coordinate"].tolist() == [0, 1]
    assert estimate["estimate"].tolist() == [0.25, -0.5]
    assert estimate["error_bar.half_width"].tolist() == [0.1, 0.1]
    assert estimate["epsilon_spent.max"].tolist() == [1.0, 1.0]
    assert "truth" not in estimate  # not the server's to know
    assert "diagnostics" not in estimate


def test_a_missing_pandas_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedldp.client.extras import MissingExtra

    monkeypatch.setitem(__import__("sys").modules, "pandas", None)  # import pandas fails
    view = RoundsView.model_validate(ROUNDS)
    with pytest.raises(MissingExtra, match=r"pip install 'fedldp\[notebook\]'"):
        view.to_frame()
    assert view.to_dict()["rounds"][0]["received"] == 10  # needs no pandas


def test_protocols_budgets_and_predictions_are_tables() -> None:
    from fedldp.client.api.views import BudgetView, PredictView, ProtocolList
    from fedldp.protocol.catalogue import CATALOGUE

    described = CATALOGUE["user-mean"].describe(1.0)  # what the server lists for it
    listing = ProtocolList.model_validate(
        {"protocols": [{**described, "origin": "fedldp", "origin_version": "0"}]}
    )
    row = listing.to_frame().to_dict("records")[0]
    assert row["name"] == "user-mean"
    assert row["trust"] == "local"
    assert row["data_kind"] == "scalar"
    budget = BudgetView.model_validate(
        {
            "participant_id": 4,
            "declared_epsilon": 1.0,
            "planned": [
                {"round": 0, "name": "stage-1", "epsilon": 0.5, "reported": True},
                {"round": 1, "name": "stage-2", "epsilon": 0.5, "reported": False},
            ],
            "spent": 0.5,
            "remaining": 0.5,
        }
    )
    assert budget.to_frame()["epsilon"].sum() == budget.declared_epsilon
    assert budget.to_frame()["reported"].tolist() == [True, False]
    predicted = PredictView(study_id="s", protocol="user-regress", predictions=[0.5, -1.0])
    assert predicted.to_frame()["prediction"].tolist() == [0.5, -1.0]
