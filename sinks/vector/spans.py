"""Span vectors: one embedding per event a chunk holds.

A chunk is up to 768 tokens of several events (a user prompt, tool calls, their results, the
answer). Its one vector is the mean of all of them, so a chunk whose opening prompt states the
task but whose tool output fills most of its tokens lies far from a query describing that
task. Each event's text is embedded on its own too, and the chunk ranks by its best event
(docs/planner.md, "Vectors per event"). A chunk of one event needs no span: its span is its
whole text, whose vector is the chunk's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["evidence_texts", "span_vectors"]


def evidence_texts(text: str, evidence: Sequence[Mapping[str, Any]]) -> list[str]:
    """The text of each event a chunk holds (its evidence byte ranges of ``text``), blank ones
    left out; ``[]`` for a chunk of one event (the chunk's own vector stands for it)."""
    if len(evidence) < 2:
        return []
    data = text.encode("utf-8")
    pieces = (data[int(piece["start"]):int(piece["end"])].decode("utf-8", "replace") for piece in evidence)
    return [piece for piece in pieces if piece.strip()]


def span_vectors(embedder: Any, chunks: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
                 dimension: int) -> list[np.ndarray]:
    """Span vectors of each ``(text, evidence)``, embedded in one call: an ``(n, dimension)``
    float32 array per chunk, rows L2-normalised; an event with no word the model knows (a zero
    vector) is left out."""
    texts = [evidence_texts(text, evidence) for text, evidence in chunks]
    flat = [piece for pieces in texts for piece in pieces]
    vectors = np.asarray(embedder.embed(flat), dtype=np.float32).reshape(len(flat), dimension) if flat \
        else np.zeros((0, dimension), dtype=np.float32)
    out: list[np.ndarray] = []
    start = 0
    for pieces in texts:
        block = vectors[start:start + len(pieces)]
        start += len(pieces)
        out.append(np.ascontiguousarray(block[np.any(block != 0, axis=1)]))
    return out
