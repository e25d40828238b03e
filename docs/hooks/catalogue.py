"""mkdocs hook: the protocol catalogue page, written from the catalogue itself at every build.

docs/protocols.md holds the prose and the marker ``<!-- catalogue -->``; this hook replaces the
marker with one section per protocol of ``fedldp.protocol.catalogue.CATALOGUE`` (built-in and
installed plugins alike), from the same entries ``fedldp protocols --json`` prints
(``fedldp.client.cli.main.protocol_catalogue``): its summary, paper, family and spec, trust and
data kind, its rule for unequal ε's, what a round closed on a quorum estimates, its parameters
(default and range), its broadcast fields, its minimum population at ε = 1, and its algorithm and
theory (the protocol class's docstring). So the page cannot drift from the code: a protocol
added, renamed or changed changes the page at the next build, and ``mkdocs build --strict``
fails if the marker is gone (tests/test_docs_site.py checks the page lists every protocol).
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from typing import Any

MARKER = "<!-- catalogue -->"
PAGE = "protocols.md"
SPEC = re.compile(r"Spec:\s*`docs/(specs/[\w.-]+\.md)`")


def _inline(text: str) -> str:
    """Docstring prose as Markdown: rST's ``literal`` becomes `literal`, and outside literals the
    characters Markdown would read as emphasis, links or HTML are escaped."""
    parts = re.split(r"``(.+?)``|`([^`]+)`", text)
    out = []
    for i, part in enumerate(parts):
        if part is None:
            continue
        if i % 3 == 0:
            escaped = re.sub(r"([\\*_\[\]])", r"\\\1", part)
            out.append(escaped.replace("<", "&lt;").replace(">", "&gt;").replace("|", "&#124;"))
        else:
            out.append(f"`{part}`")
    return "".join(out)


def _paragraphs(doc: str) -> list[str]:
    """A docstring's paragraphs, each joined into one line (rST literal blocks kept as text)."""
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", doc.strip()) if p.strip()]


def family(protocol: Any) -> tuple[str, str | None] | None:
    """The built-in family a protocol's class lives in: its paper (the first paragraph of the
    family package's docstring) and its spec page (the ``Spec: `docs/specs/….md``` it names),
    or None for a protocol outside ``fedldp.protocol`` (a plugin)."""
    module = type(protocol).__module__
    parts = module.split(".")
    if parts[:2] != ["fedldp", "protocol"] or len(parts) < 4:
        return None
    package = importlib.import_module(".".join(parts[:3]))
    doc = inspect.getdoc(package) or ""
    paper = _paragraphs(doc)[0] if doc else parts[2]
    found = SPEC.search(doc)
    return paper, found.group(1) if found else None


def _value(value: Any) -> str:
    return f"`{json.dumps(value)}`"


def protocol_section(entry: dict[str, Any], protocol: Any) -> str:
    """One protocol's section: ``entry`` is its ``fedldp protocols --json`` object."""
    name = entry["name"]
    lines = [f"### `{name}`", "", _inline(entry["summary"]), ""]
    origin = f"{entry['origin']} {entry['origin_version']}"
    facts = [
        ("paper and algorithm", _inline(entry["source"])),
        ("origin", f"{origin}, protocol version {protocol.version}"),
        ("trust", entry["trust"]),
        ("data", entry["data_kind"]),
    ]
    home = family(protocol)
    if home is not None:
        paper, spec = home
        facts.append(("family", _inline(paper) + (f" ([spec]({spec}))" if spec else "")))
    lines += [f"- **{key}**: {value}" for key, value in facts]
    lines += ["", f"**Unequal ε.** {_inline(entry['heterogeneity'])}", ""]
    population = entry["population"]
    smallest = population["min_participants"]
    if smallest is not None:
        noun = "participant" if smallest == 1 else "participants"
        least = f"{smallest} {noun} at ε = {population['epsilon']:g}"
    else:
        least = "depends on " + ", ".join(f"`{d}`" for d in population["depends_on"])
    lines += [f"**Minimum population.** {least}: {_inline(population['rule'])}", ""]
    lines += [f"**Dropouts.** {_inline(entry['dropout'])}", ""]
    if entry["parameters"]:
        lines += ["| parameter | default | range | meaning |", "|---|---|---|---|"]
        for p in entry["parameters"]:
            default = "required" if p["required"] else _value(p["default"])
            where = f"`{p['range']}`" if p["range"] else ""
            lines.append(f"| `{p['name']}` | {default} | {where} | {_inline(p['description'])} |")
        lines.append("")
    if entry["broadcast_fields"]:
        lines += ["Broadcast fields (what a task's `broadcast` holds):", ""]
        lines += [f"- `{k}`: {_inline(v)}" for k, v in entry["broadcast_fields"].items()]
        lines.append("")
    theory = inspect.getdoc(type(protocol))
    if theory:
        lines += ["**Algorithm and theory.**", ""]
        lines += [_inline(p) + "\n" for p in _paragraphs(theory)]
    return "\n".join(lines)


def catalogue_markdown() -> str:
    """Every served protocol's section, by name, then the broken plugins (if any)."""
    from fedldp.client.cli.main import protocol_catalogue
    from fedldp.protocol.catalogue import CATALOGUE

    listed = protocol_catalogue(1.0)
    index = ["| protocol | trust | what it does |", "|---|---|---|"]
    index += [
        f"| [`{p['name']}`](#{p['name']}) | {p['trust']} | {_inline(p['summary'])} |"
        for p in listed["protocols"]
    ]
    sections = [protocol_section(p, CATALOGUE[p["name"]]) for p in listed["protocols"]]
    broken = [
        f"- `{b['name']}` ({b['package']} {b['version']}): {_inline(b['error'])}"
        for b in listed["broken"]
    ]
    tail = ["### Broken plugins", "", *broken, ""] if broken else []
    return "\n".join(["\n".join(index), "", *sections, *tail])


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Fill the catalogue page; every other page passes through."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} lost its {MARKER} marker")
    return markdown.replace(MARKER, catalogue_markdown())
