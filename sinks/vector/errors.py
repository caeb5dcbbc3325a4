"""Errors of the vector sink: embedders and faiss segments.

::

    USLError
    └── SinkError                   (sinks.exceptions)
        ├── EmbedderError           an embedder cannot be loaded or an embedding call failed
        └── VectorIndexError        a vector segment cannot be written, read or searched
"""

from __future__ import annotations

from sinks.exceptions import SinkError

__all__ = ["EmbedderError", "VectorIndexError"]


class EmbedderError(SinkError):
    """An embedder cannot be loaded, or an embedding call failed.

    ``status`` is the HTTP status of a failed remote call (None otherwise). Messages never
    contain an API key.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class VectorIndexError(SinkError):
    """A vector segment cannot be written, read or searched (missing, corrupt, mismatched)."""
