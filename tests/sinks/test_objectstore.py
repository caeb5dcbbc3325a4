"""Generations in an S3-compatible store, against a real S3Proxy and the real broker.

Publish then fetch is byte-identical; a publish that dies between objects is never live; two
concurrent publishers of one key leave one whole generation live for every reader; a store that
is down fails publishes with a clear error and the backlog drains once it is back; the cache
stays within its byte bound; GC never deletes a pinned generation; nothing secret-looking is
uploaded that the local generation did not hold.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deploy.s3proxy.server import S3ProxyInfo, ensure_s3proxy, stop_s3proxy
from sinks.generations import GenerationStore, Manifest
from sinks.objectstore import (
    CacheFullError,
    CommitLog,
    GenerationCache,
    GenerationPublisher,
    NotPublishedError,
    ObjectStore,
    ObjectStoreUnavailableError,
    StoreLocation,
    object_store_hook,
    publish_generation,
)
from sinks.objectstore.publish import DEFAULT_SHARD
from sinks.objectstore.store import commit_key
from streams.metrics import usl_objectstore_publish_failures_total
from streams.settings import Settings

pytestmark = pytest.mark.kafka

KEY = commit_key("default", "text", DEFAULT_SHARD)


def commit_local(root: Path, files: dict[str, bytes], *, kind: str = "text", log_id: str = "default",
                 through: int = 1) -> tuple[Manifest, Path]:
    """Commit one local generation holding ``files`` through the real GenerationStore."""
    store = GenerationStore(root, log_id, kind)
    staging = store.begin()
    for rel, body in files.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).write_bytes(body)
    manifest = store.commit(staging, Manifest(
        kind=kind, log_id=log_id, line="live", generation_id=0, built_through_seq=through,
        schema_version="1", asp_version="1.0", chunker={}, embedding=None, redaction_policy_hash="p1"))
    return manifest, store.generation_dir(manifest.generation_id)


def tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def random_files(seed: int, count: int = 3, size: int = 4096) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {f"seg-{seed}-{n}.bin" if n else f"nested/dir/seg-{seed}.idx": rng.randbytes(size) for n in range(count)}


@pytest.fixture
def commits(settings: Settings) -> Iterator[CommitLog]:
    log = CommitLog(settings.bootstrap_servers or "", settings)
    log.ensure_topic()
    yield log
    log.close()


def test_publish_then_fetch_is_byte_identical_and_shared_segments_upload_once(
    make_object_store: Callable[..., ObjectStore], commits: CommitLog, tmp_path: Path,
) -> None:
    store = make_object_store()
    shared = random_files(1)
    first, first_dir = commit_local(tmp_path / "idx", shared, through=10)
    publish_generation(store, commits, first_dir, first)
    second, second_dir = commit_local(tmp_path / "idx", {**shared, "new.bin": b"\x00\xffnew" * 999}, through=20)
    remote = publish_generation(store, commits, second_dir, second)

    live = commits.live()[KEY]
    assert (live["manifestKey"], live["generationId"], live["builtThroughSeq"]) == (remote.manifest_key, 2, 20)
    cache = GenerationCache(store, tmp_path / "cache", 10 * 1024 * 1024)
    fetched = cache.fetch(live["manifestKey"])
    assert tree(fetched) == tree(second_dir)
    assert "manifest.json" in tree(fetched)
    assert Manifest.from_json((fetched / "manifest.json").read_bytes()) == second
    # The three shared segments are one blob each; two manifest.json and new.bin are the rest.
    blobs = [key for key, _ in store.all_objects() if "/blobs/" in key]
    assert len(blobs) == len(shared) + 3


def test_a_publish_that_dies_between_objects_is_never_live(
    make_object_store: Callable[..., ObjectStore], commits: CommitLog, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_object_store()
    first, first_dir = commit_local(tmp_path / "idx", random_files(2), through=5)
    publish_generation(store, commits, first_dir, first)
    second, second_dir = commit_local(tmp_path / "idx", random_files(3, count=4), through=9)

    puts: list[str] = []
    real_put = store._put

    def dying_put(key: str, body: bytes) -> None:
        if len(puts) == 2:
            raise RuntimeError("killed between two objects")
        puts.append(key)
        real_put(key, body)

    monkeypatch.setattr(store, "_put", dying_put)
    with pytest.raises(RuntimeError):
        publish_generation(store, commits, second_dir, second)
    monkeypatch.setattr(store, "_put", real_put)
    assert len(puts) == 2
    live = commits.live()[KEY]
    assert live["generationId"] == 1
    assert tree(GenerationCache(store, tmp_path / "cache", 10**7).fetch(live["manifestKey"])) == tree(first_dir)


def test_a_publisher_killed_with_sigkill_mid_upload_leaves_the_old_generation_live(
    make_object_store: Callable[..., ObjectStore], commits: CommitLog, settings: Settings, tmp_path: Path,
) -> None:
    """A real process, slowed down between objects, killed -9 after its first blob landed."""
    store = make_object_store()
    first, first_dir = commit_local(tmp_path / "idx", random_files(4), through=3)
    publish_generation(store, commits, first_dir, first)
    second, _second_dir = commit_local(tmp_path / "idx", random_files(5, count=6), through=7)
    client = store._client
    script = f"""
