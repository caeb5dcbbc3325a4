"""Errors of the vector sink: embedders and faiss segments.

::

    USLError
    └── SinkError                   (sinks.exceptions, once that module exists)
        ├── EmbedderError           an embedder cannot be loaded or an embedding call failed
        └── VectorIndexError        a vector segment cannot be written, read or searched
"""

from __future__ import annotations

from streams.exceptions import USLError

try:
    from sinks.exceptions import SinkError as _SinkBase
except ImportError:  # sinks/exceptions.py is written in parallel; fall back to the root.
    _SinkBase = USLError  # type: ignore[misc,assignment]

__all__ = ["EmbedderError", "VectorIndexError"]


class EmbedderError(_SinkBase):  # type: ignore[valid-type,misc]
    """An embedder cannot be loaded, or an embedding call failed.

    ``status`` is the HTTP status of a failed remote call (None otherwise). Messages never
    contain an API key.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class VectorIndexError(_SinkBase):  # type: ignore[valid-type,misc]
    """A vector segment cannot be written, read or searched (missing, corrupt, mismatched)."""
