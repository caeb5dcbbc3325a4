"""Codex CLI rollouts (real public examples, tests/fixtures/importers/codex/SOURCE.md) → ASP."""

from __future__ import annotations

import json
from pathlib import Path

from streams.importers import Accepted, Rejected, detect_format, iter_records

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "codex"
ESCALATION = FIXTURES / "rollout-2025-12-05T11-00-00-rejection-codex-001.jsonl"
REAL = FIXTURES / "rollout-2026-06-05T04-58-20-019e9625-802f-7e91-840a-cfe88d14117a.jsonl"


def events(path: Path) -> list[dict]:
    items = list(iter_records(path))
    assert not [i for i in items if isinstance(i, Rejected)]
    return [i.event for i in items if isinstance(i, Accepted)]


def test_detected_and_every_line_imported():
    assert detect_format(FIXTURES) == "codex"
    assert {detect_format(REAL), detect_format(ESCALATION)} == {"codex"}
    assert events(FIXTURES) == events(REAL.parent)  # deterministic


def test_turns_messages_and_tool_lineage():
    found = events(ESCALATION)
    assert {e["sessionId"] for e in found} == {"rejection-codex-001"}
    visible = [e for e in found if e.get("visibility") != "hidden"]
    users = [e["fields"]["text"] for e in visible if e["type"] == "message" and e["role"] == "user"]
    assert users == ["Create a test file", "Yes, overwrite it with something else",
                     "Actually nevermind, I want to keep the original content", "Can you read what's in it?",
                     "Delete the file"]
    assert sum(e["type"] == "turn.started" for e in found) == 5 == sum(e["type"] == "turn.ended" for e in found)
    calls = {e["fields"]["toolCallId"]: e for e in found if e["type"] == "tool.call"}
    results = {e["fields"]["toolCallId"]: e for e in found if e["type"] == "tool.result"}
    assert calls["call_esc_003"]["fields"] == {"toolName": "shell", "toolCallId": "call_esc_003",
                                               "input": {"command": "cat test.txt"}}
    assert results["call_esc_003"]["fields"]["output"] == "Hello World"
    assert results["call_esc_003"]["parentEventId"] == calls["call_esc_003"]["eventId"]
    assert set(calls) - set(results) == {"call_esc_002", "call_esc_004"}  # never answered
    assert all(e["turnId"] == calls["call_esc_003"]["turnId"] for e in (results["call_esc_003"],))
    answers = [e for e in visible if e["type"] == "message" and e["role"] == "assistant"]
    assert all(e["fields"]["model"] == "gpt-4.5-turbo" for e in answers)
    thinking = [e for e in found if e["fields"].get("kind") == "thinking"]
    assert thinking and all(e["visibility"] == "hidden" for e in thinking)


def test_real_session_context_is_hidden_and_the_prompt_starts_the_turn():
    found = events(REAL)
    started = next(e for e in found if e["type"] == "session.started")
    assert started["sessionId"] == "019e9625-802f-7e91-840a-cfe88d14117a"
    assert started["fields"]["cliVersion"] == "0.135.0" and started["fields"]["source"] == "codex"
    turn = [e for e in found if e["type"] == "turn.started"]
    assert len(turn) == 1
    visible = [(e["type"], e.get("role"), e["fields"].get("text")) for e in found
               if e.get("visibility") != "hidden" and e["type"] == "message"]
    assert visible == [("message", "user", "[REDACTED_PROMPT]"),
                       ("message", "assistant", "[REDACTED_ASSISTANT_TEXT]")]
    hidden = {e["type"] for e in found if e.get("visibility") == "hidden"}
    assert {"x.codex.event_msg", "x.codex.turn_context", "message"} <= hidden


def test_the_agents_work_outside_every_turn_opens_one_and_no_unit_stays_open(tmp_path: Path) -> None:
    """A rollout cut to start mid-session (a resumed or forked rollout) opens with the agent's
    own lines: they get a turn of their own, as after task_complete, instead of a session-level
    unit that nothing closes. Checked on the real rollout with its user message cut out."""
    from streams.chunking import Chunker, ChunkerConfig, default_tokenizer

    lines = REAL.read_bytes().splitlines(keepends=True)
    cut = tmp_path / REAL.name
    cut.write_bytes(b"".join(line for line in lines if b'"role":"user"' not in line.replace(b" ", b"")))
    found = events(cut)
    assert any(e["type"] == "message" and e.get("role") == "assistant" for e in found)
    assert all(e.get("turnId") for e in found if e["type"] in ("message", "tool.call", "tool.result")
               and e.get("visibility") != "hidden")
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")
    state = chunker.new_state(found[0]["sessionId"])
    for seq, event in enumerate(found, start=1):
        chunker.on_event(state, event["logId"], seq, event)
    assert chunker.open_min_seq(state) is None


def test_a_web_search_is_a_call(tmp_path: Path) -> None:
    """Codex records each web search the model runs as a `web_search_call` item (its `action`: a
    query, a page opened, a pattern found in a page). It was only a hidden event: what the
    agent searched for was not found. It is a `web_search` call now, beside that event."""
    lines = REAL.read_bytes().splitlines(keepends=True)
    stamp = '{"timestamp":"2026-06-05T04:58:40.000Z","type":"response_item","payload":'
    searches = [
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "faust consumer rebalance", "queries": ["faust consumer rebalance"]}},
        {"type": "web_search_call", "status": "completed", "action": {"type": "open_page", "url": "https://example.org/f"}},
        {"type": "web_search_call", "status": "completed"},
    ]
    path = tmp_path / REAL.name
    path.write_bytes(b"".join(lines[:-1]) + "".join(stamp + json.dumps(s) + "}\n" for s in searches).encode() + lines[-1])
    before = events(REAL)
    found = events(path)
    calls = [e for e in found if e["type"] == "tool.call" and e["fields"]["toolName"] == "web_search"]
    assert [(c["fields"]["toolCallId"], c["fields"]["input"]) for c in calls] == [
        ("ws_1", searches[0]["action"]), (f"line-{len(lines) + 1}", searches[1]["action"])]
    assert all(c["turnId"] for c in calls)
    assert sum(e["type"] == "x.codex.response_item" for e in found) == sum(
        e["type"] == "x.codex.response_item" for e in before) + 3


def test_an_image_the_user_pasted_is_part_of_the_prompt(tmp_path: Path) -> None:
    """Codex writes a pasted image as an `input_image` part (its data a URL) beside the
    prompt's `input_text` parts (openai/codex protocol ContentItem). It was dropped: a prompt
    of an image alone was an empty message."""
    lines = REAL.read_bytes().splitlines(keepends=True)
    stamp = '{"timestamp":"2026-06-05T04:58:40.000Z","type":"response_item","payload":'
    prompts = [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "why does this screen look off?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]},
    ]
    path = tmp_path / REAL.name
    path.write_bytes(b"".join(lines[:-1]) + "".join(stamp + json.dumps(p) + "}\n" for p in prompts).encode() + lines[-1])
    said = [e["fields"]["text"] for e in events(path) if e["type"] == "message" and e.get("role") == "user"
            and e.get("visibility") != "hidden"]
    assert said[-2:] == ["why does this screen look off?\n[input_image]", "[input_image]"]