import time
from pathlib import Path
from sinks.generations import GenerationStore
from sinks.objectstore import CommitLog, ObjectStore, StoreLocation, publish_generation
from streams.settings import Settings
store = ObjectStore(StoreLocation({store.location.bucket!r}, {store.location.prefix!r}),
                    endpoint={client.meta.endpoint_url!r}, access_key={client._request_signer._credentials.access_key!r},
                    secret_key={client._request_signer._credentials.secret_key!r})
real_put = store._put
def slow_put(key, body):
    real_put(key, body)
    print("PUT", key, flush=True)
    time.sleep(30)
store._put = slow_put
settings = Settings.from_env(topic_prefix={settings.topic_prefix!r})
gen = GenerationStore(Path({str(tmp_path / 'idx')!r}), "default", "text")
manifest = gen.load({second.generation_id})
publish_generation(store, CommitLog({settings.bootstrap_servers!r}, settings), gen.generation_dir(manifest.generation_id), manifest)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("PUT "), line
    proc.kill()
    proc.wait(timeout=30)
    live = commits.live()[KEY]
    assert live["generationId"] == first.generation_id
    assert tree(GenerationCache(store, tmp_path / "cache", 10**7).fetch(live["manifestKey"])) == tree(first_dir)
    # The orphan blob is collected once past the grace period; the live generation stays whole.
    store.gc(commits.live_manifests(), keep_last=0, grace_seconds=0)
    assert tree(GenerationCache(store, tmp_path / "cache2", 10**7).fetch(live["manifestKey"])) == tree(first_dir)
    live_blobs = {f.sha256 for f in store.load(live["manifestKey"]).files}
    assert {key.rsplit("/", 1)[1] for key, _ in store.all_objects() if "/blobs/" in key} == live_blobs


def test_concurrent_publishers_of_one_key_leave_one_whole_generation_for_every_reader(
    make_object_store: Callable[..., ObjectStore], commits: CommitLog, settings: Settings, tmp_path: Path,
) -> None:
    store = make_object_store()
    # Two writers of the same key (a split brain): A commits odd ids, B even ids, each its own files.
    generations: dict[int, dict[str, bytes]] = {}
    dirs: dict[int, tuple[Manifest, Path]] = {}
    for generation_id in range(1, 9):
        files = random_files(100 + generation_id, count=3, size=2048)
        root = tmp_path / f"writer-{generation_id % 2}" / f"g{generation_id}"
        # Separate roots: build generation N in its own line dir so ids match across writers.
        store_root = GenerationStore(root, "default", "text")
        for _ in range(generation_id - 1):  # advance CURRENT to id N-1 with empty generations
            staging = store_root.begin()
            store_root.commit(staging, Manifest(kind="text", log_id="default", line="live", generation_id=0,
                                                built_through_seq=0, schema_version="1", asp_version="1.0",
                                                chunker={}, embedding=None, redaction_policy_hash="p1"))
        manifest, gen_dir = commit_local(root, files, through=generation_id * 10)
        assert manifest.generation_id == generation_id
        generations[generation_id] = tree(gen_dir)
        dirs[generation_id] = (manifest, gen_dir)

    stop = threading.Event()
    seen: list[int] = []
    problems: list[str] = []

    def reader() -> None:
        reader_commits = CommitLog(settings.bootstrap_servers or "", settings)
        cache = GenerationCache(store, Path(tempfile.mkdtemp(dir=tmp_path)), 10**8)
        while not stop.is_set():
            record = reader_commits.live().get(KEY)
            if record is None:
                continue
            got = tree(cache.fetch(record["manifestKey"]))
            if got != generations[int(record["generationId"])]:
                problems.append(f"generation {record['generationId']} read as a mix")
            seen.append(int(record["generationId"]))

    def writer(parity: int) -> None:
        writer_commits = CommitLog(settings.bootstrap_servers or "", settings)
        try:
            for generation_id in range(1, 9):
                if generation_id % 2 == parity:
                    manifest, gen_dir = dirs[generation_id]
                    publish_generation(store, writer_commits, gen_dir, manifest)
        finally:
            writer_commits.close()

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(parity,)) for parity in (0, 1)]
    for thread in readers + writers:
        thread.start()
    for thread in writers:
        thread.join(timeout=300)
    time.sleep(1.0)
    stop.set()
    for thread in readers:
        thread.join(timeout=60)
    assert not problems, problems
    assert seen, "the readers never saw a live generation"
    final = commits.live()[KEY]
    assert tree(GenerationCache(store, tmp_path / "final", 10**8).fetch(final["manifestKey"])) \
        == generations[int(final["generationId"])]
    # The pointer never moved back within the line: the last word is the newest generation.
    assert int(final["generationId"]) == 8


