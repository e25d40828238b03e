"""mkdocs hook: what the site takes from the repository outside docs/.

* **Notebooks.** Every ``examples/notebooks/*.ipynb`` becomes the page ``notebooks/NAME.ipynb``
  (mkdocs-jupyter renders it with the outputs stored in it; the test suite executes the notebooks),
  listed under "Tutorials" in the navigation, after "Concepts". With no notebook there is no such
  section; nothing else needs to exist.
* **Links to repository files.** A page's relative link that leaves docs/ for a file of the
  repository (``[protocol/api.py](../protocol/api.py)``, as docs/extending.md writes them, so that
  they also work when the Markdown is read in the repository) is served as a copy of that file
  under ``repo/`` in the site, and the link is rewritten to it. A link to a path that does not
  exist is left alone, so ``mkdocs build --strict`` reports it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
NOTEBOOKS = ROOT / "examples" / "notebooks"
LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)\s#]+)(#[^)\s]*)?\)")
REPO = "repo"


ORDER = ("quickstart", "sweep", "live", "misbehaving")
"""The tutorials a reader should meet first, in issue 28's order; any other notebook follows them,
by file name."""


def notebooks() -> list[Path]:
    """The tutorial notebooks, in reading order."""
    found = sorted(NOTEBOOKS.glob("*.ipynb"))
    rank = {stem: i for i, stem in enumerate(ORDER)}
    return sorted(found, key=lambda nb: rank.get(nb.stem, len(ORDER)))


def outside_target(page_src: Path, target: str) -> Path | None:
    """The repository file a link of the page ``page_src`` points to, when it lies outside
    docs/ (None for a link inside docs/, to a missing path, or out of the repository)."""
    path = (page_src.parent / target).resolve()
    if path.is_relative_to(DOCS) or not path.is_relative_to(ROOT) or not path.is_file():
        return None
    return path


def on_config(config: Any) -> Any:
    """Add the "Tutorials" section (one entry per notebook) after "Concepts"; ``mkdocs serve``
    watches the notebooks' folder too."""
    if NOTEBOOKS.is_dir() and str(NOTEBOOKS) not in config["watch"]:
        config["watch"].append(str(NOTEBOOKS))
    found = notebooks()
    if found and config["nav"] is not None:
        nav = list(config["nav"])
        section = {"Tutorials": [f"notebooks/{nb.name}" for nb in found]}
        at = next((i + 1 for i, item in enumerate(nav) if "Concepts" in item), len(nav))
        nav.insert(at, section)
        config["nav"] = nav
    return config


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns notebooks into pages
def on_files(files: Files, config: Any) -> Files:
    """The notebooks, and a copy of every repository file a page links to."""
    for nb in notebooks():
        # a File of its own source folder (examples/), not File.generated: mkdocs-jupyter's
        # NotebookFile wrapper reads the path from src_dir, which a generated file lacks
        files.append(
            File(
                f"{NOTEBOOKS.name}/{nb.name}",
                src_dir=str(NOTEBOOKS.parent),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    linked: set[Path] = set()
    for page in list(files.documentation_pages()):
        if page.abs_src_path is None or not page.src_uri.endswith(".md"):
            continue
        text = Path(page.abs_src_path).read_text(encoding="utf-8")
        for match in LINK.finditer(text):
            target = outside_target(Path(page.abs_src_path), match.group(1))
            if target is not None:
                linked.add(target)
    for path in sorted(linked):
        uri = f"{REPO}/{path.relative_to(ROOT).as_posix()}"
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Point each link to a repository file at its copy under ``repo/``."""
    if page.file.abs_src_path is None:
        return markdown
    src = Path(page.file.abs_src_path)
    depth = len(Path(page.file.src_uri).parts) - 1

    def rewrite(match: re.Match[str]) -> str:
        target = outside_target(src, match.group(1))
        if target is None:
            return match.group(0)
        uri = "../" * depth + f"{REPO}/{target.relative_to(ROOT).as_posix()}"
        return f"]({uri}{match.group(2) or ''})"

    return LINK.sub(rewrite, markdown)
