"""Index sinks: writers of immutable generations, their manifests and watermarks."""

from __future__ import annotations

from sinks.exceptions import SinkError
from sinks.generations import GenerationStore, Manifest

__all__ = ["GenerationStore", "Manifest", "SinkError"]
