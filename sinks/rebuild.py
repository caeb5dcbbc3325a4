"""``usl rebuild INDEX``: replay L1 into a new generation line beside the live one, then switch.

The replay runs the same pure redaction and chunking code the faust agents run, in this
process, straight from L1 (so a new chunker, embedder or redaction policy takes effect). It
writes generations into a fresh ``rebuild-N`` line, catches up with the log head, verifies,
computes where the live sink must resume on the derived topics so the new line misses
nothing, switches the ACTIVE line atomically, publishes the watermark and retires the old
line (deleted once past its grace and unpinned: :mod:`sinks.retired`). L1 is only read, never
written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import orjson
from kafka import KafkaConsumer, TopicPartition

import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
from sinks.generations import GenerationStore, Manifest, chunk_seq_bound
from sinks.retired import collect_retired_lines
from sinks.runner import index_root, watermark_of, write_ids
from sinks.service import make_writer
from sinks.shards import Shard
from sinks.versions import pipeline_versions
from sinks.watermarks import WatermarkPublisher
from sinks.writer import RECORD_KINDS, SOURCE_KINDS, record_id
from streams.asp import ASP_VERSION, validate_event
from streams.exceptions import USLError
from streams.l1 import L1Reader
from streams.ownership import Owners
from streams.progress import marker_seq, new_progress, note_seq, note_session
from streams.redaction import redact_event
from streams.settings import Settings
from streams.stages.records import chunk_record, keep_remembered, recall_of, redact_admitted
from streams.ticks import advance_clock, clock_record_time, clock_time, event_clock_time
from streams.topics import Topics

__all__ = ["BuiltLine", "ReplayStream", "build_line", "check_replay_range", "rebuild", "rebuild_together", "resume_offsets",
           "switch_to"]

class ReplayStream:
    """L1 events → the derived records the pipeline would produce (redacted events, tool
    results, chunks), with the progress they prove. Pure code shared with the faust agents."""

    def __init__(self, settings: Settings, log_id: str) -> None:
        from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
        from streams.redaction import policy_hash

        self.policy = policy_hash()
        self.settings = settings
        self.log_id = log_id
        self.chunker = Chunker(
            ChunkerConfig(target_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap_tokens,
                          idle_gap_seconds=settings.idle_gap_seconds,
                          max_clock_skew_seconds=settings.max_clock_skew_seconds),
            default_tokenizer(), policy_hash=self.policy,
        )
        self.sessions: dict[str, dict[str, Any]] = {}
        self.secrets: dict[str, list[list[Any]]] = {}  # session memories, as the redaction stage's table
        self.owners = Owners()
        self.progress = new_progress()
        self.clock: dict[str, Any] = {"lastSeq": 0, "maxTime": None}
        self.last_seq = 0
        self.rejected = 0

    def feed(self, seq: int, raw_event: dict[str, Any]) -> list[dict[str, Any]]:
        """Records produced by the event at ``seq`` (in the order the pipeline emits them)."""
        out: list[dict[str, Any]] = []
        self.last_seq = max(self.last_seq, seq)
        stamp = clock_record_time(raw_event)
        if stamp is not None:  # a clock record: the clock moves, a quiet tick follows
            note_seq(self.progress, seq)
            return self._advance(seq, clock_time(stamp, getattr(raw_event, "append_time", None),
                                                 self.settings.max_clock_skew_seconds, self.clock["maxTime"]),
                                 quiet=True)
        try:
            event = validate_event(raw_event, record=f"L1 seq {seq}")
        except USLError:
            self.rejected += 1
            note_seq(self.progress, seq)
            return out
        when = event_clock_time(event, getattr(raw_event, "append_time", None), self.settings.max_clock_skew_seconds,
                                self.clock["maxTime"])
        admission = self.owners.admit(event, seq)  # as the redaction stage: owner, acl, dedup
        if admission.verdict == "rejected":
            self.rejected += 1
        if admission.event is not None:
            recall = recall_of(self.log_id, admission.event, seq, self.secrets)
            try:
                redacted = redact_admitted(admission.event, self.log_id, seq, policy=self.policy, clock_time=when,
                                           recall=recall)
            except Exception:  # the stream dead-letters an event a redaction rule fails on
                redacted = None
                self.rejected += 1
            if redacted is not None:
                keep_remembered(self.secrets, recall, seq)
                out += redacted.records
                session_id = redacted.event["sessionId"]
                state = self.sessions.setdefault(session_id, self.chunker.new_state(session_id))
                out += map(chunk_record, self.chunker.on_event(state, self.log_id, seq, redacted.event, clock_time=when))
                note_session(self.progress, session_id, self.chunker.open_min_seq(state))
        note_seq(self.progress, seq)
        return out + self._advance(seq, when)

    def remember(self, seq: int, raw_event: dict[str, Any]) -> None:
        """Only the session memory of the event at ``seq`` (:mod:`streams.redaction.memory`): for
        the events below a replay's first seq, so what they removed is removed above it too. Not
        admitted (a rejected event's values are remembered as well: more is removed, never less)."""
        try:
            event = validate_event(raw_event, record=f"L1 seq {seq}")
            recall = recall_of(self.log_id, event, seq, self.secrets)
            redact_event(event, recall=recall)
        except Exception:  # what the stream dead-letters remembers nothing
            return
        keep_remembered(self.secrets, recall, seq)

    def _advance(self, seq: int, when: float | None, *, quiet: bool = False) -> list[dict[str, Any]]:
        """The log clock past ``seq``, and the chunks the tick it triggers cuts."""
        out: list[dict[str, Any]] = []
        self.clock, tick = advance_clock(self.clock, self.log_id, seq, when, self.settings.tick_every_seqs,
                                         quiet=quiet)
        if tick is not None:
            for session_id in sorted(self.progress["open"]):
                state = self.sessions[session_id]
                out += map(chunk_record, self.chunker.on_tick(state, tick))
                note_session(self.progress, session_id, self.chunker.open_min_seq(state))
        return out

    def chunks_through(self) -> int:
        """Every event <= this seq is inside an emitted chunk (open units hold it back)."""
        return marker_seq(self.progress)


def resume_offsets(bootstrap: str, settings: Settings, sources: tuple[str, ...], log_id: str,
                   through: int) -> dict[str, dict[int, int]]:
    """Per derived-topic partition, the first offset holding a record of ``log_id`` that a line
    built through ``through`` does not already contain (everything before it is covered)."""
    topics = Topics.from_settings(settings)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level="read_committed", client_id="usl-rebuild-scan")
    result: dict[str, dict[int, int]] = {}
    try:
        for source in sources:
            topic = getattr(topics, source)
            parts = sorted(consumer.partitions_for_topic(topic) or [])
            tps = [TopicPartition(topic, p) for p in parts]
            if not tps:
                continue
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = consumer.end_offsets(tps)
            found: dict[int, int] = {}
            deadline = time.monotonic() + 300
            while len(found) < len(tps) and time.monotonic() < deadline:
                for tp in tps:
                    if tp.partition not in found and consumer.position(tp) >= ends[tp]:
                        found[tp.partition] = ends[tp]
                batch = consumer.poll(timeout_ms=300, max_records=5000)
                for tp, records in batch.items():
                    for record in records:
                        if tp.partition in found or record.offset >= ends[tp]:
                            continue
                        try:
                            body = orjson.loads(record.value)
                        except orjson.JSONDecodeError:
                            continue
                        if body.get("logId") != log_id:
                            continue
                        seq = body.get("maxSeq") if body.get("kind") == "chunk" else body.get("seq")
                        if body.get("kind") in RECORD_KINDS and int(seq) > through:
                            found[tp.partition] = record.offset
                    if tp.partition not in found and consumer.position(tp) >= ends[tp]:
                        found[tp.partition] = ends[tp]
            result[topic] = found
    finally:
        consumer.close()
    return result


