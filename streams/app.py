"""The faust app: the wiring of the redaction stage and the chunking stage.

Each agent reads a batch, hands it to its stage (:mod:`streams.stages`, which knows nothing of
faust or Kafka) and performs the effects the stage returns, in the order
:mod:`streams.stages.effects` states. Every use of a faust or aiokafka internal is in
:mod:`streams.faust_compat`.

Faust runs at-least-once here; every step is idempotent by construction (see
docs/architecture.md, "Exactly-once effect"): session ownership and eventId dedup with
first-seq-wins (:mod:`streams.ownership`, which also fills an omitted ``acl``), per-log clocks
and per-session chunker states that skip records they already applied, deterministic chunk ids,
and every chunk acknowledged by the broker before the state that forgets it is written.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import faust

from streams import faust_compat
from streams.metrics import (
    usl_chunks_emitted_total,
    usl_dead_letters_total,
    usl_duplicate_events_total,
    usl_progress_marker_seq,
    usl_records_total,
    usl_redactions_total,
    usl_ticks_total,
)
from streams.settings import Settings
from streams.stages import (
    ChunkingStage,
    Effects,
    Gaps,
    Metric,
    Produce,
    Record,
    RedactionStage,
    TableWrite,
    Tails,
)
from streams.stages import keys as state
from streams.stages.effects import TopicRole
from streams.stages.gaps import MAX_ROUNDS
from streams.ticks import FlushPacer
from streams.topics import Topics, app_id, faust_tables, records_between

__all__ = ["create_app"]

log = logging.getLogger("usl.worker")

_METRICS: dict[str, Any] = {
    "usl_chunks_emitted_total": usl_chunks_emitted_total,
    "usl_dead_letters_total": usl_dead_letters_total,
    "usl_duplicate_events_total": usl_duplicate_events_total,
    "usl_records_total": usl_records_total,
    "usl_redactions_total": usl_redactions_total,
    "usl_ticks_total": usl_ticks_total,
}


def _fatal(agent: str) -> None:
    """Exit the worker process at once. Offsets of unfinished records are not committed, so
    the restarted worker (or another group member) processes them again; every step is
    idempotent, so nothing is lost or duplicated downstream."""
    log.exception("agent %s failed unexpectedly; exiting so the records are processed again", agent)
    logging.shutdown()
    os._exit(70)


def _restart(reason: str) -> None:
    """Exit the worker at once for a restart (its supervisor's, or another group member's
    takeover) to read again from the committed offsets: ``reason`` says why."""
    log.error("%s; exiting so a restart reads them from the committed offset", reason)
    logging.shutdown()
    os._exit(75)  # EX_TEMPFAIL: nothing is wrong with the records, only with this process's reads


def _broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{host.strip()}" for host in bootstrap.split(",") if host.strip()]


def _measure(metrics: list[Metric]) -> None:
    for metric in metrics:
        series = _METRICS[metric.name]
        if metric.labels:
            series = series.labels(**dict(metric.labels))
        if metric.op == "set":
            series.set(metric.value)
        else:
            series.inc(metric.value)


def _record(event: Any) -> Record:
    message = event.message
    return Record(message.topic, message.partition, message.offset, event.value, message.timestamp)


def create_app(settings: Settings, bootstrap: str) -> faust.App:
    """Build the faust app with both agents and their tables."""
    from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
    from streams.redaction import policy_hash

    faust_compat.patch_faust_rebalance()
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
        producer_max_batch_size=settings.producer_batch_bytes,
        producer_linger=settings.producer_linger_seconds,
        table_cleanup_interval=3600.0,
    )
    faust_compat.set_fetch_wait(app, settings.worker_fetch_wait_seconds)
    raw: dict[str, Any] = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
    l1_topic = app.topic(topics.l1, partitions=settings.l1_partitions, **raw)
    redacted_topic = app.topic(topics.redacted, partitions=settings.stream_partitions, **raw)
    derived: dict[TopicRole, str] = {"redacted": topics.redacted, "toolresults": topics.toolresults,
                                     "chunks": topics.chunks, "deadletters": topics.deadletters, "l1": topics.l1}
    # Redaction state is co-partitioned with L1, chunker state with the redacted topic.
    tables = {name: app.Table(name, default=None, partitions=partitions)
              for name, partitions in faust_tables(settings).items()}

    policy = policy_hash()
    chunker = Chunker(
        ChunkerConfig(target_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap_tokens,
                      idle_gap_seconds=settings.idle_gap_seconds,
                      max_clock_skew_seconds=settings.max_clock_skew_seconds),
        default_tokenizer(), policy_hash=policy,
    )
    gaps = Gaps()
    tails = Tails(gaps)
    redaction_stage = RedactionStage(settings, tables=tables, gaps=gaps, policy=policy)
    chunking_stage = ChunkingStage(chunker, tables=tables, gaps=gaps, partitions=settings.stream_partitions)

    async def send(records: list[Produce]) -> list[Any]:
        """Send ``records`` in order; return the delivery futures of those marked ``confirm``.

        They go straight to the app's producer: faust's ``Topic.send`` cost about 150 us of CPU per
        record against 30 us for the producer's own ``send`` (docs/benchmarks.md, "Before/after
        profile: faust's per-record send path"). The partitioner, the bytes and the order per partition are the same,
        and faust flushes this producer before it commits any offset, as it did for ``Topic.send``.
        """
        producer = await app.maybe_start_producer()
        confirms = []
        for record in records:
            fut = await producer.send(derived[record.topic], record.key, record.value, record.partition, None, None)
            if record.confirm:
                confirms.append(fut)
        return confirms

    async def acknowledged(futures: list[Any]) -> None:
        """Wait for the broker's acknowledgement of ``futures``, sending what is pending at once:
        a wait is a round trip the stage makes before it goes on, and the producer's linger
        (meant to gather the records sent meanwhile) would only lengthen it."""
        if any(not fut.done() for fut in futures):
            faust_compat.send_now(app)
        for fut in futures:
            await fut

    unacked_writes: dict[int, list[Any]] = {}  # per stage: changelog writes not known to be acknowledged

    async def store(writes: list[TableWrite]) -> list[Any]:
        """Make ``writes``; return their changelog records' delivery futures."""
        return await faust_compat.put_all(app, [(tables[write.table], write.partition, write.key, write.value)
                                                for write in writes])

    async def perform(stage: RedactionStage | ChunkingStage, effects: Effects, batch: list[Any]) -> None:
        """Perform a batch's effects (streams.stages.effects). A rebalance that began or ended
        since the batch's records were fetched may have given them to another worker, which
        restores its state from the changelog: the batch's state (or, past its state writes, its
        summaries) is then not written (its acks are dropped too, see streams.faust_compat); the
        records are read again."""
        faust_compat.hold(app, effects.holes)
        confirms = await send(effects.records)
        _measure(effects.metrics)
        await acknowledged(confirms)  # records are acknowledged before the state that passes them
        generations = [event.message.generation_id for event in batch]
        if faust_compat.rebalanced(app, generations):
            return
        stored = await store(effects.writes)
        # A write that failed stays, so the next summary's wait raises its error rather than
        # store a summary past it.
        unacked = [fut for fut in unacked_writes.get(id(stage), [])
                   if not fut.done() or fut.cancelled() or fut.exception() is not None]
        if effects.summaries:
            # A summary is stored only after what it sums up: the writes of this batch and those
            # of earlier batches that returned without waiting for theirs.
            await acknowledged([*unacked, *stored])
            unacked = []
            if faust_compat.rebalanced(app, generations):
                unacked_writes[id(stage)] = unacked
                return
            stored = await store(effects.summaries)
        unacked_writes[id(stage)] = [*unacked, *stored]
        stage.commit(effects)
        if not effects.markers:
            return
        await acknowledged(stored)  # a marker is sent only once the progress that names it is stored
        if faust_compat.rebalanced(app, generations):
            return
        for marker in effects.markers:
            await send([marker.record])
            chunking_stage.sent(marker)
            usl_progress_marker_seq.labels(log=marker.log_id, partition=str(marker.partition)).set(marker.seq)

    pacer = FlushPacer(settings.flush_tick_seconds)
    flushing = asyncio.Lock()  # the timer's flush and a batch's: one at a time, so none repeats the other's ticks

    async def flush() -> Mapping[Any, int]:
        """Send the flush ticks of every log with seqs no flush tick released yet; the restored
        key partitions of the log clocks it read (the quiet clocks read them too)."""
        async with flushing:
            restored: Mapping[Any, int] = faust_compat.restored_key_partitions(tables[state.LOG_CLOCKS])
            effects = redaction_stage.flush(restored, faust_compat.committed_offsets(app, topics.l1))
            pacer.flushed(time.monotonic(), effects.flushed)
            confirms = await send(effects.records)
            _measure(effects.metrics)
            await acknowledged(confirms)
            redaction_stage.commit(effects)
            return restored

    async def run(stage: RedactionStage | ChunkingStage, name: str, stream: Any) -> None:
        try:
            # A batch: one wait for its chunks' and ticks' acknowledgements and one changelog record
            # per table key, instead of per record (docs/benchmarks.md, "Profiling the worker").
            async for batch in stream.take_events(settings.worker_batch_records, within=settings.worker_batch_seconds):
                records = [_record(event) for event in batch]
                if await judge_ahead(records) and faust_compat.rebalanced(
                        app, [event.message.generation_id for event in batch]):
                    continue  # the tables may be another assignment's now: the records are read again
                await perform(stage, stage.apply(records), batch)
                if stage is redaction_stage and pacer.due(time.monotonic()):
                    await flush()
        except Exception:  # an unexpected bug: exit so a restart resumes at-least-once
            _fatal(name)

    @app.agent(l1_topic, name="redaction")
    async def redaction(stream: Any) -> None:
        await run(redaction_stage, "redaction", stream)

    @app.agent(redacted_topic, name="chunking")
    async def chunking(stream: Any) -> None:
        await run(chunking_stage, "chunking", stream)

    @app.timer(interval=0.5)
    async def reread_skipped() -> None:
        # A partition's last records that faust fetched but never handed on show no record past
        # them, so no stage finds them missing (streams.stages.gaps.Tails); hold them too.
        if not faust_compat.settled(app):
            tails.reset()
        else:
            applied = {(topic, partition): applied_offset((topic, partition))
                       for topic, partitions in ((topics.l1, settings.l1_partitions),
                                                 (topics.redacted, settings.stream_partitions))
                       for partition in range(partitions)}
            faust_compat.hold(app, tails.check(time.monotonic(), faust_compat.ends(app, (topics.l1, topics.redacted)),
                                               applied))
            await judge_holes(applied)
        await faust_compat.reread(app, gaps)

    # The table in which each stage keeps the offset of the last record it applied per source partition.
    progress_tables = {topics.l1: state.LOG_CLOCKS, topics.redacted: state.CHUNKER_PROGRESS}

    def applied_offset(source: tuple[str, int]) -> int | None:
        topic, partition = source
        offset: int | None = tables[progress_tables[topic]].get(state.offset_key(partition))
        return offset

    async def judge_ahead(records: list[Record]) -> bool:
        """Ask the broker about the holes ``records`` will meet before the stage applies them; a
        hole it finds empty (transaction markers, an aborted transaction) is then accepted in
        this batch. Found only by the stage, each transaction of a transactional producer on L1
        held its partition until the next tick and had everything since the committed offset
        read again. One read per source partition, over all its holes, the partitions side by
        side; a hole with records is left to the stage, to read again (:func:`judge_holes`).
        True when the broker was asked (the batch waited on it)."""
        applied = {source: applied_offset(source) for source in {(record.topic, record.partition) for record in records}}
        found = gaps.found_in([((record.topic, record.partition), record.offset) for record in records], applied)
        if not found:
            return False
        asked = list(found.items())
        answers = await asyncio.gather(*(records_between(bootstrap, topic, partition, holes[0][0], holes[-1][1])
                                         for (topic, partition), holes in asked))
        for ((topic, partition), holes), held in zip(asked, answers, strict=True):
            if held is None:
                continue  # the broker did not answer in time: the stage finds the holes
            for start, end in holes:
                if not any(start <= offset < end for offset in held):
                    gaps.judged_empty((topic, partition), start, end)
        return True

    async def judge_holes(applied: Mapping[tuple[str, int], int | None]) -> None:
        """Ask the broker about each hole found, and again about one that reading again did not
        fill (streams.stages.gaps)."""
        assigned = {(topic, partition) for topic in (topics.l1, topics.redacted)
                    for partition in faust_compat.assigned(app, topic)}
        committed = {(topic, partition): offset for topic in (topics.l1, topics.redacted)
                     for partition, offset in faust_compat.committed_offsets(app, topic).items()}
        holes = gaps.to_judge(applied, assigned, committed)
        if not holes:
            return  # every tick: the messages in flight are looked at only when a hole waits
        flying = faust_compat.in_flight(app)
        for (topic, partition), start, end in holes:
            if any(start <= offset < end for offset in flying.get((topic, partition), ())):
                continue  # a stage is applying them now (a slow batch, not a dropped one)
            found = await records_between(bootstrap, topic, partition, start, end)
            if found is None:
                continue  # the broker did not answer in time: asked again at the next tick
            if not found:
                gaps.judged_empty((topic, partition), start, end)
                continue
            if not gaps.read_enough((topic, partition), start):
                gaps.judged_holding((topic, partition), start)  # reading again brings them
                continue
            await faust_compat.rewind(app, topic, partition, start)  # a restart reads the hole, whatever faust committed
            _restart(f"{len(found)} records of {topic}[{partition}] from offset {found[0]} were fetched but "
                     f"never handed on, through {MAX_ROUNDS} reads again")

    @app.timer(interval=settings.flush_tick_seconds)
    async def flush_ticks() -> None:
        restored = await flush()
        if faust_compat.settled(app):
            clocks = redaction_stage.quiet_clocks(restored, faust_compat.assigned(app, topics.l1),
                                                  faust_compat.assigned(app, topics.redacted), now=time.time(),
                                                  monotonic=time.monotonic())
            await acknowledged(await send(clocks))

    return app


def run_worker(settings: Settings, bootstrap: str, *, loglevel: str = "warn") -> None:
    """Run the faust worker in this process until it is stopped (SIGTERM/SIGINT)."""
    from streams.logs import configure_logging, faust_logging_config, level_of
    from streams.metrics import served_by, start_metrics_server
    from streams.topics import ensure_topics

    configure_logging("usl.worker", loglevel)
    ensure_topics(bootstrap, settings)
    port = start_metrics_server(settings.metrics_port, families=served_by("worker"))
    log.info("worker metrics on http://127.0.0.1:%d/metrics", port)
    app = create_app(settings, bootstrap)
    worker = faust.Worker(app, loglevel=level_of(loglevel), quiet=True, logging_config=faust_logging_config())
    faust_compat.quiet_worker(worker)
    worker.execute_from_commandline()
