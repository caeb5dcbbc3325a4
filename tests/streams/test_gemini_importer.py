"""Gemini CLI chat recordings (a public example, tests/fixtures/importers/gemini_cli/SOURCE.md),
as JSONL and as the JSON document Gemini CLI writes, → ASP."""

from __future__ import annotations

from pathlib import Path

import orjson

from streams.importers import Accepted, Rejected, detect_format, iter_records

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "gemini_cli" / \
    "session-rejection-gemini-001.jsonl"


def events(path: Path) -> list[dict]:
    items = list(iter_records(path))
    assert not [i for i in items if isinstance(i, Rejected)], items
    return [i.event for i in items if isinstance(i, Accepted)]


def as_document(tmp_path: Path) -> Path:
    header, *messages = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]
    path = tmp_path / "session-2025-12-06T15-00-rejection.json"
    path.write_bytes(orjson.dumps({**header, "messages": messages}, option=orjson.OPT_INDENT_2))
    return path


def test_turns_replies_thoughts_and_tool_calls():
    assert detect_format(FIXTURE) == "gemini-cli"
    found = events(FIXTURE)
    assert {e["sessionId"] for e in found} == {"rejection-gemini-001"}
    assert found[0]["type"] == "session.started" and found[0]["fields"]["source"] == "gemini-cli"
    users = [e["fields"]["text"] for e in found if e["type"] == "message" and e.get("role") == "user"]
    assert users[0] == "Edit the config file to change the port to 9000" and len(users) == 4
    assert sum(e["type"] == "turn.started" for e in found) == 4 == sum(e["type"] == "turn.ended" for e in found)
    replies = [e for e in found if e["type"] == "message" and e.get("role") == "assistant"
               and e.get("visibility") != "hidden"]
    assert replies[0]["fields"]["model"] == "gemini-2.5-pro"
    assert replies[0]["fields"]["usage"] == {"inputTokens": 100, "outputTokens": 50}
    calls = {e["fields"]["toolCallId"]: e for e in found if e["type"] == "tool.call"}
    results = {e["fields"]["toolCallId"]: e for e in found if e["type"] == "tool.result"}
    assert set(calls) == set(results) == {"edit_file-001", "edit_file-002", "read_file-001", "edit_file-003"}
    assert results["edit_file-002"]["fields"]["status"] == "error"
    assert "0 occurrences" in results["edit_file-002"]["fields"]["output"]
    assert results["read_file-001"]["parentEventId"] == calls["read_file-001"]["eventId"]
    assert calls["edit_file-001"]["fields"]["input"]["file_path"] == "config.json"
    thoughts = [e for e in found if e["fields"].get("kind") == "thinking"]
    assert len(thoughts) == 5 and all(e["visibility"] == "hidden" for e in thoughts)


def test_the_json_document_yields_the_same_events(tmp_path):
    document = as_document(tmp_path)
    assert detect_format(document) == "gemini-cli"
    strip = [{k: v for k, v in e.items() if k != "payload"} for e in events(document)]
    assert [e["eventId"] for e in strip] == [e["eventId"] for e in events(FIXTURE)]


def test_follow_reads_a_rewritten_recording_once(tmp_path):
    from streams.follow import Follower, PositionStore
    from streams.testing import Clock, MemoryL1

    header, *messages = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]
    chats = tmp_path / "tmp" / "abc" / "chats"
    chats.mkdir(parents=True)
    recording = chats / "session-1.json"
    l1, clock = MemoryL1(), Clock()
    tail = Follower([tmp_path / "tmp"], appender=l1, store=PositionStore(tmp_path / "home"),
                    idle_seconds=5.0, clock=clock)
    for count in range(1, len(messages) + 1):  # Gemini CLI rewrites the whole file per message
        recording.write_bytes(orjson.dumps({**header, "messages": messages[:count]}))
        tail.poll()
    recording.write_bytes(b'{"sessionId": "rejection-gemini-001", "messa')  # caught mid-write
    tail.poll()
    recording.write_bytes(orjson.dumps({**header, "messages": messages}))
    tail.poll()
    clock.now += 60  # idle: the open turn's end goes out
    tail.poll()
    assert max(l1.counts().values()) == 1 and not l1.dead
    assert set(l1.counts()) == {e["eventId"] for e in events(as_document(tmp_path))}


def test_an_answer_ends_its_turn_and_a_model_first_recording_leaves_no_unit_open(tmp_path):
    """The model's answer that calls no tool ends the turn (a followed recording's last turn is
    chunked at once); a reply outside every turn (a recording that opens with the model, or a
    second reply after an answer) opens a turn of its own instead of a unit nothing closes."""
    from streams.chunking import Chunker, ChunkerConfig, default_tokenizer

    found = events(FIXTURE)
    answer = next(i for i, e in enumerate(found) if e["fields"].get("text", "").startswith("You're welcome"))
    assert found[answer + 1]["type"] == "turn.ended" and answer + 2 == len(found)
    header, *messages = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]
    model_first = tmp_path / "model-first.jsonl"
    replies = [m for m in messages if m.get("type") == "gemini"]
    model_first.write_bytes(b"\n".join(orjson.dumps(m) for m in [header, replies[-1], replies[0], replies[-1] | {
        "id": "again", "content": "One more thing: restart the service."}]) + b"\n")
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")
    for path in (FIXTURE, model_first):
        stream = events(path)
        assert all(e.get("turnId") for e in stream if e["type"] in ("message", "tool.call", "tool.result", "error"))
        state = chunker.new_state(stream[0]["sessionId"])
        for seq, event in enumerate(stream, start=1):
            chunker.on_event(state, event["logId"], seq, event)
        assert chunker.open_min_seq(state) is None
