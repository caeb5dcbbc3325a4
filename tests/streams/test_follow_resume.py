"""A follower reads a growing Claude Code transcript or Codex rollout on from where it stopped
(its import kept open between polls) and appends exactly what a follower that imports the whole file on every
change appends: the same events, byte for byte, the same dead letters and the same records,
through any split of the writes, restarts and crashes; and the eventIds of a one-shot import."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams import follow
from streams.follow import Follower, PositionStore
from streams.testing import Clock, MemoryL1
from tests.streams.follow_kit import (
    LIMIT,
    SESSION,
    Pair,
    but_amendments,
    counted,
    follow_as_it_grows,
    one_shot_ids,
    transcript_line,
)

ROOT = Path(__file__).resolve().parents[2]


def _made_up_session() -> dict[str, bytes]:
    """A main transcript and its subagent's file with what makes an import of the whole file say
    otherwise of its early lines than of a prefix: its title (a summary whose leaf comes later),
    its model (a synthetic one first), a subagent link learned after the subagent's first line;
    and lines a follower must dead-letter once: bad JSON, a duplicate uuid, an unknown block."""
    main = [
        {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {"trackedFileBackups": {}}},
        {"type": "summary", "summary": "An early title", "leafUuid": "nowhere"},
        transcript_line("user", "u1", 1, "make the tests pass"),
        transcript_line("assistant", "a1", 2, [{"type": "text", "text": "No response requested."}], parent="u1",
              model="<synthetic>"),
        transcript_line("assistant", "a2", 3, [{"type": "tool_use", "id": "call-1", "name": "Task",
                                      "input": {"description": "look around", "prompt": "find the tests"}}],
              parent="a1"),
        {"type": "progress", "sessionId": SESSION, "parentToolUseID": "call-1", "toolUseID": "p1",
         "timestamp": "2026-03-01T10:04:00.000Z", "data": {"type": "agent_progress", "agentId": "b2"}},
        "{not json",
        transcript_line("user", "u2", 5, [{"type": "tool_result", "tool_use_id": "call-1", "content": "found them"}],
              parent="a2", toolUseResult={"agentId": "a7"}),
        transcript_line("assistant", "a3", 6, [{"type": "text", "text": "Done."}, {"type": "mystery"}], parent="u2"),
        {"type": "system", "subtype": "turn_duration", "sessionId": SESSION, "isSidechain": False,
         "timestamp": "2026-03-01T10:07:00.000Z"},
        transcript_line("user", "u2", 8, "a duplicate uuid"),
        {"type": "summary", "summary": "The title", "leafUuid": "u9"},
        "",
        transcript_line("user", "u9", 9, "and now the docs"),
        transcript_line("assistant", "a9", 10, [{"type": "text", "text": "On it."}], parent="u9"),
        # Two subagents in this file (older Claude Code), the second called starting first: the
        # first one's start is tied to its call by guess until its result names it.
        transcript_line("assistant", "a10", 11, [
            {"type": "tool_use", "id": "call-2", "name": "Task", "input": {"description": "docs one"}},
            {"type": "tool_use", "id": "call-3", "name": "Task", "input": {"description": "docs two"}}],
            parent="a9"),
        {**transcript_line("user", "b1", 12, "docs two"), "isSidechain": True, "agentId": "b"},
        {**transcript_line("assistant", "b2", 13, [{"type": "text", "text": "two done"}], parent="b1"),
         "isSidechain": True, "agentId": "b"},
        transcript_line("user", "u14", 14, [{"type": "tool_result", "tool_use_id": "call-3", "content": "two done"}],
              parent="a10", toolUseResult={"agentId": "b"}),
        {**transcript_line("user", "c1", 15, "docs one"), "isSidechain": True, "agentId": "c"},
        transcript_line("user", "u16", 16, [{"type": "tool_result", "tool_use_id": "call-2", "content": "one done"}],
              parent="u14", toolUseResult={"agentId": "c"}),
    ]
    sub = [
        {**transcript_line("user", "s1", 3, "find the tests"), "isSidechain": True, "agentId": "a7"},
        {**transcript_line("assistant", "s2", 4, [{"type": "text", "text": "tests/ holds them"}], parent="s1"),
         "isSidechain": True, "agentId": "a7"},
    ]

    def lines(values: list[Any]) -> bytes:
        return b"".join((v if isinstance(v, str) else json.dumps(v)).encode() + b"\n" for v in values)

    return {f"{SESSION}.jsonl": lines(main), f"{SESSION}/subagents/agent-a7.jsonl": lines(sub)}


def _made_up_asp() -> dict[str, bytes]:
    """ASP files as producers write them: loose events (no turn) in the middle and at the end,
    which an import closes with an empty turn; a rejected event stating its session's access
    list, which refuses the session's later events that state none; an event too big to keep
    (refused the same way) and one cut to fit; bad lines; an event naming another log."""

    def event(n: int, session: str, kind: str, **extra: Any) -> dict[str, Any]:
        return {"eventId": f"e{n}", "sessionId": session, "type": kind,
                "time": f"2026-03-01T10:{n:02d}:00Z", **extra}

    acl = {"tenant": "default", "read": ["group:ops"]}
    lines: list[Any] = [
        event(1, "s1", "session.started", fields={"title": "rotate keys"}),
        event(2, "s1", "message", role="user", fields={"text": "loose, before any turn"}),
        event(3, "s1", "turn.started", turnId="t1", role="user"),
        event(4, "s1", "message", turnId="t1", role="user", fields={"text": "rotate the staging keys"}),
        event(5, "s2", "message", role="assistant", fields={"text": "another session, loose"}),
        event(6, "s1", "tool.result", turnId="t1", fields={"toolCallId": "c1", "toolName": "Bash", "status": "ok",
                                                            "output": "x" * (LIMIT * 2)}),
        "{not json",
        event(7, "s3", "session.started", acl={"tenant": "default", "read": "everyone"}),  # invalid acl
        event(8, "s3", "message", role="user", fields={"text": "refused: its session's list was"}),
        event(9, "s3", "message", role="user", acl=acl, fields={"text": "states a list: taken"}),
        event(10, "s1", "turn.ended", turnId="t1"),
        "",
        event(11, "s4", "message", role="user", acl=acl, fields={f"k{n}": "v" * 12 for n in range(LIMIT // 16)}),
        event(12, "s4", "message", role="assistant", fields={"text": "refused after the event too big to keep"}),
        event(13, "s2", "message", role="assistant", logId="elsewhere", fields={"text": "in another log"}),
        event(14, "s1", "message", role="assistant", fields={"text": "loose again, at the end"}),
        event(15, "s2", "message", role="assistant", fields={"text": "the other session's loose end"}),
    ]
    return {"events.asp.jsonl": b"".join((v if isinstance(v, str) else json.dumps(v)).encode() + b"\n"
                                         for v in lines)}


def _sessions() -> list[dict[str, bytes]]:
    found = [
        {"session.jsonl": (ROOT / "examples" / "sessions" / "claude-code-session.jsonl").read_bytes()},
        {"3f6c2a8e.jsonl": (ROOT / "tests" / "fixtures" / "importers" / "claude_code"
                            / "3f6c2a8e-1b7d-4c55-9e0a-5d2f8b1c7e94.jsonl").read_bytes()},
        {"491e126e.jsonl": (ROOT / "tests" / "fixtures" / "turn_ends"
                            / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl").read_bytes()},
        _made_up_session(),
        {"events.jsonl": (ROOT / "tests" / "fixtures" / "importers" / "asp" / "events.jsonl").read_bytes()},
        _made_up_asp(),
        *({f"rollout-{n}.jsonl": path.read_bytes()}
          for n, path in enumerate(sorted((ROOT / "tests" / "fixtures" / "importers" / "codex").glob("*.jsonl")))),
    ]
    # Real transcripts (a session file and its subagents' files) where there are some, e.g.
    # USL_TEST_CLAUDE_CODE_DIR=~/.claude/projects/NAME: only the fixtures run without it.
    real = os.environ.get("USL_TEST_CLAUDE_CODE_DIR")
    for main in sorted(Path(real).glob("*.jsonl")) if real else []:
        files = {main.name: main.read_bytes()}
        for sub in sorted(main.with_suffix("").glob("subagents/*.jsonl")):
            files[sub.relative_to(main.parent).as_posix()] = sub.read_bytes()
        found.append(files)
    return found


SESSIONS = _sessions()


@settings(max_examples=60 if not os.environ.get("USL_TEST_CLAUDE_CODE_DIR") else 100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_resumed_follower_appends_what_a_whole_import_appends(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("resume")
    files = data.draw(st.sampled_from(SESSIONS))
    root = tmp / "projects"
    root.mkdir()
    # Each file written in pieces cut anywhere (mid-line too), the files' pieces interleaved.
    pieces: list[tuple[str, int]] = []
    for name, content in files.items():
        ends = [i + 1 for i, byte in enumerate(content) if byte == ord("\n")]
        anywhere = st.integers(1, len(content))
        cuts = sorted(set(data.draw(st.lists(st.one_of(st.sampled_from(ends), anywhere), max_size=16), label=name)))
        pieces += [(name, cut) for cut in [*cuts, len(content)]]
    order = data.draw(st.permutations(range(len(pieces))), label="order")
    # A file's pieces keep their order: the n-th slot of a file takes its n-th cut.
    slots: dict[str, list[int]] = {}
    for name, cut in pieces:
        slots.setdefault(name, []).append(cut)
    schedule = [pieces[i][0] for i in order]
    clock = Clock()
    started = clock.now
    pair = Pair(root, tmp / "home", clock, (MemoryL1(), MemoryL1()))
    pair.poll(None)  # the files are made while it follows them: they are growing from the start
    written = dict.fromkeys(files, 0)
    released_early = restarted = False
    for name in schedule:
        cut = slots[name].pop(0)
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as handle:
            handle.write(files[name][written[name]:cut])
        written[name] = cut
        pause = data.draw(st.sampled_from([0.0, 0.0, 1.0, 6.0]), label="pause")
        clock.now += pause
        unfinished = any(written[n] < len(c) for n, c in files.items())
        released_early |= pause > 5 and unfinished
        # Crashes and restarts now and then: after one a file is imported whole, until it grows.
        crash_in = data.draw(st.integers(0, 20), label="crash") if data.draw(st.integers(0, 3)) == 0 else None
        restarted |= pair.poll(crash_in)
        if data.draw(st.integers(0, 9), label="restart") == 0:
            pair.restart()
            restarted = True
        # A restarted follower dates a file's last change from its mtime (real time).
        released_early |= restarted and clock.now - started >= 5 and unfinished
    clock.now += 10
    pair.poll(None)
    pair.poll(None)
    resumed = pair.l1s[0]
    assert not resumed.log or max(resumed.counts().values()) == 1
    expected = one_shot_ids(root)
    if released_early:
        assert set(resumed.counts()) >= expected
    else:
        assert but_amendments(resumed, root) == expected


def test_a_subagent_tied_to_its_call_later_is_read_as_a_whole_import_reads_it(tmp_path):
    """A subagent's start tied to a call by guess (its result, naming it, comes later) is read
    otherwise once that result is there: a later subagent's start then takes the call the first
    one left, as an import of the whole file says, not the one a cursor's guess left."""
    files = _made_up_session()
    name = f"{SESSION}.jsonl"
    lines = files[name].splitlines(keepends=True)
    uuids = {json.loads(line).get("uuid"): n for n, line in enumerate(lines) if line.startswith(b"{\"")}
    root = tmp_path / "projects"
    root.mkdir()
    pair = Pair(root, tmp_path / "home", Clock(), (MemoryL1(), MemoryL1()))
    for end in (uuids["b1"] + 1, uuids["u14"] + 1, uuids["c1"] + 1, len(lines)):
        (root / name).write_bytes(b"".join(lines[:end]))
        pair.poll(None)
    started = [e for e in pair.l1s[0].log if e["type"] == "episode.started" and e["fields"].get("agentId") == "c"]
    assert started[0]["fields"]["toolCallId"] == "call-2"


