"""The contract between the sink runner and an index writer.

The runner (``sinks/runner.py``) consumes the derived topics a writer names in ``sources``,
drops duplicates by :func:`record_id`, and for each batch hands the writer a fresh staging
directory. The writer fills it with a complete new generation; the runner then commits it and
publishes the watermark. Writers know nothing of Kafka, offsets or watermarks.

The helpers below are shared by the Parquet writers (``sinks/structured.py``,
``sinks/analytics.py``) and their readers: numbered, zstd-compressed segment files
``<table>-<n>.parquet``, their size-tiered compaction, and the DuckDB scan over them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from sinks.generations import MANIFEST_FILE, Manifest, clone_into

__all__ = [
    "RECORD_KINDS",
    "SOURCE_KINDS",
    "IndexWriter",
    "compact_segments",
    "next_segment_number",
    "parquet_segments",
    "record_id",
    "scan_sql",
    "seed_generation",
    "write_segment",
]


SOURCE_KINDS: dict[str, tuple[str, ...]] = {
    "chunks": ("chunk",), "redacted": ("event",), "toolresults": ("toolresult", "toolcall"),
}
"""The records each derived topic carries that a sink indexes (``streams.stages.records``)."""

RECORD_KINDS = frozenset(kind for kinds in SOURCE_KINDS.values() for kind in kinds)


@runtime_checkable
class IndexWriter(Protocol):
    """Writes one index kind as a sequence of immutable generations.

    ``kind`` is the index kind (``text``, ``vector``, ``structured``, ``analytics``,
    ``toolresults``); ``sources`` the derived topics it reads (``chunks``, ``redacted``,
    ``toolresults``).
    """

    kind: str
    sources: tuple[str, ...]

    def describe(self) -> dict[str, Any]:
        """Metadata merged into the manifest's ``extra`` (schema version, table names, ...)."""
        ...

    def write(self, staging: Path, previous: Path | None, records: Sequence[dict[str, Any]]) -> list[str]:
        """Write a new generation into ``staging``.

        First reuse ``previous`` (the current generation's directory, None for the first
        generation) with :func:`sinks.generations.clone_into`, then add new immutable files
        for ``records``. Returns the names of the new files. A file that exists in
        ``previous`` is never modified.
        """
        ...


def record_id(record: dict[str, Any]) -> str:
    """The dedup key of a topic record: a chunk's ``chunkId``, else ``"<logId>:<seq>"``."""
    if record.get("kind") == "chunk":
        return str(record["chunkId"])
    return f"{record['logId']}:{record['seq']}"


# -- helpers shared by the Parquet writers (structured, analytics) and their readers ---------

#: Bytes of record batches a merge holds before writing them as one row group.
_MERGE_BUFFER_BYTES = 32 << 20
_SEGMENT = re.compile(r"^(?P<table>[a-z_]+)-(?P<number>\d{8})\.parquet$")


def seed_generation(staging: Path, previous: Path | None) -> None:
    """Hard-link every file of ``previous`` into ``staging`` (Parquet files are never
    rewritten, so nothing needs copying)."""
    staging.mkdir(parents=True, exist_ok=True)
    if previous is not None:
        clone_into(previous, staging, copy_names=())


def next_segment_number(directory: Path) -> int:
    """One more than the highest ``<table>-<n>.parquet`` number in ``directory``: every
    table of one batch shares the number, so a batch's files are easy to tell apart."""
    numbers = [int(m["number"]) for p in directory.iterdir() if (m := _SEGMENT.match(p.name))]
    return max(numbers, default=0) + 1


def write_segment(directory: Path, table: str, number: int, rows: pa.Table) -> str | None:
    """Write ``rows`` as ``<table>-<number>.parquet`` (zstd); None when there are no rows."""
    if rows.num_rows == 0:
        return None
    name = f"{table}-{number:08d}.parquet"
    pq.write_table(rows, directory / name, compression="zstd")
    return name