def test_store_unavailable_fails_clearly_and_the_backlog_drains_once_it_is_back(
    s3proxy: object, commits: CommitLog, tmp_path: Path,
) -> None:
    """Its own S3Proxy (the session's stays up): stopped, publishes fail, restarted, drained."""
    if os.environ.get("USL_TEST_S3_ENDPOINT"):
        pytest.skip("needs the project's own S3Proxy to stop and restart it")
    home = tmp_path / "s3home"
    proxy_settings = Settings.from_env(home=home)
    info = ensure_s3proxy(proxy_settings)
    try:
        store = ObjectStore(StoreLocation("usl-outage", "p"), endpoint=info.endpoint, access_key=info.access_key,
                            secret_key=info.secret_key, connect_timeout=1.0, max_attempts=1)
        store.ensure_bucket()
        root = tmp_path / "idx"
        first, first_dir = commit_local(root, random_files(7), through=4)
        publish_generation(store, commits, first_dir, first)

        stop_s3proxy(proxy_settings)
        second, second_dir = commit_local(root, random_files(8), through=8)
        with pytest.raises(ObjectStoreUnavailableError, match="object store unavailable"):
            publish_generation(store, commits, second_dir, second)

        failures = usl_objectstore_publish_failures_total.labels(kind="text")
        before = failures._value.get()
        publisher = GenerationPublisher(store, commits, root, "text")
        publisher.offer(second)
        third, third_dir = commit_local(root, random_files(9), through=12)
        publisher.offer(third)  # replaces the waiting one: one publish per log drains the backlog
        deadline = time.monotonic() + 60
        while failures._value.get() < before + 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert failures._value.get() >= before + 2
        assert publisher.backlog == 1
        assert isinstance(publisher.last_error, ObjectStoreUnavailableError)
        assert commits.live()[KEY]["generationId"] == first.generation_id
        # The waiting generation is pinned locally, so the sink's GC keeps its files.
        GenerationStore(root, "default", "text").gc(keep_last=1)
        assert third_dir.is_dir()

        ensure_s3proxy(proxy_settings)
        assert publisher.wait_drained(timeout=120), publisher.last_error
        publisher.close()
        live = commits.live()[KEY]
        assert live["generationId"] == third.generation_id
        assert tree(GenerationCache(store, tmp_path / "cache", 10**7).fetch(live["manifestKey"])) == tree(third_dir)
    finally:
        stop_s3proxy(proxy_settings)


