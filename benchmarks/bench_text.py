"""Text sink benchmark: tantivy vs whoosh on the same chunks, written the way the sink writes.

Both engines index the same N generated chunks (default 20 000, about 330 words each) in
batches of 512, each batch a new immutable generation (``begin`` → ``clone_into`` of the
previous generation → ``engine.add`` → ``commit`` → ``gc``). Prints, from one run:

- indexing rate in chunks/s per engine (whole generation cycle, and the engine's ``add`` alone),
  and the tantivy/whoosh ratio;
- query latency p50/p99 per engine on the final generation (cold caches excluded), plain and
  with the planner's filters (``max_seq``, a set of allowed sessions), and the ratio.

Usage::

    .venv/bin/python benchmarks/bench_text.py [--chunks 20000] [--batch 512] [--queries 300]
                                              [--engines tantivy,whoosh] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sinks.generations import GenerationStore, Manifest, clone_into
from sinks.text import get_engine

__all__ = ["main", "make_chunks"]

_SESSIONS = 400


def _vocabulary(rng: random.Random, size: int = 12000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choice(letters) for _ in range(rng.randint(2, 11))) for _ in range(size * 2)}
    return sorted(words)[:size]


def make_chunks(count: int, *, seed: int = 7, words_per_chunk: int = 330) -> tuple[list[dict[str, Any]], list[str]]:
    """``count`` SearchChunkV1-shaped chunks with Zipf-distributed words, and the vocabulary."""
    rng = random.Random(seed)
    vocabulary = _vocabulary(rng)
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    tools = ["bash", "read_file", "edit_file", "grep", "run_tests"]
    chunks = []
    for i in range(count):
        words = rng.choices(vocabulary, weights=weights, k=words_per_chunk)
        text = f"user: {' '.join(words[:30])}\nassistant: {' '.join(words[30:])}"
        chunks.append({
            "kind": "chunk", "schema": "SearchChunkV1", "chunkId": f"c_{i:032x}", "logId": "default",
            "sessionId": f"s{i % _SESSIONS:04d}", "turnId": f"t{i}", "text": text,
            "fields": {"roles": ["user", "assistant"], "types": ["message", "tool.call"],
                       "toolNames": [rng.choice(tools)]},
            "minSeq": 3 * i + 1, "maxSeq": 3 * i + 3, "eventTime": 1767225600.0 + i,
        })
    return chunks, vocabulary


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_engine(name: str, chunks: list[dict[str, Any]], queries: list[str], batch: int, root: Path) -> dict[str, Any]:
    engine = get_engine(name)
    store = GenerationStore(root / name, "default", "text")
    add_seconds = 0.0
    started = time.perf_counter()
    for start in range(0, len(chunks), batch):
        docs = chunks[start:start + batch]
        staging = store.begin()
        current = store.current_id()
        if current is None:
            engine.create(staging)
        else:
            clone_into(store.generation_dir(current), staging, copy_names=engine.copy_names)
        t = time.perf_counter()
        engine.add(staging, docs)
        add_seconds += time.perf_counter() - t
        store.commit(staging, Manifest(
            kind="text", log_id="default", line="", generation_id=0, built_through_seq=docs[-1]["maxSeq"],
            schema_version="1", asp_version="1.0", chunker={}, embedding=None, redaction_policy_hash="bench",
            chunk_count=start + len(docs), extra={"engine": name},
        ))
        store.gc(keep_last=2)
    total_seconds = time.perf_counter() - started
    final = store.current()
    assert final is not None
    directory = store.generation_dir(final.generation_id)
    assert engine.count(directory) == len(chunks)
    engine.search(directory, queries[0], limit=20)  # open and warm the reader
    allowed = {f"s{i:04d}" for i in range(0, _SESSIONS, 4)}
    max_seq = chunks[len(chunks) // 2]["maxSeq"]
    plain, filtered = [], []
    for query in queries:
        t = time.perf_counter()
        engine.search(directory, query, limit=20)
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        engine.search(directory, query, limit=20, max_seq=max_seq, session_ids=allowed)
        filtered.append(time.perf_counter() - t)
    return {
        "engine": name,
        "chunks": len(chunks),
        "generations": final.generation_id,
        "indexBytes": sum(s.bytes for s in final.segments),
        "chunksPerSecond": len(chunks) / total_seconds,
        "addChunksPerSecond": len(chunks) / add_seconds,
        "queryP50Ms": 1000 * statistics.median(plain),
        "queryP99Ms": 1000 * _percentile(plain, 0.99),
        "filteredQueryP50Ms": 1000 * statistics.median(filtered),
        "filteredQueryP99Ms": 1000 * _percentile(filtered, 0.99),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--engines", default="tantivy,whoosh")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)

    chunks, vocabulary = make_chunks(args.chunks)
    rng = random.Random(11)
    # mid-frequency words: common enough to match, rare enough to rank
    pool = vocabulary[20:2000]
    queries = [" ".join(rng.sample(pool, rng.randint(1, 3))) for _ in range(args.queries)]
    results = []
    with tempfile.TemporaryDirectory(prefix="usl-bench-text-") as tmp:
        for name in args.engines.split(","):
            print(f"indexing {len(chunks)} chunks with {name} ...", file=sys.stderr)
            results.append(bench_engine(name, chunks, queries, args.batch, Path(tmp)))
    by_name = {r["engine"]: r for r in results}
    ratios = {}
    if {"tantivy", "whoosh"} <= set(by_name):
        t, w = by_name["tantivy"], by_name["whoosh"]
        ratios = {
            "indexingTantivyOverWhoosh": t["chunksPerSecond"] / w["chunksPerSecond"],
            "queryP50WhooshOverTantivy": w["queryP50Ms"] / t["queryP50Ms"],
        }
    if args.json:
        print(json.dumps({"results": results, "ratios": ratios}, indent=2))
        return 0
    for r in results:
        print(
            f"{r['engine']:8} {r['chunksPerSecond']:8.0f} chunks/s (add alone {r['addChunksPerSecond']:8.0f}), "
            f"{r['generations']} generations, {r['indexBytes'] / 1e6:.1f} MB; query p50 {r['queryP50Ms']:.2f} ms "
            f"p99 {r['queryP99Ms']:.2f} ms; filtered p50 {r['filteredQueryP50Ms']:.2f} ms p99 {r['filteredQueryP99Ms']:.2f} ms"
        )
    for key, value in ratios.items():
        print(f"{key}: {value:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
