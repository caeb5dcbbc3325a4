"""The vector sink's writer: chunk texts → embeddings → immutable faiss segments.

Each batch becomes one new segment (exact index while small, HNSW past
``USL_VECTOR_EXACT_MAX``). Segments are merged by size tier, as Lucene's tiered policy does:
when ``MERGE_FACTOR`` segments share a tier (a tier spans a factor of ``MERGE_FACTOR`` in
size), they become one segment of the next tier, in the same new generation; the previous
generation keeps its own files, so pinned readers are unaffected. Merging everything into
one segment instead would rebuild the whole HNSW graph every few batches — quadratic work
that stalls a sink long before a million chunks. A segment past ``MAX_MERGED_BYTES /
MERGE_FACTOR`` takes part in no tier merge: each merge rebuilds its output's HNSW graph from
scratch, so every tier a vector climbs costs a full rebuild of it, and the tier past the cap
(640k vectors in 10 000-chunk batches) was the longest single merge of a 1M build. Segments
past the cap are merged into the largest of them instead, whose HNSW graph is extended with the
others' rows (:func:`sinks.vector.faiss_index.merge_segments`): the merge costs the rows it
adds, and a query searches one large graph (a few ms at 1M) instead of one per 160k chunks
(8 segments, 8.5 ms of HNSW search per query at 1M). ``MAX_SEGMENTS`` still bounds the count
(its rule merges the smallest whatever their size).

In the sink loop the merges run in the background (``background_merges``, set by the runner;
see :mod:`sinks.merger`): ``write`` only adds the batch's segment, unless the segments pile up
past ``HARD_MAX_SEGMENTS`` faster than the merger takes them. Rebuilds merge inline. A background
merge is built by :func:`merge_segments` in a child process at ``MERGE_NICENESS``, so the sink's
commits keep their core and the GIL (``build_merge``).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from sinks.generations import clone_into, link_or_copy
from sinks.text.base import text_digest
from sinks.vector import get_embedder
from sinks.vector.faiss_index import merge_segments, segment_files, write_segment
from sinks.vector.spans import span_vectors
from streams.metrics import usl_embed_seconds, usl_generation_merges_total
from streams.settings import Settings

__all__ = ["HARD_MAX_SEGMENTS", "MAX_MERGED_BYTES", "MAX_SEGMENTS", "MERGE_FACTOR", "MERGE_NICENESS", "VectorWriter", "merge_plan",
           "segment_names"]

MERGE_FACTOR = 4
# A tier spans MERGE_FACTOR in vector bytes, starting at this size (about 250 chunks of 256
# dimensions), so the number of segments grows with the log of the index size.
_TIER_BASE_BYTES = 256 * 1024
# No tier merge produces a segment above this many vector bytes: its inputs are at most a
# MERGE_FACTOR-th of it each. A turn chunk stores three 256-d vectors (itself, two spans), so
# segments stop at 160k such chunks (480 MB) when batches hold 10 000.
MAX_MERGED_BYTES = 1024 * 1024 * 1024
# Past this many segments the smallest are merged whatever their tiers (a bound for queries,
# which search every segment).
MAX_SEGMENTS = 24
# With merges in the background, past this many segments write() merges inline again: a
# bound on what a query searches when the merger falls behind.
HARD_MAX_SEGMENTS = 3 * MAX_SEGMENTS
_BATCH = 128
# A background merge is built in a child process at this niceness (build_merge).
MERGE_NICENESS = 10


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
        self.background_merges = False

    def describe(self) -> dict[str, Any]:
        # 2: segments hold span vectors (sinks.vector.spans); format 1 segments are still read.
        return {"schemaVersion": "2", "embedding": dict(self.embedder.identity), "metric": "inner_product"}

    def write(self, staging: Path, previous: Path | None, records: Sequence[dict[str, Any]]) -> list[str]:
        if previous is not None:
            clone_into(previous, staging, copy_names=())
        written: list[str] = []
        if records:
            ids = [r["chunkId"] for r in records]
            texts = [r["text"] for r in records]
            started = time.monotonic()
            vectors = self.embedder.embed(texts)
            spans = span_vectors(self.embedder, [(r["text"], r.get("evidence") or ()) for r in records],
                                 int(vectors.shape[1]))
            usl_embed_seconds.observe(time.monotonic() - started)
            # The digest of the text the text sink stores for each chunk (its TextDoc text), so
            # a query collapses identical vector candidates without asking the text index.
            digests = [text_digest(str(r.get("text") or "")) for r in records]
            name = f"seg-{staging.name.rsplit('-', 1)[-1]}"
            written += write_segment(staging, name, ids, vectors, exact_max=self.exact_max, spans=spans,
                                     digests=digests)
        generation = staging.name.rsplit('-', 1)[-1]
        round_number = 0
        while group := self._inline_plan(staging):
            merged = f"merged-{generation}-{round_number}"
            round_number += 1
            written += merge_segments(staging, group, merged, self.exact_max)
            for old in group:
                for file in segment_files(old):
                    (staging / file).unlink(missing_ok=True)
            usl_generation_merges_total.labels(kind=self.kind).inc()
        _write_segment_list(staging)
        return written

    def _inline_plan(self, staging: Path) -> list[str]:
        sizes = _segment_sizes(staging)
        if self.background_merges and len(sizes) <= HARD_MAX_SEGMENTS:
            return []
        return merge_plan(sizes)

    # -- background merges (sinks.merger) ------------------------------------------------------

    def plan_merge(self, gen_dir: Path) -> list[str]:
        return merge_plan(_segment_sizes(gen_dir))

    def segment_files(self, name: str) -> list[str]:
        return segment_files(name)

    def build_merge(self, work_dir: Path, names: list[str], new_name: str) -> list[str]:
        # In a child process, at a lower priority than the sink: a merge of 200 000 vectors in
        # the sink's own thread held the GIL through its Python loops and its copies of
        # hundreds of MB, and faiss's threads took both cores: sink-size flushes beside it took
        # 3-8x their usual time and, on a busy machine, an event waited up to 10 s for the
        # vector watermark, against about 2 s now (docs/benchmarks.md, "Merge-time vector lag at
        # the sink's commit size"). The inputs and the output are files in work_dir already.
        job = {"dir": str(work_dir), "names": names, "new": new_name, "exactMax": self.exact_max}
        child = subprocess.run([sys.executable, "-m", "sinks.vector.merge_child", str(MERGE_NICENESS),
                                orjson.dumps(job).decode()],
                               capture_output=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        if child.returncode != 0:
            raise RuntimeError(f"merging {', '.join(names)} into {new_name} failed (exit {child.returncode}): "
                               f"{child.stderr.decode(errors='replace').strip()[-2000:]}")
        files: list[str] = orjson.loads(child.stdout)
        usl_generation_merges_total.labels(kind=self.kind).inc()
        return files

    def apply_merge(self, staging: Path, names: list[str], work_dir: Path, new_name: str) -> None:
        for name in names:
            for file in segment_files(name):
                (staging / file).unlink()
        for file in segment_files(new_name):
            link_or_copy(work_dir / file, staging / file)
        _write_segment_list(staging)


def _write_segment_list(staging: Path) -> None:
    # Unlinked first: it may be a hard link shared with the previous generation.
    (staging / "segments.json").unlink(missing_ok=True)
    (staging / "segments.json").write_bytes(orjson.dumps(segment_names(staging)))


def merge_plan(sizes: dict[str, int]) -> list[str]:
    """The segments to merge next (oldest first), or ``[]`` when the layout is fine.

    ``sizes`` maps segment names to their vector bytes. The lowest tier holding
    ``MERGE_FACTOR`` segments of at most ``MAX_MERGED_BYTES / MERGE_FACTOR`` bytes is merged;
    then any two or more segments above that size, the largest first (its graph is extended);
    past ``MAX_SEGMENTS`` the smallest segments are.
    Called until it returns ``[]``, so one merge may cascade into the next tier.
    """
    tiers: dict[int, list[str]] = defaultdict(list)
    large: list[str] = []
    for name, size in sizes.items():
        if size <= MAX_MERGED_BYTES // MERGE_FACTOR:
            tiers[_tier(size)].append(name)
        else:
            large.append(name)
    for tier in sorted(tiers):
        if len(tiers[tier]) >= MERGE_FACTOR:
            return sorted(tiers[tier], key=_age)
    if len(large) >= 2:
        # Past the cap, segments go into the largest, which holds most of the index: listed
        # first, merge_segments inserts the others' rows into its graph instead of rebuilding
        # it, so this costs what the others hold, and queries search one large graph, not one
        # per 160k chunks. (The others' order is by age; a chunk id in two segments carries the
        # same content in both, ids being derived from it.)
        base = max(large, key=lambda name: (sizes[name], [-part for part in _age(name)]))
        return [base, *sorted((name for name in large if name != base), key=_age)]
    if len(sizes) > MAX_SEGMENTS:
        smallest = sorted(sizes, key=lambda name: (sizes[name], _age(name)))
        return sorted(smallest[: len(sizes) - MAX_SEGMENTS + 1], key=_age)
    return []


def _tier(size: int) -> int:
    return max(0, int(math.log(max(size, 1) / _TIER_BASE_BYTES, MERGE_FACTOR)))


def _age(name: str) -> tuple[int, ...]:
    """``seg-00000012`` → (12,), ``merged-00000012-1`` → (12, 1): generation, then round."""
    return tuple(int(part) for part in re.findall(r"\d+", name))


def _segment_sizes(gen_dir: Path) -> dict[str, int]:
    return {name: (gen_dir / f"{name}.vec.npy").stat().st_size for name in segment_names(gen_dir)}
