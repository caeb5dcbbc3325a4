"""The structured/lineage sink: chunk metadata, event→chunk coverage, session ACLs and lineage
edges as Parquet segments, and the DuckDB reader the planner filters and trims with.

Each batch adds (only non-empty ones; ``<n>`` is shared by the batch, zstd-compressed):

- ``chunks-<n>.parquet``   one row per chunk: ids, unit, seq range, times (POSIX seconds),
  roles/types/toolNames/statuses/paramKeys, tokenCount, tenant/aclRead, provisional, and the
  evidence list as JSON text;
- ``coverage-<n>.parquet`` one row per evidence entry (eventId, seq, chunkId, start, end,
  partFrom, partTo): which chunk covers which event at which byte range, so the planner can
  find chunks that straddle a snapshot and trim them;
- ``sessions-<n>.parquet`` one row per redacted event with the event's acl and lineage ids;
  the latest acl of a session is the one on its highest-seq row;
- ``secrets-<n>.parquet``  one row per value an event removed that its session had not removed
  before: the value's print (never the value), its length, the rule, the event's seq
  (:mod:`streams.redaction.memory`), for the planner's tail scan; no SQL view shows it;
- ``lineage-<n>.parquet``  edges ``kind, fromId → toId, seq``, each from parent to child:
  ``session-parent`` (parentSessionId → sessionId), ``run-session`` (sessionId → runId),
  ``episode-session`` (sessionId → episodeId: a subagent's episode), ``event-cause``
  (parentEventId → eventId, e.g. tool.call → tool.result, or → the episode.started of the
  subagent it spawned). ``sessionId`` is the session of the event the edge was read from.

Generations written before lineage 2 hold ``run-session`` / ``episode-session`` the other way
round (runId → sessionId); their segments are reused by later generations, so the reader turns
every such edge to start at its ``sessionId`` column (the session that declared it, always the
session end of the edge) whichever way it was written: no rebuild is needed.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import duckdb
import orjson
import pyarrow as pa

from sinks.exceptions import SinkError
from sinks.shard_tables import GenerationDirs, generation_dirs, shard_scan_sql
from sinks.writer import (
    compact_segments,
    next_segment_number,
    record_id,
    seed_generation,
    write_segment,
)
from streams.asp import posix_time

__all__ = ["SCHEMAS", "SCHEMA_VERSION", "StructuredReader", "StructuredWriter"]

SCHEMA_VERSION = "1"
_STRINGS = pa.list_(pa.string())
_MAX_LINEAGE_DEPTH = 64
# Edge kinds whose parent end is the declaring session (``sessionId``).
_SESSION_PARENT_KINDS = "('run-session', 'episode-session')"

SCHEMAS: dict[str, pa.Schema] = {
    "chunks": pa.schema([
        ("chunkId", pa.string()), ("logId", pa.string()), ("sessionId", pa.string()),
        ("runId", pa.string()), ("turnId", pa.string()), ("episodeId", pa.string()),
        ("unit", pa.string()), ("minSeq", pa.int64()), ("maxSeq", pa.int64()),
        ("startTime", pa.float64()), ("endTime", pa.float64()), ("eventTime", pa.float64()),
        ("roles", _STRINGS), ("types", _STRINGS), ("toolNames", _STRINGS), ("statuses", _STRINGS),
        ("paramKeys", _STRINGS), ("tokenCount", pa.int64()), ("tenant", pa.string()),
        ("aclRead", _STRINGS), ("provisional", pa.bool_()), ("evidence", pa.string()),
    ]),
    "coverage": pa.schema([
        ("eventId", pa.string()), ("seq", pa.int64()), ("chunkId", pa.string()),
        ("sessionId", pa.string()), ("start", pa.int64()), ("end", pa.int64()),
        ("partFrom", pa.int64()), ("partTo", pa.int64()),
    ]),
    "sessions": pa.schema([
        ("sessionId", pa.string()), ("logId", pa.string()), ("seq", pa.int64()),
        ("eventId", pa.string()), ("type", pa.string()), ("tenant", pa.string()),
        ("aclRead", _STRINGS), ("parentSessionId", pa.string()), ("runId", pa.string()),
        ("turnId", pa.string()), ("episodeId", pa.string()), ("parentEventId", pa.string()),
        ("time", pa.float64()),
    ]),
    "lineage": pa.schema([
        ("kind", pa.string()), ("fromId", pa.string()), ("toId", pa.string()),
        ("seq", pa.int64()), ("sessionId", pa.string()), ("logId", pa.string()),
    ]),
    "secrets": pa.schema([
        ("sessionId", pa.string()), ("logId", pa.string()), ("seq", pa.int64()),
        ("print", pa.string()), ("length", pa.int64()), ("rule", pa.string()),
    ]),
}


class StructuredWriter:
    """IndexWriter for kind ``structured``: chunks and redacted events → Parquet segments."""

    kind = "structured"
    sources: tuple[str, ...] = ("chunks", "redacted")

    def describe(self) -> dict[str, Any]:
        return {"schemaVersion": SCHEMA_VERSION, "tables": sorted(SCHEMAS), "format": "parquet"}

    def write(self, staging: Path, previous: Path | None, records: Sequence[dict[str, Any]]) -> list[str]:
        seed_generation(staging, previous)
        chunks = _unique(r for r in records if r.get("kind") == "chunk")
        events = _unique(r for r in records if r.get("kind") == "event")
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEMAS}
        for chunk in chunks:
            rows["chunks"].append(_chunk_row(chunk))
            rows["coverage"].extend(_coverage_rows(chunk))
        edges: dict[tuple[str, str, str], dict[str, Any]] = {}
        for record in events:
            rows["sessions"].append(_session_row(record))
            rows["secrets"].extend(_secret_rows(record))
            for edge in _lineage_rows(record):
                # Every event of a run repeats its run-session edge: keep the first per batch.
                key = (edge["kind"], edge["fromId"], edge["toId"])
                if key not in edges or edge["seq"] < edges[key]["seq"]:
                    edges[key] = edge
        rows["lineage"] = list(edges.values())
        number = next_segment_number(staging)
        written = []
        for table, schema in SCHEMAS.items():
            name = write_segment(staging, table, number, pa.Table.from_pylist(rows[table], schema=schema))
            if name:
                written.append(name)
            merged = compact_segments(staging, table, schema, number + 1)
            if merged:
                written = [n for n in written if (staging / n).exists()] + [merged]
        return written


class StructuredReader:
    """Read-only queries over one structured generation (DuckDB over its Parquet files), or
    over every shard's generation of a sharded index as one (each table the union of the
    shards': :mod:`sinks.shard_tables`).

    Safe to share between threads: each call runs on its own cursor of a private in-memory
    database whose views read the generations' immutable files.
    """

    def __init__(self, gen_dirs: GenerationDirs) -> None:
        self.gen_dirs = generation_dirs(gen_dirs)
        if not self.gen_dirs:
            raise SinkError("a structured reader needs at least one generation")
        self.gen_dir = self.gen_dirs[0]
        for gen_dir in self.gen_dirs:
            if not gen_dir.is_dir():
                raise SinkError(f"structured generation {gen_dir.name!r} does not exist")
        self._con = duckdb.connect(":memory:")
        for table, schema in SCHEMAS.items():
            self._con.execute(f"CREATE VIEW {table} AS SELECT * FROM {shard_scan_sql(self.gen_dirs, table, schema)}")

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> StructuredReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def session_acls(self, as_of_seq: int | None = None) -> dict[str, dict[str, Any]]:
        """sessionId → the acl on its highest-seq event (``{"tenant", "read"}``).

        With ``as_of_seq``, only events with seq <= as_of_seq count (the acl as it was then).
        The planner applies the *latest* acl whatever the snapshot (a revocation applies at
        once), so it calls this without ``as_of_seq``. A session known only from chunks gets
        its newest chunk's acl.
        """
        bound = "" if as_of_seq is None else "WHERE seq <= $as_of"
        chunk_bound = "" if as_of_seq is None else "WHERE maxSeq <= $as_of"
        sql = f"""
            SELECT sessionId, tenant, aclRead FROM (
                SELECT sessionId, tenant, aclRead, seq, 1 AS priority FROM sessions {bound}
                UNION ALL
                SELECT sessionId, tenant, aclRead, maxSeq AS seq, 0 AS priority FROM chunks {chunk_bound}
            )
            QUALIFY row_number() OVER (PARTITION BY sessionId ORDER BY seq DESC, priority DESC) = 1
        """
        params = {} if as_of_seq is None else {"as_of": int(as_of_seq)}
        acls: dict[str, dict[str, Any]] = {}
        for session_id, tenant, read in self._rows(sql, params):
            acl: dict[str, Any] = {"tenant": tenant}
            if read is not None:
                acl["read"] = list(read)
            acls[session_id] = acl
        return acls

    def chunk_meta(self, chunk_ids: Collection[str]) -> dict[str, dict[str, Any]]:
        """chunkId → its metadata row (evidence parsed) for the ids that exist."""
        if not chunk_ids:
            return {}
        sql = "SELECT * FROM chunks WHERE chunkId IN (SELECT unnest($ids))"
        return {row["chunkId"]: row for row in self._dicts(sql, {"ids": sorted(set(chunk_ids))})}

    def straddling(self, as_of_seq: int, session_ids: Collection[str] | None = None) -> list[dict[str, Any]]:
        """Chunks with ``minSeq <= as_of_seq < maxSeq``: they hold evidence on both sides of
        the snapshot and must be trimmed (or left out and disclosed). Ordered by chunkId."""
        if session_ids is not None and not session_ids:
            return []
        sql = "SELECT * FROM chunks WHERE minSeq <= $as_of AND maxSeq > $as_of"
        params: dict[str, Any] = {"as_of": int(as_of_seq)}
        if session_ids is not None:
            sql += " AND sessionId IN (SELECT unnest($sessions))"
            params["sessions"] = sorted(set(session_ids))
        return self._dicts(sql + " ORDER BY chunkId", params)

    def filter_chunk_ids(
        self,
        *,
        session_ids: Collection[str] | None = None,
        run_ids: Collection[str] | None = None,
        turn_ids: Collection[str] | None = None,
        tool_names: Collection[str] | None = None,
        statuses: Collection[str] | None = None,
        roles: Collection[str] | None = None,
        time_from: float | str | datetime | None = None,
        time_to: float | str | datetime | None = None,
        max_seq: int | None = None,
    ) -> set[str]:
        """Ids of the chunks matching every given filter (None = no filter; an empty
        collection matches nothing). Id filters match exactly; tool_names/statuses/roles match
        a chunk having any of them; ``time_from``/``time_to`` keep chunks whose
        [startTime, endTime] overlaps the range; ``max_seq`` keeps chunks with some evidence at
        or below it (``minSeq <= max_seq``; straddlers are trimmed by the planner)."""
        where: list[str] = []
        params: dict[str, Any] = {}
        for column, values in (("sessionId", session_ids), ("runId", run_ids), ("turnId", turn_ids)):
            if values is not None:
                if not values:
                    return set()
                where.append(f"{column} IN (SELECT unnest(${column}))")
                params[column] = sorted(set(values))
        for column, values in (("toolNames", tool_names), ("statuses", statuses), ("roles", roles)):
            if values is not None:
                if not values:
                    return set()
                where.append(f"list_has_any({column}, ${column}::VARCHAR[])")
                params[column] = sorted(set(values))
        if time_from is not None:
            where.append("endTime >= $time_from")
            params["time_from"] = _as_posix(time_from)
        if time_to is not None:
            where.append("startTime <= $time_to")
            params["time_to"] = _as_posix(time_to)
        if max_seq is not None:
            where.append("minSeq <= $max_seq")
            params["max_seq"] = int(max_seq)
        sql = "SELECT DISTINCT chunkId FROM chunks" + (" WHERE " + " AND ".join(where) if where else "")
        return {row[0] for row in self._rows(sql, params)}

    def lineage(
        self,
        entity_id: str,
        direction: Literal["ancestors", "descendants"] = "descendants",
        as_of_seq: int | None = None,
        max_depth: int = _MAX_LINEAGE_DEPTH,
    ) -> list[dict[str, Any]]:
        """Edges reachable from ``entity_id`` (a session, run, episode or event id), following
        edges forward (descendants: from parent to child) or backward (ancestors), only edges
        with seq <= as_of_seq. A session's descendants are its runs, its (subagent) episodes and
        its child sessions; an event's are the events it caused.

        Each edge: ``kind, fromId, toId, seq`` (its first appearance), ``sessionId`` (whose
        event declared it; the caller checks ACLs) and ``depth`` (1 = adjacent). Ordered by
        depth, seq, kind, fromId, toId. Cycles terminate; depth is capped at ``max_depth`` (64).
        """
        if direction not in ("ancestors", "descendants"):
            raise SinkError(f"lineage direction must be 'ancestors' or 'descendants', not {direction!r}")
        near, far = ("fromId", "toId") if direction == "descendants" else ("toId", "fromId")
        bound = "" if as_of_seq is None else "WHERE seq <= $as_of"
        # Older segments hold a session's run/episode edges as child → session: turn them round.
        reversed_ = f"kind IN {_SESSION_PARENT_KINDS} AND fromId <> sessionId"
        sql = f"""
            WITH RECURSIVE declared AS (
                SELECT kind, CASE WHEN {reversed_} THEN toId ELSE fromId END AS fromId,
                       CASE WHEN {reversed_} THEN fromId ELSE toId END AS toId, seq, sessionId
                FROM lineage {bound}
            ), edges AS (
                SELECT kind, fromId, toId, min(seq) AS seq, arg_min(sessionId, seq) AS sessionId
                FROM declared GROUP BY kind, fromId, toId
            ), walk(kind, fromId, toId, seq, sessionId, depth) AS (
                SELECT kind, fromId, toId, seq, sessionId, 1 FROM edges WHERE {near} = $entity
                UNION
                SELECT e.kind, e.fromId, e.toId, e.seq, e.sessionId, w.depth + 1
                FROM edges e JOIN walk w ON e.{near} = w.{far}
                WHERE w.depth < {int(max_depth)}
            )
            SELECT kind, fromId, toId, seq, sessionId, min(depth) AS depth FROM walk
            GROUP BY ALL ORDER BY depth, seq, kind, fromId, toId
        """
        params: dict[str, Any] = {"entity": str(entity_id)}
        if as_of_seq is not None:
            params["as_of"] = int(as_of_seq)
        return self._dicts(sql, params)

    def sessions(self) -> list[str]:
        """Every session id the generation knows, sorted."""
        sql = "SELECT sessionId FROM sessions UNION SELECT sessionId FROM chunks ORDER BY 1"
        return [row[0] for row in self._rows(sql, {})]

    # -- internals ---------------------------------------------------------------------------

    def _rows(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with self._con.cursor() as cursor:
            return cursor.execute(sql, params).fetchall()

    def _dicts(self, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self._con.cursor() as cursor:
            result = cursor.execute(sql, params)
            names = [d[0] for d in result.description]
            rows = [dict(zip(names, row, strict=True)) for row in result.fetchall()]
        for row in rows:
            if isinstance(row.get("evidence"), str):
                row["evidence"] = json.loads(row["evidence"])
        return rows


# -- rows ------------------------------------------------------------------------------------


def _unique(records: Any) -> list[dict[str, Any]]:
    """Records in order, the last of each record_id winning (replays carry the same bytes)."""
    by_id: dict[str, dict[str, Any]] = {}
    for record in records:
        key = record_id(record)
        by_id.pop(key, None)
        by_id[key] = record
    return list(by_id.values())


def _chunk_row(chunk: dict[str, Any]) -> dict[str, Any]:
    fields = chunk.get("fields") or {}
    acl = chunk.get("acl") or {}
    evidence = chunk.get("evidence") or []
    return {
        "chunkId": chunk["chunkId"], "logId": chunk.get("logId"), "sessionId": chunk["sessionId"],
        "runId": chunk.get("runId"), "turnId": chunk.get("turnId"), "episodeId": chunk.get("episodeId"),
        "unit": chunk.get("unit"), "minSeq": int(chunk["minSeq"]), "maxSeq": int(chunk["maxSeq"]),
        "startTime": _as_posix(chunk.get("startTime")), "endTime": _as_posix(chunk.get("endTime")),
        "eventTime": _as_posix(chunk.get("eventTime")),
        "roles": _strings(fields.get("roles")), "types": _strings(fields.get("types")),
        "toolNames": _strings(fields.get("toolNames")), "statuses": _strings(fields.get("statuses")),
        "paramKeys": _strings(fields.get("paramKeys")),
        "tokenCount": int(chunk.get("tokenCount") or 0), "tenant": acl.get("tenant"),
        "aclRead": _strings(acl["read"]) if isinstance(acl.get("read"), list) else None,
        "provisional": bool(chunk.get("provisional", False)),
        "evidence": orjson.dumps(evidence).decode("utf-8"),
    }


def _coverage_rows(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for entry in chunk.get("evidence") or []:
        part = entry.get("part") or [None, None]
        rows.append({
            "eventId": entry["eventId"], "seq": int(entry["seq"]), "chunkId": chunk["chunkId"],
            "sessionId": chunk["sessionId"], "start": int(entry["start"]), "end": int(entry["end"]),
            "partFrom": part[0], "partTo": part[1],
        })
    return rows


def _session_row(record: dict[str, Any]) -> dict[str, Any]:
    event = record["event"]
    acl = event.get("acl") or {}
    return {
        "sessionId": event["sessionId"], "logId": record["logId"], "seq": int(record["seq"]),
        "eventId": event.get("eventId"), "type": event.get("type"), "tenant": acl.get("tenant"),
        "aclRead": _strings(acl["read"]) if isinstance(acl.get("read"), list) else None,
        "parentSessionId": event.get("parentSessionId"), "runId": event.get("runId"),
        "turnId": event.get("turnId"), "episodeId": event.get("episodeId"),
        "parentEventId": event.get("parentEventId"), "time": _as_posix(event.get("time")),
    }


def _secret_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    session_id, log_id, seq = record["event"]["sessionId"], record["logId"], int(record["seq"])
    return [{"sessionId": session_id, "logId": log_id, "seq": seq, "print": str(print_), "length": int(length),
             "rule": str(rule)}
            for print_, length, rule in record.get("secrets") or ()]


def _lineage_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    event = record["event"]
    session_id = event["sessionId"]
    edges = [
        ("session-parent", event.get("parentSessionId"), session_id),
        # A session is the parent of its runs and episodes: DESCENDANTS of a session reach them.
        ("run-session", session_id, event.get("runId")),
        ("episode-session", session_id, event.get("episodeId")),
        ("event-cause", event.get("parentEventId"), event.get("eventId")),
    ]
    return [
        {"kind": kind, "fromId": source, "toId": target, "seq": int(record["seq"]),
         "sessionId": session_id, "logId": record["logId"]}
        for kind, source, target in edges if source and target
    ]


def _strings(values: Any) -> list[str]:
    return [str(v) for v in values or () if v is not None]


def _as_posix(value: Any) -> float | None:
    try:
        return posix_time(value)
    except ValueError as exc:
        raise SinkError(str(exc)) from None
