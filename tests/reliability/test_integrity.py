"""The checks the fault suite relies on, one by one: a damaged manifest or segment is refused
(also when its digest was cached), and the sink tells a disk failure from a bug."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from sinks.exceptions import ManifestVerificationError
from sinks.generations import MANIFEST_FILE, FileDigests, GenerationStore, Manifest
from sinks.runner import is_disk_error


def _commit(root: Path, payload: bytes) -> tuple[GenerationStore, Manifest]:
    store = GenerationStore(root, "default", "text")
    staging = store.begin()
    (staging / "seg-1.bin").write_bytes(payload)
    manifest = store.commit(staging, Manifest(
        kind="text", log_id="default", line="", generation_id=0, built_through_seq=7,
        schema_version="1", asp_version="1", chunker={}, embedding=None, redaction_policy_hash="h"))
    return store, manifest


def _flip(path: Path, offset: int) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_manifest_carries_its_own_checksum_and_a_changed_value_is_refused(tmp_path: Path) -> None:
    store, manifest = _commit(tmp_path, b"segment bytes")
    path = store.manifest_path(manifest.generation_id)
    body = json.loads(path.read_text())
    assert len(body["manifestSha256"]) == 64
    assert Manifest.from_json(path.read_bytes()) == manifest
    # Still valid JSON, one digit changed: only the checksum can tell.
    path.write_text(path.read_text().replace('"builtThroughSeq": 7', '"builtThroughSeq": 9'))
    with pytest.raises(ManifestVerificationError, match="manifestSha256"):
        store.load(manifest.generation_id)
    with pytest.raises(ManifestVerificationError):
        store.verify(manifest)


def test_a_flipped_byte_anywhere_in_a_manifest_is_refused(tmp_path: Path) -> None:
    store, manifest = _commit(tmp_path, b"segment bytes")
    path = store.generation_dir(manifest.generation_id) / MANIFEST_FILE
    original = path.read_bytes()
    for offset in range(0, len(original), 7):
        path.write_bytes(original)
        _flip(path, offset)
        with pytest.raises(ManifestVerificationError):
            store.verify(manifest)
    path.write_bytes(original)
    store.verify(manifest)


def test_cached_digests_still_catch_a_segment_written_in_place(tmp_path: Path) -> None:
    store, manifest = _commit(tmp_path, b"x" * 4096)
    digests = FileDigests()
    store.verify(manifest, digests=digests)
    store.verify(manifest, digests=digests)  # from the cache
    _flip(store.generation_dir(manifest.generation_id) / "seg-1.bin", 100)
    with pytest.raises(ManifestVerificationError, match="SHA-256"):
        store.verify(manifest, digests=digests)


def test_disk_errors_are_told_apart_from_bugs() -> None:
    assert is_disk_error(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_error(OSError(errno.EFBIG, "File too large"))
    assert is_disk_error(ValueError("tantivy: IoError { kind: StorageFull, No space left on device (os error 28) }"))
    assert not is_disk_error(OSError(errno.ENOENT, "No such file or directory"))
    assert not is_disk_error(KeyError("logId"))
