"""A record an import dead-lettered that a later import of the grown file takes (the cut last
line of a live transcript, completed since) is resolved: the import says so once, through the
appender, and no longer counts it as dead-lettered. Real transcript: tests/fixtures/turn_ends
(Claude Code, marot/spotter)."""

from __future__ import annotations

from pathlib import Path

from streams.follow import Follower, PositionStore
from streams.testing import MemoryL1

TRANSCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "turn_ends" / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl"


def _ingest(path: Path, l1: MemoryL1, home: Path):
    return Follower([path], appender=l1, store=PositionStore(home), once=True).poll()


def test_a_cut_last_line_completed_later_resolves_its_dead_letter(tmp_path: Path) -> None:
    lines = TRANSCRIPT.read_bytes().splitlines()
    live = tmp_path / "in" / TRANSCRIPT.name
    live.parent.mkdir()
    live.write_bytes(b"\n".join([*lines[:-1], lines[-1][:150]]))  # the writer is mid-line
    l1, home = MemoryL1(), tmp_path / "home"
    first = _ingest(live, l1, home)
    last = f"{TRANSCRIPT.name}:{len(lines)}"
    assert [item.record for item in l1.dead] == [last] and first.resolved == []

    live.write_bytes(b"\n".join(lines) + b"\n")  # ... and has written the rest of it
    second = _ingest(live, l1, home)
    assert second.appended > 0 and second.rejected_before == []
    assert (second.resolved, l1.resolved) == ([last], [(last, "default")])
    assert [item.record for item in l1.dead] == [last]  # nothing dead-lettered again

    third = _ingest(live, l1, home)  # resolved once: nothing to say again
    assert (third.appended, third.resolved, len(l1.resolved)) == (0, [], 1)


def test_a_record_still_bad_is_not_resolved(tmp_path: Path) -> None:
    """A re-import that still rejects the record (or part of it) resolves nothing."""
    lines = TRANSCRIPT.read_bytes().splitlines()
    path = tmp_path / "in" / TRANSCRIPT.name
    path.parent.mkdir()
    path.write_bytes(b"\n".join([*lines[:-1], lines[-1][:150]]))
    l1, home = MemoryL1(), tmp_path / "home"
    _ingest(path, l1, home)
    path.write_bytes(b"\n".join([*lines[:-1], lines[-1][:150], b'{"type": "user", "cut']))
    again = _ingest(path, l1, home)
    assert again.resolved == [] and l1.resolved == []
    assert [item.record for item in again.rejected_before] == [f"{TRANSCRIPT.name}:{len(lines)}"]
