"""The protocol abstraction every family implements and the server and the simulator drive: the
``Protocol`` and ``Predictor`` base classes (``protocol``) and the values their steps exchange
(``records``).

Code inside ``fedldp`` imports from those two modules. This package re-exports their names so
that ``from fedldp.protocol.core.base import Protocol, Plan, ...`` keeps working for the server
and the HTTP client, which import the abstraction by this path (issue 10: they move to the two
modules with their next change; the names here are the same objects)."""

from fedldp.protocol.core.base.protocol import (
    Params,
    Predictor,
    Protocol,
    cohort_permutation,
    split_sizes,
)
from fedldp.protocol.core.base.records import (
    JSON,
    BoolArray,
    DataKind,
    ErrorBar,
    FloatArray,
    IntArray,
    PayloadKind,
    Plan,
    ReportChunk,
    Result,
    RoundPlan,
    RoundTask,
    Trust,
    UserData,
    check_epsilons,
    finite_or_none,
    jsonable,
    valid_payloads,
    z_quantile,
)

__all__ = [
    "JSON",
    "BoolArray",
    "DataKind",
    "ErrorBar",
    "FloatArray",
    "IntArray",
    "Params",
    "PayloadKind",
    "Plan",
    "Predictor",
    "Protocol",
    "ReportChunk",
    "Result",
    "RoundPlan",
    "RoundTask",
    "Trust",
    "UserData",
    "check_epsilons",
    "cohort_permutation",
    "finite_or_none",
    "jsonable",
    "split_sizes",
    "valid_payloads",
    "z_quantile",
]
