"""A JSONL line that holds more than one record (a writer killed mid-line that started again on
the same line, or one that lost a newline): its whole records import, only the cut part is
rejected, and a re-import says the same (``streams.importers.base.line_parts``). And a transcript
of several sessions gives each its own title. Real transcripts: tests/fixtures/turn_ends (Claude
Code, marot/spotter), tests/fixtures/claude_code_log (daaain/claude-code-log),
tests/fixtures/importers/openai_chat."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from streams.follow import Follower, PositionStore
from streams.importers import Accepted, Rejected, iter_records
from streams.importers.base import line_parts
from streams.testing import Clock, MemoryL1

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLAUDE = FIXTURES / "turn_ends" / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl"
OPENAI = FIXTURES / "importers" / "openai_chat" / "conversations.jsonl"
EDGE_CASES = FIXTURES / "claude_code_log" / "edge_cases.jsonl"


def _imported(path: Path) -> tuple[list[dict], list[Rejected]]:
    items = list(iter_records(path))
    return ([item.event for item in items if isinstance(item, Accepted)],
            [item for item in items if isinstance(item, Rejected)])


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


# (file, the index of a line that the next line follows on the same line)
GLUED = [(CLAUDE, 2), (OPENAI, 0)]


@pytest.mark.parametrize(("source", "at"), GLUED, ids=["claude-code", "openai-chat"])
def test_two_whole_records_on_one_line_import_as_they_would_on_two(source: Path, at: int, tmp_path: Path) -> None:
    lines = _lines(source)
    joined = tmp_path / source.name
    joined.write_bytes(b"\n".join([*lines[:at], lines[at] + lines[at + 1], *lines[at + 2:]]) + b"\n")
    events, rejected = _imported(joined)
    original, refused = _imported(source)
    assert [item.reason for item in rejected] == [item.reason for item in refused]  # openai-chat's: a "bot" message
    if source is CLAUDE:
        assert events == original  # byte for byte: the ids come from the lines' uuids
    else:
        # A conversation without an id is named after its place (line 1@927, not line 2): the
        # same content, under another session id.
        assert _content(events) == _content(original)


def _content(events: list[dict]) -> list[tuple[str, str]]:
    return sorted((event["type"], str(event["fields"].get("text") or event["fields"].get("output"))) for event in events)


@pytest.mark.parametrize(("source", "at"), GLUED, ids=["claude-code", "openai-chat"])
def test_a_cut_record_loses_only_itself_to_the_whole_one_after_it(source: Path, at: int, tmp_path: Path) -> None:
    """A writer killed mid-line leaves half a record, and the next record it writes goes on the
    same line: that record imports, the half is rejected with its reason, and a re-import says
    the same."""
    lines = _lines(source)
    cut = len(lines[at]) // 2
    crashed = tmp_path / source.name
    crashed.write_bytes(b"\n".join([*lines[:at], lines[at][:cut] + lines[at + 1], *lines[at + 2:]]) + b"\n")
    events, rejected = _imported(crashed)
    line = [item for item in rejected if item.record.startswith(f"{source.name}:{at + 1}") and "/" not in item.record]
    assert [(item.record, item.raw) for item in line] == [(f"{source.name}:{at + 1}", lines[at][:cut].decode())]
    assert f"cut off by the record that begins at byte {cut} of the same line" in line[0].reason
    # What the writer lost is the cut record: the rest is what the file without it says.
    lost = tmp_path / "lost" / source.name
    lost.parent.mkdir()
    lost.write_bytes(b"\n".join([*lines[:at], *lines[at + 1:]]) + b"\n")
    if source is CLAUDE:  # byte for byte: the ids come from the lines' uuids
        assert events == _imported(lost)[0]
    else:
        # ... and what the cut conversation holds whole before the cut: its first messages.
        found, without = Counter(_content(events)), Counter(_content(_imported(lost)[0]))
        alone = tmp_path / "alone" / source.name
        alone.parent.mkdir()
        alone.write_bytes(lines[at] + b"\n")
        assert found > without and found - without <= Counter(_content(_imported(alone)[0])) + Counter(
            {("turn.ended", "None"): 1})
        assert "kept what it holds whole before the cut: messages[0]" in line[0].reason
    assert _imported(crashed)[0] == events


def test_a_record_cut_inside_a_character_loses_only_itself(tmp_path: Path) -> None:
    """The cut falls inside a multi-byte character of the real transcript's line: that line is no
    UTF-8, and the whole record after the cut was dead-lettered with it as `not valid UTF-8`."""
    lines = _lines(CLAUDE)
    at = next(i for i, line in enumerate(lines[:-1]) if any(byte >= 0xC0 for byte in line))
    cut = next(i for i, byte in enumerate(lines[at]) if byte >= 0xC0) + 1
    crashed = tmp_path / CLAUDE.name
    crashed.write_bytes(b"\n".join([*lines[:at], lines[at][:cut] + lines[at + 1], *lines[at + 2:]]) + b"\n")
    events, rejected = _imported(crashed)
    assert [(item.record, item.reason) for item in rejected] == [(
        f"{CLAUDE.name}:{at + 1}", f"invalid JSON (truncated or not JSON): cut off inside a UTF-8 character at offset "
        f"{cut - 1}; cut off by the record that begins at byte {cut} of the same line, read on its own")]
    lost = tmp_path / "lost" / CLAUDE.name
    lost.parent.mkdir()
    lost.write_bytes(b"\n".join([*lines[:at], *lines[at + 1:]]) + b"\n")
    assert events == _imported(lost)[0]


def test_a_reimport_of_a_file_with_a_crashed_line_appends_nothing_and_dead_letters_nothing(tmp_path: Path) -> None:
    """Through usl ingest's path (a one-shot Follower): the second import of the same file finds
    every event in L1 (no conflict) and the cut part already dead-lettered."""
    lines = _lines(CLAUDE)
    crashed = tmp_path / "in" / CLAUDE.name
    crashed.parent.mkdir()
    crashed.write_bytes(b"\n".join([*lines[:5], lines[5][:40] + lines[6], *lines[7:]]) + b"\n")
    l1 = MemoryL1()
    first = Follower([crashed], appender=l1, store=PositionStore(tmp_path / "home"), once=True).poll()
    assert [item.record for item in l1.dead] == [f"{CLAUDE.name}:6"]
    assert first.appended == len(l1.log) > 0
    again = Follower([crashed], appender=l1, store=PositionStore(tmp_path / "other-home"), once=True).poll()
    assert (again.appended, len(l1.dead)) == (0, 1 + len(again.rejected_items))
    assert all("already in log" not in item.reason for item in l1.dead)


@pytest.mark.parametrize(("line", "parts"), [
    (b'{"a":1}{"b":2}', [(0, 7, True), (7, 14, True)]),
    (b'{"type":"user","mess{"type":"assistant"}', [(0, 20, False), (20, 40, True)]),
    (b'{"a":{"b":1}{"c":2}', [(0, 12, False), (12, 19, True)]),  # cut after a nested value
    (b'{"t":"a {}{"b":1}', [(0, 10, False), (10, 17, True)]),  # cut in a string holding braces
    (b'{"a":tru{"b":1}', [(0, 8, False), (8, 15, True)]),
    (b'\x00\x00{"a":1}', [(0, 2, False), (2, 9, True)]),  # a crash's zero bytes before a record
    (b'{"a":1} junk', [(0, 7, True), (8, 12, False)]),
    (b'{"a":1}{"b":', [(0, 7, True), (7, 12, False)]),
    ('{"é":1}{"b":2}'.encode(), [(0, 8, True), (8, 15, True)]),  # bytes, not characters
    # A writer killed inside a character ("é" is c3 a9): the line is no UTF-8, yet its whole
    # record is found (it was rejected with the cut part, as a file that is not UTF-8).
    (b'{"t":"caf\xc3{"b":"\xe2\x98\x83"}', [(0, 10, False), (10, 21, True)]),
    (b'{"t":"caf\xff"}', None),  # one record with a stray byte: not split
    # One record cut short, whose rest reads as a value: not split (as likely a line cut at its
    # end as a record glued after a cut between a key and its value).
    (b'{"a":{"b":{"c":1}}', None),
    (b'{"a":[1,{"b":1}', None),
    (b'{"a":', None),
    (b'{"a":"x', None),
    (b'not json', None),
    (b'{"a":1}', None),
])
def test_line_parts(line: bytes, parts: list[tuple[int, int, bool]] | None) -> None:
    assert line_parts(line) == parts


def test_each_session_of_a_transcript_gets_its_own_title() -> None:
    """claude-code-log's edge cases hold two sessions and one summary, which names a line of
    ``edge_cases``: ``todowrite_session`` took that title too."""
    started = {event["sessionId"]: event["fields"] for event in _imported(EDGE_CASES)[0]
               if event["type"] == "session.started"}
    assert set(started) == {"edge_cases", "todowrite_session"}
    assert started["edge_cases"]["title"].startswith("Tested various edge cases")
    assert "title" not in started["todowrite_session"]


def test_a_summary_naming_no_line_of_the_file_titles_the_sessions_without_one(tmp_path: Path) -> None:
    """The summary of a resumed conversation (its leaf in another file) still titles a session
    that no summary of its own names, as it titled a file's only session."""
    lines = _lines(EDGE_CASES)
    resumed = tmp_path / "resumed.jsonl"
    resumed.write_bytes(b"\n".join([b'{"type":"summary","summary":"Earlier work","leafUuid":"elsewhere"}',
                                    *lines]) + b"\n")
    started = {event["sessionId"]: event["fields"].get("title") for event in _imported(resumed)[0]
               if event["type"] == "session.started"}
    assert started["todowrite_session"] == "Earlier work"
    assert started["edge_cases"].startswith("Tested various edge cases")


