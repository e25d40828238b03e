"""The classic mean protocols of the catalogue, scalar (``classic-<mech>``) and d-dimensional
(``classic-<mech>-vector``): what each user reports, the estimate, its weights and their
optimality, and the predicted error are stated in ``fedldp.protocol.classic.means_base``; the
mechanisms and their variances in ``fedldp.protocol.classic.means_theory``.

**The Laplace mechanism and the built-in baselines.** ``baseline-clipped-laplace`` (the clipped
user mean plus Lap(2D/ε_i), user_level/baselines.py) and ``hetero-mean-laplace`` (Alg. 1 of the
heterogeneous-ε paper) already release the clipped scalar mean with Laplace noise. Their weights
include a bound on the spread of the users' data (σ² ≤ D², resp. Var ≤ 1), since they target the
mean of the law the users come from; ``classic-laplace`` targets the users' own mean, whose exact
inverse-variance weights are ε_i²/8 (the BLUE: its variance does not depend on the data), and
shares the interface, the weights and the diagnostics of PM, HM and Duchi, so that the four
compare like with like (experiments/classic-e2-means-*.yaml). ``classic-laplace-vector`` adds
what no baseline has: the d-dimensional Laplace mechanism with Alg. 4's coordinate sampling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from fedldp.protocol.api import DataKind, Protocol
from fedldp.protocol.classic import means_theory as th
from fedldp.protocol.classic.means_base import ClassicMean, ClassicMeanParams, ClassicVectorParams

__all__ = [
    "PROTOCOLS",
    "ClassicDuchi",
    "ClassicDuchiVector",
    "ClassicHM",
    "ClassicHMVector",
    "ClassicLaplace",
    "ClassicLaplaceVector",
    "ClassicMean",
    "ClassicPM",
    "ClassicPMVector",
]

_SCALAR: Mapping[str, str] = {"dimension": "1 (scalar data): report one value"}
_VECTOR: Mapping[str, str] = {
    "dimension": "d: report a d-vector; PM, HM and Laplace sample k = max(1, min(d, "
    "floor(ε/2.5))) coordinates, each at ε/k scaled by d/k, the others 0"
}
_WANG = "Wang et al., ICDE 2019"


class ClassicLaplace(ClassicMean):
    """The Laplace mechanism: clip(mean, −1, 1) + Lap(2/ε_i)."""

    name: ClassVar[str] = "classic-laplace"
    mechanism: ClassVar[th.Mechanism] = "laplace"
    summary: ClassVar[str] = "Scalar mean on [-1, 1]: the clipped user mean plus Laplace(2/ε)."
    source: ClassVar[str] = "Dwork, McSherry, Nissim, Smith 2006 (Laplace mechanism)"
    data_kind: ClassVar[DataKind] = "scalar"
    params_model = ClassicMeanParams
    broadcast_fields: ClassVar[Mapping[str, str]] = _SCALAR


class ClassicDuchi(ClassicLaplace):
    """Duchi et al.'s scalar mechanism: ±(e^ε+1)/(e^ε−1)."""

    name: ClassVar[str] = "classic-duchi"
    mechanism: ClassVar[th.Mechanism] = "duchi"
    summary: ClassVar[str] = "Scalar mean on [-1, 1]: Duchi et al.'s two-point mechanism."
    source: ClassVar[str] = f"Duchi, Jordan, Wainwright, JASA 2018; {_WANG}, Alg. 1"


class ClassicPM(ClassicLaplace):
    """The Piecewise mechanism."""

    name: ClassVar[str] = "classic-pm"
    mechanism: ClassVar[th.Mechanism] = "pm"
    summary: ClassVar[str] = "Scalar mean on [-1, 1]: the Piecewise mechanism."
    source: ClassVar[str] = f"{_WANG}, Alg. 2, Lemma 1"


class ClassicHM(ClassicLaplace):
    """The Hybrid mechanism (PM with probability α = 1 − e^{−ε/2} above ε*, else Duchi)."""

    name: ClassVar[str] = "classic-hm"
    mechanism: ClassVar[th.Mechanism] = "hm"
    summary: ClassVar[str] = "Scalar mean on [-1, 1]: the Hybrid mechanism (PM or Duchi)."
    source: ClassVar[str] = f"{_WANG}, Alg. 3, Lemma 4"


class _Vector(ClassicMean):
    vector: ClassVar[bool] = True
    data_kind: ClassVar[DataKind] = "vector"
    params_model = ClassicVectorParams
    population_probe: ClassVar[Mapping[str, Any]] = {"dimension": 1}
    broadcast_fields: ClassVar[Mapping[str, str]] = _VECTOR


class ClassicLaplaceVector(_Vector):
    name: ClassVar[str] = "classic-laplace-vector"
    mechanism: ClassVar[th.Mechanism] = "laplace"
    summary: ClassVar[str] = (
        "Mean in [-1, 1]^d: Laplace on k sampled coordinates of the clipped user mean (Alg. 4)."
    )
    source: ClassVar[str] = f"Laplace mechanism; coordinate sampling of {_WANG}, Alg. 4"


class ClassicDuchiVector(_Vector):
    name: ClassVar[str] = "classic-duchi-vector"
    mechanism: ClassVar[th.Mechanism] = "duchi"
    summary: ClassVar[str] = "Mean in [-1, 1]^d: Duchi et al.'s multidimensional mechanism."
    source: ClassVar[str] = f"Duchi, Jordan, Wainwright, JASA 2018, as restated in {_WANG}, §IV-A"


class ClassicPMVector(_Vector):
    name: ClassVar[str] = "classic-pm-vector"
    mechanism: ClassVar[th.Mechanism] = "pm"
    summary: ClassVar[str] = "Mean in [-1, 1]^d: the Piecewise mechanism on k sampled coordinates."
    source: ClassVar[str] = f"{_WANG}, Algs. 2 and 4, Lemma 5"


class ClassicHMVector(_Vector):
    name: ClassVar[str] = "classic-hm-vector"
    mechanism: ClassVar[th.Mechanism] = "hm"
    summary: ClassVar[str] = "Mean in [-1, 1]^d: the Hybrid mechanism on k sampled coordinates."
    source: ClassVar[str] = f"{_WANG}, Algs. 3 and 4, Lemma 5"


PROTOCOLS: tuple[Protocol[Any], ...] = (
    ClassicLaplace(),
    ClassicDuchi(),
    ClassicPM(),
    ClassicHM(),
    ClassicLaplaceVector(),
    ClassicDuchiVector(),
    ClassicPMVector(),
    ClassicHMVector(),
)
