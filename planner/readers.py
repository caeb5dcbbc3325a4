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
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

from planner.chunktable import ChunkTable, SegmentCache, session_acls
from planner.exceptions import CursorExpired
from sinks.exceptions import GenerationError
from sinks.generations import GenerationStore, Manifest, Pin
from sinks.structured import SCHEMAS, StructuredReader
from sinks.text import TextEngine, get_engine
from sinks.writer import scan_sql

__all__ = [
    "IndexPin",
    "ReaderCache",
    "pin_for_cursor",
    "pin_for_query",
    "vector_segment_names",
]

_T = TypeVar("_T")
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

    @property
    def watermark(self) -> tuple[int, int]:
        return (self.generation_id, self.built_through_seq)

    def release(self) -> None:
        self.pin.release()

    def keep_for(self, ttl_seconds: float) -> None:
        """Extend the pin (while a cursor may still read this generation)."""
        try:
            self.pin.renew(ttl_seconds)
        except GenerationError:
            pass  # released meanwhile: the next page will re-pin or say the page is gone


def pin_for_query(
    root: Path, log_id: str, kind: str, watermark: Mapping[str, Any] | None, *,
    ttl_seconds: float, holder: str,
) -> IndexPin | None:
    """Pin the generation ``watermark`` names (on its line), or, if that one was collected
    meanwhile, the current generation of the active line. None without a watermark."""
    if watermark is None:
        return None
    line = str(watermark.get("line") or "") or None
    try:
        store = GenerationStore(root, log_id, kind, line)
        pin = store.pin(int(watermark["generationId"]), ttl_seconds=ttl_seconds, holder=holder)
        return _pinned(store, kind, pin)
    except (GenerationError, KeyError, TypeError, ValueError):
        pass
    store = GenerationStore(root, log_id, kind)
    pinned = store.pin_current(ttl_seconds=ttl_seconds, holder=holder)
    if pinned is None:
        return None
    manifest, pin = pinned
    return IndexPin(kind, store.line, manifest.generation_id, manifest.built_through_seq,
                    store.generation_dir(manifest.generation_id), manifest, pin)


def pin_for_cursor(
    root: Path, log_id: str, kind: str, generation_id: int, line: str | None, *,
    ttl_seconds: float, holder: str,
) -> IndexPin:
    """Re-pin the generation a cursor binds; :class:`CursorExpired` (410) if it is gone."""
    try:
        store = GenerationStore(root, log_id, kind, line)
        pin = store.pin(int(generation_id), ttl_seconds=ttl_seconds, holder=holder)
        return _pinned(store, kind, pin)
    except GenerationError:
        raise CursorExpired(
            f"the {kind} index generation this cursor reads no longer exists",
            hint=_RESTART,
        ) from None


def _pinned(store: GenerationStore, kind: str, pin: Pin) -> IndexPin:
    try:
        manifest = store.load(pin.generation_id)
    except GenerationError:
        pin.release()
        raise
    return IndexPin(kind, store.line, manifest.generation_id, manifest.built_through_seq,
                    store.generation_dir(manifest.generation_id), manifest, pin)


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
        self._items: OrderedDict[str, _T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, open_: Callable[[], _T]) -> _T:
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


class ReaderCache:
    """Readers over generation directories, opened once each and shared between queries."""

    def __init__(self, size: int = 6) -> None:
        self._structured: _Lru[StructuredReader] = _Lru(size, lambda r: r.close())
        self._vector: _Lru[Any] = _Lru(size)
        self._toolresults: _Lru[Any] = _Lru(size)
        self._acls: _Lru[dict[str, dict[str, Any]]] = _Lru(size)
        self._chunks: _Lru[ChunkTable] = _Lru(3)
        self._segments = SegmentCache()
        self._texts: _Lru[Any] = _Lru(size * 2)

    def structured(self, index: IndexPin) -> StructuredReader:
        return self._structured.get(str(index.directory), lambda: StructuredReader(index.directory))

    def session_acls(self, index: IndexPin) -> dict[str, dict[str, Any]]:
        """Latest access list of every session the generation knows (computed once per
        generation: the generation never changes)."""
        return self._acls.get(str(index.directory),
                              lambda: session_acls(index.directory, self._segments))

    def chunk_table(self, index: IndexPin) -> ChunkTable:
        """The in-memory chunk metadata of a structured generation (see :mod:`planner.chunktable`)."""
        return self._chunks.get(str(index.directory),
                                lambda: ChunkTable(index.directory, self._segments))

    def known_event_ids(self, index: IndexPin, event_ids: Collection[str], max_seq: int) -> set[str]:
        """The ids among ``event_ids`` the generation holds at seq <= ``max_seq``."""
        if not event_ids:
            return set()
        import duckdb

        sql = (f"SELECT DISTINCT eventId FROM {scan_sql(index.directory, 'sessions', SCHEMAS['sessions'])}"
               " WHERE seq <= $max_seq AND eventId IN (SELECT unnest($ids))")
        with duckdb.connect(":memory:") as con:
            rows = con.execute(sql, {"max_seq": int(max_seq), "ids": sorted(set(event_ids))}).fetchall()
        return {row[0] for row in rows}

    def vector(self, index: IndexPin) -> Any:
        from sinks.vector import VectorReader

        names = vector_segment_names(index.directory, index.manifest)
        return self._vector.get(str(index.directory), lambda: VectorReader(index.directory, names))

    def toolresults(self, index: IndexPin) -> Any:
        from sinks.toolresults import ToolResultsReader

        return self._toolresults.get(str(index.directory), lambda: ToolResultsReader(index.directory))

    @staticmethod
    def text_engine(index: IndexPin) -> TextEngine:
        return get_engine(str(index.manifest.extra.get("engine") or "tantivy"))

    def texts(self, index: IndexPin, chunk_ids: Collection[str]) -> dict[str, str]:
        """The stored redacted text of each chunk in ``chunk_ids`` the text generation holds."""
        if not chunk_ids:
            return {}
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
        return dict(fetch(index.directory, list(chunk_ids)))

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
