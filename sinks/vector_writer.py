"""The vector sink's writer: chunk texts → embeddings → immutable faiss segments.

Each batch becomes one new segment (exact index while small, HNSW past
``USL_VECTOR_EXACT_MAX``). When a generation would hold more than ``MAX_SEGMENTS`` segments,
the small ones are merged into one larger segment in the same new generation; the previous
generation keeps its own files, so pinned readers are unaffected.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from sinks.generations import clone_into
from sinks.vector import get_embedder
from sinks.vector.faiss_index import merge_segments, segment_files, write_segment
from streams.metrics import usl_embed_seconds, usl_generation_merges_total
from streams.settings import Settings

__all__ = ["MAX_SEGMENTS", "VectorWriter", "segment_names"]

MAX_SEGMENTS = 8
_BATCH = 128


def segment_names(gen_dir: Path) -> list[str]:
    """Names of the complete faiss segments in a generation dir, oldest first."""
    names = [p.name[: -len(".ids.json")] for p in Path(gen_dir).glob("*.ids.json")]
    return sorted(names)


class VectorWriter:
    """IndexWriter for kind ``vector``."""

    kind = "vector"
    sources: tuple[str, ...] = ("chunks",)

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.embedder = get_embedder(settings.embedder, url=settings.embeddings_url,
                                     api_key=settings.embeddings_api_key,
                                     cache_root=Path(settings.home).resolve() / "models")
        self.exact_max = settings.vector_exact_max

    def describe(self) -> dict[str, Any]:
        return {"schemaVersion": "1", "embedding": dict(self.embedder.identity), "metric": "inner_product"}

    def write(self, staging: Path, previous: Path | None, records: Sequence[dict[str, Any]]) -> list[str]:
        if previous is not None:
            clone_into(previous, staging, copy_names=())
        written: list[str] = []
        if records:
            ids = [r["chunkId"] for r in records]
            texts = [r["text"] for r in records]
            started = time.monotonic()
            vectors = self.embedder.embed(texts)
            usl_embed_seconds.observe(time.monotonic() - started)
            name = f"seg-{staging.name.rsplit('-', 1)[-1]}"
            written += write_segment(staging, name, ids, vectors, exact_max=self.exact_max)
        names = segment_names(staging)
        if len(names) > MAX_SEGMENTS:
            merged = f"merged-{staging.name.rsplit('-', 1)[-1]}"
            written += merge_segments(staging, names, merged, self.exact_max)
            for old in names:
                for file in segment_files(old):
                    (staging / file).unlink(missing_ok=True)
            usl_generation_merges_total.labels(kind=self.kind).inc()
        (staging / "segments.json").unlink(missing_ok=True)
        (staging / "segments.json").write_bytes(orjson.dumps(segment_names(staging)))
        return written
