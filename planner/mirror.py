"""A stateless planner replica's index root, mirrored from the object store.

With ``USL_PLANNER_SOURCE=object-store`` a planner shares no filesystem with the sinks. A
:class:`StoreMirror` follows the commit topic (:class:`sinks.objectstore.CommitLog`: one live
pointer per ``<log>/<kind>/<shard>``) and, for every pointer, fetches the generation through a
:class:`~sinks.objectstore.GenerationCache` (bounded in bytes) and materializes it in the
replica's own index root in the layout the planner already reads
(:mod:`sinks.generations`)::

    <root>/<log>/<kind>[/shard-I-of-N]/ACTIVE, <line>/CURRENT, <line>/gen-XXXXXXXX/

A generation directory is hard-linked from the cache into a hidden staging directory and
renamed into place whole; only then does the line's ``CURRENT`` (and the kind's ``ACTIVE``)
move to it, so a reader never sees a partial generation. Per line the newest ``keep_last``
generations stay; older ones go through :meth:`GenerationStore.gc`, which keeps every
generation a query or cursor of this replica has pinned. Every generation the mirror keeps
holds a pin in the store (renewed), so the store's GC never collects what this replica may
still read; a replica killed with SIGKILL leaves pins that expire after ``pin_ttl_seconds``.

:class:`MirrorFollower` gives the planner the watermarks of what the mirror has materialized
(the interface of :class:`sinks.watermarks.WatermarkFollower`), built from the generations'
own manifests and folded over shards with :func:`sinks.shards.fold_shards`: a planner on the
replica never names a generation the replica does not hold.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from sinks.exceptions import GenerationError
from sinks.generations import CURRENT_FILE, MANIFEST_FILE, GenerationStore, Manifest, link_or_copy
from sinks.objectstore.cache import GenerationCache
from sinks.objectstore.commits import CommitLog
from sinks.objectstore.exceptions import NotPublishedError, ObjectStoreError
from sinks.objectstore.publish import DEFAULT_SHARD
from sinks.objectstore.store import ObjectStore
from sinks.runner import index_root
from sinks.shards import fold_shards
from streams.exceptions import ConfigError
from streams.fsio import atomic_write, fsync_directory
from streams.l1 import follow_topic
from streams.settings import Settings

__all__ = ["MIRROR_COLLECT_SECONDS", "MIRROR_KEEP_LAST", "MIRROR_PIN_SECONDS", "MirrorFollower", "StoreMirror",
           "cache_dir"]

log = logging.getLogger("usl.planner.mirror")

MIRROR_KEEP_LAST = 2
"""Generations the mirror keeps per line (besides any a query or cursor has pinned)."""
MIRROR_PIN_SECONDS = 900.0
"""How long a store pin of the mirror holds a generation without renewal (renewed every third)."""
MIRROR_COLLECT_SECONDS = 60.0
"""How often the mirror collects every line it keeps, not only the one that just got a generation."""
_STAGING_PREFIX = ".mirror-"
_LOCK_FILE = ".mirror.lock"
_RETRY_SECONDS = 2.0


def cache_dir(settings: Settings) -> Path:
    """Where the replica's download cache lives: ``$USL_HOME/objectstore-cache``."""
    return Path(settings.home).resolve() / "objectstore-cache"


