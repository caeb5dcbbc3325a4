"""The Kafka side of USL Search: ASP v1 events, the L1 log, the faust agents, and the pure
redaction and chunking code they (and the rebuild and tail-scan paths) share."""

from __future__ import annotations

from streams.asp import ASP_VERSION, validate_event
from streams.exceptions import USLError
from streams.settings import Settings

__all__ = ["ASP_VERSION", "Settings", "USLError", "validate_event"]
