"""mkdocs hook: the table of the server's settings, written from ``fedldp.server.settings.Settings``
at every build (docs/server.md holds the marker ``<!-- settings -->``): each setting's environment
variable, default and description, as the server reads them, so a setting added or changed shows
at the next build."""

from __future__ import annotations

import json
from typing import Any

MARKER = "<!-- settings -->"
PAGE = "server.md"


def settings_markdown() -> str:
    """One row per field of the server's settings: ``FEDLDP_<NAME>``, default, description."""
    from fedldp.server.settings import Settings

    prefix = str(Settings.model_config.get("env_prefix", ""))
    rows = ["| variable | default | what it sets |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = "none" if field.default is None else f"`{json.dumps(field.default, default=str)}`"
        description = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{prefix}{name.upper()}` | {default} | {description} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Fill the server page; every other page passes through."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} lost its {MARKER} marker")
    return markdown.replace(MARKER, settings_markdown())
