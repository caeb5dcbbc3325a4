"""Follow mode: tail growing transcripts into L1, each event exactly once.

A :class:`Follower` polls its paths (files, or directories searched for ``*.jsonl`` / ``*.json`` /
``*.traj`` recursively, so new files are found; a directory is listed again when its mtime moves, see
:meth:`Follower._tree`). A file that changed is imported again from its start
(importers are deterministic: the same bytes yield the same eventIds) up to its last newline,
so a line still being written waits for its newline (a last line that is a whole JSON object is
taken without one once the file is idle: some writers end a file without it); events whose eventId this file already
appended are left out, and the rest are appended. A JSON document (a ``*.json`` file, or a format
of ``DOCUMENT_FORMATS``) is read only when the whole of it parses.

A Claude Code transcript, a Codex rollout, an ASP file or an OpenAI-chat JSONL (the files people follow as they grow,
to tens of MB) is not imported again: its import is kept open between polls (:mod:`streams.importers.cursor`) and reads on from
the file's recorded offset, only the new lines, numbered on, so it says of them what an import
of the whole file says; the end of its input is said on a copy. The prefix is still hashed to
see that the file begins with what was read. Without a cursor (a restart, one let go) a new one
reads the recorded prefix, which says what the file appended, and reads on; whatever else
happens (a rewritten, cut or renamed file, a new line that changes what the import said of
earlier ones) takes the whole import, which leaves a new cursor behind
(:meth:`Follower._resume`). The records and the write-ahead log are the same either way.

The end of a growing file is not the end of its session: the ``turn.ended`` / ``episode.ended``
an importer emits at the end of its input are held back until the file has been idle for
``USL_FOLLOW_IDLE_SECONDS`` (or it is deleted, or the follower stops); if the turn goes on after
its end went out, its later events get an end of their own (an end's eventId names the turn's
last event), which closes them as one chunk unit.

What makes it exactly once (:class:`PositionStore`, one JSON file under ``$USL_HOME/follow``):

1. Per file it records what was appended: the byte length and SHA-256 of the prefix imported
   and the eventIds held back from it. A restarted follower imports that prefix again to know
   which eventIds are in L1 already, so it resumes where it was.
2. Every batch is written ahead (its events and the new records, with each log's committed L1
   seq) before anything is sent, and the records are switched only after L1 acknowledged the
   batch (idempotent producer, ``acks=all``). Whoever next finds a batch written ahead (the
   writer died mid-batch) reads L1 from the noted seq and appends only what is not there yet.
3. A file no record vouches for (a new store, a file truncated or rewritten, a one-shot import)
   is checked against L1 itself: the eventIds L1 holds for the file's sessions are left out.
   Only a file created while this follower runs skips the check (it is new; a file renamed
   into place keeps its record through its inode or its first line).
4. A one-shot import of such files goes out in several batches, each written ahead and
   acknowledged as in 2., the next one imported while the last one is sent; until a file's last
   batch is acknowledged its record is a marker that vouches for nothing, so after a crash the
   next import of the file checks it against L1 (3.) and appends the rest.

Batches hold a file lock, so a follower and a one-shot ``usl ingest`` can share one store.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

from streams.asp import canonical_bytes, event_digest
from streams.exceptions import ImportFormatError, NoJSONRecordsError
from streams.fsio import atomic_write
from streams.importers import (
    DOCUMENT_FORMATS,
    FILE_SUFFIXES,
    NO_JSON_RECORDS,
    SKIPPED_DIRECTORIES,
    Accepted,
    Rejected,
    file_format,
    iter_file,
    skipped_directory,
    skipped_file,
)
from streams.importers.base import line_parts, parse_json, stable_id
from streams.importers.claude_code import other_prompt_spelling
from streams.importers.cursor import FileCursor, open_cursor, settled
from streams.importers.frames import LooseTails

if TYPE_CHECKING:
    from streams.l1 import DeadLetters

__all__ = ["Appender", "ConnectingAppender", "FileRecord", "Follower", "KafkaAppender", "PollReport",
           "PositionStore"]

_T = TypeVar("_T")
_END_TYPES = frozenset({"turn.ended", "episode.ended"})
# Rejected by every importer as the line it reads (an unknown record type), never an event.
_NEWLINE = b"\n"
_SENTINEL = b'{"type": "usl.follow.end-of-input"}\n'
# How long a file's import is kept open after its last change (see Follower._resume): long past
# a pause of its session's user, short of keeping every transcript a long-lived follower saw grow.
_CURSOR_KEPT_SECONDS = 600.0
# A followed directory is listed again when its mtime is this recent (see Follower._tree), and at
# least this often whatever its mtime says (a filesystem whose directory mtimes lag or lie).
_RECENT_SECONDS = 3.0
_RELIST_SECONDS = 30.0
# In what a file appended (``_Tracked.appended``): the digest of an event L1 holds with other
# content, which no event's digest equals (an import of the file says the conflict again).
_CONFLICT = b""


def _importers_fingerprint() -> str:
    """SHA-256 of what decides the events a file yields: the importers, the ASP schema and the
    cutting of oversized events. A record vouches that every event of its prefix is in L1 as
    these importers said them; other importers may say more of the same bytes (an upgrade
    that takes lines an earlier release dead-lettered), which L1 then lacks."""
    streams = Path(__file__).resolve().parent
    sources = [*sorted((streams / "importers").glob("*.py")), streams / "asp.py",
               *sorted((streams / "schemas").glob("*.json"))]
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()


IMPORTERS = _importers_fingerprint()


class Appender(Protocol):
    """What the follower needs of L1 (the tests drive the follower with an in-memory one)."""

    def committed_seq(self, log_id: str) -> int: ...

    def append(self, event: dict[str, Any], canonical: bytes | None = None) -> None:
        """Queue ``event``; ``canonical``, when given, is its ``canonical_bytes``."""

    def flush(self) -> int:
        """Wait until what was appended, dead-lettered and resolved so far is acknowledged; the
        highest seq appended."""

    def event_digests(self, log_id: str, from_seq: int, sessions: set[str] | None = None,
                      to_seq: int | None = None) -> dict[str, bytes | None]:
        """eventId -> :func:`streams.asp.event_digest` of the copy L1 holds, for the events of
        ``log_id`` from ``from_seq`` (up to ``to_seq``), of ``sessions`` when given."""

    def dead_letter(self, item: Rejected) -> None: ...

    def resolve_dead_letter(self, record: str, log_id: str) -> None:
        """Say that ``record``, dead-lettered by an earlier import, is imported now (a line cut off
        then, completed since): its dead letter is no longer pending (``streams.l1.DeadLetters``)."""


@dataclass(frozen=True)
class FileRecord:
    """What one file has appended: its first ``offset`` bytes (``prefix_sha``) were imported and
    every event of them is in L1 except ``held`` (end events waiting for the file to go idle)
    and ``conflicts`` (events whose eventId L1 holds with other content: dead-lettered once, and
    said again by the next import of the file, not counted as already in L1); ``started`` says
    what each of its sessions' ``session.started`` said when it went out."""

    path: str
    log_id: str
    format: str
    offset: int
    prefix_sha: str
    first_line_sha: str
    held: tuple[str, ...] = ()
    device: int = 0
    inode: int = 0
    conflicts: tuple[str, ...] = ()
    # (eventId, hex event_digest) of each session.started this file put in L1, as last sent:
    # what an import of the grown file says of it is compared with it (see _amendments).
    started: tuple[tuple[str, str], ...] = ()
    # End events sent because the file went idle (or its follower stopped) before it grew: an
    # import of the grown file no longer says them (the turn went on), but a later record may
    # say one again (a conversation repeated further down), and it is in L1 (see _vouched_for).
    released: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileRecord:
        # Fields a later release added are left out: its positions must not stop this one.
        known = {name: value for name, value in data.items() if name in _RECORD_FIELDS}
        return cls(**{**known, "held": tuple(data.get("held", ())), "conflicts": tuple(data.get("conflicts", ())),
                      "started": tuple((str(a), str(b)) for a, b in data.get("started", ())),
                      "released": tuple(data.get("released", ()))})


_RECORD_FIELDS = frozenset(FileRecord.__dataclass_fields__)


@dataclass
class _Batch:
    events: list[dict[str, Any]] = field(default_factory=list)
    canonical: list[bytes | None] = field(default_factory=list)  # each event's bytes, if known
    rejects: list[Rejected] = field(default_factory=list)
    # (record, log) of records an earlier import dead-lettered that this one imports
    resolved: list[tuple[str, str]] = field(default_factory=list)
    records: dict[str, tuple[FileRecord | None, FileRecord]] = field(default_factory=dict)
    planned: set[str] = field(default_factory=set)  # the eventIds of ``events``, as files add them


