"""The redaction and chunking stages over dict tables with an in-memory "broker" between them,
and small sessions to feed them: shared by the stage tests (tests/streams/test_stages.py) and the
session-memory tests (tests/streams/test_secret_memory.py)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from streams.asp import canonical_bytes, validate_event
from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
from streams.redaction import policy_hash
from streams.settings import Settings
from streams.stages import (
    ChunkingStage,
    Effects,
    Gaps,
    Produce,
    Record,
    RedactionStage,
    keys,
)

__all__ = ["ALICE", "EVIL", "L1", "REDACTED", "SECRET", "Worker", "event", "interleaved", "l1_batch", "records", "run",
           "session"]

SECRET = "ghp_R8x2Kq9LmZt4Vb7Nw1Yc5Hd3Jf6Gs0Pa2Ue8"  # a GitHub token shape
ALICE = {"tenant": "acme", "read": ["user:alice"]}
EVIL = {"tenant": "evil", "read": ["*"]}
L1 = "usl.l1"
REDACTED = "usl.redacted"


def event(session: str, n: int, kind: str, *, turn: str | None = None, acl: dict[str, Any] | None = None,
          event_id: str | None = None, **fields: Any) -> dict[str, Any]:
    when = datetime(2026, 11, 1, 9, 0, tzinfo=UTC) + timedelta(seconds=10 * n)
    raw: dict[str, Any] = {"eventId": event_id or f"{session}-e{n}", "logId": "default", "sessionId": session,
                           "type": kind, "time": when.isoformat().replace("+00:00", "Z"), "turnId": turn,
                           "fields": fields}
    if kind == "message":
        raw["role"] = fields.pop("role", "user")
    if acl is not None:
        raw["acl"] = acl
    return validate_event(raw)


def session(name: str, *, turns: int = 2, start: int = 0, acl: dict[str, Any] | None = ALICE) -> list[dict[str, Any]]:
    """A session: session.started, then per turn a user message, a tool call and result with a
    secret in its output, an assistant answer and turn.ended."""
    events = [event(name, start, "session.started", acl=acl, title=f"session {name}")]
    for t in range(turns):
        turn = f"{name}-t{t}"
        n = start + 1 + 6 * t
        events += [
            event(name, n, "turn.started", turn=turn),
            event(name, n + 1, "message", turn=turn, text=f"please list the files of turn {t}"),
            event(name, n + 2, "tool.call", turn=turn, toolName="bash", toolCallId=f"{turn}-c", input={"command": "ls"}),
            event(name, n + 3, "tool.result", turn=turn, toolName="bash", toolCallId=f"{turn}-c", status="ok",
                  output=f"README.md\nexport API_TOKEN={SECRET}\n"),
            event(name, n + 4, "message", turn=turn, role="assistant", text=f"turn {t} has a README"),
            event(name, n + 5, "turn.ended", turn=turn),
        ]
    return events


def records(values: Sequence[bytes | None], *, topic: str = L1, partition: int = 0, first: int = 0) -> list[Record]:
    return [Record(topic, partition, first + i, value, timestamp=1.8e9) for i, value in enumerate(values)]


def l1_batch(events: list[dict[str, Any]]) -> list[Record]:
    return records([canonical_bytes(e) for e in events])


class Worker:
    """Both stages over dict tables, with an in-memory broker between them."""

    def __init__(self, *, partitions: int = 2, every: int = 4) -> None:
        self.settings = Settings.from_env({}, stream_partitions=partitions, tick_every_seqs=every)
        self.tables: dict[str, dict[str, Any]] = {name: {} for name in (
            keys.LOG_CLOCKS, keys.EVENT_FIRST_SEQ, keys.SESSION_OWNERS, keys.SESSION_SECRETS, keys.CHUNKER_SESSIONS, keys.CHUNKER_PROGRESS)}
        self.gaps = Gaps()
        policy = policy_hash()
        chunker = Chunker(ChunkerConfig(target_tokens=64, overlap_tokens=8, idle_gap_seconds=60.0,
                                        max_clock_skew_seconds=self.settings.max_clock_skew_seconds),
                          default_tokenizer(), policy_hash=policy)
        self.redaction = RedactionStage(self.settings, tables=self.tables, gaps=self.gaps, policy=policy)
        self.chunking = ChunkingStage(chunker, tables=self.tables, gaps=self.gaps, partitions=partitions)
        self.topics: dict[tuple[str, int], list[bytes]] = {}
        self.metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def partition_of(self, record: Produce) -> int:
        if record.partition is not None:
            return record.partition
        return 0 if record.topic == "deadletters" else zlib.crc32(record.key) % self.settings.stream_partitions

    def perform(self, stage: RedactionStage | ChunkingStage, effects: Effects) -> None:
        for record in [*effects.records, *(marker.record for marker in effects.markers)]:
            self.topics.setdefault((record.topic, self.partition_of(record)), []).append(record.value)
        for metric in effects.metrics:
            key = (metric.name, metric.labels)
            self.metrics[key] = self.metrics.get(key, 0) + metric.value
        for write in [*effects.writes, *effects.summaries]:
            self.tables[write.table][write.key] = write.value
        stage.commit(effects)
        for marker in effects.markers:
            self.chunking.sent(marker)

    def redact(self, batch: list[Record]) -> Effects:
        effects = self.redaction.apply(batch)
        self.perform(self.redaction, effects)
        return effects

    def redacted(self, partition: int) -> list[Record]:
        return records(self.topics.get(("redacted", partition), []), topic=REDACTED, partition=partition)

    def chunk(self, batch: list[Record]) -> Effects:
        effects = self.chunking.apply(batch)
        self.perform(self.chunking, effects)
        return effects

    def chunks(self) -> list[dict[str, Any]]:
        return [body for (topic, _), values in sorted(self.topics.items()) if topic == "chunks"
                for body in map(orjson.loads, values) if body["kind"] == "chunk"]

    def markers(self) -> dict[tuple[int, str], int]:
        last: dict[tuple[int, str], int] = {}
        for (topic, partition), values in self.topics.items():
            for body in map(orjson.loads, values):
                if topic == "chunks" and body["kind"] == "progress":
                    last[partition, body["logId"]] = body["seq"]
        return last


def run(worker: Worker, l1: list[Record], cuts: list[int]) -> None:
    """Redaction in batches cut at ``cuts``, then chunking of every partition in those cuts."""
    for start, end in zip([0, *cuts], [*cuts, len(l1)], strict=True):
        worker.redact(l1[start:end])
    worker.perform(worker.redaction, worker.redaction.flush({}, {}))
    for partition in range(worker.settings.stream_partitions):
        batch = worker.redacted(partition)
        for start, end in zip([0, *cuts], [*cuts, len(batch)], strict=True):
            worker.chunk(batch[start:end])


def interleaved(seed: int) -> list[dict[str, Any]]:
    """Three sessions merged in a seeded order (each keeps its own), another tenant's event for
    one of them and a reused eventId: a log for comparing the stages with the replay."""
    import random

    rng = random.Random(seed)
    queues = [session("s1", turns=rng.randint(1, 3)), session("s2", start=100, turns=rng.randint(1, 3)),
              session("s3", start=200, turns=1, acl={"tenant": "acme", "read": ["user:bob"]})]
    merged: list[dict[str, Any]] = []
    while any(queues):
        merged.append(rng.choice([q for q in queues if q]).pop(0))
    merged.insert(rng.randint(1, len(merged)), event("s1", 50, "message", turn="s1-t0", acl=EVIL, text="mine now"))
    merged.insert(rng.randint(len(merged) // 2, len(merged)),
                  event("s2", 51, "message", turn="s2-t0", event_id="s2-e102", text="same id"))
    return merged
