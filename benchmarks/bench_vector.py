"""Vector benchmark: embedding rate, and approximate (HNSW) vs exact search at 100k chunks.

Prints, in one run on this machine:

(a) wordllama embeddings/s and tokens/s on realistic chunk texts, calls of 256 texts;
(b) on N generated chunks (default 100 000): build time of the exact (flat) and approximate
    (HNSW) segment, recall@10 of HNSW against exact search, query latency p50/p99 of both
    through ``VectorReader.search`` (unfiltered, and with an ACL-like filter allowing 1 chunk
    in 10), and the ratios.

Usage::

    .venv/bin/python benchmarks/bench_vector.py [--chunks 100000] [--queries 300]
                                                [--embedder wordllama|hash:256]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sinks.vector import VectorReader, get_embedder, write_segment
from sinks.vector.faiss_index import HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH, HNSW_M

__all__ = ["chunk_text", "main"]

_TOPICS = [
    ("kafka", "consumer group rebalance", "partition offset", "broker timeout", "producer acks"),
    ("pytest", "fixture teardown", "flaky test", "assertion error", "conftest plugin"),
    ("docker", "image build cache", "container exit code", "volume mount", "compose network"),
    ("postgres", "slow query plan", "index scan", "deadlock detected", "migration rollback"),
    ("react", "state update loop", "hook dependency", "hydration mismatch", "bundle size"),
    ("terraform", "state lock", "provider version", "plan drift", "module output"),
    ("rust", "borrow checker", "lifetime parameter", "trait bound", "cargo feature"),
    ("auth", "token refresh", "session cookie", "oauth redirect", "permission denied"),
]
_TOOLS = ["bash", "read_file", "edit_file", "grep", "run_tests", "web_search"]
_FILLER = (
    "I looked at the code and the logs, and the problem seems to come from the way the "
    "configuration is loaded before the service starts. Let me check the surrounding module "
    "and confirm the hypothesis with a smaller reproduction before changing anything."
).split()


def chunk_text(rng: random.Random, target_words: int = 460) -> str:
    """A rendered agent turn: user ask, assistant reasoning, tool calls and result summaries."""
    topic = rng.choice(_TOPICS)
    lines = [f"user: Can you help me with the {topic[0]} {rng.choice(topic[1:])} issue in service-{rng.randint(1, 40)}?"]
    words = len(lines[0].split())
    while words < target_words:
        kind = rng.random()
        if kind < 0.4:
            body = " ".join(rng.choice(_FILLER) for _ in range(rng.randint(15, 60)))
            line = f"assistant: About the {rng.choice(topic[1:])}: {body}."
        elif kind < 0.7:
            tool = rng.choice(_TOOLS)
            path = f"src/{topic[0]}/{rng.choice(['client', 'server', 'config', 'worker'])}_{rng.randint(1, 99)}.py"
            line = f"tool.call {tool} {{path: {path}, pattern: {rng.choice(topic[1:]).split()[0]}}}"
        else:
            status = rng.choice(["ok", "ok", "ok", "error"])
            line = (
                f"tool.result {status}: {rng.randint(1, 400)} lines; {rng.choice(topic[1:])} at line "
                f"{rng.randint(1, 900)}; exit code {0 if status == 'ok' else rng.randint(1, 2)}"
            )
        lines.append(line)
        words += len(line.split())
    return "\n".join(lines)


def _query_text(rng: random.Random) -> str:
    topic = rng.choice(_TOPICS)
    return f"{rng.choice(topic[1:])} in {topic[0]} {rng.choice(['fails', 'is slow', 'error', 'fix'])}"


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def _timed_searches(
    reader: VectorReader, queries: np.ndarray, allowed: Callable[[str], bool] | None
) -> tuple[list[list[str]], list[float]]:
    results, latencies = [], []
    for query in queries:
        start = time.perf_counter()
        hits = reader.search(query, limit=10, allowed=allowed)
        latencies.append((time.perf_counter() - start) * 1000)
        results.append([hit.chunk_id for hit in hits])
    return results, latencies


def bench_embedding(workdir: Path, texts: list[str]) -> None:
    embedder = get_embedder("wordllama", cache_root=workdir)
    tokens = sum(len(encoding.ids) for encoding in embedder.tokenizer.encode_batch(texts))  # type: ignore[attr-defined]
    embedder.embed(texts[:256])  # warm-up
    start = time.perf_counter()
    for offset in range(0, len(texts), 256):
        embedder.embed(texts[offset : offset + 256])
    elapsed = time.perf_counter() - start
    print(f"(a) wordllama {embedder.identity['model']} rev {embedder.identity['revision']}: "
          f"{len(texts)} chunk texts, mean {tokens / len(texts):.0f} tokens")
    print(f"    {len(texts) / elapsed:,.0f} embeddings/s, {tokens / elapsed / 1e6:.2f} M tokens/s (calls of 256)")


def bench_index(workdir: Path, spec: str, n_chunks: int, n_queries: int, seed: int) -> None:
    rng = random.Random(seed)
    embedder = get_embedder(spec, cache_root=workdir)
    start = time.perf_counter()
    ids = [f"c_{i:032x}" for i in range(n_chunks)]
    vectors = np.concatenate([
        embedder.embed([chunk_text(rng, rng.randint(80, 460)) for _ in range(min(5000, n_chunks - i))])
        for i in range(0, n_chunks, 5000)
    ])
    print(f"(b) {n_chunks:,} chunks embedded with {embedder.identity['name']} "
          f"({embedder.dimension} dims) in {time.perf_counter() - start:.1f}s")
    queries = embedder.embed([_query_text(rng) for _ in range(n_queries)])

    builds = {}
    for kind, exact_max in (("exact", n_chunks), ("hnsw", 0)):
        start = time.perf_counter()
        write_segment(workdir / kind, "s", ids, vectors, exact_max=exact_max)
        builds[kind] = time.perf_counter() - start
    print(f"    build: exact {builds['exact']:.2f}s, hnsw {builds['hnsw']:.2f}s "
          f"(M={HNSW_M}, efConstruction={HNSW_EF_CONSTRUCTION}; {builds['hnsw'] / builds['exact']:.0f}x)")

    exact_reader = VectorReader(workdir / "exact", ["s"])
    one_in_ten: Callable[[str], bool] = lambda chunk_id: int(chunk_id[-4:], 16) % 10 == 0  # noqa: E731
    for label, allowed in (("unfiltered", None), ("filter 1/10", one_in_ten)):
        exact, exact_ms = _timed_searches(exact_reader, queries, allowed)
        e50, e99 = _percentiles(exact_ms)
        print(f"    {label}: exact latency p50/p99 {e50:.2f}/{e99:.2f} ms")
        for ef_search in sorted({128, 256, 512, 1024, HNSW_EF_SEARCH}):
            approx_reader = VectorReader(workdir / "hnsw", ["s"], ef_search=ef_search)
            approx, approx_ms = _timed_searches(approx_reader, queries, allowed)
            recall = float(np.mean([len(set(a) & set(e)) / max(1, len(e)) for a, e in zip(approx, exact, strict=True)]))
            a50, a99 = _percentiles(approx_ms)
            default = " (default)" if ef_search == HNSW_EF_SEARCH else ""
            print(f"      hnsw efSearch={ef_search}{default}: recall@10 {recall:.3f}, latency p50/p99 "
                  f"{a50:.2f}/{a99:.2f} ms, exact/hnsw p50 {e50 / a50:.1f}x p99 {e99 / a99:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--embed-texts", type=int, default=4096)
    parser.add_argument("--embedder", default="wordllama", help="embedder for (b): wordllama or hash:DIM")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="usl-bench-vector-") as tmp:
        workdir = Path(tmp)
        rng = random.Random(args.seed)
        bench_embedding(workdir, [chunk_text(rng) for _ in range(args.embed_texts)])
        bench_index(workdir, args.embedder, args.chunks, args.queries, args.seed)


if __name__ == "__main__":
    main()
