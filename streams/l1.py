"""The L1 log: the append-only source of truth.

- :class:`LogRegistry` maps a ``logId`` to its L1 partition. The mapping is assigned once and
  recorded on a compacted topic, so it never changes when partitions are added (a hash modulo
  the partition count would). A new log takes the lowest partition no log owns yet; when every
  partition is owned, logs share one deterministically (the reader filters by ``logId``).
- :class:`L1Producer` appends validated ASP events: idempotent, ``acks=all``.
- :class:`L1Reader` answers the committed seq of a log and reads events by seq range;
  ``seq = offset + 1``. Seqs may have gaps (transaction markers, shared partitions).
- :class:`DeadLetters` publishes what could not be processed, with its reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError

from streams.asp import canonical_bytes, event_digest
from streams.exceptions import BrokerError, SchemaError
from streams.kafka_compat import close_now, skip_startup_backoff
from streams.settings import Settings
from streams.ticks import clock_record_time
from streams.topics import Topics

__all__ = ["AppendedEvent", "DeadLetters", "L1Producer", "L1Reader", "LogRegistry", "TopicTail",
           "dead_letter_excerpt", "follow_topic", "letter_of", "read_dead_letters", "read_on", "read_topic_to_end",
           "resolution_key"]

_RAW_LIMIT = 4096
#: How long :meth:`L1Producer.flush` waits while the broker acknowledges none of the events
#: waiting on it before it gives up. kafka-python's own ``delivery_timeout_ms`` did not end the
#: wait: with the broker killed mid-import, ``usl ingest`` waited silently for good (17 minutes
#: and counting, the broker back after 10 of them), and Ctrl-C only moved the wait to ``close``.
ACK_STALL_SECONDS = 60.0
_ACK_POLL_SECONDS = 2.0


def follow_topic(bootstrap: str, topic: str, *, client_id: str,
                 stopped: Callable[[], bool]) -> Iterator[tuple[list[Any], bool]]:
    """Follow partition 0 of ``topic`` (a one-partition compacted topic) from its beginning
    until ``stopped()``: yields each poll's records (read_committed), and whether the reader has
    reached the end the topic had when it started (first yielded before any poll, empty)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level="read_committed", client_id=client_id)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        end = consumer.end_offsets([partition])[partition]
        yield [], end == 0
        while not stopped():
            records = consumer.poll(timeout_ms=200, max_records=1000).get(partition, [])
            yield records, consumer.position(partition) >= end
    finally:
        consumer.close()


