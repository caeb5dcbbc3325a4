"""A local cache of published generations, bounded in bytes.

A planner replica without the sinks' filesystem fetches the generations it reads into
``<dir>/<manifest name>/`` (byte-identical to the sink's generation directory, every file
checked against its SHA-256). Files a cached generation already holds are hard-linked, not
downloaded again, and counted once. When a fetch would pass ``max_bytes``, whole generations
are evicted, least recently used first, except those pinned by an in-flight query
(:meth:`GenerationCache.pinned`); if only pinned ones are left, the fetch fails with
:class:`CacheFullError` rather than exceeding the bound.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sinks.objectstore.exceptions import CacheFullError
from sinks.objectstore.store import ObjectStore, RemoteGeneration

__all__ = ["GenerationCache"]

_META_DIR = ".meta"
_TMP_PREFIX = ".fetch-"


class GenerationCache:
    """Fetched generations under ``directory``, at most ``max_bytes`` on disk."""

    def __init__(self, store: ObjectStore, directory: Path, max_bytes: int) -> None:
        self.store = store
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._used: dict[str, float] = {}
        self._pins: Counter[str] = Counter()
        self._meta = self.directory / _META_DIR
        self._meta.mkdir(exist_ok=True)
        for leftover in self.directory.glob(f"{_TMP_PREFIX}*"):
            shutil.rmtree(leftover, ignore_errors=True)
        # A generation is cached once its record is in .meta (written after its directory).
        for cached in self.directory.iterdir():
            meta = self._meta / f"{cached.name}.json"
            if cached.name != _META_DIR and not cached.name.startswith(".") and meta.exists():
                self._used[cached.name] = meta.stat().st_mtime

    @staticmethod
    def _name(manifest_key: str) -> str:
        # <log>/<kind>/<shard>/gen-N-nonce.json -> one directory name per publish
        parts = manifest_key.rsplit("/", 4)[-4:]
        return "--".join(parts).removesuffix(".json")

    def path(self, manifest_key: str) -> Path:
        return self.directory / self._name(manifest_key)

    def bytes_used(self) -> int:
        """Bytes of every cached file, each inode counted once (hard links share one)."""
        seen: set[tuple[int, int]] = set()
        total = 0
        for path in self.directory.rglob("*"):
            if _META_DIR in path.relative_to(self.directory).parts[:1]:
                continue
            st = path.lstat()
            if path.is_file() and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
        return total

    def cached(self) -> list[str]:
        """Names of the cached generations, least recently used first."""
        with self._lock:
            return sorted(self._used, key=lambda name: self._used[name])

    @contextmanager
    def pinned(self, manifest_key: str) -> Iterator[Path]:
        """Fetch (if needed) and hold a generation in the cache for the block's duration."""
        name = self._name(manifest_key)
        with self._lock:
            self._pins[name] += 1
        try:
            yield self.fetch(manifest_key)
        finally:
            with self._lock:
                self._pins[name] -= 1
                if self._pins[name] <= 0:
                    del self._pins[name]

    def fetch(self, manifest_key: str) -> Path:
        """The local directory of a published generation, downloaded on first use."""
        name = self._name(manifest_key)
        target = self.directory / name
        with self._lock:
            if name in self._used:
                self._touch(name)
                return target
            remote = self.store.load(manifest_key)
            self._make_room(remote, name)
            staging = self.directory / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
            try:
                self.store.download(remote, staging, link_from=self._local_blobs())
                staging.rename(target)
                files = {f.sha256: f.path for f in remote.files}
                (self._meta / f"{name}.json").write_text(json.dumps({"manifestKey": manifest_key, "files": files}))
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            self._touch(name)
            return target

    def _touch(self, name: str) -> None:
        self._used[name] = time.time()
        try:
            (self._meta / f"{name}.json").touch()
        except OSError:
            pass

    def _local_blobs(self) -> dict[str, Path]:
        """sha256 → a cached file with that content (read from the cached manifests)."""
        found: dict[str, Path] = {}
        for name in self._used:
            try:
                files = json.loads((self._meta / f"{name}.json").read_text())["files"]
            except (OSError, ValueError, KeyError):
                continue
            for sha, rel in files.items():
                found.setdefault(sha, self.directory / name / rel)
        return found

    def _make_room(self, remote: RemoteGeneration, name: str) -> None:
        needed = remote.total_bytes
        if needed > self.max_bytes:
            raise CacheFullError(f"generation {name} needs {needed} bytes, more than the cache's {self.max_bytes}")
        for victim in self.cached():
            if self.bytes_used() + needed <= self.max_bytes:
                return
            if self._pins.get(victim):
                continue
            (self._meta / f"{victim}.json").unlink(missing_ok=True)
            shutil.rmtree(self.directory / victim, ignore_errors=True)
            self._used.pop(victim, None)
        if self.bytes_used() + needed > self.max_bytes:
            raise CacheFullError(f"the cache cannot hold generation {name} ({needed} bytes) within "
                                 f"{self.max_bytes} bytes: the other cached generations are pinned")
