"""The Parquet tables of a sharded index read as one index's tables.

Every table the structured and analytics sinks write comes from records of the derived
topics keyed by ``sessionId`` (chunks, redacted events; the per-log ticks and progress markers
only move watermarks and write no row), so each row, and every row of one session, lives in
exactly one shard (:mod:`sinks.shards`). Nothing is aggregated across sessions at write time:
the SQL attachment's ``sessions``/``runs``/``turns`` and the structured reader's per-session
access lists and lineage walk are computed at query time over the union. A table of a sharded
index is therefore the ``UNION ALL`` of its shards' tables, which is what one index over the
same records holds.

A caller passes one generation directory (an unsharded index) or every shard's pinned
generation (:class:`GenerationDirs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from sinks.writer import parquet_segments, scan_sql

__all__ = ["GenerationDirs", "generation_dirs", "shard_scan_sql", "shard_segments"]

GenerationDirs = Path | Sequence[Path]
"""One generation directory, or a sharded index's: one pinned generation per shard."""


def generation_dirs(gen_dirs: GenerationDirs) -> tuple[Path, ...]:
    """``gen_dirs`` as a tuple of directories (one for an unsharded index)."""
    if isinstance(gen_dirs, str | Path):
        return (Path(gen_dirs),)
    return tuple(Path(d) for d in gen_dirs)


def shard_segments(gen_dirs: GenerationDirs, table: str) -> list[Path]:
    """The Parquet segments of ``table`` over every shard's generation: each shard's in write
    order (:func:`sinks.writer.parquet_segments`), one shard after the other."""
    return [path for gen_dir in generation_dirs(gen_dirs) for path in parquet_segments(gen_dir, table)]


def shard_scan_sql(gen_dirs: GenerationDirs, table: str, schema: pa.Schema) -> str:
    """A DuckDB FROM-clause expression over ``table`` of every shard's generation: the
    ``UNION ALL BY NAME`` of each shard's :func:`sinks.writer.scan_sql` (a shard whose
    segments predate a column reads it as NULL, as one generation's older segments do)."""
    scans = [scan_sql(gen_dir, table, schema) for gen_dir in generation_dirs(gen_dirs)]
    if len(scans) == 1:
        return scans[0]
    return "(" + " UNION ALL BY NAME ".join(f"SELECT * FROM {scan}" for scan in scans) + ")"
