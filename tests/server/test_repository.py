"""The SQL layer (server/store/repository.py), on every backend: lookups by sets of participant ids
answer the same whether the ids form a block (one range condition) or are spread out (IN-lists)."""

from __future__ import annotations

import numpy as np
import pytest

from fedldp.protocol.core.wire import EnrollBatch, ReportBatch, StudyCreate
from fedldp.server.runtime.context import Context
from fedldp.server.services import enrollment, ingest, studies
from fedldp.server.store import participant_rows, report_rows, sql
from fedldp.server.store.tables import utcnow

N = 40
REPORTED = [3, 4, 5, 6, 20, 39]


@pytest.fixture
def study_id(ctx: Context) -> str:
    """hetero-mean-rr (one round) with N participants, of whom REPORTED have reported."""
    study = studies.create(ctx, StudyCreate(protocol="hetero-mean-rr", seed=3))
    enrolled = enrollment.enroll(ctx, study.id, [1.0] * N, [{}] * N, [None] * N)
    studies.start(ctx, study.id)
    batch = ReportBatch(
        round=0,
        kind="bit",
        participant_ids=REPORTED,
        tokens=[enrolled.tokens[p] for p in REPORTED],
        payloads=[[1.0]] * len(REPORTED),
    )
    assert ingest.submit_batch(ctx, study.id, batch).accepted == len(REPORTED)
    return study.id


@pytest.mark.parametrize(
    "ids",
    [
        list(range(N)),  # a block: one range
        [2, 3, 4, 7, 20],  # a block with gaps, still one range
        [0, 6, 39],  # spread out: an IN-list
        [39, 3, 0],  # any order
        [],
    ],
)
def test_lookups_by_ids_find_exactly_the_stored_reports(
    ctx: Context, study_id: str, ids: list[int]
) -> None:
    expected = sorted(set(ids) & set(REPORTED))
    with ctx.transaction() as session:
        found = report_rows.reported_pids(session, study_id, 0, np.array(ids, dtype=np.int64))
        stored = report_rows.existing_reports(session, study_id, 0, "bit", ids)
        rounds = report_rows.reported_rounds(session, study_id, ids)
        assert (
            report_rows.reported_pids(session, study_id, 1, np.array(ids, dtype=np.int64)).size == 0
        )
    assert sorted(found.tolist()) == expected
    assert sorted(stored) == expected
    # a local-trust report stores no digest: its receipt's is its payload's, worked out on reading
    digest = report_rows.receipt_digests("bit", [np.float64(1.0).tobytes()])[0]
    assert {d for d, _ in stored.values()} <= {digest}
    assert rounds == {p: [0] if p in REPORTED else [] for p in ids}


def test_lookups_span_more_ids_than_one_in_list(ctx: Context, study_id: str) -> None:
    spread = [p * 1000 for p in range(2 * sql.IN_CHUNK)] + REPORTED  # several IN-lists
    with ctx.transaction() as session:
        found = report_rows.reported_pids(session, study_id, 0, np.array(spread, dtype=np.int64))
        stored = report_rows.existing_reports(session, study_id, 0, "bit", spread)
    assert sorted(found.tolist()) == sorted(stored) == REPORTED


def test_participants_sharing_metadata_store_each_their_own(ctx: Context) -> None:
    """Runs of equal metadata are encoded once (fedldp.server.store.repository._processed); every
    participant still reads back its own, 0.0 and -0.0 included."""
    weights = [4.0, 4.0, 8.0, 8.0, 8.0, -0.0, 0.0, 0.0, 4.0]
    study = studies.create(ctx, StudyCreate(protocol="hetero-mean-rr", seed=3))
    batch = EnrollBatch(epsilons=[1.0] * len(weights), metadata={"weight": weights})
    enrollment.enroll(ctx, study.id, *batch.rows())
    with ctx.transaction() as session:
        _, metadata = participant_rows.load_participants(session, study.id)
    assert [repr(m["weight"]) for m in metadata] == [repr(v) for v in weights]


@pytest.mark.parametrize("chunk", [1, 4, 8192])
def test_reports_stream_and_sum_in_pages(ctx: Context, study_id: str, chunk: int) -> None:
    with ctx.transaction() as session:
        pages = list(report_rows.stream_reports(session, study_id, 0, chunk))
        spent = report_rows.spent_per_participant(session, study_id, N, 1)
        assert not report_rows.spent_per_participant(session, study_id, N, 0).any()
    assert [pid for ids, _ in pages for pid in ids.tolist()] == REPORTED
    assert [len(ids) for ids, _ in pages] == [
        min(chunk, len(REPORTED) - s) for s in range(0, len(REPORTED), chunk)
    ]
    assert all(rows.shape == (len(ids), 1) for ids, rows in pages)
    assert {float(v) for _, rows in pages for v in rows.ravel()} == {1.0}
    assert np.flatnonzero(spent).tolist() == REPORTED
    assert spent[REPORTED].tolist() == [1.0] * len(REPORTED)


def test_epsilon_spent_adds_up_every_round(ctx: Context, study_id: str) -> None:
    """Participants who report in several rounds are charged for each (basic composition)."""
    again = [4, 20, 21]
    with ctx.transaction() as session:  # a second round's reports, written directly
        inserted = report_rows.insert_reports(
            session,
            study_id,
            1,
            utcnow(),
            np.array(again, dtype=np.int64),
            np.zeros((3, 1)),
            np.full(3, 0.25),
            None,
        )
        assert inserted.tolist() == [True] * 3
    with ctx.transaction() as session:
        spent = report_rows.spent_per_participant(session, study_id, N, 2)
    expected = np.zeros(N)
    expected[REPORTED] += 1.0
    expected[again] += 0.25
    assert spent.tolist() == expected.tolist()