def test_a_newer_offer_never_unpins_the_generation_being_uploaded(
    make_object_store: Callable[..., ObjectStore], commits: CommitLog, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sink commits again while the publisher uploads: the upload's files stay pinned (the
    sink's GC must not delete them mid-read) until the upload ends, then the pin goes."""
    import sinks.objectstore.publish as publish_module

    store, root = make_object_store(), tmp_path / "idx"
    uploading, finish = threading.Event(), threading.Event()
    real_publish = publish_module.publish_generation

    def slow_publish(*args: object, **kwargs: object) -> object:
        uploading.set()
        assert finish.wait(60)
        return real_publish(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(publish_module, "publish_generation", slow_publish)
    publisher = GenerationPublisher(store, commits, root, "text")
    try:
        first, first_dir = commit_local(root, random_files(21), through=4)
        publisher.offer(first)
        assert uploading.wait(30)
        second, second_dir = commit_local(root, random_files(22), through=8)
        publisher.offer(second)
        GenerationStore(root, "default", "text").gc(keep_last=1)
        assert first_dir.is_dir() and second_dir.is_dir()  # both pinned: one uploading, one waiting
        finish.set()
        assert publisher.wait_drained(timeout=60), publisher.last_error
        GenerationStore(root, "default", "text").gc(keep_last=1)
        assert not first_dir.exists() and second_dir.is_dir()  # the upload's pin went with it
        assert commits.live()[KEY]["generationId"] == second.generation_id
        assert publisher.last_error is None
    finally:
        finish.set()
        publisher.close()


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=8),
       bound=st.integers(min_value=6, max_value=16))
def test_the_cache_stays_within_its_byte_bound(
    make_object_store: Callable[..., ObjectStore], sizes: list[int], bound: int,
) -> None:
    """Fetch generations of ``sizes`` KiB in turn into a cache of ``bound`` KiB: it never holds
    more, keeps the newest, and every fetch that fits is byte-identical."""
    store = make_object_store()
    # hypothesis runs many examples per test: a directory of their own each, removed after it.
    with tempfile.TemporaryDirectory(prefix="usl-cache-") as scratch:
        work = Path(scratch)
        cache = GenerationCache(store, work / "cache", bound * 1024 + 4096)
        for number, size in enumerate(sizes):
            manifest, gen_dir = commit_local(work / f"idx-{number}", {"seg.bin": os.urandom(size * 1024)},
                                             log_id=f"log{number}")
            # The cache reads manifests, not the commit point: upload without committing.
            remote = store.upload_generation(gen_dir, log_id=manifest.log_id, kind="text", shard=DEFAULT_SHARD,
                                             line="live", generation_id=1, built_through_seq=1)
            fetched = cache.fetch(remote.manifest_key)
            assert tree(fetched) == tree(gen_dir)
            assert cache.bytes_used() <= cache.max_bytes
            assert cache.cached()[-1] == fetched.name


def test_the_cache_never_evicts_a_pinned_generation(
    make_object_store: Callable[..., ObjectStore], tmp_path: Path,
) -> None:
    store = make_object_store()
    remotes = []
    for number in range(3):
        manifest, gen_dir = commit_local(tmp_path / f"idx{number}", {"seg.bin": os.urandom(40_000)},
                                         log_id=f"log{number}")
        remotes.append(store.upload_generation(gen_dir, log_id=manifest.log_id, kind="text", shard=DEFAULT_SHARD,
                                               line="live", generation_id=1, built_through_seq=1))
    cache = GenerationCache(store, tmp_path / "cache", 100_000)
    with cache.pinned(remotes[0].manifest_key) as held:
        cache.fetch(remotes[1].manifest_key)
        cache.fetch(remotes[2].manifest_key)  # evicts generation 1 (LRU), not the pinned 0
        assert held.is_dir() and cache.bytes_used() <= 100_000
        assert not cache.path(remotes[1].manifest_key).exists()
        with cache.pinned(remotes[2].manifest_key), pytest.raises(CacheFullError):
            cache.fetch(remotes[1].manifest_key)
    cache.fetch(remotes[1].manifest_key)  # once released, the old pin's generation may go
    assert not cache.path(remotes[0].manifest_key).exists()


