"""What every importer shares: the record types it yields and the session bookkeeping.

An importer reads a file it did not write, so it promises two things: it never raises on bad
content (each bad record becomes a :class:`Rejected` naming what is wrong, and the loop goes on),
and it is deterministic (the same file always yields the same events, byte for byte, so the
duplicate eventIds of a re-import are recognized downstream). Nothing here reads the clock or
draws a random number: ids are hashes of source identities, times come from the source.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path
from typing import Any

import orjson

from streams.asp import (
    json_kind,
    loads_event,
    loads_event_canonical,
    parse_time,
    validate_event_bytes,
)
from streams.exceptions import ImportFormatError, SchemaError

__all__ = [
    "BOM",
    "FORMATS",
    "PAYLOAD_MAX_BYTES",
    "RAW_MAX_CHARS",
    "Accepted",
    "Content",
    "CutArray",
    "CutObject",
    "JsonLine",
    "Rejected",
    "SessionEmitter",
    "cut_note",
    "field_problem",
    "iter_json_lines",
    "json_lines",
    "line_parts",
    "line_values",
    "loads_with_lone_surrogates",
    "parse_json",
    "raw_text",
    "read_bytes",
    "read_cut",
    "read_lines",
    "small_payload",
    "split_line",
    "stable_id",
    "time_from_posix",
    "valid_time",
    "without_lone_surrogates",
]

FORMATS = ("asp", "claude-code", "openai-chat")

# Dead letters keep the first 4 KiB of the input, cut AFTER redaction (DeadLetters.publish):
# cutting first could split a secret and leak its prefix. The importer keeps more than that.
RAW_MAX_CHARS = 65536
PAYLOAD_MAX_BYTES = 16 * 1024


@dataclass(frozen=True)
class Accepted:
    """An event that passed ``streams.asp.validate_event``, and the input record it came from;
    ``cut`` is how many bytes ``streams.asp.fit_event`` cut to fit USL_MAX_EVENT_BYTES;
    ``canonical`` is the event's ``canonical_bytes`` when validation made them (None: not known),
    carried to the L1 producer so nothing serialises the event twice."""

    event: dict[str, Any]
    record: str
    cut: int = 0
    canonical: bytes | None = None


@dataclass(frozen=True)
class Rejected:
    """An input record that could not become an event: where it is, why, and its first 4 KiB;
    ``log_id`` is the log the record was for when it names one (None: the import's --log)."""

    record: str
    reason: str
    raw: str
    log_id: str | None = None


Result = Accepted | Rejected


def raw_text(raw: bytes | str | Any) -> str:
    """The first RAW_MAX_CHARS characters of an offending input, for a dead letter."""
    if isinstance(raw, bytes):
        text = raw[: RAW_MAX_CHARS * 4].decode("utf-8", "replace")
    elif isinstance(raw, str):
        text = raw
    else:
        # Source key order, so the dead letter reads like the input did.
        try:
            text = orjson.dumps(raw, default=str).decode()
        except orjson.JSONEncodeError:
            # Parsed input may nest deeper (1024 levels) than orjson writes (254).
            text = f"<{json_kind(raw)} nested too deeply to show>"
    return text[:RAW_MAX_CHARS]


def field_problem(field: str, value: Any, wanted: str, of: str = "") -> str:
    """Why ``value`` of ``field`` is refused: ``missing field`` when the line leaves it out (or
    null), else what it is instead of ``wanted`` (a text block's ``"text": 123`` said missing)."""
    if value is None:
        return f"missing field '{field}'{of}"
    if value == "":
        return f"field '{field}'{of} is empty"
    return f"field '{field}'{of} must be {wanted}, not {json_kind(value)}"


def stable_id(prefix: str, *parts: object) -> str:
    """A deterministic id: ``prefix`` + 32 hex digits of sha256 over the parts."""
    digest = hashlib.sha256("\x1f".join(str(part) for part in parts).encode("utf-8"))
    return f"{prefix}_{digest.hexdigest()[:32]}"


def small_payload(record: Any) -> Any | None:
    """A copy of ``record`` when its JSON is at most PAYLOAD_MAX_BYTES, else None.

    A copy, so the payload never shares objects with the event's fields (which a later stage
    may rewrite, e.g. redaction).
    """
    try:
        data = orjson.dumps(record)
    except TypeError:
        return None
    return orjson.loads(data) if len(data) <= PAYLOAD_MAX_BYTES else None


def time_from_posix(seconds: float) -> str:
    """RFC 3339 UTC time with milliseconds, for sources that only have POSIX seconds."""
    moment = datetime.fromtimestamp(round(seconds, 3), UTC)
    # isoformat, not strftime: glibc's %Y writes years before 1000 without their zeros.
    return moment.replace(tzinfo=None, microsecond=0).isoformat() + f".{moment.microsecond // 1000:03d}Z"


def valid_time(value: Any) -> str | None:
    """``value`` if it is an RFC 3339 time with an offset, else None."""
    if not isinstance(value, str):
        return None
    try:
        parse_time(value)
    except ValueError:
        return None
    return value


#: A file's bytes as a caller holds them: one bytes object, or its parts in order (every part but
#: the last ending in a newline), read as if they were joined.
Content = bytes | tuple[bytes, ...]

#: The UTF-8 byte order mark some editors write at the start of a file.
BOM = b"\xef\xbb\xbf"
_READ_BUFFER_BYTES = 1 << 20


def parse_json(line: bytes | str) -> tuple[Any, str | None]:
    """(value, None) or (None, reason) for one JSON text; never raises. An object with a key
    given twice is refused (:func:`streams.asp.loads_event`).

    A leading byte order mark is skipped (RFC 8259 lets a parser ignore it; editors on Windows
    write one), so the first record of such a file is not lost.
    """
    value, error, _canonical = _parse_json(line)
    return value, error


def _parse_json(line: bytes | str) -> tuple[Any, str | None, bool]:
    """:func:`parse_json`, and whether the text (without its byte order mark) is the value's
    canonical bytes."""
    if isinstance(line, bytes):
        line = line.removeprefix(BOM)
    else:
        line = line.removeprefix("\ufeff")
    try:
        value, canonical = loads_event_canonical(line)
        return value, None, canonical
    except SchemaError as exc:  # a key given twice: which copy counts is up to the parser
        return None, exc.reason, False
    except orjson.JSONDecodeError as exc:
        if "surrogate" in exc.msg:
            try:
                return loads_with_lone_surrogates(line), None, False
            except SchemaError as duplicate:
                return None, duplicate.reason, False
            except orjson.JSONDecodeError as other:
                if "UTF-8" not in other.msg:  # cut off, say: the surrogate is not what is wrong
                    return None, f"invalid JSON (truncated or not JSON): {other}", False
                exc = other  # not UTF-8 besides: said below, as for any line
        if isinstance(line, bytes):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as bad:
                if bad.end == len(line) and bad.reason == "unexpected end of data":
                    # The line stops inside a character: a record cut off (a writer killed, a
                    # file copied while written), not a file in another encoding.
                    return None, (f"invalid JSON (truncated or not JSON): cut off inside a UTF-8 "
                                  f"character at offset {bad.start}"), False
                return None, (f"not valid UTF-8: byte 0x{line[bad.start]:02x} at offset {bad.start} "
                              "(the file must be UTF-8)"), False
        return None, f"invalid JSON (truncated or not JSON): {exc}", False


#: A UTF-16 surrogate that is no half of a pair, as JSON escapes it (``\ud83d``) where the string
#: held one: what a JavaScript writer (Claude Code, any Node agent) leaves of an emoji, or any
#: character past U+FFFF, when it cuts a string between the two halves (a tool output cut to its
#: length limit).
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: In JSON text: a surrogate pair's escapes (kept), a lone surrogate's escape (group 1), any other
#: escape (kept whole, so the ``u`` of an escaped backslash's ``\\ud800`` is no escape), and a
#: surrogate's three UTF-8 bytes (group 2).
_SURROGATE_ESCAPES = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
                                rb"|(\\u[dD][89a-fA-F][0-9a-fA-F]{2})|\\.|(\xed[\xa0-\xbf][\x80-\xbf])", re.DOTALL)


