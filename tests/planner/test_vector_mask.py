"""The vector leg's access and structured filter as a row mask evaluated inside the engine
(:meth:`planner.chunktable.ChunkTable.row_filter`): the same verdict, row by row, as the
planner's per-chunk check, under every table generation, never one computed from another
generation's rows."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from planner.chunktable import ChunkTable, SegmentCache
from sinks.structured import SCHEMAS


def _chunk(chunk_id: str, session: str, max_seq: int) -> dict[str, Any]:
    return {"chunkId": chunk_id, "sessionId": session, "minSeq": max_seq - 1, "maxSeq": max_seq,
            "evidence": "[]", "logId": "default", "unit": "turn"}


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS["chunks"]), path)
    return path


def _generation(directory: Path, *parts: Path | list[dict[str, Any]]) -> Path:
    """A generation dir of chunk segments, in order: a Path is an earlier generation's segment,
    hard-linked as the structured sink shares them; a list of rows is a new segment."""
    directory.mkdir(parents=True)
    for number, part in enumerate(parts, 1):
        target = directory / f"chunks-{number:08d}.parquet"
        if isinstance(part, Path):
            os.link(part, target)
        else:
            _write(target, part)
    return directory


class _Segment:
    """Stands in for an open vector segment."""

    def __init__(self, chunk_ids: list[str]) -> None:
        self.chunk_ids = chunk_ids
        self.rows = {chunk_id: row for row, chunk_id in enumerate(chunk_ids)}


def _permit(table: ChunkTable, cut: int, sessions: Any, only: Any, chunk_id: str) -> bool:
    """The planner's per-chunk check (planner.engine, ``_vector_candidates``)."""
    row = table.rows.get(chunk_id)
    return (row is not None and row.max_seq <= cut and (sessions is None or row.session_id in sessions)
            and (only is None or chunk_id in only))


def _check(table: ChunkTable, segments: list[_Segment], rng: random.Random, rounds: int = 20) -> None:
    known = sorted({row.session_id for row in table.rows.values()})
    for _ in range(rounds):
        cut = rng.randrange(0, 5200)
        sessions = None if rng.random() < 0.3 else \
            set(rng.sample(known, rng.randrange(0, len(known)))) | {"s-unknown"}
        only = None if rng.random() < 0.5 else {f"c{n:05d}" for n in rng.sample(range(3300), 900)}
        mask = table.row_filter(cut, sessions, only)
        for segment in segments:
            got = mask(segment)
            assert got.dtype == bool
            assert got.tolist() == [_permit(table, cut, sessions, only, c) for c in segment.chunk_ids]


def test_the_row_mask_is_the_per_chunk_check_row_by_row(tmp_path: Path) -> None:
    rng = random.Random(3)
    rows = [_chunk(f"c{n:05d}", f"s{rng.randrange(40)}", rng.randrange(1, 5000)) for n in range(3000)]
    # An upsert: a later segment's row of c00001 (another session, a later seq) wins.
    gen = _generation(tmp_path / "g", rows[:2000], [*rows[2000:], _chunk("c00001", "s-late", 4999)])
    table = ChunkTable(gen, SegmentCache())
    # Vector segments hold chunks the table lacks too (vectors ahead of the structured index).
    _check(table, [_Segment([f"c{n:05d}" for n in rng.sample(range(3300), 1200)]) for _ in range(3)], rng, 40)


def test_each_generation_gets_its_own_rows_extended_or_rebuilt(tmp_path: Path) -> None:
    rng = random.Random(5)
    cache = SegmentCache()
    first = [_chunk(f"c{n:05d}", f"s{n % 30}", rng.randrange(1, 3000)) for n in range(2000)]
    g1 = _generation(tmp_path / "g1", first[:1000], first[1000:])
    segments = [_Segment([f"c{n:05d}" for n in rng.sample(range(3300), 1500)]) for _ in range(2)]
    old = ChunkTable(g1, cache)
    _check(old, segments, rng)
    # The next generation appends a segment: new chunks, a new session, upserts that move chunks
    # past cuts and into other sessions. Its maps extend the previous ones.
    added = [_chunk(f"c{n:05d}", "s-new", 4000 + n) for n in range(2000, 2600)] + \
        [_chunk(f"c{n:05d}", f"s{(n + 7) % 30}", 5100) for n in range(0, 2000, 9)]
    g2 = _generation(tmp_path / "g2", g1 / "chunks-00000001.parquet", g1 / "chunks-00000002.parquet", added)
    new = ChunkTable(g2, cache)
    assert new._segments[:2] == old._segments  # the same loaded segments: extended, not rebuilt
    _check(new, segments, rng)
    _check(old, segments, rng)  # the older generation still answers from its own rows
    # A compaction (one segment instead of the first two) is no extension: rebuilt.
    more = [_chunk(f"c{n:05d}", "s-more", 10 + n) for n in range(0, 2600, 5)]
    g3 = _generation(tmp_path / "g3", first, g2 / "chunks-00000003.parquet", more)
    _check(ChunkTable(g3, cache), segments, rng)