def test_a_growing_transcript_is_read_on_not_imported_again(tmp_path, monkeypatch):
    """Once it grew under the follower's eyes, a transcript's new lines are all that is read; a
    line that changes what the import said of its earlier lines (here a summary naming one of
    them, the session's title) makes it import the whole file again. A file as the follower
    found it is imported whole without keeping its import open (old transcripts stay old)."""
    opened: list[str] = []
    fed: list[int] = []
    whole: list[str] = []
    original_cursor, original_iter_file = follow.open_cursor, follow.iter_file

    def open_cursor(*args: Any, **kwargs: Any) -> Any:
        opened.append(kwargs["label"])
        return counted(original_cursor(*args, **kwargs), fed)

    def iter_file(*args: Any, **kwargs: Any) -> Any:
        whole.append(kwargs["label"])
        return original_iter_file(*args, **kwargs)

    monkeypatch.setattr(follow, "open_cursor", open_cursor)
    monkeypatch.setattr(follow, "iter_file", iter_file)
    source = (ROOT / "examples" / "sessions" / "claude-code-session.jsonl").read_bytes()
    lines = source.splitlines(keepends=True)[1:]  # without its summary line
    live = tmp_path / "live.jsonl"
    live.write_bytes(b"".join(lines[:3]))
    l1, clock = MemoryL1(), Clock()
    tail = Follower([live], appender=l1, store=PositionStore(tmp_path / "home"), idle_seconds=5.0, clock=clock)
    tail.poll()
    assert whole == ["live.jsonl"] and opened == []
    for line in lines[3:]:
        with live.open("ab") as handle:
            handle.write(line)
        tail.poll()
    assert whole == ["live.jsonl"] and opened == ["live.jsonl"]
    # Its first change: a new import reads the prefix its record vouches for, then reads on.
    assert fed == [len(b"".join(lines[:3]))] + [len(line) for line in lines[3:]]
    uuid = json.loads(lines[0])["uuid"]
    with live.open("ab") as handle:
        handle.write(json.dumps({"type": "summary", "summary": "Named late", "leafUuid": uuid}).encode() + b"\n")
    tail.poll()
    assert opened == ["live.jsonl"] * 2 and fed[-1] == live.stat().st_size and whole == ["live.jsonl"]
    clock.now += 10
    tail.poll()
    assert but_amendments(l1, live) == one_shot_ids(live) and max(l1.counts().values()) == 1
    # The title came after the session's start went out: the start goes out again, with it.
    started = [e["fields"].get("title") for e in l1.log if e["type"] == "session.started"]
    assert started == [None, "Named late"]
    # A file idle for long lets its import go (a session that ended); when it grows again a new
    # import reads the prefix its record vouches for, then reads on.
    clock.now += follow._CURSOR_KEPT_SECONDS
    tail.poll()
    again = [line.replace(b'"a0000000-', b'"b0000000-') for line in lines[:2]]  # new uuids
    for line in again:
        with live.open("ab") as handle:
            handle.write(line)
        tail.poll()
    assert opened == ["live.jsonl"] * 3
    assert fed[-3:] == [live.stat().st_size - len(again[0]) - len(again[1]), len(again[0]), len(again[1])]
    clock.now += 10
    tail.poll()
    assert set(l1.counts()) >= one_shot_ids(live) and max(l1.counts().values()) == 1


