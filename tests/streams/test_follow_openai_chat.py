"""A followed OpenAI-chat JSONL (a conversation per line, an agent loop's lines each resending
the history, or a message per line) is read on from where the follower stopped, its import kept
open between polls, and appends what a follower that imports the whole file on every change
appends: the same events in the same order, the same dead letters and records, through any
split of the writes, restarts and crashes; and the eventIds of a one-shot import of the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams import follow
from streams.importers import Accepted, Rejected, iter_file
from streams.importers.cursor import open_cursor
from streams.testing import Clock
from tests.streams.follow_kit import LIMIT, Pair, counted, follow_as_it_grows, one_shot_ids

ROOT = Path(__file__).resolve().parents[2]

SYSTEM = {"role": "system", "content": "You are a helpful agent."}
ASK = {"role": "user", "content": "book a flight to Oslo"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "search_flights", "arguments": "{\"to\": \"OSL\"}"}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "[\"SK4021\"]"}
OFFER = {"role": "assistant", "content": "SK4021 leaves at 9:05. Book it?"}
YES = {"role": "user", "content": "yes"}
DONE = {"role": "assistant", "content": "Booked."}


def _lines(values: list[Any]) -> bytes:
    return b"".join((v if isinstance(v, str) else json.dumps(v)).encode() + b"\n" for v in values)


def _agent_loop() -> list[Any]:
    """Conversation lines: an agent loop's steps (each resending the history), an id reused for
    another conversation, a cut line, a line of conversations, an API error logged as answer."""
    return [
        {"id": "run-1", "model": "gpt-4o", "created": 1717200000, "title": "Oslo", "messages": [SYSTEM, ASK, CALL]},
        {"id": "run-1", "model": "gpt-4o", "created": 1717200000, "messages": [SYSTEM, ASK, CALL, RESULT, OFFER]},
        {"id": "run-1", "model": "gpt-4o", "created": 1717200000,
         "messages": [SYSTEM, ASK, CALL, RESULT, OFFER, YES, DONE]},
        {"id": "run-1", "messages": [{"role": "user", "content": "another conversation, the same id"}]},
        "{\"role\": \"user\", \"content\": \"cut off",
        [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
         {"messages": [{"role": "user", "content": "bye"}, {"role": "assistant", "content": "bye"}]}],
        {"request": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "ping"}]},
         "response": {"error": {"message": "rate limited"}}},
    ]


def _message_runs() -> list[Any]:
    """Message lines (an agent logging each message as it goes): a bad line and a message
    rejected inside a run, a run that ends at the end of the file with a question left open."""
    return [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "what is 2+2"},
        "not json at all",
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "calc", "arguments": "2+2"}}]},
        {"role": "tool", "content": "4"},  # no tool_call_id
        {"role": "critic", "content": "check the arithmetic"},  # a role the chat API does not know
        {"role": "tool", "tool_call_id": "c9", "content": "4"},
        {"role": "assistant", "content": "4."},
        {"type": "unknown-record"},
        {"role": "user", "content": "a run at the end of the file"},
        {"role": "assistant", "content": "and its answer"},
        {"role": "user", "content": "and a question left open"},
    ]


def _continued_by_a_run() -> list[Any]:
    """A conversation line, then message lines repeating its history and adding to it: one
    conversation once the run is longer than it, a conversation of its own before (a cursor
    that read the shorter run is stale: the whole file is imported)."""
    return [{"id": "loop-7", "messages": [ASK, CALL, RESULT]}, ASK, CALL, RESULT, OFFER, YES]


FILES = [
    {"chats.jsonl": _lines(_agent_loop())},
    {"messages.jsonl": _lines(_message_runs())},
    {"mixed.jsonl": _lines(_agent_loop() + _message_runs() + _agent_loop()[:2])},
    {"loop.jsonl": _lines(_continued_by_a_run())},
    {"conversations.jsonl": (ROOT / "tests" / "fixtures" / "importers" / "openai_chat"
                             / "conversations.jsonl").read_bytes()},
    # One pretty-printed document saved as .jsonl: read whole, as before.
    {"pretty.jsonl": json.dumps([[ASK, OFFER], [YES, DONE]], indent=2).encode() + b"\n"},
    {"bom.jsonl": b"\xef\xbb\xbf" + _lines(_message_runs()[:4])},
]


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_growing_chat_log_appends_what_a_whole_import_appends(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("chat")
    files = data.draw(st.sampled_from(FILES))
    (name, content), = files.items()
    root = tmp / "chats"
    root.mkdir()
    ends = [i + 1 for i, byte in enumerate(content) if byte == ord("\n")]
    cuts = sorted(set(data.draw(st.lists(st.one_of(st.sampled_from(ends), st.integers(1, len(content))),
                                         max_size=16), label="cuts")))
    clock = Clock()
    pair = Pair(root, tmp / "home", clock, dead_in_order=False)
    pair.poll(None)  # made while followed: growing from the start
    written = 0
    released_early = False
    for cut in [*cuts, len(content)]:
        with (root / name).open("ab") as handle:
            handle.write(content[written:cut])
        written = cut
        pause = data.draw(st.sampled_from([0.0, 0.0, 1.0, 6.0]), label="pause")
        clock.now += pause
        released_early |= pause > 5 and written < len(content)
        crash_in = data.draw(st.integers(0, 20), label="crash") if data.draw(st.integers(0, 3)) == 0 else None
        pair.poll(crash_in)
        if data.draw(st.integers(0, 9), label="restart") == 0:
            pair.restart()
    clock.now += 10
    pair.poll(None)
    pair.poll(None)
    resumed = pair.l1s[0]
    assert max(resumed.counts().values()) == 1
    expected = one_shot_ids(root)
    if released_early or name == "loop.jsonl":  # what went out before the run grew stays
        assert set(resumed.counts()) >= expected
    else:
        assert set(resumed.counts()) == expected


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_cursor_fed_lines_in_any_split_says_what_one_import_says(data):
    """Fed whole lines in any split, a cursor says what one import of the final file says (the
    same events in order, the same rejects), or says it is stale (the follower imports anew)."""
    content = data.draw(st.sampled_from([c for f in FILES for c in f.values()]))
    lines = content.splitlines(keepends=True)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(lines)), max_size=len(lines)))))
    cursor = open_cursor(Path("c.jsonl"), "openai-chat", label="c.jsonl", max_event_bytes=LIMIT)
    assert cursor is not None
    said: list[Accepted | Rejected] = []
    start = 0
    for cut in [*cuts, len(lines)]:
        items = cursor.feed(b"".join(lines[start:cut]))
        if items is None:
            assert content in (FILES[3]["loop.jsonl"], FILES[5]["pretty.jsonl"])
            return
        said += items
        start = cut
    said += cursor.finish("c.jsonl:end")
    whole = list(iter_file(Path("c.jsonl"), "openai-chat", label="c.jsonl", max_event_bytes=LIMIT, data=content))

    def parts(items: list[Accepted | Rejected]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
        return ([i.event for i in items if isinstance(i, Accepted)],
                sorted((i.record, i.reason) for i in items if isinstance(i, Rejected)))

    assert parts(said) == parts(whole)


def test_a_growing_chat_log_is_read_on_not_imported_again(tmp_path, monkeypatch):
    """Once the follower saw it grow, a chat log's new lines are all that is read (the whole
    file was imported on every change: 10 MB of conversations for each new line)."""
    whole: list[str] = []
    fed: list[int] = []
    original_iter_file, original_cursor = follow.iter_file, follow.open_cursor

    def iter_file_(*args: Any, **kwargs: Any) -> Any:
        whole.append(kwargs["label"])
        return original_iter_file(*args, **kwargs)

    def open_cursor_(*args: Any, **kwargs: Any) -> Any:
        return counted(original_cursor(*args, **kwargs), fed)

    monkeypatch.setattr(follow, "iter_file", iter_file_)
    monkeypatch.setattr(follow, "open_cursor", open_cursor_)
    lines = _lines(_agent_loop() + _message_runs()).splitlines(keepends=True)
    root = tmp_path / "chats"
    root.mkdir()
    l1 = follow_as_it_grows(root / "run.jsonl", lines, tmp_path / "home")
    assert whole == ["run.jsonl"]  # the follower's first look only
    assert [n for n in fed if n] == [len(b"".join(lines[:2]))] + [len(line) for line in lines[2:]]
    assert set(l1.counts()) == one_shot_ids(root) and max(l1.counts().values()) == 1
    # A bad message inside a run is dead-lettered once, named by its line, however the run grew.
    assert [d.record for d in l1.dead].count(f"run.jsonl:{len(_agent_loop()) + 5}") == 1


def test_a_chat_log_whose_first_line_holds_two_records_is_read_on(tmp_path, monkeypatch):
    """A first line of two records (a writer that lost a newline) was taken for the start of a
    pretty-printed document: the follower imported the whole file on every change."""
    whole: list[str] = []
    original_iter_file = follow.iter_file

    def iter_file_(*args: Any, **kwargs: Any) -> Any:
        whole.append(kwargs["label"])
        return original_iter_file(*args, **kwargs)

    monkeypatch.setattr(follow, "iter_file", iter_file_)
    lines = _lines(_message_runs()).splitlines(keepends=True)
    lines[:2] = [lines[0].rstrip(b"\n") + lines[1]]
    root = tmp_path / "chats"
    root.mkdir()
    l1 = follow_as_it_grows(root / "run.jsonl", lines, tmp_path / "home", first=1)
    assert len(whole) <= 1, whole  # at most the follower's first look
    assert set(l1.counts()) == one_shot_ids(root) and max(l1.counts().values()) == 1


def test_an_end_sent_while_the_file_was_idle_is_not_sent_again_after_a_restart(tmp_path):
    """Found by the property test above: an agent loop's first step, idle, had its turn's end
    sent; the next step went on with the turn (an import of the grown file no longer says that
    end), and a restarted follower, vouched for by the position, took a later repeat of the
    first step's record for new and appended that end a second time."""
    loop = _agent_loop()
    lines = _lines([loop[0], loop[1], loop[0]]).splitlines(keepends=True)
    root = tmp_path / "chats"
    root.mkdir()
    clock = Clock()
    pair = Pair(root, tmp_path / "home", clock, dead_in_order=False)
    pair.poll(None)
    for index, line in enumerate(lines):
        with (root / "loop.jsonl").open("ab") as handle:
            handle.write(line)
        clock.now += 6.0 if index == 0 else 0.0  # idle after the first step: its end goes out
        pair.poll(None)
        pair.restart()
    clock.now += 10
    pair.poll(None)
    assert max(pair.l1s[0].counts().values()) == 1
