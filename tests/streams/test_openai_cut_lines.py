"""A conversation line cut off (a partial download, a writer killed mid-line, ``head -c``) keeps
every message it holds whole before the cut, under the eventIds the whole line gives them, and is
still dead-lettered as cut; completed later, the line appends only the rest. Real data: tau-bench
runs (gpt-4o, airline) as one conversation per line, /tmp/realdata/sessions/openai-chat."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.exceptions import ImportFormatError
from streams.follow import Follower, PositionStore
from streams.importers import Accepted, Rejected, detect_format, iter_records
from streams.importers.base import read_cut
from streams.testing import Clock, MemoryL1

TAU = Path("/tmp/realdata/sessions/openai-chat/sierra-research+tau-bench/tau-bench-gpt-4o-airline.jsonl")
needs_tau = pytest.mark.skipif(not TAU.exists(), reason="the tau-bench runs are not on this machine")


def _tau_lines(count: int = 3, start: int = 0) -> list[bytes]:
    return TAU.read_bytes().splitlines(keepends=True)[start:start + count]


def _unicode_copy(line: bytes) -> bytes:
    """``line`` with every message's text ending in characters of two, three and four bytes,
    written as UTF-8 (not escaped): cuts fall inside characters too."""
    record = json.loads(line)
    for message in record["messages"]:
        if isinstance(message.get("content"), str):
            message["content"] += " — café 😀"
    return json.dumps(record, ensure_ascii=False).encode() + b"\n"


def _import(path: Path) -> list[Accepted | Rejected]:
    return list(iter_records(path, "openai-chat"))


def _message_ends(line: bytes, key: str = "messages") -> list[int]:
    """The byte each message of a conversation line ends at."""
    text = line.decode()
    decoder = json.JSONDecoder()
    at = text.index(f'"{key}": [') + len(f'"{key}": [')
    ends = []
    while text[at] != "]":
        at = len(text) - len(text[at:].lstrip(", "))
        _value, at = decoder.raw_decode(text, at)
        ends.append(len(text[:at].encode()))
        at = len(text) - len(text[at:].lstrip(" "))
        if text[at] == ",":
            at += 1
    return ends


def _check_cut(tmp: Path, lines: list[bytes], cut: int) -> None:
    """The last of ``lines`` cut at byte ``cut``: every message whole before the cut has its
    events, as the whole file gives them; nothing else but the cut turn's end is new."""
    whole, cut_file = tmp / "whole" / "runs.jsonl", tmp / "cut" / "runs.jsonl"
    for path in (whole, cut_file):
        path.parent.mkdir(exist_ok=True)
    whole.write_bytes(b"".join(lines))
    cut_file.write_bytes(b"".join(lines[:-1]) + lines[-1][:cut])
    expected = {i.event["eventId"]: i for i in _import(whole) if isinstance(i, Accepted)}
    session = json.loads(lines[-1])["id"]
    got = _import(cut_file)
    accepted = {i.event["eventId"]: i.event for i in got if isinstance(i, Accepted)}
    number = len(lines)
    complete = sum(end <= cut for end in _message_ends(lines[-1]))
    wanted = {f"runs.jsonl:{number}/messages[{index}]" for index in range(complete)}
    if complete:
        wanted.add(f"runs.jsonl:{number}")  # session.started
    for event_id, item in expected.items():
        # The line's session.ended goes out with the completed line only.
        if (item.record in wanted or not item.record.startswith(f"runs.jsonl:{number}")) and (
                item.event["type"] != "session.ended" or item.event["sessionId"] != session):
            assert accepted.get(event_id) == item.event, (item.record, item.event["type"])
    for event_id, event in accepted.items():
        # New: only the end of the turn the cut left open, named after its last event.
        assert event_id in expected or event["type"] == "turn.ended"
        if event_id in expected:
            assert expected[event_id].event == event
    rejected = [i for i in got if isinstance(i, Rejected)]
    assert [i.record for i in rejected] == [f"runs.jsonl:{number}"]
    assert rejected[0].reason.startswith("invalid JSON (truncated or not JSON)")
    if complete:
        assert f"messages[{complete - 1}]" in rejected[0].reason


@needs_tau
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_cut_tau_bench_line_keeps_every_message_before_the_cut(tmp_path_factory, data) -> None:
    lines = _tau_lines(2, data.draw(st.integers(0, 48), label="run"))  # a whole line, and one to cut
    if data.draw(st.booleans(), label="unicode"):
        lines = [*lines[:-1], _unicode_copy(lines[-1])]
    cut = data.draw(st.integers(1, len(lines[-1]) - 2), label="cut")
    _check_cut(tmp_path_factory.mktemp("cut"), lines, cut)


@needs_tau
def test_a_line_cut_inside_a_character_keeps_the_messages_before_it(tmp_path: Path) -> None:
    line = _unicode_copy(_tau_lines(1)[0])
    emoji = line.index("😀".encode(), _message_ends(line)[3])
    _check_cut(tmp_path, [line], emoji + 2)
    got = _import(tmp_path / "cut" / "runs.jsonl")
    assert "cut off inside a UTF-8 character" in next(i for i in got if isinstance(i, Rejected)).reason