def test_a_follower_takes_a_last_line_of_two_whole_records_once_the_file_is_idle(tmp_path: Path) -> None:
    """A last line without its newline is taken once the file is idle when it is whole, as a
    one-shot import takes it; two whole records on it are whole too (it waited for ever)."""
    lines = _lines(CLAUDE)
    live = tmp_path / "live" / CLAUDE.name
    live.parent.mkdir()
    live.write_bytes(b"\n".join([*lines[:-2], lines[-2] + lines[-1]]))
    l1, clock = MemoryL1(), Clock()
    follower = Follower([live.parent], appender=l1, store=PositionStore(tmp_path / "home"), idle_seconds=5.0,
                        clock=clock)
    follower.poll()
    clock.now += 10
    report = follower.poll()
    assert report.cut_lines == []
    assert {event["eventId"] for event in l1.log} == {event["eventId"] for event in _imported(CLAUDE)[0]}


def test_a_cut_line_full_of_brackets_is_read_in_linear_time() -> None:
    """A line cut inside a string full of openings (printed lists, nested objects) tries a few
    places for the next record, not every opening: from each `[0] ` whole values were read to the
    end of the line, so 16 000 of them took 105 s."""
    import time

    for shape in ('[0] ', '{} ', '[0,', '{"x":1, ', '[', '{"a":"'):
        timings = []
        for count in (4_000, 16_000):
            line = ('{"a":"' + shape * count + 'x').encode()
            best = float("inf")
            for _ in range(3):  # the best of three: a pause of a loaded machine is not the reading's
                started = time.process_time()
                line_parts(line)
                best = min(best, time.process_time() - started)
            timings.append(best)
        assert timings[1] < 8 * timings[0] + 0.2, (shape, timings)
