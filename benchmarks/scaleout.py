"""The scaled-out index tier in the harness (issue 18): sink shards and a planner replica's
segment cache.

- :func:`shard_rates`: the chunks of one log indexed by one ``usl sink --kind text,vector``
  process and by two shard processes (``--shard I/2``), alternately, each into a fresh home,
  timed from process start until every current generation reaches the head
  (``benchmarks.bench_shards``).
- :func:`segment_cache`: the ``bench_query`` corpus published to a local S3Proxy; a planner
  replica with an empty home (``StoreMirror``: a fresh cache directory) fetches every live
  generation, then answers the same ``indexed`` queries twice: the cold pass (the first queries
  open the freshly fetched segments) and the warm pass (same replica, cache and readers warm).
  If S3Proxy cannot start, the figures say why instead of failing the harness.
"""

from __future__ import annotations

import dataclasses
import random
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.measure import pct, say
from streams.settings import Settings

__all__ = ["SCALEOUT", "ScaleOut", "segment_cache", "shard_rates"]

MODES = ("text", "vector", "hybrid")


@dataclasses.dataclass(frozen=True)
class ScaleOut:
    shard_sessions: int   # synthetic sessions of the shard comparison (4 turns each)
    shard_runs: int       # one sink then two shards, this many times
    cache_chunks: int     # corpus published to the object store
    cache_queries: int    # query texts per pass, each through every mode


SCALEOUT = {
    "tiny": ScaleOut(shard_sessions=30, shard_runs=1, cache_chunks=500, cache_queries=10),
    "standard": ScaleOut(shard_sessions=1_000, shard_runs=3, cache_chunks=10_000, cache_queries=100),
    "large": ScaleOut(shard_sessions=1_000, shard_runs=3, cache_chunks=10_000, cache_queries=100),
}


def shard_rates(bootstrap: str, topic_prefix: str, work: Path, sessions: int, runs: int,
                embedder: str) -> dict[str, Any]:
    """Chunks/s of text+vector with one sink and with two shards over the same chunks."""
    from benchmarks.bench_shards import chunk_the_log, index_seconds
    from deploy.testing import Stack

    settings = Settings.from_env({}, home=work / "worker", bootstrap_servers=bootstrap, topic_prefix=topic_prefix,
                                 l1_partitions=2, stream_partitions=2, embedder=embedder)
    stack = Stack(settings)
    try:
        events, head, chunks = chunk_the_log(stack, work, sessions)
        rows: list[dict[str, Any]] = []
        for run in range(runs):
            for shards in (1, 2):
                say(f"sink shards: run {run + 1}, {shards} process(es) ...")
                seconds = index_seconds(stack, work / f"run{run}-{shards}", shards, head)
                rows.append({"run": run + 1, "shards": shards, "seconds": seconds,
                             "chunksPerSecond": chunks / seconds})
    finally:
        stack.close()
    best = {shards: max(r["chunksPerSecond"] for r in rows if r["shards"] == shards) for shards in (1, 2)}
    return {"events": events, "chunks": chunks, "streamPartitions": settings.stream_partitions, "runs": rows,
            "oneSinkChunksPerSecond": best[1], "twoShardsChunksPerSecond": best[2],
            "twoShardsVsOne": best[2] / best[1]}


def segment_cache(bootstrap: str, topic_prefix: str, work: Path, chunks: int, queries: int, tail_events: int,
                  embedder: str) -> dict[str, Any]:
    """A planner replica over the object store: latency with a cold then a warm segment cache."""
    from deploy.s3proxy.server import running_s3proxy
    from sinks.objectstore.exceptions import ObjectStoreUnavailableError

    try:
        with running_s3proxy(Settings.from_env({}, home=work / "s3proxy")) as server:
            store = {"object_store": f"s3://usl-bench/{uuid.uuid4().hex[:8]}", "s3_endpoint": server.endpoint,
                     "s3_access_key": server.access_key, "s3_secret_key": server.secret_key}
            return _cold_and_warm(bootstrap, topic_prefix, work, store, chunks, queries, tail_events, embedder)
    except ObjectStoreUnavailableError as error:
        say(f"segment cache: S3Proxy unavailable ({error})")
        return {"error": f"S3Proxy could not start: {str(error).splitlines()[0]}"}


