"""In-memory chunk metadata and session access lists of a structured generation.

A query needs, per candidate chunk, its session and ``maxSeq`` (to judge vector candidates),
its event time (to fuse), and for the page its ids and evidence offsets; it also needs the
chunks straddling its cut. Scanning the generation's Parquet files for that on every query
costs a full scan each time, so the planner keeps this compact table instead.

It is built from the generation's ``chunks-<n>.parquet`` segments (schema:
:data:`sinks.structured.SCHEMAS`). Segment files are immutable and shared by hard link with
every later generation, so each one is loaded once and reused when the next generation
arrives: a new generation costs only its new segments. A chunk id present in several segments
takes its row from the newest one (an upsert).

:func:`session_acls` gives what :meth:`sinks.structured.StructuredReader.session_acls` gives
(each session's acl on its highest-seq event; a session known only from chunks gets its
newest chunk's acl), computed per segment in the same incremental way.

Both read one generation or, for a structured index written by sink shards, every shard's
pinned generation as one (:mod:`sinks.shard_tables`: a session's rows live in one shard).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

import pyarrow.parquet as pq

from sinks.shard_tables import GenerationDirs, shard_segments
from sinks.text.base import chunk_key, unique_keys

__all__ = ["ChunkRow", "ChunkTable", "SegmentCache", "session_acls"]

_RECORD_CACHE_SIZE = 100_000
_COLUMNS = ("chunkId", "sessionId", "runId", "turnId", "episodeId", "minSeq", "maxSeq",
            "startTime", "eventTime", "evidence")


class ChunkRow(NamedTuple):
    """What the planner needs of one chunk (``evidence`` as JSON text, parsed on demand)."""

    session_id: str
    run_id: str | None
    turn_id: str | None
    episode_id: str | None
    min_seq: int
    max_seq: int
    start_time: float | None
    event_time: float | None
    evidence: str

    def record(self, chunk_id: str) -> dict[str, Any]:
        """The row as the dict the planner's result rows and trimming read."""
        return _record(chunk_id, self)


# The tables hold each row as a plain tuple in ChunkRow's field order: the cyclic garbage
# collector stops tracking a tuple of strings and numbers, never an instance of a tuple subclass
# such as ChunkRow, so a table of NamedTuples added one object per chunk to every full
# collection (435 000 tracked objects at 300k chunks; each full collection a p99 spike).
_Row = tuple[str, str | None, str | None, str | None, int, int, float | None,
             float | None, str]
_SESSION: Final = 0
_MIN_SEQ: Final = 4
_MAX_SEQ: Final = 5


def _record(chunk_id: str, row: _Row) -> dict[str, Any]:
    session, run, turn, episode, low, high, start, when, evidence = row
    return {"chunkId": chunk_id, "sessionId": session, "runId": run, "turnId": turn,
            "episodeId": episode, "minSeq": low, "maxSeq": high, "startTime": start,
            "eventTime": when, "evidence": json.loads(evidence or "[]")}


@dataclass(frozen=True)
class _Segment:
    rows: dict[str, _Row]
    max_seq: int
    # chunk_key(id) -> id for the segment's ids (all of them unless two share a key).
    keys: dict[int, str]


# sessionId -> ((seq, priority), acl): events (priority 1) win over chunks at the same seq.
_Acls = dict[str, tuple[tuple[int, int], dict[str, Any]]]


