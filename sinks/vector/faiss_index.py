"""Vector segments: immutable faiss index files in a directory, and the reader that searches them.

A segment ``NAME`` is three files, each written once and never changed:

- ``NAME.faiss``    the index: exact ``IndexFlatIP`` up to ``exact_max`` vectors, above that an
                    approximate ``IndexHNSWFlat`` (inner product, M=32, efConstruction=80);
- ``NAME.vec.npy``  the raw float32 vectors, so segments can be merged and scores recomputed
                    exactly without re-embedding: one row per chunk, then (format 2) the
                    chunks' *span* vectors, one per event the chunk holds;
- ``NAME.ids.json`` metadata (format, count, dimension, index kind), the chunkIds row by row,
                    (format 2) ``spanOffsets``: chunk ``i``'s span rows are
                    ``count + spanOffsets[i] .. count + spanOffsets[i + 1]``, and, when the
                    writer gave them, ``textDigests``: base64 of the chunks' 16-byte
                    :func:`sinks.text.base.text_digest` values, row by row.

The text digests let a query tell vector candidates of identical text apart without asking the
text index (docs/planner.md, "Identical texts count once"). They are an extra key, not a new
format: a reader that does not know it ignores it, and a segment without it (written before
them, or merged from one) answers searches as before, its hits without a digest.

The faiss index holds the chunk vectors only: candidates are found by the whole chunk, then
ranked by the best of their events (:meth:`VectorReader.event_scores`, docs/planner.md). A
format 1 segment (no spans) is still read; its chunks rank by their whole vector.

Vectors are L2-normalised by the embedder, so inner product is cosine similarity. A generation
lists its segments; :class:`VectorReader` searches all of them as one index.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import logging
import os
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import faiss
import numpy as np
import orjson

from sinks.vector.errors import VectorIndexError
from streams.fsio import atomic_write, fsync_directory, replace_with

__all__ = [
    "HNSW_EF_CONSTRUCTION",
    "HNSW_EF_SEARCH",
    "HNSW_M",
    "SEGMENT_FORMAT",
    "RowMask",
    "VectorHit",
    "VectorReader",
    "cosine",
    "merge_segments",
    "segment_files",
    "vectors_for",
    "write_segment",
]

SEGMENT_FORMAT = "usl-vector-segment/2"
_READABLE_FORMATS = ("usl-vector-segment/1", SEGMENT_FORMAT)
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
#: efSearch used at query time (raised to k when more than that many neighbours are asked).
#: Chosen by benchmarks/bench_vector.py at 100k chunks: recall@10 0.85 at 128, 0.93 at 256,
#: 0.97 at 512, still about 20x faster than the exact pass.
HNSW_EF_SEARCH = 512
#: An HNSW segment is scanned exactly once a filtered query would over-fetch more than this
#: share of it: past that point a brute-force pass is both cheaper and exact.
_EXHAUSTIVE_SHARE = 1 / 8

FanOut = Callable[[Callable[[Any], Any], Sequence[Any]], Iterable[Any]]
"""A ``map(fn, items)`` that yields ``fn(item)`` in the items' order, however it runs them."""

RowMask = Callable[[Any], np.ndarray]
"""``row_mask(segment)``: a bool array, one entry per row of an open segment, True for the rows
a query may return. ``segment`` has ``chunk_ids`` (its chunkIds row by row) and ``rows``
(chunkId -> row); it is the same object for every query while the segment is open, so work per
segment can be cached under it (weakly, to go with the segment)."""

_RESCORE_MARGIN = 1e-3
"""Most a segment's search score (float32 BLAS or faiss, summed in any order) is taken to
differ from :func:`cosine` of the same unit vectors: the float32 rounding of a 256-term dot
product of unit vectors is below 2e-5, so this is fifty times that."""

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
#: Bytes of one chunk's text digest (:func:`sinks.text.base.text_digest`).
_DIGEST_BYTES = 16


def cosine(vector: np.ndarray, query: np.ndarray) -> float:
    """The score of one stored vector for a query, computed the same way wherever the vector
    sits. A BLAS pass over a segment may round a row's dot product differently depending on
    the row's position and the segment's shape, so the same chunk scored a last-bit different
    value in a live index of many segments than in its rebuild of one, and an exact tie broke
    the other way. One float64 dot product per vector, rounded to float32, does not depend on
    the layout; hits are re-scored with it."""
    return float(np.float32(np.dot(np.asarray(vector, dtype=np.float64), np.asarray(query, dtype=np.float64))))


@dataclass(frozen=True, slots=True)
class VectorHit:
    """One vector search result: ``score`` is the cosine similarity, ``rank`` starts at 1.
    ``digest`` is :func:`sinks.text.base.text_digest` of the chunk's text as its segment
    stored it (None: a segment written without digests)."""

    chunk_id: str
    score: float
    rank: int
    digest: bytes | None = None


