"""The Kafka side of USL Search: ASP v1 events, the L1 log, the faust agents, and the pure
redaction and chunking code they (and the rebuild and tail-scan paths) share."""

from __future__ import annotations

from typing import Any

__all__ = ["ASP_VERSION", "Settings", "USLError", "validate_event"]


def __getattr__(name: str) -> Any:
    # Lazy: `usl search` through the API imports streams.exceptions and must not pay for the
    # schema validator behind streams.asp.
    if name in ("ASP_VERSION", "validate_event"):
        from streams import asp

        return getattr(asp, name)
    if name == "USLError":
        from streams.exceptions import USLError

        return USLError
    if name == "Settings":
        from streams.settings import Settings

        return Settings
    raise AttributeError(f"module 'streams' has no attribute {name!r}")
