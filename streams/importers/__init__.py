"""Importers: files people already have → validated ASP v1 events, plus a reject per bad record.

``iter_records`` is what the ingest CLI and the L1 producer call. It yields, in file order,
an :class:`Accepted` (an event that passed ``streams.asp.validate_event``) or a
:class:`Rejected` (where, why, and the first 4 KiB of the input) for every record; it raises
:class:`~streams.exceptions.ImportFormatError` only when a file cannot be read or its format
cannot be told. The same input always yields the same events, byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from streams.asp import DEFAULT_MAX_EVENT_BYTES, canonical_bytes, fit_event, validate_event_bytes
from streams.exceptions import ImportFormatError, NoJSONRecordsError, SchemaError
from streams.importers.asp import RefusedLists, iter_asp
from streams.importers.base import BOM, RAW_MAX_CHARS, Accepted, Content, Rejected, parse_json
from streams.importers.claude_code import (
    AUXILIARY_TYPE_RE,
    SUMMARIES_ONLY,
    SubagentLinks,
    iter_claude_code,
    summaries_only,
)
from streams.importers.codex import LINE_TYPES as CODEX_LINE_TYPES
from streams.importers.codex import iter_codex
from streams.importers.frames import LooseTails
from streams.importers.gemini import is_gemini_record, iter_gemini
from streams.importers.openai_chat import (
    api_conversation,
    conversation_messages,
    cut_conversations,
    is_message_line,
    iter_openai_chat,
)

__all__ = ["DOCUMENT_FORMATS", "FILE_SUFFIXES", "FORMATS", "NO_JSON_RECORDS", "SKIPPED_DIRECTORIES", "Accepted",
           "Rejected", "detect_format", "directory_files", "file_format", "fitted", "import_files", "iter_file",
           "iter_records", "no_json_records", "skipped_directory", "skipped_file"]

#: The file names a directory import and a follower take, each a suffix some importer reads:
#: ``.traj`` is SWE-agent's trajectory (one JSON document, ``{"history": [...]}``), which the
#: openai-chat importer reads; left out, a directory of runs imported nothing, though each file
#: imported on its own did.
FILE_SUFFIXES = (".jsonl", ".json", ".traj")
#: Directories of no transcript a directory import and a follower leave alone: Claude Code's
#: ``SESSION/tool-results`` holds the whole outputs its transcript shows a preview of (the
#: importer reads them from there), a result of content blocks as ``ID.json``, which failed the
#: import of its project directory ("cannot tell the format"). Only beside their transcript
#: (:func:`skipped_directory`).
SKIPPED_DIRECTORIES = frozenset({"tool-results"})
_SNIFF_LINES = 20
#: Why a file is refused whole (with --format too): none of its first lines is a JSON record.
#: Each of its lines was a dead letter, 1913 of them for one Claude Code CLI debug log
#: (slopus/happy-cli's duplicate-assistant-response-2.jsonl) in a directory of transcripts.
NO_JSON_RECORDS = "holds no JSON record: its first lines are text, not JSON (a log or notes, not a transcript)"
_SNIFF_LINE_BYTES = 8 * 1024 * 1024

Importer = Callable[..., Iterator[Accepted | Rejected]]
_IMPORTERS: dict[str, Importer] = {
    "asp": iter_asp,
    "claude-code": iter_claude_code,
    "openai-chat": iter_openai_chat,
    "codex": iter_codex,
    "gemini-cli": iter_gemini,
}
#: Every format an importer reads, as ``--format`` takes it.
FORMATS = tuple(_IMPORTERS)
#: Formats whose file is one JSON document (rewritten whole), not lines appended one by one:
#: follow mode reads such a file only when the whole of it parses.
DOCUMENT_FORMATS = frozenset({"openai-chat"})


def detect_format(path: Path) -> str:
    """The format of a file (or of every file in a directory), told from its first records."""
    path = Path(path)
    if path.is_dir():
        found = {_file_format(file) for file in directory_files(path) if not _is_empty(file)}
        if not found:
            raise ImportFormatError(f"{path}: no non-empty *.jsonl, *.json or *.traj files to import")
        if len(found) > 1:
            raise ImportFormatError(
                f"{path}: holds files of several formats ({', '.join(sorted(found))}); "
                "import them separately or pass --format"
            )
        return found.pop()
    if _is_empty(path):
        raise ImportFormatError(f"{path}: the file is empty; there is nothing to import")
    return _file_format(path)


def iter_records(
    path: Path,
    fmt: str | None = None,
    *,
    log_id: str = "default",
    acl: dict[str, Any] | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> Iterator[Accepted | Rejected]:
    """Every record of ``path`` (a file, or a directory of FILE_SUFFIXES files, recursively).

    ``fmt`` is one of FORMATS, or None to detect it per file. Records are labelled
    ``file:line`` (files inside a directory by their path relative to it). Every file's format
    is settled before the first record is yielded, so a bad file in a directory fails fast.
    An event over ``max_event_bytes`` has its longest strings cut (``streams.asp.fit_event``;
    ``Accepted.cut`` says by how much), or is rejected when that cannot make it fit.
    """
    path = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise ImportFormatError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if not path.exists():
        raise ImportFormatError(f"{path}: no such file or directory")
    if path.is_dir():
        plan = [
            (file, file.relative_to(path).as_posix()) for file in directory_files(path) if not _is_empty(file)
        ]
    else:
        plan = [] if _is_empty(path) else [(path, path.name)]
    formats = [file_format(file, fmt) for file, _label in plan]
    yield from import_files([(file, label, found) for (file, label), found in zip(plan, formats, strict=True)
                             if skipped_file(file, found) is None],
                            log_id=log_id, acl=acl, max_event_bytes=max_event_bytes)


def skipped_file(path: Path, fmt: str, data: bytes | None = None) -> str | None:
    """Why an import skips ``path`` (``data``: its bytes, when the caller holds them), a file of
    format ``fmt`` that holds nothing to import, or None: a Claude Code file of summaries of
    other sessions only (:func:`~streams.importers.claude_code.summaries_only`)."""
    if fmt == "claude-code" and summaries_only(path, data):
        return SUMMARIES_ONLY
    return None


def import_files(
    plan: list[tuple[Path, str, str]], *, log_id: str = "default", acl: dict[str, Any] | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
) -> Iterator[Accepted | Rejected]:
    """The records of each (file, label, format) of ``plan``, in order, as one import: a
    subagent's Claude Code file links to the call in its session's file earlier in the plan."""
    links: SubagentLinks = {}  # subagent files come after their session's file in path order
    for file, label, found in plan:
        yield from iter_file(file, found, label=label, log_id=log_id, acl=acl,
                             max_event_bytes=max_event_bytes, links=links)


def iter_file(
    path: Path, fmt: str, *, label: str, log_id: str = "default", acl: dict[str, Any] | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, links: SubagentLinks | None = None,
    data: Content | None = None,
) -> Iterator[Accepted | Rejected]:
    """The records of one file of format ``fmt`` (one of FORMATS), labelled ``label:line``.
    ``links`` carries Claude Code subagent links between the files of one import. ``data`` is
    the file's bytes when the caller holds them (read as ``path``: its name and suffix still
    count); the file itself is then not read."""
    extra: dict[str, Any] = {"links": {} if links is None else links} if fmt == "claude-code" else {}
    reading = AspReading(label) if fmt == "asp" else None
    if reading is not None:
        extra["refused"] = reading.refused
    for item in _IMPORTERS[fmt](Path(path), label=label, log_id=log_id, acl=acl, data=data, **extra):
        if isinstance(item, Accepted):
            event, item = item.event, fitted(item, max_event_bytes)
            if reading is not None:
                reading.took(event, item)
        yield item
    if reading is not None:
        # After the end of the input: a follower holds it back until the file is idle.
        yield from reading.closers()


class AspReading:
    """What an import of an ASP file keeps from line to line beyond the importer's own reading
    (:func:`iter_file`, and a follower's cursor reading on, :mod:`streams.importers.cursor`)."""

    def __init__(self, label: str) -> None:
        # A rejected line that set its session's access list takes the session's later lines with it.
        self.refused = RefusedLists()
        # ASP events are taken as they are, turns or not: a file that ends in a run of loose
        # events would leave that run an open chunk unit, so an empty turn after it closes it.
        self.tails = LooseTails()
        self.record = label  # the last accepted event's record (the closers are named after it)

    def took(self, event: dict[str, Any], item: Accepted | Rejected) -> None:
        """The importer accepted ``event``, which the size limit made ``item``."""
        if isinstance(item, Rejected):
            self.refused.refuse(event, item.record)  # too big to keep: as if it were invalid
        else:
            self.tails.feed(item.event)
            self.record = item.record

    def closers(self) -> list[Accepted]:
        """The empty turns that close the loose runs the input ends in (the runs are kept)."""
        closed = []
        for closer in self.tails.closers():
            validated, canonical = validate_event_bytes(closer, record=self.record)
            closed.append(Accepted(validated, self.record, canonical=canonical))
        return closed


def fitted(item: Accepted, limit: int) -> Accepted | Rejected:
    """``item`` as an import keeps it under ``limit`` bytes: as it is, cut to fit
    (``streams.asp.fit_event``), or rejected when it cannot be cut to fit."""
    if item.canonical is not None and len(item.canonical) <= limit:
        return item  # fits as it is (what fit_event would measure first)
    try:
        event, cut = fit_event(item.event, limit)
    except SchemaError as exc:
        return Rejected(record=item.record, reason=str(exc),
                        raw=canonical_bytes(item.event)[:RAW_MAX_CHARS].decode("utf-8", "replace"))
    return item if not cut else Accepted(event=event, record=item.record, cut=cut)


def skipped_directory(directory: Path) -> bool:
    """Whether a directory import and a follower leave ``directory`` alone: a ``tool-results``
    directory of Claude Code's, ``SESSION/tool-results`` beside ``SESSION.jsonl``. One of that
    name elsewhere (a user's own folder of transcripts) is read: skipped by its name alone, its
    transcripts were left out without a word."""
    session = directory.parent
    return directory.name in SKIPPED_DIRECTORIES and session.with_name(session.name + ".jsonl").is_file()


def directory_files(directory: Path) -> list[Path]:
    """The files a directory import reads, in the order it reads them."""
    files = [p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in FILE_SUFFIXES
             and not _under_skipped(directory, p.relative_to(directory).parts[:-1])]
    return sorted(files, key=lambda p: p.relative_to(directory).as_posix())


def _under_skipped(directory: Path, parts: tuple[str, ...]) -> bool:
    return any(part in SKIPPED_DIRECTORIES and skipped_directory(directory.joinpath(*parts[:depth + 1]))
               for depth, part in enumerate(parts))


def _is_empty(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 16):
                if chunk.strip():
                    return False
        return True
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read the file: {exc.strerror or exc}") from exc


def file_format(path: Path, fmt: str | None = None) -> str:
    """The format of one file: ``fmt`` when its first records agree (or say nothing), else the
    format they show. Raises ImportFormatError when they contradict ``fmt`` or show none."""
    if fmt is None:
        return _file_format(path)
    sniffed = _sniffed(path)
    if sniffed is not None and sniffed != fmt:
        raise ImportFormatError(
            f"{path}: declared as {fmt}, but its first records look like {sniffed}; "
            f"pass --format {sniffed} or leave --format out"
        )
    return fmt


def _file_format(path: Path) -> str:
    sniffed = _sniffed(path)
    if sniffed is None:
        raise ImportFormatError(
            f"{path}: cannot tell the format from its first records; expected ASP JSONL, a "
            "Claude Code transcript, a Codex CLI rollout, a Gemini CLI recording or OpenAI chat messages "
            "(pass --format "
            f"{'|'.join(FORMATS)})"
        )
    return sniffed


_DOCUMENT_OPENING = re.compile(rb'[\[{]\s*(?:["{\[\]}]|$)')
"""A first line that opens a pretty-printed JSON document: ``{``, ``[``, ``{ "messages": [``,
``[ {`` (and not a log line's ``[16:29:14.717] ...``)."""


def _first_lines(path: Path) -> list[bytes]:
    """The first lines of ``path`` (enough for :data:`_SNIFF_LINES` non-empty ones), stripped."""
    try:
        with path.open("rb") as handle:
            return [line.strip() for line in islice(handle, 4 * _SNIFF_LINES)]
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read the file: {exc.strerror or exc}") from exc


def _sniffed(path: Path) -> str | None:
    """The format the first records of ``path`` show, or None; raises NoJSONRecordsError for a
    file of text, which no format (declared or not) reads."""
    lines = _first_lines(path)
    sniffed = _sniff(path, lines)
    if sniffed is None and _text_only(lines):
        raise NoJSONRecordsError(f"{path}: {NO_JSON_RECORDS}")
    return sniffed


def no_json_records(path: Path) -> bool:
    """Whether none of the first lines of ``path`` (the first 20 non-empty ones) is a JSON
    record: a text log or notes, which no format reads (:func:`_text_only`)."""
    return _text_only(_first_lines(path))


def _text_only(lines: list[bytes]) -> bool:
    """Whether none of ``lines`` (a file's first, :func:`_first_lines`) is a JSON record. A line
    that is a JSON object or list, or begins as one (``{"``: a record cut short), or a first line
    that opens a pretty-printed document (:data:`_DOCUMENT_OPENING`), is one; so is a line too
    long to look at. A transcript whose first line is cut or garbage has good lines after it,
    and is read as before."""
    if lines and lines[0][:2] in (b"\xff\xfe", b"\xfe\xff"):
        return False  # UTF-16: its records are read and refused for their encoding, as before
    lines = [line for line in (line.removeprefix(BOM).strip() for line in lines) if line][:_SNIFF_LINES]
    if not lines or _DOCUMENT_OPENING.match(lines[0]):
        return False
    for line in lines:
        if len(line) > _SNIFF_LINE_BYTES or line[:2] in (b'{"', b"{}", b"[{", b"[]", b"[["):
            return False
        value, error = parse_json(line) if line[:1] in (b"{", b"[") else (None, "text")
        if error is None and isinstance(value, dict | list):
            return False
    return True


def _sniff(path: Path, lines: list[bytes]) -> str | None:
    """The format the first decisive record of ``path`` (its first ``lines``) shows, or None."""
    # A byte-order mark alone on the first line is no line: the document starts after it.
    lines = [line for line in lines if line.removeprefix(BOM).strip()][:_SNIFF_LINES]
    for line in lines:
        if len(line) > _SNIFF_LINE_BYTES:
            continue
        value, error = parse_json(line)
        if error is None:
            found = _sniff_value(value)
            if found is not None:
                return found
    if lines and lines[0].removeprefix(BOM)[:1] in (b"[", b"{"):
        # A pretty-printed JSON document: only the whole of it says what it is.
        data = path.read_bytes()
        document, error = parse_json(data)
        if error is None:
            return _sniff_value(document)
        # A conversation cut off (the file's one line, or a document, cut by `head -c` or a
        # partial download) is one still: the messages it holds whole are imported. Its messages
        # have a chat role (a Gemini CLI recording's have none).
        kept = cut_conversations(lines[0]) or cut_conversations(data)
        if kept is not None and _sniff_value(kept[0]) == "openai-chat" and all(
                isinstance(message, dict) and "role" in message for message in conversation_messages(kept[0]) or []):
            return "openai-chat"
    return None


def _sniff_value(value: Any) -> str | None:
    if isinstance(value, list):
        items = [item for item in value[:5] if isinstance(item, dict | list)]
        if any(isinstance(item, dict) and "role" in item for item in items):
            return "openai-chat"
        return _sniff_value(items[0]) if items and _sniff_value(items[0]) == "openai-chat" else None
    if not isinstance(value, dict):
        return None
    if is_gemini_record(value):
        return "gemini-cli"
    if "aspVersion" in value or {"eventId", "sessionId", "type"} <= value.keys():
        return "asp"
    line_type = value.get("type")
    if isinstance(line_type, str) and line_type in CODEX_LINE_TYPES and isinstance(value.get("payload"), dict):
        return "codex"
    if line_type in ("user", "assistant") and "message" in value and (
        "uuid" in value or "sessionId" in value or "session_id" in value  # session_id: stream-json
    ):
        return "claude-code"
    if (line_type == "summary" and "leafUuid" in value) or (
        line_type == "file-history-snapshot" and "snapshot" in value
    ):
        return "claude-code"
    if (isinstance(line_type, str) and AUXILIARY_TYPE_RE.fullmatch(line_type)
            and {"sessionId", "timestamp"} <= value.keys()):
        # system, queue-operation, progress (hook runs at session start), and the line types
        # newer clients add: a transcript may open with many of them.
        return "claude-code"
    if conversation_messages(value) is not None or api_conversation(value) is not None or is_message_line(value):
        return "openai-chat"
    return None