def segment_files(name: str) -> list[str]:
    """The file names that make up segment ``name`` (what a manifest lists)."""
    return [f"{name}.faiss", f"{name}.ids.json", f"{name}.vec.npy"]


# --------------------------------------------------------------------------- writing


def write_segment(
    directory: Path,
    name: str,
    chunk_ids: Sequence[str],
    vectors: np.ndarray,
    *,
    exact_max: int,
    spans: Sequence[np.ndarray] | None = None,
    digests: Sequence[bytes] | None = None,
) -> list[str]:
    """Write segment ``name`` into ``directory`` and return the file names written.

    ``vectors`` is float32 ``(len(chunk_ids), dim)``, rows L2-normalised; ``spans`` (one
    ``(n_i, dim)`` array per chunk, possibly empty) are the chunks' span vectors; ``digests``
    (one 16-byte value per chunk) are :func:`sinks.text.base.text_digest` of the chunks' texts.
    A chunkId given twice (a replayed record in one batch) is stored once, from its last row, as
    an upsert.
    Segments are immutable: writing over an existing one is refused. Each file is written to
    a temporary name, fsynced and renamed, so a crash leaves no partial segment.
    """
    directory = Path(directory)
    if not _NAME.match(name):
        raise VectorIndexError(f"invalid segment name {name!r}: use letters, digits, '.', '_', '-'")
    matrix = _as_matrix(vectors)
    ids = [str(chunk_id) for chunk_id in chunk_ids]
    if matrix.shape[0] != len(ids):
        raise VectorIndexError(f"segment {name}: {len(ids)} chunkIds but {matrix.shape[0]} vectors")
    span_list = [_as_span_matrix(part, matrix.shape[1], name) for part in spans] if spans is not None \
        else [np.zeros((0, matrix.shape[1]), dtype=np.float32)] * len(ids)
    if len(span_list) != len(ids):
        raise VectorIndexError(f"segment {name}: {len(ids)} chunkIds but span vectors for {len(span_list)}")
    digest_list = None if digests is None else [bytes(digest) for digest in digests]
    if digest_list is not None and len(digest_list) != len(ids):
        raise VectorIndexError(f"segment {name}: {len(ids)} chunkIds but text digests for {len(digest_list)}")
    if digest_list is not None and any(len(digest) != _DIGEST_BYTES for digest in digest_list):
        raise VectorIndexError(f"segment {name}: a text digest is not {_DIGEST_BYTES} bytes")
    if len(set(ids)) != len(ids):
        last_row = {chunk_id: row for row, chunk_id in enumerate(ids)}
        keep = sorted(last_row.values())
        ids, matrix, span_list = [ids[row] for row in keep], matrix[keep], [span_list[row] for row in keep]
        if digest_list is not None:
            digest_list = [digest_list[row] for row in keep]
    offsets = np.concatenate([[0], np.cumsum([len(part) for part in span_list], dtype=np.int64)])
    span_matrix = np.concatenate(span_list) if span_list else np.zeros((0, matrix.shape[1]), dtype=np.float32)
    if not np.isfinite(matrix).all() or not np.isfinite(span_matrix).all():
        raise VectorIndexError(f"segment {name}: vectors contain NaN or infinity")
    return _write_files(directory, name, ids, [matrix], [span_matrix], offsets,
                        None if digest_list is None else b"".join(digest_list), exact_max=exact_max)


