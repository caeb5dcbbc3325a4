"""What streams.kafka_compat relies on in kafka-python still holds, so an upgrade fails here,
loudly: the name it resets, what that name does to the first metadata request, where each
client keeps its cluster metadata, and that the response registry keeps the classes it decodes
with alive."""

from __future__ import annotations

import gc
import time
from types import SimpleNamespace

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.cluster import ClusterMetadata
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.fetch import FetchResponse

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


def test_a_response_version_made_by_two_threads_at_once_still_decodes() -> None:
    """Two client threads ask for the same new response version at once (five sink consumers'
    first fetches): each makes a versioned class, which registers itself; the message's cache
    keeps one and the registry the other. Without streams.kafka_compat the registry's weak proxy
    then points at a freed class and every later fetch response fails to decode."""
    version = FetchResponse.max_version
    FetchResponse._VERSIONS.pop(version, None)
    first = FetchResponse[version]  # thread A's class
    FetchResponse._VERSIONS.pop(version)
    FetchResponse[version]  # thread B's: made and registered after A's ...
    FetchResponse._VERSIONS[version] = first  # ... while A's lands in the cache last
    gc.collect()
    header = SimpleNamespace(request_api_key=FetchResponse.API_KEY, request_api_version=version)
    assert ResponseClassRegistry.get_response_class(header) is first


def test_a_response_class_defined_once_the_registry_is_patched_is_kept() -> None:
    """A response class defined after streams.kafka_compat patched the registry (a kafka-python
    module imported later, a class of an upgrade) registers itself from ``__init_subclass__``,
    before its metaclass gives it a version: it is defined, and the registry keeps it strongly."""
    registry = ResponseClassRegistry._response_class_registry
    kept = registry[FetchResponse.API_KEY]
    try:
        defined = type("FetchResponse", (ApiMessage,), {})  # its name picks kafka-python's JSON schema
        assert registry[FetchResponse.API_KEY] is defined
        header = SimpleNamespace(request_api_key=FetchResponse.API_KEY, request_api_version=4)
        assert ResponseClassRegistry.get_response_class(header) is defined[4]
    finally:
        registry[FetchResponse.API_KEY] = kept
