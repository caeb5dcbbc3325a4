"""The sink's switch to the object store: ``USL_OBJECT_STORE`` set means publish every commit."""

from __future__ import annotations

from collections.abc import Callable

from sinks.generations import Manifest
from sinks.objectstore.commits import CommitLog
from sinks.objectstore.publish import GenerationPublisher
from sinks.objectstore.store import ObjectStore
from streams.metrics import (
    usl_objectstore_backlog_generations,
    usl_objectstore_publish_failures_total,
)
from streams.settings import Settings

__all__ = ["object_store_hook"]


def object_store_hook(settings: Settings, bootstrap: str, kind: str, *,
                      shard: str | None = None) -> tuple[Callable[[Manifest], None] | None, Callable[[], None]]:
    """``(on_commit, close)`` for a sink of ``kind`` (of sink shard ``shard-I-of-N``, if
    given): with ``USL_OBJECT_STORE`` unset (the embedded default), no callback and nothing to
    close; else a background publisher's ``offer`` and its ``close``."""
    # Exported at 0 for every sink, so the dashboard panel has a series with the store off.
    usl_objectstore_backlog_generations.labels(kind=kind).set(0)
    usl_objectstore_publish_failures_total.labels(kind=kind)
    if not settings.object_store:
        return None, lambda: None
    from sinks.runner import index_root

    store = ObjectStore.from_settings(settings)
    commits = CommitLog(bootstrap, settings)
    commits.ensure_topic()
    publisher = GenerationPublisher(store, commits, index_root(settings), kind, shard=shard)
    publisher.offer_current()
    return publisher.offer, publisher.close
