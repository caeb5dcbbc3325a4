"""Object storage for index generations: publish, commit point, fetch into a bounded cache,
pins and GC (docs/architecture.md, "Object storage").

- :mod:`sinks.objectstore.store`: blobs, remote manifests and pins in an S3-compatible bucket.
- :mod:`sinks.objectstore.commits`: the live pointers, on a compacted Kafka topic.
- :mod:`sinks.objectstore.publish`: one publish, and a sink's background publisher.
- :mod:`sinks.objectstore.cache`: a planner replica's local cache, bounded in bytes.
"""

from __future__ import annotations

from sinks.objectstore.cache import GenerationCache
from sinks.objectstore.commits import CommitLog
from sinks.objectstore.exceptions import (
    CacheFullError,
    NotPublishedError,
    ObjectStoreError,
    ObjectStoreUnavailableError,
)
from sinks.objectstore.hook import object_store_hook
from sinks.objectstore.publish import GenerationPublisher, publish_generation
from sinks.objectstore.store import ObjectStore, RemoteGeneration, StoreLocation

__all__ = [
    "CacheFullError",
    "CommitLog",
    "GenerationCache",
    "GenerationPublisher",
    "NotPublishedError",
    "ObjectStore",
    "ObjectStoreError",
    "ObjectStoreUnavailableError",
    "RemoteGeneration",
    "StoreLocation",
    "object_store_hook",
    "publish_generation",
]
