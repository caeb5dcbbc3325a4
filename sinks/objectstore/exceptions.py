"""Errors of the object-store layer.

::

    sinks.exceptions.SinkError
    └── ObjectStoreError                 the object store refused or lost something
        ├── ObjectStoreUnavailableError  the store (or the commit topic) cannot be reached now; retry later
        ├── NotPublishedError            no commit record names this generation, or it was collected
        └── CacheFullError               the local cache cannot hold a generation within its byte bound
"""

from __future__ import annotations

from sinks.exceptions import SinkError

__all__ = ["CacheFullError", "NotPublishedError", "ObjectStoreError", "ObjectStoreUnavailableError"]


class ObjectStoreError(SinkError):
    """The object store refused or lost something."""


class ObjectStoreUnavailableError(ObjectStoreError):
    """The object store (or the commit topic) cannot be reached now; a later retry may succeed."""


class NotPublishedError(ObjectStoreError):
    """No commit record names this generation, or its objects were collected."""


class CacheFullError(ObjectStoreError):
    """The local cache cannot hold a generation within its byte bound (everything else is pinned)."""
