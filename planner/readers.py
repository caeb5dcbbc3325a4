"""Opening the pinned index generations a query reads, and the readers over them.

A query pins one generation per index kind for its lifetime (a file pin, so GC in any process
keeps the files); a cursor's next page re-pins the very generations the first page read.
Readers are cached per generation directory: a committed generation never changes, so a
reader opened once stays valid until its directory is collected.

Kinds and what the planner reads of them:

- ``structured``: chunk metadata (ids, seq range, times, evidence offsets), straddling chunks,
  filters and each session's latest access list (:class:`sinks.structured.StructuredReader`);
- ``text``: the full-text ranking and each chunk's stored redacted text;
- ``vector``: faiss segments (:class:`sinks.vector.VectorReader`);
- ``toolresults``: the ACL-isolated full tool results (:class:`sinks.toolresults.ToolResultsReader`).

Sink shards (:mod:`sinks.shards`): a kind written by N shards is pinned as one
:class:`IndexPin` whose ``parts`` are the shards' pinned generations. The ``text``, ``vector``
and ``toolresults`` readers search every part and merge the hits as one index would order them
(score desc, then id), and read stored texts from whichever part holds a chunk. The
``structured`` (and, in :mod:`planner.sql`, ``analytics``) readers read each table as the
union of the parts' tables (:mod:`sinks.shard_tables`): a session's rows live in one shard.
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

from planner.chunktable import ChunkTable, SegmentCache, session_acls
from planner.exceptions import CursorExpired
from sinks.exceptions import GenerationError
from sinks.generations import GenerationStore, Manifest, Pin
from sinks.shard_tables import shard_scan_sql
from sinks.structured import SCHEMAS, StructuredReader
from sinks.text import TextEngine, get_engine
from sinks.text.base import TextHit

__all__ = [
    "SHARDABLE_KINDS",
    "CollectorShelter",
    "IndexPin",
    "ReaderCache",
    "pin_for_cursor",
    "pin_for_query",
    "vector_segment_names",
]

_T = TypeVar("_T")
SHARDABLE_KINDS = frozenset({"text", "vector", "toolresults", "structured", "analytics"})
"""Kinds the planner reads when sink shards write them: ranked lists merged by score (text,
vector, tool results), tables read as the union of the shards' (structured, analytics)."""
_RESTART = "Run the query again without a cursor."


@dataclass
class IndexPin:
    """One pinned generation: what it is, where it lives, and the pin that keeps it."""

    kind: str
    line: str
    generation_id: int
    built_through_seq: int
    directory: Path
    manifest: Manifest
    pin: Pin
    shard: str | None = None
    """``shard-I-of-N`` for one shard's generation (a part of a sharded pin)."""
    parts: tuple[IndexPin, ...] = ()
    """A sharded kind: every shard's pinned generation, in shard order. The pin's own fields
    are those of the slowest shard, ``built_through_seq`` the minimum over the shards."""

    @property
    def watermark(self) -> tuple[int, int]:
        return (self.generation_id, self.built_through_seq)

    @property
    def shards(self) -> tuple[IndexPin, ...]:
        """The generations this pin holds: its parts, or itself when the kind is unsharded."""
        return self.parts or (self,)

    @property
    def directories(self) -> tuple[Path, ...]:
        """The generation directory of every shard (one when the kind is unsharded)."""
        return tuple(part.directory for part in self.shards)

    @property
    def key(self) -> str:
        """What identifies the pinned data, for caches: the directories of every shard (a
        sharded pin's own ``directory`` is only its slowest shard's)."""
        return "|".join(str(directory) for directory in self.directories)

    def release(self) -> None:
        for part in self.shards:
            part.pin.release()

    def keep_for(self, ttl_seconds: float) -> None:
        """Extend the pins (while a cursor may still read these generations)."""
        for part in self.shards:
            try:
                part.pin.renew(ttl_seconds)
            except GenerationError:
                pass  # released meanwhile: the next page will re-pin or say the page is gone


def sharded_pin(kind: str, parts: list[IndexPin]) -> IndexPin:
    """One pin over every shard's generation of ``kind`` (see :attr:`IndexPin.parts`)."""
    slowest = min(parts, key=lambda part: (part.built_through_seq, part.shard or ""))
    return replace(slowest, parts=tuple(parts))