def _mend(match: re.Match[bytes]) -> bytes:
    if match.group(1) is not None:
        return rb"\ufffd"
    return "\ufffd".encode() if match.group(2) is not None else match.group(0)


def loads_with_lone_surrogates(text: bytes | str, *, refuse_repeated_keys: bool = True) -> Any:
    """The JSON ``text`` that orjson refused for a lone surrogate escape, each such surrogate read
    as U+FFFD (the replacement character, as a UTF-8 decoder reads a broken sequence). Such a line
    was rejected whole (``no low surrogate in string``): a user's prompt or a tool's whole output
    dead-lettered for half an emoji. The surrogates are replaced in the text (each by as many
    characters, so an error's position stands) and orjson reads the rest as it reads any line: a
    NaN or a 1e999 is no JSON here either, and a number past 64 bits is the same float.
    orjson.JSONDecodeError when ``text`` is no JSON for other reasons, SchemaError for a key given
    twice unless ``refuse_repeated_keys`` is false (then the last copy stands, as orjson reads it)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    mended = with_lone_surrogates_mended(data)
    return loads_event(mended) if refuse_repeated_keys else orjson.loads(mended)


def with_lone_surrogates_mended(data: bytes) -> bytes:
    """The JSON text ``data`` with each lone surrogate escape (and each encoded lone surrogate)
    written as U+FFFD, as :func:`loads_with_lone_surrogates` reads it."""
    return _SURROGATE_ESCAPES.sub(_mend, data)


def without_lone_surrogates(value: str) -> str:
    """``value`` with each lone surrogate it holds as U+FFFD."""
    return _LONE_SURROGATE.sub("\ufffd", value)


def read_lines(path: Path, data: Content | None = None) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its newline) for every non-blank line of ``path``, or
    of ``data`` read as that file's bytes (a caller that already holds them: ``usl ingest``)."""
    if data is not None:
        # Each BytesIO shares its part's buffer: the file is not copied, nor joined to its tail.
        parts = (data,) if isinstance(data, bytes) else data
        yield from non_blank(chain.from_iterable(io.BytesIO(part) for part in parts))
        return
    try:
        # 1 MiB reads, not 8 KiB: each read lets go of the GIL, and getting it back waits for any
        # other busy thread (ingest connects to Kafka on one meanwhile): 29 MB read 30x slower
        # beside a busy thread with the default buffer (issue #16, docs/benchmarks.md).
        handle = path.open("rb", buffering=_READ_BUFFER_BYTES)
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read the file: {exc.strerror or exc}") from exc
    with handle:
        try:
            yield from non_blank(handle)
        except OSError as exc:
            raise ImportFormatError(f"{path}: read failed: {exc.strerror or exc}") from exc


