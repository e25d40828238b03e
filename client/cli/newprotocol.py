"""``fedldp new-protocol NAME``: the skeleton of a protocol plugin distribution, ready to install.

It writes, from the templates shipped inside the package (``fedldp/templates/``, package data of
the wheel, so an installed fedldp makes the same files as a checkout)::

    DIR/                          (default ./fedldp-NAME)
      pyproject.toml              entry point NAME of group fedldp.protocols
      README.md
      fedldp_NAME/__init__.py     (NAME with _ for -)
      fedldp_NAME/protocol.py     a small, correct protocol against fedldp.protocol.api only
      tests/test_protocol.py      fedldp's conformance kit on it (check_protocol)

``--kind mean`` (scalar data: each user's clipped mean plus Laplace noise, inverse-variance
weighted) or ``--kind frequency`` (categorical data: symmetric unary encoding). Both pass the
kit as generated (tests/client/cli/test_newprotocol.py installs one and runs its test).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

__all__ = ["KINDS", "NAME_PATTERN", "Skeleton", "add_new_protocol_parser", "skeleton"]

NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
"""A protocol name: lower-case words of letters and digits joined by single hyphens, starting
with a letter (the catalogue's convention, docs/extending.md)."""


@dataclass(frozen=True)
class _Kind:
    summary: str
    population: str  # the kit test's PopulationSpec arguments (as ruff formats them)
    simulate: str  # the README's fedldp simulate flags


KINDS: dict[str, _Kind] = {
    "mean": _Kind(
        "a scalar's mean from each user's clipped mean plus Laplace noise",
        'users=600, samples=4, distribution="uniform", epsilon_mix="1:0.5,2:0.5"',
        "--users 20000 --samples 4 --distribution uniform --epsilon-mix 1:0.5,2:0.5 --seed 1",
    ),
    "frequency": _Kind(
        "item frequencies by symmetric unary encoding",
        '\n    users=600, samples=4, distribution="categorical", items=6, '
        'epsilon_mix="1:0.5,2:0.5"\n',
        "--users 20000 --samples 4 --distribution categorical --items 6 --zipf 1 "
        "--epsilon-mix 1:0.5,2:0.5 --seed 1",
    ),
}
"""What ``--kind`` can make: the protocol template ``fedldp/templates/KIND.py.tmpl``."""

_FILES = {
    "pyproject.toml": "pyproject.toml.tmpl",
    "README.md": "README.md.tmpl",
    "{package}/__init__.py": "__init__.py.tmpl",
    "{package}/protocol.py": "{kind}.py.tmpl",
    "tests/test_protocol.py": "test_protocol.py.tmpl",
}
"""Each file of the skeleton (under DIR) and its template (in fedldp/templates/)."""


@dataclass(frozen=True)
class Skeleton:
    """What ``skeleton`` wrote: the folder, the distribution, its package and its files."""

    directory: Path
    distribution: str
    package: str
    files: tuple[Path, ...]


def check_name(name: str) -> None:
    """ValueError, with what to do, when ``name`` cannot be a new plugin protocol: not the
    catalogue's form, too long for a study to record, or taken by a protocol this installation
    serves or declares (a built-in one, an installed plugin's, a broken plugin's: the catalogue
    would refuse the clash)."""
    from fedldp.protocol.catalogue import CATALOGUE, MAX_NAME

    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a protocol name: use lower-case letters and digits in words "
            "joined by single hyphens, starting with a letter (e.g. my-mean)"
        )
    if len(name) > MAX_NAME:
        raise ValueError(
            f"a protocol name has at most {MAX_NAME} characters, {name!r} has {len(name)}"
        )
    if name in CATALOGUE:
        origin = CATALOGUE.origin(name)
        which = "fedldp's built-in" if origin.package == "built-in" else f"{origin.package}'s"
        raise ValueError(
            f"{name!r} is already {which} protocol {name!r} (fedldp protocols): choose another name"
        )
    why = CATALOGUE.why_broken(name)
    if why:  # a second declaration of the name would keep both unserved
        raise ValueError(
            f"{name!r} is declared by an installed plugin that is not served{why}: choose "
            "another name"
        )


def skeleton(name: str, directory: Path | None = None, kind: str = "mean") -> Skeleton:
    """Write the plugin skeleton of protocol ``name`` into ``directory`` (default
    ``./fedldp-NAME``; created, or an existing empty folder) and return what it wrote.
    ValueError for a bad or taken name (``check_name``), an unknown kind, or a folder that
    exists and is not empty (nothing is written then)."""
    check_name(name)
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    distribution = f"fedldp-{name}"
    package = distribution.replace("-", "_")
    target = Path(directory) if directory is not None else Path(distribution)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ValueError(f"{target} exists and is not an empty folder: give another --dir")
    values: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "distribution": distribution,
        "package": package,
        "class_name": "".join(part.capitalize() for part in name.split("-")),
        "summary": KINDS[kind].summary,
        "population": KINDS[kind].population,
        "simulate": KINDS[kind].simulate,
    }
    values["params_name"] = f"{values['class_name']}Params"
    templates = resources.files("fedldp.templates")
    written = []
    for path, template in _FILES.items():
        text = templates.joinpath(template.format(kind=kind)).read_text(encoding="utf-8")
        out = target / path.format(package=package)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(Template(text).substitute(values), encoding="utf-8")
        written.append(out)
    return Skeleton(target, distribution, package, tuple(written))


def _run_new_protocol(args: argparse.Namespace) -> int:
    made = skeleton(args.name, args.dir, args.kind)
    where = made.directory
    sys.stdout.write(
        f"created {made.distribution} in {where}/ (protocol {args.name!r}, kind {args.kind}):\n"
        + "".join(f"  {path.relative_to(where)}\n" for path in made.files)
        + f"next: cd {where} && pip install -e . && fedldp protocols && pytest\n"
    )
    return 0


_EPILOG = """\
kinds:
  mean        scalar data: each user's mean clipped to [-B, B] plus Laplace noise at its own ε,
              weighted by the inverse noise variance (a CLT error bar)
  frequency   categorical data: symmetric unary encoding (one-hot, each bit flipped with
              probability 1/(e^(ε/2) + 1)), debiased per sender (an ℓ∞ error bar)

examples:
  fedldp new-protocol my-mean
  fedldp new-protocol my-oracle --kind frequency --dir plugins/my-oracle

then install it, list it, run it and check it:
  cd fedldp-my-mean && pip install -e . && fedldp protocols && pytest
  fedldp simulate --protocol my-mean --users 20000 --samples 4 --seed 1
"""


def add_new_protocol_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "new-protocol",
        help="create the skeleton of a protocol plugin package",
        description="Create a protocol plugin distribution: pyproject.toml declaring the entry "
        "point NAME of group fedldp.protocols, a package with a small, correct protocol "
        "written against fedldp.protocol.api (a starting point for yours), a test running "
        "fedldp's conformance kit on it, and a README. After pip install -e DIR, fedldp "
        "protocols lists it and fedldp simulate --protocol NAME runs it (docs/extending.md).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "name",
        metavar="NAME",
        help="the protocol's name: lower-case letters and digits joined by hyphens (my-mean); "
        "the distribution is fedldp-NAME, its package fedldp_NAME (_ for -)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        metavar="DIR",
        help="the folder to create (default ./fedldp-NAME); it must not exist or be empty",
    )
    parser.add_argument(
        "--kind",
        choices=tuple(KINDS),
        default="mean",
        help="the protocol to start from (default mean; see below)",
    )
    parser.set_defaults(handler=_run_new_protocol)
