"""The text sink's writer: SearchChunkV1 chunks into a full-text generation (tantivy or whoosh).

A new generation starts as hard links of the previous one (engine files that the engine
rewrites in place are copied), then the batch is upserted by chunkId and committed by the
engine. The previous generation's files are never touched.

In the sink loop (``live`` set by :class:`sinks.runner.SinkRunner`) a tantivy index is instead
kept open per generation line, in the line's ``.live`` directory (the same filesystem as its
generations, so staging is hard links), and each generation is staged from its committed state
(:class:`sinks.text.tantivy_engine.LiveIndex`): merges run beside the commits instead of inside
them. A catch-up run (rebuild, tests) writes the plain way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sinks.generations import clone_into
from sinks.text import get_engine
from sinks.text.base import ANALYZER
from sinks.text.tantivy_engine import LiveIndex, TantivyEngine, index_opstamp

__all__ = ["LIVE_DIR", "TextWriter"]

# In the generation line's directory: the store's sweeps leave a dot name without ".tmp-" alone.
LIVE_DIR = ".live"


class TextWriter:
    """IndexWriter for kind ``text``."""

    kind = "text"
    sources: tuple[str, ...] = ("chunks",)

    # Open live indexes (one writer heap each); the least recently written one is closed first.
    max_live = 4

    def __init__(self, engine: str = "tantivy") -> None:
        self.engine = get_engine(engine)
        self.live = False
        self._live: OrderedDict[Path, LiveIndex] = OrderedDict()

    def describe(self) -> dict[str, Any]:
        # Schema 2: the analyzer that makes every CJK character a term (sinks.text.base);
        # tantivy's schema 3 adds the chunk-key fast fields (sinks.text.tantivy_engine).
        return {"schemaVersion": self.engine.schema_version, "engine": self.engine.name,
                "analyzer": ANALYZER}

    def write(self, staging: Path, previous: Path | None, records: Sequence[dict[str, Any]]) -> list[str]:
        if self.live and isinstance(self.engine, TantivyEngine):
            self._write_live(Path(staging), previous, records)
            return []
        if previous is None:
            self.engine.create(staging)
        else:
            clone_into(previous, staging, copy_names=self.engine.copy_names)
        if records:
            self.engine.add(staging, list(records))
        return []

    def _write_live(self, staging: Path, previous: Path | None, records: Sequence[dict[str, Any]]) -> None:
        assert isinstance(self.engine, TantivyEngine)
        line = staging.parent.resolve()  # one live index per generation line (log, shard, line)
        live = self._live.pop(line, None)
        if live is None or live.based_on != (None if previous is None else index_opstamp(previous)):
            if live is not None:  # its last staged generation was not committed: start again
                live.close()
            live = self.engine.live(line / LIVE_DIR, previous)
        self._live[line] = live
        while len(self._live) > self.max_live:
            self._live.popitem(last=False)[1].close()
        if records:
            live.add(list(records))
        live.stage(staging)

    def close_live(self) -> None:
        """Close every live index (waiting for its merges); later writes go the plain way."""
        while self._live:
            self._live.popitem(last=False)[1].close()
        self.live = False
