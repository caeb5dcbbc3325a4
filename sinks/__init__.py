"""Index sinks: writers of immutable generations, their manifests and watermarks."""

from __future__ import annotations

from typing import Any

__all__ = ["GenerationStore", "Manifest", "SinkError"]


def __getattr__(name: str) -> Any:
    # Lazy: `usl search` marks a hit's words with sinks.text.base's folds and must not pay for
    # the generation store (streams.__init__ does the same for the schema validator).
    if name in ("GenerationStore", "Manifest"):
        from sinks import generations

        return getattr(generations, name)
    if name == "SinkError":
        from sinks.exceptions import SinkError

        return SinkError
    raise AttributeError(f"module 'sinks' has no attribute {name!r}")
