"""Redaction policy v1: pure functions that remove secrets and personal data before indexing.

Nothing here knows about Kafka or faust: the redaction agent, the rebuild path and the
planner's L1 tail scan call the same :func:`redact_event`, so a replay under the same policy
(same :func:`policy_hash`) produces byte-identical records. See ``docs/redaction.md``.
"""

from __future__ import annotations

from streams.redaction.events import RedactedEvent, redact_event
from streams.redaction.policy import DEFAULT_POLICY, POLICY_VERSION, RedactionPolicy, policy_hash
from streams.redaction.rules import rule_names
from streams.redaction.text import redact_text

__all__ = [
    "DEFAULT_POLICY",
    "POLICY_VERSION",
    "RedactedEvent",
    "RedactionPolicy",
    "policy_hash",
    "redact_event",
    "redact_text",
    "rule_names",
]
