"""Follow mode against an in-memory L1: growing files, partial lines, restarts, crashes in the
middle of a batch, truncation, rotation and deletion all leave each event exactly once."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
from streams.follow import Follower, PositionStore
from streams.importers import Accepted, Rejected, iter_records
from streams.testing import Clock, Crash, MemoryL1
from tests.streams.follow_kit import TRANSCRIPTS, follower, write_as_written
from tests.streams.follow_kit import whole_import_ids as one_shot_ids

ROOT = Path(__file__).resolve().parents[2]


def assert_rotated_lines_appended(l1: MemoryL1, tmp_path: Path, name: str, held: list[bytes]) -> None:
    """Every event a one-shot import of what the file ``held`` when it was rotated gives is in
    ``l1`` with the same id; but its turn ends, which the one-shot import adds at the end of its
    input while the new file goes on."""
    before = tmp_path / "before" / name
    before.parent.mkdir()
    before.write_bytes(b"".join(held))
    ends = {i.event["eventId"] for i in iter_records(before) if isinstance(i, Accepted)
            and i.event["type"] == "turn.ended"}
    assert one_shot_ids(before) - ends - set(l1.counts()) == set()


def test_growing_transcript_each_event_once_and_partial_line_waits(tmp_path):
    source = TRANSCRIPTS[0].read_bytes()
    live = tmp_path / "projects" / "demo" / TRANSCRIPTS[0].name
    live.parent.mkdir(parents=True)
    live.write_bytes(b"")
    l1, clock = MemoryL1(), Clock()
    tail = follower(tmp_path / "projects", l1, tmp_path / "home", clock)
    tail.poll()
    lines = source.splitlines(keepends=True)
    for line in lines:
        half = len(line) // 2
        with live.open("ab") as handle:
            handle.write(line[:half])
        tail.poll()  # a partial line waits for its newline: nothing is rejected
        with live.open("ab") as handle:
            handle.write(line[half:])
        tail.poll()
        clock.now += 1
    assert not l1.dead
    held = {e["eventId"] for e in l1.log}
    assert all(count == 1 for count in l1.counts().values())
    expected = one_shot_ids(live)
    assert held < expected  # the last turn's end waits for the file to go idle
    assert {e for e in expected - held} and all(
        i.event["type"] == "turn.ended" for i in iter_records(live)
        if isinstance(i, Accepted) and i.event["eventId"] in expected - held)
    clock.now += 10
    tail.poll()
    assert set(l1.counts()) == expected and max(l1.counts().values()) == 1


OPENAI = ROOT / "tests" / "fixtures" / "importers" / "openai_chat"


def _message_lines() -> bytes:
    messages = json.loads((OPENAI / "support_chat.json").read_text())
    return b"".join(json.dumps(message).encode() + b"\n" for message in messages)


@pytest.mark.parametrize("source", [(OPENAI / "conversations.jsonl").read_bytes(), _message_lines()],
                         ids=["a conversation per line", "a message per line"])
def test_a_growing_openai_chat_jsonl_is_followed_line_by_line(tmp_path, source):
    # OpenAI-chat counted as a document format, and a *.jsonl of it never parsed whole: a
    # followed one was never imported, not even its complete lines.
    live = tmp_path / "runs" / "agent.jsonl"
    live.parent.mkdir()
    live.write_bytes(b"")
    l1, clock = MemoryL1(), Clock()
    tail = follower(live.parent, l1, tmp_path / "home", clock)
    appended = []
    for line in source.splitlines(keepends=True):
        with live.open("ab") as handle:
            handle.write(line)
        tail.poll()
        appended.append(len(l1.log))
        clock.now += 1
    clock.now += 10
    tail.poll()
    assert appended[0] > 0 or appended[1] > 0  # imported as lines arrive, not at the end
    assert set(l1.counts()) == one_shot_ids(live) and max(l1.counts().values()) == 1
    # One run of message lines is one session, however many polls it arrived over.
    assert len({event["sessionId"] for event in l1.log}) == len(
        {i.event["sessionId"] for i in iter_records(live) if isinstance(i, Accepted)})


def test_restart_resumes_and_one_shot_appends_nothing(tmp_path):
    live = tmp_path / "session.jsonl"
    lines = TRANSCRIPTS[1].read_bytes().splitlines(keepends=True)
    live.write_bytes(b"".join(lines[:10]))
    l1, clock = MemoryL1(), Clock()
    follower(live, l1, tmp_path / "home", clock).poll()
    first = len(l1.log)
    assert first > 0
    with live.open("ab") as handle:
        handle.write(b"".join(lines[10:]))
    restarted = follower(live, l1, tmp_path / "home", clock)
    restarted.poll()
    clock.now += 10
    restarted.poll()
    assert set(l1.counts()) == one_shot_ids(live) and max(l1.counts().values()) == 1
    before = len(l1.log)
    report = follower(live, l1, tmp_path / "home", clock, once=True).poll()
    assert len(l1.log) == before and report.appended == 0 and report.duplicates > 0
    # A store that was lost (or a copy of the file elsewhere): L1 itself says what is there.
    copy = tmp_path / "elsewhere" / live.name
    copy.parent.mkdir()
    copy.write_bytes(live.read_bytes())
    report = follower(copy, l1, tmp_path / "other-home", clock, once=True).poll()
    assert len(l1.log) == before and report.appended == 0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_writes_restarts_and_crashes_leave_each_event_once(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("follow")
    source = data.draw(st.sampled_from(TRANSCRIPTS)).read_bytes()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(source)), max_size=8)))
    live = tmp / "live" / "session.jsonl"
    live.parent.mkdir()
    live.write_bytes(b"")
    l1, clock = MemoryL1(), Clock()
    started = clock.now
    tail = follower(live.parent, l1, tmp / "home", clock)
    written = 0
    released_early = False  # the file went idle mid-way: what its end said went out then
    restarted = False
    for cut in [*cuts, len(source)]:
        with live.open("ab") as handle:
            handle.write(source[written:cut])
        written = max(written, cut)
        pause = data.draw(st.sampled_from([0.0, 1.0, 6.0]))
        clock.now += pause
        released_early |= pause > 5 and written < len(source)
        # A restarted follower dates a file's last change from its mtime, which is real time
        # (about when the test started) while this clock moved on: after 5 s of pauses in all,
        # it finds the file idle mid-way too.
        released_early |= restarted and clock.now - started >= 5 and written < len(source)
        if data.draw(st.booleans()):
            l1.crash_in = data.draw(st.integers(0, 30))
        try:
            tail.poll()
        except Crash:
            tail = follower(live.parent, l1, tmp / "home", clock)  # kill -9, then a restart
            restarted = True
        l1.crash_in = None
        if data.draw(st.booleans()):
            tail = follower(live.parent, l1, tmp / "home", clock)
            restarted = True
    clock.now += 10
    tail.poll()
    tail.poll()
    assert max(l1.counts().values()) == 1
    if released_early:
        # An importer may say something else at the end of a prefix than of the whole file
        # (an early line placed in a session it names later): both went out, each once.
        assert set(l1.counts()) >= one_shot_ids(live)
    else:
        assert set(l1.counts()) == one_shot_ids(live)


def test_truncation_rotation_and_deletion(tmp_path):
    root = tmp_path / "sessions"
    root.mkdir()
    live = root / "a.jsonl"
    live.write_bytes(TRANSCRIPTS[0].read_bytes())
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    clock.now += 10
    tail.poll()
    first = l1.counts()
    # Rotation: the file moves aside (still under the followed directory), a new one starts.
    live.rename(root / "a.1.jsonl")
    live.write_bytes(TRANSCRIPTS[1].read_bytes())
    tail.poll()
    clock.now += 10
    tail.poll()
    assert max(l1.counts().values()) == 1
    assert set(l1.counts()) == set(first) | one_shot_ids(live)
    # Truncation and a rewrite with part of the old content: nothing old is appended again,
    # also by a restarted follower that never saw the old content. What is new is the end of
    # the turn the rewritten file now ends in (an end's id names the turn's last event).
    before = len(l1.log)
    live.write_bytes(b"".join(TRANSCRIPTS[1].read_bytes().splitlines(keepends=True)[:5]))
    restarted = follower(root, l1, tmp_path / "home", clock)
    restarted.poll()
    clock.now += 10
    restarted.poll()
    assert [e["type"] for e in l1.log[before:]] in ([], ["turn.ended"]) and max(l1.counts().values()) == 1
    before = len(l1.log)
    # Deletion releases what was held back; the store keeps the file's record.
    grow = root / "b.jsonl"
    grow.write_bytes(TRANSCRIPTS[0].read_bytes().replace(b"5b0e2f1c-", b"6b0e2f1c-"))
    clock.now = time.time()
    restarted.poll()
    held_before = len(l1.log)
    grow.unlink()
    restarted.poll()
    assert len(l1.log) > held_before and max(l1.counts().values()) == 1


@pytest.mark.parametrize("grows", [True, False], ids=["goes on", "stays as it was"])
def test_a_file_renamed_mid_turn_within_the_followed_directory_gets_no_second_end(tmp_path, grows):
    """QA (session 33): a transcript renamed while its turn was open (a tool that renames a live
    session file, spotter's tool_heavy.jsonl replayed into a followed directory). The old name
    was gone, so its held-back turn end went out as a deleted file's does, although the file
    was only renamed and its turn went on: the turn had an end in the middle and a second one
    at its real end, one event more than a one-shot import of the finished file gives. A renamed
    file that does not grow has its held-back end sent once it is idle, under its new name."""
    lines = TRANSCRIPTS[0].read_bytes().splitlines(keepends=True)
    root = tmp_path / "sessions"
    root.mkdir()
    live = root / "a.jsonl"
    live.write_bytes(b"".join(lines[: len(lines) // 2]))
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    renamed = root / "a-renamed.jsonl"
    live.rename(renamed)
    if grows:
        with renamed.open("ab") as handle:
            handle.write(b"".join(lines[len(lines) // 2:]))
    clock.now += 1
    tail.poll()
    assert not grows or set(l1.counts()) < one_shot_ids(renamed)  # the end waits
    clock.now += 10
    tail.poll()
    assert set(l1.counts()) == one_shot_ids(renamed) and max(l1.counts().values()) == 1


@pytest.mark.parametrize("pause", [False, True], ids=["written on", "idle after its summary line"])
def test_a_transcript_truncated_and_written_again_line_by_line_adds_no_session_start(tmp_path, pause):
    """QA (session 33): a followed transcript truncated and written again as it was (spotter's
    short.jsonl replayed twice into a followed directory). The follower read the rewrite's first
    lines, before its first assistant line, and sent the session a second session.started,
    without its model, and an empty turn to close it; a new file is held until its model is
    written, a rewritten one was not. Read when only its summary line was back (no session
    named, so nothing of it checked against L1), its record then vouched for the file and every
    event of the rewrite, all in L1 already, was appended a second time. Written again, it adds
    nothing to L1, also when the rewrite pauses after its summary line past the idle time."""
    lines = TRANSCRIPTS[0].read_bytes().splitlines(keepends=True)
    root = tmp_path / "sessions"
    root.mkdir()
    live = root / "a.jsonl"
    live.write_bytes(b"".join(lines))
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    clock.now += 10
    tail.poll()
    assert set(l1.counts()) == one_shot_ids(live)
    before = len(l1.log)
    live.write_bytes(b"")
    for count in range(1, len(lines) + 1):  # the prompt first, its answer a few seconds later
        live.write_bytes(b"".join(lines[:count]))
        clock.now += 10 if pause and count == 1 else 1
        tail.poll()
    clock.now += 10
    tail.poll()
    assert l1.log[before:] == [] and not l1.dead


def _rotate(live: Path, style: str) -> Path:
    """Rotate ``live`` as logrotate does (``create``: renamed; ``copytruncate``: copied, then
    emptied) to ``live.1``, leaving ``live`` empty; the rotated file."""
    rotated = live.with_name(f"{live.name}.1")
    if style == "create":
        live.rename(rotated)
    else:
        shutil.copy(live, rotated)
    live.write_bytes(b"")
    return rotated


@pytest.mark.parametrize("style", ["create", "copytruncate"])
def test_lines_written_just_before_a_rotation_are_read_from_the_rotated_file(tmp_path, style):
    """Found following real transcripts: lines written after the last poll to a file that
    logrotate then renamed (``s.jsonl`` → ``s.jsonl.1``, create mode) or copied and truncated
    (copytruncate) were only in the rotated file, which is no followed name: lost without a
    word. They are read from it as the followed file's before the new file is read."""
    root = tmp_path / "sessions"
    root.mkdir()
    name = TRANSCRIPTS[1].name
    lines = TRANSCRIPTS[1].read_bytes().splitlines(keepends=True)
    live = root / name
    live.write_bytes(b"".join(lines[:5]))
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    assert l1.log
    with live.open("ab") as handle:  # between two polls: written, then rotated
        handle.write(b"".join(lines[5:12]))
    _rotate(live, style)
    tail.poll()
    with live.open("ab") as handle:  # the writer goes on in the new file
        handle.write(b"".join(lines[12:]))
    tail.poll()
    clock.now += 10
    tail.poll()
    assert max(l1.counts().values()) == 1
    assert_rotated_lines_appended(l1, tmp_path, name, lines[:12])


@pytest.mark.parametrize("style", ["create", "copytruncate"])
def test_a_rotation_while_the_follower_was_stopped_loses_nothing(tmp_path, style):
    """The lines written after the last poll of one follower and rotated out before the first
    poll of the next (restarted, or stopped over the night logrotate ran) were lost: the
    rotated copy was looked for only from what this process had read of the file, which at
    first sight is nothing; the position store knows where the file was left."""
    root = tmp_path / "sessions"
    root.mkdir()
    name = TRANSCRIPTS[1].name
    lines = TRANSCRIPTS[1].read_bytes().splitlines(keepends=True)
    live = root / name
    live.write_bytes(b"".join(lines[:5]))
    l1, clock = MemoryL1(), Clock()
    follower(root, l1, tmp_path / "home", clock).poll()
    with live.open("ab") as handle:
        handle.write(b"".join(lines[5:12]))
    _rotate(live, style)
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    with live.open("ab") as handle:
        handle.write(b"".join(lines[12:]))
    tail.poll()
    clock.now += 10
    tail.poll()
    assert max(l1.counts().values()) == 1
    assert_rotated_lines_appended(l1, tmp_path, name, lines[:12])


def _json_or_none(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None  # the fixture's cut and text lines


def _rotated_and_followed_on(tmp_path: Path, *, title: str | None = None) -> tuple[Path, MemoryL1, Clock]:
    """A transcript followed while logrotate renames it (``s.jsonl`` → ``s.jsonl.1``) and its
    session goes on in a new file at the followed path, which the follower reads to its idle end;
    with ``title``, a follower started again then sees a summary naming the new file's last line
    written."""
    root = tmp_path / "sessions"
    root.mkdir()
    lines = TRANSCRIPTS[1].read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    live = root / TRANSCRIPTS[1].name
    live.write_bytes(b"".join(lines[:half]))
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    live.rename(root / f"{live.name}.1")
    live.write_bytes(b"".join(lines[half:]))
    tail.poll()
    clock.now += 10
    tail.poll()
    if title is not None:
        tail = follower(root, l1, tmp_path / "home", clock)  # restarted: the positions say what was sent
        tail.poll()
        leaf = next(line["uuid"] for line in map(_json_or_none, reversed(lines)) if line and "uuid" in line)
        with live.open("ab") as handle:
            handle.write(json.dumps({"type": "summary", "summary": title, "leafUuid": leaf}).encode() + b"\n")
        tail.poll()
        clock.now += 10
        tail.poll()
    return root, l1, clock


def test_a_rotated_transcript_imported_again_appends_nothing(tmp_path):
    """Found following real transcripts (entireio/cli's) through a rotation: the new file at the
    followed path says its session's session.started otherwise (its first line is later), which
    went out once more under an eventId of its own; its record kept the rotated file's
    session.started as what it had sent, so a one-shot `usl ingest` of the directory sent that
    second session.started again, the same eventId twice in L1."""
    root, l1, clock = _rotated_and_followed_on(tmp_path)
    assert max(l1.counts().values()) == 1
    report = follower(root, l1, tmp_path / "home", clock, once=True).poll()
    assert (report.appended, max(l1.counts().values())) == (0, 1)


def test_a_title_written_into_the_file_that_replaced_a_rotated_one_reaches_the_session(tmp_path):
    """The same session.started, titled by a summary the new file gets after a restart: it goes
    out once more with the title, as a followed file's late title does, since the file's record
    says which copy of it the file sent (it listed none: the title never reached the session)."""
    root, l1, clock = _rotated_and_followed_on(tmp_path, title="Rotated and renamed")
    titles = [e["fields"].get("title") for e in l1.log if e["type"] == "session.started"]
    assert titles[-1] == "Rotated and renamed"
    assert max(l1.counts().values()) == 1
    assert follower(root, l1, tmp_path / "home", clock, once=True).poll().appended == 0


@pytest.mark.parametrize("style", ["create", "copytruncate"])
@pytest.mark.parametrize("written_after_the_poll", [7, 0])
@pytest.mark.parametrize("goes_on", [True, False], ids=["new file written", "new file left empty"])
def test_the_turn_a_rotated_file_left_open_is_ended(tmp_path, style, written_after_the_poll, goes_on):
    """Found following a real transcript (entireio/cli's) through a rotation: the turn the
    rotated file left open never got its turn.ended. The follower held the end back (the file
    was not idle) and dropped it with the old file's record when the file at the followed path,
    imported as a file of its own, took its place; nothing else ends that turn."""
    root = tmp_path / "sessions"
    root.mkdir()
    name = TRANSCRIPTS[1].name
    lines = TRANSCRIPTS[1].read_bytes().splitlines(keepends=True)[:-1]  # but its cut last line
    live = root / name
    first = 12 - written_after_the_poll
    live.write_bytes(b"".join(lines[:first]))
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    with live.open("ab") as handle:
        handle.write(b"".join(lines[first:12]))
    _rotate(live, style)
    tail.poll()
    if goes_on:
        with live.open("ab") as handle:
            handle.write(b"".join(lines[12:]))
        tail.poll()
    clock.now += 10
    tail.poll()
    started = [e["turnId"] for e in l1.log if e["type"] == "turn.started"]
    ended = {e["turnId"] for e in l1.log if e["type"] == "turn.ended"}
    assert started and [turn for turn in started if turn not in ended] == []
    assert max(l1.counts().values()) == 1
    assert follower(root, l1, tmp_path / "home", clock, once=True).poll().appended == 0


def test_lines_before_a_copytruncate_are_read_when_the_writer_refilled_the_file_before_the_poll(tmp_path):
    """copytruncate, then the writer goes on past the old position before the next poll: the
    followed file is not shorter and has the same inode, but no longer begins with the bytes its
    record vouches for. The lines written just before the rotation were lost (only the shrink
    and an inode change sent the follower to the rotated copy)."""
    root = tmp_path / "sessions"
    root.mkdir()
    name = TRANSCRIPTS[1].name
    lines = TRANSCRIPTS[1].read_bytes().splitlines(keepends=True)
    live = root / name
    live.write_bytes(b"".join(lines[:5]))
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    with live.open("ab") as handle:
        handle.write(b"".join(lines[5:12]))
    shutil.copy(live, root / f"{name}.1")
    live.write_bytes(b"".join(lines[12:]))  # truncated, and longer again than the old position
    assert len(b"".join(lines[12:])) > len(b"".join(lines[:5]))
    tail.poll()
    clock.now += 10
    tail.poll()
    assert max(l1.counts().values()) == 1
    assert_rotated_lines_appended(l1, tmp_path, name, lines[:12])


@pytest.mark.parametrize("once", [True, False], ids=["usl ingest", "--follow"])
def test_a_copy_beside_its_original_is_a_file_of_its_own(tmp_path, once):
    # A copy has the original's first line and bytes, which let it adopt the original's position
    # as if renamed: its events counted as appended. An OpenAI conversation without an id is a
    # session named after its file, so the copy's conversation was never appended.
    messages = json.loads((OPENAI / "support_chat.json").read_text())
    root = tmp_path / "runs"
    root.mkdir()
    (root / "run-a.jsonl").write_text(json.dumps({"messages": messages}) + "\n")
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock, once=once)
    tail.poll()
    shutil.copy(root / "run-a.jsonl", root / "run-b.jsonl")
    clock.now += 10
    tail.poll()
    clock.now += 10
    tail.poll()
    assert set(l1.counts()) == one_shot_ids(root / "run-a.jsonl") | one_shot_ids(root / "run-b.jsonl")
    assert len({e["sessionId"] for e in l1.log}) == 2 and max(l1.counts().values()) == 1


def test_one_shot_of_a_missing_path_is_a_clear_error(tmp_path):
    from streams.exceptions import ImportFormatError

    with pytest.raises(ImportFormatError, match="no such file"):
        follower(tmp_path / "nope.jsonl", MemoryL1(), tmp_path / "home", Clock(), once=True).poll()


def test_a_one_shot_import_of_a_directory_skips_and_names_what_is_no_transcript(tmp_path):
    from streams.exceptions import ImportFormatError

    root = tmp_path / "dataset"
    root.mkdir()
    (root / "manifest.json").write_text('{"sessions": 1, "licence": "MIT"}')
    (root / "session.jsonl").write_bytes(TRANSCRIPTS[0].read_bytes())
    report = follower(root, MemoryL1(), tmp_path / "home", Clock(), once=True).poll()
    assert report.undetected == [str(root / "manifest.json")] and report.appended > 0
    with pytest.raises(ImportFormatError, match="cannot tell the format"):
        follower(root / "manifest.json", MemoryL1(), tmp_path / "home2", Clock(), once=True).poll()


def test_a_file_of_no_known_format_is_skipped_and_named_once(tmp_path):
    root = tmp_path / "agent"
    root.mkdir()
    (root / "logs.json").write_text('[{"note": "not a transcript"}]')
    (root / "session.jsonl").write_bytes(TRANSCRIPTS[0].read_bytes())
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    first = tail.poll()
    assert first.undetected == [str(root / "logs.json")] and first.appended > 0
    assert tail.poll().undetected == []  # unchanged: not looked at again


def test_a_connecting_appender_lets_the_follower_import_before_it_waits(tmp_path):
    """``usl ingest`` connects to Kafka on a thread of its own (ConnectingAppender): the follower
    reads and imports a first batch (here the whole file) first, and waits for L1 only when it
    checks or appends."""
    import threading

    from streams.follow import ConnectingAppender

    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(TRANSCRIPTS[0].read_bytes())
    expected = len(list(iter_records(transcript)))
    imported: list[str] = []
    all_read = threading.Event()
    seen_when_made: list[int] = []

    class ClosingL1(MemoryL1):
        closed = False

        def close(self, *, wait: bool = True) -> None:
            self.closed = True

    l1 = ClosingL1()

    def on_record(label: str) -> None:
        imported.append(label)
        if len(imported) == expected:
            all_read.set()

    def connect() -> Any:
        # Made only once the follower has read everything: a follower that waited for L1 before
        # importing would stall here (and fail below) instead.
        all_read.wait(timeout=10)
        seen_when_made.append(len(imported))
        return l1

    appender = ConnectingAppender(connect)
    report = Follower([transcript], appender=appender, store=PositionStore(tmp_path / "home"),
                      once=True, on_record=on_record).poll()
    appender.close()
    assert seen_when_made == [expected]
    assert report.appended == len(l1.log) == len(one_shot_ids(transcript)) > 0
    assert appender.ready() is l1 and l1.closed


def test_a_one_shot_import_holds_one_batch_while_l1_connects(tmp_path):
    """The first batch does not grow while the clients connect: it is written ahead and sent
    once they are, the next imported meanwhile (a batch that grew held the whole file at once,
    issue #16)."""
    import threading

    from streams.follow import ConnectingAppender

    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(TRANSCRIPTS[0].read_bytes())
    size = 5
    assert len(list(iter_records(transcript))) > 3 * size
    imported: list[str] = []
    first_batch = threading.Event()
    seen_when_made: list[int] = []
    l1 = MemoryL1()

    def on_record(label: str) -> None:
        imported.append(label)
        if len(imported) == size:
            first_batch.set()

    def connect() -> Any:
        first_batch.wait(timeout=10)
        time.sleep(0.2)  # a follower that went on importing would have read more by now
        seen_when_made.append(len(imported))
        return l1

    appender = ConnectingAppender(connect)
    report = Follower([transcript], appender=appender, store=PositionStore(tmp_path / "home"),
                      once=True, on_record=on_record, stream_batch_events=size).poll()
    assert seen_when_made == [size]
    assert report.appended == len(l1.log) == len(one_shot_ids(transcript)) > 0


def test_a_connecting_appender_raises_its_error_where_l1_is_first_needed(tmp_path):
    from streams.exceptions import BrokerError
    from streams.follow import ConnectingAppender

    def connect() -> Any:
        raise BrokerError("no broker at 127.0.0.1:1")

    transcript = tmp_path / "session.jsonl"
    transcript.write_bytes(TRANSCRIPTS[0].read_bytes())
    appender = ConnectingAppender(connect)
    with pytest.raises(BrokerError, match="no broker"):
        Follower([transcript], appender=appender, store=PositionStore(tmp_path / "home"), once=True).poll()
    appender.close()  # nothing was made: nothing to close, no second error
    with pytest.raises(BrokerError):
        appender.committed_seq("default")


class CountingL1(MemoryL1):
    """MemoryL1 that counts the batches acknowledged (flushes)."""

    flushes = 0

    def flush(self) -> int:
        self.flushes += 1
        return super().flush()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_one_shot_import_sent_in_batches_leaves_each_event_once_after_a_crash_anywhere(tmp_path_factory, data):
    """A one-shot import of a file no record vouches for goes out in write-ahead batches while
    it is imported (issue #16): the same events in the same order as one batch; killed after
    any append, the next one-shot or follower appends the rest, each event once."""
    tmp = tmp_path_factory.mktemp("stream")
    source = data.draw(st.sampled_from(TRANSCRIPTS))
    path = tmp / source.name
    path.write_bytes(source.read_bytes())
    in_order = list(dict.fromkeys(i.event["eventId"] for i in iter_records(path) if isinstance(i, Accepted)))
    records = len(list(iter_records(path)))
    size = data.draw(st.integers(1, 9))
    l1, clock, home = CountingL1(), Clock(), tmp / "home"
    l1.crash_in = data.draw(st.one_of(st.none(), st.integers(0, len(in_order))))
    try:
        report = follower(path, l1, home, clock, once=True, stream_batch_events=size).poll()
    except Crash:
        l1.crash_in = None
        again = follower(path, l1, home, clock, once=data.draw(st.booleans()), stream_batch_events=size)
        again.poll()
        clock.now += 10
        again.poll()  # a follower holds the end events until the file is idle
        assert max(l1.counts().values()) == 1 and set(l1.counts()) == set(in_order)
        return
    assert [event["eventId"] for event in l1.log] == in_order
    assert report.appended == len(in_order) and report.records_read == records
    # A flush per batch, and one more per batch with dead letters (acknowledged before the save).
    lettered = {index // size for index, item in enumerate(iter_records(path)) if isinstance(item, Rejected)}
    assert l1.flushes == -(-records // size) + len(lettered) and -(-records // size) > 1
    assert follower(path, l1, home, clock, once=True).poll().appended == 0  # its record vouches for it


def test_a_one_shot_import_checks_what_l1_held_before_it_began(tmp_path):
    """Streamed batches check L1 once, up to the seq L1 had when the import
    began: events already there are left out, the import's own appends are not read back."""
    path = tmp_path / "session.jsonl"
    path.write_bytes(TRANSCRIPTS[0].read_bytes())
    ids = one_shot_ids(path)
    l1 = MemoryL1()
    follower(path, l1, tmp_path / "first", Clock(), once=True, stream_batch_events=3).poll()
    assert len(l1.log) == len(ids)
    reads: list[int | None] = []
    original = l1.event_digests

    def event_digests(log_id: str, from_seq: int, sessions: set[str] | None = None,
                      to_seq: int | None = None) -> dict[str, bytes | None]:
        reads.append(to_seq)
        return original(log_id, from_seq, sessions, to_seq)

    l1.event_digests = event_digests  # type: ignore[method-assign]
    report = follower(path, l1, tmp_path / "lost-store", Clock(), once=True, stream_batch_events=3).poll()
    assert report.appended == 0 and report.duplicates == len(ids) and len(l1.log) == len(ids)
    assert reads and set(reads) == {len(ids)}


def test_a_one_shot_import_of_a_directory_reads_each_l1_record_once(tmp_path):
    """Every file of a directory is checked against what L1 held when its import began, but
    the pass reads each L1 record at most once for all its files: it had read the whole log up to
    its start once per file (a directory of N files into a log of M events: N x M records)."""
    folder = tmp_path / "projects"
    folder.mkdir()
    for source in TRANSCRIPTS:
        (folder / source.name).write_bytes(source.read_bytes())
    expected = set().union(*(one_shot_ids(source) for source in TRANSCRIPTS))
    l1 = MemoryL1()
    spans: list[tuple[int, int]] = []
    original = l1.event_digests

    def event_digests(log_id: str, from_seq: int, sessions: set[str] | None = None,
                      to_seq: int | None = None) -> dict[str, bytes | None]:
        spans.append((from_seq, len(l1.log) if to_seq is None else to_seq))
        return original(log_id, from_seq, sessions, to_seq)

    l1.event_digests = event_digests  # type: ignore[method-assign]
    first = follower(folder, l1, tmp_path / "first", Clock(), once=True, stream_batch_events=4).poll()
    assert first.appended == len(l1.log) == len(expected) and set(l1.counts()) == expected
    read_first = [seq for start, end in spans for seq in range(start, end + 1)]
    assert len(read_first) == len(set(read_first)) < len(l1.log)  # only what earlier files appended, once

    spans.clear()  # the same files again, their records lost: everything is in L1 already
    again = follower(folder, l1, tmp_path / "lost-store", Clock(), once=True, stream_batch_events=4).poll()
    assert again.appended == 0 and again.duplicates == len(expected) and len(l1.log) == len(expected)
    read_again = [seq for start, end in spans for seq in range(start, end + 1)]
    assert sorted(read_again) == list(range(1, len(l1.log) + 1))


ENDED_BY_THE_AGENT = {
    "claude-code stop_hook_summary": (ROOT / "tests" / "fixtures" / "turn_ends" / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl").read_bytes(),
    "codex task_complete": (ROOT / "tests" / "fixtures" / "importers" / "codex"
                            / "rollout-2026-06-05T04-58-20-019e9625-802f-7e91-840a-cfe88d14117a.jsonl").read_bytes(),
    "openai-chat answer": _message_lines(),
    "gemini-cli answer": (ROOT / "tests" / "fixtures" / "importers" / "gemini_cli"
                          / "session-rejection-gemini-001.jsonl").read_bytes(),
}


@pytest.mark.parametrize("name", sorted(ENDED_BY_THE_AGENT))
def test_a_turn_the_agent_ended_goes_out_without_waiting_for_the_file_to_go_idle(name, tmp_path):
    """Real transcripts whose last turn the agent itself ended (a record saying so, or an answer
    that calls no tool): followed line by line with the clock standing still, L1 holds every
    event of the one-shot import, the last turn's end included: nothing waits for idleness."""
    source = ENDED_BY_THE_AGENT[name]
    suffix = ".jsonl"
    live = tmp_path / "projects" / ("rollout-live" if name.startswith("codex") else "live")
    live = live.with_suffix(suffix)
    live.parent.mkdir(parents=True)
    live.write_bytes(b"")
    l1, clock = MemoryL1(), Clock()
    tail = follower(tmp_path / "projects", l1, tmp_path / "home", clock)
    tail.poll()
    for line in source.splitlines(keepends=True):
        with live.open("ab") as handle:
            handle.write(line)
        tail.poll()
    expected = one_shot_ids(live)
    assert not l1.dead and set(l1.counts()) <= expected and max(l1.counts().values()) == 1
    # What is held back (an OpenAI run's session.ended) closes no unit: every turn is chunked.
    assert {e["type"] for e in l1.log if e["type"].endswith(".ended")} >= {"turn.ended"}
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")
    states: dict[str, dict] = {}
    for seq, event in enumerate(l1.log, start=1):
        state = states.setdefault(event["sessionId"], chunker.new_state(event["sessionId"]))
        chunker.on_event(state, event["logId"], seq, event)
    assert all(chunker.open_min_seq(state) is None for state in states.values())
    clock.now += 10
    tail.poll()
    assert set(l1.counts()) == expected and max(l1.counts().values()) == 1
    assert [e["eventId"] for e in l1.log] == [
        i.event["eventId"] for i in iter_records(live) if isinstance(i, Accepted)]  # the one-shot order


def test_a_turn_that_goes_on_after_its_end_went_out_is_closed_again(tmp_path):
    """A live agent's tool call outlasts USL_FOLLOW_IDLE_SECONDS: the file goes idle mid-turn,
    so the turn's end goes out; then the turn goes on. Its later events get an end of their
    own (an end's id names the turn's last event) and leave no unit open, where an end with
    the turn's one id was a duplicate that L1 dropped, and they stayed open until the next turn."""
    source = ENDED_BY_THE_AGENT["claude-code stop_hook_summary"].splitlines(keepends=True)
    live = tmp_path / "projects" / "live.jsonl"
    live.parent.mkdir(parents=True)
    live.write_bytes(b"".join(source[:5]))  # up to a tool call that is still running
    l1, clock = MemoryL1(), Clock()
    tail = follower(tmp_path / "projects", l1, tmp_path / "home", clock)
    tail.poll()
    clock.now += 10
    tail.poll()
    assert [e["type"] for e in l1.log].count("turn.ended") == 1  # idle: the end went out
    with live.open("ab") as handle:
        handle.write(b"".join(source[5:]))
    tail.poll()
    ends = [e for e in l1.log if e["type"] == "turn.ended"]
    assert len(ends) == 2 and ends[0]["turnId"] == ends[1]["turnId"] and max(l1.counts().values()) == 1
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")
    state = chunker.new_state(l1.log[0]["sessionId"])
    for seq, event in enumerate(l1.log, start=1):
        chunker.on_event(state, event["logId"], seq, event)
    assert chunker.open_min_seq(state) is None


def test_a_growing_asp_file_of_loose_events_is_closed_again(tmp_path):
    """Loose ASP events (no turn) are closed by an empty turn after them, which waits, like an
    importer's end, for the file to go idle; when the file grows after that, the new loose
    events get a closing turn of their own, so no unit is left open either time."""
    def line(n: int) -> bytes:
        return json.dumps({"eventId": f"e{n}", "sessionId": "s-grow", "type": "message", "role": "user",
                           "time": f"2026-11-01T09:00:{n:02d}Z", "fields": {"text": f"step {n} of the rollout"}}).encode() + b"\n"

    live = tmp_path / "logs" / "events.jsonl"
    live.parent.mkdir(parents=True)
    live.write_bytes(line(1) + line(2))
    l1, clock = MemoryL1(), Clock()
    tail = follower(tmp_path / "logs", l1, tmp_path / "home", clock)
    tail.poll()
    assert [e["type"] for e in l1.log] == ["message", "message"]  # the closing turn waits
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")

    def open_unit() -> int | None:
        state = chunker.new_state("s-grow")
        for seq, event in enumerate(l1.log, start=1):
            chunker.on_event(state, event["logId"], seq, event)
        return chunker.open_min_seq(state)

    clock.now += 10
    tail.poll()
    assert l1.log[-1]["type"] == "turn.ended" and open_unit() is None
    with live.open("ab") as handle:
        handle.write(line(3))
    tail.poll()
    clock.now += 10
    tail.poll()
    assert [e["type"] for e in l1.log].count("turn.ended") == 2 and open_unit() is None
    assert all("turnId" not in e for e in l1.log if e["type"] == "message")
    assert max(l1.counts().values()) == 1


def _chat(folder: Path, name: str, conversation_id: str, words: str) -> Path:
    path = folder / name
    path.write_text(json.dumps({"id": conversation_id, "messages": [
        {"role": "user", "content": f"tell me about {words}"},
        {"role": "assistant", "content": f"{words} are well documented."}]}) + "\n")
    return path


@pytest.mark.parametrize("once", [True, False])
def test_another_files_event_under_a_used_id_is_dead_lettered_not_dropped(tmp_path: Path, once: bool) -> None:
    """Two datasets numbered alike (``"id": "1"`` in both): the second file's conversation has
    the first's eventIds. Counted "already in L1", it was lost without a word; it is a conflict,
    dead-lettered with its reason, and the first copy stands. A true re-import (same content)
    still appends nothing and letters nothing."""
    folder = tmp_path / "chats"
    folder.mkdir()
    first = _chat(folder, "a.jsonl", "1", "volcanoes")
    l1 = MemoryL1()
    clock = Clock()
    report = Follower([first], appender=l1, store=PositionStore(tmp_path / "store-a"), idle_seconds=0.0,
                      clock=clock, once=True).poll()
    assert report.appended == len(l1.log) > 0 and not l1.dead
    second = _chat(folder, "b.jsonl", "1", "glaciers")
    follow = Follower([second], appender=l1, store=PositionStore(tmp_path / "store-b"), idle_seconds=0.0,
                      clock=clock, once=once)
    report = follow.poll()
    if not once:
        clock.now += 10
        report = follow.poll()
    assert not [e for e in l1.log if "glaciers" in json.dumps(e)]
    letters = [item for item in l1.dead if "with other content" in item.reason]
    assert letters and report.appended == 0
    assert all("glaciers" in item.raw or "b.jsonl" in item.record for item in letters)
    assert "eventId" in letters[0].reason and "--log" in letters[0].reason
    assert {item.log_id for item in letters} == {"default"}  # filed under the log it names
    # The same file again, from a store that lost its record: the same bytes, only duplicates.
    before = len(l1.dead)
    again = Follower([first], appender=l1, store=PositionStore(tmp_path / "store-c"), idle_seconds=0.0,
                     clock=clock, once=True).poll()
    assert again.appended == 0 and again.duplicates > 0 and len(l1.dead) == before


def test_a_whole_last_line_without_its_newline_is_imported_once_the_file_is_idle(tmp_path):
    """QA: a transcript whose writer ends it without a newline (a tool, an editor, a copy) had
    its last line waiting for ever in follow mode, while a one-shot import takes it. A line
    still being written (cut JSON) waits while the file changes; once the file is idle it is
    dead-lettered as a one-shot import of the file dead-letters it, and when the rest of the
    line is written after all, the line is imported and its dead letter resolved. A whole JSON
    object is taken once the file has been idle, and the newline that may come later appends
    nothing again."""
    lines = TRANSCRIPTS[0].read_bytes().splitlines(keepends=True)
    body = b"".join(lines[:-1]) + lines[-1].rstrip(b"\r\n")
    whole = tmp_path / "whole" / "session.jsonl"
    whole.parent.mkdir()
    whole.write_bytes(body)
    expected = one_shot_ids(whole)
    live = tmp_path / "dir" / "session.jsonl"
    live.parent.mkdir()
    live.write_bytes(body[:-5])  # the last line cut
    cut_letters = [(i.record, i.reason) for i in iter_records(live) if isinstance(i, Rejected)]
    assert [record for record, _reason in cut_letters] == [f"session.jsonl:{len(lines)}"]
    l1, clock = MemoryL1(), Clock()
    tail = follower(live.parent, l1, tmp_path / "home", clock)
    assert tail.poll().cut_lines == []  # still being written, perhaps
    assert not l1.dead
    clock.now += 10
    # Idle, and still no whole line: dead-lettered as a one-shot import of the file as it is
    # dead-letters it (same record, same reason), and said once.
    assert tail.poll().cut_lines == [(f"session.jsonl:{len(lines)}", len(lines[-1].rstrip(b"\r\n")) - 5)]
    assert [(i.record, i.reason) for i in l1.dead] == cut_letters
    clock.now += 10
    assert tail.poll().cut_lines == []
    assert len(l1.dead) == 1  # once
    cut = set(l1.counts())
    assert cut and cut == one_shot_ids(live) and not expected <= cut  # the cut line's events wait
    live.write_bytes(body)  # the rest of the line, written after all
    clock.now += 1
    tail.poll()  # just written: it may still grow
    clock.now += 10
    assert tail.poll().cut_lines == []
    assert len(l1.dead) == 1 and l1.resolved == [(f"session.jsonl:{len(lines)}", "default")]
    assert expected <= set(l1.counts()) and max(l1.counts().values()) == 1
    after = len(l1.log)
    with live.open("ab") as handle:
        handle.write(b"\n")
    clock.now += 10
    tail.poll()
    assert len(l1.log) == after and max(l1.counts().values()) == 1 and len(l1.dead) == 1


@pytest.mark.parametrize("restart", [False, True], ids=["same follower", "restarted follower"])
def test_a_cut_last_line_that_a_killed_writer_never_completes_is_dead_lettered_once(tmp_path, restart):
    """QA (session 33): a live transcript whose writer was killed mid-line (the last line cut,
    never completed) left that line in no dead letter: the follower waited for its rest for ever,
    while ``usl ingest`` of the same file dead-letters it. Once the file is idle the follower
    dead-letters it as the one-shot import does, once (a restarted follower too), and the agent
    started again on a new line loses nothing after it."""
    lines = TRANSCRIPTS[0].read_bytes().splitlines(keepends=True)
    live = tmp_path / "dir" / "session.jsonl"
    live.parent.mkdir()
    live.write_bytes(b"".join(lines[:-2]) + lines[-2][: len(lines[-2]) // 2])
    one_shot = [(i.record, i.reason) for i in iter_records(live) if isinstance(i, Rejected)]
    l1, clock = MemoryL1(), Clock()
    tail = follower(live.parent, l1, tmp_path / "home", clock)
    tail.poll()
    clock.now += 10
    tail.poll()
    record = f"session.jsonl:{len(lines) - 1}"
    assert [(i.record, i.reason) for i in l1.dead] == one_shot and one_shot[0][0] == record
    assert "truncated" in one_shot[0][1]
    assert set(l1.counts()) == one_shot_ids(live)
    if restart:
        tail = follower(live.parent, l1, tmp_path / "home", clock)
        clock.now += 10
        tail.poll()
        assert len(l1.dead) == 1
    with live.open("ab") as handle:  # the agent, started again, goes on on a line of its own
        handle.write(b"\n" + lines[-1])
    clock.now += 1
    tail.poll()
    clock.now += 10
    tail.poll()
    assert [i.record for i in l1.dead] == [record] and not l1.resolved
    assert one_shot_ids(live) <= set(l1.counts()) and max(l1.counts().values()) == 1
    # Beyond the one-shot import's events, only the end the idle file's open turn got.
    assert {e["type"] for e in l1.log if e["eventId"] not in one_shot_ids(live)} <= {"turn.ended"}


@pytest.mark.parametrize("crash_at", [0, 3], ids=["first append", "mid-batch"])
def test_a_follower_killed_mid_batch_leaves_the_batch_dead_letters_to_its_successor(tmp_path, crash_at):
    """QA (session 33): a follower killed (kill -9) after writing a batch ahead and before
    sending its dead letters: the restarted follower finished the batch from the write-ahead
    log (its events and records) but not its dead letters, and the records vouched that the bad
    lines were dead-lettered already, so none was ever sent: a bad line in no letter."""
    lines = TRANSCRIPTS[0].read_bytes().splitlines(keepends=True)
    live = tmp_path / "dir" / "session.jsonl"
    live.parent.mkdir()
    live.write_bytes(b"".join(lines[:4]) + b'{"type": "user", "message": \n' + b"".join(lines[4:]))
    one_shot = [(i.record, i.reason) for i in iter_records(live) if isinstance(i, Rejected)]
    assert [record for record, _reason in one_shot] == ["session.jsonl:5"]
    l1, clock = MemoryL1(), Clock()
    l1.crash_in = crash_at
    with pytest.raises(Crash):
        follower(live.parent, l1, tmp_path / "home", clock).poll()
    assert not l1.dead
    tail = follower(live.parent, l1, tmp_path / "home", clock)
    tail.poll()
    clock.now += 10
    tail.poll()
    assert [(i.record, i.reason) for i in l1.dead] == one_shot
    assert set(l1.counts()) == one_shot_ids(live) and max(l1.counts().values()) == 1


def _following_six_lines(tmp_path: Path) -> tuple[Path, Path, list[bytes], MemoryL1, Clock, Follower]:
    """A follower of ``sessions/a.jsonl`` holding the first six lines of a real transcript, after
    its first poll: (root, the file, all the transcript's lines, L1, clock, follower)."""
    root = tmp_path / "sessions"
    root.mkdir()
    live = root / "a.jsonl"
    lines = TRANSCRIPTS[0].read_bytes().splitlines(keepends=True)
    live.write_bytes(b"".join(lines[:6]))
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    return root, live, lines, l1, clock, tail


def _edit_an_assistant_line(lines: list[bytes]) -> int:
    """Append " (edited later)" to the text of the first assistant line among the first six of
    ``lines`` (in place), as an editor's save would; its index."""
    edited = next(i for i, line in enumerate(lines[:6]) if b'"assistant"' in line and b'"text"' in line)
    value = json.loads(lines[edited])
    next(b for b in value["message"]["content"] if b.get("type") == "text")["text"] += " (edited later)"
    lines[edited] = json.dumps(value).encode() + b"\n"
    return edited


@pytest.mark.parametrize("restart", [False, True], ids=["same follower", "restarted follower"])
def test_a_line_edited_in_a_rewritten_file_is_a_conflict_for_a_running_follower_too(tmp_path, restart):
    """A followed transcript rewritten with one of its earlier lines edited (an editor's save,
    a tool that rewrites the file): the edited event keeps its eventId with other content. A
    restarted follower checked the file against L1 and dead-lettered it as a conflict; the
    follower that had appended the first version took its own memory of the file's eventIds
    without checking that the file still began with what it had read, and dropped the edit
    as a duplicate, without a dead letter."""
    root, live, lines, l1, clock, tail = _following_six_lines(tmp_path)
    assert len(l1.log) > 0 and not l1.dead
    edited = _edit_an_assistant_line(lines)
    live.write_bytes(b"".join(lines))
    if restart:
        tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    clock.now += 10
    tail.poll()
    assert not [e for e in l1.log if "edited later" in json.dumps(e)]  # the first copy stands
    letters = [item for item in l1.dead if "with other content" in item.reason]
    assert [item.record for item in letters] == [f"a.jsonl:{edited + 1}"]
    assert max(l1.counts().values()) == 1
    assert set(l1.counts()) == one_shot_ids(live)  # the rest of the grown file went in


@pytest.mark.parametrize("restart", [False, True], ids=["same follower", "restarted follower"])
def test_an_import_after_a_conflict_says_it_again(tmp_path, restart):
    """QA: after a followed file's edited line was dead-lettered as a conflict, importing the
    file again (``usl ingest`` of it, its record vouching for it) read clean: "0 appended, N
    already in L1, rejected 0", the conflicting event counted as already in L1 though L1 holds
    another. The file's record keeps its conflicts, through later growth read on by the
    cursor and restarts: an import says them as records an earlier import dead-lettered
    (``rejectedEarlier``), without a second dead letter."""
    root, live, lines, l1, clock, tail = _following_six_lines(tmp_path)
    edited = _edit_an_assistant_line(lines)
    live.write_bytes(b"".join(lines[:8]))
    tail.poll()
    assert [item.record for item in l1.dead] == [f"a.jsonl:{edited + 1}"]
    for line in lines[8:]:  # the agent goes on: read on from the position
        if restart:
            tail = follower(root, l1, tmp_path / "home", clock)
        with live.open("ab") as handle:
            handle.write(line)
        tail.poll()
    clock.now += 10
    tail.poll()
    assert set(l1.counts()) == one_shot_ids(live) and len(l1.dead) == 1
    again = follower(live, l1, tmp_path / "home", clock, once=True).poll()
    assert again.appended == 0 and len(l1.dead) == 1
    assert [item.record for item in again.rejected_before] == [f"a.jsonl:{edited + 1}"]
    assert "with other content" in again.rejected_before[0].reason
    assert again.duplicates == again.records_read - 1  # all but the conflict


def _listed_by_rglob(follow: Follower, root: Path) -> list[tuple[str, Path, str, Path]]:
    """What a follower listed before it kept directories' listings: ``rglob`` on every poll."""
    files = sorted((p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in (".jsonl", ".json")),
                   key=lambda p: p.relative_to(root).as_posix())
    return [(follow._key(p), p, p.relative_to(root).as_posix(), root) for p in files]


def _age(root: Path, seconds: float) -> None:
    """Every directory under ``root`` last changed ``seconds`` ago (each at its own time)."""
    for n, directory in enumerate([root, *(p for p in root.rglob("*") if p.is_dir())]):
        then = time.time() - seconds - n
        os.utime(directory, (then, then))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["make", "make-other", "append", "delete", "rename", "mkdir",
                                                 "rmdir", "age"]), st.integers(0, 5), st.integers(0, 5)),
                      max_size=25))
def test_a_followed_tree_lists_what_rglob_lists(tmp_path_factory, steps):
    """The followed files of a directory tree, whose directories' listings are kept while their
    mtimes stand still, are at every poll those ``rglob`` finds (files made, deleted, renamed,
    directories made and removed, in the same mtime tick or long after)."""
    root = tmp_path_factory.mktemp("tree") / "projects"
    root.mkdir()
    (root / "linked-target").mkdir()
    (root / "linked-target" / "x.jsonl").write_text("{}\n")
    (root / "link").symlink_to(root / "linked-target")  # rglob does not enter it
    follow = Follower([root], appender=MemoryL1(), store=PositionStore(root.parent / "home"))
    assert follow._files() == _listed_by_rglob(follow, root)
    for step, a, b in steps:
        dirs = [root, *sorted(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]
        files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
        where = dirs[a % len(dirs)]
        if step == "make":
            (where / f"s{b}.jsonl").write_text("{}\n")
        elif step == "make-other":
            (where / f"notes{b}.{'JSON' if b % 2 else 'txt'}").write_text("{}\n")
        elif step == "append" and files:
            with files[b % len(files)].open("a") as handle:
                handle.write("{}\n")
        elif step == "delete" and files:
            files[b % len(files)].unlink()
        elif step == "rename" and files:
            files[b % len(files)].rename(where / f"r{b}-{files[b % len(files)].name}")
        elif step == "mkdir":
            (where / f"d{b}").mkdir(exist_ok=True)
        elif step == "rmdir" and where != root and where.name != "linked-target":
            shutil.rmtree(where)
        elif step == "age":
            _age(root, 60 + b)
        assert follow._files() == _listed_by_rglob(follow, root)


def test_an_idle_poll_lists_no_directory_whose_mtime_stood_still(tmp_path, monkeypatch):
    """QA: every 0.5 s poll listed the followed tree again (``rglob``) and parsed every file's
    position: with 2 000 files in 40 directories, 40 ms and 11 ms of CPU of a 56 ms idle poll. A
    directory whose mtime has not moved (and is not recent) keeps its listing, and positions are
    parsed again only when their bytes changed; a file appended in place is still seen (every
    file is stat'ed), and a new file moves its directory's mtime."""
    root = tmp_path / "projects"
    lines = TRANSCRIPTS[0].read_bytes().splitlines(keepends=True)
    start = lines[0] + lines[1]  # a summary and the first prompt: a file of summaries only is skipped
    for n in range(6):
        (root / f"p{n % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"p{n % 3}" / f"s{n}.jsonl").write_bytes(start)
    _age(root, 60)
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    clock.now += 10
    tail.poll()  # what waited for the files to go idle went out: the positions changed
    tail.poll()
    listed: list[str] = []
    scandir = os.scandir

    def counted(path: Any = ".") -> Any:
        listed.append(str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", counted)
    loads: list[int] = []
    load = PositionStore._load
    monkeypatch.setattr(PositionStore, "_load", lambda store, *args: loads.append(1) or load(store, *args))
    tail.poll()
    tail.poll()
    assert listed == [] and loads == []
    before = len(l1.log)
    with (root / "p1" / "s1.jsonl").open("ab") as handle:
        handle.write(lines[2])
    tail.poll()
    assert listed == [] and len(l1.log) > before
    (root / "p2" / "new.jsonl").write_bytes(start.replace(b"a0000000-", b"c0000000-"))
    tail.poll()
    assert listed == [str(root / "p2")]
    assert str(root / "p2" / "new.jsonl") in {str(path) for _key, path, _label, _root in tail._files()}


def test_a_new_transcript_waits_for_its_model_before_its_session_starts(tmp_path):
    """QA: Claude Code writes the user's prompt a few seconds before the first assistant line,
    which names the model a one-shot import puts on ``session.started``. A follower polling in
    between sent ``session.started`` without it (every real transcript followed as written),
    and a later ``usl ingest`` of the file (another store) dead-lettered it as a conflict. A new
    transcript waits until a real model is written, or until it is idle."""
    lines = TRANSCRIPTS[0].read_bytes().splitlines(keepends=True)[1:]  # no summary: the prompt first
    root = tmp_path / "projects"
    root.mkdir()
    live = root / "live.jsonl"
    l1, clock = MemoryL1(), Clock()
    tail = follower(root, l1, tmp_path / "home", clock)
    tail.poll()
    write_as_written(live, lines, tail, clock)
    one_shot = [i.event for i in iter_records(live) if isinstance(i, Accepted) and i.event["type"] == "session.started"]
    assert [e for e in l1.log if e["type"] == "session.started"] == one_shot and one_shot[0]["fields"]["model"]
    again = Follower([live], appender=l1, store=PositionStore(tmp_path / "other"), once=True).poll()
    assert again.appended == 0 and not again.rejected_items and not l1.dead
    # A prompt nothing answers (yet) goes out once the file is idle.
    quiet = root / "quiet.jsonl"
    quiet.write_bytes(lines[0].replace(b"a0000000-", b"d0000000-").replace(b'"sessionId": "', b'"sessionId": "q'))
    os.utime(quiet, (clock.now, clock.now))  # just written, on the clock the follower reads
    tail.poll()
    assert not [e for e in l1.log if e["sessionId"].startswith("q")]
    clock.now += 10
    tail.poll()
    assert [e["type"] for e in l1.log if e["sessionId"].startswith("q")][:2] == ["session.started", "turn.started"]


@pytest.mark.parametrize("once", [True, False])
def test_positions_other_importers_wrote_vouch_for_nothing(tmp_path, monkeypatch, once):
    """Found by re-importing a headless run's stream-json output after the release that imports
    it: `usl ingest` appended nothing and counted the run's events as already in L1, which held
    none of them. The file's record vouched for its bytes, and the events the new importers
    found in them were taken for the ones the old importers had appended. An upgrade is what
    makes users import their transcripts again, so records other importers wrote vouch for
    nothing: the file is checked against L1 once, and only what L1 lacks is appended."""
    import streams.follow

    live = tmp_path / "session.jsonl"
    shutil.copyfile(TRANSCRIPTS[1], live)
    current, real = streams.follow.IMPORTERS, streams.follow.iter_file

    def earlier_release(path, fmt, **options):  # dead-lettered every assistant line
        for item in real(path, fmt, **options):
            if isinstance(item, Accepted) and item.event.get("role") == "assistant":
                yield Rejected(item.record, "not imported by this release", "")
            else:
                yield item

    monkeypatch.setattr(streams.follow, "iter_file", earlier_release)
    monkeypatch.setattr(streams.follow, "IMPORTERS", "an earlier release")
    l1, clock = MemoryL1(), Clock()
    follower(live, l1, tmp_path / "home", clock, once=True).poll()
    missing = one_shot_ids(live) - set(l1.counts())
    assert missing
    monkeypatch.setattr(streams.follow, "iter_file", real)
    monkeypatch.setattr(streams.follow, "IMPORTERS", current)
    upgraded = follower(live, l1, tmp_path / "home", clock, once=once)
    report = upgraded.poll()
    clock.now += 10
    upgraded.poll()
    assert set(l1.counts()) == one_shot_ids(live) and max(l1.counts().values()) == 1
    assert report.appended == len(missing)
    # Written by these importers, the record vouches again: the next import appends nothing.
    report = follower(live, l1, tmp_path / "home", clock, once=True).poll()
    assert report.appended == 0 and report.duplicates > 0


def test_a_stopped_follower_ends_the_turns_it_held_open(tmp_path):
    """Found by following a real Claude Code session and stopping the follower (Ctrl-C) seconds
    after the user's last prompt: the turn's end, held back until the file went idle, never
    went out, and `usl status` showed the log's indexes waiting on that open turn for good (the
    chunker's idle cut needs later events in the log). A stopping follower sends what its files
    hold back; if the turn goes on, its later events get an end of their own."""
    lines = TRANSCRIPTS[1].read_bytes().splitlines(keepends=True)
    live = tmp_path / "session.jsonl"
    live.write_bytes(b"".join(lines[:16]))  # ends with the user's second prompt: its turn is open
    l1, clock = MemoryL1(), Clock()
    stops = iter([False, True])
    follower(live, l1, tmp_path / "home", clock).run(poll_seconds=0, should_stop=lambda: next(stops))
    assert set(l1.counts()) == one_shot_ids(live) and max(l1.counts().values()) == 1
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")
    state = chunker.new_state(l1.log[0]["sessionId"])
    for seq, event in enumerate(l1.log, start=1):
        chunker.on_event(state, event["logId"], seq, event)
    assert chunker.open_min_seq(state) is None
    with live.open("ab") as handle:
        handle.write(b"".join(lines[16:]))
    restarted = follower(live, l1, tmp_path / "home", clock)
    restarted.poll()
    clock.now += 10
    restarted.poll()
    assert set(l1.counts()) >= one_shot_ids(live) and max(l1.counts().values()) == 1
