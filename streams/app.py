"""The faust app: the redaction agent and the chunking agent.

Faust runs at-least-once here; every step is idempotent by construction (see
docs/architecture.md, "Exactly-once effect"): eventId dedup with first-seq-wins, per-log clocks
and per-session chunker states that skip records they already applied, deterministic chunk ids,
and every chunk acknowledged by the broker before the state that forgets it is written.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import faust
import orjson

from streams.asp import event_time, validate_event
from streams.exceptions import USLError
from streams.metrics import (
    usl_chunks_emitted_total,
    usl_dead_letters_total,
    usl_duplicate_events_total,
    usl_progress_marker_seq,
    usl_records_total,
    usl_redactions_total,
    usl_ticks_total,
)
from streams.progress import marker_seq, new_progress, note_seq, note_session
from streams.settings import Settings
from streams.ticks import advance_clock, flush_tick, new_clock
from streams.topics import Topics, app_id, faust_tables

__all__ = ["create_app"]

log = logging.getLogger("usl.worker")


def _fatal(agent: str) -> None:
    """Exit the worker process at once. Offsets of unfinished records are not committed, so
    the restarted worker (or another group member) processes them again; every step is
    idempotent, so nothing is lost or duplicated downstream."""
    log.exception("agent %s failed unexpectedly; exiting so the records are processed again", agent)
    logging.shutdown()
    os._exit(70)


def _patch_faust_rebalance() -> None:
    """Work around faust-streaming 0.15 / aiokafka 0.14 rebalance bugs that lose records (shown
    by tests/streams/test_rebalance.py: chunks missing events, progress markers that stall).

    - A stream skips (and acks) messages fetched while the flow is stopped or in an older
      consumer generation -- during a rebalance, and in a race right after recovery -- and
      nothing reads them again; faust's commit then moves past them (its gap check is off by
      one). Here such an ack is dropped, the partition is marked ``usl_skipped``, its offsets
      are not committed, and the ``reread_skipped`` timer seeks back to the committed offsets.
    - A partition kept across a rebalance without a committed offset is not repositioned
      (aiokafka seeks only to committed offsets > 0); it is now sought to its beginning, which
      is what ``earliest`` means for a group that has committed nothing.

    Reading a record again is always safe here: every step is idempotent by construction.
    """
    from faust.transport.consumer import Consumer
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    if getattr(Consumer, "usl_patched", False):
        return
    original_ack, original_new_offset = Consumer.ack, Consumer._new_offset

    def ack(self: Any, message: Any) -> bool:
        app = self.app
        if message.generation_id != app.consumer_generation_id or not app.flow_control.is_active():
            self.__dict__.setdefault("usl_skipped", set()).add(message.tp)
            return False
        return bool(original_ack(self, message))

    def new_offset(self: Any, tp: Any) -> Any:
        if tp in self.__dict__.get("usl_skipped", ()):
            return None  # never commit past a record that was skipped instead of processed
        return original_new_offset(self, tp)

    async def seek_to_committed(self: Any) -> Any:
        consumer = self._ensure_consumer()

        async def seek() -> Any:
            committed = await consumer.seek_to_committed()
            uncommitted = [tp for tp, offset in committed.items() if not offset]
            if uncommitted:  # an explicit offset: a lazy reset leaves no position to read meanwhile
                for tp, offset in (await consumer.beginning_offsets(uncommitted)).items():
                    consumer.seek(tp, offset)
            return committed

        return await self.call_thread(seek)

    Consumer.ack = ack  # type: ignore[method-assign]
    Consumer._new_offset = new_offset  # type: ignore[method-assign]
    AIOKafkaConsumerThread.seek_to_committed = seek_to_committed  # type: ignore[method-assign]
    Consumer.usl_patched = True  # type: ignore[attr-defined]


class _Rereader:
    """Makes the agents see every record of a source partition, in offset order.

    Each agent remembers (in its table) the offset of the last record it applied per source
    partition. A record past the next offset means faust skipped some (see
    :func:`_patch_faust_rebalance`): it is not applied, the partition's commits are held, and
    :meth:`reread` seeks every partition back to its committed offset. A hole that is still
    there after three seeks is real (e.g. transaction markers on L1) and is accepted.
    """

    def __init__(self, app: faust.App) -> None:
        self.app = app
        self.expected: dict[Any, int] = {}  # tp -> the offset a hole was found before
        self.rounds: dict[tuple[Any, int], int] = {}

    def _skipped(self) -> set[Any]:
        skipped: set[Any] = self.app.consumer.__dict__.setdefault("usl_skipped", set())
        return skipped

    def hole(self, message: Any, last_offset: int | None) -> bool:
        """True when records between ``last_offset`` and ``message`` were never delivered."""
        if last_offset is None or message.offset <= last_offset + 1:
            return False
        key = (message.tp, last_offset + 1)
        if self.rounds.get(key, 0) >= 3:
            log.warning("accepting a gap in %s before offset %d", message.tp, message.offset)
            return False
        self.expected[message.tp] = last_offset + 1
        self._skipped().add(message.tp)
        return True

    async def reread(self) -> None:
        skipped = self._skipped()
        if not skipped or not self.app.flow_control.is_active():
            return
        consumer = self.app.consumer
        pending = set(skipped)
        await consumer.perform_seek()
        for tp in pending:  # acks of the skipped range are rebuilt as it is processed again
            consumer._acked.pop(tp, None)
            consumer._acked_index.pop(tp, None)
            if tp in self.expected:
                key = (tp, self.expected.pop(tp))
                self.rounds[key] = self.rounds.get(key, 0) + 1
        skipped.difference_update(pending)


def _broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{host.strip()}" for host in bootstrap.split(",") if host.strip()]


def create_app(settings: Settings, bootstrap: str) -> faust.App:
    """Build the faust app with both agents and their tables."""
    from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
    from streams.redaction import policy_hash, redact_event

    _patch_faust_rebalance()
    topics = Topics.from_settings(settings)
    app = faust.App(
        app_id(settings),
        broker=_broker_urls(bootstrap),
        store="memory://",
        processing_guarantee="at_least_once",
        topic_replication_factor=settings.replication_factor,
        topic_partitions=settings.stream_partitions,
        table_standby_replicas=0,
        consumer_auto_offset_reset="earliest",
        broker_commit_every=500,
        broker_commit_interval=1.0,
        stream_wait_empty=False,
        web_enabled=False,
        producer_acks=-1,
        table_cleanup_interval=3600.0,
    )
    raw = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
    l1_topic = app.topic(topics.l1, partitions=settings.l1_partitions, **raw)
    redacted_topic = app.topic(topics.redacted, partitions=settings.stream_partitions, **raw)
    toolresults_topic = app.topic(topics.toolresults, partitions=settings.stream_partitions, **raw)
    chunks_topic = app.topic(topics.chunks, partitions=settings.stream_partitions, **raw)
    dead_topic = app.topic(topics.deadletters, partitions=1, **raw)

    # Redaction state, co-partitioned with L1: per-log clocks and first seq of every eventId.
    tables = faust_tables(settings)
    clocks = app.Table("log-clocks", default=None, partitions=tables["log-clocks"])
    first_seq = app.Table("event-first-seq", default=None, partitions=tables["event-first-seq"])
    # Chunker state, co-partitioned with the redacted topic.
    sessions = app.Table("chunker-sessions", default=None, partitions=tables["chunker-sessions"])
    progress_table = app.Table("chunker-progress", default=None, partitions=tables["chunker-progress"])

    policy = policy_hash()
    chunker = Chunker(
        ChunkerConfig(target_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap_tokens,
                      idle_gap_seconds=settings.idle_gap_seconds),
        default_tokenizer(), policy_hash=policy,
    )
    rereader = _Rereader(app)
    last_flush: dict[str, int] = {}
    # Per log, the highest seq this process itself has handled. A flush tick claims only these:
    # the clock restored from the changelog may be ahead of what the previous owner's producer
    # delivered before it died, while this process's own sends precede its tick on each partition.
    handled: dict[str, int] = {}

    async def dead_letter(stage: str, reason_code: str, reason: str, source: dict[str, Any], raw_value: bytes) -> None:
        from streams.l1 import dead_letter_excerpt
        from streams.redaction import redact_text

        safe_raw = dead_letter_excerpt(raw_value.decode("utf-8", errors="replace"))
        letter = {"stage": stage, "reason": redact_text(reason)[0], "record": None, "source": source, "raw": safe_raw}
        await dead_topic.send(key=stage.encode(), value=orjson.dumps(letter), force=True)
        usl_dead_letters_total.labels(stage=stage, reason=reason_code).inc()

    async def broadcast(tick: dict[str, Any]) -> None:
        body = orjson.dumps(tick)
        pending = []
        for topic in (redacted_topic, toolresults_topic):
            for partition in range(settings.stream_partitions):
                pending.append(await topic.send(key=tick["logId"].encode(), value=body, partition=partition, force=True))
        for fut in pending:
            await fut
        usl_ticks_total.labels(kind="flush" if tick["flush"] else "regular").inc()

    @app.agent(l1_topic, name="redaction")
    async def redaction(stream: Any) -> None:
        try:
            async for record in stream.events():
                message = record.message
                offset_key = f"@offset/{message.partition}"
                if rereader.hole(message, clocks.get(offset_key)):
                    continue
                clocks[offset_key] = message.offset
                seq = message.offset + 1
                source = {"topic": message.topic, "partition": message.partition, "offset": message.offset}
                usl_records_total.labels(stage="redaction").inc()
                try:
                    event = validate_event(orjson.loads(record.value), record=f"{message.topic}[{message.partition}]@{message.offset}")
                except (orjson.JSONDecodeError, USLError) as exc:
                    await dead_letter("redaction", "schema", str(exc), source, record.value or b"")
                    continue
                log_id = event["logId"]
                dedup_key = f"{log_id}/{event['eventId']}"
                previous = first_seq.get(dedup_key)
                if previous is not None and int(previous) < seq:
                    usl_duplicate_events_total.labels(stage="redaction").inc()
                else:
                    try:
                        result = redact_event(event)
                    except Exception as exc:  # a rule bug must not stop the log; the event is dead-lettered
                        await dead_letter("redaction", "redaction_failed", f"redaction failed: {type(exc).__name__}", source, b"")
                        result = None
                    if result is not None:
                        for rule, count in result.hits.items():
                            usl_redactions_total.labels(rule=rule).inc(count)
                        body = {"kind": "event", "logId": log_id, "seq": seq, "event": result.event, "policy": policy}
                        await redacted_topic.send(key=event["sessionId"].encode(), value=orjson.dumps(body), force=True)
                        if result.tool_result is not None:
                            tool = {"kind": "toolresult", "logId": log_id, "seq": seq, "eventId": event["eventId"],
                                    "sessionId": event["sessionId"], "runId": event.get("runId"),
                                    "turnId": event.get("turnId"), "time": event["time"], "acl": event.get("acl"),
                                    "policy": policy, **result.tool_result}
                            await toolresults_topic.send(key=event["sessionId"].encode(), value=orjson.dumps(tool), force=True)
                        if previous is None:
                            first_seq[dedup_key] = seq
                clock = clocks.get(log_id) or new_clock()
                try:
                    when: float | None = event_time(event)
                except (KeyError, ValueError):
                    when = None
                clock, tick = advance_clock(clock, log_id, seq, when, settings.tick_every_seqs)
                if tick is not None:
                    await broadcast(tick)
                clocks[log_id] = clock
                handled[log_id] = max(handled.get(log_id, 0), seq)
        except Exception:  # an unexpected bug: exit so a restart resumes at-least-once
            _fatal('redaction')

    @app.timer(interval=0.5)
    async def reread_skipped() -> None:
        await rereader.reread()

    @app.timer(interval=1.0)
    async def flush_ticks() -> None:
        for log_id, seq in list(handled.items()):
            clock = clocks.get(log_id)
            if not clock or seq <= last_flush.get(log_id, 0):
                continue
            await broadcast(flush_tick({**clock, "lastSeq": min(seq, int(clock["lastSeq"]))}, log_id))
            last_flush[log_id] = seq

    async def emit_chunks(chunks: list[dict[str, Any]], partition: int) -> None:
        pending = []
        for chunk in chunks:
            body = orjson.dumps({"kind": "chunk", **chunk})
            pending.append(await chunks_topic.send(key=chunk["sessionId"].encode(), value=body,
                                                   partition=partition, force=True))
        for fut in pending:
            await fut
        usl_chunks_emitted_total.inc(len(chunks))

    async def emit_marker(progress: dict[str, Any], log_id: str, partition: int) -> None:
        seq = marker_seq(progress)
        if seq <= int(progress.get("lastMarker", 0)) and seq != 0:
            return
        marker = {"kind": "progress", "logId": log_id, "partition": partition,
                  "partitions": settings.stream_partitions, "seq": seq}
        await chunks_topic.send(key=log_id.encode(), value=orjson.dumps(marker), partition=partition, force=True)
        progress["lastMarker"] = seq
        usl_progress_marker_seq.labels(log=log_id, partition=str(partition)).set(seq)

    @app.agent(redacted_topic, name="chunking")
    async def chunking(stream: Any) -> None:
        try:
            async for record in stream.events():
                message = record.message
                partition = message.partition
                offset_key = f"{partition}/@offset"
                if rereader.hole(message, progress_table.get(offset_key)):
                    continue
                progress_table[offset_key] = message.offset
                usl_records_total.labels(stage="chunking").inc()
                try:
                    body = orjson.loads(record.value)
                    log_id = body["logId"]
                except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                    source = {"topic": message.topic, "partition": partition, "offset": message.offset}
                    await dead_letter("chunking", "chunking_failed", f"unreadable record: {exc}", source, record.value or b"")
                    continue
                progress_key = f"{partition}/{log_id}"
                progress = progress_table.get(progress_key) or new_progress()
                if body["kind"] == "event":
                    session_id = body["event"]["sessionId"]
                    session_key = f"{log_id}/{session_id}"
                    state = sessions.get(session_key) or chunker.new_state(session_id)
                    try:
                        chunks = chunker.on_event(state, log_id, int(body["seq"]), body["event"])
                    except Exception as exc:
                        source = {"topic": message.topic, "partition": partition, "offset": message.offset}
                        await dead_letter("chunking", "chunking_failed", f"chunker failed: {type(exc).__name__}: {exc}", source, b"")
                        chunks = []
                    await emit_chunks(chunks, partition)
                    sessions[session_key] = state
                    note_session(progress, session_id, chunker.open_min_seq(state))
                    note_seq(progress, int(body["seq"]))
                    if chunks:
                        await emit_marker(progress, log_id, partition)
                elif body["kind"] == "tick":
                    tick_seq = int(body["seq"])
                    if not body.get("flush") and tick_seq > int(progress.get("lastTickSeq", 0)):
                        for session_id in sorted(progress["open"]):
                            session_key = f"{log_id}/{session_id}"
                            state = sessions.get(session_key)
                            if state is None:
                                continue
                            chunks = chunker.on_tick(state, body)
                            await emit_chunks(chunks, partition)
                            sessions[session_key] = state
                            note_session(progress, session_id, chunker.open_min_seq(state))
                        progress["lastTickSeq"] = tick_seq
                    note_seq(progress, tick_seq)
                    await emit_marker(progress, log_id, partition)
                progress_table[progress_key] = progress
        except Exception:  # an unexpected bug: exit so a restart resumes at-least-once
            _fatal('chunking')

    return app


def run_worker(settings: Settings, bootstrap: str, *, loglevel: str = "warn") -> None:
    """Run the faust worker in this process until it is stopped (SIGTERM/SIGINT)."""
    from streams.metrics import start_metrics_server
    from streams.topics import ensure_topics

    ensure_topics(bootstrap, settings)
    port = start_metrics_server(settings.metrics_port)
    log.warning("worker metrics on http://127.0.0.1:%d/metrics", port)
    app = create_app(settings, bootstrap)
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    worker.execute_from_commandline()
