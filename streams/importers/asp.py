"""ASP JSONL: files that already hold canonical events, one per line.

The events are taken as they are (their own eventIds, times and lineage); the importer only
fills ``logId`` and ``acl`` when an event leaves them out, and validates each line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streams.asp import validate_event
from streams.exceptions import SchemaError
from streams.importers.base import Accepted, Rejected, parse_json, raw_text, read_lines

__all__ = ["iter_asp"]


def iter_asp(
    path: Path, *, label: str, log_id: str = "default", acl: dict[str, Any] | None = None
) -> Iterator[Accepted | Rejected]:
    """One Accepted per valid event line of ``path``, one Rejected per bad line."""
    for number, line in read_lines(path):
        record = f"{label}:{number}"
        value, error = parse_json(line)
        if error is not None:
            yield Rejected(record, error, raw_text(line))
            continue
        if not isinstance(value, dict):
            reason = f"an ASP event must be a JSON object, not {type(value).__name__}"
            yield Rejected(record, reason, raw_text(line))
            continue
        event = dict(value)
        # The event's own logId and acl win: the file may deliberately span several logs.
        event.setdefault("logId", log_id)
        if acl is not None:
            event.setdefault("acl", acl)
        try:
            yield Accepted(validate_event(event, record=record), record)
        except SchemaError as exc:
            reason = f"{exc.reason} (field {exc.field})" if exc.field else exc.reason
            yield Rejected(record, reason, raw_text(line))