def test_gc_never_deletes_a_pinned_generation(
    make_object_store: Callable[..., ObjectStore], commits: CommitLog, tmp_path: Path,
) -> None:
    store = make_object_store()
    published = []
    for number in range(4):
        manifest, gen_dir = commit_local(tmp_path / "idx", random_files(20 + number), through=number + 1)
        published.append((publish_generation(store, commits, gen_dir, manifest), tree(gen_dir)))
    pinned_remote, pinned_tree = published[0]
    pin = store.pin(pinned_remote.manifest_key, holder="planner-a", ttl_seconds=3600)
    expired = store.pin(published[1][0].manifest_key, holder="planner-b", ttl_seconds=-1)
    renewed = store.pin(published[2][0].manifest_key, holder="planner-c", ttl_seconds=-1)
    store.renew_pin(renewed, ttl_seconds=3600)  # an open cursor keeps its generation

    report = store.gc(commits.live_manifests(), keep_last=1, grace_seconds=0)
    assert set(report.deleted_manifests) == {published[1][0].manifest_key}
    assert report.deleted_pins == 1 and expired not in store.pins() and renewed in store.pins()
    store.unpin(renewed)
    report = store.gc(commits.live_manifests(), keep_last=1, grace_seconds=0)
    assert set(report.deleted_manifests) == {published[2][0].manifest_key}
    assert tree(GenerationCache(store, tmp_path / "c1", 10**7).fetch(pinned_remote.manifest_key)) == pinned_tree
    assert tree(GenerationCache(store, tmp_path / "c2", 10**7).fetch(published[3][0].manifest_key)) == published[3][1]
    with pytest.raises(NotPublishedError):
        store.load(published[1][0].manifest_key)

    store.unpin(pin)
    report = store.gc(commits.live_manifests(), keep_last=1, grace_seconds=0)
    assert report.deleted_manifests == (pinned_remote.manifest_key,)
    live_blobs = {f.sha256 for f in store.load(published[3][0].manifest_key).files}
    assert {key.rsplit("/", 1)[1] for key, _ in store.all_objects() if "/blobs/" in key} == live_blobs


def test_nothing_secret_looking_is_uploaded_that_the_local_generation_did_not_hold(
    make_object_store: Callable[..., ObjectStore], commits: CommitLog, s3proxy: object, tmp_path: Path,
) -> None:
    """Byte scan (the needles of tests/fixtures/secrets/needles.py) of every object and of the server's files."""
    from tests.fixtures.secrets.needles import NEEDLES, find_needles

    store = make_object_store()
    planted = NEEDLES[0]
    files = {"clean.bin": os.urandom(2048), "redacted.txt": b"a chunk with [REDACTED:aws-key] only",
             "control.txt": f"positive control {planted}".encode()}
    manifest, gen_dir = commit_local(tmp_path / "idx", files)
    publish_generation(store, commits, gen_dir, manifest)
    pin = store.pin(commits.live_manifests()[KEY], holder="planner-scan", ttl_seconds=60)

    local = {leak.split(": ", 1)[1] for path, body in tree(gen_dir).items() for leak in find_needles(body, path)}
    uploaded = {leak.split(": ", 1)[1] for key, body in store.all_objects() for leak in find_needles(body, key)}
    assert local, "the positive control was not found in the local generation"
    assert uploaded == local, f"uploaded beyond the local generation: {uploaded - local}"
    credentials = store._client._request_signer._credentials
    # A word of a few bytes turns up in compressed index data by chance (the host "vm" did, in
    # one object of one CI run): only words long enough to mean a leak are looked for.
    local_words = [word for word in (str(tmp_path), os.uname().nodename, credentials.access_key,
                                     credentials.secret_key) if len(word) >= 8]
    assert str(tmp_path) in local_words
    for key, body in store.all_objects():
        for word in local_words:
            assert word.encode() not in body, f"{key} holds {word[:8]}…"
    data_dir = getattr(s3proxy, "data_dir", "")
    if data_dir:
        prefix = Path(data_dir) / store.location.bucket / store.location.prefix
        on_disk = {leak.split(": ", 1)[1] for path in prefix.rglob("*") if path.is_file()
                   for leak in find_needles(path.read_bytes(), str(path))}
        assert on_disk == local
    store.unpin(pin)