def _write_files(directory: Path, name: str, ids: list[str], vector_blocks: list[np.ndarray],
                 span_blocks: list[np.ndarray], offsets: np.ndarray, digests: bytes | None, *,
                 exact_max: int, graph: Any = None, graph_source: str | None = None) -> list[str]:
    """Write segment ``name``'s files from its rows: the chunks' vectors in ``vector_blocks``
    and their span vectors in ``span_blocks`` (each list concatenated in order), ``offsets``
    into the spans per chunk, ``digests`` 16 bytes per chunk; the graph built, or ``graph``
    (an HNSW index holding the first ``graph.ntotal`` rows, segment ``graph_source``'s)
    extended with the rest. Building an HNSW graph is inserting its rows one by one, so an
    extended graph is the same kind of graph as one built from scratch."""
    files = segment_files(name)
    directory.mkdir(parents=True, exist_ok=True)
    existing = [file for file in files if (directory / file).exists()]
    if existing:
        raise VectorIndexError(f"segment {name} already exists in {directory} (segments are immutable)")
    dimension = int(vector_blocks[0].shape[1])
    count = len(ids)
    approximate = count > exact_max
    extended = 0
    if graph is not None:
        extended = int(graph.ntotal)
        if not approximate or not 0 < extended <= count or graph.d != dimension:
            raise VectorIndexError(f"segment {name}: cannot extend the graph of {graph_source}")
        index = graph
        skip = extended
        for block in vector_blocks:  # the rows past the graph's own, block by block
            if skip < len(block):
                index.add(np.ascontiguousarray(block[skip:], dtype=np.float32))
            skip = max(0, skip - len(block))
    else:
        matrix = vector_blocks[0] if len(vector_blocks) == 1 else np.concatenate(vector_blocks)
        index = _build_index(np.ascontiguousarray(matrix, dtype=np.float32), approximate)
    meta = {
        "format": SEGMENT_FORMAT,
        "name": name,
        "count": count,
        "dimension": dimension,
        "metric": "inner_product",
        "index": "hnsw" if approximate else "flat",
        "hnsw": {"M": HNSW_M, "efConstruction": HNSW_EF_CONSTRUCTION} if approximate else None,
        "chunkIds": ids,
        "spanCount": int(offsets[-1]),
        "spanOffsets": offsets.tolist(),
    }
    if digests is not None:
        # One string, not a list of 16-byte values: a fraction of the bytes and one parse.
        meta["textDigests"] = base64.b64encode(digests).decode("ascii")
    if graph is not None:
        # Where the graph came from: a merge that inserted rows into another segment's graph.
        meta["graphFrom"] = {"segment": graph_source, "rows": extended}
    _write_npy(directory / f"{name}.vec.npy", [*vector_blocks, *span_blocks], count + int(offsets[-1]), dimension)
    _write_faiss(directory / f"{name}.faiss", index)
    # The metadata goes last: a segment whose ids.json exists is complete.
    atomic_write(directory / f"{name}.ids.json", orjson.dumps(meta))
    fsync_directory(directory)
    return files


#: Rows written to a vector file at a time: a merge of a million chunks streams its gigabytes
#: of vectors from the inputs' mappings instead of holding them (and a copy) in memory.
_WRITE_ROWS = 65_536
#: Bytes a segment file may have unsynced while it is written. A merge's gigabytes left dirty
#: until one fsync at the end made the live sink's own small fsyncs wait behind them (a flush
#: of 3.5 s beside a merge into a million-chunk segment).
_SYNC_BYTES = 64 * 1024 * 1024


def _write_npy(path: Path, blocks: list[np.ndarray], rows: int, dimension: int) -> None:
    """``np.save`` of the blocks concatenated (float32, ``rows`` x ``dimension``), written
    block by block."""

    def write(handle: BinaryIO) -> None:
        np.lib.format.write_array_header_1_0(
            handle, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False,
                     "shape": (rows, dimension)})
        unsynced = 0
        for block in blocks:
            for start in range(0, len(block), _WRITE_ROWS):
                part = np.ascontiguousarray(block[start:start + _WRITE_ROWS], dtype=np.float32)
                handle.write(part.data)
                unsynced += part.nbytes
                if unsynced >= _SYNC_BYTES:
                    handle.flush()
                    os.fdatasync(handle.fileno())
                    unsynced = 0

    replace_with(path, write)


def _write_faiss(path: Path, index: Any) -> None:
    """The faiss index, streamed through faiss's writer in pieces: no serialized copy of it
    in memory."""
    replace_with(path, lambda handle: faiss.write_index(index, faiss.PyCallbackIOWriter(handle.write)))  # type: ignore[attr-defined]


