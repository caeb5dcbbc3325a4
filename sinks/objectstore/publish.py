"""Publishing committed local generations to the object store, from a sink.

:func:`publish_generation` is one publish: upload every file, then the remote manifest, then the
commit record. :class:`GenerationPublisher` runs publishes in a background thread for a sink
(``USL_OBJECT_STORE`` set): the sink's local commit stays the truth for the local planner, and a
store that is unavailable only grows the backlog (``usl_objectstore_backlog_generations``), which
drains with doubling back-off once the store answers again. Only the newest local generation of
each log is published; one that a newer commit overtook before it was published is skipped.
A generation waiting to be published is pinned locally, so the sink's GC keeps its files.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from sinks.exceptions import GenerationError
from sinks.generations import GenerationStore, Manifest, Pin
from sinks.objectstore.commits import CommitLog
from sinks.objectstore.exceptions import NotPublishedError, ObjectStoreError
from sinks.objectstore.store import ObjectStore, RemoteGeneration, commit_key
from streams.metrics import (
    usl_objectstore_backlog_generations,
    usl_objectstore_publish_failures_total,
)

__all__ = ["DEFAULT_SHARD", "GenerationPublisher", "publish_generation"]

log = logging.getLogger("usl.objectstore")

DEFAULT_SHARD = "shard-0-of-1"
_MAX_BACKOFF_SECONDS = 30.0
_PIN_TTL_SECONDS = 24 * 3600.0


def publish_generation(store: ObjectStore, commits: CommitLog, gen_dir: Path, manifest: Manifest, *,
                       shard: str = DEFAULT_SHARD) -> RemoteGeneration:
    """Upload a committed generation directory and make it the live one of its key.

    Files of the generation live now are not uploaded again; if the live pointer moved while
    this publish uploaded (another publisher of the key), they are checked again before the
    commit, since GC may collect what only the old live generation referenced.
    """
    key = commit_key(manifest.log_id, manifest.kind, shard)
    live_before = commits.live().get(key)
    if live_before is not None and live_before.get("line") == manifest.line \
            and int(live_before["generationId"]) >= manifest.generation_id:
        # Published already (a restarted sink offers its current generations again), or overtaken.
        return store.load(str(live_before["manifestKey"]))
    known: frozenset[str] = frozenset()
    if live_before is not None:
        try:
            known = frozenset(f.sha256 for f in store.load(str(live_before["manifestKey"])).files)
        except NotPublishedError:
            known = frozenset()

    def upload(known_blobs: frozenset[str]) -> RemoteGeneration:
        return store.upload_generation(
            gen_dir, log_id=manifest.log_id, kind=manifest.kind, shard=shard, line=manifest.line,
            generation_id=manifest.generation_id, built_through_seq=manifest.built_through_seq,
            known_blobs=known_blobs)

    remote = upload(known)
    if known and commits.live().get(key, {}).get("manifestKey") != (live_before or {}).get("manifestKey"):
        remote = upload(frozenset())
    commits.commit(remote)
    return remote


class GenerationPublisher:
    """Publishes a sink's committed generations in the background, with retries."""

    def __init__(self, store: ObjectStore, commits: CommitLog, index_root: Path, kind: str, *,
                 shard: str | None = None) -> None:
        self.store = store
        self.commits = commits
        self.index_root = Path(index_root)
        self.kind = kind
        # The sink shard's directory (shard-I-of-N), None for the unsharded default; both
        # publish under a shard in the commit key.
        self.shard = shard
        self._pending: dict[str, tuple[Manifest, Pin | None]] = {}
        # The generation being uploaded: its pin is released by the upload loop when it is done,
        # never by an offer that replaces it (the sink's GC would delete files mid-read).
        self._in_flight: Manifest | None = None
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._failures = 0
        self._bucket_ready = False
        self.published: list[RemoteGeneration] = []
        self.last_error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name=f"objectstore-{kind}", daemon=True)
        self._thread.start()

    def _store(self, manifest: Manifest) -> GenerationStore:
        return GenerationStore(self.index_root, manifest.log_id, manifest.kind, manifest.line, shard=self.shard)

    def offer(self, manifest: Manifest) -> None:
        """Queue a just-committed generation (the sink's ``on_commit``); it replaces an older
        one of the same log that is still waiting."""
        pin: Pin | None = self._store(manifest).pin(manifest.generation_id, ttl_seconds=_PIN_TTL_SECONDS,
                                                    holder=f"objectstore-publisher-{self.kind}")
        with self._lock:
            replaced = self._pending.get(manifest.log_id)
            self._pending[manifest.log_id] = (manifest, pin)
            usl_objectstore_backlog_generations.labels(kind=self.kind).set(len(self._pending))
            self._lock.notify_all()
            if replaced is not None and replaced[0] is self._in_flight:
                replaced = None  # the upload loop releases it once its upload ends
        if replaced is not None and replaced[1] is not None:
            replaced[1].release()

    def offer_current(self) -> int:
        """Offer the current generation of every log of this kind (at start-up: one committed
        before a crash may not have been published); already published ones cost one read.
        Returns how many were offered."""
        offered = 0
        for log_dir in sorted(p for p in self.index_root.iterdir() if (p / self.kind).is_dir()) \
                if self.index_root.is_dir() else []:
            try:
                manifest = GenerationStore(self.index_root, log_dir.name, self.kind, shard=self.shard).current()
            except GenerationError:
                continue
            if manifest is not None:
                self.offer(manifest)
                offered += 1
        return offered

    @property
    def backlog(self) -> int:
        with self._lock:
            return len(self._pending)

    def wait_drained(self, timeout: float) -> bool:
        """Until nothing waits to be published (True), or ``timeout`` seconds (False)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending and time.monotonic() < deadline:
                self._lock.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            return not self._pending

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        self._thread.join(timeout=30)
        self.commits.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                while not self._pending and not self._stop.is_set():
                    self._lock.wait(0.5)
                if self._stop.is_set():
                    return
                log_id, (manifest, pin) = next(iter(self._pending.items()))
                self._in_flight = manifest
            published = self._publish_one(manifest)
            with self._lock:
                self._in_flight = None
                still_pending = self._pending.get(log_id, (None,))[0] is manifest
                if published and still_pending:
                    del self._pending[log_id]
                if (published or not still_pending) and pin is not None:
                    pin.release()  # published, or replaced by a newer offer while uploading
                usl_objectstore_backlog_generations.labels(kind=self.kind).set(len(self._pending))
                self._lock.notify_all()
            if not published:
                delay = min(0.5 * 2 ** (self._failures - 1), _MAX_BACKOFF_SECONDS)
                self._stop.wait(delay)

    def _publish_one(self, manifest: Manifest) -> bool:
        started = time.monotonic()
        gen_dir = self._store(manifest).generation_dir(manifest.generation_id)
        try:
            if not self._bucket_ready:
                self.store.ensure_bucket()
                self._bucket_ready = True
            remote = publish_generation(self.store, self.commits, gen_dir, manifest,
                                        shard=self.shard or DEFAULT_SHARD)
        except (ObjectStoreError, OSError) as exc:
            self._failures += 1
            self.last_error = exc
            usl_objectstore_publish_failures_total.labels(kind=self.kind).inc()
            log.error("%s sink: publishing generation %d of log %s to the object store failed (%s); "
                      "the local generation stays live, retry %d", self.kind, manifest.generation_id,
                      manifest.log_id, exc, self._failures)
            return False
        if self._failures:
            log.warning("%s sink: object store publishing works again after %d failed attempt(s)",
                        self.kind, self._failures)
        self._failures = 0
        self.published.append(remote)
        log.info("%s sink: published generation %d of log %s in %.1fs", self.kind, manifest.generation_id,
                 manifest.log_id, time.monotonic() - started)
        return True