def pin_for_query(
    root: Path, log_id: str, kind: str, watermark: Mapping[str, Any] | None, *,
    ttl_seconds: float, holder: str,
) -> IndexPin | None:
    """Pin the generation ``watermark`` names (on its line), or, if that one was collected
    meanwhile, the current generation of the active line. None without a watermark.

    A sharded watermark (with ``shards``) pins every shard's generation the same way, as one
    pin (:func:`sharded_pin`); GenerationError for a kind the planner does not read sharded
    or a shard without any generation."""
    if watermark is None:
        return None
    shards = watermark.get("shards")
    if not isinstance(shards, Mapping) or not shards:
        return _pin_named(root, log_id, kind, watermark, None, ttl_seconds=ttl_seconds, holder=holder)
    if kind not in SHARDABLE_KINDS:
        raise GenerationError(f"the {kind} index is written by {len(shards)} sink shards; this planner "
                              f"reads sharded {' and '.join(sorted(SHARDABLE_KINDS))} indexes only: "
                              f"run the {kind} sink as one shard")
    parts: list[IndexPin] = []
    try:
        for name, record in sorted(shards.items()):
            part = _pin_named(root, log_id, kind, record, str(name), ttl_seconds=ttl_seconds,
                              holder=holder)
            if part is None:
                raise GenerationError(f"{kind} shard {name} has no generation")
            parts.append(part)
    except BaseException:
        for part in parts:
            part.release()
        raise
    return sharded_pin(kind, parts)


def _pin_named(
    root: Path, log_id: str, kind: str, watermark: Mapping[str, Any], shard: str | None, *,
    ttl_seconds: float, holder: str,
) -> IndexPin | None:
    line = str(watermark.get("line") or "") or None
    try:
        store = GenerationStore(root, log_id, kind, line, shard=shard)
        pin = store.pin(int(watermark["generationId"]), ttl_seconds=ttl_seconds, holder=holder)
        return _pinned(store, kind, pin)
    except (GenerationError, KeyError, TypeError, ValueError):
        pass
    store = GenerationStore(root, log_id, kind, shard=shard)
    pinned = store.pin_current(ttl_seconds=ttl_seconds, holder=holder)
    if pinned is None:
        return None
    manifest, pin = pinned
    return IndexPin(kind, store.line, manifest.generation_id, manifest.built_through_seq,
                    store.generation_dir(manifest.generation_id), manifest, pin, shard)


def pin_for_cursor(
    root: Path, log_id: str, kind: str, generation_id: int, line: str | None, *,
    ttl_seconds: float, holder: str, shards: Mapping[str, Any] | None = None,
) -> IndexPin:
    """Re-pin the generation a cursor binds (with ``shards``, shard name → [generationId,
    line]: every shard's); :class:`CursorExpired` (410) if one is gone."""
    parts: list[IndexPin] = []
    try:
        wanted = ([(str(name), int(value[0]), value[1]) for name, value in sorted(shards.items())]
                  if shards else [(None, int(generation_id), line)])
        for shard, shard_generation, shard_line in wanted:
            store = GenerationStore(root, log_id, kind, shard_line, shard=shard)
            pin = store.pin(shard_generation, ttl_seconds=ttl_seconds, holder=holder)
            parts.append(_pinned(store, kind, pin))
    except (GenerationError, TypeError, ValueError, IndexError):
        for part in parts:
            part.release()
        raise CursorExpired(
            f"the {kind} index generation this cursor reads no longer exists",
            hint=_RESTART,
        ) from None
    return parts[0] if not shards else sharded_pin(kind, parts)


def _load_manifest(store: GenerationStore, generation_id: int) -> Manifest:
    """A committed manifest, kept by file identity (path, inode, mtime, size): a committed
    ``manifest.json`` is never rewritten in place, and parsing and checksumming one costs per
    file it lists (one Parquet segment per structured commit: ~5 ms a query at 300k chunks)."""
    path = store.manifest_path(generation_id)
    try:
        stat = path.stat()
    except FileNotFoundError:
        return store.load(generation_id)  # says which generation does not exist
    return _MANIFESTS.get((str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size),
                          lambda: store.load(generation_id))


def _pinned(store: GenerationStore, kind: str, pin: Pin) -> IndexPin:
    try:
        manifest = _load_manifest(store, pin.generation_id)
    except GenerationError:
        pin.release()
        raise
    return IndexPin(kind, store.line, manifest.generation_id, manifest.built_through_seq,
                    store.generation_dir(manifest.generation_id), manifest, pin, store.shard)