def merge_segments(directory: Path, names: Sequence[str], new_name: str, exact_max: int) -> list[str]:
    """Write ``new_name`` holding the union of segments ``names`` and return its file names.

    A chunkId found in several segments keeps the copy from the last segment listed (newest
    wins, as an upsert). Chunk ids are derived from chunk content, so such copies normally
    carry identical vectors and the rule only matters for determinism. The chunks' text
    digests are kept when every segment has them; otherwise the merged segment has none.

    When the first segment is an HNSW segment that keeps every row, the merged graph is its
    graph with the other segments' rows inserted (``graphFrom`` in the metadata); otherwise a
    graph is built over every row. Either way the merged segment holds the same rows, vectors,
    spans and digests in the same order.
    """
    directory = Path(directory)
    if not _NAME.match(new_name):
        raise VectorIndexError(f"invalid segment name {new_name!r}: use letters, digits, '.', '_', '-'")
    segments = [_SegmentData.open(directory, name) for name in names]
    if not segments:
        raise VectorIndexError(f"merge into {new_name}: no segments given")
    dimension = segments[0].dimension
    if any(segment.dimension != dimension for segment in segments):
        raise VectorIndexError(f"cannot merge segments of different dimensions into {new_name}")
    owner: dict[str, tuple[int, int]] = {}
    for position, segment in enumerate(segments):
        for row, chunk_id in enumerate(segment.chunk_ids):
            owner[chunk_id] = (position, row)
    ids: list[str] = []
    vector_blocks: list[np.ndarray] = []
    span_blocks: list[np.ndarray] = []
    span_counts: list[np.ndarray] = []
    with_digests = all(segment.digests is not None for segment in segments)
    digests: list[bytes] = []
    kept_first = 0
    for position, segment in enumerate(segments):
        keep = np.array([row for row, chunk_id in enumerate(segment.chunk_ids) if owner[chunk_id] == (position, row)],
                        dtype=np.int64)
        if position == 0:
            kept_first = len(keep)
        if len(keep) == len(segment.chunk_ids):  # every row: the segment's blocks as they are
            ids.extend(segment.chunk_ids)
            vector_blocks.append(segment.vectors)
            span_blocks.append(segment.spans)
            span_counts.append(np.diff(segment.span_offsets))
            if with_digests:
                digests.append(segment.digests or b"")
            continue
        ids.extend(segment.chunk_ids[row] for row in keep)
        vector_blocks.append(np.asarray(segment.vectors[keep], dtype=np.float32))
        starts, ends = segment.span_offsets[keep], segment.span_offsets[keep + 1]
        counts = ends - starts
        # The kept rows' span rows, in order: each row's range start..end, all at once.
        before = np.cumsum(counts) - counts
        span_rows = np.repeat(starts - before, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        span_blocks.append(np.asarray(segment.spans[span_rows], dtype=np.float32))
        span_counts.append(counts)
        if with_digests:
            digests.extend(segment.known_digest(int(row)) for row in keep)
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(span_counts), dtype=np.int64)])
    graph = None
    base = segments[0]
    if base.meta["index"] == "hnsw" and len(ids) > exact_max and kept_first == len(base.chunk_ids):
        # The first segment's rows come first and none was replaced by a later copy: its graph
        # holds them already, so only the other segments' rows are inserted. A merge into the
        # large segment then costs what it adds, not the size of what it adds to.
        graph = _read_graph(directory, base)
    return _write_files(directory, new_name, ids, vector_blocks, span_blocks, offsets,
                        b"".join(digests) if with_digests else None, exact_max=exact_max,
                        graph=graph, graph_source=base.name if graph is not None else None)


