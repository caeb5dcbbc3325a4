"""Every use of a faust-streaming or aiokafka internal, in one place.

Tested with faust-streaming 0.15.3 and aiokafka 0.14.0; pyproject.toml pins
the ranges these were checked against, and ``tests/streams/test_faust_compat.py`` fails loudly
when an upgrade removes or renames any name below. Reading a record again is always safe in
this worker (every stage is idempotent), so each patch errs toward reading again.

Patched (replaced on the class, once per process, by :func:`patch_faust_rebalance`):

- ``faust.transport.consumer.Consumer.ack(self, message) -> bool``: a stream skips (and acks)
  messages fetched while the flow is stopped or in an older consumer generation -- during a
  rebalance, and in a race right after recovery (faust-streaming#221, #223) -- and nothing
  reads them again. The ack is dropped and the partition marked skipped instead.
- ``faust.transport.consumer.Consumer._new_offset(self, tp) -> int | None``: faust's commit
  moves past such a hole (its gap check is off by one, faust-streaming#312, #318). A partition
  marked skipped commits nothing until it was read again.
- ``faust.transport.drivers.aiokafka.AIOKafkaConsumerThread._create_worker_consumer(self,
  transport)``: faust builds the worker's ``AIOKafkaConsumer`` with ``fetch_max_wait_ms=1500``
  and no setting for it. aiokafka keeps one fetch in flight per broker, over the partitions whose
  fetched records are used up; while such a fetch waits on caught-up partitions (the redacted
  topic the worker itself feeds), new records of the others (L1) are not fetched. With 1.5 s the
  worker sat idle two thirds of the time on a backlog (docs/benchmarks.md, "The fetch that held
  the worker"). The consumer's ``_fetch_max_wait_ms`` is set from :func:`set_fetch_wait` before
  it starts. And its ``_isolation_level`` is ``read_committed``: faust reads committed only under
  exactly-once and everything else uncommitted, so the events of an aborted (or still open)
  transaction of a transactional producer on L1 reached the indexes, which the planner's tail
  scan, the sinks and a rebuild, reading L1 committed, never saw (SPEC §3: L1 is committed up
  to the last stable offset).
- ``AIOKafkaConsumerThread.highwater(self, tp)``: a partition's end as the fetches saw it is, for
  a consumer that reads committed, its last stable offset (faust says so only under
  exactly-once): past it lie records of open transactions the consumer cannot read yet, which
  :class:`streams.stages.gaps.Tails` would take for records dropped.
- ``faust.transport.drivers.aiokafka.AIOKafkaConsumerThread.seek_to_committed(self)`` (async):
  a partition kept across a rebalance without a committed offset is not repositioned (aiokafka
  seeks only to committed offsets > 0, faust-streaming#216); it is now sought to its beginning,
  which is what ``earliest`` means for a group that has committed nothing.

Read or written without patching:

- ``Consumer.__dict__["usl_skipped"]``: the partitions marked skipped (our own attribute);
  ``Consumer._acked`` / ``Consumer._acked_index`` (faust's ack bookkeeping per partition) and
  ``Consumer.perform_seek()``: :func:`reread` seeks back to the committed offsets and forgets
  the acks of the range that is read again.
- ``Consumer.unacked``: the messages handed to a stream and not acknowledged, for
  :func:`in_flight` (a hole whose records a stage is applying right now is no hole to judge).
- ``Consumer._committed_offset``: the offsets the group committed, for flush-tick claims and
  :func:`rewind`.
- ``Consumer._commit(offsets)`` (faust's aiokafka driver: the group commit itself, without
  faust's rule that a commit only moves forward): :func:`rewind` commits a hole's first offset
  before the worker exits for a restart to read it. faust may have committed past the hole: its
  ``_gap`` bookkeeping, filled when a seek back set its read offset below records still being
  handed on, adds those offsets to the acked ones, so a later commit passes records no stage
  applied; a restart from there never reads the hole, and exits again, for ever.
- ``Consumer.highwater(tp)`` (patched above: aiokafka's ``AIOKafkaConsumer.last_stable_offset``):
  each source partition's end offset as the last fetch response gave it, for :func:`ends`: faust also drops records it
  fetched without acking them (below its read offset after a seek back, the rest of a fetch when
  a rebalance begins), and a partition's last records dropped so are found only by comparing
  its end with what the stage applied (:class:`streams.stages.gaps.Tails`).
- ``faust.stores.memory.Store._key_partition``: the changelog partition of each key restored
  into a memory table, for flush-tick claims of logs whose clocks moved here.
- ``Collection.data``, ``Collection.changelog_topic``, ``Collection.key_serializer`` /
  ``value_serializer`` and ``Topic.prepare_key`` / ``prepare_value``: :func:`put_all` writes table
  keys outside faust's per-event context, which ``Table.__setitem__`` needs (faust-streaming#497),
  and sends their changelog records with the key and value bytes ``Collection.send_changelog``
  would send, straight through the app's producer (``ProducerT.send``): ``send_changelog`` goes
  through faust's ``ProducerBuffer`` and ``Topic.publish_message`` at about 160 us of CPU per record
  against 40 us (docs/benchmarks.md). What ``send_changelog``'s callback does,
  ``Store.set_persisted_offset``, is a no-op for the memory store this worker uses; faust's offset
  commit flushes the producer first either way.
- ``faust.transport.drivers.aiokafka.Producer._ensure_producer()`` (the app producer's
  ``AIOKafkaProducer``), its ``_message_accumulator``, the accumulator's ``_batches`` (per
  partition, the record batches not yet sent) and ``_waiter_future`` (what wakes the sender), and
  ``MessageBatch._linger_time``: :func:`send_now` lets the batches already open go at once instead
  of after the producer's linger, and wakes the sender as aiokafka's own ``flush_for_commit``
  does (without closing the batches, which would make the next send to their partition wait for
  them). A worker stage waits for the acknowledgement of what it just sent up to three times a
  batch (chunks, session states, progress), and each wait paid the linger (docs/benchmarks.md).
- ``App.flow_control``, ``App.consumer_generation_id`` and ``Message.generation_id``:
  :func:`rebalanced` tells whether a batch's records may now belong to another worker.
- ``App.in_recovery`` (set by faust's table recovery): :func:`settled` is false while tables are
  restored, when what a stage applied is not yet known.
- ``faust.Worker.spinner``: faust's terminal spinner sets the root logger to DEBUG so that every
  log call spins it; aiokafka then builds a debug LogRecord for every message sent (~10% of the
  worker's CPU). :func:`quiet_worker` removes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import faust
from faust.exceptions import ConsumerNotStarted
from faust.types import TP

from streams.stages.gaps import Gaps

__all__ = [
    "assigned",
    "committed_offsets",
    "ends",
    "hold",
    "in_flight",
    "patch_faust_rebalance",
    "put_all",
    "quiet_worker",
    "rebalanced",
    "reread",
    "restored_key_partitions",
    "rewind",
    "send_now",
    "set_fetch_wait",
    "settled",
    "skipped",
]

TESTED_WITH = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0"}
"""The versions every name below was checked against (tests/streams/test_faust_compat.py)."""


def patch_faust_rebalance() -> None:
    """Patch ``Consumer.ack``, ``Consumer._new_offset`` and ``AIOKafkaConsumerThread``'s
    ``_create_worker_consumer``, ``highwater`` and ``seek_to_committed`` (module docstring);
    idempotent."""
    from faust.transport.consumer import Consumer
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

    if getattr(Consumer, "usl_patched", False):
        return
    original_ack, original_new_offset = Consumer.ack, Consumer._new_offset

    def ack(self: Any, message: Any) -> bool:
        app = self.app
        if message.generation_id != app.consumer_generation_id or not app.flow_control.is_active():
            skipped(self).add(message.tp)
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

    original_create = AIOKafkaConsumerThread._create_worker_consumer

    def create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = original_create(self, transport)
        wait_ms = self.app.__dict__.get("usl_fetch_wait_ms")
        if wait_ms is not None:  # read by the fetcher aiokafka builds when the consumer starts
            consumer._fetch_max_wait_ms = wait_ms
        consumer._isolation_level = "read_committed"  # read by that fetcher too
        return consumer

    def highwater(self: Any, tp: Any) -> Any:
        consumer = self._ensure_consumer()
        stable = consumer.last_stable_offset(tp)  # None from a broker too old to say
        return consumer.highwater(tp) if stable is None or stable < 0 else stable

    AIOKafkaConsumerThread._create_worker_consumer = create_worker_consumer  # type: ignore[method-assign]
    AIOKafkaConsumerThread.highwater = highwater  # type: ignore[method-assign]
    Consumer.ack = ack  # type: ignore[method-assign]
    Consumer._new_offset = new_offset  # type: ignore[method-assign]
    AIOKafkaConsumerThread.seek_to_committed = seek_to_committed  # type: ignore[method-assign]
    Consumer.usl_patched = True  # type: ignore[attr-defined]


def set_fetch_wait(app: faust.App, seconds: float) -> None:
    """Let the broker hold a fetch of ``app``'s worker consumer at most ``seconds`` (module
    docstring: faust hard-codes 1.5 s). Call before the worker starts."""
    app.__dict__["usl_fetch_wait_ms"] = max(1, round(seconds * 1000))


def skipped(consumer: Any) -> set[Any]:
    """The partitions whose commits are held until they are read again."""
    held: set[Any] = consumer.__dict__.setdefault("usl_skipped", set())
    return held


def hold(app: faust.App, sources: Iterable[tuple[str, int]]) -> None:
    """Hold the commits of ``sources`` (topic, partition) until :func:`reread` ran."""
    held = skipped(app.consumer)
    for topic, partition in sources:
        held.add(TP(topic, partition))


async def reread(app: faust.App, gaps: Gaps) -> None:
    """Seek every held partition back to its committed offset, so its skipped records arrive."""
    held = skipped(app.consumer)
    if not held or not app.flow_control.is_active():
        return
    consumer = app.consumer
    pending = set(held)
    await consumer.perform_seek()
    for tp in pending:  # acks of the skipped range are rebuilt as it is processed again
        # faust's ConsumerT interface does not declare the ack bookkeeping of its Consumer.
        consumer._acked.pop(tp, None)  # type: ignore[attr-defined]
        consumer._acked_index.pop(tp, None)  # type: ignore[attr-defined]
        gaps.reread((tp.topic, tp.partition))
    held.difference_update(pending)


async def put_all(app: faust.App, writes: Iterable[tuple[Any, int, str, Any]]) -> list[Any]:
    """``table[key] = value`` for each ``(table, changelog partition, key, value)``, and the delivery
    futures of their changelog records. Every key takes its value before the first record is sent
    (nothing else on the event loop sees half a batch's state); the records go in list order."""
    records = []
    for table, partition, key, value in writes:
        topic = table.changelog_topic
        key_bytes, _ = topic.prepare_key(key, table.key_serializer)
        value_bytes, _ = topic.prepare_value(value, table.value_serializer)
        table.data[key] = value
        records.append((topic.get_topic_name(), key_bytes, value_bytes, partition))
    producer = await app.maybe_start_producer()
    return [await producer.send(name, key_bytes, value_bytes, partition, None, None)
            for name, key_bytes, value_bytes, partition in records]


def send_now(app: faust.App) -> None:
    """Let every record batch the app's producer holds open go in its next request, without
    waiting out the linger (module docstring): call it before awaiting the acknowledgement of
    records just sent. Records sent after it still join those batches until they are sent."""
    accumulator = app.producer._ensure_producer()._message_accumulator  # type: ignore[attr-defined]
    for batches in list(accumulator._batches.values()):
        for batch in batches:
            batch._linger_time = 0.0
    if not accumulator._waiter_future.done():
        accumulator._waiter_future.set_result(None)


def committed_offsets(app: faust.App, topic: str) -> dict[int, int]:
    """Per partition of ``topic`` assigned to this process, the offset the group committed."""
    committed: Mapping[Any, Any] = getattr(app.consumer, "_committed_offset", {})
    assigned = app.consumer.assignment()
    return {tp.partition: int(offset) for tp, offset in list(committed.items())
            if tp.topic == topic and tp in assigned and offset is not None}


async def rewind(app: faust.App, topic: str, partition: int, offset: int) -> None:
    """Commit ``offset`` for ``topic``'s ``partition`` when the group's committed offset is past
    it, so that a restart reads from there (module docstring)."""
    committed = committed_offsets(app, topic).get(partition)
    if committed is not None and committed > offset:
        # faust's ConsumerT interface does not declare the driver's commit.
        await app.consumer._commit({TP(topic, partition): offset})  # type: ignore[attr-defined]


def in_flight(app: faust.App) -> dict[tuple[str, int], list[int]]:
    """Per source partition, the offsets of the records faust handed to a stream and that are not
    acknowledged yet (a stage's batch still being applied)."""
    flying: dict[tuple[str, int], list[int]] = {}
    for message in list(app.consumer.unacked):
        flying.setdefault((message.tp.topic, message.tp.partition), []).append(message.offset)
    return flying


def assigned(app: faust.App, topic: str) -> set[int]:
    """The partitions of ``topic`` assigned to this process."""
    return {tp.partition for tp in list(app.consumer.assignment()) if tp.topic == topic}


def ends(app: faust.App, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """Per partition of ``topics`` assigned to this process, its end offset (the offset its next
    record gets) as the consumer's last fetch of it saw; partitions not fetched yet are left out."""
    wanted = set(topics)
    found = {}
    for tp in list(app.consumer.assignment()):
        if tp.topic not in wanted:
            continue
        try:
            end = app.consumer.highwater(tp)
        except (AssertionError, ConsumerNotStarted):  # aiokafka checks tp is still assigned: a rebalance began
            continue
        if end is not None:
            found[tp.topic, tp.partition] = int(end)
    return found


def restored_key_partitions(table: Any) -> dict[Any, int]:
    """Key -> changelog partition of every key of a memory table."""
    return dict(getattr(table.data, "_key_partition", {}))


def rebalanced(app: faust.App, generation_ids: Iterable[int | None]) -> bool:
    """True when a rebalance began or ended since records of these consumer generations were
    fetched: they may now belong to another worker."""
    if not app.flow_control.is_active():
        return True
    generation = app.consumer_generation_id
    return any(generation_id != generation for generation_id in generation_ids)


def settled(app: faust.App) -> bool:
    """True when no rebalance is under way and no table is being restored."""
    return bool(app.flow_control.is_active()) and not getattr(app, "in_recovery", False)


def quiet_worker(worker: faust.Worker) -> None:
    """Remove faust's terminal spinner (module docstring)."""
    worker.spinner = None