def fed_lines(data: bytes, fed: int) -> list[tuple[int, bytes]]:
    """The non-blank lines of ``data``, the whole lines a follow cursor is fed after the ``fed``
    lines before them (ValueError unless ``data`` ends with a newline), numbered on from those."""
    if data and not data.endswith(b"\n"):
        raise ValueError("a cursor reads whole lines: data must end with a newline")
    return list(non_blank(io.BytesIO(data), start=fed + 1))


def non_blank(lines: Iterable[bytes], start: int = 1) -> Iterator[tuple[int, bytes]]:
    """(line number counted from ``start``, stripped line) of every line that is not blank.

    A byte order mark (a file's first line, or each file's of several joined) is stripped too:
    the line's bytes name the ids of a line without a uuid in a file named after no session
    (``claude_code._Transcript._line_position``), so one left in gave that line another eventId
    than the same file without it, and a BOM alone on a line was no blank line."""
    for number, line in enumerate(lines, start=start):
        stripped = line.strip().removeprefix(BOM).strip()
        if stripped:
            yield number, stripped


def read_bytes(path: Path, data: Content | None = None) -> bytes:
    """The bytes of ``path`` (``data`` when the caller already holds them); ImportFormatError
    when the file cannot be read."""
    if data is not None:
        return data if isinstance(data, bytes) else b"".join(data)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read the file: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class JsonLine:
    """One record of a JSONL file that is a JSON object: its 1-based line number, its record
    name (``label:number``), the object and its bytes (for dead letters and payloads);
    ``canonical`` says the bytes (without a byte order mark) are the object's canonical bytes.
    ``at`` is where the record begins in its line: not 0 only for a later record of a line that
    holds several (:func:`line_parts`), named ``label:number@at``."""

    number: int
    record: str
    value: dict[str, Any]
    raw: bytes
    canonical: bool = False
    at: int = 0

    @property
    def position(self) -> str:
        """The record's place in the file as its ids name it: the line number, ``NUMBER@AT`` for
        a later record of a line (the same ids whether or not more records follow on the line)."""
        return str(self.number) if self.at == 0 else f"{self.number}@{self.at}"


