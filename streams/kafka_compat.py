"""The one patch of kafka-python's internals, why, and the versions it was tested with.

``usl ingest`` makes its Kafka clients while it imports, and the command waits for their first
topic metadata (issue #16). kafka-python 3 (tested: 3.0.12) holds every client's first metadata
request back by ``retry_backoff_ms`` (100 ms) after its bootstrap: the bootstrap's own metadata
response stamps ``ClusterMetadata._last_refresh_ms``, and ``ClusterMetadata.ttl()`` waits out the
retry backoff from there, although nothing failed. ``KafkaConnectionManager`` builds that
``ClusterMetadata`` without the client's ``retry_backoff_ms``, so the setting cannot shorten it.
The Java client removed this start-up delay in KAFKA-4024 ("Fix metadata update to not apply
backoff until it experiences failure", apache/kafka#1707).

Patched names (``tests/streams/test_kafka_compat.py`` fails when an upgrade renames one):

- ``ClusterMetadata._last_refresh_ms`` (``kafka/cluster.py``): set back to 0 once, right after
  the client's bootstrap, so the first request goes out at once; a failed refresh stamps it
  again and the backoff applies as before.
- ``KafkaProducer._metadata`` and ``KafkaConsumer._manager.cluster``: where a client keeps it.
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaConsumer, KafkaProducer

__all__ = ["cluster_of", "skip_startup_backoff"]


def cluster_of(client: KafkaProducer | KafkaConsumer) -> Any:
    """The ``ClusterMetadata`` of ``client``."""
    if isinstance(client, KafkaProducer):
        return client._metadata
    return client._manager.cluster


def skip_startup_backoff(client: KafkaProducer | KafkaConsumer) -> None:
    """Let ``client``'s first metadata request after its bootstrap go out without waiting
    ``retry_backoff_ms`` (see the module docstring); call it before that first request."""
    cluster_of(client)._last_refresh_ms = 0
