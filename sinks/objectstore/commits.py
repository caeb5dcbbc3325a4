"""The commit point of published generations: one record per generation line on a compacted
Kafka topic (``<prefix>objectstore.commits``), keyed ``<log>/<kind>/<shard>``.

A record names the remote manifest, the generation id and ``builtThroughSeq``. It is written
only after every object of the generation is uploaded, so a reader that follows the live
pointer always finds a whole generation; a publish that died between objects left no record
and is invisible (its objects are collected after GC's grace period). One Kafka record is
written atomically and, with ``acks=all`` on a compacted topic, the last one per key is the
pointer every reader agrees on. Object stores need not offer conditional puts for this (S3Proxy's
filesystem backend ignores ``If-None-Match``), and on AWS S3 the objects' strong
read-after-write consistency makes a committed manifest readable as soon as its record is.

Within a line a publisher never moves the pointer back for good: :meth:`CommitLog.commit`
refuses a generation older than the live one and, after writing, re-reads the key and writes the
newest record of the line again if a concurrent publisher's newer one was overtaken (a follower
may see the older one for that moment; it is whole all the same).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
from sinks.objectstore.exceptions import ObjectStoreUnavailableError
from sinks.objectstore.store import RemoteGeneration
from streams.exceptions import BrokerError
from streams.l1 import read_topic_to_end
from streams.settings import Settings

__all__ = ["CommitLog", "commits_topic"]


def commits_topic(settings: Settings) -> str:
    return settings.topic("objectstore.commits")


class CommitLog:
    """Writes and reads the live pointers of published generations."""

    def __init__(self, bootstrap: str, settings: Settings) -> None:
        self.bootstrap = bootstrap
        self.settings = settings
        self.topic = commits_topic(settings)
        self._producer: KafkaProducer | None = None

    def ensure_topic(self) -> None:
        """Create the compacted commit topic if it is missing (one partition: one order)."""
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="usl-objectstore-admin")
        try:
            if self.topic not in set(admin.list_topics()):
                config = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0",
                          "min.insync.replicas": str(self.settings.min_insync_replicas)}
                try:
                    admin.create_topics([NewTopic(self.topic, 1, self.settings.replication_factor,
                                                  topic_configs=config)])
                except TopicAlreadyExistsError:
                    pass
        finally:
            admin.close()

    def live(self) -> dict[str, dict[str, Any]]:
        """commit key → the last commit record (tombstones remove a key)."""
        return {key: records[-1] for key, records in self._history().items() if records}

    def _history(self) -> dict[str, list[dict[str, Any]]]:
        """commit key → its records still on the topic, oldest first (a tombstone clears)."""
        table: dict[str, list[dict[str, Any]]] = {}
        try:
            for record in read_topic_to_end(self.bootstrap, self.topic):
                if record.key is None:
                    continue
                key = record.key.decode()
                if record.value is None:
                    table.pop(key, None)
                    continue
                try:
                    table.setdefault(key, []).append(orjson.loads(record.value))
                except orjson.JSONDecodeError:
                    continue
        except (KafkaError, BrokerError) as exc:
            raise ObjectStoreUnavailableError(f"cannot read the commit topic {self.topic}: {exc}") from exc
        return table

    def live_manifests(self) -> dict[str, str]:
        """commit key → manifest key of its live generation (what GC must keep)."""
        return {key: str(record["manifestKey"]) for key, record in self.live().items()}

    def commit(self, remote: RemoteGeneration) -> bool:
        """Make ``remote`` the live generation of its key; False (nothing written) if the live
        one is a newer generation of the same line. Call only once every object is uploaded."""
        current = self.live().get(remote.commit_key)
        if current is not None and current.get("line") == remote.line \
                and int(current["generationId"]) > remote.generation_id:
            return False
        record = {
            "key": remote.commit_key, "manifestKey": remote.manifest_key, "line": remote.line,
            "generationId": remote.generation_id, "builtThroughSeq": remote.built_through_seq,
            "bytes": remote.total_bytes, "committedAt": time.time(),
        }
        self._send(remote.commit_key, record)
        self._repair(remote.commit_key, remote.line)
        return True

    def _send(self, key: str, record: dict[str, Any]) -> None:
        try:
            if self._producer is None:
                self._producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                               enable_idempotence=True, client_id="usl-objectstore-commits")
            self._producer.send(self.topic, key=key.encode(), value=orjson.dumps(record)).get(timeout=30)
        except KafkaError as exc:
            raise ObjectStoreUnavailableError(f"cannot write the commit record of {key}: {exc}") from exc

    def _repair(self, key: str, line: str, *, rounds: int = 5) -> None:
        """The check in :meth:`commit` and the write are two steps: a concurrent publisher may
        have committed a newer generation of the line between them, and this record would then
        move the pointer back. Read after the write; while the last record of the key is older
        than one already on the topic, write that newer record again. Whoever writes last
        checks last, so the final record of a line is its newest generation."""
        for _ in range(rounds):
            records = self._history().get(key, [])
            if not records or records[-1].get("line") != line:
                return
            same_line = [r for r in records if r.get("line") == line]
            newest = max(same_line, key=lambda r: int(r["generationId"]))
            if int(records[-1]["generationId"]) >= int(newest["generationId"]):
                return
            self._send(key, newest)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None