def read_topic_to_end(bootstrap: str, topic: str, *, partitions: Iterable[int] | None = None,
                      timeout_seconds: float = 30.0) -> Iterator[Any]:
    """Every record of ``topic`` from the beginning to its current end (read_committed)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level="read_committed", consumer_timeout_ms=1000)
    try:
        yield from _read_to_end(consumer, topic, partitions=partitions, timeout_seconds=timeout_seconds)
    finally:
        consumer.close()


def _read_to_end(consumer: KafkaConsumer, topic: str, *, partitions: Iterable[int] | None = None,
                 timeout_seconds: float = 30.0) -> Iterator[Any]:
    """:func:`read_topic_to_end` through ``consumer`` (left assigned to the topic's partitions)."""
    wanted = _assign_from_beginning(consumer, topic, partitions)
    if wanted:
        yield from read_on(consumer, wanted, what=topic, timeout_seconds=timeout_seconds)


def _assign_from_beginning(consumer: KafkaConsumer, topic: str,
                           partitions: Iterable[int] | None = None) -> list[TopicPartition]:
    """``consumer`` assigned to ``topic``'s partitions (those of ``partitions``), each at its
    beginning; none while the topic does not exist."""
    parts = consumer.partitions_for_topic(topic) or set()
    wanted = [TopicPartition(topic, p) for p in sorted(parts) if partitions is None or p in set(partitions)]
    if wanted:
        consumer.assign(wanted)
        consumer.seek_to_beginning(*wanted)
    return wanted


def read_on(consumer: KafkaConsumer, partitions: list[TopicPartition], *, what: str,
            timeout_seconds: float = 30.0) -> Iterator[Any]:
    """The records of ``partitions`` from the consumer's positions up to their end offsets as
    of now; a BrokerError when they are not all read within ``timeout_seconds``."""
    end = consumer.end_offsets(partitions)
    deadline = time.monotonic() + timeout_seconds
    while any(consumer.position(tp) < end[tp] for tp in partitions):
        if time.monotonic() >= deadline:
            raise BrokerError(f"timed out reading {what} to its end")
        for records in consumer.poll(timeout_ms=500, max_records=5000).values():
            yield from records  # with any written since ``end``: the position is past them


class TopicTail:
    """A topic read on from where the last read ended, to its end at each read, through one
    kept consumer: a status that is polled (the API's ``/v1/status`` and ``/metrics``) pays a
    new client's connection and metadata (~100 ms) once, not per poll. One thread at a time:
    the owner serialises its reads. After :meth:`close` or an error the next read starts from
    the topic's beginning again, on a new connection; so does the read after the topic was made
    again (its end below the position). Records retention deleted are skipped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._bootstrap = bootstrap
        self.topic = topic
        self._consumer: KafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []

    def read(self, timeout_seconds: float = 30.0) -> tuple[bool, list[Any], dict[int, int]]:
        """(whether this read starts from the beginning, the records written since the last
        read, each partition's first offset still held)."""
        try:
            restarted = False
            if self._consumer is None:
                consumer = KafkaConsumer(bootstrap_servers=self._bootstrap, enable_auto_commit=False,
                                         isolation_level="read_committed", client_id="usl-topic-tail")
                skip_startup_backoff(consumer)
                self._partitions = _assign_from_beginning(consumer, self.topic)
                if not self._partitions:  # not created yet: nothing to read, and nothing kept
                    consumer.close()
                    return True, [], {}
                self._consumer, restarted = consumer, True
            consumer = self._consumer
            first = consumer.beginning_offsets(self._partitions)
            end = consumer.end_offsets(self._partitions)
            if any(end[tp] < consumer.position(tp) for tp in self._partitions):
                consumer.seek_to_beginning(*self._partitions)
                restarted = True
            for tp in self._partitions:
                if consumer.position(tp) < first[tp]:
                    consumer.seek(tp, first[tp])
            records = list(read_on(consumer, self._partitions, what=self.topic, timeout_seconds=timeout_seconds))
        except Exception:
            self.close()
            raise
        return restarted, records, {tp.partition: offset for tp, offset in first.items()}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class LogRegistry:
    """logId → L1 partition, recorded on the compacted ``usl.l1.logs`` topic.

    Each :meth:`refresh` reads the topic from its start. By default through a consumer of its
    own, made and closed for that read; with ``keep_consumer`` one consumer serves every refresh
    until :meth:`close` (a new kafka-python client waits about 100 ms before its first topic
    metadata, and the follower refreshes several times per batch for a log it does not know yet).
    """

    def __init__(self, bootstrap: str, settings: Settings, *, keep_consumer: bool = False,
                 refresh: bool = True) -> None:
        """``refresh=False`` leaves the mapping empty until the owner calls :meth:`refresh`."""
        self._bootstrap = bootstrap
        self._settings = settings
        self._topics = Topics.from_settings(settings)
        self._mapping: dict[str, int] = {}
        self._keep_consumer = keep_consumer
        self._consumer: KafkaConsumer | None = None
        self._lock = threading.Lock()  # a KafkaConsumer serves one thread at a time
        if refresh:
            self.refresh()

    def refresh(self) -> dict[str, int]:
        with self._lock:
            mapping: dict[str, int] = {}
            for record in self._records():
                try:
                    entry = orjson.loads(record.value)
                except orjson.JSONDecodeError:
                    continue
                # The first record of a log wins, so a racing second writer cannot move a log.
                mapping.setdefault(entry["logId"], int(entry["partition"]))
            self._mapping = mapping
            return dict(mapping)

    def _records(self) -> Iterator[Any]:
        if not self._keep_consumer:
            return read_topic_to_end(self._bootstrap, self._topics.logs)
        if self._consumer is None:
            self._consumer = KafkaConsumer(bootstrap_servers=self._bootstrap, enable_auto_commit=False,
                                           isolation_level="read_committed", client_id="usl-log-registry")
            skip_startup_backoff(self._consumer)  # its first read is waited for (streams.kafka_compat)
        return _read_to_end(self._consumer, self._topics.logs)

    def close(self) -> None:
        """Close the kept consumer, if any (a registry may still refresh afterwards: it opens another)."""
        with self._lock:
            consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    @property
    def logs(self) -> dict[str, int]:
        return dict(self._mapping)

    def partition_of(self, log_id: str) -> int | None:
        return self._mapping.get(log_id)

    def assign(self, log_id: str, *, producer: KafkaProducer | None = None) -> int:
        """The partition of ``log_id``, assigning and recording one if the log is new (through
        ``producer`` when given, an idempotent acks=all one such as the L1 producer's; else
        one made for the record)."""
        if log_id in self._mapping:
            return self._mapping[log_id]
        owned = set(self._mapping.values())
        free = [p for p in range(self._settings.l1_partitions) if p not in owned]
        if free:
            partition = free[0]
        else:
            # Every partition is owned: share one. Deterministic given the registry's contents.
            counts = {p: 0 for p in range(self._settings.l1_partitions)}
            for p in self._mapping.values():
                counts[p] = counts.get(p, 0) + 1
            partition = min(counts, key=lambda p: (counts[p], p))
        sender = producer or KafkaProducer(bootstrap_servers=self._bootstrap, acks="all", enable_idempotence=True)
        try:
            sender.send(self._topics.logs, key=log_id.encode(),
                        value=orjson.dumps({"logId": log_id, "partition": partition})).get(timeout=30)
        finally:
            if producer is None:
                sender.close()
        self.refresh()
        return self._mapping[log_id]


class L1Producer:
    """Appends validated ASP events to their log's partition (idempotent, acks=all)."""

    def __init__(self, bootstrap: str, settings: Settings, registry: LogRegistry | None = None) -> None:
        self._topics = Topics.from_settings(settings)
        self._registry = registry or LogRegistry(bootstrap, settings)
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
            linger_ms=5, batch_size=256 * 1024, max_in_flight_requests_per_connection=5,
            max_request_size=settings.max_message_bytes, client_id="usl-l1-producer",
        )
        self._max_event_bytes = settings.max_event_bytes
        self._pending: list[Any] = []
        self._highest = 0

    def append(self, event: dict[str, Any], canonical: bytes | None = None) -> None:
        """Queue one validated event; :meth:`flush` waits until every queued event is durable.
        ``canonical`` is the event's ``canonical_bytes`` when the caller has them (validation
        made them), else they are made here.

        Raises SchemaError for an event over USL_MAX_EVENT_BYTES (the importers cut theirs to
        fit with ``streams.asp.fit_event``)."""
        value = canonical_bytes(event) if canonical is None else canonical
        if len(value) > self._max_event_bytes:
            raise SchemaError(
                f"event {event['eventId']!r} is {len(value)} bytes, over the {self._max_event_bytes}-byte "
                "limit (USL_MAX_EVENT_BYTES); cut it with streams.asp.fit_event first",
            )
        partition = self._registry.assign(event["logId"], producer=self._producer)
        future = self._producer.send(self._topics.l1, key=event["sessionId"].encode(),
                                     value=value, partition=partition)
        self._pending.append(future)
        if len(self._pending) >= 10000:
            self.flush()

    def prefetch_metadata(self) -> None:
        """Learn the L1 and registry topics' partitions now rather than at the first append
        (``ingest`` does this while it imports), without kafka-python's start-up backoff
        (:mod:`streams.kafka_compat`)."""
        skip_startup_backoff(self._producer)
        for topic in (self._topics.l1, self._topics.logs):
            self._producer.partitions_for(topic)

    def flush(self, stall_seconds: float = ACK_STALL_SECONDS) -> int:
        """Wait for every queued event; return the highest seq this producer appended (0 if none).

        Raises BrokerError once the broker has acknowledged none of the waiting events for
        ``stall_seconds``: a slow broker that acknowledges some is waited for, one that is gone
        is not waited for forever."""
        acknowledged, deadline = -1, time.monotonic() + stall_seconds
        while True:
            try:
                self._producer.flush(timeout=_ACK_POLL_SECONDS)
                break
            except KafkaTimeoutError:
                done = sum(1 for future in self._pending if future.is_done)
                if done > acknowledged:
                    acknowledged, deadline = done, time.monotonic() + stall_seconds
                elif time.monotonic() >= deadline:
                    waiting = len(self._pending) - done
                    raise BrokerError(
                        f"the Kafka broker acknowledged none of the {waiting} event(s) waiting on it for "
                        f"{stall_seconds:.0f} s (is it running? `usl status` says); what it acknowledged "
                        "before is in L1, and running the import again appends only the rest") from None
        for future in self._pending:
            # Done by now (flush): get() would time a wait per record only to find that out.
            metadata = future.value if future.succeeded() else future.get(timeout=60)
            self._highest = max(self._highest, metadata.offset + 1)
        self._pending.clear()
        return self._highest

    def close(self, *, wait: bool = True) -> None:
        """Close the producer, first waiting for the queued events (:meth:`flush`) when ``wait``.
        Without waiting (Ctrl-C, a broker that is gone) whatever is unacknowledged is dropped:
        kafka-python's close() would flush it again, without bound."""
        flushed = False
        try:
            if wait:
                self.flush()
                flushed = True
        finally:
            if flushed:
                self._producer.close()
            else:
                close_now(self._producer)


class AppendedEvent(dict[str, Any]):
    """An event as read from L1, with its record's ``append_time`` (POSIX seconds, None if the
    record has none) and, when the reader was asked for it, ``digest`` (:func:`event_digest`
    of the record). A plain dict otherwise: readers that do not care never notice, and the
    paths that bound event time by append time (:func:`streams.ticks.clock_time`) read it as the
    agent reads the record's timestamp, so a replay bounds every event as the stream did."""

    __slots__ = ("append_time", "digest")

    def __init__(self, event: dict[str, Any], append_time: float | None, digest: bytes | None = None) -> None:
        super().__init__(event)
        self.append_time = append_time
        self.digest = digest


class L1Reader:
    """Committed seq of a log and events by seq range (the tail scan and rebuild use it)."""

    def __init__(self, bootstrap: str, settings: Settings, registry: LogRegistry | None = None) -> None:
        self._bootstrap = bootstrap
        self._topics = Topics.from_settings(settings)
        self._registry = registry or LogRegistry(bootstrap, settings)
        self._consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                       isolation_level="read_committed", client_id="usl-l1-reader")

    @property
    def registry(self) -> LogRegistry:
        return self._registry

    def prefetch_metadata(self) -> None:
        """Learn the L1 topic's partitions now rather than at the first read (see
        :meth:`L1Producer.prefetch_metadata`)."""
        skip_startup_backoff(self._consumer)
        self._consumer.partitions_for_topic(self._topics.l1)

    def _tp(self, log_id: str) -> TopicPartition | None:
        partition = self._registry.partition_of(log_id)
        if partition is None:
            self._registry.refresh()
            partition = self._registry.partition_of(log_id)
        return None if partition is None else TopicPartition(self._topics.l1, partition)

    def committed_seq(self, log_id: str) -> int:
        """The log's committed L1 seq: its partition's last stable offset (0 for an unknown log)."""
        tp = self._tp(log_id)
        if tp is None:
            return 0
        return int(self._consumer.end_offsets([tp])[tp])

    def committed_seqs(self) -> dict[str, int]:
        self._registry.refresh()
        return {log_id: self.committed_seq(log_id) for log_id in sorted(self._registry.logs)}

    def read(self, log_id: str, from_seq: int = 1, to_seq: int | None = None,
             *, timeout_seconds: float = 60.0, digests: bool = False,
             clocks: bool = False) -> Iterator[tuple[int, AppendedEvent]]:
        """(seq, event) for every event of ``log_id`` with from_seq <= seq <= to_seq, in order;
        each event an :class:`AppendedEvent` (with its ``digest`` when ``digests``). With
        ``clocks``, the log's clock records too (:mod:`streams.ticks`: what replays the chunker
        needs them; they are no events).

        ``timeout_seconds`` bounds a wait for the broker without progress, not the whole read:
        a rebuild that indexes between records may take hours over a long log.
        """
        tp = self._tp(log_id)
        if tp is None:
            return
        end = self.committed_seq(log_id) if to_seq is None else min(to_seq, self.committed_seq(log_id))
        if end < from_seq:
            return
        self._consumer.assign([tp])
        self._consumer.seek(tp, max(from_seq - 1, 0))
        deadline = time.monotonic() + timeout_seconds
        while self._consumer.position(tp) < end:
            if time.monotonic() >= deadline:
                raise BrokerError(f"timed out reading log {log_id!r} seqs {from_seq}..{end}")
            records = self._consumer.poll(timeout_ms=500, max_records=5000).get(tp, [])
            for record in records:
                seq = record.offset + 1
                if seq > end:
                    return
                try:
                    event = orjson.loads(record.value)
                except orjson.JSONDecodeError:
                    # Bytes the worker dead-letters (not JSON, a tombstone): no reader may
                    # fail on them. Callers validate what is left, as the worker does.
                    continue
                if isinstance(event, dict) and event.get("logId") == log_id and (
                        clocks or clock_record_time(event) is None):
                    stamp = record.timestamp
                    yield seq, AppendedEvent(event, stamp / 1000.0 if stamp and stamp > 0 else None,
                                             event_digest(record.value) if digests else None)
            if records:  # progress: the clock restarts after the caller had its records
                deadline = time.monotonic() + timeout_seconds

    def close(self) -> None:
        self._consumer.close()


