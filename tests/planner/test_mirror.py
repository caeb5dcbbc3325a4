"""Stateless planner replicas over the object store (:mod:`planner.mirror`).

Against the session's broker and S3 server: generations published from one home are
materialized in another in the layout the planner reads, with the same watermarks the sinks
publish; the mirror keeps what is pinned, holds store pins for what it keeps and stays within
its cache bound. The end-to-end test runs a worker and sinks publishing from home A, a planner
API on home A and a replica API (``usl serve`` with ``USL_PLANNER_SOURCE=object-store``) on an
empty home B, and asks both the same questions.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from planner.mirror import MirrorFollower, StoreMirror
from sinks.generations import GenerationStore, Manifest
from sinks.objectstore import CommitLog, ObjectStore, publish_generation
from sinks.runner import index_root, watermark_of
from streams.settings import Settings

if TYPE_CHECKING:
    from deploy.s3proxy.server import S3ProxyInfo

pytestmark = pytest.mark.kafka

WATERMARK_FIELDS = ("logId", "kind", "line", "generationId", "builtThroughSeq", "shard")


def store_settings(make_settings: Callable[..., Settings], s3proxy: S3ProxyInfo, **overrides: object) -> Settings:
    return make_settings(object_store=f"s3://usl-test/mirror{uuid.uuid4().hex[:8]}", s3_endpoint=s3proxy.endpoint,
                         s3_access_key=s3proxy.access_key, s3_secret_key=s3proxy.secret_key, **overrides)


def replica_of(settings: Settings, home: Path, **overrides: Any) -> Settings:
    """The same deployment (topics, store) seen from a replica with its own, empty home."""
    return Settings.from_env({}, home=home, topic_prefix=settings.topic_prefix,
                             bootstrap_servers=settings.bootstrap_servers, object_store=settings.object_store,
                             s3_endpoint=settings.s3_endpoint, s3_access_key=settings.s3_access_key,
                             s3_secret_key=settings.s3_secret_key, **overrides)


def tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def commit_and_publish(settings: Settings, files: dict[str, bytes], *, through: int, kind: str = "text",
                       shard: str | None = None) -> tuple[Manifest, GenerationStore]:
    """Commit a local generation holding ``files`` (home A) and publish it, as a sink does."""
    local = GenerationStore(index_root(settings), "default", kind, shard=shard)
    staging = local.begin()
    for rel, body in files.items():
        (staging / rel).write_bytes(body)
    manifest = local.commit(staging, Manifest(
        kind=kind, log_id="default", line="live", generation_id=0, built_through_seq=through,
        schema_version="1", asp_version="1", chunker={"version": "test"}, embedding=None,
        redaction_policy_hash="policy"))
    commits = CommitLog(settings.bootstrap_servers or "", settings)
    try:
        commits.ensure_topic()
        publish_generation(ObjectStore.from_settings(settings), commits, local.generation_dir(manifest.generation_id),
                           manifest, shard=shard or "shard-0-of-1")
    finally:
        commits.close()
    return manifest, local


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_the_mirror_materializes_published_generations_as_the_planner_reads_them(
    make_settings: Callable[..., Settings], s3proxy: S3ProxyInfo, tmp_path: Path,
) -> None:
    """Byte-identical generation directories in the local layout, CURRENT/ACTIVE set, the
    sinks' watermarks (shards folded), store pins for exactly what is kept, a locally pinned
    generation kept past ``keep_last``, and the cache within its bound throughout."""
    settings = store_settings(make_settings, s3proxy)
    store = ObjectStore.from_settings(settings)
    store.ensure_bucket()
    published = [commit_and_publish(settings, {"seg-0": os.urandom(20_000)}, through=5)]
    shards = [commit_and_publish(settings, {"part": os.urandom(5_000)}, through=through, kind="vector",
                                 shard=f"shard-{index}-of-2") for index, through in ((0, 7), (1, 4))]
    replica = replica_of(settings, tmp_path / "b")
    bound = 120_000
    mirror = StoreMirror(replica, settings.bootstrap_servers or "", cache_bytes=bound, keep_last=2)
    follower = MirrorFollower(mirror).start(timeout_seconds=120)
    try:
        assert mirror.ready, mirror.last_error
        root = index_root(replica)
        manifest, local = published[0]
        mirrored = GenerationStore(root, "default", "text")
        assert mirrored.current() == manifest
        assert tree(mirrored.generation_dir(manifest.generation_id)) == tree(local.generation_dir(manifest.generation_id))
        for shard_manifest, shard_store in shards:
            copy = GenerationStore(root, "default", "vector", shard=shard_store.shard)
            assert copy.current() == shard_manifest
        # The sinks' watermarks, as the watermark topic's readers see them.
        from sinks.shards import fold_shards

        sink_table = {("default", "text"): watermark_of(manifest, local, {})}
        for shard_manifest, shard_store in shards:
            sink_table[("default", f"vector/{shard_store.shard}")] = watermark_of(shard_manifest, shard_store, {})
        expected = fold_shards(sink_table)
        seen = follower.snapshot()
        assert set(seen) == set(expected)
        for key, record in expected.items():
            assert {f: seen[key].get(f) for f in WATERMARK_FIELDS} == {f: record.get(f) for f in WATERMARK_FIELDS}
        assert seen[("default", "vector")]["builtThroughSeq"] == 4  # the slower shard
        assert set(seen[("default", "vector")]["shards"]) == {"shard-0-of-2", "shard-1-of-2"}

        # A query on the replica pins the first generation; four more are published.
        held = mirrored.pin(manifest.generation_id, ttl_seconds=600, holder="test-query")
        for through in range(6, 10):
            published.append(commit_and_publish(settings, {"seg-0": os.urandom(20_000), "seg-1": os.urandom(1000)},
                                                through=through))
            assert mirror.cache.bytes_used() <= bound
        newest = published[-1][0]
        wait_for(lambda: follower.snapshot()[("default", "text")]["generationId"] == newest.generation_id,
                 "the newest generation to be mirrored")
        assert mirror.cache.bytes_used() <= bound
        assert mirrored.current() == newest
        kept = set(mirrored.generation_ids())
        assert kept == {manifest.generation_id, newest.generation_id - 1, newest.generation_id}
        # Store pins: exactly one per kept generation of each key (text 3, vector shards 1 each).
        pins = [key for key, (_manifest, expires) in store.pins().items() if expires > time.time()]
        assert len(pins) == len(kept) + 2
        held.release()
        commit_and_publish(settings, {"seg-0": os.urandom(20_000)}, through=10)
        wait_for(lambda: follower.snapshot()[("default", "text")]["builtThroughSeq"] == 10, "generation 10")
        assert manifest.generation_id not in mirrored.generation_ids()
        assert len(mirrored.generation_ids()) == 2
    finally:
        follower.stop()
    assert store.pins() == {}  # a stopped replica releases its store pins
