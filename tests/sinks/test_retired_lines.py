"""Retired generation lines are deleted once nothing can read them (sinks.retired): past the
grace period, without an unexpired pin, never the ACTIVE line or one still being built."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sinks.retired as retired
from planner.exceptions import CursorExpired
from planner.pins import QUERY_PIN_SECONDS
from planner.readers import pin_for_cursor
from sinks.exceptions import GenerationError
from sinks.generations import LINE_TRASH_PREFIX, GenerationStore, Manifest
from sinks.retired import collect_retired_lines, collect_retired_lines_due
from streams.settings import Settings

GRACE = 600.0
SEGMENT_BYTES = 200_000


def _commit(store: GenerationStore, name: str, size: int = SEGMENT_BYTES) -> Manifest:
    staging = store.begin()
    (staging / name).write_bytes(os.urandom(size))
    return store.commit(staging, Manifest(
        kind=store.kind, log_id=store.log_id, line="", generation_id=0, built_through_seq=1,
        schema_version="1", asp_version="1.0", chunker={}, embedding=None, redaction_policy_hash="p1"))


def _rebuilt(root: Path, *, shard: str | None = None, retired_seconds_ago: float = GRACE + 60) -> GenerationStore:
    """The state after a rebuild: line ``live`` (two generations) retired, ``rebuild-1`` active;
    returns the retired line's store."""
    live = GenerationStore(root, "default", "text", shard=shard)
    _commit(live, "seg-1.bin")
    _commit(live, "seg-2.bin")
    rebuild = GenerationStore(root, "default", "text", "rebuild-1", shard=shard)
    _commit(rebuild, "seg-r.bin")
    live.set_active_line("rebuild-1")
    live.retire("rebuild-1")
    _age(live, retired_seconds_ago)
    return live


def _age(store: GenerationStore, seconds: float) -> None:
    retired_file = store.line_dir / "RETIRED"
    then = time.time() - seconds
    os.utime(retired_file, (then, then))


def _bytes_under(directory: Path) -> int:
    seen: dict[tuple[int, int], int] = {}
    for path in directory.rglob("*"):
        if path.is_file():
            st = path.stat()
            seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


