"""What streams.kafka_compat relies on in kafka-python still holds, so an upgrade fails here,
loudly: the name it resets, what that name does to the first metadata request, and where each
client keeps its cluster metadata."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.cluster import ClusterMetadata

from streams.kafka_compat import cluster_of, skip_startup_backoff


def test_the_bootstrap_stamp_is_what_holds_the_first_request_back() -> None:
    cluster = ClusterMetadata()
    cluster._last_refresh_ms = time.monotonic() * 1000  # what the bootstrap's metadata response does
    assert cluster.need_update and cluster.ttl() > 0  # held back by retry_backoff_ms, nothing failed
    cluster._last_refresh_ms = 0  # skip_startup_backoff
    assert cluster.ttl() == 0


@pytest.mark.kafka
def test_each_client_goes_for_its_first_metadata_at_once(settings) -> None:
    clients = [KafkaProducer(bootstrap_servers=settings.bootstrap_servers),
               KafkaConsumer(bootstrap_servers=settings.bootstrap_servers)]
    try:
        for client in clients:
            cluster = cluster_of(client)
            assert isinstance(cluster, ClusterMetadata)
            assert cluster._last_refresh_ms > 0, "the bootstrap no longer stamps it: the patch may go"
            skip_startup_backoff(client)
            cluster._need_update = True  # as request_update() marks it, without starting a request
            assert cluster.ttl() == 0
    finally:
        for client in clients:
            client.close()
