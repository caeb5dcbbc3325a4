"""The derived records: the one definition of each record the pipeline derives from L1.

The redaction stage sends ``event`` and ``toolresult`` records, the chunking stage sends
``chunk`` records; the rebuild replay (:class:`sinks.rebuild.ReplayStream`) and the planner's
tail scan (:mod:`planner.tailscan`) build the same records in-process from the same functions,
so a replayed index and a live one hold the same bytes. Field order is part of the contract:
records are serialized with orjson as built, and chunk ids and rebuild identity depend on them.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from streams.redaction import redact_event
from streams.redaction.events import redacted_session_id
from streams.redaction.memory import Recall, merge_remembered
from streams.stages.keys import session_key

__all__ = ["Redacted", "chunk_record", "event_record", "keep_remembered", "memory_key", "recall_of", "redact_admitted",
           "toolresult_record"]


def memory_key(log_id: str, event: dict[str, Any]) -> str:
    """The key of an event's session memory (:mod:`streams.redaction.memory`): the redaction
    stage's table key, and the salt of the session's prints, the same in every caller."""
    return session_key(log_id, redacted_session_id(event))


def recall_of(log_id: str, event: dict[str, Any], seq: int, memories: Mapping[str, list[list[Any]]]) -> Recall:
    """The memory of ``event``'s session, held in ``memories`` (memory key -> entries: the replay's,
    the tail scan's and the export's own, as the stage's table holds it), as the event at ``seq``
    may recall it."""
    key = memory_key(log_id, event)
    return Recall(key, memories.get(key), seq)


def keep_remembered(memories: MutableMapping[str, list[list[Any]]], recall: Recall, seq: int) -> None:
    """``memories`` with what the event at ``seq`` added to its session's memory (:func:`recall_of`)."""
    merged = merge_remembered(memories.get(recall.session), recall.added, seq)
    if merged is not None:
        memories[recall.session] = merged


def event_record(log_id: str, seq: int, redacted_event: dict[str, Any], *, policy: str,
                 clock_time: float | None, secrets: list[list[Any]] | None = None) -> dict[str, Any]:
    """The redacted-topic record of an event: the redacted event, the policy that redacted it
    and its clock time (event time bounded by append time, :func:`streams.ticks.event_clock_time`);
    and, when the event removed values its session had not removed before, their prints
    (``secrets``: ``[print, length, rule]`` each, :mod:`streams.redaction.memory`), which the
    structured index keeps for the planner's tail scan."""
    record = {"kind": "event", "logId": log_id, "seq": seq, "event": redacted_event, "policy": policy,
              "clockTime": clock_time}
    if secrets:
        record["secrets"] = secrets
    return record


def toolresult_record(log_id: str, seq: int, event: dict[str, Any], tool_result: dict[str, Any], *,
                      policy: str) -> dict[str, Any]:
    """The tool-results-topic record of a ``tool.result`` event: the admitted event's identity
    and access list, then the full (redacted) output that :func:`redact_event` set apart."""
    return {"kind": "toolresult", "logId": log_id, "seq": seq, "eventId": event["eventId"],
            "sessionId": event["sessionId"], "runId": event.get("runId"), "turnId": event.get("turnId"),
            "time": event["time"], "acl": event.get("acl"), "policy": policy, **tool_result}


def chunk_record(chunk: dict[str, Any]) -> dict[str, Any]:
    """The chunks-topic record of a chunk the chunker closed."""
    return {"kind": "chunk", **chunk}


@dataclass(frozen=True)
class Redacted:
    """An admitted event after redaction: the redacted event, its derived records (the event
    record, then the tool-result record if it has one) and the rule hits (rule -> count)."""

    event: dict[str, Any]
    records: list[dict[str, Any]]
    hits: dict[str, int]


def redact_admitted(event: dict[str, Any], log_id: str, seq: int, *, policy: str,
                    clock_time: float | None, recall: Recall | None = None) -> Redacted:
    """Redact an admitted event (its access list resolved) and build its derived records;
    ``recall``: its session's memory (:func:`streams.redaction.redact_event`).

    Raises what :func:`streams.redaction.redact_event` raises; the stream dead-letters such an
    event, and every other caller leaves it out likewise."""
    result = redact_event(event, recall=recall)
    records = [event_record(log_id, seq, result.event, policy=policy, clock_time=clock_time,
                            secrets=recall.added if recall is not None else None)]
    if result.tool_result is not None:
        records.append(toolresult_record(log_id, seq, event, result.tool_result, policy=policy))
    return Redacted(result.event, records, result.hits)
