"""The faust app: the redaction agent and the chunking agent.

Faust runs at-least-once here; every step is idempotent by construction (see
docs/architecture.md, "Exactly-once effect"): session ownership and eventId dedup with
first-seq-wins (:mod:`streams.ownership`, which also fills an omitted ``acl``), per-log clocks
and per-session chunker states that skip records they already applied, deterministic chunk ids,
and every chunk acknowledged by the broker before the state that forgets it is written.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import faust
import orjson
from faust.types import TP

from streams.asp import loads_event, validate_event
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
from streams.ownership import admit
from streams.progress import marker_seq, new_progress, note_seq, note_session
from streams.settings import Settings
from streams.ticks import advance_clock, event_clock_time, flush_tick, new_clock
from streams.topics import Topics, app_id, faust_tables

__all__ = ["create_app"]

log = logging.getLogger("usl.worker")

# Each agent takes up to BATCH_MAX records at a time, waiting at most BATCH_WITHIN seconds for a
# batch to fill: one broker round trip for the batch's chunks and ticks and one changelog write per
# table key per batch, instead of per record (docs/benchmarks.md, "Profiling the worker").
BATCH_MAX = 500
BATCH_WITHIN = 0.05
# Below the broker's default max.message.bytes (1 MB) of the chunks and changelog topics.
PRODUCER_BATCH_BYTES = 512 * 1024
PRODUCER_LINGER_SECONDS = 0.005


def _put(table: Any, partition: int, key: str, value: Any) -> Any:
    """``table[key] = value`` with the changelog partition given: batches are processed outside
    faust's per-event context, which ``__setitem__`` needs (faust-streaming issue #497). Returns
    the changelog record's delivery future."""
    fut = table.send_changelog(partition, key, value)
    table.data[key] = value
    return fut


