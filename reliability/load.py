"""What runs against the stack while faults land: the ingest, the querier, the watermark watch.

Each is a thread that keeps going through every fault (a broker restart included) and
records what it saw; :mod:`reliability.suite` reads and checks the records.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
from kafka import KafkaConsumer, TopicPartition

import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
from sinks.exceptions import GenerationError
from sinks.generations import FileDigests, GenerationStore
from sinks.shards import fold_shards
from streams.l1 import L1Producer, L1Reader
from streams.settings import Settings
from streams.testing import interleave, session_events
from streams.topics import Topics

__all__ = ["Ingest", "Querier", "WatermarkWatch", "l1_event_counts"]

_QUERIES = ("deploy refund", "kafka broker timeout", "permission denied", "parquet schema cursor",
            "tantivy index", "watermark generation manifest", "retry cache", "pytest rounding")


def l1_event_counts(settings: Settings, log_id: str = "default") -> Counter[str]:
    """eventId → how many times it is in the log (each must be exactly once)."""
    reader = L1Reader(settings.bootstrap_servers or "", settings)
    try:
        return Counter(str(event.get("eventId")) for _seq, event in reader.read(log_id, timeout_seconds=300))
    finally:
        reader.close()


class Ingest(threading.Thread):
    """Appends batches of whole generated sessions at a steady pace, until stopped.

    Pausing happens between batches only, so every appended session is complete (its turns
    ended) and the indexes can catch up with the L1 head. A failed append is reconciled
    against L1 before it is retried, so no event is appended twice."""

    def __init__(self, settings: Settings, *, seed: int, sessions_per_batch: int = 3,
                 pause_seconds: float = 1.0, max_batches: int | None = None) -> None:
        super().__init__(daemon=True, name="ingest")
        self.settings = settings
        self.rng = random.Random(seed)
        self.seed = seed
        self.sessions_per_batch = sessions_per_batch
        self.pause_seconds = pause_seconds
        self.max_batches = max_batches
        self.appended: list[str] = []
        self.errors: list[str] = []
        self.batches = 0
        self._halt = threading.Event()
        self._run = threading.Event()
        self._run.set()
        self._idle = threading.Event()
        self._lock = threading.Lock()
        self._extra: list[list[dict[str, Any]]] = []
        self._clock = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)

    def add(self, events: list[dict[str, Any]]) -> None:
        """Append these events with the next batch (e.g. a probe session)."""
        with self._lock:
            self._extra.append(events)

    def pause(self, timeout: float = 300.0) -> None:
        """Stop after the batch in flight; returns once nothing is being appended."""
        self._run.clear()
        if self.is_alive() and not self._idle.wait(timeout):
            raise TimeoutError("the ingest did not pause")

    def resume(self) -> None:
        self._idle.clear()
        self._run.set()

    def stop(self) -> None:
        self._halt.set()
        self._run.set()

    def _batch(self) -> list[dict[str, Any]]:
        n = self.batches
        sessions = [
            session_events(f"rel{self.seed}-b{n}-s{i}", turns=self.rng.randint(1, 3), seed=self.seed,
                           start=self._clock + timedelta(seconds=self.rng.randint(0, 30)),
                           long_output_words=120 if i == 0 and n % 5 == 0 else 0)
            for i in range(self.sessions_per_batch)
        ]
        self._clock += timedelta(minutes=3)
        with self._lock:
            sessions += self._extra
            self._extra = []
        return interleave(*sessions, seed=self.seed + n)

    def run(self) -> None:
        producer: L1Producer | None = None
        while not self._halt.is_set():
            if not self._run.is_set():
                self._idle.set()
                self._run.wait()
                continue
            if self.max_batches is not None and self.batches >= self.max_batches:
                self._idle.set()
                self._halt.wait(0.2)
                continue
            events = self._batch()
            try:
                producer = producer or L1Producer(self.settings.bootstrap_servers or "", self.settings)
                for event in events:
                    producer.append(event)
                producer.flush()
            except Exception as exc:  # the broker is away: reconcile, then append what is missing
                self.errors.append(f"append failed ({exc!r}); reconciled against L1")
                producer = self._drop(producer)
                self._append_missing(events)
            self.appended.extend(e["eventId"] for e in events)
            self.batches += 1
            self._halt.wait(self.pause_seconds)
        self._drop(producer)
        self._idle.set()

    @staticmethod
    def _drop(producer: L1Producer | None) -> None:
        if producer is not None:
            with contextlib.suppress(Exception):
                # Waits for the idempotent producer's own retries to end, so nothing it still
                # holds can land after the reconciliation reads L1.
                producer._producer.close(timeout=180)
        return None

    def _append_missing(self, events: list[dict[str, Any]]) -> None:
        while not self._halt.is_set():
            try:
                present = l1_event_counts(self.settings)
                missing = [e for e in events if e["eventId"] not in present]
                if missing:
                    producer = L1Producer(self.settings.bootstrap_servers or "", self.settings)
                    try:
                        for event in missing:
                            producer.append(event)
                        producer.flush()
                    finally:
                        self._drop(producer)
                return
            except Exception as exc:
                self.errors.append(f"reconcile failed ({exc!r}); retrying")
                self._halt.wait(2.0)


@dataclass
class QueryRecord:
    started: float
    ended: float
    freshness: str
    status: int  # 0: no answer (connection refused, timeout)
    problems: list[str] = field(default_factory=list)
    chunk_ids: list[str] = field(default_factory=list)
    generations: dict[str, tuple[str, int]] = field(default_factory=dict)


class Querier(threading.Thread):
    """Searches the API in a loop and checks each answer at once: no evidence past asOfSeq,
    and every generation it names was committed and (if still on disk) verifies."""

    def __init__(self, settings: Settings, url: str, *, seed: int, index_root: Path) -> None:
        super().__init__(daemon=True, name="querier")
        self.settings = settings
        self.url = url
        self.rng = random.Random(seed)
        self.index_root = index_root
        self.records: list[QueryRecord] = []
        self.corrupted_at: dict[tuple[str, str, int], float] = {}  # (kind, line, gen) -> time
        self._digests = FileDigests()
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._halt.set()

    def mark_corrupted(self, kind: str, line: str, generation_ids: list[int], when: float) -> None:
        """These generations share a damaged file since ``when``: serving one is a violation."""
        with self._lock:
            for generation_id in generation_ids:
                self.corrupted_at[(kind, line, generation_id)] = when

    def run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self._halt.is_set():
                freshness = self.rng.choice(("indexed", "latest"))
                body = {"query": self.rng.choice(_QUERIES), "freshness": freshness, "k": 10,
                        "explain": True}
                started = time.time()
                try:
                    response = client.post(f"{self.url}/v1/search", json=body)
                    status = response.status_code
                    payload = response.json() if status == 200 else None
                except (httpx.HTTPError, ValueError):
                    status, payload = 0, None
                record = QueryRecord(started, time.time(), freshness, status)
                if payload is not None:
                    self._check(payload, record)
                with self._lock:
                    self.records.append(record)
                self._halt.wait(self.rng.uniform(0.1, 0.4))

    def _check(self, payload: dict[str, Any], record: QueryRecord) -> None:
        as_of = int(payload["asOfSeq"])
        for row in payload.get("results") or ():
            if any(int(piece["seq"]) > as_of for piece in row.get("evidence") or ()):
                record.problems.append(f"{row['chunkId']} carries evidence past asOfSeq {as_of}")
            if row.get("origin") != "tail" and row.get("kind", "chunk") == "chunk":
                record.chunk_ids.append(str(row["chunkId"]))
        generations = (payload.get("explain") or {}).get("generations") or {}
        for kind, info in generations.items():
            line, generation_id = str(info.get("line") or "live"), int(info["generationId"])
            record.generations[kind] = (line, generation_id)
            shards = info.get("shards")
            if isinstance(shards, dict) and shards:  # a sharded kind: every shard's generation
                for shard, part in sorted(shards.items()):
                    self._check_generation(record, kind, str(part.get("line") or "live"),
                                           int(part["generationId"]), shard=str(shard))
            else:
                self._check_generation(record, kind, line, generation_id)

    def _check_generation(self, record: QueryRecord, kind: str, line: str, generation_id: int, *,
                          shard: str | None = None) -> None:
        """The generation an answer read was committed and (if still on disk) verifies."""
        store = GenerationStore(self.index_root, "default", kind, line, shard=shard)
        label = kind if shard is None else f"{kind} {shard}"
        try:
            current = store.current_id()
        except (GenerationError, OSError):
            current = None
        if current is not None and generation_id > current:
            record.problems.append(f"{label} generation {generation_id} was served before it "
                                   f"was committed (CURRENT is {current})")
        with self._lock:
            damaged_since = self.corrupted_at.get((kind, line, generation_id))
        if damaged_since is not None and record.started > damaged_since + 0.5:
            record.problems.append(f"{label} generation {generation_id} was served after a "
                                   f"file of it was damaged")
            return
        try:
            store.verify(store.load(generation_id), digests=self._digests)
        except GenerationError as exc:
            # A generation collected since the answer is gone, not bad; one that is still
            # there and fails was half-written or damaged when the planner read it --
            # unless the suite damaged it after the query started.
            with self._lock:
                damaged_later = any(t >= record.started - 0.5 for (k, _l, _g), t
                                    in self.corrupted_at.items() if k == kind)
            if store.generation_dir(generation_id).exists() and not damaged_later:
                record.problems.append(f"{label} generation {generation_id} fails "
                                       f"verification: {exc}")
        except OSError:
            pass


class WatermarkWatch(threading.Thread):
    """Follows the watermark topic from its beginning; records every regression per line
    and keeps the newest watermark per index kind of the ``default`` log.

    Sink shards publish one record each (``LOG/KIND/shard-I-of-N``); ``latest`` holds what
    readers see, the records folded per kind (:func:`sinks.shards.fold_shards`: builtThroughSeq
    the minimum over a complete shard set). Besides each shard's own line, that folded minimum
    of a sharded kind must never go down either."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(daemon=True, name="watermarks")
        self.settings = settings
        self.latest: dict[str, dict[str, Any]] = {}
        self.regressions: list[str] = []
        self.records = 0
        self._last: dict[tuple[str, str], tuple[int, int]] = {}
        self._raw: dict[tuple[str, str], dict[str, Any]] = {}  # (log, KIND[/shard]) → newest record
        self._folded_through: dict[str, int] = {}  # sharded kind → its folded builtThroughSeq
        self._halt = threading.Event()
        self._changed = threading.Condition()

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        topic = Topics.from_settings(self.settings).watermarks
        consumer = KafkaConsumer(bootstrap_servers=self.settings.bootstrap_servers,
                                 enable_auto_commit=False, client_id="usl-fault-watch")
        try:
            parts = None
            while not parts and not self._halt.is_set():
                parts = consumer.partitions_for_topic(topic)
                if not parts:
                    time.sleep(0.5)
            tps = [TopicPartition(topic, p) for p in sorted(parts or ())]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            while not self._halt.is_set():
                for records in consumer.poll(timeout_ms=300).values():
                    for record in records:
                        self._apply(record.key, record.value)
        finally:
            consumer.close()

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None or value is None:
            return
        log_id, _, kind = key.decode().partition("/")
        watermark = orjson.loads(value)
        line = str(watermark.get("line", "live"))
        position = (int(watermark["generationId"]), int(watermark["builtThroughSeq"]))
        before = self._last.get((key.decode(), line))
        if before is not None and (position[0] < before[0] or position[1] < before[1]):
            self.regressions.append(f"{key.decode()} on line {line}: {before} -> {position}")
        self._last[(key.decode(), line)] = position
        with self._changed:
            self.records += 1
            if log_id == "default":
                self._raw[(log_id, kind)] = watermark
                self.latest = {folded_kind: record for (_log, folded_kind), record
                               in fold_shards(self._raw).items()}
                self._check_folded(kind.partition("/")[0])
            self._changed.notify_all()

    def _check_folded(self, kind: str) -> None:
        record = self.latest.get(kind)
        if record is None or not record.get("shards"):
            return
        through = int(record["builtThroughSeq"])
        before = self._folded_through.get(kind)
        if before is not None and through < before:
            self.regressions.append(f"default/{kind} (minimum over its shards): builtThroughSeq {before} -> {through}")
        self._folded_through[kind] = through  # one drop is counted once

    def wait_for(self, seq: int, kinds: tuple[str, ...], timeout: float) -> bool:
        """True once every kind's newest watermark is built through ``seq``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                if all(int((self.latest.get(k) or {}).get("builtThroughSeq", -1)) >= seq for k in kinds):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 1.0))
