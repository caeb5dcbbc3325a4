"""ASP JSONL: files that already hold canonical events, one per line.

The events are taken as they are (their own eventIds, times and lineage); the importer only
fills ``logId`` and ``acl`` when an event leaves them out, and validates each line. (Reading a
file, :func:`streams.importers.iter_file` then closes a run of loose events it ends in with an
empty turn after it: :mod:`streams.importers.frames`.)

A rejected event that states an ``acl`` would have set who may read its session from there on;
the later events of that session in the import that state none are rejected with it (each
naming it), until one that states an ``acl`` is accepted (:class:`RefusedLists`): accepted,
they would create the session with the default ``read: ["*"]`` or stay under the list the
rejected event was to replace.
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
    JsonLine,
    Rejected,
    iter_json_lines,
    raw_text,
)

__all__ = ["WHAT", "RefusedLists", "asp_line", "iter_asp"]

#: What a line of an ASP file must be (named in its reject).
WHAT = "an ASP event"


class RefusedLists:
    """The sessions of one import (or of one ``POST /v1/events``, :mod:`planner.receivers`)
    whose event stating an ``acl`` was rejected, with that event's record, until an event of the
    session stating an ``acl`` is accepted. ``remedy`` ends the reason given to the events
    refused after it."""

    def __init__(self, remedy: str = "fix that event (or give this one the session's acl) and import "
                                     "the file again") -> None:
        self._refused: dict[str, str] = {}
        self._remedy = remedy

    def refuse(self, event: dict[str, Any], record: str) -> None:
        """Note the rejected ``event`` (if it states an ``acl`` and names a session)."""
        if "acl" in event and isinstance(event.get("sessionId"), str):
            self._refused.setdefault(event["sessionId"], record)

    def reason(self, event: dict[str, Any]) -> str | None:
        """Why the valid ``event`` is rejected after such an event; None when it may go on
        (stating an ``acl``, it sets the session's list again)."""
        session = event["sessionId"]
        first = self._refused.get(session)
        if first is None:
            return None
        if "acl" in event:
            del self._refused[session]
            return None
        return (f"event {first} of the same session {session!r} stated the session's access list and "
                f"was rejected; this event states no acl, so it would be readable under another list: "
                f"{self._remedy}")


def iter_asp(
    path: Path, *, label: str, log_id: str = "default", acl: dict[str, Any] | None = None,
    data: Content | None = None, refused: RefusedLists | None = None,
) -> Iterator[Accepted | Rejected]:
    """One Accepted per valid event line of ``path`` (or of ``data``, its bytes), one Rejected
    per bad line, and per line after a rejected one that set its session's list (``refused``,
    shared with the caller, who notes what it rejects in turn)."""
    refused = RefusedLists() if refused is None else refused
    for item in iter_json_lines(path, label=label, what=WHAT, data=data):
        yield asp_line(item, log_id=log_id, acl=acl, refused=refused)


def asp_line(item: JsonLine | Rejected, *, log_id: str, acl: dict[str, Any] | None,
             refused: RefusedLists) -> Accepted | Rejected:
    """What :func:`iter_asp` says of one line (``iter_json_lines``' reading of it), after the
    lines whose rejects ``refused`` noted: a follower's cursor reads on line by line."""
    if isinstance(item, Rejected):
        return item
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
    except SchemaError as exc:
        refused.refuse(event, record)
        reason = f"{exc.reason} (field {exc.field})" if exc.field else exc.reason
        return Rejected(record, reason, raw_text(line))
    after = refused.reason(validated)
    return Accepted(validated, record, canonical=encoded) if after is None else Rejected(record, after, raw_text(line))
