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

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
import orjson
import pyarrow.parquet as pq

from sinks.shard_tables import GenerationDirs, shard_segments
from sinks.text.base import chunk_key, unique_keys

__all__ = ["ChunkRow", "ChunkTable", "SegmentCache", "SessionAcls", "VectorSegment", "session_acls"]

_RECORD_CACHE_SIZE = 100_000
#: Vector segments whose row map a table keeps (each is a weak entry that goes with its
#: segment; the bound only matters if readers keep many segments open).
_VECTOR_ROW_MAPS = 64
#: Readable-session sets whose per-code bools are kept (one per principal and generation in use).
_READABLE_SETS = 16
#: Row masks a table keeps (one per vector segment, readable set and cut; 1 byte a row).
_MASKS = 32
_NEVER = np.iinfo(np.int64).max
"""maxSeq of a vector row whose chunk the table lacks: above any cut."""
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
                # orjson: a query over a million chunks decodes ~240 rows the cache has not seen
                # (5 µs each with json, 0.75 µs with orjson; the same objects).
                "eventTime": self.event_time, "evidence": orjson.loads(self.evidence or "[]")}


@dataclass(frozen=True)
class _Segment:
    rows: dict[str, ChunkRow]
    max_seq: int
    # chunk_key(id) -> id for the segment's ids (all of them unless two share a key).
    keys: dict[int, str]


class _Acls(dict[str, tuple[tuple[int, int], dict[str, Any]]]):
    """One segment's sessionId -> ((seq, priority), acl): events (priority 1) win over chunks
    at the same seq. A class of its own so that the :class:`SegmentCache` can refer to it weakly."""

    __slots__ = ("__weakref__",)


class SessionAcls(dict[str, dict[str, Any]]):
    """sessionId → access list of a generation (:func:`session_acls`). ``sources``: the
    per-segment lists it was built from, held so that the :class:`SegmentCache` keeps them
    while the map is in use (the next generation shares most of its segments)."""

    __slots__ = ("sources",)
    sources: tuple[_Acls, ...]


class SegmentCache:
    """What was loaded from each Parquet segment, keyed by what and file identity (name,
    inode, size): a hard link shared by later generations is the same file.

    An entry lives while a table built from it does (a :class:`ChunkTable` holds its
    segments, a :class:`SessionAcls` its sources), not by count: the planner keeps the tables
    of the newest generations, so the next generation, which shares most files with them,
    reuses their segments, while a segment that compaction merged away goes with the last
    table that read it. (Kept by count, every merge of a table's small segments stayed loaded:
    at a commit every 2 s, dozens of copies of each chunk's row within the hour.)"""

    def __init__(self) -> None:
        self._items: weakref.WeakValueDictionary[tuple[str, str, int, int], Any] = \
            weakref.WeakValueDictionary()
        self._lock = threading.Lock()
        self.row_maps = _RowMaps()

    def __len__(self) -> int:
        return len(self._items)

    def load(self, path: Path) -> _Segment:
        return self._get("rows", path, lambda: _load_chunks(path))  # type: ignore[no-any-return]

    def load_acls(self, path: Path, *, from_chunks: bool) -> _Acls:
        return self._get("acls", path, lambda: _load_acls(path, from_chunks))  # type: ignore[no-any-return]

    def _get(self, what: str, path: Path, load: Any) -> Any:
        stat = path.stat()
        key = (what, path.name, stat.st_ino, stat.st_size)
        with self._lock:
            value = self._items.get(key)
        if value is not None:
            return value
        value = load()
        with self._lock:
            return self._items.setdefault(key, value)  # two threads loaded it: both get one


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
    best = _Acls()
    for session_id, seq, tenant, read in zip(table["sessionId"], table[seq_column],
                                             table["tenant"], table["aclRead"], strict=True):
        rank = (int(seq), priority)
        if session_id not in best or rank >= best[session_id][0]:
            acl: dict[str, Any] = {"tenant": tenant}
            if read is not None:
                acl["read"] = list(read)
            best[session_id] = (rank, acl)
    return best