def iter_json_lines(path: Path, *, label: str, what: str, data: Content | None = None) -> Iterator[JsonLine | Rejected]:
    """Every record of every non-blank line of ``path`` in order (:func:`json_lines`): a
    :class:`JsonLine` when it is a JSON object, else a :class:`Rejected` (bad JSON, or "``what``
    must be a JSON object, not list"), so each importer dead-letters a bad line the same way.
    Unreadable files raise ImportFormatError. ``data``: the file's bytes, when the caller holds
    them (:func:`read_lines`)."""
    for number, line in read_lines(path, data):
        yield from json_lines(number, line, label=label, what=what)


def json_lines(number: int, line: bytes, *, label: str, what: str) -> list[JsonLine | Rejected]:
    """The records of line ``number`` of a JSONL file (stripped, not blank) as
    :func:`iter_json_lines` reads them: the line, or the parts :func:`split_line` finds in it."""
    return [_json_record(number, at, part, value, error, canonical, label=label, what=what)
            for at, part, value, error, canonical in line_values(line)]


def line_values(line: bytes) -> list[tuple[int, bytes, Any, str | None, bool]]:
    """``(at, bytes, value, error, canonical)`` of each record of a JSONL line (stripped, not
    blank), as :func:`_parse_json` reads it: the line at 0, or, when it is no JSON text, each part
    :func:`split_line` finds in it, a cut part's error saying where the record that cut it begins."""
    value, error, canonical = _parse_json(line)
    parts = split_line(line) if error is not None else None
    if parts is None:
        return [(0, line, value, error, canonical)]
    values: list[tuple[int, bytes, Any, str | None, bool]] = []
    for at, part, cut_by in parts:
        value, error, canonical = _parse_json(part)
        if error is not None and cut_by is not None:
            error = cut_note(error, cut_by)
        values.append((at, part, value, error, canonical))
    return values


def split_line(line: bytes) -> list[tuple[int, bytes, int | None]] | None:
    """``(at, bytes, cut_by)`` of each record of a JSONL line (stripped, not blank) that is no JSON
    text but holds whole JSON values beside cut or stray bytes (:func:`line_parts`), else None (the
    line is one record, bad as it may be). ``at`` is the byte a part begins at in the line,
    ``cut_by`` where the record after a cut part begins (None for a whole value, or a part nothing
    follows). A part at byte ``at`` > 0 is named ``label:number@at``: the first keeps the line's
    name and ids, so a line that grows a second record (a writer that lost a newline) names its
    first as before."""
    parts = line_parts(line)
    if parts is None:
        return None
    return [(start, line[start:end], None if whole or index + 1 == len(parts) else parts[index + 1][0])
            for index, (start, end, whole) in enumerate(parts)]


def cut_note(reason: str, cut_by: int) -> str:
    """``reason`` of a part of a line cut short by the record at byte ``cut_by`` of the line."""
    return f"{reason}; cut off by the record that begins at byte {cut_by} of the same line, read on its own"


