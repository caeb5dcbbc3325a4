"""A Claude Code file of summary lines only (a session left before its first prompt) is skipped
and named, not dead-lettered line by line. Real transcript: tests/fixtures/claude_summaries."""

from __future__ import annotations

import shutil
from pathlib import Path

from streams.follow import Follower, PositionStore
from streams.importers import Accepted, Rejected, iter_records
from streams.importers.claude_code import SUMMARIES_ONLY
from streams.testing import Clock, MemoryL1

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude_summaries"
TRANSCRIPT = FIXTURES / "55604662-cf2a-4331-851a-ec234028f8ca.jsonl"
SUMMARIES = FIXTURES / "a3e1f0c4-7b2d-4c9e-9f15-6d8b2a47c3e1.jsonl"


def follower(path: Path, l1: MemoryL1, home: Path, clock: Clock, **options: object) -> Follower:
    return Follower([path], appender=l1, store=PositionStore(home), clock=clock, idle_seconds=5, **options)


def test_a_directory_import_skips_a_file_of_summaries_only():
    results = list(iter_records(FIXTURES))
    assert [r for r in results if isinstance(r, Rejected)] == []
    alone = [r.event for r in iter_records(TRANSCRIPT) if isinstance(r, Accepted)]
    assert [r.event for r in results if isinstance(r, Accepted)] == alone
    assert list(iter_records(SUMMARIES)) == []


def test_usl_ingest_names_the_file_of_summaries_only_as_skipped_and_dead_letters_nothing(tmp_path):
    l1 = MemoryL1()
    report = follower(FIXTURES, l1, tmp_path / "home", Clock(), once=True).poll()
    assert report.rejected == 0 and report.undetected == []
    assert report.skipped == [(str(SUMMARIES), SUMMARIES_ONLY)]
    assert report.appended == len(alone := [r for r in iter_records(TRANSCRIPT) if isinstance(r, Accepted)])
    assert [e["eventId"] for e in l1.log] == [r.event["eventId"] for r in alone]


def test_a_file_of_summaries_only_named_on_the_command_line_is_skipped_not_an_error(tmp_path):
    l1 = MemoryL1()
    report = follower(SUMMARIES, l1, tmp_path / "home", Clock(), once=True).poll()
    assert report.skipped == [(str(SUMMARIES), SUMMARIES_ONLY)]
    assert (report.appended, report.rejected, l1.log) == (0, 0, [])


def test_a_followed_session_that_begins_with_summaries_is_imported_once_it_gets_its_prompt(tmp_path):
    """Claude Code writes a new session's summaries before its first prompt: the follower skips
    the file while it holds them only, and imports it whole (summaries placed after the prompt,
    none dead-lettered) once the conversation follows."""
    root = tmp_path / "project"
    root.mkdir()
    session = root / TRANSCRIPT.name
    shutil.copy(SUMMARIES, session)
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    clock.now += 10
    first = tail.poll()
    assert first.skipped == [(str(session), SUMMARIES_ONLY)] and l1.log == []
    assert tail.poll().skipped == []  # unchanged: not named again
    session.write_bytes(SUMMARIES.read_bytes() + TRANSCRIPT.read_bytes())
    for _ in range(3):
        clock.now += 10
        report = tail.poll()
        assert report.rejected == 0 and report.skipped == []
    summaries = [e for e in l1.log if e["type"] == "x.claude-code.summary"]
    assert len(summaries) == 2
    expected = {r.event["eventId"] for r in iter_records(session) if isinstance(r, Accepted)}
    assert {e["eventId"] for e in l1.log} == expected
