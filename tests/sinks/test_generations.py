"""Immutable generations: commit, atomic switch, crash leftovers, pins, GC, hard-linked reuse."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sinks.generations as generations
from sinks.exceptions import GenerationError, GenerationLockedError, ManifestVerificationError
from sinks.generations import (
    GenerationStore,
    Manifest,
    SegmentRef,
    clone_into,
    read_current,
)

REPO = Path(__file__).resolve().parents[2]


def manifest(**overrides) -> Manifest:
    fields = dict(
        kind="text", log_id="default", line="", generation_id=0, built_through_seq=0,
        schema_version="text-1", asp_version="1.0", chunker={"version": "1.0"}, embedding=None,
        redaction_policy_hash="p" * 16,
    )
    fields.update(overrides)
    return Manifest(**fields)


def commit_files(store: GenerationStore, files: dict[str, bytes], *, clone: bool = True, **fields) -> Manifest:
    staging = store.begin()
    current = store.current_id()
    if clone and current is not None:
        clone_into(store.generation_dir(current), staging, copy_names=("meta.json",))
    for rel, data in files.items():
        path = staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        path.write_bytes(data)
    return store.commit(staging, manifest(**fields))


@pytest.fixture
def store(tmp_path: Path) -> GenerationStore:
    return GenerationStore(tmp_path / "indexes", "default", "text")


def test_exported_members():
    assert set(generations.__all__) >= {
        "GenerationStore", "Manifest", "Pin", "SegmentRef", "clone_into", "read_current",
    }


def test_exception_hierarchy():
    from sinks import exceptions
    from streams.exceptions import USLError

    for name in exceptions.__all__:
        assert issubclass(getattr(exceptions, name), exceptions.SinkError)
    assert issubclass(exceptions.SinkError, USLError)
    assert issubclass(ManifestVerificationError, GenerationError)
    assert issubclass(GenerationLockedError, GenerationError)


def test_a_generation_bounds_the_maxseq_of_every_chunk_it_holds_or_says_nothing():
    chunks = [{"kind": "chunk", "maxSeq": 12}, {"kind": "chunk", "maxSeq": 30}, {"kind": "event", "seq": 99}]
    first = manifest(extra=generations.chunk_seq_bound(None, chunks))
    # The bound is the chunks' own, not the batch's highest seq nor builtThroughSeq: a sink
    # commits chunks before every partition's progress reaches them.
    assert first.extra == {generations.MAX_CHUNK_SEQ: 30}
    assert generations.chunk_seq_bound(first, [{"kind": "chunk", "maxSeq": 20}]) == {generations.MAX_CHUNK_SEQ: 30}
    assert generations.chunk_seq_bound(first, [{"kind": "chunk", "maxSeq": 41}]) == {generations.MAX_CHUNK_SEQ: 41}
    assert generations.chunk_seq_bound(None, []) == {generations.MAX_CHUNK_SEQ: 0}
    # A generation written without the bound (an older version) leaves every later one unbounded.
    assert generations.chunk_seq_bound(manifest(extra={"engine": "tantivy"}), chunks) == {}
    assert Manifest.from_json(first.dumps()).extra == first.extra


def test_commit_current_verify(store: GenerationStore):
    assert store.current() is None
    first = commit_files(store, {"a.bin": b"alpha", "sub/b.bin": b"beta"}, built_through_seq=7)
    assert first.generation_id == 1 and first.parent_generation_id is None
    assert first.line == "live" and first.created_at > 0
    assert {s.path for s in first.segments} == {"a.bin", "sub/b.bin"}
    assert store.current() == first
    assert (store.line_dir / "CURRENT").read_text().strip() == "1"
    assert store.generation_dir(1).name == "gen-00000001"
    store.verify(first)
    second = commit_files(store, {"c.bin": b"gamma"}, built_through_seq=9)
    assert (second.generation_id, second.parent_generation_id) == (2, 1)
    assert {s.path for s in second.segments} == {"a.bin", "sub/b.bin", "c.bin"}
    assert read_current(store.root, "default", "text") == second
    assert store.generation_ids() == [1, 2]


def test_manifest_json_round_trip():
    original = manifest(
        generation_id=3, built_through_seq=99, embedding={"model": "wordllama", "dim": 64},
        segments=(SegmentRef("x", "0" * 64, 5, rows=2),), source_offsets={"usl.chunks": {0: 10, 3: 4}},
        progress={0: 90, 1: 99}, chunk_count=12, parent_generation_id=2, created_at=1.5, extra={"engine": "tantivy"},
    )
    data = original.to_json()
    assert list(data) == [
        "kind", "logId", "line", "generationId", "builtThroughSeq", "schemaVersion", "aspVersion", "chunker",
        "embedding", "redactionPolicyHash", "segments", "sourceOffsets", "progress", "chunkCount",
        "parentGenerationId", "createdAt", "extra",
    ]
    assert data["sourceOffsets"] == {"usl.chunks": {"0": 10, "3": 4}}
    assert Manifest.from_json(data) == original
    assert Manifest.from_json(original.dumps()) == original
    with pytest.raises(GenerationError):
        Manifest.from_json({"kind": "text"})


def test_uncommitted_staging_leaves_current_and_is_cleaned(store: GenerationStore):
    commit_files(store, {"a.bin": b"alpha"})

    def crash_after_staging() -> None:
        crashed = GenerationStore(store.root, "default", "text")
        staging = crashed.begin()
        (staging / "half.bin").write_bytes(b"x" * 1000)
        os._exit(0)  # dies holding nothing but a staging dir

    child = multiprocessing.get_context("fork").Process(target=crash_after_staging)
    child.start()
    child.join()
    assert [p.name for p in store.line_dir.iterdir() if p.name.startswith(".staging")]
    assert store.current_id() == 1
    store.verify(store.current())
    staging = store.begin()
    assert staging.name == ".staging-gen-00000002" and list(staging.iterdir()) == []
    assert [p for p in store.line_dir.iterdir() if p.name.startswith(".staging")] == [staging]
    store.abort()


def test_crash_before_current_switch_keeps_old_generation(store: GenerationStore, monkeypatch):
    commit_files(store, {"a.bin": b"alpha"})
    real_write = generations.atomic_write

    def failing_write(path, text, **kwargs):
        if path.name == "CURRENT":
            raise OSError("disk died")
        return real_write(path, text, **kwargs)

    monkeypatch.setattr(generations, "atomic_write", failing_write)
    with pytest.raises(OSError):
        commit_files(store, {"b.bin": b"beta"})
    monkeypatch.undo()
    assert store.current_id() == 1
    assert store.generation_dir(2).exists()  # renamed, never made current
    assert store.gc(keep_last=0) == []  # GC never touches it: it may be a commit in flight
    again = commit_files(store, {"c.bin": b"gamma"})
    assert again.generation_id == 2
    assert {s.path for s in again.segments} == {"a.bin", "c.bin"}


def test_verify_detects_changed_and_missing_files(store: GenerationStore):
    committed = commit_files(store, {"a.bin": b"alpha", "b.bin": b"beta"})
    path = store.generation_dir(1) / "a.bin"
    assert not os.access(path, os.W_OK) or os.geteuid() == 0
    assert path.stat().st_mode & 0o222 == 0  # committed files are read-only
    assert path.stat().st_mode & 0o077 == 0  # and their owner's only: 0444 undid the umask 077
    path.chmod(0o644)
    path.write_bytes(b"ALPHA")
    with pytest.raises(ManifestVerificationError, match="SHA-256"):
        store.verify(committed)
    path.write_bytes(b"alpha")
    store.verify(committed)
    (store.generation_dir(1) / "b.bin").unlink()
    with pytest.raises(ManifestVerificationError, match="missing"):
        store.verify(committed)


def test_given_segment_refs_are_checked(store: GenerationStore):
    staging = store.begin()
    (staging / "v.faiss").write_bytes(b"vectors")
    bad = manifest(segments=(SegmentRef("v.faiss", "0" * 64, 7, rows=3),))
    with pytest.raises(ManifestVerificationError):
        store.commit(staging, bad)
    assert store.current() is None
    staging = store.begin()  # the failed commit released the writer lock
    (staging / "v.faiss").write_bytes(b"vectors")
    import hashlib

    good = SegmentRef("v.faiss", hashlib.sha256(b"vectors").hexdigest(), 7, rows=3)
    committed = store.commit(staging, manifest(segments=(good,)))
    assert committed.segments == (good,)
    # rows survive into the next generation, whose hashes are inherited through the hard link
    child = commit_files(store, {"w.bin": b"w"})
    assert next(s for s in child.segments if s.path == "v.faiss").rows == 3


def test_commit_requires_matching_store(store: GenerationStore):
    staging = store.begin()
    with pytest.raises(GenerationError):
        store.commit(staging, manifest(kind="vector"))
    other = GenerationStore(store.root, "default", "text")
    with pytest.raises(GenerationError):
        other.commit(staging, manifest())


def test_one_writer_per_line(store: GenerationStore):
    store.begin()
    other = GenerationStore(store.root, "default", "text")
    with pytest.raises(GenerationLockedError):
        other.begin()
    GenerationStore(store.root, "default", "text", line="rebuild-1").begin()  # other lines are free
    store.abort()
    other.begin()
    other.abort()


def test_hardlinked_reuse_survives_deleting_the_old_generation(store: GenerationStore):
    commit_files(store, {"seg-1.bin": b"one" * 1000, "meta.json": b'{"v": 1}'})
    commit_files(store, {"seg-2.bin": b"two" * 1000, "meta.json": b'{"v": 2}'})
    old, new = store.generation_dir(1), store.generation_dir(2)
    assert (old / "seg-1.bin").stat().st_ino == (new / "seg-1.bin").stat().st_ino
    assert (old / "meta.json").read_bytes() == b'{"v": 1}'  # copied, not linked, then replaced
    assert (old / "meta.json").stat().st_ino != (new / "meta.json").stat().st_ino
    assert store.gc(keep_last=1) == [1]
    assert not old.exists()
    store.verify(store.current())
    assert (new / "seg-1.bin").read_bytes() == b"one" * 1000


def test_clone_into_skips_files_outside_the_manifest(store: GenerationStore, tmp_path: Path):
    commit_files(store, {"a.bin": b"a", "meta.json": b"{}"})
    (store.generation_dir(1) / ".tantivy-meta.lock").write_bytes(b"")  # a reader left it
    dst = tmp_path / "dst"
    dst.mkdir()
    clone_into(store.generation_dir(1), dst, copy_names=("meta.*",))
    assert sorted(p.name for p in dst.iterdir()) == ["a.bin", "meta.json"]


def test_pins_prevent_gc_and_expired_pins_do_not(store: GenerationStore):
    for i in range(5):
        commit_files(store, {f"s{i}.bin": bytes([i]) * 10})
    long_pin = store.pin(1, ttl_seconds=60, holder="query/abc def")
    short_pin = store.pin(2, ttl_seconds=0.05, holder="cursor")
    assert store.pinned_ids() == {1, 2}
    time.sleep(0.1)
    assert store.pinned_ids() == {1}
    assert store.gc(keep_last=2) == [2, 3]
    assert store.generation_ids() == [1, 4, 5]
    assert not short_pin.path.exists()  # GC swept the expired pin file
    with long_pin:
        assert long_pin.active
    assert not long_pin.active
    assert store.gc(keep_last=2) == [1]
    assert store.generation_ids() == [4, 5]


def test_gc_sweeps_what_a_pin_writer_left_when_it_died_mid_write(store: GenerationStore):
    import os

    commit_files(store, {"s.bin": b"x"})
    store.pin(1, ttl_seconds=60, holder="query")
    pins = store.line_dir / "pins"
    # What atomic_write leaves when its process dies between writing and renaming.
    staged = pins / f".1-query.pin.{os.getpid()}-0a1b2c3d.tmp"
    staged.write_text("{}")
    fresh = pins / f".2-query.pin.{os.getpid()}-0a1b2c3e.tmp"
    fresh.write_text("{}")
    old = time.time() - 3600
    os.utime(staged, (old, old))
    store.gc(keep_last=1)
    assert not staged.exists() and fresh.exists()  # a writer may still be renaming the fresh one


def test_pin_is_visible_to_other_processes(store: GenerationStore):
    for i in range(3):
        commit_files(store, {f"s{i}.bin": b"x"})
    pin = store.pin(1, ttl_seconds=60, holder="other")
    body = json.loads(pin.path.read_text())
    assert body["generationId"] == 1 and body["holder"] == "other" and body["pid"] == os.getpid()
    script = (
        "import sys; from pathlib import Path; from sinks.generations import GenerationStore;"
        "print(GenerationStore(Path(sys.argv[1]), 'default', 'text').gc(keep_last=1))"
    )
    out = subprocess.run([sys.executable, "-c", script, str(store.root)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[2]"
    pin.renew(120)
    assert json.loads(pin.path.read_text())["expiresAt"] > time.time() + 100
    pin.release()
    pin.release()


def test_gc_sweeps_expired_pins_only_while_no_reader_pins_or_renews(store: GenerationStore):
    """A reader renewing a pin as it expires holds the shared pin lock: GC, which sweeps expired
    pins, waits for it, so the renewed pin (and its generation) is never swept after the write."""
    for i in range(3):
        commit_files(store, {f"s{i}.bin": b"x"})
    pin = store.pin(1, ttl_seconds=60, holder="cursor")
    pin.expires_at = time.time() - 1
    pin._write()  # expired, about to be renewed
    collected: list[list[int]] = []
    with generations._pins_lock(store.line_dir / "pins", exclusive=False):  # the renew in flight
        collector = threading.Thread(target=lambda: collected.append(store.gc(keep_last=1)))
        collector.start()
        collector.join(timeout=0.5)
        assert pin.path.exists(), "GC swept a pin while a reader held the pin lock"
        pin.expires_at = time.time() + 120
        pin._write()
    collector.join(timeout=30)
    assert collected == [[2]] and pin.path.exists() and store.generation_dir(1).exists()
    pin.release()


def test_renewing_a_pin_whose_generation_was_collected_fails(store: GenerationStore):
    for i in range(3):
        commit_files(store, {f"s{i}.bin": b"x"})
    pin = store.pin(1, ttl_seconds=60, holder="cursor")
    pin.expires_at = time.time() - 1
    pin._write()
    path = pin.path
    store.gc(keep_last=1)
    assert not store.generation_dir(1).exists() and not path.exists()
    path.write_text(json.dumps({"generationId": 1, "expiresAt": time.time() + 60}))  # a stale copy
    with pytest.raises(GenerationError, match="released or collected"):
        pin.renew(60)


def test_pin_of_missing_generation_fails(store: GenerationStore):
    commit_files(store, {"a": b"a"})
    with pytest.raises(GenerationError):
        store.pin(9, ttl_seconds=10, holder="q")
    assert store.pinned_ids() == set()
    with pytest.raises(GenerationError):
        store.pin(1, ttl_seconds=0, holder="q")


def test_pin_current(store: GenerationStore):
    assert store.pin_current(ttl_seconds=5, holder="q") is None
    commit_files(store, {"a": b"a"})
    pinned = store.pin_current(ttl_seconds=5, holder="q")
    assert pinned is not None
    current, pin = pinned
    assert current.generation_id == 1 and pin.generation_id == 1
    pin.release()


def test_crashed_gc_restores_a_pinned_generation(store: GenerationStore):
    for i in range(3):
        commit_files(store, {f"s{i}": b"x"})
    pin = store.pin(1, ttl_seconds=60, holder="q")
    # a GC that died between renaming generation 1 away and renaming it back
    os.rename(store.generation_dir(1), store.line_dir / ".trash-gen-00000001-deadbeef")
    store.gc(keep_last=1)
    assert store.generation_dir(1).exists()
    store.verify(store.load(1))
    pin.release()


def test_lines_and_active_switch(store: GenerationStore):
    commit_files(store, {"a": b"live"})
    assert store.active_line() == "live" and store.new_rebuild_line() == "rebuild-1"
    rebuild = GenerationStore(store.root, "default", "text", line=store.new_rebuild_line())
    with pytest.raises(GenerationError):
        rebuild.set_active_line("rebuild-1")  # nothing committed there yet
    rebuilt = commit_files(rebuild, {"a": b"rebuilt"}, built_through_seq=5)
    assert store.lines() == ["live", "rebuild-1"]
    assert read_current(store.root, "default", "text").line == "live"
    rebuild.set_active_line("rebuild-1")
    assert read_current(store.root, "default", "text") == rebuilt
    assert GenerationStore(store.root, "default", "text").line == "rebuild-1"
    assert store.new_rebuild_line() == "rebuild-2"
    for bad in ("", "../x", ".hidden", "a/b", "pins"):
        with pytest.raises(GenerationError):
            GenerationStore(store.root, "default", "text", line=bad)
    with pytest.raises(GenerationError):
        GenerationStore(store.root, "../etc", "text")


_CRASH_CHILD = textwrap.dedent(
    """
    import json, os, random, sys
    from pathlib import Path
    from sinks.generations import GenerationStore, Manifest, clone_into

    store = GenerationStore(Path(sys.argv[1]), "default", "text")
    rng = random.Random(int(sys.argv[2]))
    while True:
        staging = store.begin()
        current = store.current_id()
        if current is not None:
            clone_into(store.generation_dir(current), staging, copy_names=("meta.json",))
            (staging / "meta.json").unlink()
        gid = (current or 0) + 1
        (staging / f"seg-{gid}.bin").write_bytes(rng.randbytes(rng.randint(1, 1 << 20)))
        # meta.json lists every segment: a linked (not copied) meta.json would corrupt old generations
        (staging / "meta.json").write_text(json.dumps(sorted(p.name for p in staging.glob("seg-*.bin"))))
        store.commit(staging, Manifest(
            kind="text", log_id="default", line="", generation_id=0, built_through_seq=gid * 10,
            schema_version="1", asp_version="1.0", chunker={}, embedding=None, redaction_policy_hash="p" * 16,
        ))
        store.gc(keep_last=1)
    """
)


def _check_generation(store: GenerationStore, generation: Manifest) -> None:
    store.verify(generation)
    gen_dir = store.generation_dir(generation.generation_id)
    assert generation.built_through_seq == generation.generation_id * 10
    listed = json.loads((gen_dir / "meta.json").read_text())
    assert listed == sorted(f"seg-{i}.bin" for i in range(1, generation.generation_id + 1))


def test_kill_9_inside_commit_never_exposes_a_partial_generation(store: GenerationStore):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(20240601)
    last_id = 0
    for attempt in range(20):
        child = subprocess.Popen(
            [sys.executable, "-c", _CRASH_CHILD, str(store.root), str(attempt)], env=env,
            stderr=subprocess.PIPE,
        )
        # The kill lands at a random point of the child's commit loop, counted from its first
        # commit: on a loaded machine the interpreter's start alone can outlast a fixed window.
        start_id, started = store.current_id() or 0, time.monotonic()
        while (store.current_id() or 0) <= start_id and child.poll() is None and time.monotonic() - started < 60:
            time.sleep(0.005)
        deadline = time.monotonic() + rng.uniform(0.2, 1.0)
        # Meanwhile a reader pins and fully verifies whatever is current: never partial.
        while time.monotonic() < deadline:
            pinned = store.pin_current(ttl_seconds=30, holder="reader")
            if pinned is not None:
                generation, pin = pinned
                with pin:
                    _check_generation(store, generation)
                    assert generation.generation_id >= last_id
                    last_id = generation.generation_id
        child.send_signal(signal.SIGKILL)
        _out, err = child.communicate()
        assert child.returncode == -signal.SIGKILL, err.decode()
        current = store.current()
        if current is not None:
            _check_generation(store, current)
            assert current.generation_id >= last_id
            last_id = current.generation_id
            for generation_id in store.generation_ids():
                _check_generation(store, store.load(generation_id))
    assert last_id > 5, "the child never got far enough to exercise commits"
    nxt = commit_files(store, {f"seg-{last_id + 1}.bin": b"z"}, clone=True)
    assert nxt.generation_id == last_id + 1


def test_a_pin_taken_while_gc_decides_never_sees_its_generation_missing(store: GenerationStore, monkeypatch):
    """A reader pins generation 1 just after GC read the pins (the race a kill -9 crash test
    once caught on a loaded machine). GC used to move the directory away and back when it saw
    the late pin: meanwhile the reader, holding its pin, found the manifest missing. Now the
    pin waits for GC, and then either finds the generation gone (GC ran first) or keeps it."""
    for n in range(3):
        commit_files(store, {f"seg-{n}.bin": b"x"})
    seen_missing: list[int] = []
    outcome: dict[str, object] = {}

    def reader() -> None:
        try:
            pin = store.pin(1, ttl_seconds=30, holder="late-reader")
        except GenerationError as exc:
            outcome["refused"] = str(exc)
            return
        outcome["pinned"] = True
        with pin:
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                if not (store.generation_dir(1) / "manifest.json").exists():
                    seen_missing.append(1)
                time.sleep(0.001)

    real_pinned_ids = store.pinned_ids
    started: list[threading.Thread] = []

    def pins_then_a_late_reader() -> set[int]:
        pinned = real_pinned_ids()
        if not started:  # GC's decision is made: now the reader pins
            thread = threading.Thread(target=reader)
            started.append(thread)
            thread.start()
            thread.join(timeout=0.3)  # the old GC: pinned by now; the new one: the reader waits
        return pinned

    real_rename = os.rename

    def slow_move(source: object, target: object) -> None:  # a loaded machine, between two steps
        real_rename(source, target)
        if ".trash-gen-" in str(target):
            time.sleep(0.05)

    monkeypatch.setattr(store, "pinned_ids", pins_then_a_late_reader)
    monkeypatch.setattr(generations.os, "rename", slow_move)
    store.gc(keep_last=1)
    started[0].join(timeout=10)
    assert not seen_missing, "a pinned generation's files went missing under its reader"
    assert outcome.get("refused") or (outcome.get("pinned") and (store.generation_dir(1) / "manifest.json").exists())


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(blacklist_categories=("Cs",))),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(body=st.dictionaries(st.text(max_size=8), _JSON_VALUES, max_size=6))
def test_canonical_text_is_json_dumps_whichever_encoder_writes_it(body):
    """Manifests are checked against their canonical text: the fast encoder must write the
    very bytes of json.dumps(sort_keys, indent=1, ensure_ascii=False), floats of every range,
    control and non-ASCII characters, ints past 64 bits included."""
    assert generations._canonical(body) == json.dumps(body, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def test_canonical_text_of_a_manifest_is_json_dumps(monkeypatch):
    """A manifest's text is json's, written by orjson (json's pure-Python indenting encoder not
    called) unless a value needs json; nested several levels deep."""
    segments = [{"path": f"seg-{i}.parquet", "bytes": i * 977, "sha256": "ab" * 32, "rows": i} for i in range(300)]
    plain = {"segments": segments, "createdAt": 1767305602.123456,
             "extra": {"name": "données\u2028", "deep": [[{"a": [1, {"b": []}]}]]}}
    odd = {**plain, "extra": {"tiny": 1e-07, "huge": 1e20, "nan": float("nan")}}
    expected = {id(body): json.dumps(body, sort_keys=True, indent=1, ensure_ascii=False) + "\n" for body in (plain, odd)}
    indents = []
    dumps = json.dumps

    def spy(*args, **kwargs):
        indents.append(kwargs.get("indent"))
        return dumps(*args, **kwargs)

    monkeypatch.setattr(generations.json, "dumps", spy)
    assert generations._canonical(plain) == expected[id(plain)]
    assert 1 not in indents
    assert generations._canonical(odd) == expected[id(odd)]
    assert 1 in indents


def test_a_manifest_text_parsed_again_is_the_same_object_and_damage_still_shows(store: GenerationStore):
    committed = commit_files(store, {"a.bin": b"payload"})
    text = store.manifest_path(committed.generation_id).read_bytes()
    assert Manifest.from_json(text) is Manifest.from_json(bytes(text))
    damaged = text.replace(b'"chunkCount": 0', b'"chunkCount": 7')
    assert damaged != text
    for _ in range(2):  # a refusal is never remembered as a manifest
        with pytest.raises(ManifestVerificationError):
            Manifest.from_json(damaged)
