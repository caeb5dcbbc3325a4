"""The analytics sink: row-level facts as Parquet, the input of the read-only SQL attachment.

Each batch adds (only non-empty ones; ``<n>`` is shared by the batch, zstd-compressed):

- ``events-<n>.parquet``       one row per redacted event;
- ``tool_calls-<n>.parquet``   one row per ``tool.call`` event;
- ``tool_results-<n>.parquet`` one row per ``tool.result`` event;
- ``chunks-<n>.parquet``       one row per SearchChunkV1 chunk.

Every row carries ``seq`` (chunks: ``minSeq``/``maxSeq``), so a snapshot at ``asOfSeq`` is a
filter, and ``sessionId``, so the caller's ACL is a filter too. Rows hold ids, types, times,
counts, sizes, tool names, parameter keys, statuses, models and titles: no free text beyond
the redacted titles, no payloads, no parameter values. ``docs/sql.md`` documents every column.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from sinks.writer import (
    compact_segments,
    next_segment_number,
    record_id,
    seed_generation,
    write_segment,
)
from streams.asp import parse_time
from streams.chunking.render import param_keys, tool_name, tool_status

__all__ = ["SCHEMAS", "SCHEMA_VERSION", "AnalyticsWriter"]

SCHEMA_VERSION = "1"
_TIME = pa.timestamp("us", tz="UTC")
_STRINGS = pa.list_(pa.string())

SCHEMAS: dict[str, pa.Schema] = {
    "events": pa.schema([
        ("logId", pa.string()), ("seq", pa.int64()), ("eventId", pa.string()),
        ("sessionId", pa.string()), ("runId", pa.string()), ("turnId", pa.string()),
        ("episodeId", pa.string()), ("parentSessionId", pa.string()), ("parentEventId", pa.string()),
        ("type", pa.string()), ("role", pa.string()), ("time", _TIME), ("visibility", pa.string()),
        ("tenant", pa.string()), ("aclRead", _STRINGS), ("model", pa.string()),
        ("inputTokens", pa.int64()), ("outputTokens", pa.int64()), ("toolName", pa.string()),
        ("toolCallId", pa.string()), ("status", pa.string()), ("textBytes", pa.int64()),
        ("title", pa.string()),
    ]),
    "tool_calls": pa.schema([
        ("logId", pa.string()), ("seq", pa.int64()), ("eventId", pa.string()),
        ("sessionId", pa.string()), ("runId", pa.string()), ("turnId", pa.string()),
        ("toolCallId", pa.string()), ("toolName", pa.string()), ("time", _TIME),
        ("paramKeys", _STRINGS),
    ]),
    "tool_results": pa.schema([
        ("logId", pa.string()), ("seq", pa.int64()), ("eventId", pa.string()),
        ("sessionId", pa.string()), ("runId", pa.string()), ("turnId", pa.string()),
        ("toolCallId", pa.string()), ("toolName", pa.string()), ("status", pa.string()),
        ("time", _TIME), ("outputBytes", pa.int64()), ("parentEventId", pa.string()),
    ]),
    "chunks": pa.schema([
        ("chunkId", pa.string()), ("logId", pa.string()), ("sessionId", pa.string()),
        ("runId", pa.string()), ("turnId", pa.string()), ("episodeId", pa.string()),
        ("unit", pa.string()), ("minSeq", pa.int64()), ("maxSeq", pa.int64()),
        ("tokenCount", pa.int64()), ("eventTime", _TIME),
    ]),
}

# Where each kind of event keeps its main text; only its size is recorded.
_TEXT_KEYS = ("text", "content", "output", "summary", "message", "error")
_TITLED_TYPES = frozenset({"session.started", "run.started", "episode.started"})


class AnalyticsWriter:
    """IndexWriter for kind ``analytics``: redacted events and chunks → Parquet facts."""

    kind = "analytics"
    sources: tuple[str, ...] = ("redacted", "chunks")

    def describe(self) -> dict[str, Any]:
        return {"schemaVersion": SCHEMA_VERSION, "tables": sorted(SCHEMAS), "format": "parquet"}

    def write(self, staging: Path, previous: Path | None, records: Sequence[dict[str, Any]]) -> list[str]:
        seed_generation(staging, previous)
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in SCHEMAS}
        seen: set[str] = set()
        for record in records:
            kind = record.get("kind")
            if kind not in ("event", "chunk"):
                continue
            key = record_id(record)
            if key in seen:  # a replayed record carries the same facts
                continue
            seen.add(key)
            if kind == "chunk":
                rows["chunks"].append(_chunk_row(record))
                continue
            event_row = _event_row(record)
            rows["events"].append(event_row)
            if event_row["type"] == "tool.call":
                rows["tool_calls"].append(_tool_call_row(record, event_row))
            elif event_row["type"] == "tool.result":
                rows["tool_results"].append(_tool_result_row(record, event_row))
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


def _event_row(record: dict[str, Any]) -> dict[str, Any]:
    event = record["event"]
    fields: dict[str, Any] = event["fields"] if isinstance(event.get("fields"), dict) else {}
    acl = event.get("acl") or {}
    usage: dict[str, Any] = fields["usage"] if isinstance(fields.get("usage"), dict) else {}
    event_type = event.get("type")
    title = fields.get("title") or (fields.get("goal") if event_type == "episode.started" else None)
    return {
        "logId": record["logId"], "seq": int(record["seq"]), "eventId": event.get("eventId"),
        "sessionId": event["sessionId"], "runId": event.get("runId"), "turnId": event.get("turnId"),
        "episodeId": event.get("episodeId"), "parentSessionId": event.get("parentSessionId"),
        "parentEventId": event.get("parentEventId"), "type": event_type, "role": event.get("role"),
        "time": _time(event.get("time")), "visibility": event.get("visibility", "visible"),
        "tenant": acl.get("tenant"),
        "aclRead": [str(v) for v in acl["read"]] if isinstance(acl.get("read"), list) else None,
        "model": _string(fields.get("model")),
        "inputTokens": _int(usage.get("inputTokens", fields.get("inputTokens"))),
        "outputTokens": _int(usage.get("outputTokens", fields.get("outputTokens"))),
        "toolName": tool_name(event) if event_type in ("tool.call", "tool.result") else None,
        "toolCallId": _string(fields.get("toolCallId")),
        "status": tool_status(event) if event_type == "tool.result" else _string(fields.get("status")),
        "textBytes": _text_bytes(fields),
        "title": _string(title) if event_type in _TITLED_TYPES else None,
    }


def _tool_call_row(record: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    picked = {k: row[k] for k in ("logId", "seq", "eventId", "sessionId", "runId", "turnId",
                                  "toolCallId", "toolName", "time")}
    return {**picked, "paramKeys": param_keys(record["event"])}


def _tool_result_row(record: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    picked = {k: row[k] for k in ("logId", "seq", "eventId", "sessionId", "runId", "turnId",
                                  "toolCallId", "toolName", "status", "time", "parentEventId")}
    fields = record["event"].get("fields") or {}
    output = fields.get("output", fields.get("summary")) if isinstance(fields, dict) else None
    return {**picked, "outputBytes": None if output is None else _size(output)}


def _chunk_row(chunk: dict[str, Any]) -> dict[str, Any]:
    return {
        "chunkId": chunk["chunkId"], "logId": chunk.get("logId"), "sessionId": chunk["sessionId"],
        "runId": chunk.get("runId"), "turnId": chunk.get("turnId"), "episodeId": chunk.get("episodeId"),
        "unit": chunk.get("unit"), "minSeq": int(chunk["minSeq"]), "maxSeq": int(chunk["maxSeq"]),
        "tokenCount": int(chunk.get("tokenCount") or 0), "eventTime": _time(chunk.get("eventTime")),
    }


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    text = str(value)
    try:
        # Fast path for the common shape; parse_time handles the rest (nanoseconds, "t", " ").
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is not None:
            return moment.astimezone(UTC)
    except ValueError:
        pass
    try:
        return parse_time(text)
    except ValueError:
        return None


def _text_bytes(fields: dict[str, Any]) -> int | None:
    for key in _TEXT_KEYS:
        if fields.get(key) is not None:
            return _size(fields[key])
    return None


def _size(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return len(text.encode("utf-8", "replace"))


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    # bool is an int subclass; a True token count is a producer bug, not 1 token.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value)
