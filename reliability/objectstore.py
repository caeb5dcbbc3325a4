"""The object-store side of the fault suite: what the store must hold after a fault, and the
judges that say whether it does.

With publishing on (``USL_OBJECT_STORE`` set for every sink, S3Proxy started by the suite), a
survived round leaves, for every index kind, the live generation on the commit topic equal to
the sink's local current generation: the same line, generation id and ``builtThroughSeq``, and
the same files (path, SHA-256, size), every blob of which downloads whole; a kind written by
sink shards, for each shard (its commit key ``LOG/KIND/shard-I-of-N`` against that shard's
local current generation). A publish a kill cut
short (objects uploaded, no commit record) must never be live: its remote manifest is named by
no commit record, then or later. The judges are plain functions over what was read, so a test
drives them directly (``tests/reliability/test_store_judges.py``).
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from sinks.exceptions import GenerationError
from sinks.generations import GenerationStore, Manifest
from sinks.objectstore.commits import CommitLog, commits_topic
from sinks.objectstore.exceptions import ObjectStoreError
from sinks.objectstore.publish import DEFAULT_SHARD
from sinks.objectstore.store import ObjectStore, RemoteGeneration, commit_key
from streams.l1 import read_topic_to_end
from streams.settings import Settings

__all__ = ["commit_history", "compare_published", "is_lock_file", "local_files", "never_live",
           "published_problems", "wait_published"]

FileTable = Mapping[str, tuple[str, int]]
"""path in a generation directory → (SHA-256, bytes)."""


def is_lock_file(path: str) -> bool:
    """tantivy's empty lock files (``.tantivy-meta.lock``, ``.tantivy-writer.lock``): a reader
    that opens a committed text index creates one in the generation directory after the
    publish, so they are no part of what a generation holds."""
    name = path.rsplit("/", 1)[-1]
    return name.startswith(".tantivy-") and name.endswith(".lock")


def local_files(gen_dir: Path) -> dict[str, tuple[str, int]]:
    """Every file of a local generation directory, as a publish uploads them (lock files
    left out)."""
    table: dict[str, tuple[str, int]] = {}
    for path in sorted(p for p in Path(gen_dir).rglob("*") if p.is_file()):
        if is_lock_file(path.name):
            continue
        body = path.read_bytes()
        table[path.relative_to(gen_dir).as_posix()] = (hashlib.sha256(body).hexdigest(), len(body))
    return table


def compare_published(kind: str, local: Manifest | None, files: FileTable,
                      record: Mapping[str, Any] | None, remote: RemoteGeneration | None) -> list[str]:
    """Why the live published generation of ``kind`` (its commit ``record`` and remote
    manifest) is not the sink's local current one (``local``, with its ``files``); [] when
    they are the same generation, file for file."""
    if local is None:
        return [f"{kind}: no local generation"] if record is not None else []
    if record is None or remote is None:
        return [f"{kind}: local generation {local.line}/{local.generation_id} was never published"]
    problems: list[str] = []
    theirs = (str(record.get("line")), int(record["generationId"]), int(record["builtThroughSeq"]))
    ours = (local.line, local.generation_id, local.built_through_seq)
    if theirs != ours:
        problems.append(f"{kind}: live published (line, generation, builtThroughSeq) {theirs} != local {ours}")
    if str(record.get("manifestKey")) != remote.manifest_key:
        problems.append(f"{kind}: the commit record names {record.get('manifestKey')}, not {remote.manifest_key}")
    if (remote.line, remote.generation_id, remote.built_through_seq) != theirs:
        problems.append(f"{kind}: remote manifest {remote.manifest_key} disagrees with its commit record")
    published = {f.path: (f.sha256, f.bytes) for f in remote.files if not is_lock_file(f.path)}
    files = {path: entry for path, entry in files.items() if not is_lock_file(path)}
    if published != files:
        missing = sorted(set(files) - set(published))
        extra = sorted(set(published) - set(files))
        changed = sorted(p for p in set(files) & set(published) if files[p] != published[p])
        problems.append(f"{kind}: published files differ from the local generation's: missing {missing[:3]}, "
                        f"extra {extra[:3]}, changed {changed[:3]}")
    return problems


def never_live(cut_short: Collection[str], history: Iterable[Mapping[str, Any]]) -> list[str]:
    """Problems if a remote manifest of a publish cut short (``cut_short``: manifest keys) is
    named by any commit record of ``history``."""
    named = {str(record.get("manifestKey")) for record in history}
    return [f"a publish cut short became live: {key}" for key in sorted(set(cut_short) & named)]


def commit_history(settings: Settings) -> list[dict[str, Any]]:
    """Every commit record still on the commit topic, oldest first (the active segment is never
    compacted, so in a fault run that is every record ever written)."""
    history: list[dict[str, Any]] = []
    for record in read_topic_to_end(settings.bootstrap_servers or "", commits_topic(settings)):
        if record.key is not None and record.value is not None:
            history.append(orjson.loads(record.value))
    return history


def published_problems(settings: Settings, root: Path, store: ObjectStore, kinds: Iterable[str],
                       log_id: str = "default", *,
                       shards: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """One look: for every kind (every shard of a kind ``shards`` names: kind → its shard
    names), the live published generation against the local current one, each of its blobs
    downloaded and checked against its SHA-256."""
    commits = CommitLog(settings.bootstrap_servers or "", settings)
    try:
        live = commits.live()
    finally:
        commits.close()
    problems: list[str] = []
    for kind in kinds:
        for shard in (shards or {}).get(kind) or (None,):
            label = kind if shard is None else f"{kind}/{shard}"
            local_store = GenerationStore(root, log_id, kind, shard=shard)
            try:
                local = local_store.current()
                files = local_files(local_store.generation_dir(local.generation_id)) if local is not None else {}
            except (GenerationError, OSError) as exc:
                problems.append(f"{label}: local current generation unreadable: {exc}")
                continue
            record = live.get(commit_key(log_id, kind, shard or DEFAULT_SHARD))
            remote = None
            if record is not None:
                try:
                    remote = store.load(str(record["manifestKey"]))
                    with tempfile.TemporaryDirectory(prefix="usl-faults-fetch-") as target:
                        store.download(remote, Path(target))
                except ObjectStoreError as exc:
                    problems.append(f"{label}: live generation {record.get('generationId')} does not download "
                                    f"whole: {exc}")
                    continue
            problems += compare_published(label, local, files, record, remote)
    return problems


def wait_published(settings: Settings, root: Path, store: ObjectStore, kinds: Iterable[str],
                   timeout: float, *, shards: Mapping[str, Sequence[str]] | None = None,
                   ) -> tuple[float | None, list[str]]:
    """Until every kind's live published generation equals its local current one: (seconds it
    took, []), or (None, the last problems) after ``timeout`` seconds. A publisher that failed
    backs off up to 30 s between attempts, so give it more than that."""
    kinds = tuple(kinds)
    started = time.monotonic()
    problems: list[str] = ["not checked"]
    while time.monotonic() - started < timeout:
        try:
            problems = published_problems(settings, root, store, kinds, shards=shards)
        except ObjectStoreError as exc:
            problems = [f"object store: {exc}"]
        if not problems:
            return time.monotonic() - started, []
        time.sleep(1.0)
    return None, problems