def test_a_mask_asked_again_is_the_one_made_for_that_set_and_cut(tmp_path: Path) -> None:
    """The queries of one principal between two commits share a mask (made once, read-only);
    another readable set, another cut or a structured filter gets its own."""
    rng = random.Random(9)
    rows = [_chunk(f"c{n:05d}", f"s{rng.randrange(20)}", rng.randrange(1, 1000)) for n in range(2000)]
    table = ChunkTable(_generation(tmp_path / "g", rows), SegmentCache())
    segment = _Segment([f"c{n:05d}" for n in range(2000)])
    readers = frozenset(f"s{n}" for n in range(15))
    first = table.row_filter(500, readers, None)(segment)
    assert table.row_filter(500, readers, None)(segment) is first
    assert not first.flags.writeable
    for cut, sessions, only in ((700, readers, None), (500, frozenset(readers), None),
                                (500, None, None), (500, readers, {"c00001", "c00002"})):
        got = table.row_filter(cut, sessions, only)(segment)
        assert got.tolist() == [_permit(table, cut, sessions, only, c) for c in segment.chunk_ids]
    assert table.row_filter(500, readers, None)(segment).tolist() == \
        [_permit(table, 500, readers, None, c) for c in segment.chunk_ids]


def test_a_few_readable_sessions_leave_only_their_rows(tmp_path: Path) -> None:
    rows = [_chunk(f"c{n:04d}", f"s{n % 50}", 10) for n in range(1000)]
    table = ChunkTable(_generation(tmp_path / "g", rows), SegmentCache())
    segment = _Segment([row["chunkId"] for row in rows])
    mask = table.row_filter(10, {"s7", "s21"}, None)(segment)
    assert [segment.chunk_ids[row] for row in np.flatnonzero(mask)] == \
        [row["chunkId"] for row in rows if row["sessionId"] in ("s7", "s21")]
    assert not table.row_filter(10, set(), None)(segment).any()


def test_a_row_map_is_rebuilt_for_other_rows_and_goes_with_its_segment(tmp_path: Path) -> None:
    table = ChunkTable(_generation(tmp_path / "g", [_chunk("c1", "s", 1), _chunk("c2", "s", 9)]),
                       SegmentCache())
    segment = _Segment(["c1", "c2", "c3"])
    assert table.row_filter(5, None, None)(segment).tolist() == [True, False, False]
    # The same key over other rows (never for a live segment, which is immutable): rebuilt.
    segment.chunk_ids = ["c2", "c1"]
    assert table.row_filter(5, None, None)(segment).tolist() == [False, True]
    assert len(table._row_maps) == 1
    del segment
    assert len(table._row_maps) == 0


def test_a_readable_set_seen_before_new_sessions_arrived_still_reads_them(tmp_path: Path) -> None:
    cache = SegmentCache()
    g1 = _generation(tmp_path / "g1", [_chunk("c1", "s-old", 1)])
    segment = _Segment(["c1", "c2"])
    readable = frozenset({"s-old", "s-new"})  # the access lists hand out one frozenset per principal
    assert ChunkTable(g1, cache).row_filter(5, readable, None)(segment).tolist() == [True, False]
    g2 = _generation(tmp_path / "g2", g1 / "chunks-00000001.parquet", [_chunk("c2", "s-new", 2)])
    assert ChunkTable(g2, cache).row_filter(5, readable, None)(segment).tolist() == [True, True]