def dead_letter_excerpt(raw: str) -> str:
    """The input a dead letter may carry: redacted, then cut to 4 KiB (a cut first could split
    a secret and leak its prefix). Of a long input only the first 16 KiB are redacted, read as a
    text cut there (:func:`streams.redaction.text.redact_head`); a record that was itself cut
    short (a JSONL line cut inside a token) loses its last token too."""
    from streams.redaction.text import redact_head  # dead letters must not carry secrets either

    return redact_head(raw, _RAW_LIMIT) if raw else ""


def read_dead_letters(bootstrap: str, settings: Settings, *, log_id: str | None = None,
                      limit: int = 20, resolved: bool = False) -> list[dict[str, Any]]:
    """The newest ``limit`` pending dead letters, newest first (of ``log_id`` only, when given: a
    letter names its log when the record was read that far). Each is the letter as published
    plus ``offset`` on the dead-letter topic; ``time`` falls back to the record's timestamp (the
    worker's letters carry none). A letter a later import resolved (:meth:`DeadLetters.resolve`)
    is left out, or, with ``resolved``, listed with ``resolvedAt`` (the resolution's time); the
    resolutions themselves are never listed. The topic is kept 30 days and holds only what
    failed, so it is read whole; a letter that is not JSON is listed with that as its reason."""
    letters: list[dict[str, Any]] = []
    open_letters: dict[tuple[Any, Any, Any], list[dict[str, Any]]] = {}
    for message in read_topic_to_end(bootstrap, Topics.from_settings(settings).deadletters):
        letter = letter_of(message)
        if log_id is not None and letter.get("logId") != log_id:
            continue
        key = resolution_key(letter)
        if letter.get("resolves"):
            for earlier in open_letters.pop(key, []) if key is not None else []:
                earlier["resolvedAt"] = letter.get("time")
            continue
        letters.append(letter)
        if key is not None:
            open_letters.setdefault(key, []).append(letter)
    shown = [letter for letter in letters if resolved or "resolvedAt" not in letter]
    return list(reversed(shown[-max(1, limit):]))


