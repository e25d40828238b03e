"""The kit's statistic-free privacy check (``privacy-marginals``: the marginal audit of
protocol/mechanisms/marginal_audit.py) on protocols written as plugins are, against
``fedldp.protocol.api`` only, each with its author's own audit case (``client_audits()``).

A count-mean sketch whose report is (row j, ±1 vector): when the row is drawn from the item
(``row = item % rows``, the item in clear), the author's statistic, which reads the ±1 part only,
passes the end-to-end audit while the marginal audit fails on coordinate 0. The honest sketch
(uniform row) passes both, and a Laplace mean that randomizes at twice its charge fails both.

Both audits run at the kit's defaults (confidence 0.999: an ε-LDP step fails either with
probability at most 0.001 per case and ε; fixed seeds make the outcome the same on every run).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from pydantic import Field

from fedldp.client.population.build import PopulationSpec
from fedldp.protocol.api import (
    JSON,
    ClientAudit,
    ClientStep,
    DataKind,
    ErrorBar,
    FloatArray,
    IntArray,
    Params,
    Plan,
    Protocol,
    RandomSource,
    ReportChunk,
    Result,
    RoundTask,
    UserData,
    client_step,
    cohort_plan,
    one_user,
    scaled_loss,
    z_quantile,
)
from fedldp.testing import check_protocol
from tests.protocol.plugin_mean import PluginMean

PRIVACY = ["privacy-audit", "privacy-marginals"]
POPULATION = PopulationSpec(users=600, samples=4, distribution="categorical", items=6)
SKETCH = {"rows": 4, "width": 8}


class SketchParams(Params):
    rows: int = Field(4, ge=1, le=64, description="d: hash rows")
    width: int = Field(8, ge=2, le=64, description="w: buckets per row")


def bucket(items: IntArray, row: IntArray, width: int) -> IntArray:
    """Row ``row``'s hash of ``items``: (item·(2·row + 1) + row) mod w."""
    return np.asarray((items * (2 * row + 1) + row) % width, dtype=np.int64)


def flip_probability(epsilon: FloatArray) -> FloatArray:
    """Each ±1 entry flips with probability 1/(1 + e^{ε/2}): two entries change with the item,
    so the vector is ε-LDP given the row."""
    return np.asarray(1.0 / (1.0 + np.exp(np.asarray(epsilon) / 2.0)), dtype=np.float64)