def session_acls(gen_dirs: GenerationDirs, segments: SegmentCache) -> SessionAcls:
    """sessionId → the acl on the session's highest-seq event (or newest chunk) in a
    structured generation (or every shard's of a sharded one)."""
    sources = tuple(segments.load_acls(path, from_chunks=from_chunks)
                    for table, from_chunks in (("sessions", False), ("chunks", True))
                    for path in shard_segments(gen_dirs, table))
    best: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
    for source in sources:
        for session_id, (rank, acl) in source.items():
            if session_id not in best or rank >= best[session_id][0]:
                best[session_id] = (rank, acl)
    acls = SessionAcls((session_id, acl) for session_id, (_, acl) in best.items())
    acls.sources = sources
    return acls


class VectorSegment(Protocol):
    """What a row mask needs of an open vector segment (:class:`sinks.vector.faiss_index`):
    its chunkIds row by row, and chunkId -> row. It lives as long as the segment is open."""

    @property
    def chunk_ids(self) -> Sequence[str]: ...

    @property
    def rows(self) -> Mapping[str, int]: ...


@dataclass(frozen=True)
class _RowMap:
    """A vector segment's rows as (session code, maxSeq) under one table: the row of the chunk
    in the last of ``parts`` (the table's Parquet segments, in order) that holds it; code -1 and
    the largest int64 where none does. ``ids``: the chunkIds list it was built from."""

    parts: tuple[Any, ...]
    ids: Sequence[str]
    session: np.ndarray  # int32
    max_seq: np.ndarray  # int64


