"""The documentation site (mkdocs.yml, docs/) and the README that points into it.

The site is built once for the module, strictly (a broken link, a missing page or an unresolved
API reference fails the build), into a temporary folder, as ``scripts/check`` builds it. Then:

* nothing in it loads from another host: no ``<link>``, ``<script>``, ``<img>``, ``<iframe>``,
  ``<source>``, ``<video>``, ``<audio>``, ``<embed>`` or ``<object>`` names an ``http(s)://`` or
  protocol-relative address, no inline style or stylesheet imports one, and the material theme's
  web fonts are off. Plain ``<a href>`` links to other hosts (a paper, say) are allowed: the
  reader follows them, the page does not load them. In a real browser (Debian's chromium, as the
  dashboard test drives it), opening the start page, the concepts, the catalogue, the API
  reference and a tutorial notebook from ``file://`` requests no ``http(s)`` URL;
* the catalogue page has a section for every protocol of the catalogue, with each parameter, and
  the server page a row for every setting;
* the API reference renders every public name (``__all__``) of the modules it documents;
* each tutorial notebook of examples/notebooks/ is a page of the site, with its figures;
* the hooks' own rules: which links out of docs/ are served, how docstring prose is escaped;
* every ``fedldp`` command shown in a shell block of the README or of a page parses with the
  command line's own parser (an option renamed or removed fails here), the README's two first
  commands are exactly the ones CI runs, the README stays under 200 lines, its relative links
  point at files that exist, and the output it shows for ``fedldp simulate`` is the program's.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fedldp.client.cli.main import build_parser
from fedldp.protocol.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.MULTILINE)
"""A mkdocstrings block of an API page: the module it renders, then its indented options."""
LOADING = re.compile(
    r"<(?:link|script|img|iframe|source|video|audio|embed|object)\b[^>]*?"
    r"\b(?:src|href|data|srcset|poster)\s*=\s*[\"']?\s*(?:https?:)?//",
    re.IGNORECASE,
)
IMPORTED = re.compile(r"(?:@import|url\()\s*[\"']?\s*(?:https?:)?//", re.IGNORECASE)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def pages(site: Path) -> Iterator[Path]:
    yield from site.rglob("*.html")


def test_the_site_loads_nothing_from_another_host(site: Path) -> None:
    checked = 0
    for page in pages(site):
        html = page.read_text(encoding="utf-8")
        assert not LOADING.findall(html), (page, LOADING.findall(html))
        assert not IMPORTED.findall(html), (page, IMPORTED.findall(html))
        assert "fonts.googleapis" not in html, page
        assert "fonts.gstatic" not in html, page
        assert 'class="mermaid"' not in html, page  # material would fetch mermaid.js for it
        checked += 1
    for sheet in site.rglob("*.css"):
        assert not IMPORTED.findall(sheet.read_text(encoding="utf-8")), sheet
    assert checked > 20


def test_a_browser_requests_nothing_from_another_host(site: Path) -> None:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: scripts/bootstrap installs it")
        pytest.skip("chromium is missing (scripts/bootstrap installs it as root)")
    from playwright.sync_api import sync_playwright

    requested: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.on("request", lambda request: requested.append(request.url))
            shown = ["index.html", "protocols.html", "api/client.html", "concepts.html"]
            shown += [p.relative_to(site).as_posix() for p in site.glob("notebooks/*.html")][:1]
            for name in shown:
                page.goto((site / name).as_uri(), wait_until="load")
                page.wait_for_timeout(300)  # scripts the page starts (search index, …)
                assert page.locator("h1").first.is_visible()
        finally:
            browser.close()
    assert requested, "the browser recorded no request at all"
    assert [url for url in requested if not url.startswith(("file:", "data:"))] == []


def test_the_catalogue_page_lists_every_protocol(site: Path) -> None:
    html = (site / "protocols.html").read_text(encoding="utf-8")
    for name in CATALOGUE:
        assert f'id="{name}"' in html, name
        section = html.split(f'id="{name}"', 1)[1].split("<h3", 1)[0]
        for field in CATALOGUE[name].params_model.model_fields:
            assert f"<code>{field}</code>" in section, (name, field)
        assert "Minimum population" in section, name
        assert "Unequal ε" in section, name


def test_the_api_reference_renders_every_public_name(site: Path) -> None:
    checked = set()
    for source in sorted((DOCS / "api").glob("*.md")):
        html = (site / "api" / f"{source.stem}.html").read_text(encoding="utf-8")
        for module_name, options in DIRECTIVE.findall(source.read_text(encoding="utf-8")):
            if "members: false" in options:
                continue  # a module shown for its docstring only (fedldp: the names it re-exports)
            module = importlib.import_module(module_name)
            for name in module.__all__:
                assert f'id="{module_name}.{name}"' in html, (source.name, module_name, name)
            checked.add(module_name)
    assert {
        "fedldp.client.simulate",
        "fedldp.client.results",
        "fedldp.client.api.client",
        "fedldp.client.swarm.run",
        "fedldp.protocol.api",
        "fedldp.testing",
    } <= checked


def test_every_notebook_is_a_page_with_its_outputs(site: Path) -> None:
    for notebook in sorted((ROOT / "examples" / "notebooks").glob("*.ipynb")):
        page = site / "notebooks" / f"{notebook.stem}.html"
        assert page.is_file(), notebook
        html = page.read_text(encoding="utf-8")
        assert "jp-Notebook" in html, notebook
        stored = notebook.read_text(encoding="utf-8").count('"image/png"')
        assert html.count("data:image/png;base64,") >= stored, notebook  # its figures, inline


def shown_commands(text: str) -> list[str]:
    """The ``fedldp`` command lines of a page's shell blocks (continuations joined, comments and
    a leading ``.venv/bin/`` dropped)."""
    commands = []
    for block in re.findall(r"^```(?:bash|sh|console)\n(.*?)^```$", text, re.DOTALL | re.MULTILINE):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith(("fedldp ", ".venv/bin/fedldp ")):
                commands.append(shlex.join(shlex.split(line, comments=True)[1:]))
    return commands


def documents() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_every_shown_command_parses(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    seen = 0
    for path in documents():
        for command in shown_commands(path.read_text(encoding="utf-8")):
            try:
                parser.parse_args(shlex.split(command))
            except SystemExit as stop:
                raise AssertionError(
                    f"{path.name}: fedldp {command}: {capsys.readouterr().err}"
                ) from stop
            seen += 1
    assert seen >= 30  # the pages' examples: simulate, swarm, studies, experiment, reproduce, db, …


def test_the_readme_is_a_first_visit() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    first = re.search(r"^```bash\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    assert first is not None
    assert [line.split("#")[0].strip() for line in first.group(1).splitlines()] == [
        "bash scripts/bootstrap && .venv/bin/fedldp run",
        ".venv/bin/python -m pytest",
    ]
    assert ".venv/bin/python -m pytest" in (ROOT / "scripts" / "check").read_text(encoding="utf-8")
    for target in re.findall(r"\]\((?!https?:|#)([^)#\s]+)", text):
        assert (ROOT / target).exists(), target


def test_the_readme_shows_what_simulate_prints() -> None:
    text = README.read_text(encoding="utf-8")
    found = re.search(
        r"^```bash\n(\.venv/bin/fedldp simulate .*?)^```\n\n```text\n(.*?)^```$",
        text,
        re.DOTALL | re.MULTILINE,
    )
    assert found is not None, "the README shows a fedldp simulate command and its output"
    (command,) = shown_commands(f"```bash\n{found.group(1)}```\n")
    fedldp = Path(sys.executable).parent / "fedldp"
    run = subprocess.run(
        [str(fedldp), *shlex.split(command)], capture_output=True, text=True, check=True, cwd=ROOT
    )
    printed = [line.rstrip() for line in run.stdout.splitlines()]
    shown = found.group(2).splitlines()
    assert len(shown) >= 4
    for line in shown:
        assert line in printed, (line, run.stdout)


def test_the_server_page_lists_every_setting(site: Path) -> None:
    from fedldp.server.settings import Settings

    html = (site / "server.html").read_text(encoding="utf-8")
    for name in Settings.model_fields:
        assert f"<code>FEDLDP_{name.upper()}</code>" in html, name


def hook(name: str) -> Any:
    """A module of docs/hooks/, imported from its file (mkdocs loads them the same way)."""
    spec = importlib.util.spec_from_file_location(
        f"docs_hook_{name}", DOCS / "hooks" / f"{name}.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_links_out_of_docs_are_served_only_for_files_that_exist(tmp_path: Path) -> None:
    repo_files = hook("repo_files")
    page = DOCS / "extending.md"
    elsewhere = tmp_path / "secret.txt"
    elsewhere.write_text("not the repository's", encoding="utf-8")
    assert repo_files.outside_target(page, "../protocol/api.py") == ROOT / "protocol" / "api.py"
    assert repo_files.outside_target(page, "../protocol/no_such_module.py") is None  # strict fails
    assert repo_files.outside_target(page, "architecture.md") is None  # a page: mkdocs's own
    outside = os.path.relpath(elsewhere, DOCS)
    assert repo_files.outside_target(page, outside) is None  # outside the repository


def test_docstring_prose_becomes_inert_markdown() -> None:
    catalogue = hook("catalogue")
    assert catalogue._inline("a <b> | *c* d_e [f] ``x<y``") == (
        r"a &lt;b&gt; &#124; \*c\* d\_e \[f\] `x<y`"
    )


def test_the_build_fails_on_what_it_should() -> None:
    """What makes a broken link or anchor fail (mkdocs.yml), and that CI's build does not hide it:
    mkdocs' ``--quiet`` silences the warnings ``--strict`` fails on."""
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True
    assert set(config["validation"].values()) == {"warn"}
    assert config["theme"]["font"] is False
    assert not [url for url in config.get("extra_javascript", []) if "//" in str(url)]
    check = (ROOT / "scripts" / "check").read_text(encoding="utf-8")
    (line,) = [line for line in check.splitlines() if "mkdocs build" in line]
    assert "--strict" in line
    assert "--quiet" not in line.split("#")[0]
    assert " -q" not in line.split("#")[0]