def _iter_l1(reader: L1Reader, log_id: str, from_seq: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Read L1 from ``from_seq`` and keep following the head until it stops moving."""
    position = from_seq
    while True:
        head = reader.committed_seq(log_id)
        if head < position:
            return
        yield from reader.read(log_id, position, head, clocks=True)
        position = head + 1


def _shard_filter(bootstrap: str, settings: Settings, sources: tuple[str, ...],
                  shard: Shard | None) -> Callable[[dict[str, Any]], bool]:
    """Whether a derived record belongs to ``shard``: the partition the pipeline gives it on the
    derived topics (the producers' default partitioner over its sessionId key: murmur2, as in
    Kafka's Java client; a chunk goes to its events' partition), owned by the shard."""
    if shard is None:
        return lambda record: True
    from kafka.partitioner.default import murmur2

    topics = Topics.from_settings(settings)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="usl-rebuild-partitions")
    try:
        counts = {len(consumer.partitions_for_topic(getattr(topics, source)) or ()) for source in sources}
    finally:
        consumer.close()
    if len(counts) != 1 or 0 in counts:
        raise USLError(f"the derived topics {', '.join(sources)} have partition counts {sorted(counts)}; "
                       "a shard is rebuilt only over co-partitioned topics")
    count = counts.pop()

    def owned(record: dict[str, Any]) -> bool:
        session_id = record["sessionId"] if "sessionId" in record else record["event"]["sessionId"]
        return shard.owns((murmur2(str(session_id).encode()) & 0x7FFFFFFF) % count)

    return owned


def check_replay_range(log_id: str, from_seq: int, l1_seq: int, *, known: bool) -> None:
    """Refuse a rebuild that would replay nothing: of a log L1 does not know (its index
    directories and watermark would make a phantom log appear in status), or from past the
    log's committed seq (an empty line would be switched live in place of the index)."""
    if not known:
        raise USLError(f"no log named {log_id!r}: nothing to rebuild (`usl status` lists the logs)")
    if from_seq > l1_seq:
        raise USLError(f"--from-seq {from_seq} is past the end of log {log_id!r} (L1 seq {l1_seq}): "
                       f"nothing to replay; use a seq from 1 to {l1_seq}" if l1_seq else
                       f"log {log_id!r} holds no events yet: nothing to rebuild")


@dataclass(frozen=True)
class BuiltLine:
    """A rebuilt line, verified and not yet active: :func:`switch_to` makes it the index."""

    kind: str
    manifest: Manifest
    store: GenerationStore
    live: GenerationStore
    old_line: str | None
    versions: dict[str, Any]


def rebuild(settings: Settings, bootstrap: str, kind: str, *, log_id: str = "default", from_seq: int = 1,
            batch_size: int = 2000, progress: Callable[[int, int], None] | None = None,
            shard: Shard | None = None) -> Manifest:
    """Replay L1 from ``from_seq`` into a new line for ``kind`` (of ``shard``: only the records
    of its partitions, into its own lines), verify, and switch to it."""
    built = build_line(settings, bootstrap, kind, log_id=log_id, from_seq=from_seq, batch_size=batch_size,
                       progress=progress, shard=shard)
    switch_to(settings, bootstrap, built)
    return built.manifest


def rebuild_together(settings: Settings, bootstrap: str, kinds: Sequence[str], *, log_id: str = "default",
                     from_seq: int = 1, shard: Shard | None = None,
                     progress: Callable[[str], AbstractContextManager[Callable[[int, int], None] | None]] | None = None,
                     switched: Callable[[Manifest], None] | None = None) -> list[Manifest]:
    """Rebuild every index of ``kinds`` and switch them only when all are built and verified
    (``usl rebuild all``). ``progress(kind)`` gives the replay's progress callback for the time
    that kind is built; ``switched`` hears of each switch.

    Switching each kind when it is done would leave a log's indexes built under two redaction
    policies or chunkers for as long as the kinds after it take (the vector index, the slowest,
    for most of the rebuild), and the planner refuses to join such indexes (503 index_mismatch):
    searches would fail for the whole rebuild after an upgrade. Built first, the old lines keep
    answering, coherently, until the switches, which follow each other within moments."""
    built = []
    for kind in kinds:
        with nullcontext() if progress is None else progress(kind) as report:
            built.append(build_line(settings, bootstrap, kind, log_id=log_id, from_seq=from_seq,
                                    progress=report, shard=shard))
    for line in built:
        switch_to(settings, bootstrap, line)
        if switched is not None:
            switched(line.manifest)
    return [line.manifest for line in built]


def build_line(settings: Settings, bootstrap: str, kind: str, *, log_id: str = "default", from_seq: int = 1,
               batch_size: int = 2000, progress: Callable[[int, int], None] | None = None,
               shard: Shard | None = None) -> BuiltLine:
    """Replay L1 from ``from_seq`` into a new line for ``kind`` and verify it; the live line
    stays active."""
    reader = L1Reader(bootstrap, settings)
    try:
        target = reader.committed_seq(log_id)
        check_replay_range(log_id, from_seq, target, known=reader.registry.partition_of(log_id) is not None)
    except BaseException:
        reader.close()
        raise
    writer = make_writer(kind, settings)
    versions = pipeline_versions(settings)
    root = index_root(settings)
    shard_name = None if shard is None else shard.name
    owned = _shard_filter(bootstrap, settings, writer.sources, shard)
    live = GenerationStore(root, log_id, kind, shard=shard_name)
    # current_id, not current(): the live line's manifest may be the damaged file this
    # rebuild replaces.
    old_line = live.line if live.current_id() is not None else None
    line = live.new_rebuild_line()
    store = GenerationStore(root, log_id, kind, line, shard=shard_name)
    replay = ReplayStream(settings, log_id)
    kinds = {kind for source in writer.sources for kind in SOURCE_KINDS[source]}
    chunk_based = "chunks" in writer.sources
    manifest: Manifest | None = None
    pending: list[dict[str, Any]] = []

    def commit(final: bool) -> Manifest:
        nonlocal pending
        through = replay.chunks_through() if chunk_based else replay.last_seq
        if manifest is not None:
            through = max(through, manifest.built_through_seq)
        offsets = resume_offsets(bootstrap, settings, writer.sources, log_id, through) if final else {}
        if shard is not None:
            offsets = {topic: {p: o for p, o in parts.items() if shard.owns(p)} for topic, parts in offsets.items()}
        staging = store.begin()
        try:
            previous = store.generation_dir(manifest.generation_id) if manifest else None
            writer.write(staging, previous, pending)
            write_ids(staging, [record_id(r) for r in pending])
            describe = writer.describe()
            committed = store.commit(staging, Manifest(
                kind=kind, log_id=log_id, line=line, generation_id=0, built_through_seq=through,
                schema_version=str(describe.get("schemaVersion", "1")), asp_version=ASP_VERSION,
                chunker=dict(versions["chunker"]), embedding=describe.get("embedding"),
                redaction_policy_hash=str(versions["redactionPolicy"]), source_offsets=offsets,
                chunk_count=(manifest.chunk_count if manifest else 0) + len(pending),
                extra={**describe, "rebuild": {"fromSeq": from_seq, "replayedThroughSeq": replay.last_seq},
                       **chunk_seq_bound(manifest, pending)},
            ))
        except BaseException:
            store.abort()
            raise
        pending = []
        return committed

    try:
        # A line from --from-seq holds nothing below it, but its events are redacted with what
        # their sessions removed below it, as the live stream redacted them: a secret named below
        # the line's first seq and repeated above it must not be indexed there.
        for below, prior in reader.read(log_id, 1, from_seq - 1) if from_seq > 1 else ():
            replay.remember(below, prior)
        for seq, event in _iter_l1(reader, log_id, from_seq):
            pending.extend(r for r in replay.feed(seq, event)
                           if r["kind"] in kinds and not r.get("provisional") and owned(r))
            if len(pending) >= batch_size:
                manifest = commit(final=False)
            if progress is not None and seq % 500 == 0:
                progress(seq, max(target, seq))
        manifest = commit(final=True)
        if progress is not None:
            progress(replay.last_seq, max(target, replay.last_seq))
    finally:
        reader.close()
    store.verify(manifest)
    return BuiltLine(kind=kind, manifest=manifest, store=store, live=live, old_line=old_line, versions=versions)


def switch_to(settings: Settings, bootstrap: str, built: BuiltLine) -> None:
    """Make ``built`` the active line of its index, publish its watermark, retire the old line."""
    manifest, store, live = built.manifest, built.store, built.live
    live.set_active_line(manifest.line)
    publisher = WatermarkPublisher(bootstrap, settings)
    try:
        publisher.publish(watermark_of(manifest, store, built.versions))
    finally:
        publisher.close()
    root = index_root(settings)
    if built.old_line is not None and built.old_line != manifest.line:
        old = GenerationStore(root, manifest.log_id, built.kind, built.old_line, shard=live.shard)
        old.retire(manifest.line)
        old.gc(keep_last=0)
    # Lines retired by earlier rebuilds whose grace has passed (this one's has just begun).
    collect_retired_lines(root, manifest.log_id, built.kind, shard=live.shard,
                          grace_seconds=settings.retired_line_grace_seconds)
