"""Report blocks (server/store/report_rows.py), on every backend: whatever blocks the reports of
a round were stored in (a batch's contiguous ids, ids spread wider than ``SPAN``, single reports
grouped in arbitrary sets, blocks whose ranges interleave), each id is found exactly when it was
stored, a second report for it is never stored, and the round reads back in participant order,
in pages of exactly the chunk asked for."""

from __future__ import annotations

import numpy as np
import pytest

from fedldp.protocol.core.wire import StudyCreate
from fedldp.server.runtime.context import Context
from fedldp.server.services import studies
from fedldp.server.store import participant_rows, report_rows
from fedldp.server.store.blocks import SPAN, sorted_unique
from fedldp.server.store.sql import PARTICIPANT_BLOCKS, REPORT_BLOCKS
from fedldp.server.store.tables import utcnow

WIDTH = 3


def _rows(ids: np.ndarray) -> np.ndarray:
    """Payload rows that tell every (participant, column) apart."""
    return np.sin(ids[:, None] * 7.0 + np.arange(WIDTH)[None, :])


def _store(
    ctx: Context, study_id: str, ids: list[int], charges: np.ndarray | None = None
) -> list[bool]:
    pids = np.asarray(ids, dtype=np.int64)
    eps = np.full(pids.size, 0.5) if charges is None else charges
    with ctx.transaction() as session:
        fresh = report_rows.insert_reports(
            session, study_id, 0, utcnow(), pids, _rows(pids), eps, None
        )
    return [bool(f) for f in fresh]


@pytest.fixture
def study_id(ctx: Context) -> str:
    return studies.create(ctx, StudyCreate(protocol="hetero-mean-rr", seed=3)).id


GROUPS = [
    list(range(0, 10_000)),  # a batch: contiguous, wider than SPAN (three blocks)
    [10_500, 30_000, 10_400, 10_450],  # single reports grouped, spread out, any order
    [10_401, 10_449, 10_499, 25_000],  # interleaving the previous group's range
    list(range(12_000, 20_000, 3)),  # a subsampled cohort
]


def test_blocks_find_exactly_the_stored_ids_and_refuse_a_second_report(
    ctx: Context, study_id: str
) -> None:
    stored: set[int] = set()
    for group in GROUPS:
        assert _store(ctx, study_id, group) == [True] * len(group)
        stored |= set(group)
    # a group overlapping stored reports stores only the others
    again = [5, 10_450, 10_451, 12_003, 12_004, 40_000]
    assert _store(ctx, study_id, again) == [p not in stored for p in again]
    stored |= set(again)

    probe = np.array(sorted({*range(0, 41_000, 7), *stored, 10_402, 12_001}), dtype=np.int64)
    with ctx.transaction() as session:
        found = report_rows.reported_pids(session, study_id, 0, probe)
        receipts = report_rows.existing_reports(session, study_id, 0, "vector", probe.tolist())
        assert report_rows.count_reports(session, study_id, 0) == len(stored)
        assert report_rows.reported_pids(session, study_id, 1, probe).size == 0
    assert set(found.tolist()) == stored & set(probe.tolist())
    assert set(receipts) == stored & set(probe.tolist())
    now = report_rows.reported_now(ctx.db, study_id, 0, probe)
    assert set(now.tolist()) == set(found.tolist())
    for low, high in [(0, 40_000), (10_000, 10_500), (10_401, 10_401), (12_001, 12_002)]:
        count = report_rows.count_reported(ctx.db, study_id, 0, low, high)
        assert count == sum(low <= p <= high for p in stored)
    for pid in (10_449, 10_448, 25_000, 9_999, 10_000):
        assert report_rows.rounds_reported(ctx.db, study_id, [0, 1], pid) == (
            [0] if pid in stored else []
        )
    # a local-trust receipt's digest is its stored payload's
    pid = 10_401
    row = _rows(np.array([pid]))[0].astype("<f8").tobytes()
    assert receipts[pid][0] == report_rows.receipt_digests("vector", [row])[0]


@pytest.mark.parametrize("chunk", [1, 7, SPAN, 50_000])
def test_a_round_reads_in_participant_order_in_pages_of_the_chunk(
    ctx: Context, study_id: str, chunk: int
) -> None:
    for group in reversed(GROUPS):  # stored in another order than the ids'
        _store(ctx, study_id, group)
    every = np.array(sorted({p for g in GROUPS for p in g}), dtype=np.int64)
    with ctx.transaction() as session:
        pages = list(report_rows.stream_reports(session, study_id, 0, chunk))
    sizes = [ids.size for ids, _ in pages]
    assert sizes[:-1] == [chunk] * (len(pages) - 1)
    assert 0 < sizes[-1] <= chunk
    ids = np.concatenate([ids for ids, _ in pages])
    rows = np.concatenate([rows for _, rows in pages])
    assert ids.tolist() == every.tolist()
    assert np.array_equal(rows, _rows(every))  # bit for bit


def test_epsilons_are_stored_once_when_shared_and_each_otherwise(
    ctx: Context, study_id: str
) -> None:
    shared = list(range(0, 100))
    own = list(range(200, 300))
    charges = np.linspace(0.1, 1.0, len(own))
    _store(ctx, study_id, shared)
    _store(ctx, study_id, own, charges)
    with ctx.transaction() as session:
        spent = report_rows.spent_per_participant(session, study_id, 400, 1)
        t = REPORT_BLOCKS
        sizes = dict(
            session.execute(
                t.select().with_only_columns(t.c.low, t.c.epsilons).where(t.c.study_id == study_id)
            ).all()
        )
    assert spent[shared].tolist() == [0.5] * len(shared)
    assert spent[own].tolist() == charges.tolist()
    assert not spent[300:].any()
    assert {low: len(bytes(b)) for low, b in sizes.items()} == {0: 8, 200: 8 * len(own)}