class StoreMirror:
    """Keeps ``root`` (default: ``index_root(settings)``) a copy of every live published generation."""

    def __init__(self, settings: Settings, bootstrap: str, *, root: Path | None = None,
                 cache_bytes: int | None = None, keep_last: int = MIRROR_KEEP_LAST,
                 pin_ttl_seconds: float = MIRROR_PIN_SECONDS, store: ObjectStore | None = None,
                 collect_seconds: float = MIRROR_COLLECT_SECONDS) -> None:
        if store is None and not settings.object_store:
            raise ConfigError("USL_PLANNER_SOURCE=object-store needs USL_OBJECT_STORE (s3://bucket/prefix) "
                              "and the store's USL_S3_* endpoint and keys")
        self.settings = settings
        self.root = Path(root) if root is not None else index_root(settings)
        self._lock_fd: int | None = _lock_root(self.root)  # before the cache sweeps its leftovers
        try:
            self.store = store or ObjectStore.from_settings(settings)
            self.commits = CommitLog(bootstrap, settings)
            self.cache = GenerationCache(self.store, cache_dir(settings),
                                         cache_bytes if cache_bytes is not None else settings.planner_cache_bytes)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self.keep_last = keep_last
        self.pin_ttl_seconds = pin_ttl_seconds
        self.collect_seconds = collect_seconds
        self._collected = time.monotonic()
        self.holder = f"planner-mirror-{socket.gethostname()}-{os.getpid()}"
        self._bootstrap = bootstrap
        self._pointers: dict[str, dict[str, Any]] = {}
        """commit key → the last commit record read from the topic."""
        self._done: dict[str, str] = {}
        """commit key → manifest key of the generation materialized for it."""
        self._store_pins: dict[tuple[str, str, int], str] = {}
        """(commit key, line, generation id) → the store pin that holds it."""
        self._pins_renewed = 0.0
        self._table: dict[tuple[str, str], dict[str, Any]] = {}
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.last_error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="store-mirror", daemon=True)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, *, timeout_seconds: float = 30.0) -> StoreMirror:
        """Start following, and wait up to ``timeout_seconds`` until every pointer live at
        start is materialized."""
        self.commits.ensure_topic()
        self._thread.start()
        self._ready.wait(timeout_seconds)
        return self

    @property
    def ready(self) -> bool:
        """True once every pointer live at start has been materialized."""
        return self._ready.is_set()

    def stop(self) -> None:
        """Stop following and release the store pins (a generation in use here stays on disk)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        for pin_key in list(self._store_pins.values()):
            try:
                self.store.unpin(pin_key)
            except ObjectStoreError:
                pass  # it expires on its own
        self._store_pins.clear()
        self.commits.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- what the planner reads ------------------------------------------------------------------

    def snapshot(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(log, kind) → the watermark of the generation materialized for it (shards folded)."""
        with self._changed:
            return fold_shards(self._table)

    def wait_for_change(self, timeout_seconds: float) -> None:
        with self._changed:
            self._changed.wait(timeout_seconds)

    # -- the loop ----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except Exception as exc:  # a broker restart must not end the replica: retry
                self.last_error = exc
                log.warning("following the commit topic failed (%s); retrying", exc)
                self._stop.wait(_RETRY_SECONDS)

    def _follow(self) -> None:
        for records, caught_up in follow_topic(self._bootstrap, self.commits.topic, client_id="usl-planner-mirror",
                                               stopped=self._stop.is_set):
            for record in records:
                self._apply(record.key, record.value)
            if caught_up:
                complete = self.sync()
                if complete and not self._ready.is_set():
                    self._ready.set()

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        if value is None:
            self._pointers.pop(key.decode(), None)
            return
        try:
            self._pointers[key.decode()] = orjson.loads(value)
        except orjson.JSONDecodeError:
            return

    def sync(self) -> bool:
        """Materialize every pointer not materialized yet, renew pins when due; True when
        everything is materialized (a failure is logged and retried on the next call)."""
        complete = True
        for key, record in list(self._pointers.items()):
            if self._done.get(key) == record.get("manifestKey"):
                continue
            try:
                self._materialize(key, record)
                self.last_error = None
            except (ObjectStoreError, GenerationError, OSError, KeyError, ValueError) as exc:
                complete = False
                self.last_error = exc
                log.error("mirroring %s generation %s failed (%s); retrying", key, record.get("generationId"), exc)
        if time.monotonic() - self._collected > self.collect_seconds:
            self._collect_all()
        if time.monotonic() - self._pins_renewed > self.pin_ttl_seconds / 3:
            self._renew_pins()
        if not complete:
            self._stop.wait(_RETRY_SECONDS)
        return complete

    # -- one generation --------------------------------------------------------------------------

    def _materialize(self, key: str, record: dict[str, Any]) -> None:
        log_id, kind, shard_name = key.split("/")
        shard = None if shard_name == DEFAULT_SHARD else shard_name
        line = str(record["line"])
        generation_id = int(record["generationId"])
        manifest_key = str(record["manifestKey"])
        store = GenerationStore(self.root, log_id, kind, line, shard=shard)
        # Pinned in the store first: GC must not collect blobs while they are fetched.
        pin_id = (key, line, generation_id)
        if pin_id not in self._store_pins:
            self._store_pins[pin_id] = self.store.pin(manifest_key, holder=self.holder,
                                                      ttl_seconds=self.pin_ttl_seconds)
        gen_dir = store.generation_dir(generation_id)
        if not self._whole(gen_dir, manifest_key):
            self._fetch_into(store, gen_dir, manifest_key)
        manifest = store.load(generation_id)
        current = store.current_id()
        if current is None or current < generation_id:
            atomic_write(store.line_dir / CURRENT_FILE, f"{generation_id}\n")
        if store.active_line() != line:
            store.set_active_line(line)
        watermark = _watermark(manifest, store)
        with self._changed:
            self._table[(log_id, kind if shard is None else f"{kind}/{shard}")] = watermark
            self._changed.notify_all()
        self._done[key] = manifest_key
        self._collect(key, store)
        log.info("mirrored %s generation %d (through seq %d)", key, generation_id, manifest.built_through_seq)

    def _whole(self, gen_dir: Path, manifest_key: str) -> bool:
        """A generation directory already here (a restart) holds every file at its size."""
        if not (gen_dir / MANIFEST_FILE).exists():
            return False
        remote = self.store.load(manifest_key)
        for entry in remote.files:
            try:
                if (gen_dir / entry.path).stat().st_size != entry.bytes:
                    return False
            except FileNotFoundError:
                return False
        return True

    def _fetch_into(self, store: GenerationStore, gen_dir: Path, manifest_key: str) -> None:
        store.line_dir.mkdir(parents=True, exist_ok=True)
        for leftover in store.line_dir.glob(f"{_STAGING_PREFIX}*"):  # of a mirror killed mid-copy
            shutil.rmtree(leftover, ignore_errors=True)
        staging = store.line_dir / f"{_STAGING_PREFIX}{gen_dir.name}-{uuid.uuid4().hex[:8]}"
        try:
            with self.cache.pinned(manifest_key) as cached:
                for path in sorted(cached.rglob("*")):
                    if path.is_file():
                        target = staging / path.relative_to(cached)
                        target.parent.mkdir(parents=True, exist_ok=True)
                        link_or_copy(path, target)
                        # Shared with the cache (and the next generation) by hard links:
                        # nothing may write to it again, as to a sink's committed files, and
                        # only its owner reads it (docs/security.md).
                        target.chmod(0o400)
            if gen_dir.exists():  # an incomplete copy (a host crash): replaced whole
                shutil.rmtree(gen_dir)
            os.rename(staging, gen_dir)
            fsync_directory(store.line_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _collect(self, key: str, store: GenerationStore) -> None:
        """Drop generations of the line beyond ``keep_last`` that nothing pins here, and the
        store pins of what is gone."""
        store.gc(keep_last=self.keep_last)
        on_disk = set(store.generation_ids())
        for pin_id in [p for p in self._store_pins if p[0] == key and p[1] == store.line and p[2] not in on_disk]:
            try:
                self.store.unpin(self._store_pins.pop(pin_id))
            except ObjectStoreError:
                pass  # it expires on its own

    def _collect_all(self) -> None:
        """Collect every line mirrored here. A line is collected when it gets a generation, but
        the pins of this replica's queries and cursors also expire while their log stays quiet;
        until a new generation came, what they held stayed on disk and pinned in the store (as
        a sink's lines did: docs/operations.md, "Generations and pins")."""
        for key in list(self._done):
            record = self._pointers.get(key)
            if record is None:
                continue
            log_id, kind, shard_name = key.split("/")
            store = GenerationStore(self.root, log_id, kind, str(record["line"]),
                                    shard=None if shard_name == DEFAULT_SHARD else shard_name)
            try:
                self._collect(key, store)
            except (GenerationError, OSError) as exc:
                log.warning("collecting the mirror of %s failed (%s); retrying", key, exc)
        self._collected = time.monotonic()

    def _renew_pins(self) -> None:
        for pin_id, pin_key in list(self._store_pins.items()):
            try:
                self.store.renew_pin(pin_key, ttl_seconds=self.pin_ttl_seconds)
            except NotPublishedError:
                # Expired and collected meanwhile (the replica was stopped too long): pin again.
                record = self._pointers.get(pin_id[0])
                manifest_key = self._done.get(pin_id[0])
                if record is not None and manifest_key is not None and int(record["generationId"]) == pin_id[2]:
                    self._store_pins[pin_id] = self.store.pin(manifest_key, holder=self.holder,
                                                              ttl_seconds=self.pin_ttl_seconds)
                else:
                    del self._store_pins[pin_id]
            except ObjectStoreError as exc:
                log.warning("renewing the store pin of %s failed (%s); retrying", pin_id[0], exc)
                return
        self._pins_renewed = time.monotonic()


def _lock_root(root: Path) -> int:
    """One mirror per index root: an exclusive ``flock`` held for the mirror's life."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise ConfigError(f"another planner replica mirrors into {root}; give each replica its own USL_HOME") from exc
    return fd


def _watermark(manifest: Manifest, store: GenerationStore) -> dict[str, Any]:
    """The watermark record of a materialized generation, shaped like a sink's
    (:func:`sinks.runner.watermark_of`), its manifest path local to this replica."""
    record: dict[str, Any] = {
        "logId": manifest.log_id, "kind": manifest.kind, "line": manifest.line,
        "generationId": manifest.generation_id, "builtThroughSeq": manifest.built_through_seq,
        "manifest": str(store.manifest_path(manifest.generation_id)), "committedAt": manifest.created_at,
        "versions": {"chunker": manifest.chunker, "redactionPolicy": manifest.redaction_policy_hash,
                     "embedding": manifest.embedding},
    }
    if store.shard is not None:
        record["shard"] = store.shard
    return record


class MirrorFollower:
    """The watermarks of what a :class:`StoreMirror` materialized, with the interface of
    :class:`sinks.watermarks.WatermarkFollower`; it owns the mirror (``stop`` stops it)."""

    def __init__(self, mirror: StoreMirror) -> None:
        self.mirror = mirror

    def start(self, *, timeout_seconds: float = 30.0) -> MirrorFollower:
        self.mirror.start(timeout_seconds=timeout_seconds)
        return self

    def snapshot(self) -> dict[tuple[str, str], dict[str, Any]]:
        return self.mirror.snapshot()

    def wait_for_change(self, timeout_seconds: float) -> None:
        self.mirror.wait_for_change(timeout_seconds)

    def stop(self) -> None:
        self.mirror.stop()
