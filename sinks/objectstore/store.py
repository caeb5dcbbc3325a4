"""Generations as objects in an S3-compatible bucket: content-addressed blobs, one remote
manifest per publish, pins, and garbage collection.

Key layout under ``s3://BUCKET/PREFIX``::

    blobs/<sha256[:2]>/<sha256>                        one file of some generation, by content
    manifests/<log>/<kind>/<shard>/gen-<id>-<nonce>.json what one publish consists of
    pins/<holder>-<uuid>.json                          a reader's claim on a manifest, with an expiry

A file shared by consecutive generations (they hard-link their parent's segments) is one blob,
uploaded once. The remote manifest lists every file of the generation directory (its local
``manifest.json`` included) with path, SHA-256 and size; nothing else of the local machine (no
paths, no host) is uploaded. An upload nonce keeps two publishers of one generation id (a
split brain) from ever writing the same manifest key.

Objects alone are never "live": :mod:`sinks.objectstore.commits` holds the commit point. GC
(:meth:`ObjectStore.gc`) keeps every live manifest, every manifest an unexpired pin names, the
newest ``keep_last`` of each key, and anything younger than ``grace_seconds`` (a publish that has
uploaded but not yet committed); blobs no kept manifest references are deleted once older than
the grace period too.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from sinks.generations import sha256_file
from sinks.objectstore.exceptions import (
    NotPublishedError,
    ObjectStoreError,
    ObjectStoreUnavailableError,
)
from streams.exceptions import ConfigError
from streams.settings import Settings

__all__ = ["FileEntry", "GcReport", "ObjectStore", "RemoteGeneration", "StoreLocation"]

_CLIENT_ERRORS_UNAVAILABLE = frozenset({"ServiceUnavailable", "SlowDown", "InternalError", "RequestTimeout"})


@dataclass(frozen=True)
class StoreLocation:
    """``s3://bucket/prefix``: where the generations of one deployment live."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> StoreLocation:
        if not url.startswith("s3://") or not url[5:].split("/", 1)[0]:
            raise ConfigError(f"USL_OBJECT_STORE={url!r} is not an s3://bucket/prefix URL")
        bucket, _, prefix = url[5:].partition("/")
        return cls(bucket, prefix.strip("/"))

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)


@dataclass(frozen=True)
class FileEntry:
    """One file of a published generation: its path in the generation dir, hash and size."""

    path: str
    sha256: str
    bytes: int


@dataclass(frozen=True)
class RemoteGeneration:
    """What one publish uploaded: the remote manifest's key and content."""

    manifest_key: str
    commit_key: str
    generation_id: int
    built_through_seq: int
    line: str
    files: tuple[FileEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "commitKey": self.commit_key, "generationId": self.generation_id,
            "builtThroughSeq": self.built_through_seq, "line": self.line,
            "files": [{"path": f.path, "sha256": f.sha256, "bytes": f.bytes} for f in self.files],
        }

    @classmethod
    def from_json(cls, manifest_key: str, data: Mapping[str, Any]) -> RemoteGeneration:
        return cls(
            manifest_key=manifest_key, commit_key=str(data["commitKey"]),
            generation_id=int(data["generationId"]), built_through_seq=int(data["builtThroughSeq"]),
            line=str(data.get("line", "live")),
            files=tuple(FileEntry(str(f["path"]), str(f["sha256"]), int(f["bytes"])) for f in data["files"]),
        )


@dataclass(frozen=True)
class GcReport:
    """What one :meth:`ObjectStore.gc` pass deleted and kept."""

    deleted_manifests: tuple[str, ...]
    deleted_blobs: int
    kept_manifests: tuple[str, ...]
    deleted_pins: int


def commit_key(log_id: str, kind: str, shard: str) -> str:
    """``<log>/<kind>/<shard>``: the key of a generation line's live pointer."""
    return f"{log_id}/{kind}/{shard}"


