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


def _guard_rebalance_acks() -> None:
    """Work around a faust-streaming 0.15 rebalance bug (shown by tests/streams/test_rebalance.py).

    During a rebalance faust skips the messages already buffered for an agent, but *acks* them
    (``Stream.__aiter__``); a commit can then move the group's offset past records no agent
    processed, and they are lost (chunks missing events, progress markers that stall). An ack of
    a message fetched in an older consumer generation, or arriving while the flow is stopped, is
    dropped here instead: the record stays uncommitted and is read again after the rebalance,
    which every step of this app tolerates (idempotent by construction).
    """
    from faust.transport.consumer import Consumer

    if getattr(Consumer.ack, "usl_guarded", False):
        return
    original = Consumer.ack

    def ack(self: Any, message: Any) -> bool:
        app = self.app
        if message.generation_id != app.consumer_generation_id or not app.flow_control.is_active():
            return False
        return bool(original(self, message))

    ack.usl_guarded = True  # type: ignore[attr-defined]
    Consumer.ack = ack  # type: ignore[method-assign]


def _broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{host.strip()}" for host in bootstrap.split(",") if host.strip()]


def create_app(settings: Settings, bootstrap: str) -> faust.App:
    """Build the faust app with both agents and their tables."""
    from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
    from streams.redaction import policy_hash, redact_event

    _guard_rebalance_acks()
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
    last_flush: dict[str, int] = {}
    # Per log, the highest seq this process itself has handled. A flush tick claims only these:
    # the clock restored from the changelog may be ahead of what the previous owner's producer
    # delivered before it died, while this process's own sends precede its tick on each partition.
    handled: dict[str, int] = {}

    async def dead_letter(stage: str, reason_code: str, reason: str, source: dict[str, Any], raw_value: bytes) -> None:
        from streams.redaction import redact_text

        # Redact, then cut: cutting first could split a secret and leak its prefix.
        safe_raw = redact_text(raw_value.decode("utf-8", errors="replace"))[0][:4096]
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