class PositionStore:
    """The durable per-file records and the write-ahead batch, in ``$USL_HOME/follow``."""

    def __init__(self, home: Path) -> None:
        self.directory = Path(home).resolve() / "follow"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "positions.json"
        self._lock_path = self.directory / "positions.lock"
        # The records as last read, and the bytes they were read from: a follower reads them on
        # every poll, and 2 000 files' records took 11 ms of CPU to parse each time.
        self._read: tuple[bytes, dict[str, FileRecord]] | None = None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock_path.open("a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _load(self, data: bytes | None = None) -> dict[str, Any]:
        """The store's state (parsed from ``data`` when the caller read the file)."""
        try:
            state = orjson.loads(self.path.read_bytes() if data is None else data or b"{}")
        except FileNotFoundError:
            state = {}
        state.setdefault("version", 1)
        state.setdefault("files", {})
        state.setdefault("wal", None)
        if state.get("importers") != IMPORTERS:
            # Records other importers wrote (an upgrade, or a store from before this key) vouch
            # for nothing: each file is checked against L1 once, and what these importers take
            # that those did not is appended instead of being counted as already in L1.
            state["files"] = {}
            if state["wal"] is not None:
                state["wal"]["files"] = {}
            state["importers"] = IMPORTERS
        for part in (state, state["wal"] or {}):
            for key, started in (part.pop("started", None) or {}).items():
                if part.get("files", {}).get(key) is not None:
                    part["files"][key]["started"] = started
        return state

    def _save(self, state: dict[str, Any]) -> None:
        """Write ``state``, each record's ``started`` beside the records (see :func:`_started_beside`)."""
        saved = _started_beside(state)
        if state["wal"] is not None:
            saved["wal"] = _started_beside(state["wal"])
        atomic_write(self.path, orjson.dumps(saved))

    def records(self, appender: Appender) -> dict[str, FileRecord]:
        """Every file's record (a batch left written ahead is finished first)."""
        with self._locked():
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            if self._read is not None and self._read[0] == data:
                return dict(self._read[1])
            state = self._load(data)
            recovered = state["wal"] is not None
            if recovered:
                self._recover(state, appender)  # the file changed
            records = {key: FileRecord.from_json(value) for key, value in state["files"].items()}
            if not recovered:
                self._read = (data, records)
            return dict(records)

    def commit(self, appender: Appender, batch: _Batch) -> bool:
        """Append ``batch`` and switch its records, or return False (nothing done) when another
        process changed one of its files' records since this batch was planned."""
        with self._locked():
            state = self._load()
            if state["wal"] is not None:
                self._recover(state, appender)
            for key, (expected, _new) in batch.records.items():
                if state["files"].get(key) != _jsonable(expected):
                    return False
            logs = sorted({event["logId"] for event in batch.events})
            canonical = batch.canonical or [None] * len(batch.events)
            state["wal"] = {
                "fromSeqs": {log: appender.committed_seq(log) for log in logs},
                # An event's canonical bytes go in as they are (the same JSON value; serialising
                # 29 MB of events again was a third of the write-ahead log's time, issue #16).
                "events": [event if value is None else orjson.Fragment(value)
                           for event, value in zip(batch.events, canonical, strict=True)],
                "files": {key: _jsonable(new) for key, (_old, new) in batch.records.items()},
                # The new records vouch that these were dead-lettered (resolved): a writer killed
                # before it sent them leaves them to whoever finishes the batch.
                "rejects": [asdict(item) for item in batch.rejects],
                "resolved": [list(item) for item in batch.resolved],
            }
            self._save(state)
            for event, value in zip(batch.events, canonical, strict=True):
                appender.append(event, value)
            appender.flush()
            for item in batch.rejects:
                appender.dead_letter(item)
            for record, log_id in batch.resolved:
                appender.resolve_dead_letter(record, log_id)
            if batch.rejects or batch.resolved:
                # Sent before the records that vouch for them are saved: queued in the producer,
                # a writer killed after the save lost them, its write-ahead log cleared.
                appender.flush()
            state["files"].update(state["wal"]["files"])
            state["wal"] = None
            self._save(state)
            return True

    @contextmanager
    def streaming(self, appender: Appender, key: str, expected: FileRecord | None,
                  marker: FileRecord) -> Iterator[_Stream | None]:
        """Batches of one file appended one after another under the lock (see
        :meth:`Follower._stream`), or None (nothing done) when another process changed the
        file's record from ``expected``. ``marker`` is the file's record until the stream's
        :meth:`_Stream.finish`."""
        with self._locked():
            state = self._load()
            if state["wal"] is not None:
                self._recover(state, appender)
            if state["files"].get(key) != _jsonable(expected):
                yield None
                return
            yield _Stream(self, state, appender, key, marker)

    def _recover(self, state: dict[str, Any], appender: Appender) -> None:
        """Finish the batch a dead writer left: append what L1 does not hold yet."""
        wal = state["wal"]
        present: set[str] = set()
        for log, from_seq in wal["fromSeqs"].items():
            sessions = {e["sessionId"] for e in wal["events"] if e["logId"] == log}
            present.update(appender.event_digests(log, int(from_seq) + 1, sessions))
        for event in wal["events"]:
            if event["eventId"] not in present:
                appender.append(event)
        appender.flush()
        # The batch's dead letters and resolutions: the records it switches vouch for them, so
        # nothing would send them again and a bad line was in no letter. (A writer killed after
        # sending them, before it saved, leaves a letter that goes out twice: shown twice.)
        for item in wal.get("rejects", ()):
            appender.dead_letter(Rejected(**item))
        for record, log_id in wal.get("resolved", ()):
            appender.resolve_dead_letter(record, log_id)
        if wal.get("rejects") or wal.get("resolved"):
            appender.flush()  # before the save that clears the log (see commit)
        state["files"].update(wal["files"])
        state["wal"] = None
        self._save(state)


def _started_beside(part: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``part`` (the store's state, or its write-ahead batch) whose records'
    ``started`` lists are under ``"started"``, beside ``"files"`` (:meth:`PositionStore._load`
    puts them back): a release before them refused a record with a key it did not know, so its
    follower failed to start on positions a later release wrote. It keeps what it does not
    read, and a record it wrote is read with the ``started`` list it had (stale at worst: a
    session's facts are then compared with what they were before it ran)."""
    files: dict[str, Any] = {}
    started: dict[str, Any] = {}
    for key, record in part["files"].items():
        if record is not None and "started" in record:
            started[key] = record["started"]
            record = {name: value for name, value in record.items() if name != "started"}
        files[key] = record
    saved = {**part, "files": files}
    if started:
        saved["started"] = started
    return saved


class _Stream:
    """The write-ahead batches of one file's one-shot import, under the store's lock: each is
    written ahead, then sent; it is acknowledged (and its rejects dead-lettered) before the next
    one is written ahead, so the log never holds more than one batch, as in
    :meth:`PositionStore.commit`."""

    def __init__(self, store: PositionStore, state: dict[str, Any], appender: Appender, key: str,
                 marker: FileRecord) -> None:
        self._store, self._state, self._appender, self._key = store, state, appender, key
        self._marker = _jsonable(marker)
        self._sent: _Batch | None = None  # written ahead and sent, not yet acknowledged

    def send(self, batch: _Batch) -> None:
        """Write ``batch`` ahead (the file's record becomes the marker) and send it."""
        self._settle()
        logs = sorted({event["logId"] for event in batch.events})
        self._state["wal"] = {
            "fromSeqs": {log: self._appender.committed_seq(log) for log in logs},
            "events": [event if value is None else orjson.Fragment(value)
                       for event, value in zip(batch.events, batch.canonical, strict=True)],
            "files": {self._key: self._marker},
        }
        self._store._save(self._state)
        for event, value in zip(batch.events, batch.canonical, strict=True):
            self._appender.append(event, value)
        self._sent = batch

    def finish(self, record: FileRecord) -> None:
        """Once the last batch is acknowledged, the file's record is ``record``."""
        self._settle()
        self._state["files"][self._key] = _jsonable(record)
        self._store._save(self._state)

    def _settle(self) -> None:
        """Wait for the batch sent last; its switch is saved with the next write (a crash before
        that finds it written ahead, and finishing it appends nothing)."""
        if self._sent is None:
            return
        self._appender.flush()
        for item in self._sent.rejects:
            self._appender.dead_letter(item)
        for record, log_id in self._sent.resolved:
            self._appender.resolve_dead_letter(record, log_id)
        if self._sent.rejects or self._sent.resolved:
            self._appender.flush()  # before the save that clears the log (see PositionStore.commit)
        self._state["files"].update(self._state["wal"]["files"])
        self._state["wal"] = None
        self._sent = None


def _jsonable(record: FileRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    data = asdict(record)
    data["held"] = list(record.held)
    # A record without conflicts (or started) reads as one an earlier release wrote (commit
    # compares them).
    for name in ("conflicts", "started", "released"):
        if getattr(record, name):
            data[name] = [list(item) if isinstance(item, tuple) else item for item in getattr(record, name)]
        else:
            del data[name]
    return data


@dataclass
class PollReport:
    """What one poll did (summed over files). A file read on from its position (see
    :meth:`Follower._resume`) counts the records of its new lines and of its end, not the
    duplicates an import of the whole file would have counted again."""

    files: int = 0
    records_read: int = 0
    appended: int = 0
    duplicates: int = 0
    rejected: int = 0
    cut: int = 0
    formats: set[str] = field(default_factory=set)
    rejected_items: list[Rejected] = field(default_factory=list)
    # Records still bad that an earlier import of the same file already dead-lettered: not sent
    # again, but a re-import must not read as if the file were clean.
    rejected_before: list[Rejected] = field(default_factory=list)
    # Records an earlier import of the same file dead-lettered that this one imported (a cut
    # last line, completed since): their dead letters are resolved.
    resolved: list[str] = field(default_factory=list)
    undetected: list[str] = field(default_factory=list)  # files whose format cannot be told (yet)
    # Why of each of ``undetected``, as file_format says it without the path ("cannot tell the
    # format ... (pass --format ...)", "declared as ..., but ...").
    undetected_reasons: dict[str, str] = field(default_factory=dict)
    # (file, why) of each file of a known format that holds nothing to import (yet): a Claude
    # Code file of summaries of other sessions only (importers.skipped_file).
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # (record, bytes) of each last line a file ends in, without its newline, that is no whole JSON
    # object once the file is idle: cut off (its writer killed), or still being written very
    # slowly. It is dead-lettered as a one-shot import of the file dead-letters it (resolved if
    # the rest comes after all), and said here too.
    cut_lines: list[tuple[str, int]] = field(default_factory=list)
    # Accepted events (new or already in L1) per log they name: an ASP file's events keep their
    # own logId whatever --log says, and the summary must say where they went.
    logs: Counter[str] = field(default_factory=Counter)


@dataclass
class _Cursor:
    """A followed file's import kept open after its last line (:func:`open_cursor`): it has read
    the ``offset`` bytes of ``record`` and is valid while that is the file's record (None while a
    batch that moved it on is not planned yet)."""

    importer: FileCursor
    record: FileRecord | None = None


@dataclass
class _Tracked:
    """What this process knows of one file between polls."""

    signature: tuple[int, int, int, int] | None = None
    format: str | None = None
    record: FileRecord | None = None
    # eventIds of this file in L1, valid for ``record``: each with the digest of the copy L1
    # held before this file appended it (None: this file appended it, see _new_events)
    appended: dict[str, bytes | None] | None = None
    rejected: set[str] = field(default_factory=set)  # records dead-lettered, valid for ``record``
    held_events: list[dict[str, Any]] = field(default_factory=list)
    changed_at: float = 0.0
    new: bool = False  # created while this follower ran: no L1 check needed
    tail: bool = False  # the file ends in a line without its newline, looked at again when idle
    cursor: _Cursor | None = None  # the file's import, read on from its record's offset


@dataclass
class _Listing:
    """One followed directory as :meth:`Follower._tree` listed it, while its mtime is ``mtime_ns``:
    its followed files ((key, path, label, root) each) and the directories to enter."""

    mtime_ns: int
    listed_at: float  # time.monotonic()
    files: list[tuple[str, Path, str, Path]]
    directories: list[str]


@dataclass
class _Parsed:
    key: str
    path: Path
    label: str
    root: Path
    complete: bytes
    items: list[Accepted | Rejected]
    stable: int  # items[:stable] came before the end of the input
    fmt: str
    stat: os.stat_result
    base: FileRecord | None  # the record the plan starts from
    adopted: FileRecord | None  # ... found under another path (a renamed file)
    cursor: _Cursor | None = None  # the file's import, to read on from next time
    # Read on from ``base`` (items are those of the bytes after it, and the end of the input):
    # the prefix ``base`` vouches for was checked, and this is the SHA-256 of ``complete``.
    resumed_sha: str | None = None
    # ``base`` when the file still begins with the bytes it vouches for (set by ``_plan``): a
    # record of another file once at this path (rotated, replaced) says nothing of this one.
    vouching: FileRecord | None = None


class Follower:
    """Tails ``paths`` into L1 through ``appender``; :meth:`poll` does one pass, :meth:`run` loops.

    ``once`` is the one-shot ``usl ingest``: nothing is held back and every file is checked
    against what L1 already holds unless its record vouches for it.
    """

    def __init__(
        self, paths: list[Path], *, appender: Appender, store: PositionStore, log_id: str = "default",
        fmt: str | None = None, acl: dict[str, Any] | None = None, max_event_bytes: int = 786432,
        idle_seconds: float = 10.0, once: bool = False, clock: Callable[[], float] = time.time,
        on_record: Callable[[str], None] | None = None, stream_batch_events: int = 2000,
        resume: bool = True,
    ) -> None:
        """``resume``: a followed file's import is kept open between polls (see :meth:`_resume`);
        False imports it from its start on every change (what the tests compare it with)."""
        self.paths = [Path(p).expanduser().resolve() for p in paths]
        self.appender = appender
        self.store = store
        self.log_id = log_id
        self.fmt = fmt
        self.acl = acl
        self.max_event_bytes = max_event_bytes
        self.idle_seconds = idle_seconds
        self.once = once
        self.clock = clock
        self.on_record = on_record  # sees each record's label as it is read (progress)
        self.stream_batch_events = stream_batch_events  # a one-shot import's write-ahead batches
        self.resume = resume
        self._tracked: dict[str, _Tracked] = {}
        self._links: dict[Path, dict[Any, Any]] = {}
        # A followed root's directories as last listed (by path) and its files, sorted (see _tree).
        self._trees: dict[Path, tuple[dict[str, _Listing], list[tuple[str, Path, str, Path]]]] = {}
        self._where: dict[str, tuple[str, Path]] = {}  # key -> (label, root), as last listed
        self._started = False

    # -- the loop ---------------------------------------------------------------------------

    def run(self, *, poll_seconds: float, should_stop: Callable[[], bool],
            on_poll: Callable[[PollReport], None] | None = None) -> None:
        """Poll until ``should_stop()``, then :meth:`stop`; ``on_poll`` sees each poll's report
        (the stop's too)."""
        while not should_stop():
            report = self.poll()
            if on_poll is not None:
                on_poll(report)
            deadline = time.monotonic() + poll_seconds
            while time.monotonic() < deadline and not should_stop():
                time.sleep(min(0.05, poll_seconds))
        report = self.stop()
        if on_poll is not None:
            on_poll(report)

    def stop(self) -> PollReport:
        """Send the end events the followed files hold back, as their going idle would: once
        this follower stops, nothing else sends them, and each open turn held its log's
        indexes below it (``usl status``: waiting on an open turn) until the file was imported
        again. A turn that goes on after it gets an end of its own, as after an idle pause."""
        report = PollReport()
        records = self.store.records(self.appender)
        for key, tracked in list(self._tracked.items()):
            self._release(key, tracked, records.get(key), report)
        return report

    def poll(self) -> PollReport:
        """One pass over every followed file; appends what is new and commits its records."""
        report = PollReport()
        records = self.store.records(self.appender)
        files = self._files()
        first = not self._started
        self._started = True
        present = {key for key, _path, _label, _root in files}
        missing = [key for key in self._tracked if key not in present]
        moved = _inodes(path for key, path, _label, _root in files if key not in self._tracked) if missing else {}
        for key in missing:
            self._drain(key, records, report)
            self._gone(key, records, report, moved)
        self._where.update((key, (label, root)) for key, _path, label, root in files)
        parsed: list[_Parsed] = []
        for key, path, label, root in files:
            tracked = self._tracked.get(key)
            if tracked is None:
                tracked = self._tracked[key] = _Tracked(new=not first and not self.once)
            found = self._read(key, path, label, root, tracked, records, report)
            if found is not None:
                parsed.append(found)
        if self.once and all(self._unvouched(item) for item in parsed):
            in_l1 = _InL1(self.appender)
            for item in parsed:
                self._stream(item, report, in_l1)
            return report
        for item in parsed:
            if self.once:
                item.items, item.stable = self._import(item.path, item.label, item.root, item.fmt, item.complete)
                self._seen(item.items)
        batch = self._plan(parsed, report)
        self._commit(batch, report)
        self._let_go()
        return report

    def _let_go(self) -> None:
        """Drop the cursors of files idle for ``_CURSOR_KEPT_SECONDS`` (a session that ended):
        the next change of such a file imports it whole once more."""
        now = self.clock()
        for tracked in self._tracked.values():
            if tracked.cursor is not None and now - tracked.changed_at >= _CURSOR_KEPT_SECONDS:
                tracked.cursor = None

    # -- steps ------------------------------------------------------------------------------

    def _files(self) -> list[tuple[str, Path, str, Path]]:
        """(key, path, label, root) of every followed file, in import order."""
        found: list[tuple[str, Path, str, Path]] = []
        for root in self.paths:
            if root.is_dir():
                found += self._tree(root)
            elif root.is_file():
                found.append((self._key(root), root, root.name, root))
            elif self.once:
                raise ImportFormatError(f"{root}: no such file or directory")
        return found

    def _key(self, path: Path) -> str:
        return f"{self.log_id}\x1f{path}"

    def _tree(self, root: Path) -> list[tuple[str, Path, str, Path]]:
        """(key, path, label, root) of every ``FILE_SUFFIXES`` file under ``root`` (as
        ``root.rglob`` finds them: symlinked directories are not entered), sorted by label.

        A directory is listed again only when its mtime moved (a file made, deleted or renamed
        in it), is recent, or its listing is ``_RELIST_SECONDS`` old; the others' listings are
        kept. Listing 2 000 files with pathlib on every 0.5 s poll was 40 ms of CPU (80 % of an
        idle poll); a file appended in place changes no directory, and ``_read`` stats every
        file anyway."""
        now, wall = time.monotonic(), time.time()
        before, cached = self._trees.get(root, ({}, []))
        listed: dict[str, _Listing] = {}
        relisted = False
        pending = [(str(root), "")]
        while pending:
            directory, rel = pending.pop()
            try:
                stat = os.stat(directory)
            except OSError:
                continue
            listing = before.get(directory)
            if listing is None or listing.mtime_ns != stat.st_mtime_ns or now - listing.listed_at >= _RELIST_SECONDS \
                    or wall - stat.st_mtime < _RECENT_SECONDS:
                # Recent: a file made within the mtime's granularity of this listing (a tick, up
                # to 2 s on some filesystems) may leave the mtime as this listing saw it.
                listing = self._list(root, directory, rel, stat.st_mtime_ns, now)
                relisted = True
            listed[directory] = listing
            pending += [(os.path.join(directory, name), f"{rel}{name}/") for name in listing.directories]
        if relisted or listed.keys() != before.keys():
            cached = sorted((entry for listing in listed.values() for entry in listing.files),
                            key=lambda entry: entry[2])
        self._trees[root] = (listed, cached)
        return cached

    def _list(self, root: Path, directory: str, rel: str, mtime_ns: int, now: float) -> _Listing:
        """One directory's followed files and the directories to enter, as ``rglob`` sees them."""
        files: list[tuple[str, Path, str, Path]] = []
        directories: list[str] = []
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir() and not entry.is_symlink():
                            if entry.name not in SKIPPED_DIRECTORIES or not skipped_directory(Path(entry.path)):
                                directories.append(entry.name)
                        elif os.path.splitext(entry.name)[1].lower() in FILE_SUFFIXES and entry.is_file():
                            path = Path(entry.path)
                            files.append((self._key(path), path, rel + entry.name, root))
                    except OSError:
                        continue
        except OSError:  # gone, or not readable (rglob skips it too)
            pass
        return _Listing(mtime_ns, now, files, directories)

    def _read(self, key: str, path: Path, label: str, root: Path, tracked: _Tracked,
              records: dict[str, FileRecord], report: PollReport) -> _Parsed | None:
        """The file's complete records when it changed since the last poll (else None)."""
        try:
            stat = path.stat()
            signature = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if signature == tracked.signature and not (tracked.record and tracked.record.held) \
                    and not tracked.tail:
                return None
            data = path.read_bytes()
            kept = tracked.record or records.get(key)  # the stored one at first sight (a restart)
            # Truncated by copytruncate and written again past the old position before this
            # poll: not shorter, but no longer beginning with the bytes the record vouches for.
            if kept is not None and not self.once and str(path) == kept.path \
                    and ((stat.st_dev, stat.st_ino) != (kept.device, kept.inode) or len(data) < kept.offset
                         or _sha(data[:kept.offset]) != kept.prefix_sha):
                self._drain(key, records, report)  # rotated: read what the old file still held first
        except FileNotFoundError:
            return None
        now = self.clock()
        # A file this process saw grow (or saw made): its import is kept open for the next change.
        growing = tracked.signature is not None or tracked.new
        if signature != tracked.signature:
            # First sight (e.g. after a restart): the file has been idle since its last write.
            tracked.changed_at = stat.st_mtime if tracked.signature is None else now
            tracked.signature = signature
        report.files += 1
        record = records.get(key)
        if tracked.format is None:
            if _blank(data):
                return None
            try:
                found_format = file_format(path, self.fmt)
            except NoJSONRecordsError:
                if self.once and path == root:
                    raise  # a file named on the command line: no format reads it
                # A text log or notes among a directory's transcripts, with --format too: named
                # with its reason, never a dead letter per line; looked at again when it changes.
                report.skipped.append((str(path), NO_JSON_RECORDS))
                return None
            except ImportFormatError as exc:
                if self.once and path == root:
                    raise  # a file named on the command line: its format is the question
                # A file among a directory's transcripts (a manifest, notes): named in the report,
                # looked at again when it changes.
                report.undetected.append(str(path))
                said = str(exc)
                report.undetected_reasons[str(path)] = said.removeprefix(f"{path}: ")
                return None
            why = skipped_file(path, found_format, data)
            if why is not None:
                # Named in the report, named on the command line too (its format is no question,
                # there is nothing in it to import), and looked at again when it changes: a
                # followed session's file begins with its summaries before its first prompt.
                report.skipped.append((str(path), why))
                return None
            tracked.format = found_format
        fmt = tracked.format
        if self.once:
            complete = data  # a one-shot import takes the file as it is, a cut last line too
        elif _is_document(fmt, path):
            complete = data if parse_json(data)[1] is None else b""
        else:
            complete = data[: data.rfind(b"\n") + 1]
            tracked.tail = not _blank(data[len(complete):])
            if tracked.tail and now - tracked.changed_at >= self.idle_seconds:
                # A last line that never got its newline, once the file is idle: taken as a
                # one-shot import of the file as it is takes it. A whole JSON object is imported
                # (a tool that ends a file without a newline); a cut line (its writer killed
                # mid-line) is dead-lettered as cut off, with the one-shot import's reason, and
                # if the rest is written after all, the grown line is imported and its dead
                # letter resolved. It waited unread before, in no dead letter, for ever.
                tracked.tail = False
                if not _whole_object(data[len(complete):]):
                    report.cut_lines.append((f"{label}:{complete.count(_NEWLINE) + 1}", len(data) - len(complete)))
                complete = data
        if _blank(complete):
            if not self.once and tracked.record is not None and tracked.record.held \
                    and not _begins_with(data, tracked.record):
                # Emptied (a log rotation's new file, a copytruncate): what comes next is a file
                # of its own, which goes on with none of the old one's turns (_orphaned_ends).
                self._release(key, tracked, tracked.record, report)
            return None
        adopted = None
        if record is None:
            adopted = self._renamed(stat, complete, records)
        base = record or adopted
        # (settled last: it reads the whole file, which a file its record vouches for need not
        # pay at every poll it grows.)
        if not self.once and now - tracked.changed_at < self.idle_seconds \
                and (base is None or not _begins_with(complete, base)) and not settled(fmt, complete):
            # A new file (or one truncated and written again) whose first events would go out
            # otherwise than an import of the grown file says them (a transcript's
            # session.started before its model is written): held back until it is, or until the
            # file is idle. A rewritten transcript read before its first assistant line sent its
            # session a second session.started, without the model, and an empty turn.
            tracked.tail = True  # looked at again at every poll until then, grown or not
            return None
        if not self.once and base is not None and base.offset == len(complete) \
                and base.prefix_sha == _sha(complete) \
                and not (base.held and now - tracked.changed_at >= self.idle_seconds):
            if tracked.record != base:
                tracked.record, tracked.appended = base, None
            return None
        if self.once:  # imported by poll: streamed into L1 when no record vouches for any file
            return _Parsed(key, path, label, root, complete, [], 0, fmt, stat, base, adopted)
        cursor, tracked.cursor = tracked.cursor, None  # back once its batch is planned
        found = self._resume(key, path, label, root, fmt, complete, stat, (record, base, adopted), tracked, cursor,
                             growing=growing)
        if found is not None:
            self._seen(found.items)
            return found
        items, stable = self._import(path, label, root, fmt, complete)
        self._seen(items)
        return _Parsed(key, path, label, root, complete, items, stable, fmt, stat, base, adopted)

    def _resume(self, key: str, path: Path, label: str, root: Path, fmt: str, complete: bytes,
                stat: os.stat_result, records: tuple[FileRecord | None, FileRecord | None, FileRecord | None],
                tracked: _Tracked, cursor: _Cursor | None, *, growing: bool) -> _Parsed | None:
        """The file read on by its cursor from where its record ends, or imported whole by a new
        cursor (kept for the next change); None when it takes :meth:`_import`.

        A cursor reads only the bytes after its record's offset, so a change costs what the new
        bytes cost, not what the whole file costs (a 15 MB transcript was 0.5 s of CPU per
        line). It says of them what an import of the whole file says (the same records, the same
        end of the input), as long as the file still begins with what it read: the prefix is
        hashed again (a file rewritten in place is checked against L1 as before), and the
        importer says when a new line changes what it read before (:meth:`FileCursor.feed`).
        Without a cursor (a restart, one let go), a new one reads the prefix the file's record
        vouches for and reads on (:meth:`_reopen`): one import of the file, where a restarted
        follower read the prefix and then the whole file (twice 0.45 s for 15 MB). Anything
        else (a file renamed, rewritten or cut, a last line without its newline, a document, a
        one-shot import, a format without a cursor) is read as before, by a whole import that
        leaves a new cursor behind if the file is ``growing``.

        A cursor holds about a sixth of its file's size (the ids of its lines and calls, 2.3 MB
        for 15 MB): a follower's first look at a directory of old transcripts keeps none, and a
        file idle for ``_CURSOR_KEPT_SECONDS`` lets its cursor go (:meth:`_let_go`)."""
        if not self.resume or not complete.endswith(_NEWLINE) or _is_document(fmt, path):
            return None
        record, base, adopted = records  # the file's own record, the plan's base, a renamed file's
        view = memoryview(complete)
        # The record's prefix, hashed once (``_read`` hashes only a file that did not grow); None
        # unless the file still begins with the bytes the record vouches for.
        prefix = None
        if record is not None and 0 < record.offset <= len(complete) \
                and complete[record.offset - 1:record.offset] == _NEWLINE:
            prefix = hashlib.sha256(view[: record.offset])
            if prefix.hexdigest() != record.prefix_sha:
                prefix = None
        if prefix is not None and record is not None and cursor is not None and cursor.record == record \
                == tracked.record and tracked.appended is not None:
            new = cursor.importer.feed(complete[record.offset:])
            if new is not None:
                prefix.update(view[record.offset:])
                cursor.record = None  # moved on: valid again once the batch is planned
                return _Parsed(key, path, label, root, complete, new + self._end(cursor.importer, label),
                               len(new), fmt, stat, record, None, cursor, prefix.hexdigest())
        elif prefix is not None and record is not None:
            # No cursor (a restart, an import let go): a new one reads the recorded prefix, which
            # says what this file appended (as _plan's import of the prefix would), then reads on;
            # one import of the file, not the prefix's and then the whole file's.
            found = self._reopen(key, path, label, root, fmt, complete, stat, record, tracked, prefix)
            if found is not None:
                return found
        if not growing:
            return None
        importer = open_cursor(path, fmt, label=label, log_id=self.log_id, acl=self.acl,
                               max_event_bytes=self.max_event_bytes, links=self._links.setdefault(root, {}))
        if importer is None:
            return None
        items = importer.feed(complete)
        if items is None:  # a file its importer reads only whole, for now
            return None
        return _Parsed(key, path, label, root, complete, items + self._end(importer, label), len(items), fmt,
                       stat, base, adopted, _Cursor(importer))

    def _reopen(self, key: str, path: Path, label: str, root: Path, fmt: str, complete: bytes,
                stat: os.stat_result, record: FileRecord, tracked: _Tracked,
                prefix: Any) -> _Parsed | None:
        """The file read on from ``record`` (whose prefix ``prefix`` hashed and vouches for) by
        a new cursor that first reads that prefix; None for a format without a cursor, or when
        the new lines change what the import said of the prefix (the whole file is then read).

        What the prefix says (its events but those ``record`` holds back, its rejects) is what
        the file appended, as a whole import of the prefix says after a restart (:meth:`_plan`);
        what this process knows of the file, when it still holds, is kept (it has the digests
        of copies L1 held before, see :func:`_new_events`)."""
        links = self._links.setdefault(root, {})
        importer = open_cursor(path, fmt, label=label, log_id=self.log_id, acl=self.acl,
                               max_event_bytes=self.max_event_bytes, links=links)
        if importer is None:
            return None
        linked = set(links)
        before = importer.feed(complete[: record.offset])
        if before is None:  # a file its importer reads only whole, for now
            return None
        if tracked.record != record or tracked.appended is None:
            tracked.record = record
            tracked.appended, tracked.rejected = _vouched_for(before + self._end(importer, label), record)
        new = importer.feed(complete[record.offset:])
        if new is None:
            # The subagent links the prefix taught are forgotten: the whole file is imported as
            # it would have been without this look (links are only ever added, never changed).
            for link in links.keys() - linked:
                del links[link]
            return None
        prefix.update(memoryview(complete)[record.offset:])
        return _Parsed(key, path, label, root, complete, new + self._end(importer, label), len(new), fmt, stat,
                       record, None, _Cursor(importer), prefix.hexdigest())

    @staticmethod
    def _end(importer: FileCursor, label: str) -> list[Accepted | Rejected]:
        """What the import says at the end of its input: where :meth:`_import` reads its
        sentinel line, rejected without a word said (the line after the last)."""
        return importer.finish(f"{label}:{importer.lines + 1}")

    def _seen(self, items: list[Accepted | Rejected]) -> None:
        if self.on_record is not None:
            for entry in items:
                self.on_record(entry.record)

    def _renamed(self, stat: os.stat_result, complete: bytes, records: dict[str, FileRecord]) -> FileRecord | None:
        """A record this file had under another path (renamed or rotated), if its prefix agrees
        and that path no longer holds what the record describes. A copy of a file beside it is
        a file of its own: adopting the original's record took the copy's events for appended,
        and an OpenAI conversation without an id (its session named after the file) was lost."""
        first = _sha(_first_line(complete))
        for other in records.values():
            if other.log_id != self.log_id or not (
                    (other.device, other.inode) == (stat.st_dev, stat.st_ino) or other.first_line_sha == first):
                continue
            if other.offset <= len(complete) and _sha(complete[: other.offset]) == other.prefix_sha \
                    and not _still_at_its_path(other):
                return other
        return None

    def _import(self, path: Path, label: str, root: Path, fmt: str,
                data: bytes) -> tuple[list[Accepted | Rejected], int]:
        """Import ``data`` as the file ``path`` (the bytes read once, so a writer cannot move
        them): (records, how many of them came before the importer saw the end of its input).

        A line file is imported with a sentinel line after its last line that every importer
        rejects where it reads it; whatever comes after that reject, the importer said only
        because its input ended (the open turn's end, lines it had nothing to place after).
        """
        entries, sentinel = self._import_bytes(path, label, root, fmt, data)
        items = list(entries)
        for index, item in enumerate(items):
            if isinstance(item, Rejected) and item.record == sentinel:
                return items[:index] + items[index + 1:], index
        stable = len(items)  # no sentinel seen: the end events at the end are what waits
        while stable > 0:
            last = items[stable - 1]
            if isinstance(last, Accepted) and last.event["type"] not in _END_TYPES:
                break
            stable -= 1
        return items, stable

    def _import_bytes(self, path: Path, label: str, root: Path, fmt: str,
                      data: bytes) -> tuple[Iterator[Accepted | Rejected], str | None]:
        """The records of ``data`` imported as the file ``path``, as they are read, and the
        record name of the sentinel line (None: a JSON document, no sentinel). The importer
        reads ``data`` itself, not the file: a copy written to disk and read back was a tenth
        of a one-shot import's CPU (issue #16)."""
        line_file = not _is_document(fmt, path)
        body = data if data.endswith(_NEWLINE) or not data else data + _NEWLINE
        links = self._links.setdefault(root, {})
        entries = iter_file(path, fmt, label=label, log_id=self.log_id, acl=self.acl,
                            max_event_bytes=self.max_event_bytes, links=links,
                            data=(body, _SENTINEL) if line_file else data)
        return entries, f"{label}:{body.count(_NEWLINE) + 1}" if line_file else None

    def _unvouched(self, item: _Parsed) -> bool:
        """No record vouches for any of the file's events (``_plan`` checks it against L1)."""
        tracked = self._tracked[item.key]
        if item.base is not None and tracked.record == item.base and tracked.appended is not None:
            return False
        return item.base is None or not (item.base.offset <= len(item.complete)
                                         and _sha(item.complete[: item.base.offset]) == item.base.prefix_sha)

    def _stream(self, item: _Parsed, report: PollReport, in_l1: _InL1) -> None:
        """One-shot import of a file no record vouches for, sent while it is imported: batches
        of about ``stream_batch_events`` events are written ahead and sent one after another,
        the next one imported while the last one travels (one process imports and sends on one
        core: the send waits for the broker about half of its time, issue #16).

        Until its last batch is acknowledged the file's record is a marker that vouches for
        nothing, so whoever imports the file after a crash checks it against L1 again (as a
        file without a record is), and a writer that planned against the old record fails its
        commit. Each batch is written ahead, sent and acknowledged as :meth:`PositionStore.commit`
        does. What L1 held before the file's import comes from ``in_l1``, which reads each
        record of L1 once for all the files of one pass (up to the seq L1 had when the file's
        import began: what this import appends is known by eventId)."""
        tracked = self._tracked[item.key]
        expected = None if item.adopted is not None else item.base
        marker = FileRecord(path=str(item.path), log_id=self.log_id, format=item.fmt, offset=0, prefix_sha="",
                            first_line_sha="", device=item.stat.st_dev, inode=item.stat.st_ino)  # vouches for nothing
        with self.store.streaming(self.appender, item.key, expected, marker) as stream:
            if stream is None:  # another process moved the record: nothing done, as in _commit
                self._tracked[item.key] = _Tracked(format=tracked.format)
                return
            entries, sentinel = self._import_bytes(item.path, item.label, item.root, item.fmt, item.complete)
            until: dict[str, int] = {}  # log -> L1's seq when this file first named it
            seen: dict[str, bytes | None] = {}  # what L1 held before the import, and what it appended
            old_rejects = set(tracked.rejected)
            rejected: set[str] = set()
            resolved: set[str] = set()
            started: dict[str, str] = {}
            for chunk in self._chunks(entry for entry in entries
                                      if not (isinstance(entry, Rejected) and entry.record == sentinel)):
                self._seen(chunk)
                seen.update(in_l1.present(chunk, until))
                events, canonical, conflicts = _new_events(chunk, seen, report, fmt=item.fmt)
                started.update(_amendments(chunk, seen, None, {event["eventId"] for event in events},
                                           fmt=item.fmt)[1])
                batch = _Batch(events=events, canonical=canonical,
                               rejects=_new_rejects([*chunk, *conflicts], old_rejects),
                               resolved=_resolved(chunk, conflicts, old_rejects))
                rejected.update(entry.record for entry in batch.rejects)
                resolved.update(record for record, _log in batch.resolved)
                report.resolved += [record for record, _log in batch.resolved]
                stream.send(batch)
                report.records_read += len(chunk)
                report.appended += len(batch.events)
                report.rejected += len(batch.rejects)
                report.rejected_items += batch.rejects
                report.rejected_before += _old_rejects([*chunk, *conflicts], old_rejects)
            record = self._record(item, conflicts=_conflicts(seen), started=tuple(sorted(started.items())))
            stream.finish(record)
        report.formats.add(item.fmt)
        tracked.record, tracked.appended = record, seen
        tracked.rejected = (old_rejects - resolved) | rejected
        tracked.held_events = []

    def _chunks(self, entries: Iterator[Accepted | Rejected]) -> Iterator[list[Accepted | Rejected]]:
        """``entries`` in lists of ``stream_batch_events``, also while L1 is still connecting: a
        first batch that grew until then held the whole file whenever importing it outran the
        connection (10 000 events at once, a 190 MB peak against 115 MB, and 4 % more CPU in
        page faults; issue #16)."""
        chunk: list[Accepted | Rejected] = []
        for entry in entries:
            chunk.append(entry)
            if len(chunk) >= self.stream_batch_events:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def _record(self, item: _Parsed, held: tuple[str, ...] = (), conflicts: tuple[str, ...] = (),
                started: tuple[tuple[str, str], ...] = (), released: tuple[str, ...] = ()) -> FileRecord:
        """The record of ``item`` once every event of it but ``held`` and ``conflicts`` is in L1."""
        if item.resumed_sha is not None and item.base is not None:
            # The file begins with the base's bytes, which hold its first line: only the new
            # bytes were hashed, on from the base's prefix.
            prefix_sha, first_line_sha = item.resumed_sha, item.base.first_line_sha
        else:
            prefix_sha, first_line_sha = _sha(item.complete), _sha(_first_line(item.complete))
        return FileRecord(
            path=str(item.path), log_id=self.log_id, format=item.fmt, offset=len(item.complete),
            prefix_sha=prefix_sha, first_line_sha=first_line_sha,
            held=held, device=item.stat.st_dev, inode=item.stat.st_ino, conflicts=conflicts, started=started,
            released=tuple(dict.fromkeys(released)),
        )

    def _plan(self, parsed: list[_Parsed], report: PollReport) -> _Batch:
        """The events to append and the records to write for the files that changed."""
        batch = _Batch()
        unknown: list[_Parsed] = []
        known: dict[str, tuple[dict[str, bytes | None], set[str]]] = {}  # key -> (appended ids, rejected records)
        for item in parsed:
            tracked = self._tracked[item.key]
            if item.resumed_sha is not None:  # _resume checked the prefix and what is known of it
                assert tracked.appended is not None
                item.vouching = item.base
                known[item.key] = (tracked.appended, tracked.rejected)
                continue
            # What this process remembers of the file holds only while the file still begins
            # with what it read: a file rewritten with an earlier line edited is checked against
            # L1, as a restarted follower checks it (else the edit was dropped as a duplicate,
            # without the dead letter a conflict gets).
            base = item.vouching = item.base if item.base is not None and item.base.offset <= len(item.complete) \
                and _sha(item.complete[: item.base.offset]) == item.base.prefix_sha else None
            if base is not None and tracked.record == base and tracked.appended is not None:
                known[item.key] = (tracked.appended, tracked.rejected)
            elif base is not None:
                before = item.items if base.offset == len(item.complete) else self._import(
                    item.path, item.label, item.root, item.fmt, item.complete[: base.offset])[0]
                known[item.key] = _vouched_for(before, base)
            elif tracked.new and item.base is None and not _continues_a_session(item):
                known[item.key] = ({}, set())
            else:
                unknown.append(item)
                known[item.key] = ({}, set(tracked.rejected))
        if unknown:
            for log, sessions in _sessions(unknown).items():
                present = self.appender.event_digests(log, 1, sessions)
                for item in unknown:
                    known[item.key][0].update(present)
        for item in parsed:
            appended, old_rejects = known[item.key]
            self._plan_file(item, appended, old_rejects, batch, report)
        return batch

    def _plan_file(self, item: _Parsed, appended: dict[str, bytes | None], old_rejects: set[str], batch: _Batch,
                   report: PollReport) -> None:
        tracked = self._tracked[item.key]
        # What the importer said only because its input ended waits until the file is idle.
        idle = self.once or self.clock() - tracked.changed_at >= self.idle_seconds
        release = item.items if idle else item.items[: item.stable]
        seen = dict(appended)
        orphans = self._orphaned_ends(item, tracked, seen)
        new_events, canonical, conflicts = _new_events(release, seen, report, fmt=item.fmt)
        no_bytes: list[bytes | None] = [None] * len(orphans)
        new_events, canonical = orphans + new_events, no_bytes + canonical
        amended, started = _amendments(release, seen, item.vouching, {event["eventId"] for event in new_events},
                                       fmt=item.fmt)
        new_events += amended
        canonical += [None] * len(amended)
        # Two files of one session may say one event (a resumed session's file repeats the end of
        # a turn its first file holds back until idle): the batch appends it once.
        kept = [i for i, event in enumerate(new_events) if event["eventId"] not in batch.planned]
        report.duplicates += len(new_events) - len(kept)
        new_events, canonical = [new_events[i] for i in kept], [canonical[i] for i in kept]
        batch.planned.update(event["eventId"] for event in new_events)
        held = [e.event for e in item.items[len(release):]
                if isinstance(e, Accepted) and e.event["eventId"] not in seen]
        rejects = _new_rejects([*release, *conflicts], old_rejects)
        resolved = _resolved(release, conflicts, old_rejects)
        sent_early = [e.event["eventId"] for e in item.items[item.stable:] if idle and isinstance(e, Accepted)]
        record = self._record(item, held=tuple(e["eventId"] for e in held), conflicts=_conflicts(seen),
                              started=started, released=(*(item.vouching.released if item.vouching else ()), *sent_early))
        if item.cursor is not None:
            item.cursor.record = record  # valid once the batch commits and the record is this
        tracked.cursor = item.cursor
        report.records_read += len(item.items)
        report.formats.add(item.fmt)
        report.rejected += len(rejects)
        report.rejected_items += rejects
        report.rejected_before += _old_rejects([*release, *conflicts], old_rejects)
        batch.events += new_events
        batch.canonical += canonical
        batch.rejects += rejects
        batch.resolved += resolved
        report.resolved += [record for record, _log in resolved]
        stored = None if item.adopted is not None else item.base
        batch.records[item.key] = (stored, record)
        tracked.held_events = held
        tracked.appended = seen  # valid once the batch commits (see _commit)
        tracked.rejected = (old_rejects - {record for record, _log in resolved}) | {i.record for i in rejects}

    @staticmethod
    def _orphaned_ends(item: _Parsed, tracked: _Tracked, seen: dict[str, bytes | None]) -> list[dict[str, Any]]:
        """The end events the file once at ``item``'s path held back whose turn (or session) the
        file there now does not go on with: a log rotation's new file, or another file written
        over it. That file is imported as a file of its own, so nothing else would end the old
        one's open turn: its end was dropped with the old record and the turn stayed open in L1
        for good. They go out now, as a deleted file's do (:meth:`_gone`); a file rewritten with
        the same turn (an edited line) keeps them held, for its own import ends that turn."""
        base = item.base
        if base is None or item.vouching is not None or not base.held or tracked.record != base:
            return []
        events = [entry.event for entry in item.items if isinstance(entry, Accepted)]
        turns = {event.get("turnId") for event in events if event.get("turnId")}
        sessions = {event["sessionId"] for event in events}
        orphans = [event for event in tracked.held_events
                   if event["eventId"] in base.held and event["eventId"] not in seen
                   and (event["turnId"] not in turns if event.get("turnId") else event["sessionId"] not in sessions)]
        for event in orphans:
            seen[event["eventId"]] = None
        return orphans

    def _commit(self, batch: _Batch, report: PollReport) -> None:
        if not batch.records:
            return
        if not self.store.commit(self.appender, batch):
            # Another process moved a record under us: forget what we knew, plan again next poll.
            for key in batch.records:
                if key in self._tracked:
                    self._tracked[key] = _Tracked(format=self._tracked[key].format)
            return
        report.appended += len(batch.events)
        for key, (_old, new) in batch.records.items():
            if key in self._tracked:
                self._tracked[key].record = new

    def _drain(self, key: str, records: dict[str, FileRecord], report: PollReport) -> None:
        """Read the rest of a followed file that a rotation moved out of the followed names
        before this poll saw it grow, and append it as that file's, before the file that
        replaced it (if any) is read; ``records`` is updated.

        logrotate's create mode renames the file (``s.jsonl`` → ``s.jsonl.1``) and the writer
        goes on in a new one; copytruncate copies it and truncates it in place. The lines
        written since the last poll were then only in the rotated file, which no follower reads
        (not ``*.jsonl``): they were lost without a word. The rotated file is found beside the
        old path, named after it, by inode (renamed) or by beginning with the bytes the record
        vouches for (copied); a rotation into a followed name is a rename the record follows
        (:meth:`_renamed`). Called only when the followed path changed inode, shrank or no
        longer begins with the bytes the record vouches for, or is gone: an idle poll costs
        nothing more."""
        tracked = self._tracked.get(key)
        record = (tracked.record or records.get(key)) if tracked is not None else None
        if self.once or tracked is None or record is None or key not in self._where:
            return
        rotated = _rotated_copy(Path(record.path), record)
        if rotated is None:
            return
        label, root = self._where[key]
        found = self._read(key, rotated, label, root, tracked, records, report)
        if found is None:
            return
        self._commit(self._plan([found], report), report)
        records.update(self.store.records(self.appender))

    def _gone(self, key: str, records: dict[str, FileRecord], report: PollReport,
              moved: dict[tuple[int, int], Path]) -> None:
        """A file that disappeared: its held-back end events go out now (its session is over).
        Not so for a file renamed to another followed name (``moved``: the files new to this
        poll): its new name takes its record, held-back events included (:meth:`_renamed`), and
        its turn may go on; sent here, its end came in the middle of the turn and the turn got a
        second one at its real end. A new file with its inode that does not begin with its bytes
        is another file (ext4 gives a file made after a delete the deleted one's inode at once):
        it adopts no record, and the held-back end kept for it was never sent."""
        tracked = self._tracked.pop(key)
        record = records.get(key)
        if record is not None and (record.device, record.inode) in moved:
            try:
                with moved[(record.device, record.inode)].open("rb") as handle:
                    if _begins_with(handle.read(record.offset), record):
                        return
            except OSError:
                pass
        self._release(key, tracked, record, report)

    def _release(self, key: str, tracked: _Tracked, record: FileRecord | None, report: PollReport) -> None:
        """Append the end events ``record`` holds back, as ``tracked`` knows them."""
        if record is None or not record.held or not tracked.held_events or tracked.record != record:
            return
        batch = _Batch(events=list(tracked.held_events), canonical=[None] * len(tracked.held_events))
        batch.records[key] = (record, FileRecord(**{**asdict(record), "held": (),
                                                    "released": (*record.released, *record.held)}))
        self._commit(batch, report)
        report.files += 1
        tracked.held_events = []


# Formats whose session ids name one session wherever they appear (Claude Code's are UUIDs), so
# that two files naming one are two parts of it, not two conversations numbered alike.
_SESSIONS_SPAN_FILES = frozenset({"claude-code"})


def _new_events(entries: list[Accepted | Rejected], seen: dict[str, bytes | None], report: PollReport,
                *, fmt: str) -> tuple[list[dict[str, Any]], list[bytes | None], list[Rejected]]:
    """The accepted events of ``entries`` whose ids ``seen`` lacks, with their canonical bytes,
    and the conflicts: events whose id L1 holds with other content. ``seen`` gains the new
    events' ids; a repeat of what L1 holds counts as a duplicate.

    ``seen`` maps each id to the digest of the copy L1 held before this import read it (None
    for what this file appended itself: an importer may word an end event otherwise once its
    file grew, and the first copy stands). An id another file or conversation already used is
    no duplicate but another event under the same name: dropping it without a word lost the
    second of two conversations a dataset numbered alike (``"id": "1"`` in two files); it is
    dead-lettered with its reason, as ``POST /v1/events`` reports its conflicts.

    Only for ids an importer derives from its source (``fmt`` other than ``asp``): an ASP
    file's events carry their producer's own ids, and the ASP file most often imported over
    its log is an export of it (``usl export``), whose events are the log's own, redacted and
    with their access lists: duplicates, as they always were, not thousands of conflicts."""
    events: list[dict[str, Any]] = []
    canonical: list[bytes | None] = []
    conflicts: list[Rejected] = []
    amended_ids: set[str] = set()
    for entry in entries:
        if not isinstance(entry, Accepted):
            continue
        event_id = entry.event["eventId"]
        report.logs[str(entry.event.get("logId"))] += 1
        if event_id in seen:
            held = seen[event_id]
            if held is None or fmt == "asp":
                report.duplicates += 1
                continue
            mine = entry.canonical if entry.canonical is not None else canonical_bytes(entry.event)
            digest = event_digest(mine)
            if digest == held or (fmt == "claude-code" and held in _rewritten_digests(entry.event)):
                report.duplicates += 1
            elif entry.event["type"] == "session.started" and fmt in _SESSIONS_SPAN_FILES:
                # Another file of the session started it (a resumed session goes on in a file of
                # its own) and this one says more of it (the title its summary gives): that goes
                # out once more, as a followed file's later facts do (see _amendments). L1 is
                # asked for it (_InL1.present), so a re-import sends it once.
                amended = _amended(entry.event, digest.hex())
                if amended["eventId"] in seen:
                    report.duplicates += 1
                else:
                    seen[amended["eventId"]] = None
                    amended_ids.add(amended["eventId"])
                    events.append(amended)
                    canonical.append(None)
            else:
                seen[event_id] = _CONFLICT  # the file's record keeps it (see _vouched_for)
                conflicts.append(Rejected(
                    entry.record,
                    f"event already in log {entry.event.get('logId')!r} with other content: eventId "
                    f"{event_id!r} names another event there (another file or conversation uses the "
                    "same ids, or an earlier release's importer read this record otherwise); the first "
                    "copy stands and this one was not appended: give the conversation an id of its "
                    "own, or import it into another log (--log)",
                    mine.decode("utf-8", "replace"), log_id=str(entry.event.get("logId") or "") or None))
            continue
        seen[event_id] = None
        events.append(entry.event)
        canonical.append(entry.canonical)
        report.cut += entry.cut > 0
    closers = _closers(events, amended_ids)
    return events + closers, canonical + [None] * len(closers), conflicts


def _rewritten_digests(event: dict[str, Any]) -> set[bytes]:
    """The digests of ``event`` as Claude Code writes the same message in another file. A session
    resumed (``claude --continue``) repeats its earlier lines in the new session's file, and
    Claude Code 1.0 wrote a prompt's ``"content": "say lol"`` there as ``[{"type": "text",
    "text": "say lol"}]``: the same event in every field but the source record it keeps in
    ``payload``, which made each repeated prompt a conflict dead letter."""
    payload = event.get("payload")
    message = payload.get("message") if isinstance(payload, dict) else None
    if not isinstance(payload, dict) or not isinstance(message, dict):
        return set()
    other = other_prompt_spelling(message.get("content"))
    if other is None:
        return set()
    rewritten = {**event, "payload": {**payload, "message": {**message, "content": other}}}
    return {event_digest(canonical_bytes(rewritten))}


def _closers(events: list[dict[str, Any]], amended: set[str]) -> list[dict[str, Any]]:
    """The empty turns that close what a ``session.started`` another file of its session amends
    (one of ``amended``) opens when nothing of its session after it in ``events`` does: it
    renders (its title), so it is a session-level chunk unit, and the turns of the file that
    amends it are in L1 already (the lines a resumed session's file repeats). Left open, it held
    back every later event of the log from ``indexed`` until the log went quiet."""
    sessions = {event["sessionId"] for event in events if event["eventId"] in amended}
    if not sessions:
        return []
    tails = LooseTails()
    for event in events:
        if event["sessionId"] in sessions:
            tails.feed(event)
    return tails.finish()


def _amendments(entries: list[Accepted | Rejected], seen: dict[str, bytes | None], base: FileRecord | None,
                sent: set[str], *, fmt: str) -> tuple[list[dict[str, Any]], tuple[tuple[str, str], ...]]:
    """The ``session.started`` events to append again because what the file now says of them
    changed since this file sent them, and the file's record of them (``FileRecord.started``).

    A transcript's session.started takes facts its file may state only later (Claude Code
    writes a summary, the session's title, when it likes; the first model comes with the first
    answer). An import of the grown file says them under the same eventId, and what this file
    appended itself is never compared again (the first copy stands), so a followed session
    never had its title: not in ``sessions.title``, and the ``[session] title=…`` text a one-shot
    import makes searchable was never indexed. Such a session.started goes out once more, the
    same event with its new fields under an eventId of its own (named after its content, so a
    crash mid-batch or a restart sends it once). A file whose record predates ``started``, or
    ASP events (their producer's own), are not compared."""
    known = dict(base.started) if base is not None else {}
    amended: list[dict[str, Any]] = []
    for entry in entries:
        if not isinstance(entry, Accepted) or entry.event["type"] != "session.started" or fmt == "asp":
            continue
        event_id = entry.event["eventId"]
        digest = _digest(entry).hex()
        held = seen.get(event_id)
        again = _amended(entry.event, digest)["eventId"]
        if event_id in sent or again in sent or again in seen or (held is not None and held.hex() == digest):
            # Sent now (as it is, or once more because another file of its session started it:
            # _new_events), or L1 holds this copy: what the file said of it when it went out.
            known[event_id] = digest
        elif event_id in known and known[event_id] != digest and event_id in seen and seen[event_id] is None:
            amended.append(_amended(entry.event, digest))
            known[event_id] = digest
    return amended, tuple(sorted(known.items()))


def _digest(entry: Accepted) -> bytes:
    """The digest of ``entry``'s event as L1 would hold it (its canonical bytes)."""
    return event_digest(entry.canonical if entry.canonical is not None else canonical_bytes(entry.event))


def _amended(event: dict[str, Any], digest: str) -> dict[str, Any]:
    """``event`` (a session.started) under an eventId of its own, named after its content
    (``digest``), so a crash mid-batch, a restart or a re-import sends it once."""
    event_id = event["eventId"]
    prefix = event_id.split("_", 1)[0] if "_" in event_id else "amended"
    return {**event, "eventId": stable_id(prefix, event_id, "amended", digest)}


def _continues_a_session(item: _Parsed) -> bool:
    """Whether a file made while followed is a Claude Code session file (named by a session's
    UUID) that starts another session: a session resumed in a file of its own, which repeats
    the session's lines. Its events may be in L1 already, so it is checked against L1 as a file
    no record vouches for (a new file is not, which spares reading the log for every new
    transcript, a headless run's output saved under a name of its own too): taken for new, it
    appended the session's every event a second time, and its title under the first start's
    id, which the indexes drop as a duplicate."""
    stem = item.path.stem
    return item.fmt in _SESSIONS_SPAN_FILES and _SESSION_FILE.fullmatch(stem) is not None and any(
        isinstance(entry, Accepted) and entry.event["type"] == "session.started"
        and entry.event["sessionId"] != stem for entry in item.items)


_SESSION_FILE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _amended_ids(entry: Accepted) -> tuple[str, ...]:
    """The eventId :func:`_new_events` gives ``entry`` when L1 holds its eventId with other
    content: a session.started amended (another file of its session started it)."""
    if entry.event["type"] != "session.started":
        return ()
    return (_amended(entry.event, _digest(entry).hex())["eventId"],)


def _vouched_for(before: list[Accepted | Rejected],
                 record: FileRecord) -> tuple[dict[str, bytes | None], set[str]]:
    """What a file whose first ``record.offset`` bytes say ``before`` (their import, its end
    too) appended, as ``_Tracked.appended`` and ``_Tracked.rejected`` say it: every event but
    those ``record`` holds back, its conflicts marked as such (so an import of the file says
    them again, as records an earlier import dead-lettered, not as events L1 holds), the end
    events it sent before it grew (``record.released``), and the records dead-lettered."""
    held, conflicts = set(record.held), set(record.conflicts)
    appended: dict[str, bytes | None] = {}
    rejected: set[str] = set()
    for item in before:
        if isinstance(item, Rejected):
            rejected.add(item.record)
        elif (event_id := item.event["eventId"]) in conflicts:
            appended[event_id] = _CONFLICT
            rejected.add(item.record)
        elif event_id not in held:
            appended[event_id] = None
    for event_id in record.released:
        appended.setdefault(event_id, None)
    return appended, rejected


def _conflicts(seen: dict[str, bytes | None]) -> tuple[str, ...]:
    """The eventIds :func:`_new_events` found L1 holding with other content."""
    return tuple(sorted(event_id for event_id, digest in seen.items() if digest == _CONFLICT))


def _new_rejects(entries: list[Accepted | Rejected], old_rejects: set[str]) -> list[Rejected]:
    """The rejects of ``entries`` not dead-lettered before (by their record name)."""
    return [entry for entry in entries if isinstance(entry, Rejected) and entry.record not in old_rejects]


def _resolved(entries: list[Accepted | Rejected], conflicts: list[Rejected],
              old_rejects: set[str]) -> list[tuple[str, str]]:
    """(record, log) of each record an earlier import dead-lettered (``old_rejects``) that
    ``entries`` import and no longer reject (a line cut off then, completed since)."""
    still = {entry.record for entry in [*entries, *conflicts] if isinstance(entry, Rejected)}
    resolved: dict[str, str] = {}
    for entry in entries:
        if isinstance(entry, Accepted) and entry.record in old_rejects and entry.record not in still:
            resolved.setdefault(entry.record, entry.event["logId"])
    return list(resolved.items())


def _old_rejects(entries: list[Accepted | Rejected], old_rejects: set[str]) -> list[Rejected]:
    """The rejects of ``entries`` an earlier import already dead-lettered."""
    return [entry for entry in entries if isinstance(entry, Rejected) and entry.record in old_rejects]


def _sessions(items: list[_Parsed]) -> dict[str, set[str]]:
    by_log: dict[str, set[str]] = {}
    for item in items:
        for log, sessions in _sessions_of(item.items).items():
            by_log.setdefault(log, set()).update(sessions)
    return by_log


def _is_document(fmt: str, path: Path) -> bool:
    """Whether ``path`` is read as one JSON document (only once the whole of it parses) rather
    than line by line: a ``*.json`` file, or a document format's file that is not ``*.jsonl``.
    An OpenAI-chat ``*.jsonl`` (a conversation or a message per line) grows by lines: taken as
    a document it never parsed whole, and a followed one was never imported."""
    suffix = path.suffix.lower()
    return suffix == ".json" or (fmt in DOCUMENT_FORMATS and suffix != ".jsonl")


class _InL1:
    """The eventIds L1 holds, per log, read once for all the files of one one-shot pass.

    Each file asks up to the seq L1 had when its import began; only what lies past the last
    read is read (mostly what the files before it appended), so a directory of N files reads
    L1 once instead of N times (each file had read the whole log up to its start, issue #16).
    It keeps every eventId of the log, not only those of the files' sessions: eventIds are
    unique per log (streams.ownership), and a later file's sessions are not known in advance."""

    def __init__(self, appender: Appender) -> None:
        self.appender = appender
        # log -> (read through seq, its eventIds and their digests)
        self.read: dict[str, tuple[int, dict[str, bytes | None]]] = {}

    def present(self, chunk: list[Accepted | Rejected], until: dict[str, int]) -> dict[str, bytes | None]:
        """The eventIds of ``chunk`` that L1 held at the seq ``until`` names for their log (the
        first chunk of a log sets it to L1's committed seq now), with their copies' digests."""
        present: dict[str, bytes | None] = {}
        for entry in chunk:
            if not isinstance(entry, Accepted):
                continue
            log = entry.event["logId"]
            if log not in until:
                until[log] = self.appender.committed_seq(log)
            ids = self._through(log, until[log])
            for event_id in (entry.event["eventId"], *_amended_ids(entry)):
                if event_id in ids:
                    present[event_id] = ids[event_id]
        return present

    def _through(self, log: str, seq: int) -> dict[str, bytes | None]:
        done, ids = self.read.get(log, (0, {}))
        if seq > done:
            # The first copy stands: a later one (a conflict some import left) never replaces it.
            for event_id, digest in self.appender.event_digests(log, done + 1, None, to_seq=seq).items():
                ids.setdefault(event_id, digest)
            self.read[log] = (seq, ids)
        return ids


def _sessions_of(entries: list[Accepted | Rejected]) -> dict[str, set[str]]:
    by_log: dict[str, set[str]] = {}
    for entry in entries:
        if isinstance(entry, Accepted):
            by_log.setdefault(entry.event["logId"], set()).add(entry.event["sessionId"])
    return by_log



def _inodes(paths: Iterator[Path]) -> dict[tuple[int, int], Path]:
    """(device, inode) of each of ``paths`` that still exists, and the path."""
    found: dict[tuple[int, int], Path] = {}
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        found[(stat.st_dev, stat.st_ino)] = path
    return found


def _rotated_copy(old: Path, record: FileRecord) -> Path | None:
    """The file beside ``old`` (named after it, not a followed name) that holds more than the
    bytes ``record`` vouches for, beginning with them: ``old`` renamed (the same inode) or
    copied (the same prefix) by a log rotation; None if there is none."""
    try:
        entries = list(os.scandir(old.parent))
    except OSError:
        return None
    for entry in sorted(entries, key=lambda entry: entry.name):
        if entry.name == old.name or not entry.name.startswith(old.stem) \
                or os.path.splitext(entry.name)[1].lower() in FILE_SUFFIXES:
            continue
        try:
            stat = entry.stat()
            if not entry.is_file() or stat.st_size <= record.offset:
                continue
            if (stat.st_dev, stat.st_ino) == (record.device, record.inode):
                return Path(entry.path)
            with open(entry.path, "rb") as handle:
                if _sha(handle.read(record.offset)) == record.prefix_sha:
                    return Path(entry.path)
        except OSError:
            continue
    return None


def _still_at_its_path(record: FileRecord) -> bool:
    """Whether ``record.path`` is still the file ``record`` describes: the same inode, still
    beginning with the bytes it vouches for (a file rotated by copy and truncate is not)."""
    try:
        with open(record.path, "rb") as handle:
            stat = os.fstat(handle.fileno())
            if (stat.st_dev, stat.st_ino) != (record.device, record.inode):
                return False
            return _sha(handle.read(record.offset)) == record.prefix_sha
    except OSError:
        return False


def _begins_with(data: bytes, record: FileRecord) -> bool:
    """Whether ``data`` begins with the bytes ``record`` vouches for."""
    return record.offset <= len(data) and _sha(data[: record.offset]) == record.prefix_sha


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _whole_object(line: bytes) -> bool:
    """Whether ``line`` is one whole JSON object (what a transcript line is), or whole JSON values
    one after another (a writer that lost a newline: an import reads each, ``line_parts``)."""
    value, error = parse_json(line.strip())
    if error is not None:
        parts = line_parts(line.strip())
        return parts is not None and all(whole for _start, _end, whole in parts)
    return isinstance(value, dict)


def _blank(data: bytes) -> bool:
    """Nothing but whitespace (``not data.strip()`` without copying 29 MB to find out)."""
    return not data or data.isspace()


def _first_line(data: bytes) -> bytes:
    """``data`` up to its first newline (``split`` would copy all the rest: 29 MB for 10 000 events)."""
    end = data.find(_NEWLINE)
    return data if end < 0 else data[:end]


class KafkaAppender:
    """The follower's L1: the idempotent :class:`streams.l1.L1Producer`, an :class:`L1Reader`
    to check what a log holds, and the dead-letter topic."""

    def __init__(self, bootstrap: str, settings: Any, *, prefetch: bool = False,
                 log_id: str | None = None) -> None:
        """``prefetch`` also asks for the L1 and registry topics' partitions now (see
        :meth:`streams.l1.L1Producer.prefetch_metadata`), while the registry is read;
        ``log_id`` is the log this import appends to, named in its dead letters."""
        from streams.l1 import L1Producer, L1Reader, LogRegistry

        # One registry consumer for the process: a log new to L1 is looked up again before its
        # check, its write-ahead seq and its first append, each a whole client's start otherwise.
        self.registry = LogRegistry(bootstrap, settings, keep_consumer=True, refresh=False)
        self._producer = L1Producer(bootstrap, settings, self.registry)
        self._reader = L1Reader(bootstrap, settings, self.registry)
        self._dead: DeadLetters | None = None  # made at the first reject: most imports have none
        self._bootstrap, self._settings, self._log_id = bootstrap, settings, log_id
        self.highest = 0
        steps: list[Callable[[], object]] = [self.registry.refresh]
        if prefetch:
            steps += [self._producer.prefetch_metadata, self._reader.prefetch_metadata]
        try:
            # Each is a new client's first metadata (kafka-python waits ~100 ms before it asks):
            # the waits overlap instead of adding up.
            _all_at_once(steps)
        except BaseException:
            self.close()
            raise

    def committed_seq(self, log_id: str) -> int:
        return self._reader.committed_seq(log_id)

    def append(self, event: dict[str, Any], canonical: bytes | None = None) -> None:
        self._producer.append(event, canonical)

    def flush(self) -> int:
        self.highest = self._producer.flush()
        if self._dead is not None:
            self._dead.flush()
        return self.highest

    def event_digests(self, log_id: str, from_seq: int, sessions: set[str] | None = None,
                      to_seq: int | None = None) -> dict[str, bytes | None]:
        digests: dict[str, bytes | None] = {}
        for _seq, event in self._reader.read(log_id, from_seq, to_seq, digests=True):
            if sessions is None or event.get("sessionId") in sessions:
                digests.setdefault(str(event["eventId"]), event.digest)
        return digests

    def dead_letter(self, item: Rejected) -> None:
        # A conflict names the log whose copy stands, not the import's --log (an ASP event
        # names its own log and goes there, whatever --log says).
        self._dead_letters().publish(stage="ingest", reason=item.reason, record=item.record, raw=item.raw,
                                     log_id=item.log_id or self._log_id)

    def resolve_dead_letter(self, record: str, log_id: str) -> None:
        self._dead_letters().resolve(stage="ingest", record=record, log_id=log_id)

    def _dead_letters(self) -> DeadLetters:
        """The dead-letter producer, made at the first letter (most imports write none)."""
        if self._dead is None:
            from streams.l1 import DeadLetters

            self._dead = DeadLetters(self._bootstrap, self._settings)
        return self._dead

    def close(self, *, wait: bool = True) -> None:
        """Close every client; ``wait``: first wait for what is queued (else drop it at once)."""
        try:
            self._producer.close(wait=wait)
            if self._dead is not None:
                self._dead.close(wait=wait)
        finally:
            self._reader.close()
            self.registry.close()


def _in_background(step: Callable[[], _T], name: str) -> Future[_T]:
    """``step`` run on a daemon thread of its own; the future holds its result or its error (for
    the caller's thread to raise). A daemon thread, not an executor's: interpreter exit never
    waits for a broker that does not answer."""
    done: Future[_T] = Future()

    def run() -> None:
        try:
            done.set_result(step())
        except BaseException as exc:
            done.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return done


def _all_at_once(steps: list[Callable[[], object]]) -> None:
    """Run ``steps`` on threads of their own (the first on this one); once every one is done,
    raise an error any of them raised (this thread's first)."""
    others = [_in_background(step, "usl-connect") for step in steps[1:]]
    try:
        steps[0]()
    finally:
        for future in others:
            future.exception()  # waits for the step, whatever this thread's did
    for future in others:
        if (error := future.exception()) is not None:
            raise error


class ConnectingAppender:
    """A :class:`KafkaAppender` made by ``connect`` on a thread of its own, so a follower reads
    and imports its files while the clients connect (and the CLI's topics are ensured): the one
    is CPU, the other mostly waiting for the broker. Every call that needs L1 waits until the
    appender is made, and raises what making it raised.

    A follower needs L1 first to finish a batch left written ahead, then to check files no
    record vouches for, so a first poll usually imports everything before it waits."""

    def __init__(self, connect: Callable[[], KafkaAppender]) -> None:
        self._made = _in_background(connect, "usl-connect")

    def ready(self) -> KafkaAppender:
        """The appender, once made (raises what making it raised)."""
        return self._made.result()

    @property
    def registry(self) -> Any:
        return self.ready().registry

    @property
    def highest(self) -> int:
        return self.ready().highest

    def committed_seq(self, log_id: str) -> int:
        return self.ready().committed_seq(log_id)

    def append(self, event: dict[str, Any], canonical: bytes | None = None) -> None:
        self.ready().append(event, canonical)

    def flush(self) -> int:
        return self.ready().flush()

    def event_digests(self, log_id: str, from_seq: int, sessions: set[str] | None = None,
                      to_seq: int | None = None) -> dict[str, bytes | None]:
        return self.ready().event_digests(log_id, from_seq, sessions, to_seq)

    def dead_letter(self, item: Rejected) -> None:
        self.ready().dead_letter(item)

    def resolve_dead_letter(self, record: str, log_id: str) -> None:
        self.ready().resolve_dead_letter(record, log_id)

    def close(self, *, wait: bool = True) -> None:
        """Close the appender once made (waiting for it); nothing when making it failed."""
        if self._made.exception() is None:
            self._made.result().close(wait=wait)
