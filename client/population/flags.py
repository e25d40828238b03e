"""The population options on the command line and in files: ``add_population_arguments`` adds one
flag per ``PopulationSpec`` field (the field name with ``-`` for ``_``) and ``--population FILE``;
``load_population_file`` reads a YAML/JSON file of the same keys; ``population_spec_from_args``
validates the flags over the file's values (a flag of an exclusive family, such as an ε profile,
replaces the file's choice in that family).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from fedldp.client.population.spec import (
    DISTRIBUTIONS,
    EXCLUSIVE_FAMILIES,
    PopulationSpec,
    flag_name,
)

__all__ = ["add_population_arguments", "load_population_file", "population_spec_from_args"]


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
        + ", or a law an installed plugin declares (fedldp laws)"
        + "; gss-income and cps-wage resample real incomes (standardised; needs fedldp[data]), "
        "diabetes is scikit-learn's data set (needs fedldp[data])",
    ),
    "law_params": (
        str,
        "KEY=VALUE",
        "an option of a plugin law (repeat; the value is read as JSON when it can be, "
        "e.g. --law-param low=0 --law-param high=2)",
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
    "rate": (
        float,
        "LAMBDA",
        "exponential rate λ > 0: pdf λe^(-λx) on x >= 0, mean 1/λ, variance 1/λ² (default 1)",
    ),
    "p": (float, "P", "bernoulli P(X = 1) (default 0.5)"),
    "items": (int, "K", "categorical: number of items k (values 0..k-1)"),
    "zipf": (float, "S", "categorical: p(v) ∝ 1/v^s over v = 1..k (default 0: uniform)"),
    "dimension": (
        int,
        "d",
        "vector data in R^d (uniform, gaussian, two-point, lomax, exponential: i.i.d. "
        "coordinates); "
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
            flag_name(name),
            dest=name,
            type=kind,
            default=None,
            metavar=metavar,
            help=text,
            choices=_CHOICES.get(name),
            action="append" if name == "law_params" else "store",
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
        for family in EXCLUSIVE_FAMILIES:
            if flags.keys() & family:
                for k in family:
                    options.pop(k, None)
    options.update(flags)
    return PopulationSpec.model_validate(options)