def vector_segment_names(gen_dir: Path, manifest: Manifest) -> list[str]:
    """The faiss segments of a vector generation: ``extra.segments``, ``segments.json``, or
    every complete segment in the directory (a segment's ``.ids.json`` is written last)."""
    listed = manifest.extra.get("segments")
    if isinstance(listed, list) and all(isinstance(name, str) for name in listed):
        return list(listed)
    index_file = gen_dir / "segments.json"
    if index_file.exists():
        names = orjson.loads(index_file.read_bytes())
        if isinstance(names, list):
            return [str(name) for name in names]
    return sorted(p.name[: -len(".ids.json")] for p in gen_dir.glob("*.ids.json"))


class _Lru(Generic[_T]):
    """A small thread-safe LRU of objects opened per generation directory."""

    def __init__(self, size: int, close: Callable[[_T], None] | None = None) -> None:
        self._size = size
        self._close = close
        self._items: OrderedDict[Hashable, _T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, open_: Callable[[], _T]) -> _T:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = open_()
        with self._lock:
            if key in self._items:  # another thread opened it meanwhile: keep one
                if self._close is not None:
                    self._close(value)
                return self._items[key]
            self._items[key] = value
            while len(self._items) > self._size:
                _, old = self._items.popitem(last=False)
                if self._close is not None:
                    self._close(old)
        return value


_MANIFESTS: _Lru[Manifest] = _Lru(256)


class CollectorShelter:
    """Keeps what the planner loads per generation (and the chunk records it decodes) out of
    Python's full garbage collections.

    The chunk table, the access lists and the vector segments' id maps hold an entry or more
    per chunk, and a full (generation 2) collection visits every entry of every tracked
    container: at 100k chunks one took tens to hundreds of ms, about once in 40-80 queries,
    and that was the p99. :func:`gc.freeze` moves every object tracked so far to the permanent
    generation, which collections skip (the move itself is a list splice, O(1)).

    Frozen objects are still freed by reference counting, and the tables hold no reference
    cycles, so an evicted generation's tables are freed as before. What freezing does hold is
    cyclic garbage: a cycle frozen while alive (say, a query in flight in another thread) is
    never collected once unreachable. So the young generations are collected before each
    freeze, and every ``refresh_every`` freezes the permanent generation is handed back and
    one full collection runs first: one walk over the tables per ``refresh_every`` generation
    switches, on the query that loads the new generation, instead of one per 40-80 queries.
    """

    def __init__(self, refresh_every: int = 16) -> None:
        self.refresh_every = refresh_every
        self._freezes = 0
        self._lock = threading.Lock()

    def loaded(self) -> None:
        """Freeze what is tracked now: call after loading a generation's tables (or after a
        table's record cache grew by many records)."""
        with self._lock:
            self._freezes += 1
            if self._freezes % self.refresh_every == 0:
                gc.unfreeze()
                gc.collect()
            else:
                gc.collect(1)
            gc.freeze()


_SHELTER = CollectorShelter()
"""One per process: the collector and its permanent generation are."""


