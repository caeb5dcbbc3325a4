"""The one spelling of every state table and key the stages use.

Table names are the faust table names (their changelog topics are
``{app id}-{table}-changelog``, :func:`streams.topics.changelog_topic`). Keys:

- ``@offset/{partition}``: the offset of the last record a stage applied from a source
  partition, in ``log-clocks`` (L1 partitions) and ``chunker-progress`` (redacted partitions).
  A log id never starts with ``@`` (the ASP schema), so it cannot collide with a log's key.
- ``{logId}``: the log's clock, in ``log-clocks``.
- ``{logId}/{digest of eventId}`` and ``{logId}/{digest of sessionId}``: first-seq and
  ownership state. The ids are raw L1 values and a producer may put a secret in one; table keys
  reach the changelog topics, which must hold no secret, so only a digest is kept (the ids only
  ever need comparing).
- ``{logId}/{sessionId}``: a chunker session, and the session's memory of the secrets it
  removed (:mod:`streams.redaction.memory`: prints, not values), whose id is already redacted.
- ``{partition}/{logId}``: a progress record of the chunks partition.
"""

from __future__ import annotations

import hashlib

__all__ = [
    "CHUNKER_PROGRESS",
    "CHUNKER_SESSIONS",
    "EVENT_FIRST_SEQ",
    "LOG_CLOCKS",
    "SESSION_OWNERS",
    "SESSION_SECRETS",
    "digest_key",
    "is_offset_key",
    "offset_key",
    "progress_key",
    "session_key",
]

LOG_CLOCKS = "log-clocks"
EVENT_FIRST_SEQ = "event-first-seq"
SESSION_OWNERS = "session-owners"
SESSION_SECRETS = "session-secrets"
CHUNKER_SESSIONS = "chunker-sessions"
CHUNKER_PROGRESS = "chunker-progress"

_OFFSET = "@offset/"


def offset_key(partition: int) -> str:
    """The key of the last applied offset of a source partition."""
    return f"{_OFFSET}{partition}"


def is_offset_key(key: object) -> bool:
    return isinstance(key, str) and key.startswith("@")


def digest_key(log_id: str, identifier: str) -> str:
    """The key of a raw L1 id (eventId, sessionId) of a log: the id is kept only as a digest."""
    digest = hashlib.blake2b(identifier.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"{log_id}/{digest}"


def session_key(log_id: str, session_id: str) -> str:
    """The key of a chunker session (its redacted id)."""
    return f"{log_id}/{session_id}"


def progress_key(partition: int, log_id: str) -> str:
    """The key of a log's progress on a chunks partition."""
    return f"{partition}/{log_id}"
