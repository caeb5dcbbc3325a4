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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.parquet as pq

from sinks.shard_tables import GenerationDirs, shard_segments
from sinks.text.base import chunk_key, unique_keys

__all__ = ["ChunkRow", "ChunkTable", "SegmentCache", "session_acls"]

_RECORD_CACHE_SIZE = 100_000
# Decoded records added between two calls of a table's ``on_growth`` (see ChunkTable).
_GROWTH_STEP = 10_000
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
        return {"chunkId": chunk_id, "sessionId": self.session_id, "runId": self.run_id,
                "turnId": self.turn_id, "episodeId": self.episode_id, "minSeq": self.min_seq,
                "maxSeq": self.max_seq, "startTime": self.start_time,
                "eventTime": self.event_time, "evidence": json.loads(self.evidence or "[]")}


@dataclass(frozen=True)
class _Segment:
    rows: dict[str, ChunkRow]
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
        chunk_id: ChunkRow(session, run, turn, episode, int(low), int(high), start, when,
                           evidence or "[]")
        for chunk_id, session, run, turn, episode, low, high, start, when, evidence in zip(
            *(table[name] for name in _COLUMNS), strict=True)
    }
    keys = {chunk_key(chunk_id): chunk_id for chunk_id in rows}
    return _Segment(rows, max((row.max_seq for row in rows.values()), default=0), keys)


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
    """Every chunk of one structured generation (or of every shard's): id → :class:`ChunkRow`.

    ``on_growth`` is called after every ``_GROWTH_STEP`` records decoded into the table's
    cache: each is a dict and a list or more that Python's full collections walk, 50 000
    records after a few hundred queries at 100k chunks, so the planner freezes them as it does
    the table (:class:`planner.readers.CollectorShelter`)."""

    def __init__(self, gen_dirs: GenerationDirs, segments: SegmentCache, *,
                 on_growth: Callable[[], None] | None = None) -> None:
        loaded = [segments.load(path) for path in shard_segments(gen_dirs, "chunks")]
        self.rows: dict[str, ChunkRow] = {}
        for segment in loaded:
            self.rows.update(segment.rows)
        # Straddlers hold evidence past the cut, so only segments reaching past it can hold one.
        self._segments = loaded
        self._keys: dict[int, str] | None = None
        # Decoded records: a candidate is looked up by several queries of one generation.
        self._records: dict[str, dict[str, Any]] = {}
        self._on_growth = on_growth
        self._grown = 0

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
        return self.rows.get(chunk_id)

    def records(self, chunk_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """chunkId → record for the ids the generation holds. The records are shared by every
        caller of this table: read them, never change them."""
        found: dict[str, dict[str, Any]] = {}
        cache = self._records
        added = 0
        for chunk_id in chunk_ids:
            record = cache.get(chunk_id)
            if record is None:
                row = self.rows.get(chunk_id)
                if row is None:
                    continue
                if len(cache) >= _RECORD_CACHE_SIZE:
                    cache.clear()
                record = cache[chunk_id] = row.record(chunk_id)
                added += 1
            found[chunk_id] = record
        if added and self._on_growth is not None:
            self._grown += added  # unlocked: a lost count only delays the next call
            if self._grown >= _GROWTH_STEP:
                self._grown = 0
                self._on_growth()
        return found

    def straddling(self, cut: int, session_ids: Collection[str] | None) -> list[dict[str, Any]]:
        """Records of chunks with ``minSeq <= cut < maxSeq`` (of ``session_ids``; None: any),
        ordered by chunkId."""
        found: dict[str, dict[str, Any]] = {}
        for segment in self._segments:
            if segment.max_seq <= cut:
                continue
            for chunk_id, row in segment.rows.items():
                if (row.min_seq <= cut < row.max_seq and self.rows.get(chunk_id) is row
                        and (session_ids is None or row.session_id in session_ids)):
                    found[chunk_id] = row.record(chunk_id)
        return [found[chunk_id] for chunk_id in sorted(found)]