class ObjectStore:
    """One bucket/prefix of an S3-compatible store, through boto3."""

    def __init__(self, location: StoreLocation, *, endpoint: str | None, access_key: str | None,
                 secret_key: str | None, region: str = "us-east-1", connect_timeout: float = 5.0,
                 max_attempts: int = 3) -> None:
        # boto3 takes a few hundred ms to import: only a sink or planner that uses a store pays it.
        import boto3
        from botocore.config import Config

        self.location = location
        # S3Proxy (and other S3-compatible servers) answer NotImplemented to the CRC checksums
        # newer botocore sends by default: send and check them only where the API requires.
        config = Config(
            request_checksum_calculation="when_required", response_checksum_validation="when_required",
            s3={"addressing_style": "path"}, connect_timeout=connect_timeout, read_timeout=30,
            retries={"max_attempts": max_attempts, "mode": "standard"},
        )
        self._client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access_key,
                                    aws_secret_access_key=secret_key, region_name=region, config=config)

    @classmethod
    def from_settings(cls, settings: Settings) -> ObjectStore:
        """The store ``USL_OBJECT_STORE`` names, with ``USL_S3_*`` endpoint and credentials."""
        if not settings.object_store:
            raise ConfigError("USL_OBJECT_STORE is not set")
        return cls(StoreLocation.parse(settings.object_store), endpoint=settings.s3_endpoint or None,
                   access_key=settings.s3_access_key, secret_key=settings.s3_secret_key)

    # -- plumbing ----------------------------------------------------------------------------

    def _call(self, what: str, operation: str, **kwargs: Any) -> Any:
        """One S3 call; a network or server failure becomes ObjectStoreUnavailableError."""
        try:
            return getattr(self._client, operation)(Bucket=self.location.bucket, **kwargs)
        except (EndpointConnectionError, BotoCoreError) as exc:
            raise ObjectStoreUnavailableError(f"object store unavailable while {what}: {exc}") from exc
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _CLIENT_ERRORS_UNAVAILABLE:
                raise ObjectStoreUnavailableError(f"object store unavailable while {what}: {exc}") from exc
            if code in {"NoSuchKey", "404", "NotFound"}:
                raise NotPublishedError(f"{what}: no such object") from exc
            raise ObjectStoreError(f"object store refused {what}: {exc}") from exc

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (a local server starts empty)."""
        try:
            self._call("checking the bucket", "head_bucket")
        except (NotPublishedError, ObjectStoreError) as exc:
            if isinstance(exc, ObjectStoreUnavailableError):
                raise
            try:
                self._call("creating the bucket", "create_bucket")
            except ObjectStoreError as created:
                # Another kind's publisher in this sink (or another sink) created it meanwhile.
                if "BucketAlreadyOwnedByYou" not in str(created):
                    raise

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            head: dict[str, Any] = self._call(f"reading {key}", "head_object", Key=key)
            return head
        except NotPublishedError:
            return None
        except ObjectStoreError as exc:
            if "Not Found" in str(exc) or "404" in str(exc):
                return None
            raise

    def _list(self, prefix: str) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call(f"listing {prefix}", "list_objects_v2", **kwargs)
            for item in page.get("Contents", ()):
                if not str(item["Key"]).endswith("/"):  # filesystem backends list directories too
                    yield item
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")

    def _get(self, key: str) -> bytes:
        body: bytes = self._call(f"reading {key}", "get_object", Key=key)["Body"].read()
        return body

    def _put(self, key: str, body: bytes) -> None:
        self._call(f"writing {key}", "put_object", Key=key, Body=body)

    def _delete(self, key: str) -> None:
        # One DeleteObject per key: S3Proxy answers NotImplemented to DeleteObjects' checksums.
        self._call(f"deleting {key}", "delete_object", Key=key)

    def blob_key(self, sha256: str) -> str:
        return self.location.key("blobs", sha256[:2], sha256)

    def manifests_prefix(self, key: str = "") -> str:
        return self.location.key("manifests", key) + "/"

    # -- publishing ----------------------------------------------------------------------------

    def upload_generation(self, gen_dir: Path, *, log_id: str, kind: str, shard: str, line: str,
                          generation_id: int, built_through_seq: int, fresh_seconds: float = 600.0,
                          known_blobs: frozenset[str] = frozenset()) -> RemoteGeneration:
        """Upload every file of a committed generation directory as a blob, then its remote
        manifest. Nothing is live yet: the caller commits it (:mod:`sinks.objectstore.commits`).

        A blob already in the store is not uploaded again when it is in ``known_blobs`` (files
        of a generation that is live) or was written less than ``fresh_seconds`` ago; otherwise
        it is written again, which renews it for GC's grace period.
        """
        files: list[FileEntry] = []
        for path in sorted(p for p in Path(gen_dir).rglob("*") if p.is_file()):
            rel = path.relative_to(gen_dir).as_posix()
            digest, size = sha256_file(path)
            files.append(FileEntry(rel, digest, size))
            if digest in known_blobs:
                continue
            head = self._head(self.blob_key(digest))
            if head is not None and time.time() - _timestamp(head.get("LastModified")) < fresh_seconds:
                continue
            self._put(self.blob_key(digest), path.read_bytes())
        key = commit_key(log_id, kind, shard)
        name = f"gen-{generation_id:08d}-{uuid.uuid4().hex[:12]}.json"
        remote = RemoteGeneration(self.manifests_prefix(key) + name, key, generation_id, built_through_seq,
                                  line, tuple(files))
        self._put(remote.manifest_key, json.dumps(remote.to_json(), sort_keys=True).encode())
        return remote

    def load(self, manifest_key: str) -> RemoteGeneration:
        """A remote manifest; NotPublishedError if it was never written or was collected."""
        return RemoteGeneration.from_json(manifest_key, json.loads(self._get(manifest_key)))

    def download(self, remote: RemoteGeneration, target: Path, *, link_from: Mapping[str, Path] | None = None) -> None:
        """Write every file of ``remote`` under ``target``, each checked against its SHA-256.
        A file whose blob is already in ``link_from`` (sha256 → local path) is hard-linked."""
        for entry in remote.files:
            dest = target / entry.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            local = (link_from or {}).get(entry.sha256)
            if local is not None:
                try:
                    os.link(local, dest)
                    continue
                except OSError:
                    pass
            body = self._get(self.blob_key(entry.sha256))
            if hashlib.sha256(body).hexdigest() != entry.sha256 or len(body) != entry.bytes:
                raise ObjectStoreError(f"blob of {entry.path} in {remote.manifest_key} does not match its hash")
            dest.write_bytes(body)

    def manifests(self, key: str = "") -> list[tuple[str, float]]:
        """(manifest key, last-modified time) of every remote manifest under ``key`` (a commit
        key, or everything)."""
        return [(str(o["Key"]), _timestamp(o.get("LastModified"))) for o in self._list(self.manifests_prefix(key))]

    def delete_manifest(self, manifest_key: str) -> None:
        self._delete(manifest_key)

    # -- pins --------------------------------------------------------------------------------

    def pin(self, manifest_key: str, *, holder: str, ttl_seconds: float) -> str:
        """Pin a manifest for ``ttl_seconds`` (a planner replica, for its in-flight queries);
        returns the pin's key for :meth:`unpin`. GC keeps a pinned generation until it expires."""
        key = self.location.key("pins", f"{_safe(holder)}-{uuid.uuid4().hex}.json")
        self._put(key, json.dumps({"manifestKey": manifest_key, "holder": holder,
                                   "expiresAt": time.time() + ttl_seconds}).encode())
        return key

    def renew_pin(self, pin_key: str, *, ttl_seconds: float) -> None:
        """Extend a pin to ``ttl_seconds`` from now (a cursor that stays open);
        NotPublishedError if it was released or collected as expired meanwhile."""
        body = json.loads(self._get(pin_key))
        body["expiresAt"] = time.time() + ttl_seconds
        self._put(pin_key, json.dumps(body).encode())

    def unpin(self, pin_key: str) -> None:
        self._delete(pin_key)

    def pins(self) -> dict[str, tuple[str, float]]:
        """pin key → (manifest key, expiry) of every pin in the store (expired ones included)."""
        found: dict[str, tuple[str, float]] = {}
        for item in self._list(self.location.key("pins") + "/"):
            try:
                body = json.loads(self._get(str(item["Key"])))
                found[str(item["Key"])] = (str(body["manifestKey"]), float(body["expiresAt"]))
            except (NotPublishedError, ValueError, KeyError, TypeError):
                continue  # released meanwhile, or not a pin
        return found

    # -- garbage collection ------------------------------------------------------------------

    def gc(self, live: Mapping[str, str], *, keep_last: int = 2, grace_seconds: float = 3600.0,
           now: float | None = None) -> GcReport:
        """Delete what no reader can need: manifests that are not live (``live``: commit key →
        manifest key, from the commit topic), not named by an unexpired pin, not among the
        ``keep_last`` newest of their key and older than ``grace_seconds``; then blobs no kept
        manifest references, older than the grace period; and expired pins."""
        now = time.time() if now is None else now
        pins = self.pins()
        pinned = {manifest for manifest, expires in pins.values() if expires > now}
        by_key: dict[str, list[tuple[int, float, str]]] = {}
        for manifest_key, modified in self.manifests():
            commit = manifest_key[len(self.manifests_prefix()):].rsplit("/", 1)[0]
            generation = int(manifest_key.rsplit("/", 1)[1].split("-")[1])
            by_key.setdefault(commit, []).append((generation, modified, manifest_key))
        kept: list[str] = []
        doomed: list[str] = []
        live_keys = set(live.values())
        for entries in by_key.values():
            entries.sort(reverse=True)
            for rank, (_generation, modified, manifest_key) in enumerate(entries):
                keep = (manifest_key in live_keys or manifest_key in pinned or rank < keep_last
                        or now - modified < grace_seconds)
                (kept if keep else doomed).append(manifest_key)
        referenced: set[str] = set()
        for manifest_key in kept:
            try:
                referenced.update(f.sha256 for f in self.load(manifest_key).files)
            except NotPublishedError:
                continue
        # Manifests go first: a blob is deleted only once nothing that could be read names it.
        for manifest_key in doomed:
            self._delete(manifest_key)
        deleted_blobs = 0
        for item in self._list(self.location.key("blobs") + "/"):
            sha = str(item["Key"]).rsplit("/", 1)[1]
            if sha not in referenced and now - _timestamp(item.get("LastModified")) >= grace_seconds:
                self._delete(str(item["Key"]))
                deleted_blobs += 1
        expired = [key for key, (_manifest, expires) in pins.items() if expires <= now]
        for key in expired:
            self._delete(key)
        return GcReport(tuple(doomed), deleted_blobs, tuple(sorted(kept)), len(expired))

    def all_objects(self) -> Iterator[tuple[str, bytes]]:
        """(key, content) of every object under the prefix (for audits and tests)."""
        for item in self._list(self.location.key() + "/" if self.location.prefix else ""):
            yield str(item["Key"]), self._get(str(item["Key"]))


def _timestamp(value: Any) -> float:
    return value.timestamp() if isinstance(value, datetime) else 0.0


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)[:64] or "reader"