def _json_record(number: int, at: int, raw: bytes, value: Any, error: str | None, canonical: bool, *,
                 label: str, what: str) -> JsonLine | Rejected:
    """The record of line ``number`` from byte ``at`` (:func:`line_values`): a JSON object, or
    why not."""
    record = f"{label}:{number}" if at == 0 else f"{label}:{number}@{at}"
    if error is not None:
        return Rejected(record, error, raw_text(raw))
    if not isinstance(value, dict):
        return Rejected(record, f"{what} must be a JSON object, not {json_kind(value)}", raw_text(raw))
    return JsonLine(number, record, value, raw, canonical, at)


_DECODER = json.JSONDecoder()
_RESUME_TRIES = 16
_JSON_SPACE = " \t\r\n"


def line_parts(line: bytes) -> list[tuple[int, int, bool]] | None:
    """How a line that is no JSON text splits into JSON values and what is left between them:
    ``(start, end, whole)`` byte spans covering it in order (``whole``: a complete JSON value),
    or None when it holds no whole value beside something else (a line cut short, plain junk).

    A writer that dies mid-line and starts again leaves its cut record and the next whole one on
    one line (``{"type":"user","mess{"type":"assistant",...}``); one that forgets a newline
    leaves two whole records (``{...}{...}``). Whole values are read from the start of the line;
    where one is cut short, the next record begins at a ``{`` or ``[`` from which the rest of the
    line reads as whole values and where the cut record could not go on with a value of its own
    (inside one of its strings, after one of its values or keys): the latest such up to the place
    the reading failed, else the earliest after it. Where the cut record could go on with a value
    (after its ``:``, ``,`` in a list or ``[``), what follows is as likely the rest of a record
    cut at the end of a line (``{"a":{"b":1}`` is one record cut short, not ``{"b":1}`` after a
    cut) and is not split off: the whole line stays one rejected record, as before. Deterministic:
    the bytes alone decide."""
    # A writer killed inside a multi-byte character leaves a line that is no UTF-8: its bytes
    # stand in as surrogates (the cut record's last string), so the whole record after it is
    # still found, and the cut part read on its own says it was cut off there.
    text = line.removeprefix(BOM).decode("utf-8", "surrogateescape")
    shift = len(line) - len(line.removeprefix(BOM))
    spans: list[tuple[int, int, bool]] = []
    at = _skip_space(text, 0)
    while at < len(text):
        end, failed = _value_end(text, at)
        if end is not None:
            spans.append((at, end, True))
            at = _skip_space(text, end)
            continue
        resumed = _resume(text, at, failed)
        if resumed is None:
            spans.append((at, len(text), False))
            break
        start, rest = resumed
        spans += [(at, start, False), *rest]
        break
    if len(spans) < 2 or not any(whole for _start, _end, whole in spans):
        return None

    def byte(index: int) -> int:
        return shift + len(text[:index].encode("utf-8", "surrogateescape"))

    return [(byte(start) if start else 0, byte(end), whole) for start, end, whole in spans]


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _JSON_SPACE:
        at += 1
    return at


def _value_end(text: str, at: int) -> tuple[int | None, int]:
    """(end of the JSON value that starts at ``at``, 0), or (None, where reading it failed)."""
    try:
        return _DECODER.raw_decode(text, at)[1], 0
    except json.JSONDecodeError as exc:
        return None, exc.pos
    except RecursionError:
        return None, at


def _whole_values(text: str, at: int) -> list[tuple[int, int, bool]] | None:
    """The spans of the JSON values that fill ``text`` from ``at`` to its end, or None."""
    spans: list[tuple[int, int, bool]] = []
    while (at := _skip_space(text, at)) < len(text):
        end, _failed = _value_end(text, at)
        if end is None:
            return None
        spans.append((at, end, True))
        at = end
    return spans