def test_a_sink_with_an_object_store_publishes_what_it_commits(
    make_settings: Callable[..., Settings], s3proxy: S3ProxyInfo,
) -> None:
    """The real pipeline (worker + structured sink with USL_OBJECT_STORE): the live published
    generation is the sink's current local one, byte for byte; without the setting nothing is
    published (the embedded default)."""
    from deploy.testing import Stack
    from sinks.runner import SinkRunner, index_root
    from sinks.service import make_writer, pipeline_versions
    from streams.testing import append_events, interleave, session_events

    prefix = f"sink{uuid.uuid4().hex[:8]}"
    settings = make_settings(object_store=f"s3://usl-test/{prefix}", s3_endpoint=s3proxy.endpoint,
                             s3_access_key=s3proxy.access_key, s3_secret_key=s3proxy.secret_key)
    assert object_store_hook(make_settings(), settings.bootstrap_servers or "", "structured")[0] is None
    bootstrap = settings.bootstrap_servers or ""
    on_commit, close = object_store_hook(settings, bootstrap, "structured")
    assert on_commit is not None
    publisher = on_commit.__self__  # type: ignore[attr-defined]
    runner = SinkRunner(settings, bootstrap, make_writer("structured", settings),
                        versions=pipeline_versions(settings), on_commit=on_commit)
    stack = Stack(settings)
    thread = threading.Thread(target=runner.run, daemon=True)
    try:
        stack.worker()
        thread.start()
        head = append_events(settings, interleave(*[session_events(f"os-{i}", turns=2, seed=i) for i in range(3)]))
        local = GenerationStore(index_root(settings), "default", "structured")
        deadline = time.monotonic() + 120
        while (local.current() is None or local.current().built_through_seq < head):  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the structured sink fell behind"
            time.sleep(0.2)
        runner.stop()
        thread.join(timeout=60)
        assert publisher.wait_drained(timeout=120), publisher.last_error
        current = local.current()
        assert current is not None
        commits = CommitLog(bootstrap, settings)
        live = commits.live()[commit_key("default", "structured", DEFAULT_SHARD)]
        commits.close()
        assert (live["generationId"], live["builtThroughSeq"]) == (current.generation_id, current.built_through_seq)
        store = ObjectStore.from_settings(settings)
        fetched = GenerationCache(store, index_root(settings).parent / "cache", 10**8).fetch(live["manifestKey"])
        assert tree(fetched) == tree(local.generation_dir(current.generation_id))
    finally:
        runner.stop()
        thread.join(timeout=60)
        close()
        stack.close()


def test_a_restarted_sink_publishes_the_generation_it_committed_before_the_crash(
    make_settings: Callable[..., Settings], s3proxy: S3ProxyInfo,
) -> None:
    """Generations committed while no publisher ran (a crash after the local commit): the next
    start offers every log's current generation; an already published one is not uploaded again."""
    from sinks.runner import index_root

    settings = make_settings(object_store=f"s3://usl-test/restart{uuid.uuid4().hex[:8]}", s3_endpoint=s3proxy.endpoint,
                             s3_access_key=s3proxy.access_key, s3_secret_key=s3proxy.secret_key)
    bootstrap = settings.bootstrap_servers or ""
    root = index_root(settings)
    commit_local(root, random_files(40), log_id="alpha")
    alpha, alpha_dir = commit_local(root, random_files(41), log_id="alpha", through=2)
    beta, beta_dir = commit_local(root, random_files(42), log_id="beta")
    for attempt in range(2):
        on_commit, close = object_store_hook(settings, bootstrap, "text")
        publisher = on_commit.__self__  # type: ignore[union-attr]
        assert publisher.wait_drained(timeout=120), publisher.last_error
        close()
        commits = CommitLog(bootstrap, settings)
        live = commits.live()
        commits.close()
        assert {key: record["generationId"] for key, record in live.items()} == {
            commit_key("alpha", "text", DEFAULT_SHARD): alpha.generation_id,
            commit_key("beta", "text", DEFAULT_SHARD): beta.generation_id,
        }
        manifests = [key for key, _ in ObjectStore.from_settings(settings).all_objects() if "/manifests/" in key]
        assert len(manifests) == 2, (attempt, manifests)  # the second start published nothing new
    cache = GenerationCache(ObjectStore.from_settings(settings), root.parent / "cache", 10**8)
    assert tree(cache.fetch(live[commit_key("alpha", "text", DEFAULT_SHARD)]["manifestKey"])) == tree(alpha_dir)
    assert tree(cache.fetch(live[commit_key("beta", "text", DEFAULT_SHARD)]["manifestKey"])) == tree(beta_dir)


def test_publishers_racing_to_create_the_bucket_all_succeed(s3proxy: object) -> None:
    """Every kind's publisher of a sink checks the bucket at its first publish: on a fresh store
    they race to create it, and the losers' BucketAlreadyOwnedByYou is not a failure."""
    info = s3proxy
    assert isinstance(info, S3ProxyInfo)
    bucket = f"race-{uuid.uuid4().hex[:10]}"
    stores = [ObjectStore(StoreLocation(bucket, "p"), endpoint=info.endpoint, access_key=info.access_key,
                          secret_key=info.secret_key) for _ in range(6)]
    errors: list[BaseException] = []
    start = threading.Barrier(len(stores))

    def ensure(store: ObjectStore) -> None:
        start.wait()
        try:
            store.ensure_bucket()
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=ensure, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
