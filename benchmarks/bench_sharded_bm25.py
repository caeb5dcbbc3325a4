"""What exact global BM25 over sink shards costs a text query (:mod:`sinks.text.global_bm25`).

A synthetic corpus (a Zipf vocabulary of 5 000 words, chunks of 30 to 300 words, 50 sessions)
is indexed once as one tantivy index and once as ``--shards`` shards (sessions split by their
number modulo the shards, as sink shards split partitions), in batches of 2 000 (several segments). Each query runs on one index,
on the shards merged by their own scores (the merge before global statistics) and on the
shards through ``TantivyEngine.search_shards``; the minimum of three warm runs counts. Also
printed: how many lists equal one index's (ids and scores) and how many candidates were
explained.

    .venv/bin/python -m benchmarks.bench_sharded_bm25 --chunks 20000 --shards 2

No broker needed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import sinks.text.global_bm25 as global_bm25
from sinks.text.base import TextHit
from sinks.text.tantivy_engine import TantivyEngine

_VOCABULARY = [f"w{i}" for i in range(5000)]


def corpus(count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` chunks of Zipf-distributed words."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(_VOCABULARY) + 1) ** 1.05
    weights /= weights.sum()
    return [{"chunkId": f"c{i:06d}", "sessionId": f"s{i % 50}", "minSeq": i, "maxSeq": i,
             "text": " ".join(rng.choice(_VOCABULARY, size=int(rng.integers(30, 300)), p=weights))}
            for i in range(count)]


def queries(seed: int) -> list[str]:
    """40 queries of 1 to 4 mid-frequency words, 10 with a phrase of two common words."""
    rng = random.Random(seed)
    plain = [" ".join(rng.choice(_VOCABULARY[5:400]) for _ in range(rng.randint(1, 4))) for _ in range(40)]
    phrased = [f'"{rng.choice(_VOCABULARY[:30])} {rng.choice(_VOCABULARY[:30])}" {rng.choice(_VOCABULARY[10:300])}'
               for _ in range(10)]
    return plain + phrased


def _best_of_three(run: Callable[[], object]) -> float:
    run()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--limits", type=int, nargs="+", default=[10, 201])
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    engine = TantivyEngine(heap_bytes=200_000_000)
    chunks = corpus(args.chunks, seed=5)
    root = Path(tempfile.mkdtemp(prefix="bench-sharded-bm25-"))
    one, parts = root / "one", [root / f"shard-{shard}" for shard in range(args.shards)]
    for directory in (one, *parts):
        engine.create(directory)
    for start in range(0, len(chunks), 2000):
        batch = chunks[start:start + 2000]
        engine.add(one, batch)
        for shard, directory in enumerate(parts):
            engine.add(directory, [chunk for chunk in batch if int(chunk["sessionId"][1:]) % args.shards == shard])

    def local_merge(query: str, limit: int) -> list[TextHit]:
        hits = [hit for part in parts for hit in engine.search(part, query, limit=limit)]
        return sorted(hits, key=lambda hit: (-hit.score, hit.chunk_id))[:limit]

    explained = [0]
    rescore = global_bm25._rescore

    def counting_rescore(*arguments: Any, **options: Any) -> list[global_bm25.GlobalHit]:
        new = rescore(*arguments, **options)
        explained[0] += len(new)
        return new

    global_bm25._rescore = counting_rescore  # type: ignore[assignment]
    for limit in args.limits:
        timings: dict[str, list[float]] = {"one index": [], "merge by local scores": [],
                                           "global BM25": []}
        equal, counts = 0, []
        for query in queries(seed=9):
            runs = {"one index": lambda q=query, k=limit: engine.search(one, q, limit=k),
                    "merge by local scores": lambda q=query, k=limit: local_merge(q, k),
                    "global BM25": lambda q=query, k=limit: engine.search_shards(parts, q, limit=k)}
            for name, run in runs.items():
                timings[name].append(_best_of_three(run))
            explained[0] = 0
            got = engine.search_shards(parts, query, limit=limit)
            counts.append(explained[0])
            want = engine.search(one, query, limit=limit)
            equal += [(h.chunk_id, h.score) for h in got] == [(h.chunk_id, h.score) for h in want]
        print(f"{args.chunks} chunks, {args.shards} shards, limit {limit}: {equal}/{len(counts)} lists equal one "
              f"index's; candidates explained per query: median {statistics.median(counts):.0f}, "
              f"max {max(counts)}")
        for name, seconds in timings.items():
            ms = sorted(value * 1000 for value in seconds)
            print(f"  {name:22s} median {statistics.median(ms):7.2f} ms   p90 {ms[int(len(ms) * 0.9)]:7.2f} ms")


if __name__ == "__main__":
    main()