def vectors_for(directory: Path, names: Sequence[str], chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
    """The stored vectors of ``chunk_ids`` found in segments ``names`` (newest listed wins).

    Used by the planner to re-score chunks it trims to asOfSeq. Ids in no segment are absent.
    """
    wanted = set(chunk_ids)
    found: dict[str, np.ndarray] = {}
    for name in names:
        segment = _SegmentData.open(Path(directory), name)
        for row, chunk_id in enumerate(segment.chunk_ids):
            if chunk_id in wanted:
                found[chunk_id] = np.array(segment.vectors[row], dtype=np.float32)
    return found


def _as_matrix(vectors: np.ndarray) -> np.ndarray:
    matrix = np.asarray(vectors)
    if matrix.ndim != 2 or matrix.shape[1] < 1:
        raise VectorIndexError(f"vectors must be a 2-d array (n, dimension), got shape {matrix.shape}")
    return np.ascontiguousarray(matrix, dtype=np.float32)


def _as_span_matrix(part: np.ndarray, dimension: int, name: str) -> np.ndarray:
    matrix = np.asarray(part, dtype=np.float32).reshape(-1, dimension) if np.size(part) else \
        np.zeros((0, dimension), dtype=np.float32)
    if matrix.shape[1] != dimension:
        raise VectorIndexError(f"segment {name}: span vectors of dimension {matrix.shape[1]}, chunks {dimension}")
    return matrix


def _build_index(matrix: np.ndarray, approximate: bool) -> Any:
    dimension = matrix.shape[1]
    index: Any
    if approximate:
        index = faiss.IndexHNSWFlat(dimension, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    else:
        index = faiss.IndexFlatIP(dimension)
    if matrix.shape[0]:
        index.add(matrix)
    return index


# --------------------------------------------------------------------------- reading


@dataclass
class _SegmentData:
    """A segment's metadata, chunkIds and (memory-mapped) raw vectors.

    ``vectors`` and ``spans`` are plain ndarray views of the mapping, not ``np.memmap``s:
    slicing a memmap runs Python code per slice, and a query slices a few hundred rows per
    segment (re-scoring hits, each candidate's best event).

    ``digests``: the chunks' 16-byte text digests concatenated row by row (None: the segment
    was written without them)."""

    name: str
    meta: dict[str, Any]
    chunk_ids: list[str]
    vectors: np.ndarray
    spans: np.ndarray
    span_offsets: np.ndarray
    digests: bytes | None = None

    @property
    def dimension(self) -> int:
        return int(self.meta["dimension"])

    def spans_of(self, row: int) -> np.ndarray:
        """Chunk ``row``'s span vectors (none in a format 1 segment)."""
        return self.spans[self.span_offsets[row]:self.span_offsets[row + 1]]

    def digest_of(self, row: int) -> bytes | None:
        """Chunk ``row``'s text digest (None in a segment without digests)."""
        if self.digests is None:
            return None
        return self.digests[row * _DIGEST_BYTES:(row + 1) * _DIGEST_BYTES]

    def known_digest(self, row: int) -> bytes:
        """Chunk ``row``'s text digest, in a segment known to have them."""
        digest = self.digest_of(row)
        assert digest is not None
        return digest

    @classmethod
    def open(cls, directory: Path, name: str) -> _SegmentData:
        meta_path = directory / f"{name}.ids.json"
        try:
            meta = orjson.loads(meta_path.read_bytes())
        except FileNotFoundError:
            raise VectorIndexError(f"vector segment {name} not found in {directory}") from None
        except orjson.JSONDecodeError as exc:
            raise VectorIndexError(f"vector segment {name}: unreadable metadata ({exc})") from None
        if meta.get("format") not in _READABLE_FORMATS:
            raise VectorIndexError(f"vector segment {name}: unknown format {meta.get('format')!r}")
        try:
            vectors = np.asarray(np.load(directory / f"{name}.vec.npy", mmap_mode="r", allow_pickle=False))
        except (OSError, ValueError) as exc:
            raise VectorIndexError(f"vector segment {name}: cannot read its vectors ({exc})") from None
        ids = meta.pop("chunkIds")
        count, span_count = int(meta["count"]), int(meta.get("spanCount", 0))
        offsets = np.asarray(meta.pop("spanOffsets", [0] * (count + 1)), dtype=np.int64)
        if (vectors.shape != (count + span_count, meta["dimension"]) or len(ids) != count
                or offsets.shape != (count + 1,) or int(offsets[-1]) != span_count):
            raise VectorIndexError(f"vector segment {name}: files disagree on its size")
        digests = _decode_digests(name, meta.pop("textDigests", None), count)
        return cls(name, meta, ids, vectors[:count], vectors[count:], offsets, digests)


def _read_graph(directory: Path, segment: _SegmentData) -> Any:
    """The faiss index of an HNSW ``segment``, checked against its metadata."""
    try:
        index = faiss.read_index(str(directory / f"{segment.name}.faiss"))
    except RuntimeError as exc:
        raise VectorIndexError(f"vector segment {segment.name}: cannot read its faiss index ({exc})") from None
    if index.ntotal != len(segment.chunk_ids) or index.d != segment.dimension:
        raise VectorIndexError(f"vector segment {segment.name}: faiss index disagrees with its metadata")
    return index


def _decode_digests(name: str, encoded: Any, count: int) -> bytes | None:
    """The ``textDigests`` of a segment's metadata as raw bytes (None when it has none)."""
    if encoded is None:
        return None
    try:
        digests = base64.b64decode(str(encoded), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise VectorIndexError(f"vector segment {name}: unreadable text digests ({exc})") from None
    if len(digests) != count * _DIGEST_BYTES:
        raise VectorIndexError(f"vector segment {name}: text digests for {len(digests) // _DIGEST_BYTES} "
                               f"of its {count} chunks")
    return digests


class _Segment:
    """A segment opened for search.

    Flat segments are searched with one BLAS pass over the memory-mapped ``NAME.vec.npy``:
    for single queries that measured 2-3x faster than ``IndexFlatIP.search`` and, unlike
    repeated index searches, over-fetching for a filter costs no extra pass. HNSW segments
    are searched through faiss, falling back to that exact pass when a filter is selective.
    """

    def __init__(self, directory: Path, name: str, ef_search: int) -> None:
        self.data = _SegmentData.open(directory, name)
        self.count = int(self.data.meta["count"])
        self.approximate = self.data.meta["index"] == "hnsw"
        self.ef_search = ef_search
        self._rows: dict[str, int] | None = None
        self.index: Any = None
        if self.approximate:
            self.index = _read_graph(directory, self.data)

    @property
    def chunk_ids(self) -> list[str]:
        return self.data.chunk_ids

    @property
    def rows(self) -> dict[str, int]:
        """chunkId -> row, built at the first span lookup (a reader that never ranks by
        spans never pays for it)."""
        if self._rows is None:
            self._rows = {chunk_id: row for row, chunk_id in enumerate(self.data.chunk_ids)}
        return self._rows

    def top(self, query: np.ndarray, limit: int, allowed: Callable[[str], bool]) -> list[tuple[float, str]]:
        """Up to ``limit`` best allowed (score, chunkId) of this segment, each scored with
        :func:`cosine`.

        Over-fetches k, 4k, 16k... candidates until ``limit`` allowed hits are in hand and a
        candidate scoring strictly below the last of them proves nothing unseen can tie it,
        or the segment is exhausted.
        """
        return self.rescore(query, self._top(query, limit, allowed))

    def rescore(self, query: np.ndarray, hits: list[tuple[float, str, int]]) -> list[tuple[float, str]]:
        """(:func:`cosine`, chunkId) of each (search score, chunkId, row) hit."""
        if not hits:
            return []
        # cosine() of each hit, its float64 operands made once: the same numbers, without
        # a memmap slice and two conversions per hit (a query re-scores ~limit hits per segment).
        query64 = np.asarray(query[0], dtype=np.float64)
        rows = self.data.vectors[[row for _score, _chunk_id, row in hits]].astype(np.float64)
        return [(float(np.float32(np.dot(vector, query64))), chunk_id)
                for vector, (_score, chunk_id, _row) in zip(rows, hits, strict=True)]

    def masked_top(self, query: np.ndarray, limit: int, mask: np.ndarray) -> list[tuple[float, str, int]]:
        """Up to ``limit`` best (search score, chunkId, row) among the rows ``mask`` allows,
        the filter evaluated inside the search: faiss skips the rows an
        :class:`faiss.IDSelectorBitmap` excludes while it walks the HNSW graph, and a flat
        segment's excluded rows are dropped before its top ``limit``. One pass, where the
        Python filter (:meth:`_top`) over-fetched until ``limit`` allowed candidates were in
        hand. Every row scoring at least the ``limit``-th allowed one is returned, ties at the
        cut included, as :meth:`_top` does."""
        allowed_rows = int(np.count_nonzero(mask))
        if allowed_rows == 0:
            return []
        if not self.approximate or allowed_rows < self.count * _EXHAUSTIVE_SHARE:
            # A selective filter makes a filtered graph walk visit many excluded nodes per
            # allowed one; scanning exactly is both cheaper and exact there.
            return self._scan_masked(query, limit, mask)
        ids = self.data.chunk_ids
        # IDSelectorBitmap reads bit (row & 7) of byte (row >> 3): little-endian bit order.
        # The selector keeps a reference to ``bitmap`` for its own lifetime, and ``params``
        # holds the selector, so the array outlives the search.
        bitmap = np.packbits(mask, bitorder="little")
        selector = faiss.IDSelectorBitmap(bitmap)  # type: ignore[call-arg, arg-type]  # the wrapper takes the array
        k = min(limit + 1, allowed_rows)  # one beyond the cut, to see whether the cut is a tie
        while k < self.count * _EXHAUSTIVE_SHARE:
            # A breadth of 4k: what the per-chunk filter's second pass searched at (k = 4 (limit
            # + 1)), which it reached whenever a tenth of the candidates were unreadable; at
            # max(ef_search, k) the deep end of a 201-hit list lost recall (docs/planner.md).
            params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, 4 * k), sel=selector)  # type: ignore[attr-defined]
            scores, labels = self.index.search(query, k, params=params)
            scores, labels = scores[0], labels[0]
            if int((labels >= 0).sum()) < k:
                break  # the filtered walk could not reach k allowed rows: only a scan is trustworthy
            keep = mask[labels]  # always all of them; a selector that let one through is overruled
            scores, labels = scores[keep], labels[keep]
            if len(labels) >= allowed_rows or (len(labels) > limit and scores[-1] < scores[limit - 1]):
                return _at_least(scores, labels, ids, limit)
            if k >= allowed_rows:
                break
            k = min(k * 4, allowed_rows)  # a tie at the cut: look further
        return self._scan_masked(query, limit, mask)

    def _scan_masked(self, query: np.ndarray, limit: int, mask: np.ndarray) -> list[tuple[float, str, int]]:
        # The whole segment's product, as _scan computes it, so a row scores the same bits
        # with or without a mask and the masked answer is the unmasked one filtered.
        scores = np.asarray(self.data.vectors @ query[0], dtype=np.float32)
        rows = np.flatnonzero(mask)
        kept = scores[rows]
        if len(rows) > limit:
            cut = np.partition(kept, len(kept) - limit)[len(kept) - limit]  # the limit-th best
            best = kept >= cut
            rows, kept = rows[best], kept[best]
        order = np.argsort(-kept, kind="stable")
        return _at_least(kept[order], rows[order], self.data.chunk_ids, limit)

    def _top(self, query: np.ndarray, limit: int, allowed: Callable[[str], bool]) -> list[tuple[float, str, int]]:
        if not self.approximate:
            return self._scan(query, limit, allowed)
        ids = self.data.chunk_ids
        k = limit + 1  # one beyond the cut, to see whether the cut is a tie
        while k < self.count * _EXHAUSTIVE_SHARE:
            # Per-call parameters keep concurrent searches from racing on index.hnsw.efSearch.
            params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, k))  # type: ignore[attr-defined]
            scores, labels = self.index.search(query, k, params=params)
            scores, labels = scores[0], labels[0]
            valid = int((labels >= 0).sum())
            if valid < k:
                break  # HNSW could not reach k neighbours: only an exact pass is trustworthy now
            hits, proven = _collect(scores, labels, ids, limit, allowed)
            if proven:
                return hits
            k *= 4
        return self._scan(query, limit, allowed)

    def _scan(self, query: np.ndarray, limit: int, allowed: Callable[[str], bool]) -> list[tuple[float, str, int]]:
        ids = self.data.chunk_ids
        scores = np.asarray(self.data.vectors @ query[0], dtype=np.float32)
        k = limit + 1
        while k < self.count:
            # argpartition finds the k best without sorting the whole segment.
            rows = np.argpartition(-scores, k)[:k]
            rows = rows[np.argsort(-scores[rows], kind="stable")]
            hits, proven = _collect(scores[rows], rows, ids, limit, allowed)
            if proven:
                return hits
            k *= 4
        rows = np.argsort(-scores, kind="stable")
        hits, _ = _collect(scores[rows], rows, ids, limit, allowed)
        return hits  # every row was a candidate, so this is complete


