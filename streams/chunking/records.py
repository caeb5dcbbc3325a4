"""Building SearchChunkV1 records from the segments a chunk holds.

A *segment* is one rendered event (or one part of a long one) as the chunker keeps it in its
JSON state: ``{"eventId", "seq", "text", "tokens", "bytes", "part": [from, to], "time", "iso",
"role", "type", "tool", "status", "keys", "runId", "turnId", "episodeId"}``.
The record shape is fixed by ``docs/architecture.md``.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

__all__ = ["SCHEMA", "build_chunk", "chunk_id", "rfc3339"]

SCHEMA = "SearchChunkV1"


def rfc3339(moment: datetime) -> str:
    """``moment`` as RFC 3339 UTC with a ``Z``; microseconds only when there are some."""
    moment = moment.astimezone(UTC)
    fraction = f".{moment.microsecond:06d}" if moment.microsecond else ""
    # isoformat, not strftime: glibc's %Y writes year 1 as "1", a time nothing parses back (an
    # event of 0001-01-01, which the schema allows, failed every sink and the planner's tail scan).
    return moment.replace(tzinfo=None, microsecond=0).isoformat() + fraction + "Z"


def chunk_id(
    *, log_id: str, session_id: str, unit_key: str, first: dict[str, Any], last: dict[str, Any],
    chunker_version: str, policy_hash: str,
) -> str:
    """``c_`` + 32 hex of a hash over the chunk's identity and boundaries (stable on replay)."""
    identity = [
        log_id, session_id, unit_key,
        [first["eventId"], first["part"]], [last["eventId"], last["part"]],
        chunker_version, policy_hash,
    ]
    digest = hashlib.sha256(
        json.dumps(identity, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    )
    return "c_" + digest.hexdigest()[:32]


def build_chunk(
    segments: list[dict[str, Any]], *, log_id: str, session_id: str, unit_kind: str,
    unit_key: str, acl: dict[str, Any], versions: dict[str, str], provisional: bool,
) -> dict[str, Any]:
    """The SearchChunkV1 record of ``segments`` (in order, at least one)."""
    evidence = []
    cursor = 0
    for segment in segments:
        end = cursor + segment["bytes"]
        evidence.append({
            "eventId": segment["eventId"], "seq": segment["seq"], "start": cursor, "end": end,
            "part": list(segment["part"]),
        })
        cursor = end + 1  # the "\n" separator
    event_ids = list(dict.fromkeys(segment["eventId"] for segment in segments))
    seqs = [segment["seq"] for segment in segments]
    earliest = min(segments, key=lambda segment: segment["time"])
    latest = max(segments, key=lambda segment: segment["time"])
    chunk: dict[str, Any] = {
        "kind": "chunk",
        "schema": SCHEMA,
        "chunkId": chunk_id(
            log_id=log_id, session_id=session_id, unit_key=unit_key,
            first=segments[0], last=segments[-1],
            chunker_version=versions["chunker"], policy_hash=versions["redactionPolicy"],
        ),
        "logId": log_id,
        "sessionId": session_id,
        "runId": _shared(segments, "runId"),
        "turnId": _shared(segments, "turnId"),
        "episodeId": _shared(segments, "episodeId"),
        "unit": unit_kind,
        "text": "\n".join(segment["text"] for segment in segments),
        "fields": {
            "roles": _sorted_unique(segment["role"] for segment in segments),
            "types": _sorted_unique(segment["type"] for segment in segments),
            "toolNames": _sorted_unique(segment["tool"] for segment in segments),
            "statuses": _sorted_unique(segment["status"] for segment in segments),
            "paramKeys": _sorted_unique(key for segment in segments for key in segment["keys"]),
        },
        "evidence": evidence,
        "evidenceEventIds": event_ids,
        "minSeq": min(seqs),
        "maxSeq": max(seqs),
        "startTime": earliest["iso"],
        "endTime": latest["iso"],
        "eventTime": segments[-1]["iso"],
        "tokenCount": sum(segment["tokens"] for segment in segments),
        "acl": acl,
        "versions": dict(versions),
    }
    if provisional:
        chunk["provisional"] = True
    return chunk


def _shared(segments: list[dict[str, Any]], key: str) -> str | None:
    """The id every segment that carries one agrees on; None if none does or they differ."""
    values = {segment[key] for segment in segments if segment[key]}
    return values.pop() if len(values) == 1 else None


def _sorted_unique(values: Any) -> list[str]:
    return sorted({value for value in values if value})
