"""The chunking stage: redacted events and ticks in, chunks and progress markers out.

For each redacted-topic record, in offset order: an event goes to its session's chunker state
(:class:`streams.chunking.Chunker`), which emits the chunks it closes; a regular tick cuts the
partition's idle open sessions of its log. Both move the (partition, log) progress, and each
batch ends with at most one progress marker per (partition, log) whose marker moved
(:mod:`streams.progress`).

Replaying a record is safe: a chunker state skips events it already applied, a progress ignores
ticks it passed, and a marker is sent again only if it was stored but never announced.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import orjson

from streams.progress import marker_seq, new_progress, note_seq, note_session
from streams.stages.effects import Effects, Marker, Metric, Produce, Record, TableWrite
from streams.stages.gaps import Gaps
from streams.stages.keys import (
    CHUNKER_PROGRESS,
    CHUNKER_SESSIONS,
    offset_key,
    progress_key,
    session_key,
)
from streams.stages.records import chunk_record
from streams.stages.redaction import State, dead_letter

if TYPE_CHECKING:
    from streams.chunking import Chunker

__all__ = ["ChunkingStage"]


class ChunkingStage:
    """Applies batches of redacted-topic records; holds the state tables it reads and, per
    progress key, the last marker this process sent."""

    def __init__(self, chunker: Chunker, *, tables: Mapping[str, State], gaps: Gaps, partitions: int) -> None:
        self.chunker = chunker
        self.tables = tables
        self.gaps = gaps
        self.partitions = partitions
        # Per progress key, the last marker this process sent. A marker is stored (as ``lastMarker``)
        # before it is sent, so a worker that died in between left it stored but unsent: the first
        # batch to touch the key after a restart or a reassignment sends it again (markers may repeat,
        # never go back).
        self.announced: dict[str, int] = {}

    def _render(self, batch: list[Record]) -> tuple[list[Any], list[Any]]:
        """Each record's body (or why it is unreadable) and, for an event, its rendered text and
        token count (or why rendering failed), the batch's texts counted in one call
        (``Chunker.render_many``)."""
        bodies: list[Any] = []
        events: dict[int, dict[str, Any]] = {}
        for index, record in enumerate(batch):
            try:
                body = orjson.loads(cast(bytes, record.value))
            except (orjson.JSONDecodeError, TypeError) as exc:
                bodies.append(exc)
                continue
            bodies.append(body)
            event = body.get("event") if isinstance(body, dict) and body.get("kind") == "event" else None
            if isinstance(event, dict):
                if body.get("policy") != self.chunker.policy_hash:
                    # Redacted before an upgrade of the policy and chunked after it: redacted again
                    # (idempotent), so its chunk carries what the policy it names would keep; alone,
                    # without its session's memory, which the stage holds (the rebuild the upgrade
                    # asks for redacts it with the memory).
                    from streams.redaction import redact_event

                    event = body["event"] = redact_event(event).event
                events[index] = event
        renderings: list[Any] = [None] * len(batch)
        for index, rendering in zip(events, self.chunker.render_many(list(events.values()), capture_errors=True),
                                    strict=True):
            renderings[index] = rendering
        return bodies, renderings

    def apply(self, batch: list[Record]) -> Effects:
        """The effects of a batch of redacted-topic records in offset order.

        Every chunk is acknowledged before any state is written, and a progress is stored before
        the marker it records is sent: a restored progress is never behind a marker already on
        the topic, so a replay, whatever its batches, cannot send a lower one. A progress sums up
        the session states of its partition (which are open, what ticks they saw), so it is a
        summary write (:attr:`Effects.summaries`), made once those states are acknowledged: a
        restored progress is never ahead of the states it sums up. Ahead of them, a worker killed
        between the two left a progress whose marker claimed chunks the replay of the older
        states then cut differently, and sent after that marker (every sink skipped them), and
        sessions with an open unit missing from ``open`` (no tick cut them, no marker waited for
        them). Each touched key is written once, and each (partition, log) gets at most one
        marker per batch.
        """
        effects = Effects(metrics=[Metric("usl_records_total", (("stage", "chunking"),), len(batch))])
        offsets: dict[int, int] = {}  # partition -> offset of the last record applied in this batch
        states: dict[str, tuple[int, Any]] = {}  # session key -> (partition, chunker state)
        progresses: dict[str, tuple[int, str, dict[str, Any]]] = {}  # key -> (partition, log, progress)
        sessions, progress_table = self.tables[CHUNKER_SESSIONS], self.tables[CHUNKER_PROGRESS]

        def state_of(key: str) -> Any:
            held = states.get(key)
            return held[1] if held is not None else sessions.get(key)

        def send(chunks: list[dict[str, Any]], partition: int) -> None:
            for chunk in chunks:
                body = orjson.dumps(chunk_record(chunk))
                effects.records.append(Produce("chunks", chunk["sessionId"].encode(), body,
                                               partition=partition, confirm=True))
            if chunks:
                effects.metrics.append(Metric("usl_chunks_emitted_total", (), len(chunks)))

        def failed(reason: str, record: Record, raw_value: bytes) -> None:
            source = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
            for item in dead_letter("chunking", "chunking_failed", reason, source, raw_value):
                (effects.metrics if isinstance(item, Metric) else effects.records).append(item)

        bodies, renderings = self._render(batch)
        for record, parsed, rendering in zip(batch, bodies, renderings, strict=True):
            partition = record.partition
            last = offsets[partition] if partition in offsets else progress_table.get(offset_key(partition))
            if self.gaps.hole((record.topic, partition), record.offset, last):
                effects.holes.append((record.topic, partition))
                continue
            offsets[partition] = record.offset
            try:
                if isinstance(parsed, Exception):
                    raise parsed
                body = parsed
                log_id = body["logId"]
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                failed(f"unreadable record: {exc}", record, record.value or b"")
                continue
            key = progress_key(partition, log_id)
            if key not in progresses:
                progresses[key] = (partition, log_id, progress_table.get(key) or new_progress())
            progress = progresses[key][2]
            if body["kind"] == "event":
                session_id = body["event"]["sessionId"]
                state_key = session_key(log_id, session_id)
                state = state_of(state_key) or self.chunker.new_state(session_id)
                try:
                    if isinstance(rendering, Exception):
                        raise rendering
                    text, tokens = rendering if rendering is not None else (None, 0)
                    chunks = self.chunker.apply_event(state, log_id, int(body["seq"]), body["event"], text, tokens,
                                                      clock_time=body.get("clockTime"))
                except Exception as exc:
                    failed(f"chunker failed: {type(exc).__name__}: {exc}", record, b"")
                    chunks = []
                send(chunks, partition)
                states[state_key] = (partition, state)
                note_session(progress, session_id, self.chunker.open_min_seq(state))
                note_seq(progress, int(body["seq"]))
            elif body["kind"] == "tick":
                tick_seq = int(body["seq"])
                if not body.get("flush") and tick_seq > int(progress.get("lastTickSeq", 0)):
                    for session_id in sorted(progress["open"]):
                        state_key = session_key(log_id, session_id)
                        state = state_of(state_key)
                        if state is None:
                            continue
                        send(self.chunker.on_tick(state, body), partition)
                        states[state_key] = (partition, state)
                        note_session(progress, session_id, self.chunker.open_min_seq(state))
                    progress["lastTickSeq"] = tick_seq
                note_seq(progress, tick_seq)
        effects.writes = [TableWrite(CHUNKER_PROGRESS, partition, offset_key(partition), offset)
                          for partition, offset in offsets.items()]
        effects.writes += [TableWrite(CHUNKER_SESSIONS, partition, key, state)
                           for key, (partition, state) in states.items()]
        for key, (partition, log_id, progress) in sorted(progresses.items()):
            seq = marker_seq(progress)  # never below the stored lastMarker
            if seq > int(progress.get("lastMarker", 0)) or self.announced.get(key) != seq:
                # A copy: the stored progress names the marker only once the batch is committed.
                progress = {**progress, "lastMarker": seq}
                marker = {"kind": "progress", "logId": log_id, "partition": partition,
                          "partitions": self.partitions, "seq": seq}
                effects.markers.append(Marker(log_id, partition, key, seq,
                                              Produce("chunks", log_id.encode(), orjson.dumps(marker), partition=partition)))
            # A summary of the session states: made only once they are acknowledged (effects.py).
            effects.summaries.append(TableWrite(CHUNKER_PROGRESS, partition, key, progress))
        return effects

    def commit(self, effects: Effects) -> None:
        """The batch's writes are made; nothing to remember until its markers are sent."""

    def sent(self, marker: Marker) -> None:
        """``marker`` is on the chunks topic."""
        self.announced[marker.key] = marker.seq