def _record_starts(text: str, cut: int) -> list[int]:
    """The places after ``cut`` where a ``{`` or ``[`` cannot be a value of the value that starts
    at ``cut`` read as JSON so far: inside its strings, or where it expects no value."""
    starts: list[int] = []
    nesting: list[str] = []
    in_string = escaped = False
    expects_value = True
    for index in range(cut, len(text)):
        char = text[index]
        if in_string:
            if char in "{[" and index > cut:
                starts.append(index)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = expects_value = False
            continue
        if char in "{[" and index > cut and not expects_value:
            starts.append(index)
        if char == '"':
            in_string = True
        elif char in "{[":
            nesting.append(char)
            expects_value = char == "["
        elif char in "}]":
            if nesting:
                nesting.pop()
            expects_value = False
        elif char == ":":
            expects_value = True
        elif char == ",":
            expects_value = bool(nesting) and nesting[-1] == "["
        elif char not in _JSON_SPACE:
            expects_value = False
    return starts


def _resume(text: str, cut: int, failed: int) -> tuple[int, list[tuple[int, int, bool]]] | None:
    """Where the record after the cut value starting at ``cut`` begins, and the whole values from
    there to the end of the line (see :func:`line_parts`), or None."""
    opening = _record_starts(text, cut)
    before = [index for index in opening if index <= failed]
    # Each try reads to the end of the line at worst: a cut line of a tool output full of
    # brackets (a dumped array) would cost a read per bracket. The record after a cut begins at
    # the latest opening before the failure, or the first after it, so a few tries find it.
    for start in [*reversed(before), *opening[len(before):]][:_RESUME_TRIES]:
        rest = _whole_values(text, start)
        if rest:
            return start, rest
    return None


class CutObject(dict[str, Any]):
    """A JSON object cut off (:func:`read_cut`): the members read whole before the cut, and the
    last one's value cut too when it is a :class:`CutObject` or :class:`CutArray`."""


class CutArray(list[Any]):
    """A JSON array cut off (:func:`read_cut`): the items read whole before the cut, and the last
    one cut too when it is a :class:`CutObject` or :class:`CutArray`."""


class _NotCut(Exception):
    """The text is wrong before its end: no cut record."""


# Nesting levels :func:`read_cut` keeps of a cut value (an array of conversations, a conversation,
# its messages); a cut member deeper than that is left out. Each level reads its cut member once
# more, so the reading stays linear in the line.
_CUT_DEPTH = 3
# What a JSON text may end with when it was cut inside a literal, a number or a \u escape.
_CUT_TOKEN = re.compile(r"(?:t(?:r(?:u)?)?|f(?:a(?:l(?:s)?)?)?|n(?:u(?:l)?)?|-|u[0-9a-fA-F]{0,3})?")


def read_cut(line: bytes, into: Collection[str] = ()) -> CutObject | CutArray | None:
    """What a JSON object or array cut off at the end of ``line`` holds whole before the cut (a
    partial download, a writer killed mid-line, ``head -c``), or None when ``line`` is wrong
    before its end, or not cut at all.

    Every member is read as :func:`parse_json` reads it in the whole text (a lone surrogate as
    U+FFFD; a key given twice refuses the text), so a record cut off yields the values its
    completed line yields. A value cut off is left out: a number at the cut (``12`` may be the
    head of ``1234``), or a string; an object or array is kept as a :class:`CutObject` or
    :class:`CutArray` of what it holds whole, three levels deep: an array's cut item, and the cut
    value of an object's member named in ``into`` (the others are left out: a cut vector of a
    million numbers is not read number by number). Linear in the line: each value is read once,
    and once more per level it is nested in the cut."""
    data = line.removeprefix(BOM)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as bad:
        if bad.end != len(data) or bad.reason != "unexpected end of data":
            return None
        text = data[:bad.start].decode("utf-8")  # cut inside the last character: it is left out
    at = _skip_space(text, 0)
    if at == len(text) or text[at] not in "[{":
        return None
    try:
        return _cut_container(text, at, 0, into)
    except (_NotCut, RecursionError):
        return None