def resolution_key(letter: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    """What a resolution and the dead letters it resolves share: stage, log and record (an
    import's ``file:line``), or the event key of a receiver's letter (its record names the
    event's place in one request); None for a letter no resolution names (a pipeline stage's,
    which names its topic offset)."""
    key = letter.get("eventKey")
    if isinstance(key, str) and key:
        return letter.get("stage"), letter.get("logId"), f"event {key}"
    record = letter.get("record")
    if not isinstance(record, str) or not record:
        return None
    return letter.get("stage"), letter.get("logId"), record


def letter_of(message: Any) -> dict[str, Any]:
    """The dead letter a record of the topic holds, with its ``offset``, and the record's time
    where the letter has none."""
    try:
        letter = orjson.loads(message.value or b"")
    except orjson.JSONDecodeError:
        letter = None
    if not isinstance(letter, dict):
        letter = {"stage": (message.key or b"").decode("utf-8", "replace") or None,
                  "reason": "this dead letter is not a JSON object", "raw": ""}
    if not letter.get("time") and isinstance(message.timestamp, int) and message.timestamp > 0:
        letter["time"] = datetime.fromtimestamp(message.timestamp / 1000, UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    return {**letter, "offset": message.offset}


class DeadLetters:
    """Publishes records that could not be processed, with the reason, to ``usl.deadletters``."""

    def __init__(self, bootstrap: str, settings: Settings, *, producer: KafkaProducer | None = None) -> None:
        self._topic = Topics.from_settings(settings).deadletters
        self._own = producer is None
        self._producer = producer or KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                                   enable_idempotence=True, client_id="usl-deadletters")

    def publish(self, *, stage: str, reason: str, record: str | None = None, raw: str = "",
                source: dict[str, Any] | None = None, log_id: str | None = None,
                event_key: str | None = None) -> None:
        """``event_key``: what names the refused event across requests (a receiver's letter,
        :func:`planner.receivers.event_key`), which a resolution names in its stead of the record."""
        from streams.redaction import redact_text

        safe_raw = dead_letter_excerpt(raw)
        safe_reason, _ = redact_text(reason)
        letter: dict[str, Any] = {"stage": stage, "reason": safe_reason, "record": record, "source": source,
                                  "raw": safe_raw}
        if log_id is not None:
            letter["logId"] = log_id
        if event_key is not None:
            letter["eventKey"] = event_key
        self._send(letter)

    def resolve(self, *, stage: str, record: str, log_id: str, event_key: str | None = None,
                reason: str = "imported by a later import: the dead letters of this record before this one "
                              "are resolved") -> None:
        """Say that ``record`` (``file:line``), which ``stage`` dead-lettered under ``log_id``
        before, went through since (a line cut off at an import, completed at a later one); or,
        with ``event_key``, the event of that key (refused by a receiver, appended by a later
        request). The topic stays append-only: this is a letter of its own, ``resolves`` set, and
        readers (``usl deadletters``, ``usl status``) leave the letters before it of the same
        stage, log and record (or event key) out of what is pending."""
        letter: dict[str, Any] = {"stage": stage, "resolves": True, "record": record, "logId": log_id,
                                  "source": None, "reason": reason, "raw": ""}
        if event_key is not None:
            letter["eventKey"] = event_key
        self._send(letter)

    def _send(self, letter: dict[str, Any]) -> None:
        letter["time"] = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        self._producer.send(self._topic, key=str(letter["stage"]).encode(), value=orjson.dumps(letter))

    def flush(self) -> None:
        """Wait until every letter published so far is acknowledged."""
        self._producer.flush()

    def close(self, *, wait: bool = True) -> None:
        """Close; ``wait``: first wait (at most ACK_STALL_SECONDS) for the letters' acknowledgement."""
        try:
            if wait:
                self._producer.flush(timeout=ACK_STALL_SECONDS)
        except KafkaTimeoutError:
            wait = False
            raise BrokerError(f"the Kafka broker acknowledged no dead letter for {ACK_STALL_SECONDS:.0f} s "
                              "(is it running? `usl status` says)") from None
        finally:
            if self._own and wait:
                self._producer.close()
            elif self._own:
                close_now(self._producer)