def _cold_and_warm(bootstrap: str, topic_prefix: str, work: Path, store: dict[str, str], chunks: int, queries: int,
                   tail_events: int, embedder: str) -> dict[str, Any]:
    from benchmarks.bench_query import build
    from planner.acl import parse_principal
    from planner.engine import Planner
    from planner.mirror import MirrorFollower, StoreMirror

    common = {"bootstrap_servers": bootstrap, "topic_prefix": topic_prefix, "l1_partitions": 1,
              "stream_partitions": 1, "embedder": embedder, "cursor_key": "bench-cursor-key-0123456789", **store}
    writer_settings = Settings.from_env({}, home=work / "sinks", **common)
    say(f"segment cache: publishing a corpus of {chunks} chunks to S3Proxy ...")
    build(writer_settings, bootstrap, chunks, tail_events)
    generations = _publish(writer_settings)
    replica = Settings.from_env({}, home=work / "replica", planner_source="object-store", **common)
    mirror = StoreMirror(replica, bootstrap)
    began = time.monotonic()
    follower: Any = MirrorFollower(mirror).start(timeout_seconds=600)  # the WatermarkFollower interface
    fetch_seconds = time.monotonic() - began
    if not mirror.ready:
        follower.stop()
        raise TimeoutError(f"the replica did not fetch the published generations in 600s ({mirror.last_error})")
    fetched = mirror.cache.bytes_used()
    principal = parse_principal("tenant:acme/user:bench/groups:ops")
    planner = Planner(replica, bootstrap, follower=follower)
    try:
        say(f"segment cache: {queries} queries per mode, cold then warm ...")
        cold = _pass(planner, principal, queries)
        warm = _pass(planner, principal, queries)
        fetched_warm = mirror.cache.bytes_used() - fetched
    finally:
        planner.close()
        follower.stop()
    return {"chunks": chunks, "generations": generations, "fetchSeconds": fetch_seconds, "fetchedBytes": fetched,
            "fetchedBytesWarm": fetched_warm, "queries": queries, "cold": cold, "warm": warm}


def _publish(settings: Settings) -> int:
    """Publish the current generation of every kind the corpus has, as a sink's publisher does."""
    from sinks.generations import GenerationStore
    from sinks.objectstore import CommitLog, ObjectStore, publish_generation
    from sinks.runner import index_root

    object_store = ObjectStore.from_settings(settings)
    object_store.ensure_bucket()
    commits = CommitLog(settings.bootstrap_servers or "", settings)
    published = 0
    try:
        commits.ensure_topic()
        for kind in ("text", "vector", "structured"):
            local = GenerationStore(index_root(settings), "default", kind)
            manifest = local.current()
            if manifest is not None:
                publish_generation(object_store, commits, local.generation_dir(manifest.generation_id), manifest)
                published += 1
    finally:
        commits.close()
    return published


def _pass(planner: Any, principal: Any, queries: int, seed: int = 11) -> dict[str, dict[str, float]]:
    """p50/p99 ms per mode of ``indexed`` queries, every query counted (no warm-up); each text
    runs through every mode in a rotating order, and the first query's latency is kept apart."""
    from benchmarks.bench_query import _TOPICS

    rng = random.Random(seed)
    vocabulary = sorted({word for topic in _TOPICS for word in topic})
    texts = [" ".join(rng.sample(vocabulary, rng.randint(1, 3))) for _ in range(queries)]
    latencies: dict[str, list[float]] = {mode: [] for mode in MODES}
    for number, text in enumerate(texts):
        shift = number % len(MODES)
        for mode in MODES[shift:] + MODES[:shift]:
            began = time.perf_counter()
            planner.search({"query": text, "mode": mode, "freshness": "indexed"}, principal)
            latencies[mode].append((time.perf_counter() - began) * 1000)
    return {mode: {"p50": pct(values, 0.5), "p99": pct(values, 0.99), "first": values[0]}
            for mode, values in latencies.items()}