def _collect(
    scores: np.ndarray, rows: np.ndarray, ids: list[str], limit: int, allowed: Callable[[str], bool]
) -> tuple[list[tuple[float, str, int]], bool]:
    """The allowed hits (score, chunkId, row) among candidates ``rows`` (best first, ``scores``
    aligned with them), and whether they are proven to be the top ``limit``: a candidate
    scoring strictly below the ``limit``-th allowed hit shows nothing beyond the candidates can
    still tie or beat it."""
    hits: list[tuple[float, str, int]] = []
    for score, row in zip(scores.tolist(), rows.tolist(), strict=True):
        if len(hits) >= limit and score < hits[limit - 1][0]:
            return hits, True
        if allowed(ids[row]):
            hits.append((score, ids[row], row))
    return hits, False


def _at_least(scores: np.ndarray, rows: np.ndarray, ids: list[str], limit: int) -> list[tuple[float, str, int]]:
    """(score, chunkId, row) of the candidates (best first) scoring at least the ``limit``-th."""
    if len(scores) > limit:
        keep = scores >= scores[limit - 1]
        scores, rows = scores[keep], rows[keep]
    return [(score, ids[row], row) for score, row in zip(scores.tolist(), rows.tolist(), strict=True)]


class VectorReader:
    """Searches a fixed list of segments (one generation) as one index.

    Loads every segment at construction; afterwards ``search`` is read-only and may be called
    from several threads. ``ef_search`` is the HNSW search breadth (recall vs latency).
    """

    def __init__(
        self, directory: Path, segment_names: Sequence[str], *, ef_search: int = HNSW_EF_SEARCH
    ) -> None:
        self.directory = Path(directory)
        self.segment_names = list(segment_names)
        self._segments = [_Segment(self.directory, name, ef_search) for name in self.segment_names]
        dimensions = {segment.data.dimension for segment in self._segments}
        if len(dimensions) > 1:
            raise VectorIndexError(f"segments in {directory} have different dimensions {sorted(dimensions)}")
        self.dimension: int | None = dimensions.pop() if dimensions else None

    def search(
        self,
        query_vec: np.ndarray,
        *,
        limit: int,
        allowed: Callable[[str], bool] | None = None,
        fan_out: FanOut | None = None,
        row_mask: RowMask | None = None,
    ) -> list[VectorHit]:
        """The ``limit`` best chunks for ``query_vec`` over all segments.

        Order: score desc, then chunkId asc; a chunkId in several segments counts once, with
        its best score. ``allowed`` is applied before the top ``limit`` is taken, so a page
        holds ``limit`` allowed chunks whenever that many exist. ``fan_out``: a ``map`` that
        may search the segments concurrently (faiss and BLAS release the GIL), returning each
        segment's hits in segment order, so the result is the same as the sequential one;
        ``allowed`` is then called from several threads.

        ``row_mask`` (:data:`RowMask`, with ``allowed``): the same filter as a bool array per
        segment, evaluated inside the search (:meth:`_Segment.masked_top`) instead of by
        calling ``allowed`` per candidate. ``allowed`` still judges the hits returned: should a
        mask ever let an unreadable chunk through, the search runs again on ``allowed`` alone.
        """
        if limit <= 0 or not self._segments:
            return []
        query = np.ascontiguousarray(np.asarray(query_vec, dtype=np.float32).reshape(1, -1))
        if query.shape[1] != self.dimension:
            raise VectorIndexError(
                f"query vector has dimension {query.shape[1]}, the index has {self.dimension}"
            )
        decisions: dict[str, bool] = {}

        def permitted(chunk_id: str) -> bool:
            # Each id is judged once per query, however often over-fetching revisits it.
            if allowed is None:
                return True
            verdict = decisions.get(chunk_id)
            if verdict is None:
                verdict = decisions[chunk_id] = bool(allowed(chunk_id))
            return verdict

        def candidates(segment: _Segment) -> list[tuple[float, str, int]]:
            if row_mask is not None and allowed is not None:
                mask = np.asarray(row_mask(segment), dtype=bool)
                if mask.shape != (segment.count,):
                    raise VectorIndexError(f"vector segment {segment.data.name}: a row mask of shape "
                                           f"{mask.shape} for {segment.count} rows")
                return segment.masked_top(query, limit, mask)
            return segment._top(query, limit, permitted)

        each = fan_out if fan_out is not None and len(self._segments) > 1 else map
        found = list(each(candidates, self._segments))
        ranked = self._merge(query, limit, found)
        if row_mask is not None and allowed is not None and not all(permitted(c) for c, _ in ranked):
            logger.error("vector search: a row mask let through a chunk the filter refuses; "
                         "searching again without it")
            return self.search(query_vec, limit=limit, allowed=allowed, fan_out=fan_out)
        digests = self._digests(found, {chunk_id for chunk_id, _ in ranked})
        return [VectorHit(chunk_id, score, rank, digests.get(chunk_id))
                for rank, (chunk_id, score) in enumerate(ranked, 1)]

    def _digests(self, found: list[list[tuple[float, str, int]]], wanted: set[str]) -> dict[str, bytes]:
        """The text digest of each chunk in ``wanted``, from the last segment listed whose hits
        hold it (the copy a merge keeps), when that segment has digests."""
        known: dict[str, bytes | None] = {}
        for segment, hits in zip(self._segments, found, strict=True):
            for _score, chunk_id, row in hits:
                if chunk_id in wanted:
                    known[chunk_id] = segment.data.digest_of(row)
        return {chunk_id: digest for chunk_id, digest in known.items() if digest is not None}

    def _merge(self, query: np.ndarray, limit: int, found: list[list[tuple[float, str, int]]]
               ) -> list[tuple[str, float]]:
        """The ``limit`` best (chunkId, cosine) of every segment's hits, each chunk once."""
        # Only hits that can still reach the top ``limit`` are re-scored with cosine(): each
        # segment brings its own ``limit`` best, and with several segments most of them fall
        # far below the ``limit``-th best search score. A search score is within
        # _RESCORE_MARGIN of the hit's cosine, so a hit more than twice that below the cut
        # would score strictly below ``limit`` others however it is re-scored.
        by_search: dict[str, float] = {}
        for hits in found:
            for score, chunk_id, _row in hits:
                if score > by_search.get(chunk_id, -np.inf):
                    by_search[chunk_id] = score
        if len(by_search) > limit:
            floor = heapq.nlargest(limit, by_search.values())[-1] - 2 * _RESCORE_MARGIN
            found = [[hit for hit in hits if hit[0] >= floor] for hits in found]
        best: dict[str, float] = {}
        for segment, hits in zip(self._segments, found, strict=True):
            for score, chunk_id in segment.rescore(query, hits):
                if score > best.get(chunk_id, -np.inf):
                    best[chunk_id] = score
        return sorted(best.items(), key=lambda item: (-item[1], item[0]))[:limit]

    def event_scores(self, query_vec: np.ndarray, chunk_ids: Collection[str]) -> dict[str, float]:
        """Each chunk's score by its best event: the best cosine of its span vectors, or of its
        whole vector when it has none (a chunk of one event, a format 1 segment), each scored
        with :func:`cosine`. Chunks in no segment are absent; a chunk in several segments
        counts once, with its best score, as in :meth:`search`."""
        query = np.asarray(query_vec, dtype=np.float64).reshape(-1)
        wanted = set(chunk_ids)
        best: dict[str, float] = {}
        for segment in self._segments:
            for chunk_id in wanted & segment.rows.keys():
                row = segment.rows[chunk_id]
                spans = segment.data.spans_of(row)
                score = (float(np.max((np.asarray(spans, dtype=np.float64) @ query).astype(np.float32)))
                         if len(spans) else cosine(segment.data.vectors[row], query))
                if score > best.get(chunk_id, -np.inf):
                    best[chunk_id] = score
        return best
