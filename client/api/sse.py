"""A Server-Sent Events parser (the WHATWG ``text/event-stream`` format) for the study event
stream: lines in, ``(id, event, data)`` messages out."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

__all__ = ["Message", "messages"]


@dataclass(frozen=True)
class Message:
    id: str | None
    """The message's ``id:`` field (None when it had none)."""
    event: str
    data: str


async def messages(lines: AsyncIterable[str]) -> AsyncIterator[Message]:
    """The messages of an event stream given as lines (without their line breaks). Comments
    (``:`` lines) and ``retry:`` are skipped; a message without ``data`` is not dispatched, as
    the format says."""
    event_id: str | None = None
    event = ""
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield Message(event_id, event or "message", "\n".join(data))
            event_id, event, data = None, "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
        elif field == "id" and "\0" not in value:
            event_id = value
