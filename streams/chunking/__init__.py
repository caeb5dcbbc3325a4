"""Chunker v1: redacted ASP events -> SearchChunkV1 records (pure Python, no Kafka).

The faust chunking agent (one record at a time, state in a table), the rebuild path and the
planner's L1 tail scan (:func:`chunk_stream`) all run this same code. Rules: ``docs/chunking.md``.
"""

from __future__ import annotations

from streams.chunking.chunker import Chunker, ChunkerConfig
from streams.chunking.render import render_event
from streams.chunking.stream import chunk_stream, make_ticks
from streams.chunking.tokenizer import HFTokenizer, Tokenizer, default_tokenizer

__all__ = [
    "Chunker",
    "ChunkerConfig",
    "HFTokenizer",
    "Tokenizer",
    "chunk_stream",
    "default_tokenizer",
    "make_ticks",
    "render_event",
]