class ReaderCache:
    """Readers over generation directories, opened once each and shared between queries.

    ``shelter`` (default: the process's) freezes the per-chunk tables a new generation loads
    (:class:`CollectorShelter`); None leaves the collector alone."""

    def __init__(self, size: int = 6, *, shelter: CollectorShelter | None = _SHELTER) -> None:
        self._shelter = shelter
        self._structured: _Lru[StructuredReader] = _Lru(size, lambda r: r.close())
        self._vector: _Lru[Any] = _Lru(size)
        self._toolresults: _Lru[Any] = _Lru(size)
        self._acls: _Lru[dict[str, dict[str, Any]]] = _Lru(size)
        self._chunks: _Lru[ChunkTable] = _Lru(3)
        self._segments = SegmentCache()
        self._texts: _Lru[Any] = _Lru(size * 2)
        self._duckdb: Any = None  # one in-memory database; each lookup runs on its own cursor
        self._lock = threading.Lock()

    def structured(self, index: IndexPin) -> StructuredReader:
        """The structured reader of the generation (of a sharded one: over every shard's)."""
        return self._structured.get(index.key, lambda: StructuredReader(index.directories))

    def session_acls(self, index: IndexPin) -> dict[str, dict[str, Any]]:
        """Latest access list of every session the generation knows (computed once per
        generation: the generation never changes)."""
        return self._acls.get(index.key, lambda: self._sheltered(
            lambda: session_acls(index.directories, self._segments)))

    def chunk_table(self, index: IndexPin) -> ChunkTable:
        """The in-memory chunk metadata of a structured generation (see :mod:`planner.chunktable`)."""
        grown = self._shelter.loaded if self._shelter is not None else None
        return self._chunks.get(index.key, lambda: self._sheltered(
            lambda: ChunkTable(index.directories, self._segments, on_growth=grown)))

    def _sheltered(self, load: Callable[[], _T]) -> _T:
        value = load()
        if self._shelter is not None:
            self._shelter.loaded()
        return value

    def known_event_ids(self, index: IndexPin, event_ids: Collection[str], max_seq: int) -> set[str]:
        """The ids among ``event_ids`` the generation holds at seq <= ``max_seq``."""
        if not event_ids:
            return set()
        sessions = shard_scan_sql(index.directories, "sessions", SCHEMAS["sessions"])
        sql = (f"SELECT DISTINCT eventId FROM {sessions}"
               " WHERE seq <= $max_seq AND eventId IN (SELECT unnest($ids))")
        with self._cursor() as cursor:
            rows = cursor.execute(sql, {"max_seq": int(max_seq), "ids": sorted(set(event_ids))}).fetchall()
        return {row[0] for row in rows}

    def _cursor(self) -> Any:
        # A cursor of one shared in-memory database, as StructuredReader does: a new connection
        # per lookup cost 13-25 ms, most of an uncached tail scan's dedup (the query ~2 ms at 10k).
        import duckdb

        with self._lock:
            if self._duckdb is None:
                self._duckdb = duckdb.connect(":memory:")
            return self._duckdb.cursor()

    def session_secrets(self, index: IndexPin, sessions: Collection[str], max_seq: int) -> dict[str, list[list[Any]]]:
        """Memory key (``logId/sessionId``) -> the session's memory of removed secrets
        (:mod:`streams.redaction.memory`) as the generation holds it at seq <= ``max_seq``, for
        the sessions of ``sessions`` (memory keys) that have one."""
        if not sessions:
            return {}
        secrets = shard_scan_sql(index.directories, "secrets", SCHEMAS["secrets"])
        sql = (f"SELECT logId || '/' || sessionId AS memory, print, length, rule, seq FROM {secrets}"
               " WHERE seq <= $max_seq AND logId || '/' || sessionId IN (SELECT unnest($keys))"
               " ORDER BY memory, seq")
        with self._cursor() as cursor:
            rows = cursor.execute(sql, {"max_seq": int(max_seq), "keys": sorted(set(sessions))}).fetchall()
        memories: dict[str, list[list[Any]]] = {}
        for memory, print_, length, rule, seq in rows:
            memories.setdefault(memory, []).append([print_, int(length), rule, int(seq)])
        return memories

    def vector(self, index: IndexPin) -> Any:
        """The vector reader of the generation (of a sharded one: over every shard's)."""
        from sinks.vector import VectorReader

        if index.parts:
            return _ShardedVectorReader([self.vector(part) for part in index.parts])
        names = vector_segment_names(index.directory, index.manifest)
        return self._vector.get(str(index.directory), lambda: self._sheltered(
            lambda: VectorReader(index.directory, names)))

    def search_text(self, index: IndexPin, query: str, *, limit: int, **options: Any) -> list[TextHit]:
        """The text engine's ``search`` over the generation. Over a sharded one, the engine's
        ``search_shards``, ranked and scored as one index over every shard (tantivy:
        :mod:`sinks.text.global_bm25`; whoosh: BM25F with the shards' summed statistics); an
        engine without it gets every shard's ``limit`` best merged in the engines' order
        (score desc, then chunkId), BM25 from each shard's own statistics."""
        engine = self.text_engine(index)
        if not index.parts:
            return list(engine.search(index.directory, query, limit=limit, **options))
        search_shards = getattr(engine, "search_shards", None)
        if callable(search_shards):
            return list(search_shards([part.directory for part in index.parts], query,
                                      limit=limit, **options))
        hits = [hit for part in index.parts
                for hit in engine.search(part.directory, query, limit=limit, **options)]
        hits.sort(key=lambda hit: (-hit.score, hit.chunk_id))
        return [replace(hit, rank=rank) for rank, hit in enumerate(hits[:limit], 1)]

    def text_statistics(self, index: IndexPin, terms: Collection[str]) -> tuple[Any, dict[str, int]] | None:
        """The generation's BM25 statistics (every shard's summed) for ``terms``, from an engine
        that gives them (``term_statistics``); None from one that does not."""
        statistics = getattr(self.text_engine(index), "term_statistics", None)
        if not callable(statistics):
            return None
        stats, freqs = statistics([part.directory for part in index.shards], terms)
        return stats, dict(freqs)

    def toolresults(self, index: IndexPin) -> Any:
        """The full tool results reader of the generation (of a sharded one: over every shard's)."""
        from sinks.toolresults import ToolResultsReader

        if index.parts:
            return _ShardedToolResults([self.toolresults(part) for part in index.parts])

        return self._toolresults.get(str(index.directory), lambda: ToolResultsReader(index.directory))

    @staticmethod
    def text_engine(index: IndexPin) -> TextEngine:
        return get_engine(str(index.manifest.extra.get("engine") or "tantivy"))

    def texts(self, index: IndexPin, chunk_ids: Collection[str]) -> dict[str, str]:
        """The stored redacted text of each chunk in ``chunk_ids`` the text generation holds."""
        if not chunk_ids:
            return {}
        if index.parts:
            return {chunk_id: text for part in index.parts
                    for chunk_id, text in self.texts(part, chunk_ids).items()}
        engine = self.text_engine(index)
        fetch = getattr(engine, "fetch_texts", None)
        if callable(fetch):
            return dict(fetch(index.directory, list(chunk_ids)))
        if engine.name == "whoosh":
            return self._whoosh_texts(index.directory, chunk_ids)
        return self._tantivy_texts(index.directory, chunk_ids)

    def digests(self, index: IndexPin, chunk_ids: Collection[str]) -> dict[str, bytes] | None:
        """``text_digest`` of the stored text of each chunk in ``chunk_ids`` the generation
        holds, when its engine reads them without the texts (None: read the texts)."""
        fetch = getattr(self.text_engine(index), "fetch_digests", None)
        if not chunk_ids or not callable(fetch):
            return None
        return {chunk_id: digest for part in index.shards
                for chunk_id, digest in fetch(part.directory, list(chunk_ids)).items()}

    def _tantivy_texts(self, directory: Path, chunk_ids: Collection[str]) -> dict[str, str]:
        import tantivy
        from tantivy import Query

        def open_() -> Any:
            opened = tantivy.Index.open(str(directory))
            opened.config_reader("manual", 0)
            return opened

        opened = self._texts.get(str(directory), open_)
        ids = sorted(set(chunk_ids))
        searcher = opened.searcher()
        query = Query.term_set_query(opened.schema, "chunkId", ids)
        found: dict[str, str] = {}
        for _score, address in searcher.search(query, limit=len(ids), count=False).hits:
            doc = searcher.doc(address)
            found[doc.get_first("chunkId")] = doc.get_first("text") or ""
        return found

    def _whoosh_texts(self, directory: Path, chunk_ids: Collection[str]) -> dict[str, str]:
        from whoosh import index as whoosh_index
        from whoosh import query as wq

        def open_() -> tuple[Any, threading.Lock]:
            return whoosh_index.open_dir(str(directory)).searcher(), threading.Lock()

        searcher, lock = self._texts.get(str(directory), open_)
        ids = sorted(set(chunk_ids))
        with lock:
            hits = searcher.search(wq.Or([wq.Term("chunkId", c) for c in ids]), limit=len(ids))
            return {hit["chunkId"]: hit.get("text", "") for hit in hits}


