"""Watermarks on the compacted ``usl.watermarks`` topic, keyed ``LOG/KIND``
(``LOG/KIND/shard-I-of-N`` for a sink shard).

A sink publishes one only after a generation is committed, so a watermark never points at a
generation a reader cannot open, and never goes backwards (a publisher refuses to).
The planner reads the topic from the beginning at start-up and then follows it live.
Readers see one watermark per log and kind: the shards of a sharded kind are folded into one
whose ``builtThroughSeq`` is the minimum over them (:func:`sinks.shards.fold_shards`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
from kafka import KafkaProducer

import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
from sinks.shards import fold_shards
from streams.l1 import TopicTail, follow_topic, read_topic_to_end
from streams.settings import Settings
from streams.topics import Topics

__all__ = ["WatermarkFollower", "WatermarkPublisher", "WatermarkReader", "read_watermarks", "watermark_key"]


def watermark_key(log_id: str, kind: str, shard: str | None = None) -> str:
    return f"{log_id}/{kind}/{shard}" if shard else f"{log_id}/{kind}"


class WatermarkPublisher:
    """Publishes a sink's watermark after each committed generation."""

    def __init__(self, bootstrap: str, settings: Settings) -> None:
        self._topic = Topics.from_settings(settings).watermarks
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                       client_id="usl-watermarks")
        self._last: dict[str, tuple[str, int, int]] = {}

    def publish(self, watermark: dict[str, Any]) -> None:
        key = watermark_key(watermark["logId"], watermark["kind"], watermark.get("shard"))
        line = str(watermark.get("line", "live"))
        position = (line, int(watermark["generationId"]), int(watermark["builtThroughSeq"]))
        previous = self._last.get(key)
        # Within one generation line, watermarks only move forward.
        if previous and previous[0] == line and (position[1], position[2]) < (previous[1], previous[2]):
            return
        self._producer.send(self._topic, key=key.encode(), value=orjson.dumps(watermark)).get(timeout=30)
        self._last[key] = position

    def delete(self, log_id: str, kind: str) -> None:
        """Tombstone: the index is gone (used when indexes are deleted)."""
        self._producer.send(self._topic, key=watermark_key(log_id, kind).encode(), value=None).get(timeout=30)
        self._last.pop(watermark_key(log_id, kind), None)

    def close(self) -> None:
        self._producer.flush()
        self._producer.close()


def read_watermarks(bootstrap: str, settings: Settings) -> dict[tuple[str, str], dict[str, Any]]:
    """The latest watermark per (log, kind), read from the beginning of the compacted topic
    (a sharded kind's folded over its shards)."""
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for record in read_topic_to_end(bootstrap, Topics.from_settings(settings).watermarks):
        _apply(table, record.key, record.value)
    return fold_shards(table)


class WatermarkReader:
    """:func:`read_watermarks` read on: each read applies the records written since the last to
    the table the earlier reads built (the topic is compacted, so that table is what a read from
    its start gives), through one kept consumer (:class:`streams.l1.TopicTail`). One thread at a
    time: the owner serialises its reads."""

    def __init__(self, bootstrap: str, settings: Settings) -> None:
        self._tail = TopicTail(bootstrap, Topics.from_settings(settings).watermarks)
        self._table: dict[tuple[str, str], dict[str, Any]] = {}

    def read(self, timeout_seconds: float = 30.0) -> dict[tuple[str, str], dict[str, Any]]:
        restarted, records, _ = self._tail.read(timeout_seconds)
        if restarted:
            self._table = {}
        for record in records:
            _apply(self._table, record.key, record.value)
        return fold_shards({key: dict(value) for key, value in self._table.items()})

    def close(self) -> None:
        self._tail.close()


def _apply(table: dict[tuple[str, str], dict[str, Any]], key: bytes | None, value: bytes | None) -> None:
    if key is None:
        return
    log_id, _, kind = key.decode().partition("/")
    if value is None:
        table.pop((log_id, kind), None)
        return
    try:
        table[(log_id, kind)] = orjson.loads(value)
    except orjson.JSONDecodeError:
        return


class WatermarkFollower:
    """Keeps a live copy of every watermark: reads from the beginning, then follows."""

    def __init__(self, bootstrap: str, settings: Settings) -> None:
        self._bootstrap = bootstrap
        self._topic = Topics.from_settings(settings).watermarks
        self._table: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watermark-follower", daemon=True)

    def start(self, *, timeout_seconds: float = 30.0) -> WatermarkFollower:
        self._thread.start()
        self._ready.wait(timeout_seconds)
        return self

    def snapshot(self) -> dict[tuple[str, str], dict[str, Any]]:
        with self._lock:
            return fold_shards(self._table)

    def wait_for_change(self, timeout_seconds: float) -> None:
        with self._changed:
            self._changed.wait(timeout_seconds)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except Exception:  # broker restarts must not kill the planner; retry
                time.sleep(1.0)

    def _follow(self) -> None:
        for records, caught_up in follow_topic(self._bootstrap, self._topic, client_id="usl-watermark-follower",
                                               stopped=self._stop.is_set):
            if records:
                with self._changed:
                    for record in records:
                        _apply(self._table, record.key, record.value)
                    self._changed.notify_all()
            if caught_up and not self._ready.is_set():
                self._ready.set()