class SegmentCache:
    """What was loaded from each Parquet segment, keyed by what and file identity (name,
    inode, size): a hard link shared by later generations is the same file."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._items: OrderedDict[tuple[str, str, int, int], Any] = OrderedDict()
        self._lock = threading.Lock()

    def load(self, path: Path) -> _Segment:
        return self._get("rows", path, lambda: _load_chunks(path))  # type: ignore[no-any-return]

    def load_acls(self, path: Path, *, from_chunks: bool) -> _Acls:
        return self._get("acls", path, lambda: _load_acls(path, from_chunks))  # type: ignore[no-any-return]

    def _get(self, what: str, path: Path, load: Any) -> Any:
        stat = path.stat()
        key = (what, path.name, stat.st_ino, stat.st_size)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = load()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value


def _load_chunks(path: Path) -> _Segment:
    table = pq.read_table(path, columns=list(_COLUMNS)).to_pydict()
    rows = {
        chunk_id: (session, run, turn, episode, int(low), int(high), start, when, evidence or "[]")
        for chunk_id, session, run, turn, episode, low, high, start, when, evidence in zip(
            *(table[name] for name in _COLUMNS), strict=True)
    }
    keys = {chunk_key(chunk_id): chunk_id for chunk_id in rows}
    return _Segment(rows, max((row[_MAX_SEQ] for row in rows.values()), default=0), keys)


def _load_acls(path: Path, from_chunks: bool) -> _Acls:
    seq_column, priority = ("maxSeq", 0) if from_chunks else ("seq", 1)
    table = pq.read_table(path, columns=["sessionId", seq_column, "tenant", "aclRead"]).to_pydict()
    best: _Acls = {}
    for session_id, seq, tenant, read in zip(table["sessionId"], table[seq_column],
                                             table["tenant"], table["aclRead"], strict=True):
        rank = (int(seq), priority)
        if session_id not in best or rank >= best[session_id][0]:
            acl: dict[str, Any] = {"tenant": tenant}
            if read is not None:
                acl["read"] = list(read)
            best[session_id] = (rank, acl)
    return best


def session_acls(gen_dirs: GenerationDirs, segments: SegmentCache) -> dict[str, dict[str, Any]]:
    """sessionId → the acl on the session's highest-seq event (or newest chunk) in a
    structured generation (or every shard's of a sharded one)."""
    best: _Acls = {}
    for table, from_chunks in (("sessions", False), ("chunks", True)):
        for path in shard_segments(gen_dirs, table):
            for session_id, (rank, acl) in segments.load_acls(path, from_chunks=from_chunks).items():
                if session_id not in best or rank >= best[session_id][0]:
                    best[session_id] = (rank, acl)
    return {session_id: acl for session_id, (_, acl) in best.items()}


class ChunkTable:
    """Every chunk of one structured generation (or of every shard's): id → :class:`ChunkRow`."""

    def __init__(self, gen_dirs: GenerationDirs, segments: SegmentCache) -> None:
        loaded = [segments.load(path) for path in shard_segments(gen_dirs, "chunks")]
        self.rows: dict[str, _Row] = {}
        for segment in loaded:
            self.rows.update(segment.rows)
        # Straddlers hold evidence past the cut, so only segments reaching past it can hold one.
        self._segments = loaded
        self._keys: dict[int, str] | None = None
        # Decoded records: a candidate is looked up by several queries of one generation.
        self._records: dict[str, dict[str, Any]] = {}

    @property
    def chunk_keys(self) -> dict[int, str]:
        """:func:`sinks.text.base.chunk_key` → chunkId for every chunk of the generation whose
        key no other chunk shares (built once per generation from the per-segment maps)."""
        keys = self._keys
        if keys is None:
            keys = {}
            for segment in self._segments:
                keys.update(segment.keys)
            if len(keys) != len(self.rows):  # two ids share a key: leave that key out
                keys = unique_keys(self.rows)
            self._keys = keys
        return keys

    def get(self, chunk_id: str) -> ChunkRow | None:
        row = self.rows.get(chunk_id)
        return ChunkRow._make(row) if row is not None else None

    def admits(self, cut: int, sessions: AbstractSet[str] | None,
               only: Collection[str] | None) -> Callable[[str], bool]:
        """Whether a chunk id is one of the generation's with ``maxSeq <= cut``, of
        ``sessions`` and in ``only`` (None: any)."""
        rows = self.rows

        def admitted(chunk_id: str) -> bool:
            row = rows.get(chunk_id)
            return (row is not None and row[_MAX_SEQ] <= cut
                    and (sessions is None or row[_SESSION] in sessions)
                    and (only is None or chunk_id in only))

        return admitted

    def records(self, chunk_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """chunkId → record for the ids the generation holds. The records are shared by every
        caller of this table: read them, never change them."""
        found: dict[str, dict[str, Any]] = {}
        cache = self._records
        for chunk_id in chunk_ids:
            record = cache.get(chunk_id)
            if record is None:
                row = self.rows.get(chunk_id)
                if row is None:
                    continue
                if len(cache) >= _RECORD_CACHE_SIZE:
                    cache.clear()
                record = cache[chunk_id] = _record(chunk_id, row)
            found[chunk_id] = record
        return found

    def straddling(self, cut: int, session_ids: Collection[str] | None) -> list[dict[str, Any]]:
        """Records of chunks with ``minSeq <= cut < maxSeq`` (of ``session_ids``; None: any),
        ordered by chunkId."""
        found: dict[str, dict[str, Any]] = {}
        for segment in self._segments:
            if segment.max_seq <= cut:
                continue
            for chunk_id, row in segment.rows.items():
                if (row[_MIN_SEQ] <= cut < row[_MAX_SEQ] and self.rows.get(chunk_id) is row
                        and (session_ids is None or row[_SESSION] in session_ids)):
                    found[chunk_id] = _record(chunk_id, row)
        return [found[chunk_id] for chunk_id in sorted(found)]