class _ShardedVectorReader:
    """The vector readers of every shard as one: each shard's ``limit`` best, merged by score
    (a chunk lives in one shard, so the merge is exactly one index's top ``limit``)."""

    def __init__(self, readers: list[Any]) -> None:
        self._readers = readers

    def search(self, query_vec: Any, *, limit: int, allowed: Callable[[str], bool] | None = None,
               fan_out: Any = None, row_mask: Any = None) -> list[Any]:
        hits = [hit for reader in self._readers
                for hit in reader.search(query_vec, limit=limit, allowed=allowed, fan_out=fan_out,
                                         row_mask=row_mask)]
        hits.sort(key=lambda hit: (-hit.score, hit.chunk_id))
        return [replace(hit, rank=rank) for rank, hit in enumerate(hits[:limit], 1)]

    def event_scores(self, query_vec: Any, chunk_ids: Collection[str]) -> dict[str, float]:
        """Each chunk's best event score, from the shard that holds it."""
        return {chunk_id: score for reader in self._readers
                for chunk_id, score in reader.event_scores(query_vec, chunk_ids).items()}


class _ShardedToolResults:
    """The tool-results readers of every shard as one: ranked and scored as one index over
    all of them (:func:`sinks.toolresults.search_shards`)."""

    def __init__(self, readers: list[Any]) -> None:
        self._readers = readers

    def search(self, query: str, *, limit: int = 10, **options: Any) -> list[dict[str, Any]]:
        from sinks.toolresults import search_shards

        return search_shards(self._readers, query, limit=limit, **options)