def test_a_growing_transcript_its_record_vouches_for_is_not_scanned_whole_at_each_poll(tmp_path, monkeypatch):
    """Review (session 33): 271c755 made the follower ask, at every poll a Claude Code
    transcript grew, whether the whole file names its model yet (a scan of every line), before
    it asked whether the file was new or rewritten, the only files that question is for. A
    3.5 MB spotter transcript grown by 20 lines was scanned 20 times over (69 MB, 0.6 s of CPU
    where 0.39 s did). A file that begins with what its record vouches for is not scanned."""
    scanned: list[int] = []
    original = follow.settled
    monkeypatch.setattr(follow, "settled", lambda fmt, data: scanned.append(len(data)) or original(fmt, data))
    lines = (ROOT / "examples" / "sessions" / "claude-code-session.jsonl").read_bytes().splitlines(keepends=True)
    live = tmp_path / "live.jsonl"
    live.write_bytes(b"".join(lines[:4]))
    l1, clock = MemoryL1(), Clock()
    tail = Follower([live], appender=l1, store=PositionStore(tmp_path / "home"), idle_seconds=5.0, clock=clock)
    tail.poll()
    assert l1.log
    scanned.clear()
    for line in lines[4:]:
        with live.open("ab") as handle:
            handle.write(line)
        clock.now += 1
        tail.poll()
    assert scanned == []
    clock.now += 10
    tail.poll()
    assert but_amendments(l1, live) == one_shot_ids(live) and max(l1.counts().values()) == 1