class CountMeanSketch(Protocol[SketchParams]):
    """Item frequencies by a count-mean sketch: user i sends (row j, ±1 one-hot of the item's
    bucket in row j with each entry flipped at ε_i/2); the server debiases each entry and
    corrects for collisions."""

    name: ClassVar[str] = "test-cms"
    summary: ClassVar[str] = "count-mean sketch with one ±1 row per user (a test plugin)"
    source: ClassVar[str] = "tests/test_kit_marginals.py"
    heterogeneity: ClassVar[str] = "each report debiased with its sender's ε, plain average"
    data_kind: ClassVar[DataKind] = "categorical"
    params_model = SketchParams
    row_from_item: ClassVar[bool] = False

    def plan(
        self,
        params: SketchParams,
        epsilon: FloatArray,
        metadata: Mapping[str, NDArray[Any]],
        seed: int,
    ) -> Plan:
        return cohort_plan(epsilon, seed, payload_kind="vector", payload_shape=(1 + params.width,))

    def broadcast(
        self, params: SketchParams, plan: Plan, round_index: int, outputs: Sequence[JSON]
    ) -> JSON:
        return {"rows": params.rows, "width": params.width}

    def privatize(
        self,
        params: SketchParams,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        d, w = int(task.broadcast["rows"]), int(task.broadcast["width"])
        u = rng.random((data.n_users, 2 + w))  # which sample, which row, which entries flip
        pick = np.minimum(np.floor(u[:, 0] * data.counts).astype(np.int64), data.counts - 1)
        item = np.asarray(data.values, dtype=np.int64)[data.offsets[:-1] + pick]
        if self.row_from_item:
            row = item % d
        else:
            row = np.minimum(np.floor(u[:, 1] * d).astype(np.int64), d - 1)
        hot = np.arange(w)[None, :] == bucket(item, row, w)[:, None]
        signs = np.where(hot, 1.0, -1.0)
        signs *= np.where(u[:, 2:] < flip_probability(epsilon)[:, None], -1.0, 1.0)
        return np.column_stack([row.astype(np.float64), signs])

    def aggregate(
        self,
        params: SketchParams,
        plan: Plan,
        round_index: int,
        broadcast: JSON,
        chunks: Iterable[ReportChunk],
    ) -> JSON:
        w = params.width
        sums, count, variance = np.zeros((params.rows, w)), 0, 0.0
        for chunk in chunks:
            gap = 1.0 - 2.0 * flip_probability(chunk.epsilon)
            # (y/(1 − 2f) + 1)/2 is unbiased for the entry's one-hot value
            unbiased = (chunk.payloads[:, 1:] / gap[:, None] + 1.0) / 2.0
            np.add.at(sums, chunk.payloads[:, 0].astype(np.int64), unbiased)
            count += int(chunk.slots.size)
            variance += float(np.sum(0.25 / gap**2))
        if count == 0:
            raise ValueError("no reports to aggregate")
        return {"sums": sums.tolist(), "count": count, "variance": variance}

    def finalize(self, params: SketchParams, plan: Plan, outputs: Sequence[JSON]) -> Result:
        (out,) = outputs
        d, w, n = params.rows, params.width, int(out["count"])
        sums = np.asarray(out["sums"])
        items = np.arange(w)
        # a report's row is uniform: E[sum over rows of entry h_j(v)] / n = f(v) + (1 − f(v))/w
        hit = sum(sums[j, bucket(items, np.full(w, j), w)] for j in range(d)) / n
        freq = (w * hit - 1.0) / (w - 1.0)
        half = z_quantile(0.95) * math.sqrt(float(out["variance"])) / n * w / (w - 1.0)
        return Result([float(f) for f in freq], ErrorBar(half, 0.95, "clt", approximate=True))

    def client_audits(self) -> tuple[ClientAudit, ...]:
        """The author's case: the audited user's samples all item 0 against all item 1, and the
        statistic y[h_j(0)] − y[h_j(1)] of the ±1 part in the report's row j (the privacy loss
        given the row, which reaches ε: the case is tight)."""
        background = one_user(np.zeros(4, dtype=np.int64)).take(np.zeros(2, np.int64))

        def setup(epsilon: float) -> ClientStep:
            return client_step(self, SKETCH, epsilon, background, 0)

        def signs_only(
            step: ClientStep, a: UserData, b: UserData
        ) -> Callable[[FloatArray], FloatArray]:
            w = SKETCH["width"]

            def statistic(z: FloatArray) -> FloatArray:
                row = z[:, 0].astype(np.int64)
                at = np.arange(z.shape[0])
                h0, h1 = bucket(np.zeros_like(row), row, w), bucket(np.ones_like(row), row, w)
                return np.asarray(z[at, 1 + h0] - z[at, 1 + h1], dtype=np.float64)

            return statistic

        a = one_user(np.zeros(4, dtype=np.int64))
        b = one_user(np.ones(4, dtype=np.int64))
        return (ClientAudit(self.name, "report", "item 0 against 1", setup, a, b, signs_only),)


class RowFromItem(CountMeanSketch):
    """The sketch whose row is the item mod d: the report carries the item's residue in clear."""

    name: ClassVar[str] = "test-cms-row-leak"
    row_from_item: ClassVar[bool] = True


def test_an_honest_sketch_passes_both_privacy_checks() -> None:
    report = check_protocol(CountMeanSketch(), population=POPULATION, only=PRIVACY)
    assert report.ok, str(report)


def test_a_leak_the_authors_statistic_ignores_fails_the_marginal_audit() -> None:
    report = check_protocol(RowFromItem(), population=POPULATION, only=PRIVACY)
    assert report["privacy-audit"].passed, str(report)  # the ±1 part is ε-LDP given the row
    assert [f.name for f in report.failures] == ["privacy-marginals"], str(report)
    reason = report["privacy-marginals"].reason
    assert "test-cms-row-leak:report at ε=1" in reason
    assert "coordinate 0 = 0" in reason or "coordinate 0 = 1" in reason, reason
    assert "point estimate inf" in reason, reason


class MeanAtTwice(PluginMean):
    """The plugin mean (tests/protocol/plugin_mean.py) randomizing at twice its charge, with
    its author's case: samples all at −B against all at +B, the Laplace loss statistic."""

    name: ClassVar[str] = "test-mean-twice"

    def privatize(
        self,
        params: Any,
        task: RoundTask,
        data: UserData,
        epsilon: FloatArray,
        group: IntArray,
        rng: RandomSource,
    ) -> FloatArray:
        return super().privatize(params, task, data, 2.0 * epsilon, group, rng)

    def client_audits(self) -> tuple[ClientAudit, ...]:
        background = one_user(np.zeros(4)).take(np.zeros(2, np.int64))

        def setup(epsilon: float) -> ClientStep:
            return client_step(self, {"bound": 1.0}, epsilon, background, 0)

        a, b = one_user(np.full(4, -1.0)), one_user(np.full(4, 1.0))
        return (ClientAudit(self.name, "mean", "ends", setup, a, b, scaled_loss),)


def test_a_step_at_twice_its_charge_fails_the_marginal_audit_too() -> None:
    spec = PopulationSpec(users=600, samples=4, distribution="two-point", mean=0.3)
    report = check_protocol(MeanAtTwice(), population=spec, only=PRIVACY)
    assert [f.name for f in report.failures] == PRIVACY, str(report)
    assert "coordinate 0" in report["privacy-marginals"].reason
