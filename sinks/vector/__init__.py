"""The vector sink's building blocks: embedders (text → vectors) and faiss segments.

``get_embedder`` turns ``USL_EMBEDDER`` into an :class:`Embedder` whose ``identity`` goes into
the manifest; ``write_segment`` / ``merge_segments`` write immutable segment files and
``VectorReader`` searches a generation's segments. See ``docs/vector.md``.
"""

from __future__ import annotations

from sinks.vector.embedders import Embedder, HashEmbedder, get_embedder
from sinks.vector.errors import EmbedderError, VectorIndexError
from sinks.vector.faiss_index import (
    VectorHit,
    VectorReader,
    cosine,
    merge_segments,
    segment_files,
    vectors_for,
    write_segment,
)

__all__ = [
    "Embedder",
    "EmbedderError",
    "HashEmbedder",
    "VectorHit",
    "VectorIndexError",
    "VectorReader",
    "cosine",
    "get_embedder",
    "merge_segments",
    "segment_files",
    "vectors_for",
    "write_segment",
]
