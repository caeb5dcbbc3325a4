"""ASP v1: the canonical event schema of the L1 log.

``validate_event`` is the one gate every event passes before it is appended: it fills
defaults, checks the JSON Schema in ``streams/schemas/asp-v1.schema.json`` (compiled once with
fastjsonschema) and checks what a schema cannot say (a parseable RFC 3339 time with an offset).
Errors name the field and the input record.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache, lru_cache
from importlib import resources
from typing import Any

import fastjsonschema
import orjson

from streams.exceptions import SchemaError
from streams.names import LOG_ID

__all__ = [
    "ASP_VERSION",
    "CUT_NOTE",
    "DEFAULT_MAX_EVENT_BYTES",
    "EVENT_TYPES",
    "LOG_ID",
    "ROLES",
    "canonical_bytes",
    "event_digest",
    "event_time",
    "fit_event",
    "json_kind",
    "load_schema",
    "loads_event",
    "loads_event_canonical",
    "parse_time",
    "posix_seconds",
    "posix_time",
    "validate_event",
    "validate_event_bytes",
]

ASP_VERSION = "1.0"

EVENT_TYPES = (
    "session.started", "session.ended", "session.acl",
    "run.started", "run.ended",
    "turn.started", "turn.ended",
    "episode.started", "episode.ended",
    "message", "tool.call", "tool.result", "error",
)

# Kafka refuses messages above 1 MiB unless the broker and topic are configured otherwise; the
# worker re-publishes each event redacted (a few bytes longer per secret), so L1 events stay
# well below that.
DEFAULT_MAX_EVENT_BYTES = 768 * 1024

DEFAULT_ACL: dict[str, Any] = {"tenant": "default", "read": ["*"]}
"""The access list of a session whose first event states none (streams.ownership)."""

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)
_BEYOND_MICROSECONDS = re.compile(r"(\.\d{6})\d+")


@cache
def load_schema() -> dict[str, Any]:
    text = resources.files("streams.schemas").joinpath("asp-v1.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator() -> Any:
    return fastjsonschema.compile(load_schema(), formats={"date-time": _RFC3339.pattern})


# The schema's top level, checked directly for the shapes importers write (about a third of the
# compiled validator's time, issue #16). It only ever accepts: whatever it cannot vouch for goes
# to the full check, which names what is wrong. Patterns as fastjsonschema runs them ("$" is
# "\Z" in a schema pattern, the date-time format is the pattern itself); a test checks that
# this never accepts what the schema refuses (tests/streams/test_asp_fast_check.py).
_PROPERTIES = frozenset({
    "aspVersion", "eventId", "logId", "sessionId", "runId", "turnId", "episodeId", "parentSessionId",
    "parentEventId", "type", "role", "time", "visibility", "acl", "fields", "payload",
})
_REQUIRED_IDS = ("eventId", "sessionId")
_OPTIONAL_IDS = ("runId", "turnId", "episodeId", "parentSessionId", "parentEventId")
_CUSTOM_TYPE = re.compile(r"x\.[a-z0-9_.-]+\Z")
_TYPES = frozenset(EVENT_TYPES)
ROLES = frozenset({"user", "assistant", "system", "developer", "tool"})
"""The roles an event may have (``role``)."""
_VISIBILITIES = frozenset({"visible", "hidden"})
_READER = re.compile(r"(\*|user:.+|group:.+)\Z")


def _plainly_valid(event: dict[str, Any]) -> bool:
    """True when the schema surely accepts ``event`` (False: let the full check decide)."""
    if not event.keys() <= _PROPERTIES or event.get("aspVersion") != ASP_VERSION:
        return False
    for key in _REQUIRED_IDS:
        value = event.get(key)
        if type(value) is not str or not 1 <= len(value) <= 256:
            return False
    for key in _OPTIONAL_IDS:
        value = event.get(key)
        if value is not None and (type(value) is not str or len(value) > 256):
            return False
    log_id, kind, role, time = event.get("logId"), event.get("type"), event.get("role"), event.get("time")
    if type(log_id) is not str or not LOG_ID.fullmatch(log_id):
        return False
    if type(kind) is not str or (kind not in _TYPES and not _CUSTOM_TYPE.match(kind)):
        return False
    if role is not None and (type(role) is not str or role not in ROLES):
        return False
    if type(time) is not str or not _RFC3339.match(time):
        return False
    visibility = event.get("visibility", "visible")
    if type(visibility) is not str or visibility not in _VISIBILITIES:
        return False
    if "fields" in event and type(event["fields"]) is not dict:
        return False
    return "acl" not in event or _plain_acl(event["acl"])


def _plain_acl(acl: Any) -> bool:
    if type(acl) is not dict or not acl.keys() <= {"tenant", "read"}:
        return False
    tenant, read = acl.get("tenant"), acl.get("read", [])
    if type(tenant) is not str or not tenant or type(read) is not list:
        return False
    return all(type(entry) is str and _READER.match(entry) for entry in read)


def parse_time(value: str) -> datetime:
    """Parse an RFC 3339 time with an offset into an aware UTC datetime."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise ValueError(f"not an RFC 3339 time with an offset: {value!r}")
    end = value[-1]
    if value[10] == "T" and ((end == "Z" and len(value) <= 27) or (end in "0123456789" and len(value) <= 32)):
        # What importers write (an upper-case T and Z or an offset, at most 6 fractional digits:
        # any more makes a matching time longer) fromisoformat reads as it is, as it reads the
        # rewrite below; a third of parsing a time went into rewriting it (issue #16).
        try:
            return datetime.fromisoformat(value).astimezone(UTC)
        except (ValueError, OverflowError):
            pass  # refused below, in the words it always was
    text = value.replace("z", "Z").replace("Z", "+00:00").replace("t", "T").replace(" ", "T")
    # Python's fromisoformat takes at most 6 fractional digits; nanosecond stamps are common.
    text = _BEYOND_MICROSECONDS.sub(r"\1", text)
    if text[17:19] == "60":
        # A leap second (RFC 3339 allows :60) is the last instant of its minute: datetime has
        # no 61st second, and the event is no less valid for it.
        text = f"{text[:17]}59.999999{text[-6:]}"  # the offset: +00:00 for Z after the rewrite
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except OverflowError:
        # 9999-12-31T23:59:59-01:00 is a valid RFC 3339 time but past datetime's range in UTC.
        raise ValueError(f"time out of range (years 1..9999 in UTC): {value!r}") from None
    except ValueError:
        # Python's words name its own types ("offset must be a timedelta strictly between
        # -timedelta(hours=24) and ..."); the sender needs to know which part is wrong.
        raise ValueError(f"not a valid RFC 3339 time: {value!r} (a month, day, hour, minute or second "
                         "out of range, or an offset beyond ±23:59)") from None