def test_a_retired_line_past_its_grace_without_pins_is_removed_and_its_bytes_freed(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    old = _rebuilt(root)
    expired = old.pin(2, ttl_seconds=0.01, holder="planner")  # a planner killed mid-query
    time.sleep(0.05)
    before = _bytes_under(root) - expired.path.stat().st_size  # expired pins are swept first

    (removed,) = collect_retired_lines(root, "default", "text", grace_seconds=GRACE)

    assert (removed.line, removed.shard) == ("live", None)
    assert removed.bytes_freed >= 2 * SEGMENT_BYTES  # the two segments (hard-linked once)
    assert before - _bytes_under(root) == removed.bytes_freed
    assert not old.line_dir.exists() and not expired.path.exists()
    kind_dir = root / "default" / "text"
    assert sorted(p.name for p in kind_dir.iterdir()) == ["ACTIVE", "rebuild-1"]  # no trash left
    active = GenerationStore(root, "default", "text")
    assert active.line == "rebuild-1" and active.current_id() == 1
    active.verify(active.load(1))


def test_a_pinned_retired_line_is_kept_until_its_pin_goes(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    old = _rebuilt(root)
    cursor_pin = old.pin(1, ttl_seconds=3600, holder="cursor")  # an older generation, kept by a cursor

    assert collect_retired_lines(root, "default", "text", grace_seconds=GRACE) == []
    assert old.generation_ids() == [1, 2] and cursor_pin.path.exists()

    cursor_pin.release()
    assert [r.line for r in collect_retired_lines(root, "default", "text", grace_seconds=GRACE)] == ["live"]


def test_a_retired_line_within_its_grace_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    old = _rebuilt(root, retired_seconds_ago=GRACE - 30)

    assert collect_retired_lines(root, "default", "text", grace_seconds=GRACE) == []
    assert old.generation_ids() == [1, 2]


def test_the_active_line_and_a_line_being_built_are_never_touched(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    _rebuilt(root)
    active = GenerationStore(root, "default", "text")
    # A RETIRED file in the ACTIVE line (ACTIVE edited back by hand) does not make it collectable.
    (active.line_dir / "RETIRED").write_text("replaced by rebuild-2 at 0\n")
    _age(active, GRACE * 10)
    # A rebuild in progress: a committed generation, no switch yet, writing the next one.
    building = GenerationStore(root, "default", "text", "rebuild-2")
    _commit(building, "seg-b.bin")
    staging = building.begin()
    try:
        removed = collect_retired_lines(root, "default", "text", grace_seconds=0)
    finally:
        building.abort()
    assert [r.line for r in removed] == ["live"]
    assert active.current_id() == 1 and building.current_id() == 1
    assert not staging.exists()  # aborted by the test itself, not collected
    # Its writer lock released, the rebuild line still has no RETIRED file: still never touched.
    assert collect_retired_lines(root, "default", "text", grace_seconds=0) == []
    assert building.generation_ids() == [1]


def test_a_retired_line_a_writer_still_commits_to_is_kept(tmp_path: Path) -> None:
    """A sink that has not followed the switch yet may still be committing to the old line."""
    root = tmp_path / "indexes"
    old = _rebuilt(root)
    old.begin()
    try:
        assert collect_retired_lines(root, "default", "text", grace_seconds=GRACE) == []
    finally:
        old.abort()
    assert [r.line for r in collect_retired_lines(root, "default", "text", grace_seconds=GRACE)] == ["live"]


def test_retired_lines_of_a_shard_are_collected(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    old = _rebuilt(root, shard="shard-0-of-2")
    other = _rebuilt(root, shard="shard-1-of-2")

    (removed,) = collect_retired_lines(root, "default", "text", grace_seconds=GRACE, shard="shard-0-of-2")

    assert (removed.line, removed.shard) == ("live", "shard-0-of-2") and removed.bytes_freed >= 2 * SEGMENT_BYTES
    assert not old.line_dir.exists() and other.line_dir.exists()
    assert GenerationStore(root, "default", "text", shard="shard-0-of-2").current_id() == 1


def test_a_cursor_on_a_collected_line_gets_cursor_expired(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    old = _rebuilt(root)
    assert collect_retired_lines(root, "default", "text", grace_seconds=GRACE)

    with pytest.raises(CursorExpired, match="no longer exists"):
        pin_for_cursor(root, "default", "text", 2, "live", ttl_seconds=QUERY_PIN_SECONDS, holder="planner")
    assert not old.line_dir.exists(), "a pin attempt must not bring the removed line back"


def test_a_reader_that_waited_for_the_pin_lock_finds_the_line_gone(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader opened the line's pin lock before the collector renamed the line away, and got
    the lock once the collector released it: a clean GenerationError, nothing recreated."""
    root = tmp_path / "indexes"
    old = _rebuilt(root)
    real_lock = GenerationStore._pins_lock

    @contextlib.contextmanager
    def lock_then_collected(self: GenerationStore, *, exclusive: bool) -> Iterator[None]:
        with real_lock(self, exclusive=exclusive):
            os.rename(self.line_dir, self.kind_dir / f"{LINE_TRASH_PREFIX}live-test")
            yield

    monkeypatch.setattr(GenerationStore, "_pins_lock", lock_then_collected)
    with pytest.raises(GenerationError, match="does not exist"):
        old.pin(2, ttl_seconds=QUERY_PIN_SECONDS, holder="planner")
    assert not old.line_dir.exists()


def test_making_a_retired_line_active_again_keeps_it(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    old = _rebuilt(root)
    old.set_active_line("live")  # a rollback
    assert old.retired_at() is None
    assert collect_retired_lines(root, "default", "text", grace_seconds=0) == []


def test_a_crashed_collection_leaves_no_trash(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    old = _rebuilt(root, retired_seconds_ago=0)
    crashed = old.kind_dir / f"{LINE_TRASH_PREFIX}live-deadbeef"
    (crashed / "gen-00000001").mkdir(parents=True)
    (crashed / "gen-00000001" / "seg.bin").write_bytes(b"x" * 100)
    collect_retired_lines(root, "default", "text", grace_seconds=GRACE)
    assert not crashed.exists() and old.line_dir.exists()


def test_a_sink_collects_at_most_once_an_interval(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    _rebuilt(root, retired_seconds_ago=0)
    assert collect_retired_lines_due(root, "default", "text", grace_seconds=GRACE) == []  # within grace
    old = GenerationStore(root, "default", "text", "live")
    _age(old, GRACE + 1)
    assert collect_retired_lines_due(root, "default", "text", grace_seconds=GRACE) == []  # not due yet
    assert [r.line for r in collect_retired_lines_due(root, "default", "text", grace_seconds=GRACE,
                                                      interval_seconds=0)] == ["live"]


def test_a_sink_commit_never_fails_on_collection(tmp_path: Path) -> None:
    root = tmp_path / "indexes"
    _rebuilt(root)
    (root / "default" / "text" / "ACTIVE").write_text("../elsewhere\n")  # malformed
    assert collect_retired_lines_due(root, "default", "text", grace_seconds=GRACE, interval_seconds=0) == []


def test_the_grace_default_covers_a_query_pin() -> None:
    settings = Settings.from_env({})
    assert settings.retired_line_grace_seconds >= QUERY_PIN_SECONDS
    assert retired.COLLECT_INTERVAL_SECONDS < settings.retired_line_grace_seconds


def test_retired_file_records_what_replaced_the_line(tmp_path: Path) -> None:
    old = _rebuilt(tmp_path / "indexes")
    assert (old.line_dir / "RETIRED").read_text().startswith("replaced by rebuild-1 at ")
    assert json.dumps(old.retired_at())  # a number
