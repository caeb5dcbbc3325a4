"""The text sink's writer: SearchChunkV1 chunks into a full-text generation (tantivy or whoosh).

A new generation starts as hard links of the previous one (engine files that the engine
rewrites in place are copied), then the batch is upserted by chunkId and committed by the
engine. The previous generation's files are never touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sinks.generations import clone_into
from sinks.text import get_engine
from sinks.text.base import ANALYZER

__all__ = ["TextWriter"]


class TextWriter:
    """IndexWriter for kind ``text``."""

    kind = "text"
    sources: tuple[str, ...] = ("chunks",)

    def __init__(self, engine: str = "tantivy") -> None:
        self.engine = get_engine(engine)

    def describe(self) -> dict[str, Any]:
        # Schema 2: the analyzer that makes every CJK character a term (sinks.text.base);
        # tantivy's schema 3 adds the chunk-key fast fields (sinks.text.tantivy_engine).
        return {"schemaVersion": self.engine.schema_version, "engine": self.engine.name,
                "analyzer": ANALYZER}

    def write(self, staging: Path, previous: Path | None, records: Sequence[dict[str, Any]]) -> list[str]:
        if previous is None:
            self.engine.create(staging)
        else:
            clone_into(previous, staging, copy_names=self.engine.copy_names)
        if records:
            self.engine.add(staging, list(records))
        return []
