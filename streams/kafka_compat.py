"""The patches of kafka-python's internals, why, and the versions they were tested with.

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

A producer whose broker is gone cannot be closed without waiting through the public API:
``close(timeout=0)`` first flushes with that timeout, which raises ``KafkaTimeoutError`` while
records are unsent, before it reaches its own force close; and the producer's ``__del__`` then
tries again and prints that error's traceback at exit. :func:`close_now` (``usl ingest`` stopped
by Ctrl-C or by a broker that is gone) does what that close would have done next:

- ``KafkaProducer._sender.force_close()``: stops the sender thread, failing what it held;
- ``KafkaProducer._closed``: set, so ``__del__`` and a later ``close()`` return at once.

Every process that talks to Kafka through kafka-python imports this module, which keeps the
response classes it decodes with alive (:func:`keep_response_classes`). kafka-python 3 finds the
class that decodes a response in ``ResponseClassRegistry``, which holds a *weak* proxy per API
key, and it makes a class per (message, version) the first time one is asked for
(``FetchResponse[17]``). That versioned class registers itself too (``SlotsBuilder.__new__``
drops the ``init=False`` that should stop it), so the registry points at it; when two client
threads ask for the same new version at once, each makes its own, the message's cache keeps
one, and the registry may keep the other: a class nothing holds, which the garbage collector
frees. Every later response of that API key then fails to decode (``ReferenceError:
weakly-referenced object no longer exists``), the request times out, is sent again, fails again:
the client never reads anything. A ``usl sink`` process runs a consumer per index kind, each in
its own thread, so the five raced on their first fetch, and a CI run saw a sink that never
indexed a chunk. Patched name: ``ResponseClassRegistry.register_response_class`` (and its
``_response_class_registry``, repaired once): it now keeps the message's primary class, held
strongly by its module, from which the registry's lookup makes or finds the versioned class
itself.
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError
from kafka.protocol.api_header import ResponseClassRegistry

__all__ = ["close_now", "cluster_of", "keep_response_classes", "skip_startup_backoff"]


def _primary(response_class: Any) -> Any:
    """The message class ``response_class`` (a weak proxy) is a version of, or the class itself
    when it is one, held strongly. Not ``response_class[None]``: a message class registers itself
    from ``__init_subclass__``, before its metaclass gives it the ``_class_version`` that lookup
    reads, so a response class defined once this patch is made (a kafka-python module imported
    later) could not be defined at all."""
    versioned = getattr(response_class, "_class_version", None) is not None
    return response_class.__mro__[1 if versioned else 0]


def keep_response_classes() -> None:
    """Make kafka-python's response registry hold classes that stay alive (see the module
    docstring); once per process, before or after its clients start."""
    registry = ResponseClassRegistry._response_class_registry
    if getattr(ResponseClassRegistry, "_usl_keeps_primaries", False):
        return

    def register_response_class(cls: type, response_class: Any) -> None:
        registry[response_class.API_KEY] = _primary(response_class)

    for key, response_class in list(registry.items()):
        try:
            registry[key] = _primary(response_class)
        except ReferenceError:  # freed already (the race ran before this import): registered again when made
            del registry[key]
    ResponseClassRegistry.register_response_class = classmethod(register_response_class)  # type: ignore[method-assign,assignment]
    ResponseClassRegistry._usl_keeps_primaries = True  # type: ignore[attr-defined]


keep_response_classes()


def cluster_of(client: KafkaProducer | KafkaConsumer) -> Any:
    """The ``ClusterMetadata`` of ``client``."""
    if isinstance(client, KafkaProducer):
        return client._metadata
    return client._manager.cluster


def skip_startup_backoff(client: KafkaProducer | KafkaConsumer) -> None:
    """Let ``client``'s first metadata request after its bootstrap go out without waiting
    ``retry_backoff_ms`` (see the module docstring); call it before that first request."""
    cluster_of(client)._last_refresh_ms = 0


def close_now(producer: KafkaProducer) -> None:
    """Close ``producer`` without waiting for what it has not sent (see the module docstring):
    those records are dropped, and the caller says so."""
    try:
        producer.close(timeout=0)
    except KafkaTimeoutError:
        if producer._sender is not None:
            producer._sender.force_close()
        producer._closed = True