def event_time(event: dict[str, Any]) -> float:
    """Event time as POSIX seconds."""
    return _posix_of_text(event["time"])


def posix_time(value: Any) -> float | None:
    """POSIX seconds of an RFC 3339 string, an aware datetime or a number; None stays None.

    The one conversion every package uses, so an index, the planner and the stream never
    disagree on when something happened. Raises ValueError for malformed text or a naive
    datetime (its zone would be a guess)."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass an aware datetime")
        return value.timestamp()
    return _posix_of_text(str(value))


def posix_seconds(value: Any) -> float:
    """POSIX seconds of ``value`` as :func:`posix_time` reads it, 0.0 when it is absent (None).

    For sort keys and time filters, where a record without a time sorts first (the epoch)."""
    return posix_time(value) or 0.0


@lru_cache(maxsize=1 << 16)
def _posix_of_text(text: str) -> float:
    # Cached: overlapping chunks and the events of one turn repeat the same times.
    return parse_time(text).timestamp()


def validate_event(event: Any, *, record: str | None = None) -> dict[str, Any]:
    """Return a validated copy of ``event`` with defaults filled, or raise SchemaError."""
    return validate_event_bytes(event, record=record)[0]


def validate_event_bytes(event: Any, *, record: str | None = None,
                         encoded: bytes | None = None) -> tuple[dict[str, Any], bytes]:
    """:func:`validate_event`, and the validated event's :func:`canonical_bytes`.

    Validation serialises the event anyway (the check that L1 can store it), so whoever appends
    it carries these bytes instead of serialising it again (``usl ingest``, issue #16).
    ``encoded`` is ``canonical_bytes(event)`` when the caller already has them (an ASP line
    that is canonical JSON): they stand when validation fills no default."""
    if not isinstance(event, dict):
        raise SchemaError(f"an event must be a JSON object, not {json_kind(event)}", record=record)
    candidate = dict(event)
    given = len(candidate)
    candidate.setdefault("aspVersion", ASP_VERSION)
    candidate.setdefault("logId", "default")
    candidate.setdefault("visibility", "visible")
    # No default ``acl``: an event that omits it inherits its session's access list, which only
    # the stream knows (streams.ownership); filling one here would make it public.
    candidate.setdefault("fields", {})
    if candidate["aspVersion"] != ASP_VERSION:
        raise SchemaError(
            f"unsupported aspVersion {candidate['aspVersion']!r}; this build reads {ASP_VERSION!r}",
            field="$.aspVersion", record=record,
        )
    try:
        if not _plainly_valid(candidate):
            _validator()(candidate)
    except fastjsonschema.JsonSchemaValueException as exc:
        path = "$" + str(exc.name)[len("data"):] if exc.name else "$"
        message = _json_worded(exc).replace("data.", "").replace("data ", "event ")
        raise SchemaError(message, field=path, record=record) from None
    try:
        parse_time(candidate["time"])
    except ValueError as exc:
        raise SchemaError(str(exc), field="$.time", record=record) from None
    if encoded is not None and len(candidate) == given:
        return candidate, encoded  # no default filled: the caller's bytes are the candidate's
    try:
        # Valid for the schema is not enough: L1 stores canonical_bytes, which refuses values
        # nested deeper than 254 levels and strings holding lone surrogates.
        return candidate, canonical_bytes(candidate)
    except orjson.JSONEncodeError as exc:
        raise SchemaError(f"the event cannot be stored as JSON: {exc}", record=record) from None


def _json_worded(exc: fastjsonschema.JsonSchemaValueException) -> str:
    """``exc``'s message with the values it names written as JSON: fastjsonschema writes them as
    Python does (``['tool', None]``, ``{'extra'}``), and whoever reads the reason wrote JSON."""
    value, rule, definition = exc.value, exc.rule, exc.rule_definition
    if rule == "enum":
        return f"{exc.name} must be one of {json.dumps(definition)}"
    if rule == "const":
        return f"{exc.name} must be {json.dumps(definition)}"
    if rule == "required" and isinstance(value, dict):
        return f"{exc.name} must contain {json.dumps([key for key in definition if key not in value])} properties"
    if rule == "additionalProperties" and isinstance(value, dict) and isinstance(exc.definition, dict):
        extra = sorted(key for key in value if key not in exc.definition.get("properties", {}))
        return f"{exc.name} must not contain {json.dumps(extra)} properties"
    return str(exc.message)


def json_kind(value: Any) -> str:
    """How JSON names the type of ``value`` (``null``, ``a string``, ...), for messages about input:
    whoever reads a dead letter or a 400 wrote JSON, and ``NoneType`` or ``dict`` names nothing there."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


def loads_event(raw: bytes | str) -> Any:
    """Parse one JSON text as an event would be: like ``orjson.loads``, but an object with the
    same key twice is refused (SchemaError naming the key). Parsers disagree on which copy of a
    duplicate wins, so ``{"sessionId": "mine", "sessionId": "theirs"}`` could be checked as one
    session and stored as another. Raises orjson.JSONDecodeError for text that is not JSON.

    Text that re-encodes to itself has no repeated key (the copy would be missing), so canonical
    bytes (what L1 holds) and compact JSON in its writer's key order (``JSON.stringify``, as in
    Claude Code transcripts) cost one or two ``orjson.dumps``; anything else is checked key by
    key."""
    return loads_event_canonical(raw)[0]


def loads_event_canonical(raw: bytes | str) -> tuple[Any, bool]:
    """:func:`loads_event`, and whether ``raw`` is the value's :func:`canonical_bytes` (the
    duplicate-key check finds that out for free)."""
    value = orjson.loads(raw)
    if isinstance(value, dict | list):
        data = raw.encode("utf-8") if isinstance(raw, str) else raw
        for option in (orjson.OPT_SORT_KEYS, None):
            try:
                if orjson.dumps(value, option=option) == data:
                    return value, option is not None
            except orjson.JSONEncodeError:
                break
        try:
            json.loads(data, object_pairs_hook=_refuse_duplicate_keys)
        except RecursionError:
            raise SchemaError("the JSON text is nested too deeply") from None
    return value, False


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise SchemaError(f"duplicate key {key!r} in a JSON object; each key may appear once")
            seen.add(key)
    return obj


def event_digest(canonical: bytes) -> bytes:
    """8 bytes that tell two copies of an event apart: a hash of its canonical bytes (what L1
    holds of it)."""
    return hashlib.blake2b(canonical, digest_size=8).digest()


def canonical_bytes(event: dict[str, Any]) -> bytes:
    """The exact bytes appended to L1: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(event, option=orjson.OPT_SORT_KEYS)


CUT_NOTE = "\n[... cut by usl ingest: the event exceeded its size limit]"
# A cut moves back to a line break (else a space) at most this far, so no token, and no secret
# the redactor must still recognise, is split in two.
_CUT_BOUNDARY_WINDOW = 8192
# Strings shorter than this are not worth cutting; an event whose bulk is many small strings
# cannot be fitted and is refused instead.
_MIN_CUT_CHARS = 256


def fit_event(event: dict[str, Any], limit: int) -> tuple[dict[str, Any], int]:
    """``event`` made to fit in ``limit`` canonical bytes, and the bytes cut (0: unchanged).

    Real transcripts hold pasted screenshots and multi-megabyte tool outputs, and a Kafka
    message has a size limit. Refusing such an event would drop its turn's evidence, so the
    longest strings are cut instead: the opaque ``payload``'s first (never indexed), then the
    ``fields``'. Each cut keeps the string's head up to a line break and ends with
    :data:`CUT_NOTE`; ``fields._truncated`` records the original and the limit. The same event
    and limit always give the same bytes. Raises SchemaError when cutting strings cannot fit
    it (the bulk is many small values)."""
    encoded = canonical_bytes(event)
    size = len(encoded)
    if size <= limit:
        return event, 0
    fitted: dict[str, Any] = orjson.loads(encoded)  # a deep copy
    fields = fitted.get("fields")
    if not isinstance(fields, dict):
        fields = fitted["fields"] = {}
    fields["_truncated"] = {"originalBytes": size, "limitBytes": limit}
    for part in ("payload", "fields"):
        for _ in range(64):
            excess = len(canonical_bytes(fitted)) - limit
            if excess <= 0:
                break
            longest = max(_strings(fitted, part), key=lambda leaf: len(leaf[2]), default=None)
            if longest is None or len(longest[2]) < _MIN_CUT_CHARS:
                break
            container, key, text = longest
            container[key] = _cut(text, excess)
    final = len(canonical_bytes(fitted))
    if final > limit:
        raise SchemaError(
            f"the event is {size} bytes, over the {limit}-byte limit (USL_MAX_EVENT_BYTES), and "
            "cutting its long strings cannot make it fit",
        )
    return fitted, size - final


def _strings(parent: Any, key: Any) -> Iterator[tuple[Any, Any, str]]:
    """(container, key, string) for every string below ``parent[key]``, in sorted-key order."""
    value = parent.get(key) if isinstance(parent, dict) else parent[key]
    if isinstance(value, str):
        yield parent, key, value
    elif isinstance(value, dict):
        for name in sorted(value):
            yield from _strings(value, name)
    elif isinstance(value, list):
        for index in range(len(value)):
            yield from _strings(value, index)


def _cut(text: str, excess: int) -> str:
    """``text``'s head, at least ``excess`` encoded bytes shorter once CUT_NOTE is added."""
    encoded = len(orjson.dumps(text))
    target = max(encoded - excess - len(orjson.dumps(CUT_NOTE)), 0)
    keep = min(len(text) * target // max(encoded, 1), len(text))  # bytes → characters, in proportion
    keep = max(keep - 16, 0)  # escapes are unevenly spread; the caller re-measures anyway
    floor = max(keep - _CUT_BOUNDARY_WINDOW, 0)
    boundary = text.rfind("\n", floor, keep)
    if boundary < 0:
        boundary = max(text.rfind(" ", floor, keep), text.rfind("\t", floor, keep))
    if boundary >= 0:
        keep = boundary
    return text[:keep] + CUT_NOTE
