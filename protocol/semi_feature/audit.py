"""The semi-feature protocols (Ma, Jia and Yang, "Locally Private Estimation with Public
Features"; spec public-features-ldp.md) on their worst-case neighbouring users, for the end-to-end
privacy audit (``fedldp.protocol.mechanisms.audit.ClientAudit``; the catalogue lists the cases in
``fedldp.protocol.catalogue.CLIENT_AUDITS``).

Semi-feature LDP (§1.2) protects a user's private features and its label; its public features and
privacy mask are public (enrollment metadata). So the two neighbouring users here share the mask
and the public features and differ in everything else: d = 2 features, feature 0 public at 0,
feature 1 private, at 0.05 with the label at y_hi against 0.95 with the label at y_lo (the ends
of the label range, and private cells far apart). Every case runs the protocol's own
``privatize`` at the ε its plan charges; the cell round of HistOfTree gets the partition its
label round grew on a background population (200 users, public feature 0 spread over [0, 1];
the audited participant is slot 0, whose enrolled public feature is 0). The cell round's
partition has t = 2 bins on the private feature (``bins`` = 2; ``bins_offset`` = 1 for the tuned
variant, whose rule (15) picks t* = 1 here): with the default t = 1 at ε = 1 the private
feature does not change the cell, and the report carries nothing of it to audit.

Statistics (each the privacy loss of the report, or a monotone function of it):

* Laplace labels (HistOfTree's label round, ``pardt``, ``labeldt``) and Hist's two Laplace
  histograms: the ℓ1 loss in units of the noiseless difference
  (``fedldp.protocol.mechanisms.audit.scaled_loss``).
* HistOfTree's cell round, GRR over the sender's potential cells V_i: +1 when the report is A's
  cell, −1 when it is B's, 0 otherwise (e^ε/(e^ε + K − 1) against 1/(e^ε + K − 1)); with unary RR
  the bit of A's cell minus the bit of B's (both bits flip, each at ε/2).
* ``krr-tree``: the label's ℓ1 loss in units of its range (at ε/2) plus +1/−1 when the private
  coordinate's reported bin is A's/B's (GRR at ε/2): the sum is the loss in units of ε/2.

``labeldt`` is a label-LDP benchmark: it sends every feature in clear, so it makes no
semi-feature claim; its case moves the label only (its own claim), and the private feature must
be equal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fedldp.protocol.api import (
    ClientAudit,
    ClientStep,
    FloatArray,
    Protocol,
    UserData,
    client_step,
    laplace_loss_statistic,
    one_user,
    scaled_loss,
)
from fedldp.protocol.semi_feature.hist_ldp import HistLdp
from fedldp.protocol.semi_feature.histoftree import HistOfTree, HistOfTreeTuned
from fedldp.protocol.semi_feature.partition import Partition, histogram_bins
from fedldp.protocol.semi_feature.tree_baselines import KrrTree, LabelDt, ParDt

__all__ = ["CLIENT_AUDITS", "neighbour"]

_D = 2
_MASK = np.array([0.0, 1.0])  # feature 0 public, feature 1 private
_LABELS = {"label_low": -1.0, "label_high": 3.0}
_USERS = 200


def neighbour(private: float, label: float, public: float = 0.0) -> UserData:
    """One user with features (``public``, ``private``), the mask ``_MASK`` and ``label``."""
    return one_user(np.concatenate([[public, private], _MASK])[None, :], label)


_A = neighbour(0.05, _LABELS["label_high"])
_B = neighbour(0.95, _LABELS["label_low"])


def _background() -> tuple[UserData, dict[str, np.ndarray]]:
    """``_USERS`` users: public feature 0 on a grid of [0, 1] (slot 0 at 0), private feature 1
    and the label varying with it; their enrollment metadata."""
    x0 = np.linspace(0.0, 1.0, _USERS)
    x1 = (np.arange(_USERS) * 0.37) % 1.0
    values = np.column_stack([x0, x1, np.tile(_MASK, (_USERS, 1))])
    labels = 2.0 * x0 + x1 - 0.5
    data = UserData(values, np.ones(_USERS, dtype=np.int64), labels)
    mask = np.tile(_MASK, (_USERS, 1))
    return data, {"mask": mask, "public": np.where(mask == 1.0, 0.0, values[:, :_D])}


def _setup(
    protocol: Protocol[Any], params: Mapping[str, Any], round_index: int
) -> Callable[[float], ClientStep]:
    raw = {"dimension": _D, **_LABELS, **params}

    def setup(eps: float) -> ClientStep:
        data, metadata = _background()
        return client_step(protocol, raw, eps, data, round_index, metadata=metadata)

    return setup


def _cells(step: ClientStep, a: UserData, b: UserData) -> tuple[int, int]:
    part = Partition.from_json(step.task.broadcast["partition"])
    ca, cb = (int(part.cell(np.asarray(u.values)[:, :_D])[0]) for u in (a, b))
    if ca == cb:
        raise ValueError("the two neighbours share a cell of the partition")
    return ca, cb


def _grr_cell(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
    ca, cb = _cells(step, a, b)
    return lambda z: np.asarray((z[:, 0] == ca) * 1.0 - (z[:, 0] == cb), dtype=np.float64)


def _rr_cell(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
    ca, cb = _cells(step, a, b)
    return lambda z: np.asarray(z[:, ca] - z[:, cb], dtype=np.float64)


def _krr(step: ClientStep, a: UserData, b: UserData) -> Callable[[FloatArray], FloatArray]:
    k = int(step.params.krr_bins)  # type: ignore[attr-defined]
    ba, bb = (int(histogram_bins(np.asarray(u.values)[:, 1:2], k)[0, 0]) for u in (a, b))
    if ba == bb:
        raise ValueError("the two neighbours share a bin of the private coordinate")
    half = (_LABELS["label_high"] - _LABELS["label_low"]) / 2.0  # the centred label is ±M

    def statistic(z: FloatArray) -> FloatArray:
        label = laplace_loss_statistic(z[:, -1:] / (2.0 * half), [0.5], [-0.5])
        sent = np.rint(z[:, 1] * k - 0.5)
        return np.asarray(label + (sent == ba) - (sent == bb), dtype=np.float64)

    return statistic


def _hot(protocol: Protocol[Any], params: Mapping[str, Any], tag: str) -> tuple[ClientAudit, ...]:
    label = ClientAudit(
        protocol.name,
        "label",
        "the label at y_hi against y_lo: clip(y − m, −M, M) + Lap(2M/(ρε)), charged ρε",
        _setup(protocol, params, 0),
        _A,
        _B,
        scaled_loss,
    )
    grr = ClientAudit(
        protocol.name,
        "cell",
        "GRR over V_i at (1 − ρ)ε: the private feature 0.05 against 0.95 (cells of V_i apart)",
        _setup(protocol, params, 1),
        _A,
        _B,
        _grr_cell,
    )
    rr = ClientAudit(
        protocol.name,
        "cell",
        "unary RR over V_i at (1 − ρ)ε (bits at (1 − ρ)ε/2): the private feature 0.05 against 0.95",
        _setup(protocol, {**params, "index_mechanism": "rr"}, 1),
        _A,
        _B,
        _rr_cell,
        variant=f"rr{tag}",
    )
    return label, grr, rr


CLIENT_AUDITS: tuple[ClientAudit, ...] = (
    *_hot(HistOfTree(), {"bins": 2}, ""),
    *_hot(HistOfTreeTuned(), {"bins_offset": 1}, ""),
    ClientAudit(
        "hist-ldp",
        "histogram",
        "Hist (t = 2 bins per feature): Z̃ = (y − m)·e_cell + Lap(4M/ε), W̃ = e_cell + Lap(4/ε); "
        "cell and label both move (ℓ1 changes 2M and 2)",
        _setup(HistLdp(), {}, 0),
        _A,
        _B,
        scaled_loss,
    ),
    ClientAudit(
        "pardt",
        "report",
        "ParDT: the label alone at ε, y_hi against y_lo",
        _setup(ParDt(), {}, 0),
        _A,
        _B,
        scaled_loss,
    ),
    ClientAudit(
        "labeldt",
        "report",
        "LabelDT (label LDP only, features in clear): the label y_hi against y_lo, features equal",
        _setup(LabelDt(), {}, 0),
        _A,
        neighbour(0.05, _LABELS["label_low"]),
        scaled_loss,
    ),
    ClientAudit(
        "krr-tree",
        "report",
        "KRR (k = 3): the private coordinate in bin 0 against bin 2 by GRR at ε/2, the label "
        "y_hi against y_lo by Laplace at ε/2",
        _setup(KrrTree(), {}, 0),
        _A,
        _B,
        _krr,
    ),
)
"""The semi-feature protocols' end-to-end cases (``fedldp.protocol.catalogue.CLIENT_AUDITS``)."""