def _cut_container(text: str, at: int, depth: int, into: Collection[str]) -> CutObject | CutArray:
    """The container that starts at ``at``, cut off at the end of ``text``; _NotCut when
    something before the end is wrong, or the container is whole."""
    is_object = text[at] == "{"
    found: CutObject | CutArray = CutObject() if is_object else CutArray()
    closer = "}" if is_object else "]"
    at += 1
    while True:
        at = _skip_space(text, at)
        if at == len(text):
            return found
        if text[at] == closer:
            # Whole (raw_decode read it whole, or the line is wrong elsewhere), or a trailing comma.
            raise _NotCut
        key = None
        if is_object:
            if text[at] != '"':
                raise _NotCut
            try:
                key, at = _DECODER.raw_decode(text, at)
            except json.JSONDecodeError as exc:
                _cut_or_raise(text, exc)
                return found
            key = without_lone_surrogates(key)
            if key in found:
                raise _NotCut  # a key given twice: the whole line is refused for it
            at = _skip_space(text, at)
            if at == len(text):
                return found
            if text[at] != ":":
                raise _NotCut
            at = _skip_space(text, at + 1)
            if at == len(text):
                return found
        try:
            end = _DECODER.raw_decode(text, at)[1]
        except json.JSONDecodeError as exc:
            _cut_or_raise(text, exc)
            if text[at] in "[{" and depth + 1 < _CUT_DEPTH and (key is None or key in into):
                _add(found, key, _cut_container(text, at, depth + 1, into))
            return found
        value, error = parse_json(text[at:end])
        if error is not None:
            raise _NotCut
        after = _skip_space(text, end)
        if after == len(text) and isinstance(value, int | float) and not isinstance(value, bool):
            return found  # a number at the cut may be the head of a longer one
        _add(found, key, value)
        if after == len(text):
            return found
        if text[after] != ",":
            raise _NotCut  # closed (so not cut) or no JSON
        at = after + 1


def _add(found: CutObject | CutArray, key: str | None, value: Any) -> None:
    if isinstance(found, CutObject):
        assert key is not None
        found[key] = value
    else:
        found.append(value)


def _cut_or_raise(text: str, exc: json.JSONDecodeError) -> None:
    """Nothing when reading failed because ``text`` ends (cut inside a string, a literal, a
    number or an escape, or where a token was due); _NotCut when it failed before."""
    if exc.msg.startswith("Unterminated string"):
        return
    if _CUT_TOKEN.fullmatch(text[exc.pos:].rstrip(_JSON_SPACE)) is None:
        raise _NotCut


def _schema_reason(exc: SchemaError) -> str:
    return f"{exc.reason} (field {exc.field})" if exc.field else exc.reason


