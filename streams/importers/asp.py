"""ASP JSONL: files that already hold canonical events, one per line.

The events are taken as they are (their own eventIds, times and lineage); the importer only
fills ``logId`` and ``acl`` when an event leaves them out, and validates each line. (Reading a
file, :func:`streams.importers.iter_file` then closes a run of loose events it ends in with an
empty turn after it: :mod:`streams.importers.frames`.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streams.asp import validate_event_bytes
from streams.exceptions import SchemaError
from streams.importers.base import (
    BOM,
    Accepted,
    Content,
    Rejected,
    iter_json_lines,
    raw_text,
)

__all__ = ["iter_asp"]


def iter_asp(
    path: Path, *, label: str, log_id: str = "default", acl: dict[str, Any] | None = None,
    data: Content | None = None,
) -> Iterator[Accepted | Rejected]:
    """One Accepted per valid event line of ``path`` (or of ``data``, its bytes), one Rejected
    per bad line."""
    for item in iter_json_lines(path, label=label, what="an ASP event", data=data):
        if isinstance(item, Rejected):
            yield item
            continue
        record, line = item.record, item.raw
        event = dict(item.value)
        # The event's own logId and acl win: the file may deliberately span several logs.
        event.setdefault("logId", log_id)
        if acl is not None:
            event.setdefault("acl", acl)
        # A canonical line with nothing filled in is already the bytes L1 stores.
        canonical = item.raw.removeprefix(BOM) if item.canonical and len(event) == len(item.value) else None
        try:
            validated, encoded = validate_event_bytes(event, record=record, encoded=canonical)
            yield Accepted(validated, record, canonical=encoded)
        except SchemaError as exc:
            reason = f"{exc.reason} (field {exc.field})" if exc.field else exc.reason
            yield Rejected(record, reason, raw_text(line))
