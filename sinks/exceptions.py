"""Errors raised by the sinks: generations, engines and their queries.

::

    USLError                              (streams.exceptions)
    └── SinkError                         anything a sink or an index reader fails at
        ├── GenerationError               a generation cannot be begun, committed, read, pinned or collected
        │   ├── GenerationLockedError     another writer holds this generation line
        │   └── ManifestVerificationError a generation's files do not match its manifest
        ├── EngineError                   a full-text engine cannot create, write or read an index
        │   └── UnknownEngineError        no engine has the requested name
        └── EmptyQueryError               an index reader was asked to search for nothing

A query the *user* got wrong is :class:`planner.exceptions.QueryError` (400): the planner checks
every request before an index sees it, so ``EmptyQueryError`` reaching a caller is a bug of the
caller, reported like any other sink failure.
"""

from __future__ import annotations

from streams.exceptions import USLError

__all__ = [
    "EmptyQueryError",
    "EngineError",
    "GenerationError",
    "GenerationLockedError",
    "ManifestVerificationError",
    "SinkError",
    "UnknownEngineError",
]


class SinkError(USLError):
    """Anything a sink or an index reader fails at."""


class GenerationError(SinkError):
    """A generation cannot be begun, committed, read, pinned or collected."""


class GenerationLockedError(GenerationError):
    """Another writer holds this generation line."""


class ManifestVerificationError(GenerationError):
    """A generation's files do not match its manifest (missing, resized or changed)."""


class EngineError(SinkError):
    """A full-text engine cannot create, write or read an index."""


class UnknownEngineError(EngineError):
    """No full-text engine has the requested name."""


class EmptyQueryError(SinkError):
    """An index reader was asked to search for nothing (an empty or blank query)."""