class SessionEmitter:
    """Builds the ASP events of one session and keeps its open turn and episode.

    Importers say what happened (a message, a human turn began, a subagent episode began);
    this class assigns ids, fills the session/turn/episode identity of each event, emits
    ``turn.ended`` / ``episode.ended`` when the next one starts or the input ends, and
    validates every event, turning a SchemaError into a Rejected.
    """

    def __init__(
        self,
        *,
        source: str,
        id_prefix: str,
        session_id: str,
        log_id: str,
        acl: dict[str, Any] | None,
    ) -> None:
        self.source = source
        self.id_prefix = id_prefix
        self.session_id = session_id
        self.log_id = log_id
        self.acl = acl
        self.started = False
        self.turn_id: str | None = None
        self.episode_id: str | None = None
        self.last_time: str | None = None
        self._turn_last_time: str | None = None
        self._episode_last_time: str | None = None
        # The last event of the open turn / episode: its end's id names it (see end_turn).
        self._turn_last_event = ""
        self._episode_last_event = ""

    def event_id(self, *parts: object) -> str:
        """A deterministic eventId unique to this log, session and source position."""
        return stable_id(self.id_prefix, self.log_id, self.session_id, *parts)

    def emit(
        self,
        event_type: str,
        *,
        event_id: str,
        time: str,
        record: str,
        raw: Any,
        role: str | None = None,
        fields: dict[str, Any] | None = None,
        parent_event_id: str | None = None,
        visibility: str | None = None,
        payload: Any | None = None,
        turn_id: str | None = None,
        episode_id: str | None = None,
    ) -> Result:
        """Validate one event of this session (in its open turn and episode)."""
        event: dict[str, Any] = {
            "eventId": event_id,
            "logId": self.log_id,
            "sessionId": self.session_id,
            "type": event_type,
            "time": time,
        }
        turn = turn_id or self.turn_id
        episode = episode_id or self.episode_id
        optional = {
            "turnId": turn,
            "episodeId": episode,
            "parentEventId": parent_event_id,
            "role": role,
            "visibility": visibility,
        }
        event.update({key: value for key, value in optional.items() if value is not None})
        if self.acl is not None:
            event["acl"] = copy.deepcopy(self.acl)
        event["fields"] = fields or {}
        if payload is not None:
            event["payload"] = payload
        try:
            validated, canonical = validate_event_bytes(event, record=record)
        except SchemaError as exc:
            return Rejected(record, _schema_reason(exc), raw_text(raw))
        self.last_time = time
        if turn is not None:
            self._turn_last_time = time
            self._turn_last_event = event_id
        if episode is not None:
            self._episode_last_time = time
            self._episode_last_event = event_id
        return Accepted(validated, record, canonical=canonical)

    def start_session(
        self, *, time: str, record: str, raw: Any, fields: dict[str, Any]
    ) -> list[Result]:
        """``session.started`` once per session; later calls do nothing."""
        if self.started:
            return []
        self.started = True
        return [self.emit(
            "session.started", event_id=self.event_id("session.started"), time=time,
            record=record, raw=raw, fields={**fields, "source": self.source},
        )]

    def start_turn(self, turn_key: object, *, time: str, record: str, raw: Any) -> list[Result]:
        """End the open turn (and episode), then open the human turn named by ``turn_key``."""
        results = self.end_turn(record=record, raw=raw)
        self.turn_id = stable_id("turn", self.log_id, self.session_id, turn_key)
        self._turn_last_time = time
        results.append(self.emit(
            "turn.started", event_id=stable_id(self.id_prefix, self.turn_id, "started"),
            time=time, record=record, raw=raw, role="user",
        ))
        return results

    def end_turn(self, *, record: str, raw: Any) -> list[Result]:
        """``turn.ended`` for the open turn, timed at its last event; nothing if none is open."""
        results = self.end_episode(record=record, raw=raw)
        if self.turn_id is None:
            return results
        turn_id, time = self.turn_id, self._turn_last_time or self.last_time
        self.turn_id = None
        # The end's id names the turn's last event: a followed file's turn that goes on after
        # its end went out (the file was idle) gets an end of its own after the new events,
        # which closes them as one unit; the same end id would be a duplicate L1 drops, and the
        # new events would stay an open unit until the session's next turn.
        results.append(self.emit(
            "turn.ended", event_id=stable_id(self.id_prefix, turn_id, "ended", self._turn_last_event),
            time=time or "1970-01-01T00:00:00.000Z", record=record, raw=raw, turn_id=turn_id,
        ))
        return results

    def start_episode(
        self,
        episode_key: object,
        *,
        time: str,
        record: str,
        raw: Any,
        fields: dict[str, Any] | None = None,
        parent_event_id: str | None = None,
    ) -> list[Result]:
        """End the open episode, then open the subagent episode named by ``episode_key``."""
        results = self.end_episode(record=record, raw=raw)
        self.episode_id = stable_id("episode", self.log_id, self.session_id, episode_key)
        self._episode_last_time = time
        results.append(self.emit(
            "episode.started", event_id=stable_id(self.id_prefix, self.episode_id, "started"),
            time=time, record=record, raw=raw, fields=fields,
            parent_event_id=parent_event_id,
        ))
        return results

    def end_episode(self, *, record: str, raw: Any) -> list[Result]:
        """``episode.ended`` for the open episode, timed at its last event."""
        if self.episode_id is None:
            return []
        episode_id, time = self.episode_id, self._episode_last_time or self.last_time
        self.episode_id = None
        return [self.emit(
            "episode.ended", event_id=stable_id(self.id_prefix, episode_id, "ended", self._episode_last_event),
            time=time or "1970-01-01T00:00:00.000Z", record=record, raw=raw,
            episode_id=episode_id,
        )]
