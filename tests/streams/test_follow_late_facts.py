"""A followed transcript whose session facts come after its session.started went out (a summary
naming the session, the first model written after the file sat idle) gets them in L1: the
session.started goes out once more with them, once, through restarts and crashes, as the
whole-import follower sends it; a one-shot import of the grown file still appends it once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.follow import Follower, PositionStore
from streams.importers import Accepted, iter_records
from streams.testing import Clock, Crash, MemoryL1
from tests.streams.follow_kit import (
    SESSION,
    but_amendments,
    one_shot_ids,
    transcript_line,
    write_as_written,
)


def _transcript() -> list[bytes]:
    lines = [
        transcript_line("user", "u1", 1, "fix the login bug"),
        transcript_line("assistant", "a1", 2, [{"type": "text", "text": "Looking."}], parent="u1"),
        transcript_line("user", "u2", 3, "and add a test"),
        transcript_line("assistant", "a2", 4, [{"type": "text", "text": "Done."}], parent="u2"),
        {"type": "summary", "summary": "Login bug fixed", "leafUuid": "a2"},
        transcript_line("user", "u3", 5, "thanks"),
    ]
    return [json.dumps(line).encode() + b"\n" for line in lines]


def _started(l1: MemoryL1) -> list[dict[str, object]]:
    return [e["fields"] for e in l1.log if e["type"] == "session.started"]


def _follow(tmp: Path, l1: MemoryL1, clock: Clock, *, resume: bool = True) -> Follower:
    return Follower([tmp / "projects"], appender=l1, store=PositionStore(tmp / ("home" if resume else "home-whole")),
                    idle_seconds=5.0, clock=clock, resume=resume)


def test_a_title_written_late_reaches_the_session(tmp_path):
    (tmp_path / "projects").mkdir()
    live = tmp_path / "projects" / f"{SESSION}.jsonl"
    lines = _transcript()
    clock, l1, whole = Clock(), MemoryL1(), MemoryL1()
    followers = [_follow(tmp_path, l1, clock), _follow(tmp_path, whole, clock, resume=False)]
    for follower in followers:
        follower.poll()
    for line in lines:
        with live.open("ab") as handle:
            handle.write(line)
        for follower in followers:
            follower.poll()
        clock.now += 1
    clock.now += 10
    for follower in followers:
        follower.poll()
    assert [fields.get("title") for fields in _started(l1)] == [None, "Login bug fixed"]
    assert l1.log == whole.log  # what a follower importing the whole file on every change sends
    assert max(l1.counts().values()) == 1 and not l1.dead
    assert but_amendments(l1, live) == one_shot_ids(live)
    # A restarted follower, a one-shot import over the same positions: nothing sent again.
    again = _follow(tmp_path, l1, clock)
    again.poll()
    with live.open("ab") as handle:
        handle.write(json.dumps(transcript_line("assistant", "a3", 6, [{"type": "text", "text": "Welcome."}],
                                      parent="u3")).encode() + b"\n")
    again.poll()
    Follower([tmp_path / "projects"], appender=l1, store=PositionStore(tmp_path / "home"), once=True).poll()
    assert [fields.get("title") for fields in _started(l1)] == [None, "Login bug fixed"]
    assert max(l1.counts().values()) == 1


def test_a_model_written_after_an_idle_pause_reaches_the_session(tmp_path):
    """The prompt sat alone in the file past the idle time (the model thinking): its start went
    out without the model, which comes with the first answer."""
    (tmp_path / "projects").mkdir()
    live = tmp_path / "projects" / f"{SESSION}.jsonl"
    lines = _transcript()[:2]
    clock, l1 = Clock(), MemoryL1()
    follower = _follow(tmp_path, l1, clock)
    follower.poll()
    live.write_bytes(lines[0])
    follower.poll()
    clock.now += 10
    follower.poll()
    assert [fields.get("model") for fields in _started(l1)] == [None]
    with live.open("ab") as handle:
        handle.write(lines[1])
    # Killed while the batch that sends it again is on its way: whoever comes next finishes it.
    l1.crash_in = 1
    try:
        follower.poll()
    except Crash:
        pass
    follower = _follow(tmp_path, l1, clock)
    follower.poll()
    clock.now += 10
    follower.poll()
    assert [fields.get("model") for fields in _started(l1)] == [None, "claude-sonnet-4-5-20250929"]
    assert max(l1.counts().values()) == 1


def test_positions_stay_readable_by_the_release_before(tmp_path):
    """A follower of the release before refused a record with a key it did not know
    (``FileRecord(**record)``): it failed to start on the positions this one wrote. What each
    session.started said lives beside the records, and a record with a key this release does
    not know (a later one's) is read."""
    (tmp_path / "projects").mkdir()
    live = tmp_path / "projects" / f"{SESSION}.jsonl"
    live.write_bytes(b"".join(_transcript()[:2]))
    clock, l1 = Clock(), MemoryL1()
    _follow(tmp_path, l1, clock).poll()
    store = PositionStore(tmp_path / "home")
    saved = json.loads(store.path.read_bytes())
    before = {"path", "log_id", "format", "offset", "prefix_sha", "first_line_sha", "held", "device", "inode",
              "conflicts"}
    assert all(set(record) <= before for record in saved["files"].values())
    assert list(saved["started"]) == list(saved["files"])
    (record,) = store.records(l1).values()
    assert record.started and record.started[0][0] == next(
        e["eventId"] for e in l1.log if e["type"] == "session.started")
    saved["files"] = {key: {**value, "from_a_later_release": 1} for key, value in saved["files"].items()}
    store.path.write_bytes(json.dumps(saved).encode())
    assert list(PositionStore(tmp_path / "home").records(l1).values()) == [record]


_RESUMED_BY = "5e55a9e2-0000-4000-8000-000000000001"


def _session_and_its_resumed_file(root: Path) -> tuple[bytes, bytes]:
    """A session's own file, which begins with a file history snapshot, and the file of
    another name Claude Code resumes it in: the summary of what it resumes, the session's lines
    repeated (their sessionId and uuids kept), then the resumed session's first line."""
    lines = _transcript()[:4]
    snapshot = {"type": "file-history-snapshot", "messageId": "u1", "isSnapshotUpdate": False,
                "snapshot": {"messageId": "u1", "trackedFileBackups": {}, "timestamp": "2026-03-01T10:01:00.000Z"}}
    summary = {"type": "summary", "summary": "Login bug fixed", "leafUuid": "a2"}
    later = transcript_line("user", "u9", 9, "one more thing", parent="a2", sessionId=_RESUMED_BY)
    return (json.dumps(snapshot).encode() + b"\n" + b"".join(lines),
            json.dumps(summary).encode() + b"\n" + b"".join(lines) + json.dumps(later).encode() + b"\n")


def _resumed_in_l1(l1: MemoryL1) -> None:
    assert not l1.dead and max(l1.counts().values()) == 1
    assert [fields.get("title") for fields in _started(l1)] == [None, "Login bug fixed", None]
    assert [e["type"] for e in l1.log if e["sessionId"] == SESSION and e["type"].startswith("x.")] == [
        "x.claude-code.file-history-snapshot", "x.claude-code.summary"]
    # The amended start opens a session-level unit that nothing else of the file closes: an empty
    # turn does (else every later event of the log waited for the log to go quiet).
    of_session = [e for e in l1.log if e["sessionId"] == SESSION]
    amended = next(i for i, e in enumerate(of_session) if e["type"] == "session.started" and e["fields"].get("title"))
    after = [(e["type"], e.get("turnId")) for e in of_session[amended + 1:] if e["type"].startswith("turn.")]
    assert any(("turn.ended", turn) in after for kind, turn in after if kind == "turn.started")


def test_a_session_that_goes_on_in_a_file_of_another_name_conflicts_with_nothing(tmp_path):
    """A resumed Claude Code session goes on in a file of another name that begins with the
    summary of the conversation it resumes and repeats its lines (their sessionId and uuids
    kept). Its line 1 and the first file's, both without a uuid, were one eventId (a line's
    number stood in for its uuid) and its session.started, titled by that summary, was the
    first file's: both were dead-lettered as conflicts and the session never had its title."""
    root = tmp_path / "projects"
    root.mkdir()
    own, resumed = _session_and_its_resumed_file(root)
    (root / f"{SESSION}.jsonl").write_bytes(own)
    (root / "resumed.jsonl").write_bytes(resumed)
    l1 = MemoryL1()
    for once in range(2):  # the second import appends nothing
        Follower([root], appender=l1, store=PositionStore(tmp_path / f"home{once}"), once=True).poll()
    _resumed_in_l1(l1)


def test_a_followed_session_resumed_in_a_new_file_is_appended_once(tmp_path):
    """A follower took a file made while it ran for new, unchecked against L1: a resumed
    session's file (named after the session that resumes it) appended the session's every
    event a second time."""
    root = tmp_path / "projects"
    root.mkdir()
    own, resumed = _session_and_its_resumed_file(root)
    (root / f"{SESSION}.jsonl").write_bytes(own)
    clock, l1 = Clock(), MemoryL1()
    tail = _follow(tmp_path, l1, clock)
    tail.poll()
    head, last = resumed.rsplit(b"\n", 2)[0] + b"\n", resumed.rsplit(b"\n", 2)[1] + b"\n"
    (root / f"{_RESUMED_BY}.jsonl").write_bytes(head)
    for grown in (b"", last):
        with (root / f"{_RESUMED_BY}.jsonl").open("ab") as handle:
            handle.write(grown)
        tail.poll()
        clock.now += 10
        tail.poll()
    _resumed_in_l1(l1)


def test_the_name_a_user_gives_a_session_is_its_title(tmp_path):
    """`/rename` writes a `custom-title` line (no uuid, no timestamp); the last one names the
    session, before any summary. It was kept as a hidden line only: the session's title stayed
    the summary's, or none, and the name the user searches by was in no index."""
    root = tmp_path / "projects"
    root.mkdir()
    live = root / f"{SESSION}.jsonl"
    rename = [{"type": "custom-title", "customTitle": name, "sessionId": SESSION} for name in ("login", "login-fix")]
    lines = _transcript()  # holds a summary naming a line of the session
    transcript = b"".join(lines[:5]) + b"".join(json.dumps(line).encode() + b"\n" for line in rename) + lines[5]
    clock, l1 = Clock(), MemoryL1()
    tail = _follow(tmp_path, l1, clock)
    tail.poll()
    write_as_written(live, transcript.splitlines(keepends=True), tail, clock)
    assert [fields.get("title") for fields in _started(l1)][-1] == "login-fix"
    assert max(l1.counts().values()) == 1 and not l1.dead
    one_shot = MemoryL1()
    Follower([root], appender=one_shot, store=PositionStore(tmp_path / "home-once"), once=True).poll()
    assert [fields.get("title") for fields in _started(one_shot)] == ["login-fix"]


def test_the_title_claude_code_generates_names_a_session_the_user_did_not(tmp_path):
    """Claude Code 2.1.97+ writes the title its session list shows as an `ai-title` line (no
    uuid, no timestamp, regenerated as the session goes on): it was kept as a hidden line
    only, and the session's title stayed the summary's, or none. The last one names the
    session, before any summary and after a name the user gave it."""
    root = tmp_path / "projects"
    root.mkdir()
    live = root / f"{SESSION}.jsonl"
    generated = [{"type": "ai-title", "aiTitle": title, "sessionId": SESSION}
                 for title in ("Fix login", "Fix login redirect loop")]
    lines = _transcript()  # holds a summary naming a line of the session
    transcript = b"".join(lines[:5]) + b"".join(json.dumps(line).encode() + b"\n" for line in generated) + lines[5]
    clock, l1 = Clock(), MemoryL1()
    tail = _follow(tmp_path, l1, clock)
    tail.poll()
    write_as_written(live, transcript.splitlines(keepends=True), tail, clock)
    assert [fields.get("title") for fields in _started(l1)][-1] == "Fix login redirect loop"
    assert max(l1.counts().values()) == 1 and not l1.dead
    one_shot = MemoryL1()
    Follower([root], appender=one_shot, store=PositionStore(tmp_path / "home-once"), once=True).poll()
    assert [fields.get("title") for fields in _started(one_shot)] == ["Fix login redirect loop"]
    renamed = root / "renamed.jsonl"
    named = {"type": "custom-title", "customTitle": "login", "sessionId": "s-2"}
    titled = {"type": "ai-title", "aiTitle": "Fix login", "sessionId": "s-2"}
    prompt = {**json.loads(lines[0]), "sessionId": "s-2", "uuid": "u-s2"}
    renamed.write_text("".join(json.dumps(line) + "\n" for line in (prompt, named, titled)))
    started = [i.event for i in iter_records(renamed) if isinstance(i, Accepted) and i.event["type"] == "session.started"]
    assert [event["fields"].get("title") for event in started] == ["login"]


@pytest.mark.parametrize("resumed_first", [False, True])
def test_a_resumed_file_that_rewrites_a_prompt_as_one_text_block_repeats_it(tmp_path, resumed_first):
    """Claude Code 1.0 repeated a resumed session's prompts in the new file with their
    ``"content": "say lol"`` written ``[{"type": "text", "text": "say lol"}]`` (slopus/happy-cli's
    fixtures of a `claude --continue`): the same event but for the source line it keeps in
    ``payload``, and each repeated prompt was a conflict dead letter. It is a duplicate, in
    whichever order the two files are read; a block that says more than its text still conflicts."""
    root = tmp_path / "projects"
    root.mkdir()
    own, _ = _session_and_its_resumed_file(root)
    repeated = []
    for raw in _transcript()[:4]:
        line = json.loads(raw)
        if line["type"] == "user":
            line["message"]["content"] = [{"type": "text", "text": line["message"]["content"]}]
        repeated.append(json.dumps(line).encode() + b"\n")
    later = transcript_line("user", "u9", 9, "one more thing", parent="a2", sessionId=_RESUMED_BY)
    (root / f"{SESSION}.jsonl").write_bytes(own)
    (root / "resumed.jsonl").write_bytes(b"".join(repeated) + json.dumps(later).encode() + b"\n")
    l1 = MemoryL1()
    files = [root / "resumed.jsonl", root / f"{SESSION}.jsonl"]
    for number, path in enumerate(files if resumed_first else files[::-1]):
        Follower([path], appender=l1, store=PositionStore(tmp_path / f"home{number}"), once=True).poll()
    assert not l1.dead, [d.reason for d in l1.dead]
    assert max(l1.counts().values()) == 1
    assert "one more thing" in json.dumps([e.get("fields") for e in l1.log])
    # A block with more than its text (a cache mark) is no rewrite of the plain prompt.
    marked = json.loads(repeated[0])
    marked["message"]["content"][0]["cache_control"] = {"type": "ephemeral"}
    (root / "marked.jsonl").write_bytes(json.dumps(marked).encode() + b"\n")
    Follower([root / "marked.jsonl"], appender=l1, store=PositionStore(tmp_path / "home-marked"), once=True).poll()
    assert len(l1.dead) == 1