def _state_key(log_id: str, identifier: str) -> str:
    """A table key for an event or session id. The ids are raw L1 values, and a producer may put
    a secret in one; table keys reach the changelog topics, which must hold no secret, so the
    id is kept as a digest (ids only ever need comparing here)."""
    digest = hashlib.blake2b(identifier.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"{log_id}/{digest}"


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
            # faust's ConsumerT interface does not declare the ack bookkeeping of its Consumer.
            consumer._acked.pop(tp, None)  # type: ignore[attr-defined]
            consumer._acked_index.pop(tp, None)  # type: ignore[attr-defined]
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
    # faust makes its data dir even for in-memory tables (without parents); the default is the cwd.
    datadir = Path(settings.home) / "faust" / app_id(settings)
    datadir.parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        app_id(settings),
        broker=_broker_urls(bootstrap),
        store="memory://",
        datadir=str(datadir),
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
        producer_max_request_size=settings.max_message_bytes,
        # One produce request per broker round trip carries every record sent meanwhile: faust's
        # 16 KiB batch held five real-size events, so the sender wrote a request per few records
        # (docs/benchmarks.md, "Real-size events").
        producer_max_batch_size=PRODUCER_BATCH_BYTES,
        producer_linger=PRODUCER_LINGER_SECONDS,
        table_cleanup_interval=3600.0,
    )
    raw: dict[str, Any] = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
    l1_topic = app.topic(topics.l1, partitions=settings.l1_partitions, **raw)
    redacted_topic = app.topic(topics.redacted, partitions=settings.stream_partitions, **raw)
    toolresults_topic = app.topic(topics.toolresults, partitions=settings.stream_partitions, **raw)
    chunks_topic = app.topic(topics.chunks, partitions=settings.stream_partitions, **raw)
    dead_topic = app.topic(topics.deadletters, partitions=1, **raw)

    # Redaction state, co-partitioned with L1: per-log clocks, the first seq (and tenant) of every
    # eventId, and the owner and access lists of every session (streams.ownership).
    tables = faust_tables(settings)
    clocks = app.Table("log-clocks", default=None, partitions=tables["log-clocks"])
    first_seq = app.Table("event-first-seq", default=None, partitions=tables["event-first-seq"])
    owners = app.Table("session-owners", default=None, partitions=tables["session-owners"])
    # Chunker state, co-partitioned with the redacted topic.
    sessions = app.Table("chunker-sessions", default=None, partitions=tables["chunker-sessions"])
    progress_table = app.Table("chunker-progress", default=None, partitions=tables["chunker-progress"])

    policy = policy_hash()
    chunker = Chunker(
        ChunkerConfig(target_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap_tokens,
                      idle_gap_seconds=settings.idle_gap_seconds,
                      max_clock_skew_seconds=settings.max_clock_skew_seconds),
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

    async def broadcast(tick: dict[str, Any]) -> list[Any]:
        """Send ``tick`` to every partition of both derived topics; return the delivery futures,
        which the caller awaits before it writes the clock that passed the tick."""
        body = orjson.dumps(tick)
        pending = []
        for topic in (redacted_topic, toolresults_topic):
            for partition in range(settings.stream_partitions):
                pending.append(await topic.send(key=tick["logId"].encode(), value=body, partition=partition, force=True))
        usl_ticks_total.labels(kind="flush" if tick["flush"] else "regular").inc()
        return pending

    def rebalanced(batch: list[Any]) -> bool:
        """True when a rebalance began or ended since the batch's records were fetched: they may
        now belong to another worker, which restores its state from the changelog. The batch's
        state is then not written (its acks are dropped too, see :func:`_patch_faust_rebalance`);
        the records are read again, and every step is idempotent."""
        if not app.flow_control.is_active():
            return True
        generation = app.consumer_generation_id
        return any(record.message.generation_id != generation for record in batch)

    def widen_changelog_buffer() -> None:
        # A batch writes up to ~BATCH_MAX table keys at once; above ``max_messages`` (100) faust
        # stalls the stream with a warning until the excess is flushed. The buffer is flushed
        # before every offset commit either way.
        buffer = app.producer.buffer
        buffer.max_messages = max(buffer.max_messages, 4 * BATCH_MAX)

    async def redact_batch(batch: list[Any]) -> None:
        """Apply a batch of L1 records in offset order. Table writes are held in ``writes`` and made
        once per key after the batch's ticks are acknowledged; reads see the batch's own writes."""
        writes: dict[tuple[str, str], tuple[int, Any]] = {}  # (table, key) -> (partition, value)
        tables = {"clocks": clocks, "first": first_seq, "owners": owners}
        seen: dict[int, int] = {}  # partition -> offset of the last record applied in this batch

        def read(table: str, key: str) -> Any:
            held = writes.get((table, key))
            return held[1] if held is not None else tables[table].get(key)

        ticks: list[Any] = []
        batch_handled: dict[str, int] = {}
        usl_records_total.labels(stage="redaction").inc(len(batch))
        for record in batch:
            message = record.message
            partition = message.partition
            offset_key = f"@offset/{partition}"
            if rereader.hole(message, seen[partition] if partition in seen else clocks.get(offset_key)):
                continue
            seen[partition] = message.offset
            writes["clocks", offset_key] = (partition, message.offset)
            seq = message.offset + 1
            source = {"topic": message.topic, "partition": partition, "offset": message.offset}
            try:
                event = validate_event(loads_event(record.value), record=f"{message.topic}[{partition}]@{message.offset}")
            except (orjson.JSONDecodeError, USLError) as exc:
                code = "duplicate_keys" if "duplicate key" in str(exc) else "schema"
                await dead_letter("redaction", code, str(exc), source, record.value or b"")
                continue
            log_id = event["logId"]
            # The record's timestamp is its append time (its producer set it; it replays as stored).
            clock = read("clocks", log_id) or new_clock()
            when = event_clock_time(event, message.timestamp, settings.max_clock_skew_seconds, clock["maxTime"])
            dedup_key = _state_key(log_id, event["eventId"])
            owner_key = _state_key(log_id, event["sessionId"])
            admission = admit(event, seq, session=read("owners", owner_key), first=read("first", dedup_key))
            if admission.verdict == "duplicate":
                usl_duplicate_events_total.labels(stage="redaction").inc()
            elif admission.event is None:
                await dead_letter("redaction", admission.reason_code or "schema", admission.reason or "rejected",
                                  source, record.value or b"")
            else:
                event = admission.event  # its acl resolved: what every index sees
                try:
                    result = redact_event(event)
                except Exception as exc:  # a rule bug must not stop the log; the event is dead-lettered
                    await dead_letter("redaction", "redaction_failed", f"redaction failed: {type(exc).__name__}", source, b"")
                    result = None
                if result is not None:
                    for rule, count in result.hits.items():
                        usl_redactions_total.labels(rule=rule).inc(count)
                    body = {"kind": "event", "logId": log_id, "seq": seq, "event": result.event, "policy": policy,
                            "clockTime": when}
                    await redacted_topic.send(key=result.event["sessionId"].encode(), value=orjson.dumps(body), force=True)
                    if result.tool_result is not None:
                        tool = {"kind": "toolresult", "logId": log_id, "seq": seq, "eventId": event["eventId"],
                                "sessionId": event["sessionId"], "runId": event.get("runId"),
                                "turnId": event.get("turnId"), "time": event["time"], "acl": event.get("acl"),
                                "policy": policy, **result.tool_result}
                        await toolresults_topic.send(key=result.event["sessionId"].encode(), value=orjson.dumps(tool), force=True)
                    if admission.event_id is not None:
                        writes["first", dedup_key] = (partition, admission.event_id)
                    if admission.session is not None:
                        writes["owners", owner_key] = (partition, admission.session)
            clock, tick = advance_clock(clock, log_id, seq, when, settings.tick_every_seqs)
            if tick is not None:
                ticks += await broadcast(tick)
            writes["clocks", log_id] = (partition, clock)
            batch_handled[log_id] = max(batch_handled.get(log_id, 0), seq)
        for fut in ticks:  # every tick is acknowledged before the clock that passed it is written
            await fut
        if rebalanced(batch):
            return
        for (table, key), (partition, value) in writes.items():
            _put(tables[table], partition, key, value)
        for log_id, seq in batch_handled.items():
            handled[log_id] = max(handled.get(log_id, 0), seq)

    @app.agent(l1_topic, name="redaction")
    async def redaction(stream: Any) -> None:
        try:
            widen_changelog_buffer()
            async for batch in stream.take_events(BATCH_MAX, within=BATCH_WITHIN):
                await redact_batch(batch)
        except Exception:  # an unexpected bug: exit so a restart resumes at-least-once
            _fatal('redaction')

    @app.timer(interval=0.5)
    async def reread_skipped() -> None:
        await rereader.reread()

    def flushable() -> dict[str, int]:
        """Per log, the highest seq a flush tick may claim: what this process handled itself,
        and, for a log whose clock it restored from the changelog, what the consumer group has
        committed on the log's L1 partition. faust flushes its producer before it commits
        offsets, so every record below a committed offset had its sends delivered. Without the
        second part a log went quiet for good when its partition moved to a worker right after
        the previous owner handled its last records but before that owner's flush tick: the
        new owner had nothing to handle, so no flush tick ever released the last seqs."""
        claims = dict(handled)
        committed = getattr(app.consumer, "_committed_offset", {})
        restored = getattr(clocks.data, "_key_partition", {})  # memory store: key -> changelog partition
        assigned = app.consumer.assignment()
        for key, partition in list(restored.items()):
            tp = TP(topics.l1, partition)
            if not isinstance(key, str) or key.startswith("@") or tp not in assigned:
                continue
            offset = committed.get(tp)
            if offset:
                claims[key] = max(claims.get(key, 0), int(offset))
        return claims

    @app.timer(interval=settings.flush_tick_seconds)
    async def flush_ticks() -> None:
        for log_id, seq in flushable().items():
            clock = clocks.get(log_id)
            if not clock or seq <= last_flush.get(log_id, 0):
                continue
            for fut in await broadcast(flush_tick({**clock, "lastSeq": min(seq, int(clock["lastSeq"]))}, log_id)):
                await fut
            last_flush[log_id] = seq

    async def send_chunks(chunks: list[dict[str, Any]], partition: int) -> list[Any]:
        pending = []
        for chunk in chunks:
            body = orjson.dumps({"kind": "chunk", **chunk})
            pending.append(await chunks_topic.send(key=chunk["sessionId"].encode(), value=body,
                                                   partition=partition, force=True))
        usl_chunks_emitted_total.inc(len(chunks))
        return pending

    # Per progress key, the last marker this process sent. A marker is stored (as ``lastMarker``)
    # before it is sent, so a worker that died in between left it stored but unsent: the first
    # batch to touch the key after a restart or a reassignment sends it again (markers may repeat,
    # never go back).
    announced: dict[str, int] = {}

    async def send_marker(log_id: str, partition: int, progress_key: str, seq: int) -> None:
        marker = {"kind": "progress", "logId": log_id, "partition": partition,
                  "partitions": settings.stream_partitions, "seq": seq}
        await chunks_topic.send(key=log_id.encode(), value=orjson.dumps(marker), partition=partition, force=True)
        announced[progress_key] = seq
        usl_progress_marker_seq.labels(log=log_id, partition=str(partition)).set(seq)

    async def chunk_batch(batch: list[Any]) -> None:
        """Apply a batch of redacted-topic records in offset order. Every chunk of the batch is
        acknowledged before any state is written, and the progress is stored before the marker it
        records is sent: a restored progress is never behind a marker already on the topic, so a
        replay, whatever its batches, cannot send a lower one. Each touched key is written once,
        and each (partition, log) gets at most one marker per batch."""
        offsets: dict[int, int] = {}  # partition -> offset of the last record applied in this batch
        states: dict[str, tuple[int, Any]] = {}  # session key -> (partition, chunker state)
        progresses: dict[str, tuple[int, str, dict[str, Any]]] = {}  # key -> (partition, log, progress)
        pending: list[Any] = []

        def state_of(session_key: str) -> Any:
            held = states.get(session_key)
            return held[1] if held is not None else sessions.get(session_key)

        usl_records_total.labels(stage="chunking").inc(len(batch))
        for record in batch:
            message = record.message
            partition = message.partition
            offset_key = f"{partition}/@offset"
            if rereader.hole(message, offsets[partition] if partition in offsets else progress_table.get(offset_key)):
                continue
            offsets[partition] = message.offset
            try:
                body = orjson.loads(record.value)
                log_id = body["logId"]
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                source = {"topic": message.topic, "partition": partition, "offset": message.offset}
                await dead_letter("chunking", "chunking_failed", f"unreadable record: {exc}", source, record.value or b"")
                continue
            progress_key = f"{partition}/{log_id}"
            if progress_key not in progresses:
                progresses[progress_key] = (partition, log_id, progress_table.get(progress_key) or new_progress())
            progress = progresses[progress_key][2]
            if body["kind"] == "event":
                session_id = body["event"]["sessionId"]
                session_key = f"{log_id}/{session_id}"
                state = state_of(session_key) or chunker.new_state(session_id)
                try:
                    chunks = chunker.on_event(state, log_id, int(body["seq"]), body["event"],
                                              clock_time=body.get("clockTime"))
                except Exception as exc:
                    source = {"topic": message.topic, "partition": partition, "offset": message.offset}
                    await dead_letter("chunking", "chunking_failed", f"chunker failed: {type(exc).__name__}: {exc}", source, b"")
                    chunks = []
                pending += await send_chunks(chunks, partition)
                states[session_key] = (partition, state)
                note_session(progress, session_id, chunker.open_min_seq(state))
                note_seq(progress, int(body["seq"]))
            elif body["kind"] == "tick":
                tick_seq = int(body["seq"])
                if not body.get("flush") and tick_seq > int(progress.get("lastTickSeq", 0)):
                    for session_id in sorted(progress["open"]):
                        session_key = f"{log_id}/{session_id}"
                        state = state_of(session_key)
                        if state is None:
                            continue
                        pending += await send_chunks(chunker.on_tick(state, body), partition)
                        states[session_key] = (partition, state)
                        note_session(progress, session_id, chunker.open_min_seq(state))
                    progress["lastTickSeq"] = tick_seq
                note_seq(progress, tick_seq)
        for fut in pending:  # chunks are acknowledged before the markers and states that pass them
            await fut
        if rebalanced(batch):
            return
        for partition, offset in offsets.items():
            _put(progress_table, partition, f"{partition}/@offset", offset)
        for session_key, (partition, state) in states.items():
            _put(sessions, partition, session_key, state)
        due: list[tuple[str, int, str, int]] = []
        stored: list[Any] = []
        for progress_key, (partition, log_id, progress) in sorted(progresses.items()):
            seq = marker_seq(progress)  # never below the stored lastMarker
            if seq > int(progress.get("lastMarker", 0)) or announced.get(progress_key) != seq:
                progress["lastMarker"] = seq
                due.append((log_id, partition, progress_key, seq))
            stored.append(_put(progress_table, partition, progress_key, progress))
        if not due:
            return
        for fut in stored:
            await fut
        if rebalanced(batch):
            return
        for log_id, partition, progress_key, seq in due:
            await send_marker(log_id, partition, progress_key, seq)

    @app.agent(redacted_topic, name="chunking")
    async def chunking(stream: Any) -> None:
        try:
            widen_changelog_buffer()
            async for batch in stream.take_events(BATCH_MAX, within=BATCH_WITHIN):
                await chunk_batch(batch)
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
    # Faust's terminal spinner sets the root logger to DEBUG so that every log call spins it:
    # aiokafka then builds a debug LogRecord for every message sent (~10% of the worker's CPU).
    worker.spinner = None
    worker.execute_from_commandline()
