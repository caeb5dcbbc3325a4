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

Within a line a publisher never moves the pointer back (:meth:`CommitLog.commit` refuses an
older generation than the one live), as the watermark publisher does.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

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
        table: dict[str, dict[str, Any]] = {}
        try:
            for record in read_topic_to_end(self.bootstrap, self.topic):
                if record.key is None:
                    continue
                key = record.key.decode()
                if record.value is None:
                    table.pop(key, None)
                    continue
                try:
                    table[key] = orjson.loads(record.value)
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
        try:
            if self._producer is None:
                self._producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                               enable_idempotence=True, client_id="usl-objectstore-commits")
            self._producer.send(self.topic, key=remote.commit_key.encode(), value=orjson.dumps(record)).get(timeout=30)
        except KafkaError as exc:
            raise ObjectStoreUnavailableError(f"cannot write the commit record of {remote.commit_key}: {exc}") from exc
        return True

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None