class _RowMaps:
    """What the row maps share across tables (one per :class:`SegmentCache`): session codes,
    which only grow, and per vector segment (weakly) its newest map, which the next
    generation's table extends with its new Parquet segments instead of building anew."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.newest: weakref.WeakKeyDictionary[Any, _RowMap] = weakref.WeakKeyDictionary()
        self.lock = threading.Lock()
        # id(sessions) -> (sessions, codes known, bool per code). The access lists hand every
        # query of a principal and generation the same frozenset, so this is computed once
        # per (readable set, session count), not per query; the set is held, so its id is not
        # reused while the entry lives.
        self._readable: OrderedDict[int, tuple[AbstractSet[str], int, np.ndarray]] = OrderedDict()

    def code(self, session_id: str) -> int:
        # Under ``lock``: two threads must never give two sessions one code.
        return self.codes.setdefault(session_id, len(self.codes))

    def readable(self, sessions: AbstractSet[str]) -> np.ndarray:
        """One bool per session code, True for ``sessions``, and a last False for code -1 (no
        session). Sized to the codes known now: every map built before holds none beyond them."""
        with self.lock:
            count = len(self.codes)
            found = self._readable.get(id(sessions))
            if found is not None and found[0] is sessions and found[1] == count:
                self._readable.move_to_end(id(sessions))
                return found[2]
            known = np.zeros(count + 1, dtype=bool)
            if sessions:
                listed = np.fromiter(map(self.codes.get, sessions, repeat(-1)), dtype=np.int64,
                                     count=len(sessions))
                known[listed[listed >= 0]] = True
            self._readable[id(sessions)] = (sessions, count, known)
            while len(self._readable) > _READABLE_SETS:
                self._readable.popitem(last=False)
            return known


class _MaskCache:
    """The last few row masks of a table, by (row map, readable set, cut). The map and the set
    are held with their mask, so neither id is reused while the entry lives; a mask is never
    changed after it is made (the vector search only reads it)."""

    def __init__(self, size: int = _MASKS) -> None:
        self._size = size
        self._items: OrderedDict[tuple[int, int, int], tuple[_RowMap, Any, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, found: _RowMap, sessions: AbstractSet[str] | None, cut: int,
            make: Callable[[], np.ndarray]) -> np.ndarray:
        key = (id(found), id(sessions), cut)
        with self._lock:
            item = self._items.get(key)
            if item is not None and item[0] is found and item[1] is sessions:
                self._items.move_to_end(key)
                return item[2]
        made = make()
        made.flags.writeable = False
        with self._lock:
            self._items[key] = (found, sessions, made)
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return made


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
        self._maps = segments.row_maps
        self._row_maps: weakref.WeakKeyDictionary[Any, _RowMap] = weakref.WeakKeyDictionary()
        self._masks = _MaskCache()

    def row_map(self, segment: VectorSegment) -> _RowMap:
        """Vector segment ``segment``'s rows as (session code, maxSeq) under this table, built
        once per (segment, table) and kept weakly, so it goes with the segment (and with the
        table). A table whose Parquet segments extend those of the segment's newest map (the
        next generation of an unsharded index: new segments appended) patches a copy of it
        with the rows of its new Parquet segments, O(new chunks); otherwise (the first table,
        compacted or sharded segments) it is built from every row of the segment."""
        chunk_ids = segment.chunk_ids
        found = self._row_maps.get(segment)
        if found is not None and found.ids is chunk_ids:
            return found
        maps = self._maps
        with maps.lock:
            parts = tuple(self._segments)
            newest = maps.newest.get(segment)
            if (newest is not None and newest.ids is chunk_ids and len(newest.parts) <= len(parts)
                    and all(a is b for a, b in zip(newest.parts, parts, strict=False))):
                session, max_seq = newest.session.copy(), newest.max_seq.copy()
                rows = segment.rows
                for part in parts[len(newest.parts):]:
                    for chunk_id, row in part.rows.items():
                        position = rows.get(chunk_id)
                        if position is not None:
                            session[position], max_seq[position] = maps.code(row.session_id), row.max_seq
            else:
                found_rows = list(map(self.rows.get, chunk_ids))
                session = np.fromiter((-1 if row is None else maps.code(row.session_id) for row in found_rows),
                                      dtype=np.int32, count=len(chunk_ids))
                max_seq = np.fromiter((_NEVER if row is None else row.max_seq for row in found_rows),
                                      dtype=np.int64, count=len(chunk_ids))
            built = _RowMap(parts, chunk_ids, session, max_seq)
            if newest is None or len(newest.parts) <= len(parts):
                maps.newest[segment] = built
            if len(self._row_maps) >= _VECTOR_ROW_MAPS:
                self._row_maps.clear()
            self._row_maps[segment] = built
        return built

    def row_filter(self, cut: int, sessions: AbstractSet[str] | None,
                   only: Collection[str] | None) -> Callable[[VectorSegment], np.ndarray]:
        """The vector engine's row mask (:data:`sinks.vector.faiss_index.RowMask`): True for
        the rows whose chunk this table holds with ``maxSeq <= cut``, of ``sessions`` (None:
        any) and among ``only`` (None: any), what the planner's per-chunk check judges, as a
        few vectorized operations per segment. ``sessions`` is not changed while the mask is in
        use (the access lists' frozensets never are)."""

        def mask(segment: VectorSegment) -> np.ndarray:
            found = self.row_map(segment)
            if only is None:
                # The queries of one principal between two commits ask for the same mask: it
                # cost 2 ms a query over a million chunks, as much as a segment's graph walk.
                return self._masks.get(found, sessions, cut, lambda: base(found))
            allowed = base(found)
            rows = segment.rows
            listed = np.zeros(len(allowed), dtype=bool)
            listed[[rows[chunk_id] for chunk_id in only if chunk_id in rows]] = True
            return allowed & listed

        def base(found: _RowMap) -> np.ndarray:
            allowed = found.max_seq <= cut
            if sessions is not None:
                allowed &= self._maps.readable(sessions)[found.session]
            return allowed

        return mask

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
