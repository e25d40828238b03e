"""The population spec: a validated description of a simulated population, from flags or a file.

``PopulationSpec`` holds every option of ``fedldp simulate``'s population group (the field names
are the flag names with ``_`` for ``-``). A YAML/JSON file (``--population FILE``) gives the same
keys; flags given on the command line override the file (``fedldp.client.population.flags``).
Options that do not apply to the chosen law (``--sd`` for two-point data, ``--users`` for a CSV
population, two ε profiles at once) are errors rather than silently ignored. The labeled laws
(sparse-linear, sparse-logistic, binned-classification, binned-regression) give labeled data for
the learning protocols. A CSV population is read by ``fedldp.client.population.table``. A law an
installed plugin declares (``fedldp.client.population.laws``) is named the same way and takes
its own options as ``law_params`` (``--law-param KEY=VALUE``), none of the built-in laws' flags.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from fedldp.client.population.datasets import INCOME_SOURCES, income_law
from fedldp.client.population.distributions import (
    Bernoulli,
    Categorical,
    Distribution,
    Exponential,
    Gaussian,
    Lomax,
    TwoPoint,
    Uniform,
    UniformL2Ball,
    zipf_probabilities,
)
from fedldp.client.population.drift import DRIFTING_LAWS, Drift
from fedldp.client.population.labeled import (
    BinnedClassification,
    BinnedRegression,
    LabeledLaw,
    SparseLinear,
    SparseLogistic,
    default_theta,
)
from fedldp.client.population.laws import BUILT_IN_LAWS, LAWS, get_law, make_law
from fedldp.protocol.core.base.records import JSON

__all__ = [
    "DISTRIBUTIONS",
    "EXCLUSIVE_FAMILIES",
    "LABELED_DISTRIBUTIONS",
    "SEMI_FEATURE_DISTRIBUTIONS",
    "PopulationSpec",
    "flag_name",
    "law_flags",
]

DISTRIBUTIONS: tuple[str, ...] = BUILT_IN_LAWS
"""The built-in laws; ``distribution`` may also name a plugin law (``population.laws``)."""
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
    "exponential": {"rate", "dimension"},
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
EXCLUSIVE_FAMILIES = (set(_EPSILON_PROFILES), {"samples", "imbalance", "total_samples"})
_CSV_OPTIONS = {"csv", "user_column", "value_column", "items", "distribution", *_EPSILON_PROFILES}


def law_flags(name: str) -> list[str]:
    """The flags built-in law ``name`` takes (none for a plugin law: it takes --law-param)."""
    return sorted(flag_name(option) for option in _LAW_OPTIONS.get(name, ()))


def flag_name(name: str) -> str:
    if name == "law_params":  # one option a flag, repeated
        return "--law-param"
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
    distribution: str = "uniform"
    law_params: dict[str, Any] | None = None
    low: float = -1.0
    high: float = 1.0
    mean: float = 0.0
    sd: float = Field(1.0, gt=0)
    bound: float = Field(1.0, gt=0)
    shape: float = Field(4.0, gt=1)
    rate: float = Field(1.0, gt=0)
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
    drift: Drift | None = Field(None, description="how the law moves with a campaign's day")

    @model_serializer(mode="wrap")
    def _without_unset_law_params(self, handler: SerializerFunctionWrapHandler) -> Any:
        """A dump holds ``law_params`` and ``drift`` only when given: a built-in law's spec
        without drift dumps (and its population digest, ``fedldp.client.swarm.run``) as before
        plugin laws and campaigns were."""
        out = handler(self)
        if isinstance(out, dict):
            for name in ("law_params", "drift"):
                if getattr(self, name) is None:
                    out.pop(name, None)
        return out

    @field_validator("distribution")
    @classmethod
    def _known_law(cls, v: str) -> str:
        if v not in DISTRIBUTIONS:
            get_law(v)  # ValueError naming the known laws (and why a broken plugin is not served)
        return v

    @field_validator("law_params", mode="before")
    @classmethod
    def _parse_law_params(cls, v: Any) -> Any:
        """``KEY=VALUE`` strings (the flag, repeated) become a mapping, each value parsed as
        JSON when it can be (else a string); a mapping (a file's) is kept."""
        if isinstance(v, str):
            v = [v]
        if isinstance(v, list | tuple):
            out: dict[str, Any] = {}
            for item in v:
                key, sep, value = str(item).partition("=")
                if not sep or not key:
                    raise ValueError(f"law-param must be written KEY=VALUE, got {item!r}")
                try:
                    out[key.strip()] = json.loads(value)
                except json.JSONDecodeError:
                    out[key.strip()] = value
            return out
        return v

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
            raise ValueError(f"give one ε profile, not {' and '.join(map(flag_name, profiles))}")
        if (self.imbalance is None) != (self.total_samples is None):
            raise ValueError("--imbalance and --total-samples go together")
        if self.imbalance is not None and "samples" in given:
            raise ValueError("--samples (constant m) and --imbalance exclude each other")
        if self.csv is not None:
            extra = sorted(given - _CSV_OPTIONS)
            if extra:
                raise ValueError(f"{flag_name(extra[0])} does not apply to a CSV population")
            if self.distribution != "categorical" and "distribution" in given:
                raise ValueError("a CSV population takes --distribution categorical or none")
            if (self.distribution == "categorical") != (self.items is not None):
                raise ValueError(
                    "categorical CSV data needs both --distribution categorical and --items k"
                )
            return self
        if self.distribution in SEMI_FEATURE_DISTRIBUTIONS:
            return self._semi_feature(given)
        plugin = self.distribution not in DISTRIBUTIONS
        if self.law_params is not None and not plugin:
            raise ValueError(
                f"--law-param sets a plugin law's options; the built-in {self.distribution} "
                "law takes its own flags"
            )
        if self.users is None:
            raise ValueError("--users is required (or --csv FILE)")
        for name in ("epsilon_column", "user_column", "value_column"):
            if name in given:
                raise ValueError(f"{flag_name(name)} needs --csv")
        wrong = sorted((given & _ALL_LAW_OPTIONS) - _LAW_OPTIONS.get(self.distribution, set()))
        if wrong:
            raise ValueError(
                f"{flag_name(wrong[0])} does not apply to the {self.distribution} law"
                + (" (a plugin law takes its options as --law-param KEY=VALUE)" if plugin else "")
            )
        if self.distribution == "categorical" and self.items is None:
            raise ValueError("the categorical law needs --items k")
        if "ball" in given and self.dimension is None:
            raise ValueError("--ball needs --dimension d")
        if self.distribution == "uniform" and "bound" in given and given & {"low", "high"}:
            raise ValueError("give --bound D (for [-D, D]) or --low/--high, not both")
        if self.ball == "l2" and given & {"low", "high"}:
            raise ValueError("the l2 ball is centred at 0: give its radius with --bound")
        if self.drift is not None and self.distribution not in DRIFTING_LAWS[self.drift.kind]:
            raise ValueError(
                f"a {self.drift.kind.replace('_', '-')} drift does not apply to the "
                f"{self.distribution} law"
            )
        self.law()  # validates the law's own constraints (e.g. |mean| <= D)
        return self

    def _semi_feature(self, given: set[str]) -> PopulationSpec:
        """Semi-feature data: one sample per user; the diabetes users are the data set's."""
        other = (given & (_ALL_LAW_OPTIONS | {"samples", "imbalance", "total_samples"})) - (
            _LAW_OPTIONS[self.distribution] | {"distribution"}
        )
        if other:
            raise ValueError(
                f"{flag_name(sorted(other)[0])} does not apply to the {self.distribution} data "
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

    def law(self, day: float = 0.0) -> Distribution | LabeledLaw:
        """The synthetic data law this spec describes, on ``day`` of a campaign when it drifts
        (``fedldp.client.population.drift``; ValueError when the day's law is invalid)."""
        d, name, given = self.dimension, self.distribution, self.model_fields_set
        if name not in DISTRIBUTIONS:
            return make_law(name, self.law_params or {})
        drift = self.drift
        mean, p = self.mean, self.p
        if drift is not None and drift.mean_per_day is not None:
            mean, p = drift.shifted(mean, day), drift.shifted(p, day)
            if name == "bernoulli" and not 0.0 <= p <= 1.0:
                raise ValueError(
                    f"the drifting Bernoulli p is {p:g} on day {day:g}, outside [0, 1]"
                )
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
            return Gaussian(mean, self.sd, d)
        if name == "two-point":
            return TwoPoint(self.bound, mean, d)
        if name == "lomax":
            return Lomax(self.shape, d)
        if name == "exponential":
            return Exponential(self.rate, d)
        if name == "bernoulli":
            return Bernoulli(p)
        assert self.items is not None
        probs = tuple(zipf_probabilities(self.items, self.zipf).tolist())
        return Categorical(probs if drift is None else drift.swapped(probs, day))

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
        if self.distribution not in DISTRIBUTIONS:  # a plugin law: its options and origin
            origin = LAWS.origin(self.distribution)
            return out | {
                "law_params": dict(self.law_params or {}),
                "plugin": origin.package,
                "plugin_version": origin.version,
            }
        for k, v in vars(law).items():
            if k not in ("draws_per_sample", "probs", "rows") and v is not None:
                out[k] = v
        if self.distribution == "categorical":
            out.update(items=self.items, zipf=self.zipf)
        return out
