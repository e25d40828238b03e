"""Wire messages (the ``protocol/core/wire`` package): strict; payloads round-trip through rows."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from fedldp.protocol.core.base.records import PayloadKind
from fedldp.protocol.core.wire import (
    EnrollRequest,
    Payload,
    ReportBatch,
    ReportSubmit,
    StudyCreate,
    Task,
    TaskBatchRequest,
    pack_rows,
    payload_from_row,
    payload_row,
)

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
PAYLOAD = TypeAdapter(Payload)


@given(st.lists(finite, min_size=1, max_size=16))
def test_vector_payloads_round_trip(values: list[float]) -> None:
    kinds: tuple[PayloadKind, ...] = ("vector", "histogram", "statistic")
    for kind in kinds:
        p = payload_from_row(kind, np.asarray(values))
        assert np.array_equal(payload_row(p), values)
        assert PAYLOAD.validate_json(PAYLOAD.dump_json(p)) == p


@given(finite, st.sampled_from([-1, 1]), st.integers(0, 10**6))
def test_small_payloads_round_trip(x: float, sign: int, index: int) -> None:
    cases: tuple[tuple[PayloadKind, list[float]], ...] = (
        ("scalar", [x]),
        ("bit", [sign]),
        ("index-sign", [index, sign]),
    )
    for kind, row in cases:
        p = payload_from_row(kind, np.asarray(row, dtype=np.float64))
        assert payload_row(p).tolist() == row
        assert p.kind == kind


def test_payloads_are_discriminated_and_strict() -> None:
    assert PAYLOAD.validate_python({"kind": "bit", "bit": -1}).kind == "bit"
    for bad in (
        {"kind": "bit", "bit": 0},
        {"kind": "scalar", "value": float("nan")},
        {"kind": "scalar", "value": 1.0, "extra": 1},
        {"kind": "nope", "value": 1.0},
        {"kind": "index-sign", "index": -1, "sign": 1},
    ):
        with pytest.raises(ValidationError):
            PAYLOAD.validate_python(bad)


def test_request_models_reject_bad_input() -> None:
    with pytest.raises(ValidationError):
        EnrollRequest.model_validate({"epsilon": "1.0"})
    with pytest.raises(ValidationError):
        EnrollRequest.model_validate({"epsilon": float("inf")})
    with pytest.raises(ValidationError):
        StudyCreate.model_validate({"protocol": "user-mean", "seed": -1})
    with pytest.raises(ValidationError):
        StudyCreate.model_validate({"protocol": "user-mean", "seed": 1, "quorum": 1.5})
    with pytest.raises(ValidationError):
        ReportSubmit.model_validate(
            {"participant_id": 0, "token": "t", "round": 0, "payload": {"kind": "scalar"}}
        )


def test_task_union() -> None:
    task = TypeAdapter(Task).validate_python(
        {"kind": "wait", "reason": "enrolling", "retry_after_s": 1}
    )
    assert task.kind == "wait"


def test_enroll_batch_columns_give_the_same_rows_as_the_list() -> None:
    from fedldp.protocol.core.wire import EnrollBatch, EnrollRequest

    listed = EnrollBatch(
        participants=[
            EnrollRequest(epsilon=0.5, metadata={"samples": 4, "v": [1.0, 2.0]}, participant_id=7),
            EnrollRequest(epsilon=2.0, metadata={"samples": 8, "v": [3.0, 4.0]}, participant_id=8),
        ]
    )
    samples: list[int | float] = [4, 8]
    columns = EnrollBatch(
        epsilons=[0.5, 2.0],
        metadata={"samples": samples, "v": [[1.0, 2.0], [3.0, 4.0]]},
        participant_ids=[7, 8],
    )
    assert listed.rows() == columns.rows()
    assert EnrollBatch(epsilons=[1.0]).rows() == ([1.0], [{}], [None])


@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, -0.0, 4.0]), st.sampled_from([(1.0,), (1.0, 2.0)])),
        min_size=1,
        max_size=8,
    )
)
def test_enroll_batch_columns_share_the_dict_of_repeated_metadata(
    rows: list[tuple[float, tuple[float, ...]]],
) -> None:
    from fedldp.protocol.core.wire import EnrollBatch

    batch = EnrollBatch(
        epsilons=[1.0] * len(rows),
        metadata={"s": [r[0] for r in rows], "v": [list(r[1]) for r in rows]},
    )
    metadata = batch.rows()[1]
    ragged = len({len(r[1]) for r in rows}) > 1  # vectors of different lengths: never shared
    for i, (row, meta) in enumerate(zip(rows, metadata, strict=True)):
        assert (repr(meta["s"]), meta["v"]) == (repr(row[0]), list(row[1]))  # -0.0 stays -0.0
        same = i > 0 and not ragged and repr(rows[i - 1]) == repr(row)
        assert (i > 0 and meta is metadata[i - 1]) == same


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"epsilons": [1.0], "participants": [{"epsilon": 1.0}]},
        {"epsilons": [1.0, 1.0], "metadata": {"samples": [4.0]}},
        {"epsilons": [1.0], "participant_ids": [1, 2]},
        {"epsilons": ["1.0"]},
        {"participants": [{"epsilon": 1.0}], "participant_ids": [0]},
    ],
)
def test_enroll_batch_refuses_mixed_or_ragged_forms(bad: dict[str, Any]) -> None:
    from fedldp.protocol.core.wire import EnrollBatch

    with pytest.raises(ValidationError):
        EnrollBatch.model_validate(bad)


@given(st.integers(1, 6), st.integers(0, 5), st.data())
def test_packed_payload_rows_round_trip_bit_for_bit(n: int, k: int, data: st.DataObject) -> None:
    rows = np.array(data.draw(st.lists(finite, min_size=n * k, max_size=n * k))).reshape(n, k)
    batch = ReportBatch(
        round=0,
        kind="vector",
        participant_ids=list(range(n)),
        tokens=["t"] * n,
        packed=pack_rows(rows),
    )
    again = ReportBatch.model_validate_json(batch.model_dump_json())
    assert again.packed_rows().tobytes() == rows.astype(np.float64).tobytes()  # -0.0 included


@pytest.mark.parametrize(
    "change",
    [
        {"packed": None},  # neither form
        {"payloads": [[1.0]] * 2},  # both forms
        {"packed": "AAAA*AAA"},  # not base64
        {"packed": "AAAAAAAA8D8"},  # unpadded
        {"packed": "\u00e9"},
        {"packed": pack_rows(np.ones(3))},  # three numbers for two participants
        {"packed": pack_rows(np.array([1.0, np.inf]))},
        {"packed": pack_rows(np.array([np.nan, 1.0]))},
        {"packed": None, "payloads": [[1.0]]},  # one row for two participants
        {"tokens": ["a"]},  # one token for two participants
    ],
)
def test_report_batches_are_checked(change: dict[str, Any]) -> None:
    body = {
        "round": 0,
        "kind": "scalar",
        "participant_ids": [0, 1],
        "tokens": ["a", "b"],
        "packed": pack_rows(np.ones(2)),
    }
    ReportBatch.model_validate(body)
    with pytest.raises(ValidationError):
        ReportBatch.model_validate(body | change)


def test_task_batch_requests_need_one_token_per_participant() -> None:
    TaskBatchRequest(participant_ids=[0, 1], tokens=["a", "b"])
    with pytest.raises(ValidationError, match="2 participant ids but 1 tokens"):
        TaskBatchRequest(participant_ids=[0, 1], tokens=["a"])


@pytest.mark.parametrize(
    "raw",
    [
        {"epsilon": "0.5"},
        {"epsilon": True},
        {"epsilon": 1.0, "participant_id": 1.0},
        {"epsilon": 1.0, "metadata": {"samples": 4.0}},
        {"epsilon": 1.0, "metadata": {"samples": 0}},
        {"epsilon": 1.0, "metadata": {"samples": 10**9 + 1}},
    ],
    ids=repr,
)
def test_request_models_are_strict(raw: dict[str, object]) -> None:
    from fedldp.protocol.core.wire import EnrollRequest

    with pytest.raises(ValidationError):
        EnrollRequest.model_validate(raw)
    with pytest.raises(ValidationError):
        EnrollRequest.model_validate_json(json.dumps(raw))
    assert (
        EnrollRequest.model_validate({"epsilon": 1, "metadata": {"samples": 10**9}}).epsilon == 1.0
    )
