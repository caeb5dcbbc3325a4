"""Stateless planner replicas over the object store (:mod:`planner.mirror`).

Against the session's broker and S3 server: generations published from one home are
materialized in another in the layout the planner reads, with the same watermarks the sinks
publish; the mirror keeps what is pinned, holds store pins for what it keeps and stays within
its cache bound. The end-to-end test runs a worker and sinks publishing from home A, a planner
API on home A and a replica API (``usl serve`` with ``USL_PLANNER_SOURCE=object-store``) on an
empty home B, and asks both the same questions.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from deploy.testing import Stack, free_port, same_generations, wait_for_api
from planner.mirror import MirrorFollower, StoreMirror
from sinks.generations import GenerationStore, Manifest
from sinks.objectstore import CommitLog, ObjectStore, publish_generation
from sinks.runner import index_root, watermark_of
from sinks.testing import wait_for_watermarks
from streams.exceptions import ConfigError
from streams.settings import Settings
from streams.testing import append_events, interleave, session_events

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
    bound = 60_000  # room for about two text generations: older ones must be evicted
    mirror = StoreMirror(replica, settings.bootstrap_servers or "", cache_bytes=bound, keep_last=2,
                         collect_seconds=0.5)
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
        # What the replica keeps (a pinned generation among it) is more than the cache may hold.
        assert bytes_on_disk(root) > bound
        assert mirrored.current() == newest
        kept = set(mirrored.generation_ids())
        assert kept == {manifest.generation_id, newest.generation_id - 1, newest.generation_id}
        # Store pins: exactly one per kept generation of each key (text 3, vector shards 1 each).
        pins = [key for key, (_manifest, expires) in store.pins().items() if expires > time.time()]
        assert len(pins) == len(kept) + 2
        held.release()
        # Nothing new is published: the replica still lets go of what no query holds any more.
        wait_for(lambda: manifest.generation_id not in mirrored.generation_ids(), "the released generation to go",
                 timeout=60)
        assert len([key for key, (_m, expires) in store.pins().items() if expires > time.time()]) == len(kept) - 1 + 2
        commit_and_publish(settings, {"seg-0": os.urandom(20_000)}, through=10)
        wait_for(lambda: follower.snapshot()[("default", "text")]["builtThroughSeq"] == 10, "generation 10")
        assert manifest.generation_id not in mirrored.generation_ids()
        assert len(mirrored.generation_ids()) == 2
    finally:
        follower.stop()
    assert store.pins() == {}  # a stopped replica releases its store pins

    # A restart on the same home: a generation directory that lost a file (a copy cut short) is
    # fetched again, a staging leftover of a killed mirror is removed, the rest is kept as is.
    current = mirrored.current()
    assert current is not None
    damaged = mirrored.generation_dir(current.generation_id)
    (damaged / "seg-0").unlink()
    leftover = mirrored.line_dir / ".mirror-gen-00000099-dead"
    leftover.mkdir()
    restarted = StoreMirror(replica, settings.bootstrap_servers or "", cache_bytes=bound).start(timeout_seconds=120)
    try:
        assert restarted.ready, restarted.last_error
        assert tree(damaged) == tree(local.generation_dir(current.generation_id))
        assert not leftover.exists()
        with pytest.raises(ConfigError, match="its own USL_HOME"):
            StoreMirror(replica, settings.bootstrap_servers or "", cache_bytes=bound)
    finally:
        restarted.stop()


def test_an_object_store_replica_needs_a_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="USL_PLANNER_SOURCE=object-store needs USL_OBJECT_STORE"):
        StoreMirror(Settings.from_env({}, home=tmp_path, planner_source="object-store"), "127.0.0.1:1")


KINDS = ("text", "vector", "structured", "analytics")  # what searches and SessionQL read
QUERIES = ("deploy refund", "kafka broker timeout", "parquet schema cursor", "retry")
CACHE_BYTES = 8 * 1024 * 1024


def post_search(api: str, body: dict[str, Any], route: str = "/v1/search") -> dict[str, Any]:
    request = urllib.request.Request(f"{api}{route}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            answer: dict[str, Any] = json.load(response)
            return answer
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{api} answered {exc.code}: {exc.read().decode(errors='replace')}") from None


def bytes_on_disk(directory: Path) -> int:
    """Bytes of the files under ``directory`` (each inode once), as GenerationCache counts them."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in directory.rglob("*"):
        if ".meta" in path.relative_to(directory).parts[:1] or not path.is_file():
            continue
        st = path.lstat()
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def settled_answer(api: str, body: dict[str, Any], as_of_seq: int, timeout: float = 180.0) -> dict[str, Any]:
    """The answer once the API's indexed asOfSeq reaches ``as_of_seq`` (its watermarks caught up)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = post_search(api, {"freshness": "indexed", **body})
        except AssertionError as exc:  # 503 index_unavailable: nothing mirrored yet
            assert "index_unavailable" in str(exc) and time.monotonic() < deadline, exc
            time.sleep(0.5)
            continue
        if answer["asOfSeq"] >= as_of_seq:
            return answer
        assert time.monotonic() < deadline, f"{api} stayed at asOfSeq {answer['asOfSeq']} < {as_of_seq}"
        time.sleep(0.5)


def assert_same_answers(primary: str, replica: str, head: int) -> dict[str, Any]:
    """Both APIs answer every query alike at ``head``; returns the watermarks they named."""
    watermarks: dict[str, Any] = {}
    for mode in ("text", "vector", "hybrid"):
        for query in QUERIES:
            body = {"query": query, "mode": mode, "k": 5}
            expected, got = same_generations(settled_answer, (primary, replica), body, head)
            assert got["asOfSeq"] == expected["asOfSeq"] == head, (mode, query)
            assert got["results"] == expected["results"], (mode, query)
            assert expected["results"] or mode == "text", (mode, query)
            watermarks = got["freshness"]["watermarks"]
    sessionql = {"query": "FROM events GROUP BY sessionId", "asOfSeq": head}
    expected_rows = post_search(primary, sessionql, "/v1/sessionql")
    assert post_search(replica, sessionql, "/v1/sessionql") == expected_rows and expected_rows["rows"]
    return watermarks


def test_a_replica_on_an_empty_home_answers_as_the_planner_beside_the_sinks(
    make_settings: Callable[..., Settings], s3proxy: S3ProxyInfo, tmp_path: Path,
) -> None:
    """Worker and sinks publish from home A; ``usl serve`` on home A and a replica ``usl serve``
    (USL_PLANNER_SOURCE=object-store) on an empty home B answer text, vector and hybrid queries
    identically at the same asOfSeq; a cursor from A continues on B; the replica's cache stays
    within its bound; killed with SIGKILL and restarted on the same home, the replica catches up
    with what was published meanwhile and answers as A again; a replica started later, which
    never held the cursor's generations, refuses the cursor with 410."""
    cursor_key = uuid.uuid4().hex * 2
    settings = store_settings(make_settings, s3proxy, embedder="hash:64", sink_batch_size=16)
    store_env = {"USL_OBJECT_STORE": settings.object_store or "", "USL_S3_ENDPOINT": settings.s3_endpoint or "",
                 "USL_S3_ACCESS_KEY": settings.s3_access_key or "", "USL_S3_SECRET_KEY": settings.s3_secret_key or "",
                 "USL_CURSOR_KEY": cursor_key}
    home_b = tmp_path / "replica-home"
    replica_env = {**store_env, "USL_HOME": str(home_b), "USL_PLANNER_SOURCE": "object-store",
                   "USL_PLANNER_CACHE_BYTES": str(CACHE_BYTES)}
    primary_port, replica_port = free_port(), free_port()
    primary, replica = f"http://127.0.0.1:{primary_port}", f"http://127.0.0.1:{replica_port}"
    stack = Stack(settings)
    try:
        stack.worker()
        stack.sinks(",".join(KINDS), env=store_env)
        stack.start("primary", "serve", "--port", str(primary_port), env={"USL_CURSOR_KEY": cursor_key})
        stack.start("replica", "serve", "--port", str(replica_port), env=replica_env)
        events = interleave(*[session_events(f"mirror-{i:02d}", turns=3, seed=70 + i) for i in range(8)], seed=7)
        head = append_events(settings, events)
        wait_for_watermarks(settings, head, KINDS)
        wait_for_api(primary, stack, name="primary")
        wait_for_api(replica, stack, name="replica")
        watermarks = assert_same_answers(primary, replica, head)
        assert not (index_root(settings).parent / "objectstore-cache").exists()  # A reads its own generations
        assert set(watermarks) == {"text", "vector", "structured"}
        for kind in watermarks:  # B holds the generations the answers name, mirrored from A's
            named = watermarks[kind]["generationId"]
            assert GenerationStore(home_b.resolve() / "indexes", "default", kind).load(named) == \
                GenerationStore(index_root(settings), "default", kind).load(named), kind
        assert 0 < bytes_on_disk(home_b / "objectstore-cache") <= CACHE_BYTES

        # A cursor issued by the primary continues on the replica, exactly as on the primary.
        first = settled_answer(primary, {"query": "deploy refund", "mode": "hybrid", "k": 3}, head)
        assert first["cursor"], first
        page = {"query": "deploy refund", "mode": "hybrid", "k": 3, "cursor": first["cursor"], "freshness": "indexed"}
        on_primary, on_replica = post_search(primary, page), post_search(replica, page)
        assert on_replica["results"] == on_primary["results"] and on_primary["results"]
        assert on_replica["asOfSeq"] == on_primary["asOfSeq"] == first["asOfSeq"]

        # kill -9 of the replica; more is ingested and published while it is down.
        stack.kill("replica")
        more = interleave(*[session_events(f"mirror-late-{i:02d}", turns=2, seed=90 + i) for i in range(4)], seed=9)
        head = append_events(settings, more)
        wait_for_watermarks(settings, head, KINDS)
        stack.start("replica", "serve", "--port", str(replica_port), env=replica_env)
        wait_for_api(replica, stack, name="replica")
        assert_same_answers(primary, replica, head)
        assert 0 < bytes_on_disk(home_b / "objectstore-cache") <= CACHE_BYTES

        # A replica that never held the generations the old cursor binds (it started after the
        # pointers moved on) refuses it plainly: 410 cursor_expired, restart from page 1.
        late_port = free_port()
        late = f"http://127.0.0.1:{late_port}"
        stack.start("late", "serve", "--port", str(late_port),
                    env={**replica_env, "USL_HOME": str(tmp_path / "late-home")})
        wait_for_api(late, stack, name="late")
        settled_answer(late, {"query": "deploy refund", "mode": "hybrid", "k": 3}, head)
        with pytest.raises(AssertionError, match=r"answered 410: .*cursor_expired"):
            post_search(late, page)
    finally:
        stack.close()