def test_a_message_cut_inside_is_left_out_until_whole(tmp_path: Path) -> None:
    """Kept cut, the message would hold another text under the eventId of the whole one."""
    record = {"id": "run-1", "created": 1717200000, "model": "gpt-4o", "messages": [
        {"role": "user", "content": "Cancel reservation ZFA04Y"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "cancel_reservation", "arguments": "{\"reservation_id\": \"ZFA04Y\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "cancelled"},
        {"role": "assistant", "content": "Your reservation ZFA04Y is cancelled."}]}
    line = json.dumps(record).encode()
    path = tmp_path / "runs.jsonl"
    path.write_bytes(line[:line.index(b"cancelled") + 4])
    got = _import(path)
    kinds = [(i.event["type"], i.event["fields"].get("toolName")) for i in got if isinstance(i, Accepted)]
    assert kinds == [("session.started", None), ("turn.started", None), ("message", None),
                     ("tool.call", "cancel_reservation"), ("turn.ended", None)]
    assert all(i.event["sessionId"] == "run-1" for i in got if isinstance(i, Accepted))
    assert "kept what it holds whole before the cut: messages[0] to messages[1]" in next(i for i in got if isinstance(i, Rejected)).reason


def test_a_cut_line_ends_no_session_and_a_later_line_is_read_as_before(tmp_path: Path) -> None:
    """session.ended goes out with the completed line: sent for the cut one, the two would share
    an eventId at two times. A line after the cut one (a writer that started again) is read as
    it is read in the whole file."""
    first = {"id": "a", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                                     {"role": "user", "content": "bye"}]}
    second = {"id": "b", "messages": [{"role": "user", "content": "again"}]}
    cut = json.dumps(first).encode()[:-30]
    path = tmp_path / "c.jsonl"
    path.write_bytes(cut + b"\n" + json.dumps(second).encode() + b"\n")
    events = [i.event for i in _import(path) if isinstance(i, Accepted)]
    assert [(e["sessionId"], e["type"]) for e in events if e["type"].startswith("session")] == [
        ("a", "session.started"), ("b", "session.started"), ("b", "session.ended")]
    assert [e["fields"]["text"] for e in events if e["type"] == "message"] == ["hi", "hello", "again"]


def test_a_cut_array_of_messages_and_a_cut_document_keep_their_whole_messages(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "You are an airline agent."}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "How can I help?"}, {"role": "user", "content": "refund"}]
    conversations = [{"id": "one", "messages": messages[:2]}, {"id": "two", "messages": messages}]
    for name, content in [("array.jsonl", json.dumps(messages).encode() + b"\n"),
                          ("doc.json", json.dumps(messages, indent=2).encode()),
                          ("docs.json", json.dumps(conversations, indent=2).encode()),
                          ("docs-line.jsonl", json.dumps(conversations).encode() + b"\n")]:
        whole, cut = tmp_path / "whole" / name, tmp_path / "cut" / name
        whole.parent.mkdir(exist_ok=True)
        cut.parent.mkdir(exist_ok=True)
        whole.write_bytes(content)
        cut.write_bytes(content[:content.rindex(b"refund") + 2])
        expected = {i.event["eventId"]: i.event for i in _import(whole) if isinstance(i, Accepted)}
        got = _import(cut)
        texts = [i.event["fields"]["text"] for i in got if isinstance(i, Accepted) and i.event["type"] == "message"]
        assert texts[-3:] == ["You are an airline agent.", "hi", "How can I help?"], name
        for item in got:
            if isinstance(item, Accepted) and item.event["type"] != "turn.ended":
                assert expected[item.event["eventId"]] == item.event, name
        assert "messages[0] to messages[2]" in next(i.reason for i in got if isinstance(i, Rejected)), name


def test_read_cut_refuses_what_is_wrong_before_its_end() -> None:
    assert read_cut(b'{"messages": [{"role": "user", "content": "hi"}], "x": bogus, "y": 1') is None
    assert read_cut(b'{"a": 1, "a": 2, "messages": [') is None  # a key given twice refuses the line
    assert read_cut(b'{"a": 1}') is None  # whole
    assert read_cut(b'{"a": 1}}') is None
    assert read_cut(b'{"n": 12') == {}  # the head of a longer number, perhaps
    assert read_cut(b'{"n": 12, "s": "\\ud83d x", "t": tr') == {"n": 12, "s": "\ufffd x"}
    assert read_cut(b'[{"role": "user", "content": "\\u00e') == [{"role": "user"}]
    # A member's cut value is read on only where it is asked for: a cut vector is not read number
    # by number (a 4.5 MB embedding: 0.9 s).
    assert read_cut(b'{"id": "x", "v": [1, 2, 3') == {"id": "x"}
    assert read_cut(b'{"id": "x", "v": [1, 2, 3', into=("v",)) == {"id": "x", "v": [1, 2]}


