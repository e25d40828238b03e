"""The population spec: a validated description of a simulated population, from flags or a file.

``PopulationSpec`` holds every option of ``fedldp simulate``'s population group (the field names
are the flag names with ``_`` for ``-``). A YAML/JSON file (``--population FILE``) gives the same
keys; flags given on the command line override the file. Options that do not apply to the chosen
law (``--sd`` for two-point data, ``--users`` for a CSV population, two ε profiles at once) are
errors rather than silently ignored. The labeled laws (sparse-linear, sparse-logistic,
binned-classification, binned-regression) give labeled data for the learning protocols.
``read_table`` loads a CSV population (rows of user id, value, optional ε), grouping rows by user
in order of first appearance.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import yaml
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fedldp.client.population.datasets import INCOME_SOURCES, income_law
from fedldp.client.population.distributions import (
    Bernoulli,
    Categorical,
    Distribution,
    Gaussian,
    Lomax,
    TwoPoint,
    Uniform,
    UniformL2Ball,
    zipf_probabilities,
)
from fedldp.client.population.labeled import (
    BinnedClassification,
    BinnedRegression,
    LabeledLaw,
    SparseLinear,
    SparseLogistic,
    default_theta,
)
from fedldp.protocol.core.base import JSON, FloatArray, IntArray

__all__ = [
    "DISTRIBUTIONS",
    "LABELED_DISTRIBUTIONS",
    "SEMI_FEATURE_DISTRIBUTIONS",
    "PopulationSpec",
    "Table",
    "add_population_arguments",
    "load_population_file",
    "population_spec_from_args",
    "read_table",
]

DistributionName = Literal[
    "uniform",
    "gaussian",
    "two-point",
    "lomax",
    "bernoulli",
    "categorical",
    "sparse-linear",
    "sparse-logistic",
    "binned-classification",
    "binned-regression",
    "sin-sum",
    "diabetes",
    "gss-income",
    "cps-wage",
]
DISTRIBUTIONS: tuple[str, ...] = get_args(DistributionName)
LABELED_DISTRIBUTIONS = frozenset(
    {"sparse-linear", "sparse-logistic", "binned-classification", "binned-regression"}
)
"""The laws of labeled data (features and a label per sample, data kind "labeled")."""
SEMI_FEATURE_DISTRIBUTIONS = frozenset({"sin-sum", "diabetes"})
"""Semi-feature data (``fedldp.client.population.features``): one labeled sample per user and a
privacy mask saying which features are private; the public ones are enrollment metadata."""
_LAW_OPTIONS: dict[str, set[str]] = {
    "uniform": {"low", "high", "bound", "dimension", "ball"},
    "gaussian": {"mean", "sd", "dimension"},
    "two-point": {"mean", "bound", "dimension"},
    "lomax": {"shape", "dimension"},
    "bernoulli": {"p"},
    "categorical": {"items", "zipf"},
    "sparse-linear": {"dimension", "theta", "noise"},
    "sparse-logistic": {"dimension", "theta"},
    "binned-classification": {"dimension"},
    "binned-regression": {"dimension", "label_bound"},
    "sin-sum": {"mask", "private", "gamma"},
    "diabetes": {"mask", "split"},
    "gss-income": set(),
    "cps-wage": set(),
}
_ALL_LAW_OPTIONS = set().union(*_LAW_OPTIONS.values())
_EPSILON_PROFILES = (
    "epsilon",
    "epsilon_mix",
    "epsilon_uniform",
    "epsilon_lognormal",
    "epsilon_column",
)
_EXCLUSIVE_FAMILIES = (set(_EPSILON_PROFILES), {"samples", "imbalance", "total_samples"})
_CSV_OPTIONS = {"csv", "user_column", "value_column", "items", "distribution", *_EPSILON_PROFILES}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _pair(value: Any, what: str) -> Any:
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 2:
            raise ValueError(f"{what} must be written a:b, got {value!r}")
        return (float(parts[0]), float(parts[1]))
    return value


class PopulationSpec(BaseModel):
    """Every option of a population; unset options take the defaults shown in ``--help``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    users: int | None = Field(None, ge=1, description="number of users n")
    samples: int = Field(1, ge=1, description="samples per user m (constant)")
    imbalance: float | None = Field(None, gt=0, description="γ of s_i = ceil(N (i/n)^γ)")
    total_samples: int | None = Field(None, ge=1, description="N of the imbalanced generator")
    distribution: DistributionName = "uniform"
    low: float = -1.0
    high: float = 1.0
    mean: float = 0.0
    sd: float = Field(1.0, gt=0)
    bound: float = Field(1.0, gt=0)
    shape: float = Field(4.0, gt=1)
    p: float = Field(0.5, ge=0, le=1)
    items: int | None = Field(None, ge=1)
    zipf: float = Field(0.0, ge=0)
    dimension: int | None = Field(None, ge=1)
    ball: Literal["linf", "l2"] = "linf"
    theta: tuple[float, ...] | None = Field(None, min_length=1)
    noise: float = Field(0.1, ge=0)
    label_bound: float = Field(1.0, gt=0)
    mask: Literal["aligned", "tail", "tenfold", "tenfold-literal"] = "aligned"
    private: int = Field(1, ge=0, le=5)
    gamma: float = Field(1.0, gt=0)
    split: int = Field(0, ge=0)
    epsilon: float = 1.0
    epsilon_mix: tuple[tuple[float, float], ...] | None = None
    epsilon_uniform: tuple[float, float] | None = None
    epsilon_lognormal: tuple[float, float] | None = None
    epsilon_column: str | None = None
    csv: Path | None = None
    user_column: str = "user_id"
    value_column: str = "value"

    @field_validator("epsilon")
    @classmethod
    def _positive_epsilon(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"epsilon must be finite and > 0, got {v}")
        return v

    @field_validator("epsilon_mix", mode="before")
    @classmethod
    def _parse_mix(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [_pair(part, "each epsilon-mix entry") for part in v.split(",") if part.strip()]
        if isinstance(v, dict):
            return [(float(k), float(f)) for k, f in v.items()]
        return v

    @field_validator("theta", mode="before")
    @classmethod
    def _parse_theta(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                return tuple(float(part) for part in v.split(","))
            except ValueError:
                raise ValueError(f"theta must be numbers written a,b,..., got {v!r}") from None
        return v

    @field_validator("epsilon_uniform", "epsilon_lognormal", mode="before")
    @classmethod
    def _parse_pair(cls, v: Any) -> Any:
        return _pair(v, "this epsilon profile")

    @field_validator("epsilon_mix")
    @classmethod
    def _check_mix(
        cls, v: tuple[tuple[float, float], ...] | None
    ) -> tuple[tuple[float, float], ...] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("epsilon-mix needs at least one value:fraction pair")
        for value, fraction in v:
            if not value > 0:
                raise ValueError(f"epsilon-mix value {value} must be finite and > 0")
            if fraction < 0:
                raise ValueError(f"epsilon-mix fraction {fraction} must be >= 0")
        total = math.fsum(f for _, f in v)
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"epsilon-mix fractions must sum to 1, got {total!r}")
        return v

    @field_validator("epsilon_uniform")
    @classmethod
    def _check_uniform(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not 0 < v[0] <= v[1]:
            raise ValueError(f"epsilon-uniform a:b needs 0 < a <= b, got {v[0]}:{v[1]}")
        return v

    @field_validator("epsilon_lognormal")
    @classmethod
    def _check_lognormal(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and v[1] < 0:
            raise ValueError(f"epsilon-lognormal mu:sigma needs sigma >= 0, got {v[1]}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> PopulationSpec:
        given = self.model_fields_set
        profiles = [p for p in _EPSILON_PROFILES if p in given and getattr(self, p) is not None]
        if len(profiles) > 1:
            raise ValueError(f"give one ε profile, not {' and '.join(map(_flag, profiles))}")
        if (self.imbalance is None) != (self.total_samples is None):
            raise ValueError("--imbalance and --total-samples go together")
        if self.imbalance is not None and "samples" in given:
            raise ValueError("--samples (constant m) and --imbalance exclude each other")
        if self.csv is not None:
            extra = sorted(given - _CSV_OPTIONS)
            if extra:
                raise ValueError(f"{_flag(extra[0])} does not apply to a CSV population")
            if self.distribution != "categorical" and "distribution" in given:
                raise ValueError("a CSV population takes --distribution categorical or none")
            if (self.distribution == "categorical") != (self.items is not None):
                raise ValueError(
                    "categorical CSV data needs both --distribution categorical and --items k"
                )
            return self
        if self.distribution in SEMI_FEATURE_DISTRIBUTIONS:
            return self._semi_feature(given)
        if self.users is None:
            raise ValueError("--users is required (or --csv FILE)")
        for name in ("epsilon_column", "user_column", "value_column"):
            if name in given:
                raise ValueError(f"{_flag(name)} needs --csv")
        wrong = sorted((given & _ALL_LAW_OPTIONS) - _LAW_OPTIONS[self.distribution])
        if wrong:
            raise ValueError(f"{_flag(wrong[0])} does not apply to the {self.distribution} law")
        if self.distribution == "categorical" and self.items is None:
            raise ValueError("the categorical law needs --items k")
        if "ball" in given and self.dimension is None:
            raise ValueError("--ball needs --dimension d")
        if self.distribution == "uniform" and "bound" in given and given & {"low", "high"}:
            raise ValueError("give --bound D (for [-D, D]) or --low/--high, not both")
        if self.ball == "l2" and given & {"low", "high"}:
            raise ValueError("the l2 ball is centred at 0: give its radius with --bound")
        self.law()  # validates the law's own constraints (e.g. |mean| <= D)
        return self

    def _semi_feature(self, given: set[str]) -> PopulationSpec:
        """Semi-feature data: one sample per user; the diabetes users are the data set's."""
        other = (given & (_ALL_LAW_OPTIONS | {"samples", "imbalance", "total_samples"})) - (
            _LAW_OPTIONS[self.distribution] | {"distribution"}
        )
        if other:
            raise ValueError(
                f"{_flag(sorted(other)[0])} does not apply to the {self.distribution} data "
                "(one sample per user)"
            )
        if self.distribution == "diabetes":
            if "users" in given:
                raise ValueError("the diabetes users are the data set's training rows: no --users")
            if self.mask == "tail":
                raise ValueError("the diabetes masks are aligned, tenfold or tenfold-literal")
        elif self.users is None:
            raise ValueError("--users is required")
        return self

    def law(self) -> Distribution | LabeledLaw:
        """The synthetic data law this spec describes."""
        d, name, given = self.dimension, self.distribution, self.model_fields_set
        if name in LABELED_DISTRIBUTIONS:
            return self._labeled_law()
        if name in INCOME_SOURCES:
            return income_law(name)
        if name == "uniform":
            if self.ball == "l2" and d is not None:
                return UniformL2Ball(self.bound, d)
            if "bound" in given:
                return Uniform(-self.bound, self.bound, d)
            return Uniform(self.low, self.high, d)
        if name == "gaussian":
            return Gaussian(self.mean, self.sd, d)
        if name == "two-point":
            return TwoPoint(self.bound, self.mean, d)
        if name == "lomax":
            return Lomax(self.shape, d)
        if name == "bernoulli":
            return Bernoulli(self.p)
        assert self.items is not None
        return Categorical(tuple(zipf_probabilities(self.items, self.zipf).tolist()))

    def _labeled_law(self) -> LabeledLaw:
        name = self.distribution
        if name in ("sparse-linear", "sparse-logistic"):
            # d defaults to len(theta) when theta is given, else to 2 (E9)
            d = self.dimension or (len(self.theta) if self.theta is not None else 2)
            theta = self.theta if self.theta is not None else default_theta(d)
            if name == "sparse-linear":
                return SparseLinear(theta, self.noise, d)
            return SparseLogistic(theta, d)
        if name == "binned-classification":
            return BinnedClassification(self.dimension or 1)
        return BinnedRegression(self.dimension or 1, self.label_bound)

    def law_description(self) -> JSON:
        """The law's name and resolved parameters (public)."""
        law = self.law()
        out: JSON = {"name": self.distribution}
        for k, v in vars(law).items():
            if k not in ("draws_per_sample", "probs", "rows") and v is not None:
                out[k] = v
        if self.distribution == "categorical":
            out.update(items=self.items, zipf=self.zipf)
        return out


# --------------------------------------------------------------------------- CSV populations


@dataclass(frozen=True)
class Table:
    """A CSV population: samples user after user (users in order of first appearance)."""

    user_ids: list[str]
    values: NDArray[Any]
    offsets: IntArray
    epsilon: FloatArray | None


def _column(rows: list[dict[str, str]], name: str, path: Path, header: list[str]) -> list[str]:
    if name not in header:
        raise ValueError(f"{path} has no column {name!r} (columns: {', '.join(header)})")
    return [r[name] for r in rows]


def _floats(cells: list[str], name: str, path: Path) -> FloatArray:
    out = np.empty(len(cells), dtype=np.float64)
    for row, cell in enumerate(cells):
        try:
            out[row] = float(cell)
        except ValueError:
            raise ValueError(f"{path} row {row + 2}: {name} {cell!r} is not a number") from None
        if not math.isfinite(out[row]):
            raise ValueError(f"{path} row {row + 2}: {name} {cell!r} is not finite")
    return out


def read_table(spec: PopulationSpec) -> Table:
    """Read ``spec.csv``; ValueError naming the file, row and column of any bad cell."""
    assert spec.csv is not None
    path = spec.csv
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = list(reader)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    if not rows:
        raise ValueError(f"{path} has no data rows")
    ids = _column(rows, spec.user_column, path, header)
    order: dict[str, int] = {}
    codes = np.array([order.setdefault(u, len(order)) for u in ids], dtype=np.int64)
    perm = np.argsort(codes, kind="stable")
    offsets = np.searchsorted(codes[perm], np.arange(len(order) + 1)).astype(np.int64)
    names = [c.strip() for c in spec.value_column.split(",")]
    cols = [_floats(_column(rows, c, path, header), c, path) for c in names]
    values: NDArray[Any] = cols[0] if len(cols) == 1 else np.stack(cols, axis=1)
    if spec.items is not None:
        v = cols[0]
        bad = np.flatnonzero((v != np.round(v)) | (v < 0) | (v >= spec.items))
        if len(cols) != 1 or bad.size:
            row = int(bad[0]) + 2 if bad.size else 2
            raise ValueError(
                f"{path} row {row}: categorical values must be one column of integers "
                f"0..{spec.items - 1}"
            )
        values = v.astype(np.int64)
    eps = None
    if spec.epsilon_column is not None:
        per_row = _floats(
            _column(rows, spec.epsilon_column, path, header), spec.epsilon_column, path
        )[perm]
        eps = per_row[offsets[:-1]]
        lo = np.minimum.reduceat(per_row, offsets[:-1])
        hi = np.maximum.reduceat(per_row, offsets[:-1])
        mixed = np.flatnonzero(lo != hi)
        if mixed.size:
            user = list(order)[int(mixed[0])]
            raise ValueError(f"user {user!r} has several values in column {spec.epsilon_column!r}")
    return Table(list(order), values[perm], offsets, eps)


# --------------------------------------------------------------------------- flags and files

_HELP: dict[str, tuple[type, str, str]] = {
    # field: (type, metavar, help)
    "users": (int, "N", "number of users n"),
    "samples": (int, "M", "samples per user m, the same for every user (default 1)"),
    "imbalance": (
        float,
        "GAMMA",
        "imbalanced users (Huber et al. §7.2): γ of s_i = ceil(N (i/n)^γ), "
        "m_i = s_i - s_(i-1); users with m_i = 0 are dropped; needs --total-samples",
    ),
    "total_samples": (int, "N", "N, the total number of samples of the imbalanced generator"),
    "distribution": (
        str,
        "LAW",
        "data law (default uniform): "
        + ", ".join(DISTRIBUTIONS)
        + "; gss-income and cps-wage resample real incomes (standardised; needs fedldp[data]), "
        "diabetes is scikit-learn's data set (needs fedldp[data])",
    ),
    "low": (float, "LO", "uniform: lower end (default -1)"),
    "high": (float, "HI", "uniform: upper end (default 1)"),
    "mean": (
        float,
        "MU",
        "gaussian mean, or two-point mean μ with P(+D) = (1 + μ/D)/2 (default 0)",
    ),
    "sd": (float, "SIGMA", "gaussian standard deviation (default 1)"),
    "bound": (
        float,
        "D",
        "two-point D (values ±D); uniform on [-D, D]; l2-ball radius (default 1)",
    ),
    "shape": (float, "A", "lomax shape a > 1: numpy's pareto(a), mean 1/(a-1) (default 4)"),
    "p": (float, "P", "bernoulli P(X = 1) (default 0.5)"),
    "items": (int, "K", "categorical: number of items k (values 0..k-1)"),
    "zipf": (float, "S", "categorical: p(v) ∝ 1/v^s over v = 1..k (default 0: uniform)"),
    "dimension": (
        int,
        "d",
        "vector data in R^d (uniform, gaussian, two-point, lomax: i.i.d. coordinates); "
        "features in R^d of the labeled laws (default 2 for sparse-*, or the length of "
        "--theta; 1 for binned-*)",
    ),
    "ball": (
        str,
        "{linf,l2}",
        "uniform vectors: linf = the box (default), l2 = uniform in the l2 ball of radius --bound",
    ),
    "theta": (
        str,
        "A,B,...",
        "sparse-linear/sparse-logistic: θ_true in R^d, y depends on x through θᵀx "
        "(default 0.3,-0.2 repeated to length d); write --theta=-1,2 when it starts with -",
    ),
    "noise": (float, "XI", "sparse-linear: label noise ±XI, y = θᵀx ± XI (default 0.1)"),
    "label_bound": (
        float,
        "T",
        "binned-regression: labels ±T with E[y | x] = 0.5 sin(2π x_1); T >= 0.5 (default 1)",
    ),
    "mask": (
        str,
        "KIND",
        "sin-sum/diabetes: which features each user keeps private: aligned (the first "
        "--private), tail (user i protects feature l iff i <= n/l^γ) or tenfold (default aligned)",
    ),
    "private": (int, "S", "sin-sum: private features of the aligned/tenfold masks (default 1)"),
    "gamma": (float, "G", "sin-sum: γ of the tail mask (default 1)"),
    "split": (int, "K", "diabetes: which random 80/20 train/test split (default 0)"),
    "epsilon": (float, "EPS", "every user's ε (default 1)"),
    "epsilon_mix": (
        str,
        "EPS:FRAC,...",
        "mixture of ε values, value:fraction pairs, e.g. 0.1:0.5,1:0.5 "
        "(exact counts, randomly assigned)",
    ),
    "epsilon_uniform": (str, "A:B", "ε uniform on [a, b], written a:b"),
    "epsilon_lognormal": (str, "MU:SIGMA", "ε log-normal, written mu:sigma (of log ε)"),
    "epsilon_column": (str, "NAME", "CSV column holding each user's ε"),
    "csv": (
        Path,
        "FILE",
        "CSV population: rows of user id, value, ...; users grouped by id; the truth "
        "is the mean of the user means (the mean user frequency for categorical data)",
    ),
    "user_column": (str, "NAME", "CSV user id column (default user_id)"),
    "value_column": (
        str,
        "NAME",
        "CSV value column (default value; comma-separated names give vectors)",
    ),
}
_CHOICES = {
    "distribution": DISTRIBUTIONS,
    "ball": ("linf", "l2"),
    "mask": ("aligned", "tail", "tenfold", "tenfold-literal"),
}


def add_population_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the population option group (every PopulationSpec field, and --population FILE)."""
    group = parser.add_argument_group(
        "population", "who the simulated users are (flags override --population FILE)"
    )
    group.add_argument(
        "--population", type=Path, metavar="FILE", help="YAML/JSON file with the same keys"
    )
    for name, (kind, metavar, text) in _HELP.items():
        group.add_argument(
            _flag(name),
            dest=name,
            type=kind,
            default=None,
            metavar=metavar,
            help=text,
            choices=_CHOICES.get(name),
        )


def load_population_file(path: Path) -> dict[str, Any]:
    """A population file's options (keys with - or _); a relative csv is relative to the file."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"cannot read population file {path}: {e.strerror}") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ValueError(f"population file {path} is not valid: {e}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"population file {path} must hold a mapping of options")
    out = {str(k).replace("-", "_"): v for k, v in raw.items()}
    if isinstance(out.get("csv"), str) and not Path(out["csv"]).is_absolute():
        out["csv"] = str(path.parent / out["csv"])
    return out


def population_spec_from_args(args: argparse.Namespace) -> PopulationSpec:
    """The spec from parsed flags, over the --population file's values if one was given."""
    flags = {name: getattr(args, name) for name in _HELP if getattr(args, name, None) is not None}
    options: dict[str, Any] = {}
    if getattr(args, "population", None) is not None:
        options = load_population_file(args.population)
        # A flag from an exclusive family replaces the file's choice in that family.
        for family in _EXCLUSIVE_FAMILIES:
            if flags.keys() & family:
                for k in family:
                    options.pop(k, None)
    options.update(flags)
    return PopulationSpec.model_validate(options)