def test_a_contiguous_block_stores_no_ids(ctx: Context, study_id: str) -> None:
    """A batch of contiguous scalar reports costs its payload and one ε per block."""
    pids = np.arange(1000, 1000 + 2 * SPAN, dtype=np.int64)
    with ctx.transaction() as session:
        report_rows.insert_reports(
            session, study_id, 0, utcnow(), pids, np.ones((pids.size, 1)), np.ones(pids.size), None
        )
        t = REPORT_BLOCKS
        blocks = session.execute(
            t.select().with_only_columns(t.c.low, t.c.high, t.c.size, t.c.ids, t.c.payload)
        ).all()
    assert [(b.low, b.high, b.size, b.ids) for b in blocks] == [
        (1000, 1000 + SPAN - 1, SPAN, None),
        (1000 + SPAN, 1000 + 2 * SPAN - 1, SPAN, None),
    ]
    assert sum(len(bytes(b.payload)) for b in blocks) == 8 * pids.size


# --------------------------------------------------------------------------- enrollment blocks


def test_enrollment_blocks_read_back_in_id_order_and_enroll_an_id_once(
    ctx: Context, study_id: str
) -> None:
    first = [*range(0, 5000, 2), 9000]  # wider than SPAN: three blocks
    second = [*range(1, 5000, 2), 9001]  # interleaving the first's ranges
    meta = [{"weight": float(p), "zero": -0.0 if p % 3 else 0.0} for p in second]
    with ctx.transaction() as session:
        now = utcnow()
        assert participant_rows.add_participants(
            session, study_id, now, first, [0.5] * len(first), {"shared": 1}
        )
        assert participant_rows.add_participants(
            session, study_id, now, second[::-1], [2.0 + p for p in second][::-1], meta[::-1]
        )
    with ctx.transaction() as session:  # an enrolled id refuses the whole enrollment
        assert not participant_rows.add_participants(
            session, study_id, utcnow(), [9002, 4999, 9003], [1.0] * 3, {}
        )
        eps, metadata = participant_rows.load_participants(session, study_id)
        declared = participant_rows.declared_epsilons(session, study_id)
        top = participant_rows.max_participant_id(session, study_id)
        one = participant_rows.participant(session, study_id, 4999)
        other = participant_rows.participant(session, study_id, 9000)
        missing = participant_rows.participant(session, study_id, 9002)
    ids = sorted(first + second)
    want_eps = [0.5 if p % 2 == 0 else 2.0 + p for p in ids]
    want_meta = [{"shared": 1} if p % 2 == 0 else meta[second.index(p)] for p in ids]
    assert eps.tolist() == declared.tolist() == want_eps
    assert [repr(m) for m in metadata] == [repr(m) for m in want_meta]  # -0.0 kept
    assert top == 9001
    assert one is not None
    assert (one.epsilon, one.metadata) == (2.0 + 4999, meta[-2])
    assert other is not None
    assert (other.epsilon, other.metadata) == (0.5, {"shared": 1})
    assert missing is None


def test_a_subsampled_cohort_stores_its_ids_as_a_bitmap(ctx: Context, study_id: str) -> None:
    """Every third id of a block's range: a bit per id of the range, not 4 bytes per id."""
    ids = list(range(12_000, 12_000 + SPAN, 3))
    _store(ctx, study_id, ids)
    with ctx.transaction() as session:
        t = REPORT_BLOCKS
        (packed,) = session.execute(t.select().with_only_columns(t.c.ids)).scalars().all()
        found = report_rows.reported_pids(
            session, study_id, 0, np.arange(11_990, 12_000 + SPAN + 10, dtype=np.int64)
        )
    assert len(bytes(packed)) == (ids[-1] - ids[0] + 1 + 7) // 8 < 4 * len(ids)
    assert found.tolist() == ids


def test_metadata_one_object_for_all_is_stored_once(ctx: Context, study_id: str) -> None:
    """The wire shares one dict between participants whose metadata are equal (EnrollBatch.rows):
    a block stores it once; distinct objects, each its own."""
    same = {"n_samples": 256}
    with ctx.transaction() as session:
        now = utcnow()
        participant_rows.add_participants(session, study_id, now, range(5), [1.0] * 5, [same] * 5)
        own = [{"n_samples": 256} for _ in range(5)]
        participant_rows.add_participants(session, study_id, now, range(5, 10), [1.0] * 5, own)
        t = PARTICIPANT_BLOCKS
        stored = dict(session.execute(t.select().with_only_columns(t.c.low, t.c.metadata)).all())
        _, metadata = participant_rows.load_participants(session, study_id)
    assert stored == {0: same, 5: own}
    assert metadata == [same] * 10


@pytest.mark.parametrize(
    "ids",
    [[], [5], [1, 2, 3], [1, 3, 2], [3, 2, 1], [1, 1, 2], [0, 4096, 9000], list(range(10, 0, -1))],
)
def test_sorted_unique_is_np_unique(ids: list[int]) -> None:
    """The batch's increasing ids skip np.unique's sort; any other order still gets it."""
    got = sorted_unique(np.asarray(ids, dtype=np.int64))
    assert got.dtype == np.int64
    assert got.tolist() == np.unique(np.asarray(ids, dtype=np.int64)).tolist()
