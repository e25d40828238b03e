"""Server settings (docs/architecture.md, convention 5): one pydantic-settings class, ``FEDLDP_``
env prefix."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["Settings"]


class Settings(BaseSettings):
    """Every server setting, with defaults that run locally; each is overridable from the
    environment as ``FEDLDP_<NAME>`` (e.g. ``FEDLDP_DATABASE_URL``)."""

    model_config = SettingsConfigDict(env_prefix="FEDLDP_", extra="ignore", frozen=True)

    database_url: str = Field(
        "sqlite:///fedldp.db",
        description="SQLAlchemy URL: a SQLite file (WAL, busy timeout) or postgresql+psycopg://…",
    )
    host: str = Field("127.0.0.1", description="interface uvicorn binds")
    port: int = Field(8000, ge=0, le=65535, description="port uvicorn binds")
    admin_key: str | None = Field(
        None, description="when set, creating, starting and cancelling studies need X-Admin-Key"
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "info", description="debug also logs one line per request"
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="json: one JSON object per log line, with the request id"
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="server processes sharing the port (python -m fedldp.server --workers K)",
    )
    sweep_interval_s: float = Field(
        0.5, gt=0, description="how often deadlines and complete rounds are checked"
    )
    busy_timeout_s: float = Field(30.0, gt=0, description="SQLite busy timeout")
    events_poll_s: float = Field(
        0.25,
        gt=0,
        le=60,
        description="how often an event stream reads the database (at most 1/this progress "
        "events per second per stream)",
    )
    events_heartbeat_s: float = Field(
        15.0, gt=0, description="idle time after which an event stream sends a keep-alive comment"
    )
    aggregate_chunk: int = Field(
        8192, ge=1, description="reports per chunk streamed from the database into aggregation"
    )
    lease_ttl_s: float = Field(
        600.0,
        gt=0,
        description="how long a lease holds its ids: one not fully enrolled by then expires, and "
        "its ids go to the next lease",
    )
    max_body_bytes: int = Field(
        1 << 20, ge=1024, description="largest request body of a single-participant or admin route"
    )
    max_batch_body_bytes: int | None = Field(
        None,
        ge=1024,
        description="largest request body of every batch route (enrollment, task and report "
        "batches) and of predictions; default: each its own cap, derived from its most items "
        "and its largest legitimate item (fedldp.server.web.limits.BATCH_CAPS)",
    )
    protocols: Annotated[tuple[str, ...] | None, NoDecode] = Field(
        None,
        description="the protocols this server offers, comma-separated names (default: every "
        "installed one, plugins included); creating a study with another is refused "
        "(unknown_protocol) and GET /v1/protocols lists only these",
    )
    key_dir: Path | None = Field(
        None,
        description=(
            "where each central-trust study's contribution key lives (one file per study, "
            "destroyed when the study ends); default: beside the SQLite file (fedldp.db.keys/), "
            "or fedldp/keys in the user's state directory ($XDG_STATE_HOME, ~/.local/state) for "
            "PostgreSQL, whose replicas must all be given the same (shared) directory"
        ),
    )

    @field_validator("protocols", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """``FEDLDP_PROTOCOLS=user-mean,hetero-mean-rr`` (spaces around names ignored; empty:
        every installed protocol)."""
        if isinstance(value, str):
            names = tuple(n.strip() for n in value.split(",") if n.strip())
            return names or None
        return value
