"""ASP v1: the canonical event schema of the L1 log.

``validate_event`` is the one gate every event passes before it is appended: it fills
defaults, checks the JSON Schema in ``streams/schemas/asp-v1.schema.json`` (compiled once with
fastjsonschema) and checks what a schema cannot say (a parseable RFC 3339 time with an offset).
Errors name the field and the input record.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

import fastjsonschema
import orjson

from streams.exceptions import SchemaError

__all__ = [
    "ASP_VERSION",
    "EVENT_TYPES",
    "canonical_bytes",
    "event_time",
    "load_schema",
    "parse_time",
    "validate_event",
]

ASP_VERSION = "1.0"

EVENT_TYPES = (
    "session.started", "session.ended", "session.acl",
    "run.started", "run.ended",
    "turn.started", "turn.ended",
    "episode.started", "episode.ended",
    "message", "tool.call", "tool.result", "error",
)

DEFAULT_ACL: dict[str, Any] = {"tenant": "default", "read": ["*"]}

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)


@cache
def load_schema() -> dict[str, Any]:
    text = resources.files("streams.schemas").joinpath("asp-v1.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator() -> Any:
    return fastjsonschema.compile(load_schema(), formats={"date-time": _RFC3339.pattern})


def parse_time(value: str) -> datetime:
    """Parse an RFC 3339 time with an offset into an aware UTC datetime."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise ValueError(f"not an RFC 3339 time with an offset: {value!r}")
    text = value.replace("z", "Z").replace("Z", "+00:00").replace("t", "T").replace(" ", "T")
    # Python's fromisoformat takes at most 6 fractional digits; nanosecond stamps are common.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except OverflowError:
        # 9999-12-31T23:59:59-01:00 is a valid RFC 3339 time but past datetime's range in UTC.
        raise ValueError(f"time out of range (years 1..9999 in UTC): {value!r}") from None


def event_time(event: dict[str, Any]) -> float:
    """Event time as POSIX seconds."""
    return parse_time(event["time"]).timestamp()


def validate_event(event: Any, *, record: str | None = None) -> dict[str, Any]:
    """Return a validated copy of ``event`` with defaults filled, or raise SchemaError."""
    if not isinstance(event, dict):
        raise SchemaError(f"an event must be a JSON object, not {type(event).__name__}", record=record)
    candidate = dict(event)
    candidate.setdefault("aspVersion", ASP_VERSION)
    candidate.setdefault("logId", "default")
    candidate.setdefault("visibility", "visible")
    candidate.setdefault("acl", dict(DEFAULT_ACL))
    candidate.setdefault("fields", {})
    if candidate["aspVersion"] != ASP_VERSION:
        raise SchemaError(
            f"unsupported aspVersion {candidate['aspVersion']!r}; this build reads {ASP_VERSION!r}",
            field="$.aspVersion", record=record,
        )
    try:
        _validator()(candidate)
    except fastjsonschema.JsonSchemaValueException as exc:
        path = "$" + str(exc.name)[len("data"):] if exc.name else "$"
        message = str(exc.message).replace("data.", "").replace("data ", "event ")
        raise SchemaError(message, field=path, record=record) from None
    try:
        parse_time(candidate["time"])
    except ValueError as exc:
        raise SchemaError(str(exc), field="$.time", record=record) from None
    try:
        # Valid for the schema is not enough: L1 stores canonical_bytes, which refuses values
        # nested deeper than 254 levels and strings holding lone surrogates.
        canonical_bytes(candidate)
    except orjson.JSONEncodeError as exc:
        raise SchemaError(f"the event cannot be stored as JSON: {exc}", record=record) from None
    return candidate


def canonical_bytes(event: dict[str, Any]) -> bytes:
    """The exact bytes appended to L1: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(event, option=orjson.OPT_SORT_KEYS)
