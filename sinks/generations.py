"""Immutable index generations: manifests, the atomic CURRENT switch, pins and GC.

A generation is a directory of files that never change once committed, plus the
``manifest.json`` that lists them with their SHA-256. Every sink (text, vector, structured,
analytics, tool results) writes its index as a sequence of generations, so a reader always
sees one complete, verified state and a crash never leaves a half-written index visible.

Layout (``root`` is usually ``$USL_HOME/indexes``)::

    <root>/<logId>/<kind>/ACTIVE                      name of the live line ("live" if absent)
    <root>/<logId>/<kind>/<line>/CURRENT              id of the line's current generation
    <root>/<logId>/<kind>/<line>/gen-00000012/        the generation's files + manifest.json
    <root>/<logId>/<kind>/<line>/pins/*.pin           readers' pins (JSON, with an expiry)
    <root>/<logId>/<kind>/<line>/.staging-gen-...     the generation being written (one writer)
    <root>/<logId>/<kind>/<line>/.writer.lock         flock held by the line's writer
    <root>/<logId>/<kind>/<line>/RETIRED              the line was replaced (``usl rebuild``)

A sink shard (:mod:`sinks.shards`) has the same layout one level down, in
``<root>/<logId>/<kind>/shard-I-of-N/`` (``GenerationStore(..., shard="shard-I-of-N")``); a
shard directory is never a line.

A line replaced by a rebuild is *retired* (:meth:`GenerationStore.retire`); once nothing can
read it any more, :mod:`sinks.retired` deletes it whole: :meth:`GenerationStore.take_line_away`
renames it out of the way under its pin lock, so a reader either pinned it first (and the line
stays) or finds it gone (GenerationError, never a half-deleted line).

A new generation reuses the files of the previous one by hard-linking them (:func:`clone_into`),
so deleting an old generation directory never breaks a newer one. ``SegmentRef.path`` is
relative to the generation directory, with ``/`` separators.

Commit protocol (:meth:`GenerationStore.commit`): hash and fsync the new files, write
``manifest.json``, rename the staging directory to ``gen-<id>``, verify it, then replace
``CURRENT`` atomically (temp file, fsync, ``os.replace``, fsync of the directory). A crash at
any point leaves ``CURRENT`` on the previous, complete generation; the next :meth:`begin`
removes the leftovers.

One redaction policy per line: a commit whose ``redactionPolicyHash`` differs from its parent
generation's is refused (:class:`RedactionPolicyMismatchError`, counted as
``usl_sink_failures_total{reason="policy_mismatch"}``), because a new generation hard-links its
parent's files and would otherwise serve text redacted under two policies as one index. An
index built under another policy is rebuilt into a new line (``usl rebuild KIND``).
:func:`pipeline_difference` is the rule that tells whether a line was built under another
policy or chunker than a process would write: a sink does not commit to such a line (it stalls
that line alone, :mod:`sinks.runner`), and ``usl rebuild KIND`` refuses to leave a log's
chunk-keyed kinds on different sides of it.

Integrity: ``manifest.json`` carries ``manifestSha256``, the SHA-256 of its own canonical
text without that field, so a damaged manifest is refused on load
(:class:`ManifestVerificationError`), like a damaged segment is by :meth:`GenerationStore.verify`.
:class:`FileDigests` remembers files already hashed, so re-verifying a generation that shares
most files with a verified one hashes only what is new or was modified since.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from sinks.exceptions import (
    GenerationError,
    GenerationLockedError,
    ManifestVerificationError,
)
from sinks.shards import SHARD_DIR_RE as _SHARD_RE
from streams.fsio import atomic_write, fsync_directory

__all__ = [
    "ACTIVE_FILE",
    "CURRENT_FILE",
    "DEFAULT_LINE",
    "LINE_TRASH_PREFIX",
    "MANIFEST_FILE",
    "MAX_CHUNK_SEQ",
    "RETIRED_FILE",
    "FileDigests",
    "GenerationStore",
    "Manifest",
    "Pin",
    "RedactionPolicyMismatchError",
    "SegmentRef",
    "chunk_seq_bound",
    "clone_into",
    "link_or_copy",
    "pipeline_difference",
    "read_current",
    "sha256_file",
]

DEFAULT_LINE = "live"
ACTIVE_FILE = "ACTIVE"
CURRENT_FILE = "CURRENT"
MANIFEST_FILE = "manifest.json"
RETIRED_FILE = "RETIRED"
#: Prefix of a retired line renamed away for deletion (in the kind or shard directory).
LINE_TRASH_PREFIX = ".trash-line-"
_PINS_DIR = "pins"


class RedactionPolicyMismatchError(GenerationError):
    """A commit would put generations of two redaction policies in one line."""
_LOCK_FILE = ".writer.lock"
_STAGING_PREFIX = ".staging-gen-"
_TRASH_PREFIX = ".trash-gen-"
_GEN_RE = re.compile(r"^gen-(\d{8,})$")
_LINE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# A trash directory older than this was left by a GC that crashed; younger ones may belong to
# a GC that is about to rename it back because a reader pinned it meanwhile.
_TRASH_GRACE_SECONDS = 300.0
_HASH_BLOCK = 1 << 20
_CHECKSUM_FIELD = "manifestSha256"
_MANIFEST_KEYS = frozenset({
    "kind", "logId", "line", "generationId", "builtThroughSeq", "schemaVersion", "aspVersion",
    "chunker", "embedding", "redactionPolicyHash", "segments", "sourceOffsets", "progress",
    "chunkCount", "parentGenerationId", "createdAt", "extra",
})


@dataclass(frozen=True)
class SegmentRef:
    """One immutable file of a generation: path relative to the generation dir, hash, size."""

    path: str
    sha256: str
    bytes: int
    rows: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "bytes": self.bytes, "rows": self.rows}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SegmentRef:
        return cls(
            path=str(data["path"]),
            sha256=str(data["sha256"]),
            bytes=int(data["bytes"]),
            rows=None if data.get("rows") is None else int(data["rows"]),
        )


@dataclass(frozen=True)
class Manifest:
    """What a generation is: its identity, what it was built from, and its files.

    ``source_offsets`` maps topic → partition → next offset to read, so a sink resumes exactly
    where its current generation ends; ``progress`` maps chunks-topic partition → the last
    progress-marker seq consumed. :meth:`GenerationStore.commit` fills in ``line``,
    ``generation_id``, ``parent_generation_id``, ``segments`` and ``created_at``.
    """

    kind: str
    log_id: str
    line: str
    generation_id: int
    built_through_seq: int
    schema_version: str
    asp_version: str
    chunker: dict[str, Any]
    embedding: dict[str, Any] | None
    redaction_policy_hash: str
    segments: tuple[SegmentRef, ...] = ()
    source_offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    progress: dict[int, int] = field(default_factory=dict)
    chunk_count: int = 0
    parent_generation_id: int | None = None
    created_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The manifest as a JSON-ready dict with camelCase keys (integer keys as strings)."""
        return {
            "kind": self.kind,
            "logId": self.log_id,
            "line": self.line,
            "generationId": self.generation_id,
            "builtThroughSeq": self.built_through_seq,
            "schemaVersion": self.schema_version,
            "aspVersion": self.asp_version,
            "chunker": self.chunker,
            "embedding": self.embedding,
            "redactionPolicyHash": self.redaction_policy_hash,
            "segments": [s.to_json() for s in self.segments],
            "sourceOffsets": {
                topic: {str(p): int(o) for p, o in sorted(parts.items())}
                for topic, parts in sorted(self.source_offsets.items())
            },
            "progress": {str(p): int(s) for p, s in sorted(self.progress.items())},
            "chunkCount": self.chunk_count,
            "parentGenerationId": self.parent_generation_id,
            "createdAt": self.created_at,
            "extra": self.extra,
        }

    def dumps(self) -> str:
        """Canonical JSON text, as written to ``manifest.json`` (with its own checksum)."""
        body = self.to_json()
        return _canonical({**body, _CHECKSUM_FIELD: _manifest_checksum(body)})

    @classmethod
    def from_json(cls, data: dict[str, Any] | str | bytes) -> Manifest:
        """Parse :meth:`to_json` output (a dict, or its JSON text). Text whose
        ``manifestSha256`` does not match its content raises ManifestVerificationError.

        Text parsed lately is answered from memory, keyed by its very bytes (a damaged file is
        other bytes): a commit reads its parent's manifest three times (verify, parent, clone),
        each a parse and a canonical encoding for the checksum."""
        if not isinstance(data, str | bytes):
            return cls._parsed(data)
        key = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
        with _PARSED_LOCK:
            found = _PARSED.get(key)
            if found is not None:
                _PARSED.move_to_end(key)
                return found
        manifest = cls._parsed(data)
        with _PARSED_LOCK:
            _PARSED[key] = manifest
            while len(_PARSED) > _PARSED_SIZE:
                _PARSED.popitem(last=False)
        return manifest

    @classmethod
    def _parsed(cls, data: dict[str, Any] | str | bytes) -> Manifest:
        try:
            obj = json.loads(data) if isinstance(data, str | bytes) else data
        except ValueError as exc:  # also UnicodeDecodeError: a flipped byte may break UTF-8
            raise ManifestVerificationError(f"manifest is not valid JSON: {exc}") from exc
        if isinstance(obj, dict) and _CHECKSUM_FIELD in obj:
            obj = dict(obj)
            stated = obj.pop(_CHECKSUM_FIELD)
            if stated != _manifest_checksum(obj):
                raise ManifestVerificationError("manifest does not match its manifestSha256 (damaged)")
        elif isinstance(obj, dict) and set(obj) - _MANIFEST_KEYS:
            # Manifests written before the checksum have none; a damaged checksum key shows
            # up as a key no manifest has.
            raise ManifestVerificationError(f"manifest has unknown keys {sorted(set(obj) - _MANIFEST_KEYS)}")
        try:
            parent = obj.get("parentGenerationId")
            return cls(
                kind=str(obj["kind"]),
                log_id=str(obj["logId"]),
                line=str(obj["line"]),
                generation_id=int(obj["generationId"]),
                built_through_seq=int(obj["builtThroughSeq"]),
                schema_version=str(obj["schemaVersion"]),
                asp_version=str(obj["aspVersion"]),
                chunker=dict(obj["chunker"]),
                embedding=None if obj.get("embedding") is None else dict(obj["embedding"]),
                redaction_policy_hash=str(obj["redactionPolicyHash"]),
                segments=tuple(SegmentRef.from_json(s) for s in obj.get("segments", ())),
                source_offsets={
                    str(topic): {int(p): int(o) for p, o in parts.items()}
                    for topic, parts in obj.get("sourceOffsets", {}).items()
                },
                progress={int(p): int(s) for p, s in obj.get("progress", {}).items()},
                chunk_count=int(obj.get("chunkCount", 0)),
                parent_generation_id=None if parent is None else int(parent),
                created_at=float(obj.get("createdAt", 0.0)),
                extra=dict(obj.get("extra") or {}),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise GenerationError(f"malformed manifest: {exc!r}") from exc


@contextlib.contextmanager
def _pins_lock(pins_dir: Path, *, exclusive: bool) -> Iterator[None]:
    """A line's pin lock (``pins/gc.lock``): shared while a reader pins or renews, exclusive
    while GC sweeps pins and decides what to move away. flock: a holder killed with -9 releases
    it."""
    pins_dir.mkdir(exist_ok=True)  # not parents: a removed line must stay removed
    descriptor = os.open(pins_dir / "gc.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(descriptor)


#: Manifest texts parsed lately (Manifest.from_json), least recently used first. Manifests are
#: never changed once made, so one object serves every reader of the same bytes.
_PARSED: OrderedDict[bytes, Manifest] = OrderedDict()
_PARSED_LOCK = threading.Lock()
_PARSED_SIZE = 32


class Pin:
    """A reader's claim on a generation: GC keeps the generation until the pin is released or
    expires. The pin is a file, so it protects the generation from GC in every process."""

    def __init__(self, path: Path, generation_id: int, holder: str, expires_at: float) -> None:
        self.path = path
        self.generation_id = generation_id
        self.holder = holder
        self.expires_at = expires_at

    def renew(self, ttl_seconds: float) -> None:
        """Extend the pin to ``ttl_seconds`` from now (e.g. while a cursor stays open)."""
        # Under the shared pin lock, as pinning: GC sweeps expired pins and moves generations
        # under the exclusive one, so a pin renewed as it expired is either kept (and so its
        # generation) or found gone here, never deleted after this write.
        try:
            with _pins_lock(self.path.parent, exclusive=False):
                generation = self.path.parent.parent / f"gen-{self.generation_id:08d}" / MANIFEST_FILE
                if not self.path.exists() or not generation.exists():
                    raise GenerationError(f"pin {self.path.name} was released or collected")
                self.expires_at = time.time() + _positive_ttl(ttl_seconds)
                self._write()
        except FileNotFoundError as exc:  # the line itself was removed
            raise GenerationError(f"pin {self.path.name} was collected with its line") from exc

    def release(self) -> None:
        """Drop the pin; releasing twice is harmless."""
        self.path.unlink(missing_ok=True)

    @property
    def active(self) -> bool:
        return self.path.exists() and self.expires_at > time.time()

    def _write(self) -> None:
        body = {
            "generationId": self.generation_id,
            "holder": self.holder,
            "expiresAt": self.expires_at,
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        atomic_write(self.path, json.dumps(body, sort_keys=True) + "\n", durable=False)

    def __enter__(self) -> Pin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Pin(generation_id={self.generation_id}, holder={self.holder!r}, expires_at={self.expires_at:.3f})"


class GenerationStore:
    """The generations of one index kind of one log, on one line (default: the ACTIVE line).

    One writer per line at a time (enforced with a ``flock`` taken by :meth:`begin` and released
    by :meth:`commit` or :meth:`abort`); any number of readers in any process.
    """

    def __init__(self, root: Path, log_id: str, kind: str, line: str | None = None, *,
                 shard: str | None = None) -> None:
        self.root = Path(root)
        self.log_id = _check_component("log id", log_id)
        self.kind = _check_component("index kind", kind)
        self.shard = shard
        self.kind_dir = self.root / log_id / kind
        if shard is not None:
            if not _SHARD_RE.match(shard):
                raise GenerationError(f"invalid shard name {shard!r} (shard-I-of-N)")
            self.kind_dir = self.kind_dir / shard
        self.line = _check_line(line) if line is not None else _read_active(self.kind_dir)
        self.line_dir = self.kind_dir / self.line
        self._lock_fd: int | None = None
        self._staging: Path | None = None

    # -- reading ---------------------------------------------------------------------------

    def generation_dir(self, generation_id: int) -> Path:
        return self.line_dir / f"gen-{generation_id:08d}"

    def manifest_path(self, generation_id: int) -> Path:
        return self.generation_dir(generation_id) / MANIFEST_FILE

    def current_id(self) -> int | None:
        """The id CURRENT points at, or None before the first commit."""
        try:
            text = (self.line_dir / CURRENT_FILE).read_text().strip()
        except FileNotFoundError:
            return None
        if not text.isdigit():
            raise GenerationError(f"{self.line_dir / CURRENT_FILE} is malformed: {text!r}")
        return int(text)

    def current(self) -> Manifest | None:
        """The manifest of the current generation, or None before the first commit."""
        generation_id = self.current_id()
        return None if generation_id is None else self.load(generation_id)

    def load(self, generation_id: int) -> Manifest:
        """The manifest of a committed generation of this line."""
        path = self.manifest_path(generation_id)
        try:
            return Manifest.from_json(path.read_bytes())
        except FileNotFoundError as exc:
            raise GenerationError(f"generation {generation_id} of {self._what()} does not exist") from exc

    def generation_ids(self) -> list[int]:
        """Ids of the committed generation directories still on disk, ascending."""
        current = self.current_id()
        if current is None:
            return []
        return [g for g in self._dir_ids() if g <= current]

    def verify(self, manifest: Manifest, *, digests: FileDigests | None = None) -> None:
        """Check every file of ``manifest`` exists with its size and SHA-256, and that the
        generation's ``manifest.json`` is this manifest. Raises ManifestVerificationError.
        With ``digests``, files hashed before and not modified since are not hashed again."""
        line_dir = self.kind_dir / manifest.line if manifest.line else self.line_dir
        gen_dir = line_dir / f"gen-{manifest.generation_id:08d}"
        try:
            on_disk = Manifest.from_json((gen_dir / MANIFEST_FILE).read_bytes())
        except (FileNotFoundError, GenerationError) as exc:
            raise ManifestVerificationError(f"{gen_dir}: manifest unreadable: {exc}") from exc
        if on_disk != manifest:
            raise ManifestVerificationError(f"{gen_dir}: manifest.json differs from the given manifest")
        _verify_segments(gen_dir, manifest.segments, hash_paths=None, digests=digests)

    # -- writing ---------------------------------------------------------------------------

    def begin(self) -> Path:
        """Take the line's writer lock and return a fresh, empty staging dir for the next
        generation (current id + 1). Leftovers of a crashed writer are removed first."""
        self._acquire_lock()
        try:
            self._remove_leftovers()
            generation_id = (self.current_id() or 0) + 1
            staging = self.line_dir / f"{_STAGING_PREFIX}{generation_id:08d}"
            staging.mkdir()
        except BaseException:
            self._release_lock()
            raise
        self._staging = staging
        return staging

    def abort(self) -> None:
        """Discard the staging dir begun by this store and release the writer lock."""
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        self._release_lock()

    def commit(self, staging_dir: Path, manifest: Manifest, *, digests: FileDigests | None = None) -> Manifest:
        """Turn ``staging_dir`` (from :meth:`begin`) into the new current generation.

        Every file under the staging dir becomes a segment: refs given in
        ``manifest.segments`` are checked against their files (and keep their ``rows``), the
        rest are hashed; files hard-linked from the parent generation reuse its hashes. The
        store sets ``line``, ``generation_id``, ``parent_generation_id`` and ``created_at``
        (if 0). Returns the manifest as committed. On any error the writer lock is released
        and CURRENT is unchanged. With ``digests``, a new file hashed before (a background
        merge hashes its output where it built it) is not hashed again.
        """
        staging_dir = Path(staging_dir)
        if self._staging is None or staging_dir.resolve() != self._staging.resolve():
            raise GenerationError("commit() takes the staging directory that begin() returned")
        if manifest.kind != self.kind or manifest.log_id != self.log_id:
            raise GenerationError(
                f"manifest is for {manifest.log_id}/{manifest.kind}, store is {self.log_id}/{self.kind}"
            )
        try:
            committed = self._commit(staging_dir, manifest, digests)
        finally:
            self._staging = None
            self._release_lock()
        return committed

    def _commit(self, staging_dir: Path, manifest: Manifest, digests: FileDigests | None) -> Manifest:
        generation_id = int(staging_dir.name[len(_STAGING_PREFIX):])
        parent_id = self.current_id()
        if parent_id is not None and parent_id >= generation_id:
            raise GenerationError(f"{self._what()}: generation {parent_id} was committed meanwhile")
        parent = self.load(parent_id) if parent_id is not None else None
        if parent is not None and parent.redaction_policy_hash != manifest.redaction_policy_hash:
            # Imported here: generations stay importable without the metrics stack (a fast
            # start matters to the crash tests that spawn writers).
            from streams.metrics import usl_sink_failures_total

            usl_sink_failures_total.labels(kind=self.kind, reason="policy_mismatch").inc()
            raise RedactionPolicyMismatchError(
                f"{self._what()}: generation {parent_id} was built under redaction policy "
                f"{parent.redaction_policy_hash or '(none)'}, this commit under "
                f"{manifest.redaction_policy_hash or '(none)'}; one line never mixes policies: rebuild "
                f"the index from L1 into a new line (usl rebuild {self.kind}), see docs/redaction.md"
            )
        segments, fresh = _segments_for(
            staging_dir, manifest.segments,
            parent.segments if parent else (),
            self.generation_dir(parent_id) if parent_id is not None else None, digests,
        )
        final = replace(
            manifest,
            line=self.line,
            generation_id=generation_id,
            parent_generation_id=parent_id,
            segments=segments,
            created_at=manifest.created_at or time.time(),
        )
        for rel in fresh:
            _fsync_file(staging_dir / rel)
        atomic_write(staging_dir / MANIFEST_FILE, final.dumps())
        for directory in _dirs_bottom_up(staging_dir):
            fsync_directory(directory)
        gen_dir = self.generation_dir(generation_id)
        if gen_dir.exists():  # renamed by a writer that died before switching CURRENT
            shutil.rmtree(gen_dir)
        os.rename(staging_dir, gen_dir)
        fsync_directory(self.line_dir)
        _verify_segments(gen_dir, segments, hash_paths=set(fresh), digests=digests)
        for rel in fresh:
            # Committed files are shared by hard links with later generations: nothing may
            # ever write to them again. Nor may another user read them: 0444 undid the 0600
            # that the umask of every USL process gives index files (docs/security.md).
            (gen_dir / rel).chmod(stat.S_IRUSR)
        atomic_write(self.line_dir / CURRENT_FILE, f"{generation_id}\n")
        return final

    # -- pins and GC -------------------------------------------------------------------------

    def pin(self, generation_id: int, *, ttl_seconds: float, holder: str) -> Pin:
        """Keep ``generation_id`` from GC until released or ``ttl_seconds`` from now."""
        pins_dir = self.line_dir / _PINS_DIR
        safe_holder = re.sub(r"[^A-Za-z0-9_.-]", "_", holder)[:64] or "anon"
        path = pins_dir / f"{generation_id:08d}.{safe_holder}.{uuid.uuid4().hex[:16]}.pin"
        pin = Pin(path, generation_id, holder, time.time() + _positive_ttl(ttl_seconds))
        # GC decides and moves generations away under the exclusive lock, pinning happens under
        # the shared one: either GC ran first and we see the directory gone here, or it sees our
        # pin and never moves the generation (once moved, even for a moment, a reader holding a
        # pin found its files missing: a planner query failed with "manifest unreadable").
        # A retired line is deleted by renaming it away under the exclusive lock: a reader that
        # waited for the lock then finds no directory to write its pin in, and is told the
        # generation is gone (never recreating the line's directory).
        try:
            with self._pins_lock(exclusive=False):
                pin._write()
                if not (self.generation_dir(generation_id) / MANIFEST_FILE).exists():
                    pin.release()
                    raise GenerationError(f"generation {generation_id} of {self._what()} does not exist")
        except FileNotFoundError as exc:
            raise GenerationError(f"generation {generation_id} of {self._what()} does not exist "
                                  "(its line was removed)") from exc
        return pin

    def pin_current(self, *, ttl_seconds: float, holder: str) -> tuple[Manifest, Pin] | None:
        """Pin the current generation and return it with its manifest (None if there is none)."""
        for _ in range(20):
            current = self.current_id()
            if current is None:
                return None
            try:
                pin = self.pin(current, ttl_seconds=ttl_seconds, holder=holder)
            except GenerationError:
                continue  # CURRENT moved on and the old one was collected meanwhile
            return self.load(current), pin
        raise GenerationError(f"{self._what()}: could not pin the current generation")

    def pinned_ids(self) -> set[int]:
        """Generations held by an unexpired pin (an unreadable pin file counts as unexpired)."""
        pinned: set[int] = set()
        now = time.time()
        for path in self._pin_files():
            gid = _pin_generation(path)
            if gid is None:
                continue
            try:
                expires_at = float(json.loads(path.read_text())["expiresAt"])
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError, OSError):
                expires_at = float("inf")
            if expires_at > now:
                pinned.add(gid)
        return pinned

    def gc(self, *, keep_last: int = 2) -> list[int]:
        """Delete generation dirs that are not current, not among the last ``keep_last``
        committed ones, and not pinned by an unexpired pin. Returns the deleted ids."""
        current = self.current_id()
        if current is None:
            return []
        trashed: list[tuple[int, Path]] = []
        with self._pins_lock(exclusive=True):  # no pin is added or renewed until the moves are done
            self._sweep_expired_pins()
            pinned = self.pinned_ids()
            self._sweep_trash(pinned)
            committed = self.generation_ids()
            keep = set(committed[-keep_last:]) if keep_last > 0 else set()
            keep.add(current)
            for generation_id in committed:
                if generation_id in keep or generation_id in pinned:
                    continue
                trash = self.line_dir / f"{_TRASH_PREFIX}{generation_id:08d}-{uuid.uuid4().hex[:8]}"
                try:
                    os.rename(self.generation_dir(generation_id), trash)
                except FileNotFoundError:
                    continue  # another GC got there first
                trashed.append((generation_id, trash))
        for _generation_id, trash in trashed:  # outside the lock: readers pin meanwhile
            shutil.rmtree(trash, ignore_errors=True)
        if trashed:
            fsync_directory(self.line_dir)
        return [generation_id for generation_id, _ in trashed]

    def _pins_lock(self, *, exclusive: bool) -> contextlib.AbstractContextManager[None]:
        return _pins_lock(self.line_dir / _PINS_DIR, exclusive=exclusive)

    # -- lines -------------------------------------------------------------------------------

    def lines(self) -> list[str]:
        """Names of the generation lines of this log and kind."""
        if not self.kind_dir.is_dir():
            return []
        return sorted(p.name for p in self.kind_dir.iterdir()
                      if p.is_dir() and _LINE_RE.match(p.name) and not _SHARD_RE.match(p.name))

    def active_line(self) -> str:
        return _read_active(self.kind_dir)

    def set_active_line(self, line: str) -> None:
        """Make ``line`` the one readers see; it must have a committed generation."""
        _check_line(line)
        if not (self.kind_dir / line / CURRENT_FILE).exists():
            raise GenerationError(f"line {line!r} of {self.log_id}/{self.kind} has no committed generation")
        # A retired line made active again (a rollback) must not be collected as retired.
        (self.kind_dir / line / RETIRED_FILE).unlink(missing_ok=True)
        atomic_write(self.kind_dir / ACTIVE_FILE, f"{line}\n")

    def retire(self, replaced_by: str) -> None:
        """Mark this line as replaced by ``replaced_by``: :mod:`sinks.retired` deletes it once
        it has been retired for the grace period and no pin holds it. The file's mtime is the
        retirement time."""
        atomic_write(self.line_dir / RETIRED_FILE, f"replaced by {replaced_by} at {time.time():.0f}\n")

    def retired_at(self) -> float | None:
        """When this line was retired (epoch seconds), or None if it is not."""
        try:
            return (self.line_dir / RETIRED_FILE).stat().st_mtime
        except FileNotFoundError:
            return None

    def take_line_away(self, still_removable: Callable[[], bool]) -> Path | None:
        """Rename this whole line out of the way (to a hidden ``.trash-line-*`` directory beside
        it, returned; the caller deletes it) if no unexpired pin holds any of its generations,
        no writer holds its lock and ``still_removable()`` agrees, all checked under the line's
        exclusive pin lock; else None. Expired pins are swept first, under that lock too.

        Under that lock no reader can add a pin, so a reader either pinned before (and the
        line stays) or finds the line gone afterwards (:meth:`pin` raises GenerationError)."""
        # Never through _acquire_lock or with mkdir(parents=True): another collector may have
        # taken the line away meanwhile, and its directory must not come back.
        try:
            descriptor = os.open(self.line_dir / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return None  # a writer is still committing to it
        try:
            with self._pins_lock(exclusive=True):
                self._sweep_expired_pins()
                if self.pinned_ids() or not still_removable():
                    return None
                trash = self.kind_dir / f"{LINE_TRASH_PREFIX}{self.line}-{uuid.uuid4().hex[:8]}"
                os.rename(self.line_dir, trash)
                fsync_directory(self.kind_dir)
                return trash
        except FileNotFoundError:
            return None
        finally:
            os.close(descriptor)

    def new_rebuild_line(self) -> str:
        """A fresh ``rebuild-<n>`` line name for a rebuild beside the live line."""
        numbers = [int(m.group(1)) for name in self.lines() if (m := re.match(r"^rebuild-(\d+)$", name))]
        return f"rebuild-{max(numbers, default=0) + 1}"

    # -- internals ---------------------------------------------------------------------------

    def _what(self) -> str:
        shard = f"{self.shard}/" if self.shard else ""
        return f"{self.log_id}/{self.kind}/{shard}{self.line}"

    def _dir_ids(self) -> list[int]:
        if not self.line_dir.is_dir():
            return []
        return sorted(int(m.group(1)) for p in self.line_dir.iterdir() if (m := _GEN_RE.match(p.name)))

    def _pin_files(self) -> Iterator[Path]:
        pins_dir = self.line_dir / _PINS_DIR
        if pins_dir.is_dir():
            yield from (p for p in pins_dir.iterdir() if p.name.endswith(".pin"))

    def _sweep_expired_pins(self) -> None:
        now = time.time()
        for path in self._pin_files():
            with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError, OSError):
                if float(json.loads(path.read_text())["expiresAt"]) <= now:
                    path.unlink(missing_ok=True)
        pins_dir = self.line_dir / _PINS_DIR
        if pins_dir.is_dir():  # temp files of pin writers that died mid-write
            # streams.fsio.atomic_write names them .NAME.PID-HEX.tmp; older writers .NAME.tmp-*.
            for path in [*pins_dir.glob(".*.tmp"), *pins_dir.glob(".*.tmp-*")]:
                with contextlib.suppress(FileNotFoundError):
                    if now - path.stat().st_mtime > _TRASH_GRACE_SECONDS:
                        path.unlink()

    def _sweep_trash(self, pinned: set[int]) -> None:
        """Finish what a crashed GC left: delete old trash, and restore a trashed generation
        that is pinned. Under the pin lock GC never moves a pinned generation, so only a GC of an
        earlier version leaves one (it moved a generation before its last look at the pins, and
        could die before moving it back)."""
        now = time.time()
        for path in self.line_dir.iterdir():
            if not path.name.startswith(_TRASH_PREFIX):
                continue
            generation_id = int(path.name[len(_TRASH_PREFIX):].split("-", 1)[0])
            with contextlib.suppress(OSError):
                target = self.generation_dir(generation_id)
                if generation_id in pinned and not target.exists():
                    os.rename(path, target)
                elif now - path.stat().st_mtime > _TRASH_GRACE_SECONDS:
                    shutil.rmtree(path, ignore_errors=True)

    def _remove_leftovers(self) -> None:
        """Remove what a crashed writer left: staging dirs, temp files, and generation dirs
        renamed into place but never made current (no reader can have seen them)."""
        current = self.current_id() or 0
        removed = False
        for path in self.line_dir.iterdir():
            m = _GEN_RE.match(path.name)
            if path.name.startswith(_STAGING_PREFIX) or (m and int(m.group(1)) > current):
                shutil.rmtree(path)
                removed = True
            elif path.name.startswith(".") and ".tmp-" in path.name:
                path.unlink(missing_ok=True)
                removed = True
        if removed:  # every begin() runs this; a directory fsync is a disk flush
            fsync_directory(self.line_dir)

    def _acquire_lock(self) -> None:
        if self._lock_fd is not None:
            return
        self.line_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.line_dir / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise GenerationLockedError(f"another writer is writing {self._what()}") from exc
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


#: ``Manifest.extra`` key: the highest ``maxSeq`` of any chunk the generation holds.
MAX_CHUNK_SEQ = "maxChunkSeq"


def pipeline_difference(built_policy: str, built_chunker: Mapping[str, Any], writes_policy: str,
                        writes_chunker: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """How what a generation was built under (its manifest's policy hash and chunker) differs
    from what a process writes: ``("redaction policy", built, writes)``, else ``("chunker",
    built settings, written settings)`` over the chunker settings both record that differ, else
    None. A value one side does not record (an empty hash, a setting an older release did not
    write) is no evidence either way; the same rule as :func:`planner.coherence.find_mismatch`
    applies between the kinds of a log."""
    if built_policy and writes_policy and built_policy != writes_policy:
        return "redaction policy", built_policy, writes_policy
    differing = sorted(key for key in set(built_chunker) & set(writes_chunker)
                       if repr(built_chunker[key]) != repr(writes_chunker[key]))
    if differing:
        return ("chunker", ", ".join(f"{key}={built_chunker[key]}" for key in differing),
                ", ".join(f"{key}={writes_chunker[key]}" for key in differing))
    return None


def chunk_seq_bound(previous: Manifest | None, records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{MAX_CHUNK_SEQ: n}`` for the manifest's ``extra`` of a generation that adds ``records``
    to ``previous``: no chunk it holds ends above ``n``. A sink commits the chunks it has before
    the progress of every partition reaches them, so ``builtThroughSeq`` is no such bound; this
    one lets a reader whose cut is at or above it skip the per-chunk ``maxSeq`` filter
    (docs/planner.md, "Performance"). Empty when ``previous`` was written without the bound:
    what it holds is then unknown, and so is every later generation's bound."""
    if previous is not None and not isinstance(previous.extra.get(MAX_CHUNK_SEQ), int):
        return {}
    highest = int(previous.extra[MAX_CHUNK_SEQ]) if previous is not None else 0
    for record in records:
        if record.get("kind") == "chunk":
            highest = max(highest, int(record["maxSeq"]))
    return {MAX_CHUNK_SEQ: highest}


def read_current(root: Path, log_id: str, kind: str) -> Manifest | None:
    """The current manifest of the ACTIVE line of ``log_id``/``kind`` (None if none yet)."""
    return GenerationStore(root, log_id, kind).current()


def clone_into(src_gen_dir: Path, dst_dir: Path, *, copy_names: Collection[str]) -> None:
    """Seed ``dst_dir`` with the files of the generation in ``src_gen_dir``.

    Files are hard-linked (no bytes copied; the old generation stays intact even when it is
    deleted later) except those whose base name matches one of ``copy_names`` (exact names
    or glob patterns), which are copied: an engine may replace those files while writing.
    Only the files the source manifest lists are cloned, never lock or temp files.
    """
    manifest_path = Path(src_gen_dir) / MANIFEST_FILE
    if manifest_path.exists():
        rel_paths = [s.path for s in Manifest.from_json(manifest_path.read_bytes()).segments]
    else:
        rel_paths = list(_walk_files(Path(src_gen_dir)))
    # Strings, not Paths: a commit clones every file of its generation (hundreds for the
    # Parquet indexes), and Path arithmetic cost more than the links themselves.
    source, target = os.fspath(src_gen_dir), os.fspath(dst_dir)
    made: set[str] = set()
    for rel in rel_paths:
        src, dst = os.path.join(source, rel), os.path.join(target, rel)
        parent = os.path.dirname(dst)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        if copy_names and any(fnmatch.fnmatchcase(os.path.basename(rel), pattern) for pattern in copy_names):
            shutil.copyfile(src, dst)
            continue
        link_or_copy(src, dst)


def link_or_copy(src: str | Path, dst: str | Path) -> None:
    """Hard-link ``src`` as ``dst``; on another filesystem or one without hard links, copy it
    (the same guarantees: neither file is written again). A missing ``src`` raises."""
    try:
        os.link(src, dst)
    except FileNotFoundError:
        raise
    except OSError:
        shutil.copyfile(src, dst)


# -- helpers ---------------------------------------------------------------------------------


def _segments_for(
    staging_dir: Path,
    given: tuple[SegmentRef, ...],
    parent_segments: tuple[SegmentRef, ...],
    parent_dir: Path | None,
    digests: FileDigests | None = None,
) -> tuple[tuple[SegmentRef, ...], list[str]]:
    """Segment refs of every file in ``staging_dir``, and the paths that are new (not
    hard links of the parent's files)."""
    given_by_path = {s.path: s for s in given}
    parent_by_path = {s.path: s for s in parent_segments}
    files = sorted(_walk_files(staging_dir))
    missing = set(given_by_path) - set(files)
    if missing:
        raise ManifestVerificationError(f"segments listed but not written: {sorted(missing)}")
    segments: list[SegmentRef] = []
    fresh: list[str] = []
    staging = os.fspath(staging_dir)
    parent = os.fspath(parent_dir) if parent_dir is not None else None
    for rel in files:
        path = os.path.join(staging, rel)
        st = os.stat(path)
        inherited = parent_by_path.get(rel)
        if inherited is not None and not _same_file(st, parent, rel, inherited):
            inherited = None
        if inherited is not None:
            digest, size = inherited.sha256, inherited.bytes
        else:
            digest, size = (digests.digest(path, st), st.st_size) if digests is not None \
                else sha256_file(path)
            fresh.append(rel)
        ref = given_by_path.get(rel)
        if ref is not None:
            if (ref.sha256, ref.bytes) != (digest, size):
                raise ManifestVerificationError(f"{rel}: given hash/size do not match the file")
            segments.append(ref)
        else:
            rows = inherited.rows if inherited is not None else None
            segments.append(SegmentRef(path=rel, sha256=digest, bytes=size, rows=rows))
    return tuple(segments), fresh


def _same_file(st: os.stat_result, parent_dir: str | None, rel: str, ref: SegmentRef) -> bool:
    if parent_dir is None:
        return False
    try:
        parent_st = os.stat(os.path.join(parent_dir, rel))
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (parent_st.st_dev, parent_st.st_ino) and st.st_size == ref.bytes


class FileDigests:
    """SHA-256 of files already hashed, keyed by inode, size and mtime (thread-safe).

    Committed files are shared between generations by hard links, so a generation mostly
    consists of inodes an earlier verification hashed. A write to a file changes its mtime,
    so a modified file is hashed again (ctime is useless here: every hard link changes it).
    """

    def __init__(self, size: int = 200_000) -> None:
        self._size = size
        self._known: dict[tuple[int, int, int, int], str] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(st: os.stat_result) -> tuple[int, int, int, int]:
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def remember(self, path: str | Path, digest: str) -> None:
        """Record the hash a writer just computed and verified for ``path``."""
        with self._lock:
            if len(self._known) >= self._size:
                self._known.clear()
            self._known[self._key(os.stat(path))] = digest

    def digest(self, path: str | Path, st: os.stat_result) -> str:
        key = self._key(st)
        with self._lock:
            known = self._known.get(key)
        if known is not None:
            return known
        digest, _ = sha256_file(path)
        if self._key(os.stat(path)) == key:  # not modified while we read it
            with self._lock:
                if len(self._known) >= self._size:
                    self._known.clear()
                self._known[key] = digest
        return digest


def _verify_segments(gen_dir: Path, segments: tuple[SegmentRef, ...], *, hash_paths: set[str] | None,
                     digests: FileDigests | None = None) -> None:
    """Check each segment's size, and its hash when ``hash_paths`` is None or names it."""
    directory = os.fspath(gen_dir)
    for ref in segments:
        path = os.path.join(directory, ref.path)
        try:
            st = os.stat(path)
        except FileNotFoundError as exc:
            raise ManifestVerificationError(f"{gen_dir.name}: {ref.path} is missing") from exc
        size = st.st_size
        if size != ref.bytes:
            raise ManifestVerificationError(f"{gen_dir.name}: {ref.path} has {size} bytes, manifest says {ref.bytes}")
        if hash_paths is None or ref.path in hash_paths:
            digest = digests.digest(path, st) if digests is not None else sha256_file(path)[0]
            if digest != ref.sha256:
                raise ManifestVerificationError(f"{gen_dir.name}: {ref.path} does not match its SHA-256")


def _canonical(body: dict[str, Any]) -> str:
    """The manifest's canonical text: ``json.dumps(sort_keys, indent=1, ensure_ascii=False)``.

    The same bytes through orjson, its 2-space indent halved, whenever orjson writes every
    value as ``json`` does: ``json``'s indenting encoder is pure Python, and every commit and
    every reader's load encodes the manifest twice (its checksum, then the text), 2-3 ms apiece
    for a generation of a few hundred files. Whether it does is checked on the compact forms,
    which both write in C: a float ``json`` writes in exponent form, NaN (orjson: null), an int
    past 64 bits or a key that is not a string, and the text comes from ``json``."""
    try:
        compact = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        compact = None
    if compact is not None and compact.decode() == json.dumps(body, sort_keys=True, ensure_ascii=False,
                                                              separators=(",", ":")):
        text = orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
        depth = 1
        while "\n" + "  " * depth in text:
            # Shallowest first: a line made d spaces deep never has the 2d' of a deeper level.
            text = re.sub(f"\n{'  ' * depth}(?! )", "\n" + " " * depth, text)
            depth += 1
        return text + "\n"
    return json.dumps(body, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def _manifest_checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(body).encode("utf-8")).hexdigest()


def _walk_files(directory: Path) -> Iterator[str]:
    """The path of each file under ``directory``, relative to it, with ``/`` separators."""
    top = os.fspath(Path(directory))
    for dirpath, _dirnames, filenames in os.walk(top):
        prefix = "" if dirpath == top else os.path.relpath(dirpath, top).replace(os.sep, "/") + "/"
        for name in filenames:
            rel = prefix + name
            if rel != MANIFEST_FILE:
                yield rel


def _dirs_bottom_up(directory: Path) -> list[Path]:
    return [Path(d) for d, _subdirs, _files in os.walk(directory, topdown=False)]


def sha256_file(path: str | Path) -> tuple[str, int]:
    """The SHA-256 (hex) and size of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_active(kind_dir: Path) -> str:
    try:
        line = (kind_dir / ACTIVE_FILE).read_text().strip()
    except FileNotFoundError:
        return DEFAULT_LINE
    return _check_line(line)


def _pin_generation(path: Path) -> int | None:
    head = path.name.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _positive_ttl(ttl_seconds: float) -> float:
    if not ttl_seconds > 0:
        raise GenerationError(f"a pin needs a positive ttl_seconds, got {ttl_seconds!r}")
    return float(ttl_seconds)


def _check_line(line: str) -> str:
    if not isinstance(line, str) or not _LINE_RE.match(line) or line == _PINS_DIR or _SHARD_RE.match(line):
        raise GenerationError(f"invalid generation line name {line!r} (letters, digits, . _ -)")
    return line


def _check_component(what: str, value: str) -> str:
    if not isinstance(value, str) or not value or value in {".", ".."} or value.startswith(".") \
            or "/" in value or "\\" in value or "\0" in value:
        raise GenerationError(f"invalid {what} {value!r} for a directory name")
    return value