def compact_segments(directory: Path, table: str, schema: pa.Schema, number: int, *,
                     fanout: int = 8, base_bytes: int = 64 << 10, max_bytes: int = 64 << 20) -> str | None:
    """Merge ``fanout`` segments of one size tier of ``table`` into ``<table>-<number>.parquet``.

    Size-tiered: a segment of ``size`` bytes is in tier ``floor(log_fanout(size / base_bytes))``;
    when a tier holds ``fanout`` segments, the oldest ``fanout`` are merged (the result lands a
    tier up) and their links are removed from ``directory``, a staging dir, so the previous
    generation keeps its files. Segments of ``max_bytes`` or more are never merged again. So a
    table keeps about ``fanout`` files per tier instead of one per batch, and each row is
    rewritten about once per tier. Returns the new file name, or None when nothing is merged.
    """
    tiers: dict[int, list[Path]] = {}
    for path in parquet_segments(directory, table):
        size = path.stat().st_size
        if size < max_bytes:
            tier = int(math.log(max(size, base_bytes) / base_bytes, fanout))
            tiers.setdefault(tier, []).append(path)
    full = [paths for _, paths in sorted(tiers.items()) if len(paths) >= fanout]
    if not full:
        return None
    chosen = full[0][:fanout]
    name = f"{table}-{number:08d}.parquet"
    # Batches gathered up to _MERGE_BUFFER_BYTES, each lot written as one row group: a merge of
    # the top tier must not need its whole size in memory, and a batch written alone is a row
    # group of its own, so merges of merges of one-batch segments wrote files of a dozen tiny
    # row groups, slower to write (most of an analytics commit) and to read.
    with pq.ParquetWriter(directory / name, schema, compression="zstd") as out:
        lot: list[pa.RecordBatch] = []
        held = 0
        for batch in ds.dataset([str(p) for p in chosen], schema=schema, format="parquet").to_batches():
            if batch.num_rows:
                lot.append(batch)
                held += batch.nbytes
            if held >= _MERGE_BUFFER_BYTES:
                out.write_table(pa.Table.from_batches(lot, schema=schema))
                lot, held = [], 0
        if lot:
            out.write_table(pa.Table.from_batches(lot, schema=schema))
    for path in chosen:
        path.unlink()
    return name


def parquet_segments(gen_dir: Path, table: str) -> list[Path]:
    """The Parquet segment files of ``table`` in a generation, in write order.

    A committed generation's files are the ones its manifest lists (so a file lost from disk
    fails the read instead of silently dropping rows); a staging dir's are the ones present.
    """
    gen_dir = Path(gen_dir)
    try:
        names = [s.path for s in Manifest.from_json((gen_dir / MANIFEST_FILE).read_bytes()).segments]
    except FileNotFoundError:
        names = [p.name for p in gen_dir.iterdir()]
    found = [(int(m["number"]), gen_dir / name) for name in names
             if (m := _SEGMENT.match(name)) and m["table"] == table]
    return [p for _, p in sorted(found)]


def scan_sql(gen_dir: Path, table: str, schema: pa.Schema) -> str:
    """A DuckDB FROM-clause expression over ``table``'s segments, typed by ``schema`` even
    when the generation holds no segment of it yet."""
    files = parquet_segments(gen_dir, table)
    if files:
        listed = ", ".join(_sql_string(str(p)) for p in files)
        # union_by_name: a segment written before a column was added still reads (as NULL).
        return f"read_parquet([{listed}], union_by_name = true)"
    columns = ", ".join(f"CAST(NULL AS {_duckdb_type(f.type)}) AS {_ident(f.name)}" for f in schema)
    return f"(SELECT {columns} LIMIT 0)"


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _duckdb_type(arrow_type: pa.DataType) -> str:
    if pa.types.is_list(arrow_type):
        return _duckdb_type(arrow_type.value_type) + "[]"
    if pa.types.is_timestamp(arrow_type):
        return "TIMESTAMPTZ" if arrow_type.tz else "TIMESTAMP"
    simple = {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.int32(): "INTEGER",
              pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN"}
    if arrow_type in simple:
        return simple[arrow_type]
    raise TypeError(f"no DuckDB type for {arrow_type}")
