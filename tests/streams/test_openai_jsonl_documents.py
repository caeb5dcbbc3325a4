"""OpenAI chat: a JSON document saved under a ``.jsonl`` name.

``json.dump(conversations, open("chats.jsonl", "w"), indent=2)`` and ``json.dumps(conversations)``
written as one line are common; the format is detected as openai-chat from the whole document,
so the import must read it as that document, not reject every line of it (or take an array of
conversations for the messages of one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.importers import Accepted, Rejected, detect_format, iter_records

CONVERSATIONS = [
    {"id": "arr-a", "messages": [{"role": "user", "content": "What is the capital of Mongolia exactly?"},
                                 {"role": "assistant", "content": "Ulaanbaatar is the capital of Mongolia."}]},
    {"id": "arr-b", "messages": [{"role": "user", "content": "Name the longest river in Patagonia region."},
                                 {"role": "assistant", "content": None, "tool_calls": [
                                     {"id": "c1", "type": "function",
                                      "function": {"name": "atlas", "arguments": "{\"q\": \"Patagonia rivers\"}"}}]},
                                 {"role": "tool", "tool_call_id": "c1", "content": "Rio Negro, 635 km"}]},
]


def _split(path: Path) -> tuple[list[dict], list[Rejected]]:
    results = list(iter_records(path))
    return ([r.event for r in results if isinstance(r, Accepted)],
            [r for r in results if isinstance(r, Rejected)])


@pytest.mark.parametrize("text", [json.dumps(CONVERSATIONS, indent=2), json.dumps(CONVERSATIONS) + "\n"],
                         ids=["pretty-printed", "one-line"])
def test_an_array_of_conversations_under_jsonl_is_imported(tmp_path: Path, text: str) -> None:
    as_json = tmp_path / "chats.json"
    as_json.write_text(text)
    as_jsonl = tmp_path / "chats.jsonl"
    as_jsonl.write_text(text)
    assert detect_format(as_jsonl) == "openai-chat"
    events, rejected = _split(as_jsonl)
    assert rejected == []
    assert {e["sessionId"] for e in events} == {"arr-a", "arr-b"}
    expected, _ = _split(as_json)
    assert [(e["type"], e["fields"]) for e in events] == [(e["type"], e["fields"]) for e in expected]


def test_a_pretty_printed_message_list_under_jsonl_is_one_conversation(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(CONVERSATIONS[1]["messages"], indent=2))
    events, rejected = _split(path)
    assert rejected == []
    assert len({e["sessionId"] for e in events}) == 1
    assert [e["type"] for e in events if e["type"] in ("message", "tool.call", "tool.result")] == [
        "message", "tool.call", "tool.result"]


def test_jsonl_lines_are_still_read_one_by_one(tmp_path: Path) -> None:
    # A cut first line of real JSONL is no document: it is rejected, the other lines imported.
    path = tmp_path / "chats.jsonl"
    path.write_text('{"id": "cut", "messages": [{"role": "us\n' + json.dumps(CONVERSATIONS[0]) + "\n")
    events, rejected = _split(path)
    assert [r.record for r in rejected] == ["chats.jsonl:1"]
    assert {e["sessionId"] for e in events} == {"arr-a"}


def test_usl_ingest_reads_the_document_too(tmp_path: Path) -> None:
    # `usl ingest` imports through the follower (one-shot), which hands the importer the bytes
    # with an end-of-input line after them: the document is still read as one.
    from streams.follow import Follower, PositionStore
    from streams.testing import Clock, MemoryL1

    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps(CONVERSATIONS, indent=2))
    l1 = MemoryL1()
    report = Follower([path], appender=l1, store=PositionStore(tmp_path / "home"), idle_seconds=5.0,
                      clock=Clock(), once=True).poll()
    assert l1.dead == []
    expected, _ = _split(path)
    assert [e["eventId"] for e in l1.log] == [e["eventId"] for e in expected]
    assert report.appended == len(expected)