def test_a_restarted_follower_reads_on_from_its_position(tmp_path, monkeypatch):
    """A restarted follower reads a file that grew (while it was down, or after its restart)
    once: a new import reads the prefix the file's record vouches for and reads on from there,
    not the prefix imported to learn what was appended and then the whole file (twice a 15 MB
    transcript's 0.45 s). It appends what a follower that imports the whole file appends."""
    read: list[int] = []
    original_cursor, original_iter_file = follow.open_cursor, follow.iter_file

    def open_cursor(*args: Any, **kwargs: Any) -> Any:
        return counted(original_cursor(*args, **kwargs), read)

    def iter_file(*args: Any, **kwargs: Any) -> Any:
        data = kwargs["data"]
        read.append(sum(map(len, data)) if isinstance(data, tuple) else len(data))
        return original_iter_file(*args, **kwargs)

    monkeypatch.setattr(follow, "open_cursor", open_cursor)
    monkeypatch.setattr(follow, "iter_file", iter_file)
    lines = (ROOT / "examples" / "sessions" / "claude-code-session.jsonl").read_bytes().splitlines(keepends=True)[1:]
    root = tmp_path / "projects"
    root.mkdir()
    live = root / "live.jsonl"
    live.write_bytes(b"".join(lines[:3]))
    clock = Clock()
    pair = Pair(root, tmp_path / "home", clock, (MemoryL1(), MemoryL1()))
    pair.poll(None)
    for grown_while_down in (True, False, True):
        pair.restart()
        if grown_while_down:
            with live.open("ab") as handle:
                handle.write(lines.pop(3))
        read.clear()
        pair.followers[0].poll()
        with live.open("ab") as handle:
            handle.write(lines.pop(3))
        pair.followers[0].poll()
        # The file (with the sentinel line a whole import reads after it) once, and that's all.
        assert 0 < sum(read) <= live.stat().st_size + len(follow._SENTINEL)
        pair.followers[1].poll()
        pair.followers[1].poll()
        pair.check()
    clock.now += 10
    pair.poll(None)
    assert but_amendments(pair.l1s[0], live) == one_shot_ids(live)


def test_a_growing_asp_file_is_read_on_not_imported_again(tmp_path, monkeypatch):
    """An ASP file (a producer's event log, an ``usl export`` grown on) was imported whole on
    every change: 0.37 s of CPU per line at 15 MB. It is read on from its position like a
    transcript, and appends what a one-shot import of it does."""
    whole: list[str] = []
    original_iter_file = follow.iter_file

    def iter_file(*args: Any, **kwargs: Any) -> Any:
        whole.append(kwargs["label"])
        return original_iter_file(*args, **kwargs)

    monkeypatch.setattr(follow, "iter_file", iter_file)
    lines = _made_up_asp()["events.asp.jsonl"].splitlines(keepends=True)
    root = tmp_path / "events"
    root.mkdir()
    l1 = follow_as_it_grows(root / "events.asp.jsonl", lines, tmp_path / "home")
    assert whole == ["events.asp.jsonl"]  # the follower's first look only
    assert set(l1.counts()) == one_shot_ids(root) and max(l1.counts().values()) == 1
    assert [d.record for d in l1.dead] == [f"events.asp.jsonl:{n}" for n in (7, 8, 9, 13, 14)]