def _follow(path: Path, l1: MemoryL1, home: Path) -> Any:
    return Follower([path], appender=l1, store=PositionStore(home), once=True).poll()


@needs_tau
@pytest.mark.parametrize("cut_at", [0.45, 0.6, 0.9])
def test_a_cut_line_completed_later_appends_only_the_rest(tmp_path: Path, cut_at: float) -> None:
    lines = _tau_lines()
    live = tmp_path / "in" / "runs.jsonl"
    live.parent.mkdir()
    cut = int(len(lines[-1]) * cut_at)
    live.write_bytes(b"".join(lines[:-1]) + lines[-1][:cut])
    l1, home = MemoryL1(), tmp_path / "home"
    first = _follow(live, l1, home)
    salvaged = {e["eventId"] for e in l1.log if e["sessionId"] == "tau-airline-task002"}
    assert salvaged and [i.record for i in l1.dead] == ["runs.jsonl:3"]
    before = set(l1.counts())
    assert first.appended == len(before)
    again = _follow(live, l1, home)  # still cut: nothing new, the line dead-lettered once
    assert (again.appended, [i.record for i in again.rejected_before]) == (0, ["runs.jsonl:3"])
    live.write_bytes(b"".join(lines))
    second = _follow(live, l1, home)
    whole = {i.event["eventId"] for i in _import(live) if isinstance(i, Accepted)}
    assert len(salvaged - whole) == 1  # the end of the turn the cut left open
    assert (second.duplicates, second.appended) == (len(whole & before), len(whole - before))
    assert second.appended < len({i for i in whole if i not in before or i in salvaged})
    assert [i.record for i in l1.dead] == ["runs.jsonl:3"]  # no conflict, nothing dead-lettered again
    assert (second.resolved, second.rejected_before) == (["runs.jsonl:3"], [])
    assert set(l1.counts()) == whole | salvaged and max(l1.counts().values()) == 1


@needs_tau
def test_a_follower_appends_the_rest_of_a_line_a_one_shot_import_found_cut(tmp_path: Path) -> None:
    lines = _tau_lines()
    live = tmp_path / "in" / "runs.jsonl"
    live.parent.mkdir()
    live.write_bytes(b"".join(lines[:-1]) + lines[-1][:len(lines[-1]) // 2])
    l1, home = MemoryL1(), tmp_path / "home"
    _follow(live, l1, home)
    before = set(l1.counts())
    live.write_bytes(b"".join(lines))
    clock = Clock()
    tail = Follower([live.parent], appender=l1, store=PositionStore(home), idle_seconds=5.0, clock=clock)
    report = tail.poll()
    clock.now += 10
    idle = tail.poll()  # the run's end, held back until the file is idle
    whole = {i.event["eventId"] for i in _import(live) if isinstance(i, Accepted)}
    assert report.appended + idle.appended == len(whole - before) and report.resolved == ["runs.jsonl:3"]
    assert [i.record for i in l1.dead] == ["runs.jsonl:3"] and max(l1.counts().values()) == 1
    assert set(l1.counts()) >= whole


@needs_tau
def test_a_followed_file_with_a_cut_line_inside_says_what_a_one_shot_import_says(tmp_path: Path) -> None:
    """A writer killed mid-line that starts again on a new line: the follower reads the cut line
    as the one-shot import does."""
    lines = _tau_lines()
    live = tmp_path / "in" / "runs.jsonl"
    live.parent.mkdir()
    content = lines[0] + lines[1][:len(lines[1]) * 9 // 10] + b"\n" + lines[2]
    live.write_bytes(lines[0])
    l1, clock = MemoryL1(), Clock()
    tail = Follower([live.parent], appender=l1, store=PositionStore(tmp_path / "home"), idle_seconds=5.0,
                    clock=clock)
    tail.poll()
    live.write_bytes(content)
    tail.poll()
    clock.now += 10
    tail.poll()
    one_shot = {i.event["eventId"] for i in _import(live) if isinstance(i, Accepted)}
    assert set(l1.counts()) == one_shot and max(l1.counts().values()) == 1
    assert any(e["sessionId"] == "tau-airline-task001" and e["type"] == "message" for e in l1.log)
    assert [i.record for i in l1.dead] == ["runs.jsonl:2"]


@needs_tau
@pytest.mark.parametrize("name", ["runs.jsonl", "runs.json"])
def test_a_file_cut_inside_its_first_conversation_is_one_still(tmp_path: Path, name: str) -> None:
    """``head -c`` of a run file: its one line is cut, and nothing of it said what it was."""
    lines = _tau_lines(1)
    path = tmp_path / name
    path.write_bytes(lines[0][:_message_ends(lines[0])[3] + 40])
    assert detect_format(path) == "openai-chat"
    got = _import(path)
    assert [i.event["type"] for i in got if isinstance(i, Accepted)].count("message") == 4
    path.write_bytes(lines[0][:100])  # inside the first message: nothing to keep, nothing to tell
    with pytest.raises(ImportFormatError):
        detect_format(path)
