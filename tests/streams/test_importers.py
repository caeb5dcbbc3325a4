"""Importers: Claude Code, OpenAI chat and ASP JSONL files → validated ASP events + rejects."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streams.importers as importers
from streams.asp import CUT_NOTE, canonical_bytes, fit_event, validate_event
from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
from streams.exceptions import ImportFormatError, SchemaError
from streams.importers import FORMATS, Accepted, Rejected, detect_format, iter_records
from streams.importers.asp import iter_asp
from streams.importers.base import parse_json
from streams.importers.claude_code import iter_claude_code
from streams.importers.openai_chat import iter_openai_chat
from tests.streams.follow_kit import LIMIT, follow_as_it_grows

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "importers"
CLAUDE = FIXTURES / "claude_code" / "3f6c2a8e-1b7d-4c55-9e0a-5d2f8b1c7e94.jsonl"
OPENAI_ARRAY = FIXTURES / "openai_chat" / "support_chat.json"
OPENAI_JSONL = FIXTURES / "openai_chat" / "conversations.jsonl"
ASP = FIXTURES / "asp" / "events.jsonl"


def split(path: Path, fmt: str | None = None, **kwargs) -> tuple[list[dict], list[Rejected]]:
    accepted: list[dict] = []
    rejected: list[Rejected] = []
    for result in iter_records(path, fmt, **kwargs):
        if isinstance(result, Accepted):
            accepted.append(result.event)
        else:
            assert isinstance(result, Rejected)
            rejected.append(result)
    return accepted, rejected


def write_lines(path: Path, lines: Sequence[object]) -> Path:
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
    )
    return path


def cc_line(uuid: str, kind: str, content: object, *, time: str = "2025-10-14T09:00:00.000Z",
            parent: str | None = None, **extra: object) -> dict:
    message: dict = {"role": kind, "content": content}
    if kind == "assistant":
        message.update({"id": f"msg_{uuid}", "model": "claude-sonnet-4-5-20250929"})
    return {"parentUuid": parent, "isSidechain": False, "sessionId": "s-1", "type": kind,
            "message": message, "uuid": uuid, "timestamp": time, **extra}


# -- the package surface ------------------------------------------------------------------


def test_exported_members() -> None:
    assert sorted(importers.__all__) == sorted(
        ["DOCUMENT_FORMATS", "FILE_SUFFIXES", "FORMATS", "NO_JSON_RECORDS", "SKIPPED_DIRECTORIES", "Accepted",
         "Rejected", "detect_format", "directory_files", "file_format", "fitted", "import_files", "iter_file",
         "iter_records", "no_json_records", "skipped_directory", "skipped_file"]
    )
    assert FORMATS == ("asp", "claude-code", "openai-chat", "codex", "gemini-cli")


@pytest.mark.parametrize(
    ("path", "expected"),
    [(CLAUDE, "claude-code"), (OPENAI_ARRAY, "openai-chat"), (OPENAI_JSONL, "openai-chat"),
     (ASP, "asp"), (FIXTURES / "claude_code", "claude-code")],
)
def test_detect_format(path: Path, expected: str) -> None:
    assert detect_format(path) == expected


def test_detect_format_refuses_what_it_cannot_tell(tmp_path: Path) -> None:
    unknown = write_lines(tmp_path / "notes.jsonl", [{"hello": "world"}, "plain text"])
    with pytest.raises(ImportFormatError, match="cannot tell the format"):
        detect_format(unknown)
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ImportFormatError, match="empty"):
        detect_format(tmp_path / "empty.jsonl")
    with pytest.raises(ImportFormatError, match="several formats"):
        detect_format(FIXTURES)


def test_unreadable_or_unknown_inputs_raise(tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError, match="no such file"):
        list(iter_records(tmp_path / "missing.jsonl"))
    with pytest.raises(ImportFormatError, match="unknown format"):
        list(iter_records(ASP, "csv"))
    with pytest.raises(ImportFormatError, match="declared as asp"):
        list(iter_records(CLAUDE, "asp"))
    assert list(iter_records(write_lines(tmp_path / "blank.jsonl", [""]))) == []


# -- Claude Code ----------------------------------------------------------------------------


def test_claude_code_counts_and_rejects() -> None:
    accepted, rejected = split(CLAUDE)
    assert Counter(event["type"] for event in accepted) == {
        "session.started": 1, "turn.started": 4, "turn.ended": 4,
        "episode.started": 1, "episode.ended": 1,
        "message": 13, "tool.call": 7, "tool.result": 7,
        "x.claude-code.summary": 1, "x.claude-code.file-history-snapshot": 1,
        "x.claude-code.system": 1, "x.claude-code.queue-operation": 1,
        "x.claude-code.telemetry": 1,  # a line type this importer does not know by name
    }
    name = CLAUDE.name
    reasons = {reject.record: reject.reason for reject in rejected}
    assert set(reasons) == {f"{name}:28", f"{name}:34"}
    assert reasons[f"{name}:28"].startswith("invalid JSON")
    assert "unexpected end of data" in reasons[f"{name}:34"]
    assert all(0 < len(reject.raw) <= 4096 for reject in rejected)


def test_claude_code_session_identity_title_and_order() -> None:
    accepted, _ = split(CLAUDE)
    started = accepted[0]
    assert started["type"] == "session.started"
    assert started["sessionId"] == "3f6c2a8e-1b7d-4c55-9e0a-5d2f8b1c7e94"
    assert started["fields"] == {
        "title": "Fix ISO week parsing in invoice date helper",
        "model": "claude-sonnet-4-5-20250929",
        "cwd": "/home/dana/src/invoicer",
        "source": "claude-code",
    }
    assert started["time"] == "2025-10-14T09:12:03.512Z"
    assert {event["sessionId"] for event in accepted} == {started["sessionId"]}
    # Auxiliary lines waiting at the top of the file are placed right after session.started.
    assert [event["type"] for event in accepted[1:3]] == [
        "x.claude-code.summary", "x.claude-code.file-history-snapshot",
    ]
    assert all(event["visibility"] == "hidden" for event in accepted if event["type"].startswith("x."))


def assert_turns_well_formed(events: list[dict]) -> list[list[dict]]:
    """Turns open and close in order, and every event in between carries the open turnId."""
    turns: list[list[dict]] = []
    open_turn = None
    for event in events:
        if event["type"] == "turn.started":
            assert open_turn is None, "a turn started before the previous one ended"
            open_turn = event["turnId"]
            turns.append([event])
        elif event["type"] == "turn.ended":
            assert event["turnId"] == open_turn
            turns[-1].append(event)
            open_turn = None
        elif open_turn is not None:
            assert event.get("turnId") == open_turn, event
            turns[-1].append(event)
        else:
            assert event.get("turnId") is None, event
    assert open_turn is None, "the last turn was never ended"
    return turns


def test_claude_code_turn_structure() -> None:
    accepted, _ = split(CLAUDE)
    turns = assert_turns_well_formed(accepted)
    assert len(turns) == 4
    firsts = [turn[1] for turn in turns]
    assert [event["type"] for event in firsts] == ["message"] * 4
    assert all(event["role"] == "user" for event in firsts)
    assert firsts[0]["fields"]["text"].startswith("The test test_parse_iso_week")
    assert firsts[2]["fields"]["kind"] == "command"
    assert firsts[3]["fields"]["text"] == "Commit the fix with a short message."
    # Tool results, the sidechain prompt, isMeta and command output never open a turn.
    turn_two = [event for event in turns[1] if event["type"] == "message" and event["role"] == "user"]
    assert [event["fields"].get("kind") for event in turn_two] == [None, None, "meta"]
    meta = turn_two[2]
    assert meta["visibility"] == "hidden"
    assert turns[2][2]["fields"]["kind"] == "command-output"
    # turn.ended is timed at the last event of its turn, not at the next human message.
    assert turns[0][-1]["time"] == "2025-10-14T09:12:28.660Z"
    ids = [turn[0]["turnId"] for turn in turns]
    assert len(set(ids)) == 4


def test_claude_code_blocks_thinking_usage_and_tools() -> None:
    accepted, _ = split(CLAUDE)
    thinking = [event for event in accepted if event["fields"].get("kind") == "thinking"]
    assert len(thinking) == 1
    assert thinking[0]["visibility"] == "hidden" and thinking[0]["role"] == "assistant"
    assert thinking[0]["fields"]["text"].startswith("The user reports a failing test")
    # One API response split over three lines: three events, usage counted once.
    response = [event for event in accepted if (event.get("payload") or {}).get("message", {}).get("id") == "msg_01A7kQ2vYHq9TzE3"]
    assert [event["type"] for event in response] == ["message", "message", "tool.call"]
    assert [("usage" in event["fields"]) for event in response] == [True, False, False]
    assert response[0]["fields"]["usage"] == {
        "inputTokens": 4, "outputTokens": 9, "cacheReadInputTokens": 12873, "cacheCreationInputTokens": 2148}

    calls = {event["fields"]["toolCallId"]: event for event in accepted if event["type"] == "tool.call"}
    assert [call["fields"]["toolName"] for call in calls.values()] == [
        "Bash", "Read", "Edit", "Bash", "Task", "Grep", "Bash",
    ]
    assert calls["toolu_01Edit8Xc3"]["fields"]["input"]["new_string"].startswith("    return date.fromisocalendar")
    results = [event for event in accepted if event["type"] == "tool.result"]
    for result in results:
        call = calls[result["fields"]["toolCallId"]]
        assert result["role"] == "tool"
        assert result["fields"]["toolName"] == call["fields"]["toolName"]
        assert result["parentEventId"] == call["eventId"]
    statuses = {result["fields"]["toolCallId"]: result["fields"]["status"] for result in results}
    assert statuses["toolu_01Bash7Qm2"] == "error"
    assert Counter(statuses.values()) == {"ok": 6, "error": 1}
    read = next(r for r in results if r["fields"]["toolCallId"] == "toolu_01Read4Lp9")
    assert read["fields"]["output"].startswith("     1→from datetime import date")


def test_claude_code_usage_counts_each_lines_increase_of_its_responses_snapshot(tmp_path: Path) -> None:
    """Claude Code writes a response's blocks on lines of their own, each with the usage of the
    stream so far (real msg_01VUJh…: output 1 on the text line, 1 502 on the tool_use line). The
    events' counts sum to the last snapshot, and a prefix of the file (a follower that has not
    seen the later lines) yields the same events."""
    def snapshot(output: int) -> dict:
        return {"input_tokens": 1, "cache_creation_input_tokens": 301, "cache_read_input_tokens": 73495,
                "output_tokens": output, "service_tier": "standard"}

    def response_line(uuid: str, parent: str, block: dict, output: int) -> dict:
        line = cc_line(uuid, "assistant", [block], parent=parent)
        line["message"].update({"id": "msg_01VUJh", "model": "claude-opus-4-6", "usage": snapshot(output)})
        return line

    lines = [
        cc_line("u1", "user", "plan the refactor"),
        response_line("a1", "u1", {"type": "thinking", "thinking": "Let me look."}, 1),
        response_line("a2", "a1", {"type": "text", "text": "I'll read the module."}, 1),
        response_line("a3", "a2", {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}, 1502),
        response_line("a4", "a3", {"type": "text", "text": "A stale snapshot."}, 900),
    ]
    accepted, rejected = split(write_lines(tmp_path / "s.jsonl", lines), "claude-code")
    assert rejected == []
    response = [event for event in accepted if event.get("role") == "assistant"]
    assert [event["fields"].get("usage") for event in response] == [
        {"inputTokens": 1, "outputTokens": 1, "cacheReadInputTokens": 73495, "cacheCreationInputTokens": 301},
        None, {"outputTokens": 1501}, None,
    ]
    assert sum(event["fields"].get("usage", {}).get("outputTokens", 0) for event in response) == 1502
    # The call's tokens count under the model that wrote it.
    assert [event["fields"].get("model") for event in response] == ["claude-opus-4-6"] * 4

    for cut in range(2, len(lines)):
        prefix, _ = split(write_lines(tmp_path / "s.jsonl", lines[:cut]), "claude-code")
        assert [event for event in prefix if event.get("role") == "assistant"] == response[:cut - 1]


def test_claude_code_sidechain_is_an_episode() -> None:
    accepted, _ = split(CLAUDE)
    start = next(i for i, event in enumerate(accepted) if event["type"] == "episode.started")
    end = next(i for i, event in enumerate(accepted) if event["type"] == "episode.ended")
    episode = accepted[start: end + 1]
    episode_id = accepted[start]["episodeId"]
    assert all(event["episodeId"] == episode_id for event in episode)
    assert [event["type"] for event in episode[1:-1]] == ["message", "tool.call", "tool.result", "message"]
    assert sum(1 for event in accepted if event.get("episodeId")) == len(episode)
    task = next(e for e in accepted if e["type"] == "tool.call" and e["fields"]["toolName"] == "Task")
    assert accepted[start]["parentEventId"] == task["eventId"]
    assert accepted[start]["fields"] == {"toolCallId": "toolu_02Task3Wq8", "title": "Find callers of parse_iso_week"}
    # The subagent works inside the human turn that asked for it.
    assert {event["turnId"] for event in episode} == {task["turnId"]}
    # Its answer comes back to the main chain after the episode ends.
    assert accepted[end + 1]["type"] == "tool.result"
    assert accepted[end + 1]["fields"]["toolCallId"] == "toolu_02Task3Wq8"


def test_claude_code_lineage_follows_parent_uuid() -> None:
    accepted, _ = split(CLAUDE)
    by_id = {event["eventId"]: event for event in accepted}
    linked = [event for event in accepted if event.get("parentEventId")]
    assert len(linked) > 20
    assert all(event["parentEventId"] in by_id for event in linked)


def test_claude_code_problem_lines(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "fallback-session.jsonl", [
        cc_line("u1", "user", "hello"),
        cc_line("u1", "user", "hello again"),
        {**cc_line("u2", "user", "no time"), "timestamp": None},
        {**cc_line("u3", "user", "bad time"), "timestamp": "yesterday"},
        {k: v for k, v in cc_line("u4", "assistant", []).items() if k != "message"},
        cc_line("u5", "assistant", [{"type": "tool_use", "name": "Bash", "input": {}}, {"type": "hologram"}]),
        cc_line("u6", "user", [{"type": "tool_result", "tool_use_id": "toolu_unknown", "content": None}]),
        {k: v for k, v in cc_line("u7", "user", "no session id").items() if k != "sessionId"},
        [1, 2, 3],
        {"no": "type"},
    ])
    accepted, rejected = split(path, "claude-code")
    reasons = [(reject.record.rsplit(":", 1)[1], reject.reason) for reject in rejected]
    assert reasons == [
        ("2", "duplicate record: uuid 'u1' was already imported from line 1 with another message"),
        ("3", "missing field 'timestamp'"),
        ("4", "field 'timestamp' is not an RFC 3339 time with an offset: 'yesterday'"),
        ("5", "missing field 'message' (an object with role and content)"),
        ("6", "missing field 'message.content[0].id' of a tool_use block"),
        ("6", "unknown content block type 'hologram' at message.content[1]"),
        ("9", "a transcript line must be a JSON object, not an array"),
        ("10", "missing field 'type'"),
    ]
    orphan = next(event for event in accepted if event["type"] == "tool.result")
    assert "toolName" not in orphan["fields"] and orphan["fields"]["output"] == ""
    assert {event["sessionId"] for event in accepted} == {"s-1", "fallback-session"}


def test_claude_code_server_tool_blocks_are_calls_and_results(tmp_path: Path) -> None:
    """Claude Code 2.1 writes the advisor's blocks into its transcripts (`server_tool_use`
    named `advisor`, then `advisor_tool_result`), and an Agent SDK run's stream-json carries the
    API's web search, web fetch and code execution the same way. They were dead-lettered as
    unknown block types, losing the query, the advice and the pages found."""
    blocks = [
        {"type": "server_tool_use", "id": "srvtoolu_01adv", "name": "advisor", "input": {}},
        {"type": "advisor_tool_result", "tool_use_id": "srvtoolu_01adv",
         "content": {"type": "advisor_result", "text": "Prefer a bounded worker queue.", "stop_reason": "end_turn"}},
        {"type": "server_tool_use", "id": "srvtoolu_01ws", "name": "web_search", "input": {"query": "faust rebalance"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01ws", "content": [
            {"type": "web_search_result", "title": "Rebalancing in Faust", "url": "https://example.org/faust",
             "encrypted_content": "EqgfCioIARgB", "page_age": "May 1, 2025"}]},
        {"type": "server_tool_use", "id": "srvtoolu_01wf", "name": "web_fetch", "input": {"url": "https://example.org/a"}},
        {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_01wf", "content": {
            "type": "web_fetch_result", "url": "https://example.org/a", "content": {
                "type": "document", "title": "Page A",
                "source": {"type": "text", "media_type": "text/plain", "data": "Consumer groups rebalance on join."}}}},
        {"type": "server_tool_use", "id": "srvtoolu_01ce", "name": "bash_code_execution", "input": {"command": "ls"}},
        {"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_01ce",
         "content": {"type": "bash_code_execution_tool_result_error", "error_code": "unavailable"}},
        {"type": "text", "text": "Done."},
    ]
    lines = [cc_line("u1", "user", "how does faust rebalance?")]
    lines += [cc_line(f"a{i}", "assistant", [block], parent=f"a{i - 1}" if i else "u1")
              for i, block in enumerate(blocks)]
    accepted, rejected = split(write_lines(tmp_path / "s-1.jsonl", lines), "claude-code")
    assert rejected == []
    calls = {e["fields"]["toolCallId"]: e for e in accepted if e["type"] == "tool.call"}
    assert {k: (c["fields"]["toolName"], c["fields"]["input"]) for k, c in calls.items()} == {
        "srvtoolu_01adv": ("advisor", {}), "srvtoolu_01ws": ("web_search", {"query": "faust rebalance"}),
        "srvtoolu_01wf": ("web_fetch", {"url": "https://example.org/a"}),
        "srvtoolu_01ce": ("bash_code_execution", {"command": "ls"})}
    results = {e["fields"]["toolCallId"]: e for e in accepted if e["type"] == "tool.result"}
    assert {k: (r["fields"]["status"], r["fields"]["output"]) for k, r in results.items()} == {
        "srvtoolu_01adv": ("ok", "Prefer a bounded worker queue."),
        "srvtoolu_01ws": ("ok", "Rebalancing in Faust\nhttps://example.org/faust"),
        "srvtoolu_01wf": ("ok", "https://example.org/a\nPage A\nConsumer groups rebalance on join."),
        "srvtoolu_01ce": ("error", "unavailable")}
    for call_id, result in results.items():
        assert result["parentEventId"] == calls[call_id]["eventId"]
        assert result["fields"]["toolName"] == calls[call_id]["fields"]["toolName"]
    assert len({e["turnId"] for e in accepted if e.get("turnId")}) == 1


def test_claude_code_tool_result_parts_without_text_keep_what_names_them(tmp_path: Path) -> None:
    """Public schemas of Claude Code 2.1.x transcripts (oneryalcin/agent-schemas, v2.1.144:
    ToolReferenceBlock, ToolResultContentItem) list `tool_reference` parts (what ToolSearch
    returns: `tool_name`) and untyped MCP resource descriptors (`name`, `uri`, `description`)
    in a tool_result's content. The first became a bare `[tool_reference]`, the second was
    dropped without a word; a `tool_reference` block outside a result dead-lettered its line."""
    lines = [
        cc_line("u1", "user", "find the slack tool"),
        cc_line("a1", "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch",
                                     "input": {"query": "slack"}}], parent="u1"),
        cc_line("u2", "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "tool_reference", "tool_name": "mcp__slack__post_message"},
            {"name": "readme", "uri": "file:///repo/README.md", "mimeType": "text/markdown", "server": "fs",
             "description": "The project readme"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
            {"server": "fs", "_meta": {}}]}], parent="a1"),
        cc_line("u3", "user", [{"type": "tool_reference", "tool_name": "mcp__slack__post_message"}], parent="u2"),
    ]
    events, rejected = split(write_lines(tmp_path / "s-1.jsonl", lines), "claude-code")
    assert rejected == []
    (result,) = [e for e in events if e["type"] == "tool.result"]
    assert result["fields"]["output"].split("\n") == [
        "[tool_reference] mcp__slack__post_message", "readme file:///repo/README.md The project readme", "[image]",
        '{"server":"fs","_meta":{}}']
    (named,) = [e for e in events if e["type"] == "message" and e["fields"].get("kind") == "tool_reference"]
    assert (named["visibility"], named["fields"]["text"]) == ("hidden", "[tool_reference] mcp__slack__post_message")


def _qwen_lines() -> list[dict]:
    """A Qwen Code session as its ChatRecordingService writes it (QwenLM/qwen-code,
    packages/core/src/services/chatRecordingService.ts: ChatRecord): Claude Code's envelope
    around a Gemini `message` of `parts`, tool results as `tool_result` records, titles as
    `system` `custom_title` records."""
    base = {"sessionId": "5b1c0f7e-3d2a-4c8e-9f10-aa11bb22cc33", "cwd": "/src/app", "version": "0.0.14",
            "gitBranch": "main"}

    def record(uuid: str, parent: str | None, second: int, kind: str, **extra: object) -> dict:
        return {**base, "uuid": uuid, "parentUuid": parent, "timestamp": f"2025-11-03T10:00:{second:02d}.000Z",
                "type": kind, **extra}

    def answer(call: str, name: str, response: dict) -> dict:
        return {"role": "user", "parts": [{"functionResponse": {"id": call, "name": name, "response": response}}]}

    return [
        record("u1", None, 0, "user", message={"role": "user", "parts": [{"text": "list the files"}]}),
        record("a1", "u1", 2, "assistant", model="qwen3-coder-plus",
               usageMetadata={"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120},
               message={"role": "model", "parts": [{"text": "Listing first.", "thought": True},
                                                  {"functionCall": {"id": "call_1", "name": "list_directory",
                                                                    "args": {"path": "."}}},
                                                  {"functionCall": {"id": "call_2", "name": "read_file",
                                                                    "args": {"path": "gone.py"}}}]}),
        record("m1", "a1", 3, "user", subtype="mid_turn_user_message", systemPayload={"displayText": "skip tests/"},
               message={"role": "user", "parts": [{"text": "\n[User message received during tool execution]: "
                                                           "skip tests/"}]}),
        record("n1", "m1", 3, "user", subtype="notification", systemPayload={"displayText": "Task done"},
               message={"role": "user", "parts": [{"text": "<task-notification>b1 completed</task-notification>"}]}),
        record("t1", "n1", 3, "tool_result", message=answer("call_1", "list_directory", {"output": "app.py"}),
               toolCallResult={"callId": "call_1", "status": "success"}),
        record("t2", "t1", 3, "tool_result", message=answer("call_2", "read_file", {"error": "no such file"}),
               toolCallResult={"callId": "call_2", "status": "error"}),
        record("a2", "t2", 5, "assistant", model="qwen3-coder-plus",
               message={"role": "model", "parts": [{"text": "Only app.py is there."}]}),
        record("s1", "a2", 6, "system", subtype="custom_title",
               systemPayload={"customTitle": "List the app files", "titleSource": "auto"}),
    ]


def test_a_qwen_code_transcript_imports_as_the_claude_code_lines_it_amounts_to(tmp_path: Path) -> None:
    """Qwen Code (a Gemini CLI fork) writes Claude Code's envelope (`uuid`, `sessionId`, `type`)
    around Gemini `parts`: detected as a Claude Code transcript, every conversation line was
    dead-lettered (`missing field 'message.content'`) and its tool results kept hidden."""
    lines = _qwen_lines()
    path = write_lines(tmp_path / f"{lines[0]['sessionId']}.jsonl", lines)
    assert detect_format(path) == "claude-code"
    events, rejected = split(path)
    assert rejected == []
    started = next(e for e in events if e["type"] == "session.started")
    assert started["fields"] == {"source": "qwen-code", "model": "qwen3-coder-plus", "cwd": "/src/app",
                                 "title": "List the app files"}
    assert [(e["type"], e.get("role"), e["fields"].get("text") or e["fields"].get("toolName"))
            for e in events if e["type"] in ("message", "tool.call", "tool.result")] == [
        ("message", "user", "list the files"), ("message", "assistant", "Listing first."),
        ("tool.call", "assistant", "list_directory"), ("tool.call", "assistant", "read_file"),
        ("message", "user", "skip tests/"), ("message", "user", "<task-notification>b1 completed</task-notification>"),
        ("tool.result", "tool", "list_directory"), ("tool.result", "tool", "read_file"),
        ("message", "assistant", "Only app.py is there.")]
    results = [(e["fields"]["status"], e["fields"]["output"]) for e in events if e["type"] == "tool.result"]
    assert results == [("ok", "app.py"), ("error", "no such file")]
    thinking = next(e for e in events if e["fields"].get("kind") == "thinking")
    assert thinking["visibility"] == "hidden" and thinking["fields"]["usage"] == {"inputTokens": 100, "outputTokens": 20}
    # What the user typed while the tools ran is a user message of the running turn, as Claude
    # Code's queued prompt; a notification is hidden context; neither starts a turn.
    said = {e["fields"]["text"]: e for e in events if e["type"] == "message" and e["role"] == "user"}
    assert (said["skip tests/"]["fields"].get("kind"), said["skip tests/"]["visibility"]) == ("queued", "visible")
    assert said["<task-notification>b1 completed</task-notification>"]["visibility"] == "hidden"
    assert len({e["turnId"] for e in events if e["type"] in ("message", "tool.call", "tool.result")}) == 1
    # Followed as it is written: what the one-shot import appends, its title (written last)
    # in a second session.started, as a Claude Code session's late title.
    root = tmp_path / "live"
    root.mkdir()
    l1 = follow_as_it_grows(root / path.name, path.read_bytes().splitlines(keepends=True), tmp_path / "home")
    assert not l1.dead and max(l1.counts().values()) == 1
    extra = [e for e in l1.log if e["eventId"] not in {event["eventId"] for event in events}]
    assert [(e["type"], e["fields"].get("title")) for e in extra] == [("session.started", "List the app files")]
    assert {e["eventId"] for e in events} <= set(l1.counts())


def test_qwen_code_compression_summary_and_slash_commands(tmp_path: Path) -> None:
    """Qwen Code's `system` lines were all hidden with no text: a compression's summary (the
    `<state_snapshot>` its `compressedHistory` opens with, what the session was about) was in no
    index, and a slash command (`/memory show`) and what it showed were in no field. The summary
    is a user message of kind `compact-summary`, as Claude Code's isCompactSummary line; the
    slash command stays hidden (the client's, the model never reads it), its command and
    output its text. The history the compression kept is in the transcript already: not again."""
    qwen = _qwen_lines()
    lines = [qwen[0], qwen[6]]
    base = {key: lines[0][key] for key in ("sessionId", "cwd", "version", "gitBranch")}
    summary = ("<state_snapshot>\n<overall_goal>List the files of the app</overall_goal>\n"
               "<key_knowledge>Only app.py exists; gone.py was deleted.</key_knowledge>\n</state_snapshot>")

    def system(uuid: str, parent: str, second: int, subtype: str, payload: dict) -> dict:
        return {**base, "uuid": uuid, "parentUuid": parent, "timestamp": f"2025-11-03T10:01:{second:02d}.000Z",
                "type": "system", "subtype": subtype, "systemPayload": payload}

    lines += [
        system("c1", "a2", 0, "chat_compression", {
            "info": {"originalTokenCount": 61000, "newTokenCount": 9000, "compressionStatus": 1},
            "compressedHistory": [
                {"role": "user", "parts": [{"text": summary}]},
                {"role": "model", "parts": [{"text": "Got it. Thanks for the additional context!"}]},
                {"role": "model", "parts": [{"text": "Only app.py is there."}]}]}),
        system("c2", "c1", 1, "slash_command", {"phase": "invocation", "rawCommand": "/memory show"}),
        system("c3", "c2", 2, "slash_command", {"phase": "result", "rawCommand": "/memory show",
                                               "outputHistoryItems": [{"type": "info", "text": "Always run ruff."}]}),
        system("c4", "c3", 3, "chat_compression", {"info": {}, "compressedHistory": []}),
    ]
    path = write_lines(tmp_path / f"{base['sessionId']}.jsonl", lines)
    events, rejected = split(path)
    assert rejected == []
    compact = [e for e in events if e["fields"].get("kind") == "compact-summary"]
    assert [(e["type"], e["role"], e["visibility"], e["fields"]["text"]) for e in compact] == [
        ("message", "user", "visible", summary)]
    assert sum(e["type"] == "message" and e["fields"].get("text") == "Only app.py is there." for e in events) == 1
    system_events = [e for e in events if e["type"] == "x.claude-code.system"]
    assert [(e["visibility"], e["fields"].get("subtype"), e["fields"].get("command"), e["fields"].get("text"))
            for e in system_events] == [
        ("hidden", "slash_command", "/memory show", "/memory show"),
        ("hidden", "slash_command", "/memory show", "Always run ruff."),
        ("hidden", "chat_compression", None, None)]  # a compression of no summary stays as it was
    assert [e["eventId"] for e in split(path)[0]] == [e["eventId"] for e in events]


def test_claude_code_prompt_queued_mid_turn_is_a_user_message(tmp_path: Path) -> None:
    """What the user types while the agent works reaches the model mid-turn, and Claude Code
    (2.1.x) records it only as a `queued_command` attachment (after the queue's `enqueue` and
    `remove` with `absorbed_mid_turn`). It was kept hidden: the user's words were not found."""
    def aux(kind: str, uuid: str | None, **extra: object) -> dict:
        return {"type": kind, "sessionId": "s-1", "timestamp": "2025-10-14T09:00:03.000Z",
                **({"uuid": uuid, "parentUuid": "a1"} if uuid else {}), **extra}

    lines = [
        cc_line("u1", "user", "add a forecast screen"),
        cc_line("a1", "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}],
                parent="u1"),
        aux("queue-operation", None, operation="enqueue", content="also add tests for it"),
        aux("queue-operation", None, operation="remove", content="also add tests for it", reason="absorbed_mid_turn"),
        aux("attachment", "q1", attachment={"type": "queued_command", "prompt": "also add tests for it",
                                            "commandMode": "prompt", "origin": {"kind": "human"}}),
        aux("attachment", "q2", attachment={"type": "queued_command", "commandMode": "task-notification",
                                            "prompt": "<task-notification><task-id>b1</task-id></task-notification>"}),
        aux("attachment", "q3", attachment={"type": "queued_command", "commandMode": "prompt",
                                            "prompt": [{"type": "text", "text": "match this layout"}, {"type": "image"}]}),
        cc_line("u2", "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "app.py"}], parent="q3"),
        cc_line("a2", "assistant", [{"type": "text", "text": "Adding tests too."}], parent="u2"),
    ]
    accepted, rejected = split(write_lines(tmp_path / "s-1.jsonl", lines), "claude-code")
    assert rejected == []
    queued = [e for e in accepted if e["type"] == "message" and e["fields"].get("kind") == "queued"]
    assert [(e["role"], e["visibility"], e["fields"]["text"]) for e in queued] == [
        ("user", "visible", "also add tests for it"), ("user", "visible", "match this layout\n[image]")]
    # In the running turn, which they start no other of.
    assert [e["type"] for e in accepted].count("turn.started") == 1
    assert {e["turnId"] for e in queued} == {accepted[1]["turnId"]}
    # The attachment lines are kept as they were.
    assert sum(e["type"] == "x.claude-code.attachment" for e in accepted) == 3


def _queue(operation: str, second: int, content: object = None, **extra: object) -> dict:
    return {"type": "queue-operation", "operation": operation, "sessionId": "s-1",
            "timestamp": f"2025-10-14T09:00:{second:02d}.000Z",
            **({} if content is None else {"content": content}), **extra}


def _queued_messages(events: list[dict]) -> list[str]:
    return [e["fields"]["text"] for e in events if e["type"] == "message" and e["fields"].get("kind") == "queued"]


def test_claude_code_prompt_absorbed_by_the_queue_alone_is_a_user_message(tmp_path: Path) -> None:
    """Claude Code 2.1.39 (the real corpus) records a prompt the running turn absorbs only as a
    queue `enqueue` (its text) and a `remove` (no text, no reason, no attachment): the user's
    words stayed in a hidden event. A queued task notification or slash command is no prompt;
    a `dequeue`d prompt is the next turn's own user line, a `popAll`ed one went back to the
    input box: neither is told twice or at all."""
    call = [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "sleep 60"}}]
    lines = [
        cc_line("u1", "user", "run the tests"),
        cc_line("a1", "assistant", call, parent="u1"),
        _queue("enqueue", 1, "<task-notification>\n<task-id>a1b2c3d</task-id>\n</task-notification>"),
        _queue("enqueue", 2, "check again"),
        _queue("enqueue", 3, "/mcp"),
        _queue("remove", 4),
        _queue("remove", 5),
        cc_line("u2", "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}], parent="a1"),
        _queue("enqueue", 6, "then commit"),
        _queue("dequeue", 7),
        cc_line("u3", "user", "then commit", parent="u2", time="2025-10-14T09:00:07.000Z"),
        _queue("enqueue", 8, "never sent"),
        _queue("popAll", 9),
    ]
    events, rejected = split(write_lines(tmp_path / "s-1.jsonl", lines), "claude-code")
    assert rejected == []
    assert _queued_messages(events) == ["check again"]
    told = next(e for e in events if e["fields"].get("kind") == "queued")
    assert (told["role"], told["visibility"]) == ("user", "visible")
    assert told["turnId"] == next(e for e in events if e["type"] == "tool.call")["turnId"]
    said = [e["fields"]["text"] for e in events if e["type"] == "message" and e["role"] == "user"]
    assert said == ["run the tests", "check again", "then commit"]


@pytest.mark.parametrize("attachment_first", [False, True])
def test_claude_code_prompt_absorbed_with_both_records_is_told_once(tmp_path: Path, attachment_first: bool) -> None:
    """A client that writes both a queue `remove` and a `queued_command` attachment for the
    absorbed prompt, in either order (with or without the remove naming it), tells it once."""
    def attachment(uuid: str, prompt: str) -> dict:
        return {"type": "attachment", "uuid": uuid, "parentUuid": "a1", "sessionId": "s-1",
                "timestamp": "2025-10-14T09:00:05.000Z",
                "attachment": {"type": "queued_command", "prompt": prompt, "commandMode": "prompt"}}

    removes = [_queue("remove", 4), _queue("remove", 4, "keep it short", reason="absorbed_mid_turn")]
    both = [[attachment("q1", "also add tests"), removes[0]], [attachment("q2", "keep it short"), removes[1]]]
    lines = [cc_line("u1", "user", "add a screen"), cc_line("a1", "assistant", "On it.", parent="u1"),
             _queue("enqueue", 2, "also add tests"), _queue("enqueue", 3, "keep it short")]
    for pair in both:
        lines += pair if attachment_first else pair[::-1]
    events, rejected = split(write_lines(tmp_path / "s-1.jsonl", lines), "claude-code")
    assert rejected == []
    assert _queued_messages(events) == ["also add tests", "keep it short"]


def test_claude_code_queued_prompts_followed_as_they_are_written(tmp_path: Path) -> None:
    """A follower that reads the queue's lines one poll at a time appends what a one-shot
    import appends: the queue is carried from one part of the file to the next."""
    call = [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "sleep 60"}}]
    lines = [json.dumps(line).encode() + b"\n" for line in [
        cc_line("u1", "user", "run the tests"), cc_line("a1", "assistant", call, parent="u1"),
        _queue("enqueue", 2, "check again"), _queue("remove", 4),
        cc_line("u2", "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}], parent="a1"),
    ]]
    root = tmp_path / "live"
    root.mkdir()
    l1 = follow_as_it_grows(root / "s-1.jsonl", lines, tmp_path / "home")
    assert [e["eventId"] for e in l1.log] == [
        item.event["eventId"] for item in iter_records(root, max_event_bytes=LIMIT) if isinstance(item, Accepted)]
    assert _queued_messages(l1.log) == ["check again"]


def test_claude_code_line_written_again_is_no_dead_letter(tmp_path: Path) -> None:
    """Claude Code writes lines again under their uuid: an editor reopening a session replays
    them (anthropics/claude-code#56196: "byte-for-byte identical ... with only minor context
    fields differing (e.g. cwd)", hundreds per session). Each copy was dead-lettered as a
    duplicate record; it says nothing new and is kept as a hidden `x.claude-code.copy`. A line
    that reuses a uuid for another message is still rejected, naming the first."""
    first = [cc_line("u1", "user", "rename the module", cwd="/p/sub"),
             cc_line("a1", "assistant", [{"type": "text", "text": "Renamed."}], parent="u1", cwd="/p/sub")]
    replayed = [{**line, "cwd": "/p", "gitBranch": "main"} for line in first]
    other = cc_line("u1", "user", "a different prompt")
    accepted, rejected = split(write_lines(tmp_path / "s-1.jsonl", [*first, *replayed, other]), "claude-code")
    alone, _ = split(write_lines(tmp_path / "s-1.jsonl", first), "claude-code")
    copies = [e for e in accepted if e["type"] == "x.claude-code.copy"]
    # The same events (the turn's end is named after its last event, now a copy).
    assert [e for e in accepted if e not in copies and e["type"] != "turn.ended"] == [
        e for e in alone if e["type"] != "turn.ended"]
    assert [e["type"] for e in accepted].count("turn.ended") == 1
    assert [(e["visibility"], e["fields"]) for e in copies] == [
        ("hidden", {"uuid": "u1", "copyOf": "line 1"}), ("hidden", {"uuid": "a1", "copyOf": "line 2"})]
    assert [(r.record, r.reason) for r in rejected] == [
        ("s-1.jsonl:5", "duplicate record: uuid 'u1' was already imported from line 1 with another message")]


def test_claude_code_prompt_written_again_as_one_text_block_is_a_copy(tmp_path: Path) -> None:
    """Claude Code 1.0 wrote a repeated prompt's ``"content": "say lol"`` as ``[{"type": "text",
    "text": "say lol"}]`` (slopus/happy-cli's fixtures of a resumed session): the same message,
    a copy, not a duplicate record. A block that says more (a cache mark) still is one."""
    first = cc_line("u1", "user", "say lol")
    again = cc_line("u1", "user", [{"type": "text", "text": "say lol"}])
    marked = cc_line("u1", "user", [{"type": "text", "text": "say lol", "cache_control": {"type": "ephemeral"}}])
    accepted, rejected = split(write_lines(tmp_path / "s-1.jsonl", [first, again, marked]), "claude-code")
    assert [(e["type"], e["fields"]) for e in accepted if e["type"] == "x.claude-code.copy"] == [
        ("x.claude-code.copy", {"uuid": "u1", "copyOf": "line 1"})]
    assert [r.record for r in rejected] == ["s-1.jsonl:3"]


def test_claude_code_subagent_file_without_main_chain(tmp_path: Path) -> None:
    lines = [
        {**cc_line("s1", "user", "Look for TODOs"), "isSidechain": True, "agentId": "a91f"},
        {**cc_line("s2", "assistant", [{"type": "text", "text": "Found 3."}], parent="s1"),
         "isSidechain": True, "agentId": "a91f"},
    ]
    accepted, rejected = split(write_lines(tmp_path / "agent-a91f.jsonl", lines))
    assert rejected == []
    assert [event["type"] for event in accepted] == ["episode.started", "message", "message", "episode.ended"]
    assert accepted[0]["fields"] == {"agentId": "a91f"}
    assert all("turnId" not in event for event in accepted)


def test_claude_code_payload_only_when_small(tmp_path: Path) -> None:
    big = "x" * 20_000
    path = write_lines(tmp_path / "big.jsonl", [
        cc_line("u1", "user", "run it"),
        cc_line("u2", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": big}], parent="u1"),
    ])
    accepted, _ = split(path)
    messages = [event for event in accepted if event["type"] in ("message", "tool.result")]
    assert "payload" in messages[0] and "payload" not in messages[1]
    assert messages[1]["fields"]["output"] == big


# -- OpenAI chat ----------------------------------------------------------------------------


def test_openai_array_form() -> None:
    accepted, rejected = split(OPENAI_ARRAY)
    assert rejected == []
    assert Counter(event["type"] for event in accepted) == {
        "session.started": 1, "session.ended": 1, "turn.started": 2, "turn.ended": 2,
        "message": 6, "tool.call": 3, "tool.result": 3,
    }
    assert_turns_well_formed(accepted)
    first = json.loads(OPENAI_ARRAY.read_text())[0]
    expected_session = "oai-" + hashlib.sha256(
        b"support_chat.json\x1f0\x1f" + orjson.dumps(first, option=orjson.OPT_SORT_KEYS)
    ).hexdigest()[:16]
    assert {event["sessionId"] for event in accepted} == {expected_session}
    # No `created`: message i is timed i seconds after the Unix epoch.
    assert accepted[0]["time"] == "1970-01-01T00:00:00.000Z"
    assert accepted[-1]["time"] == "1970-01-01T00:00:09.000Z"
    calls = {e["fields"]["toolCallId"]: e for e in accepted if e["type"] == "tool.call"}
    assert calls["call_Zr9Dk4sFq2gB7mN1"]["fields"]["input"] == {
        "_raw": '{"order_id": "A-1043", "date": "2025-10-16"'
    }
    assert calls["call_Qx7Lr2mVb0sK9dT4"]["fields"]["input"] == {"order_id": "A-1043"}
    for result in (e for e in accepted if e["type"] == "tool.result"):
        call = calls[result["fields"]["toolCallId"]]
        assert result["fields"]["toolName"] == call["fields"]["toolName"]
        assert result["parentEventId"] == call["eventId"]
        assert result["fields"]["status"] == "ok"
    user_parts = [e for e in accepted if e["type"] == "message" and e["role"] == "user"]
    assert user_parts[1]["fields"]["text"].startswith("Oh, sorry. It's Flat 4B")


def test_openai_jsonl_form() -> None:
    accepted, rejected = split(OPENAI_JSONL)
    sessions = Counter(event["sessionId"] for event in accepted)
    assert sessions["chatcmpl-AZ3kLm9QpR7sT2vW"] == 20
    # Line 4 is a pasted chat.completion response: its one answer is a conversation too.
    assert sessions["chatcmpl-BQ9x"] == 3  # session.started, the assistant message, session.ended
    assert len(sessions) == 3
    reasons = {reject.record: reject.reason for reject in rejected}
    assert reasons == {
        "conversations.jsonl:2/messages[3]":
            "field 'messages[3].role' is 'bot', not one of system, developer, user, assistant, tool, function",
        "conversations.jsonl:3": reasons["conversations.jsonl:3"],
    }
    assert reasons["conversations.jsonl:3"].startswith("invalid JSON")
    first = [event for event in accepted if event["sessionId"] == "chatcmpl-AZ3kLm9QpR7sT2vW"]
    assert first[0]["fields"] == {"model": "gpt-4o-2024-08-06", "source": "openai-chat"}
    assert first[0]["time"] == "2025-10-14T10:20:00.000Z"  # created = 1760437200
    bad_args = next(e for e in first if e["type"] == "tool.call" and "_raw" in e["fields"]["input"])
    assert bad_args["fields"]["toolCallId"] == "call_0cXe5Jm4"
    assert len(assert_turns_well_formed(first)) == 2
    developer = [event for event in accepted if event.get("role") == "developer"]
    assert len(developer) == 1 and "turnId" not in developer[0]


def test_openai_jsonl_of_one_message_per_line_is_one_conversation(tmp_path: Path) -> None:
    # An agent that logs each chat message as a line as it goes, its last line cut mid-write.
    messages = json.loads(OPENAI_ARRAY.read_text())
    lines = [json.dumps(message) for message in messages]
    cut = lines[3][: len(lines[3]) // 2]
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join([*lines[:3], cut, *lines[4:], '{"role": "user", "content": "still typ']) + "\n")
    assert detect_format(path) == "openai-chat"
    accepted, rejected = split(path)
    assert len({event["sessionId"] for event in accepted}) == 1  # one run, the cut line inside it
    assert {r.record for r in rejected} == {"run.jsonl:4", f"run.jsonl:{len(lines) + 1}"}
    assert all(r.reason.startswith("invalid JSON") for r in rejected)
    # The same events as the array's, but the result of the tool call whose line was cut.
    whole, _ = split(OPENAI_ARRAY)
    kinds = Counter(e["type"] for e in whole)
    kinds["tool.result"] -= 1
    assert Counter(e["type"] for e in accepted) == kinds
    assert [e["fields"].get("text") for e in accepted if e["type"] == "message"] == [
        e["fields"].get("text") for e in whole if e["type"] == "message"]
    assert len(assert_turns_well_formed(accepted)) == len(assert_turns_well_formed(whole))


def test_openai_document_shapes(tmp_path: Path) -> None:
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    many = tmp_path / "many.json"
    many.write_text(json.dumps([
        {"id": "conv-a", "created": 1700000000, "messages": conversation},
        conversation,
        {"title": "no messages"},
    ], indent=2))
    accepted, rejected = split(many)
    assert [r.record for r in rejected] == ["many.json#2"]
    assert len({event["sessionId"] for event in accepted}) == 2
    single = tmp_path / "single.json"
    single.write_text(json.dumps({"id": "conv-b", "title": "Greeting", "messages": conversation}))
    accepted, _ = split(single)
    assert accepted[0]["fields"] == {"title": "Greeting", "source": "openai-chat"}
    assert accepted[0]["sessionId"] == "conv-b"


def test_openai_reasoning_content_is_kept_as_hidden_thinking(tmp_path: Path) -> None:
    """DeepSeek, vLLM and SGLang return the model's thinking as the message's
    `reasoning_content` (OpenRouter: `reasoning`), and agent runs log it so; it was dropped.
    It is a hidden thinking message before the answer; the message's own events are unchanged."""
    plain = [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        {"role": "assistant", "content": "One file: a.py."},
    ]
    thoughts = {1: {"reasoning_content": "Need to inspect files first."},
                3: {"reasoning": "The listing shows one file."}}
    thinking = [{**message, **thoughts.get(i, {})} for i, message in enumerate(plain)]
    before, _ = split(write_lines(tmp_path / "plain.jsonl", [{"id": "run-1", "model": "deepseek-r1", "messages": plain}]))
    after, rejected = split(write_lines(tmp_path / "plain.jsonl", [{"id": "run-1", "model": "deepseek-r1", "messages": thinking}]))
    assert rejected == []
    hidden = [event for event in after if event.get("visibility") == "hidden"]
    assert [(event["fields"]["text"], event["fields"]["kind"], event["fields"]["model"]) for event in hidden] == [
        ("Need to inspect files first.", "thinking", "deepseek-r1"), ("The listing shows one file.", "thinking", "deepseek-r1")]
    assert [event for event in after if event not in hidden] == [
        {**event, "payload": thinking[plain.index(event["payload"])]} if "payload" in event else event
        for event in before]
    # Thinking comes before what the model did with it.
    order = [(event["type"], event["fields"].get("kind")) for event in after if event.get("role") == "assistant"]
    assert order == [("message", "thinking"), ("tool.call", None), ("message", "thinking"), ("message", None)]


def test_openai_problem_messages(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps({"messages": [
        {"role": "user", "content": "what's the weather"},
        {"role": "assistant", "content": None, "function_call": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}},
        {"role": "function", "name": "weather", "content": "4°C, rain"},
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "x", "arguments": "{}"}}]},
        {"role": "tool", "content": "orphan"},
        {"content": "who am I"},
        "just a string",
    ], "created": "yesterday"}))
    accepted, rejected = split(path)
    assert [r.reason for r in rejected] == ["field 'created' must be Unix seconds, not 'yesterday'"]
    path.write_text(path.read_text().replace('"created": "yesterday"', '"created": 1700000000'))
    accepted, rejected = split(path)
    assert [r.reason for r in rejected] == [
        "missing field 'messages[3].tool_calls[0].id'",
        "missing field 'messages[4].tool_call_id'",
        "missing field 'messages[5].role'",
        "messages[6] must be an object, not a string",
    ]
    call = next(e for e in accepted if e["type"] == "tool.call")
    result = next(e for e in accepted if e["type"] == "tool.result")
    assert call["fields"]["input"] == {"city": "Oslo"}
    assert result["parentEventId"] == call["eventId"]
    assert result["fields"]["toolCallId"] == call["fields"]["toolCallId"]
    assert result["fields"]["toolName"] == "weather"


# -- ASP JSONL ------------------------------------------------------------------------------


def test_asp_jsonl() -> None:
    accepted, rejected = split(ASP)
    assert len(accepted) == 6
    assert [(r.record, r.reason) for r in rejected] == [
        ("events.jsonl:5",
         'role must be one of ["user", "assistant", "system", "developer", "tool", null] (field $.role)'),
    ]
    assert rejected[0].raw.startswith('{"aspVersion":"1.0","eventId":"evt-7c1e-0005"')
    assert [event["eventId"] for event in accepted][:2] == ["evt-7c1e-0001", "evt-7c1e-0002"]
    filled = next(event for event in accepted if event["eventId"] == "evt-7c1e-0006")
    assert filled["aspVersion"] == "1.0" and filled["logId"] == "default"


def test_asp_log_and_acl_fill_only_what_is_missing() -> None:
    acl = {"tenant": "acme", "read": ["group:sre"]}
    accepted, _ = split(ASP, log_id="ops", acl=acl)
    logs = {event["eventId"]: event["logId"] for event in accepted}
    assert logs["evt-7c1e-0006"] == "ops" and logs["evt-7c1e-0001"] == "default"
    assert all(event["acl"] == acl for event in accepted)


# -- properties every importer keeps --------------------------------------------------------

CODEX = sorted((FIXTURES / "codex").glob("*.jsonl"))
GEMINI = FIXTURES / "gemini_cli" / "session-rejection-gemini-001.jsonl"
ALL_FILES = [CLAUDE, OPENAI_ARRAY, OPENAI_JSONL, ASP, *CODEX, GEMINI]


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_every_event_validates_and_ids_are_unique(path: Path) -> None:
    results = list(iter_records(path))
    for result in results:
        if isinstance(result, Accepted):
            assert validate_event(result.event, record=result.record) == result.event
            assert result.record.startswith(path.name)
    ids = [r.event["eventId"] for r in results if isinstance(r, Accepted)]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_imports_are_deterministic(path: Path) -> None:
    def run() -> list[bytes]:
        return [
            canonical_bytes(r.event) if isinstance(r, Accepted) else repr(r).encode()
            for r in iter_records(path)
        ]

    assert run() == run()


def test_ids_differ_between_logs_and_acl_applies() -> None:
    acl = {"tenant": "acme", "read": ["user:dana"]}
    default, _ = split(CLAUDE)
    other, _ = split(CLAUDE, log_id="team-b", acl=acl)
    assert not {e["eventId"] for e in default} & {e["eventId"] for e in other}
    assert all(e["logId"] == "team-b" and e["acl"] == acl for e in other)
    other[0]["acl"]["read"].append("user:mallory")
    assert other[1]["acl"] == acl  # no event shares its acl object with another


def test_directory_import(tmp_path: Path) -> None:
    results = list(iter_records(FIXTURES))
    records = [r.record for r in results]
    files = [record.split(":")[0].split("/messages")[0].split("#")[0] for record in records]
    assert list(dict.fromkeys(files)) == [
        "asp/events.jsonl",
        f"claude_code/{CLAUDE.name}",
        *(f"codex/{path.name}" for path in CODEX),
        f"gemini_cli/{GEMINI.name}",
        "openai_chat/conversations.jsonl",
        "openai_chat/support_chat.json",
    ]
    single = sum(len(list(iter_records(path))) for path in ALL_FILES)
    assert len(results) == single
    ids = [r.event["eventId"] for r in results if isinstance(r, Accepted)]
    assert len(ids) == len(set(ids))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "readme.txt").write_text("ignored: not .json/.jsonl")
    (tmp_path / "sub" / "empty.jsonl").write_text("")
    (tmp_path / "sub" / "events.jsonl").write_bytes(ASP.read_bytes())
    assert len(list(iter_records(tmp_path))) == 7
    (tmp_path / "zz.json").write_text('{"what": "is this"}')
    with pytest.raises(ImportFormatError, match=r"zz\.json"):
        list(iter_records(tmp_path))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(
    st.binary(max_size=60),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.sampled_from(
            ["user", "assistant", "summary", "tool_use", "tool_result", "text", "thinking",
             "2025-10-14T09:00:00Z"]),
        lambda children: st.lists(children, max_size=3) | st.dictionaries(
            st.sampled_from(["type", "message", "content", "uuid", "timestamp", "role",
                             "tool_calls", "messages", "isSidechain", "parentUuid"]),
            children, max_size=5),
        max_leaves=12,
    ).map(lambda value: json.dumps(value).encode()),
), max_size=8))
def test_garbage_never_raises(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]) -> None:
    directory = tmp_path_factory.mktemp("garbage")
    path = directory / "garbage.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines))
    # The importers themselves, so no format check stands between them and the garbage.
    for importer in (iter_asp, iter_claude_code, iter_openai_chat):
        for result in importer(path, label=path.name):
            assert isinstance(result, Accepted | Rejected)
            if isinstance(result, Accepted):
                validate_event(result.event)


# -- what real files hold besides the happy path ------------------------------------------

def test_a_byte_order_mark_does_not_cost_the_first_record(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    lines = [json.dumps(cc_line("u1", "user", "hello")), json.dumps(cc_line("u2", "assistant", "hi"))]
    path.write_bytes("\n".join(lines).encode("utf-8-sig"))
    assert detect_format(path) == "claude-code"
    accepted, rejected = split(path)
    assert rejected == []
    assert [e["fields"].get("text") for e in accepted if e["type"] == "message"] == ["hello", "hi"]

    chat = tmp_path / "chat.json"
    chat.write_bytes(json.dumps([{"role": "user", "content": "q"}], indent=2).encode("utf-8-sig"))
    assert detect_format(chat) == "openai-chat"
    assert split(chat)[1] == []


def test_a_byte_order_mark_changes_no_event(tmp_path: Path) -> None:
    """The same transcript with and without a BOM is the same events, byte for byte: the first
    line of a resumed session's file (a summary: no uuid, in a file named after another
    session) took its eventId from its bytes, BOM included, and a follower of the file, which
    reads it on from its last line, appends nothing more."""
    from streams.follow import Follower, PositionStore
    from streams.testing import MemoryL1

    lines = [json.dumps({"type": "summary", "summary": "Fix the login", "leafUuid": "u1"}),
             json.dumps(cc_line("u1", "user", "hello")), json.dumps(cc_line("a1", "assistant", "hi", parent="u1"))]
    plain, marked = tmp_path / "plain" / "resumed.jsonl", tmp_path / "marked" / "resumed.jsonl"
    for path, text in ((plain, "\n".join(lines) + "\n"), (marked, "\ufeff" + "\n".join(lines) + "\n")):
        path.parent.mkdir()
        path.write_bytes(text.encode())
    assert [canonical_bytes(e) for e in split(marked)[0]] == [canonical_bytes(e) for e in split(plain)[0]]
    l1 = MemoryL1()
    Follower([marked.parent], appender=l1, store=PositionStore(tmp_path / "home"), once=True).poll()
    assert len(l1.log) == len(split(plain)[0]) and not l1.dead
    with marked.open("ab") as handle:
        handle.write(json.dumps(cc_line("u2", "user", "thanks", parent="a1")).encode() + b"\n")
    Follower([marked.parent], appender=l1, store=PositionStore(tmp_path / "home"), once=True).poll()
    assert max(l1.counts().values()) == 1 and not l1.dead
    assert [e["fields"].get("text") for e in l1.log if e["type"] == "message"] == ["hello", "hi", "thanks"]


def test_progress_and_unknown_line_types_are_kept_hidden_and_odd_ones_rejected(tmp_path: Path) -> None:
    progress = {"type": "progress", "data": {"type": "hook_progress", "hookEvent": "PostToolUse",
                                             "hookName": "PostToolUse:Read", "command": "callback"},
                "toolUseID": "toolu_1", "parentToolUseID": "toolu_1", "sessionId": "s-1",
                "timestamp": "2025-10-14T09:00:01.000Z", "uuid": "p-1"}
    path = write_lines(tmp_path / "t.jsonl", [
        cc_line("u1", "user", "hello"), progress,
        {"type": "agent-name", "sessionId": "s-1", "timestamp": "2025-10-14T09:00:02.000Z"},
        {"type": "Not A Type!", "sessionId": "s-1"}, {"type": 7, "sessionId": "s-1"},
    ])
    accepted, rejected = split(path)
    hidden = [e for e in accepted if e["type"].startswith("x.")]
    assert [e["type"] for e in hidden] == ["x.claude-code.progress", "x.claude-code.agent-name"]
    assert all(e["visibility"] == "hidden" for e in hidden)
    assert hidden[0]["fields"] == {"toolCallId": "toolu_1", "parentToolCallId": "toolu_1",
                                   "progressType": "hook_progress", "hookEvent": "PostToolUse",
                                   "hookName": "PostToolUse:Read"}
    assert sorted(r.reason for r in rejected) == ["foreign record type 'Not A Type!'", "foreign record type 7"]


def test_invalid_utf8_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = json.dumps(cc_line("u1", "user", "hello")).encode()
    path.write_bytes(good + b"\n" + good.replace(b"hello", b"he\xffllo").replace(b"u1", b"u2") + b"\n")
    accepted, rejected = split(path)
    assert [r.reason for r in rejected] == [
        f"not valid UTF-8: byte 0xff at offset {good.index(b'hello') + 2} (the file must be UTF-8)"]
    assert any(e["type"] == "message" for e in accepted)


def test_a_last_line_cut_inside_a_character_is_named_cut_off(tmp_path: Path) -> None:
    """A transcript copied while Claude Code wrote it can end inside a multi-byte character. That
    line is cut off, as one cut between two ASCII bytes is, not a file in another encoding."""
    path = tmp_path / "t.jsonl"
    good = json.dumps(cc_line("u1", "user", "hello"), ensure_ascii=False).encode()
    cut = json.dumps(cc_line("u2", "user", "naïve café"), ensure_ascii=False).encode()
    path.write_bytes(good + b"\n" + cut[:cut.index("é".encode()) + 1])
    accepted, rejected = split(path)
    assert [r.reason for r in rejected] == [
        f"invalid JSON (truncated or not JSON): cut off inside a UTF-8 character at offset {cut.index('é'.encode())}"]
    assert any(e["type"] == "message" for e in accepted)



def test_a_refusal_is_the_text_whether_content_is_null_or_empty(tmp_path: Path) -> None:
    """The API answers a refusal with content null and its words in ``refusal``; a logger that
    writes every field writes that null as "", and the refusal was dropped (an empty message)."""
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(json.dumps({"id": f"c{n}", "messages": [
        {"role": "user", "content": "help me pick a lock"},
        {"role": "assistant", "content": content, "refusal": "I can't help with that."}]}) for n, content in
        enumerate([None, ""])) + "\n")
    accepted, rejected = split(path)
    assert rejected == []
    assert [e["fields"]["text"] for e in accepted if e["type"] == "message" and e["role"] == "assistant"] == [
        "I can't help with that.", "I can't help with that."]


def test_a_record_of_another_json_type_is_named_in_json_s_words(tmp_path: Path) -> None:
    """A dead letter's reader wrote JSON: ``not NoneType``, ``not dict``, ``is a str`` named
    Python's types (the receivers said ``not null`` already)."""
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("\n".join([json.dumps(cc_line("u1", "user", "hello")), "[1]", "42", "null", '"s"', "true",
                                      json.dumps(cc_line("u2", "assistant", ["bare"]))]) + "\n")
    assert [r.reason for r in split(transcript, "claude-code")[1]] == [
        f"a transcript line must be a JSON object, not {kind}"
        for kind in ("an array", "a number", "null", "a string", "a boolean")] + [
        "message.content[0] is a string, not a content block"]
    chats = tmp_path / "chats.jsonl"
    chats.write_text("\n".join([json.dumps({"id": "c", "messages": [{"role": "user", "content": "hi"}, None]}),
                                 "null"]) + "\n")
    assert [r.reason for r in split(chats, "openai-chat")[1]] == [
        "messages[1] must be an object, not null",
        "a conversation must be a list of messages or an object, not null"]


def test_a_field_of_another_type_is_named_so_not_missing(tmp_path: Path) -> None:
    """`"text": 123` in a text block was `missing field 'message.content[0].text'`, a tool call's
    numeric id `missing field '...id'`: the field is there, of another type, and the reason now
    says which; a field left out or null is still missing, an empty one empty."""
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("\n".join(json.dumps(line) for line in [
        cc_line("u1", "user", [{"type": "text", "text": 123}]),
        {**cc_line("u2", "user", "x"), "message": "hello"},
        cc_line("u3", "user", 42),
        cc_line("u4", "assistant", [{"type": "tool_use", "id": 7, "name": "Bash", "input": {}}]),
        cc_line("u5", "assistant", [{"type": "tool_use", "id": "t1", "name": "", "input": {}}]),
        cc_line("u6", "user", [{"type": "text"}]),
    ]) + "\n")
    assert [r.reason for r in split(transcript, "claude-code")[1]] == [
        "field 'message.content[0].text' must be a string, not a number",
        "field 'message' must be an object with role and content, not a string",
        "field 'message.content' must be a string or a list of content blocks, not a number",
        "field 'message.content[0].id' of a tool_use block must be a non-empty string, not a number",
        "field 'message.content[0].name' of a tool_use block is empty",
        "missing field 'message.content[0].text'"]
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps({"id": "c", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": 5, "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": "f"}]},
        {"role": "tool", "tool_call_id": 5, "content": "x"}]}))
    assert [r.reason for r in split(chat)[1]] == [
        "field 'messages[1].tool_calls[0].id' must be a non-empty string, not a number",
        "field 'messages[1].tool_calls[1].function' must be an object, not a string",
        "field 'messages[2].tool_call_id' must be a non-empty string, not a number"]


def test_a_lone_surrogate_escape_is_read_as_the_replacement_character(tmp_path: Path) -> None:
    """Claude Code (Node) cuts strings by UTF-16 length and JSON.stringify writes what is left of a
    character past U+FFFF as a lone surrogate escape (claude-code issues "no low surrogate in
    string"). orjson refuses such a line, and it was rejected whole: a prompt or a whole tool
    output dead-lettered for half an emoji, an OpenAI file of one such conversation not even
    recognised. Each lone surrogate is read as U+FFFD; a pair stays its character; a line that is
    no JSON for other reasons, or has a key twice, is still rejected."""
    def lone(value: dict, text: str) -> bytes:
        return json.dumps(value).replace("PLACEHOLDER", text).encode()

    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join([
        lone(cc_line("u1", "user", "PLACEHOLDER"), "ship it \\ud83d and \\ud83d\\ude80"),
        lone(cc_line("u2", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "PLACEHOLDER"}]),
             "\\udc00 tail of the output"),
        lone(cc_line("u3", "user", "PLACEHOLDER"), "\\ud83d cut")[:-30],
        lone(cc_line("u4", "user", "hi"), "").replace(b'"hi"', b'"hi", "a\\ud800": 1, "a\\udc00": 2'),
    ]) + b"\n")
    accepted, rejected = split(path, "claude-code")
    texts = [e["fields"].get("text") or e["fields"].get("output") for e in accepted
             if e["type"] in ("message", "tool.result")]
    assert texts == ["ship it \ufffd and \U0001f680", "\ufffd tail of the output"]
    assert [r.reason for r in rejected] == [
        "invalid JSON (truncated or not JSON): unexpected end of data: line 1 column 158 (char 157)",
        "duplicate key 'a\ufffd' in a JSON object; each key may appear once"]

    chat = tmp_path / "chat.jsonl"
    chat.write_bytes(lone({"id": "c1", "messages": [{"role": "user", "content": "PLACEHOLDER"},
                                                     {"role": "assistant", "content": "ok"}]},
                          "lone \\udc00 low") + b"\n")
    accepted, rejected = split(chat)
    assert rejected == []
    assert [e["fields"]["text"] for e in accepted if e["type"] == "message"] == ["lone \ufffd low", "ok"]



def test_a_line_with_a_lone_surrogate_is_read_by_the_parser_of_every_line() -> None:
    """The lone surrogate's line was read by another parser than every other line's: a NaN, an
    Infinity or a 1e999 (no JSON, refused on any other line) were read as floats into the event,
    and a number past 64 bits as an int where orjson reads a float. Only the surrogate differs."""
    for value in (b"NaN", b"-Infinity", b"1e999"):
        line = b'{"a": "\\ud800", "b": ' + value + b"}"
        assert parse_json(line)[0] is None, line
        assert parse_json(line.replace(b"\\ud800", b"x"))[0] is None
    big = b'{"a": "\\ud800", "b": 123456789012345678901234567890}'
    assert parse_json(big) == (parse_json(big.replace(b"\\ud800", b"\\ufffd"))[0], None)
    assert parse_json(b'{"a": "\\\\ud800 \\ud83d\\ude80 \\udc00 \xed\xa0\x80"}') == ({"a": "\\ud800 \U0001f680 \ufffd \ufffd"}, None)

_COMPLETION = {
    "id": "chatcmpl-9", "object": "chat.completion", "created": 1730000000, "model": "gpt-4o",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}}],
}
_SENT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize("shape", ["completion", "request-response", "batch-input", "batch-output"])
def test_logged_api_exchanges_import_as_conversations(tmp_path: Path, shape: str) -> None:
    record = {
        "completion": _COMPLETION,
        "request-response": {"request": {"model": "gpt-4o", "messages": _SENT, "tools": []},
                             "response": _COMPLETION},
        "batch-input": {"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions",
                        "body": {"model": "gpt-4o", "messages": _SENT}},
        "batch-output": {"id": "batch_req_1", "custom_id": "req-1",
                         "response": {"status_code": 200, "body": _COMPLETION}},
    }[shape]
    path = write_lines(tmp_path / "calls.jsonl", [record])
    assert detect_format(path) == "openai-chat"
    accepted, rejected = split(path)
    assert rejected == []
    types = Counter(e["type"] for e in accepted)
    assert types["session.started"] == 1
    sent = shape in ("request-response", "batch-input")
    answered = shape != "batch-input"
    assert types["message"] == 2 * sent
    assert types["tool.call"] == answered
    started = accepted[0]
    expected_id = {"completion": "chatcmpl-9", "request-response": "chatcmpl-9",
                   "batch-input": "req-1", "batch-output": "chatcmpl-9"}[shape]
    assert started["sessionId"] == expected_id
    assert started["fields"]["model"] == "gpt-4o"
    if answered:
        call = next(e for e in accepted if e["type"] == "tool.call")
        assert call["fields"]["input"] == {"city": "Paris"}
        assert call["time"] == f"2024-10-27T03:33:{20 + 2 * sent}.000Z"


def test_the_steps_of_a_logged_tool_calling_run_are_one_session(tmp_path: Path) -> None:
    """Each model call of an agent loop resends the history; the run imports as one session,
    each message once, exactly as the final conversation alone would."""
    call = _COMPLETION["choices"][0]["message"]
    answer = {"role": "assistant", "content": "21 °C and sunny in Paris."}
    step1 = {"request": {"model": "gpt-4o", "messages": _SENT}, "response": _COMPLETION}
    # The client resends the assistant message as its SDK serialised it: nulls dropped.
    resent = {"role": "assistant", "tool_calls": call["tool_calls"]}
    history = [*_SENT, resent, {"role": "tool", "tool_call_id": "call_1", "content": "21C sunny"}]
    step2 = {"request": {"model": "gpt-4o", "messages": history},
             "response": {**_COMPLETION, "id": "chatcmpl-10", "choices": [{"message": answer}]}}
    other = {"messages": [{"role": "user", "content": "unrelated"}, {"role": "assistant", "content": "ok"}]}
    run = write_lines(tmp_path / "run.jsonl", [step1, step2, other])
    accepted, rejected = split(run)
    assert rejected == []
    by_session = Counter(e["sessionId"] for e in accepted)
    assert len(by_session) == 2 and by_session["chatcmpl-9"] > 0
    steps = [e for e in accepted if e["sessionId"] == "chatcmpl-9"]
    assert [e["type"] for e in steps] == [
        "session.started", "message", "turn.started", "message", "tool.call", "tool.result",
        "message", "turn.ended", "session.ended"]
    assert len({e["eventId"] for e in steps}) == len(steps)
    assert [e["time"] for e in steps] == sorted(e["time"] for e in steps)
    result = next(e for e in steps if e["type"] == "tool.result")
    assert result["fields"]["toolName"] == "get_weather"

    final = write_lines(tmp_path / "final.jsonl", [{"id": "chatcmpl-9", "created": 1730000000,
                                                    "model": "gpt-4o", "messages": [*history, answer]}])
    alone, _ = split(final)
    strip = lambda events: [{k: v for k, v in e.items() if k != "payload"} for e in events]  # noqa: E731
    assert strip(steps) == strip(alone)

    # A repeated record, and a conversation with its own other id, stay sessions of their own.
    twice = write_lines(tmp_path / "twice.jsonl", [other, other, {**other, "id": "c-2", "messages": [
        *other["messages"], {"role": "user", "content": "more"}]}])
    assert len({e["sessionId"] for e in split(twice)[0]}) == 3


# -- oversized records ---------------------------------------------------------------------

def _big_event(fields: dict, payload: object = None) -> dict:
    event = {"eventId": "big", "sessionId": "s", "type": "tool.result", "role": "tool",
             "time": "2026-01-01T00:00:00Z", "fields": fields}
    if payload is not None:
        event["payload"] = payload
    return validate_event(event)


_LINE = st.text(st.characters(blacklist_categories=("Cs",)), max_size=120)


@given(lines=st.lists(_LINE, min_size=1, max_size=400), limit=st.integers(2048, 40_000),
       payload=st.text(max_size=20_000))
@settings(max_examples=60, deadline=None)
def test_fit_event_fits_keeps_heads_and_discloses(lines: list[str], limit: int, payload: str) -> None:
    output = "\n".join(lines)
    event = _big_event({"output": output, "toolName": "Bash", "status": "ok"}, {"raw": payload})
    fitted, cut = fit_event(event, limit)
    size = len(canonical_bytes(event))
    if size <= limit:
        assert (fitted, cut) == (event, 0)
        return
    assert len(canonical_bytes(fitted)) <= limit
    assert cut == size - len(canonical_bytes(fitted)) > 0
    assert fitted["fields"]["_truncated"] == {"originalBytes": size, "limitBytes": limit}
    assert fit_event(event, limit) == (fitted, cut)  # deterministic
    assert validate_event(fitted) == fitted
    kept = fitted["fields"]["output"]
    if kept != output:
        head = kept.removesuffix(CUT_NOTE)
        assert kept.endswith(CUT_NOTE) and output.startswith(head)
        # Cut at a line break whenever the window holds one: never inside a line.
        if "\n" in output[max(len(head) - 8192, 0):len(head) + 1]:
            assert head == "" or output[len(head)] == "\n"
    # What is never indexed goes first: the fields are cut only when the payload was not enough.
    if kept != output:
        assert len(fitted["payload"]["raw"]) <= 256 or fitted["payload"]["raw"].endswith(CUT_NOTE)


def test_fit_event_never_splits_a_secret_line_and_refuses_what_it_cannot_cut() -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    output = "".join(f"step {n}: pushing with {secret}\n" for n in range(50_000))
    fitted, _ = fit_event(_big_event({"output": output}), 100_000)
    head = fitted["fields"]["output"].removesuffix(CUT_NOTE)
    assert all(line.endswith(secret) for line in head.splitlines())
    many_small = _big_event({"items": ["x" * 100] * 20_000})
    with pytest.raises(SchemaError, match="cannot make it fit"):
        fit_event(many_small, 100_000)


def test_an_oversized_claude_code_record_is_cut_to_fit_and_counted(tmp_path: Path) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR" * 400_000}}
    log = "".join(f"INFO request {n} served in {n % 97} ms\n" for n in range(120_000))
    path = write_lines(tmp_path / "s.jsonl", [
        cc_line("u1", "user", [{"type": "text", "text": "why is the service slow?"}, image]),
        cc_line("a1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Bash",
                                      "input": {"command": "cat service.log"}}], parent="u1"),
        cc_line("u2", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": log}], parent="a1"),
    ])
    results = list(iter_records(path, max_event_bytes=256 * 1024))
    assert all(isinstance(r, Accepted) for r in results)
    sizes = {r.event["type"]: len(canonical_bytes(r.event)) for r in results if isinstance(r, Accepted)}
    assert max(sizes.values()) <= 256 * 1024
    (result,) = [r for r in results if isinstance(r, Accepted) and r.event["type"] == "tool.result"]
    assert result.cut > 0 and result.event["fields"]["_truncated"]["limitBytes"] == 256 * 1024
    assert result.event["fields"]["output"].startswith("INFO request 0 served in 0 ms\n")
    # The pasted screenshot never made the user's message big: images are rendered as [image].
    assert sizes["message"] < 64 * 1024
    # One event that cannot be cut becomes a reject with its reason, not a crash.
    flat = write_lines(tmp_path / "flat.jsonl", [
        {"eventId": "e1", "sessionId": "s", "type": "message", "role": "user", "time": "2026-01-01T00:00:00Z",
         "fields": {"text": "hi", "tags": ["t" * 50] * 20_000}},
    ])
    (rejected,) = iter_records(flat, "asp", max_event_bytes=256 * 1024)
    assert isinstance(rejected, Rejected) and "cannot make it fit" in rejected.reason
    assert rejected.record == "flat.jsonl:1" and rejected.raw


def _agent_first_transcript(directory: Path) -> Path:
    """A transcript that opens with the agent (a resumed or headless session): no human turn."""
    return write_lines(directory / "agent-first.jsonl", [
        cc_line("a0", "assistant", [{"type": "text", "text": "Resuming: the build was red."}]),
        cc_line("a1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Bash",
                                      "input": {"command": "make"}}], parent="a0"),
        cc_line("u1", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}], parent="a1"),
    ])


@pytest.mark.parametrize("source", ["claude", "openai-array", "openai-jsonl", "agent-first"])
def test_an_imported_file_leaves_no_unit_open(source: str, tmp_path: Path) -> None:
    """Every chunk unit of an imported file is closed by the file's own events, so its last
    turn reaches the `indexed` view at once instead of waiting for G of later log time (an
    open unit holds its log's watermark below it)."""
    path = {"claude": CLAUDE, "openai-array": OPENAI_ARRAY, "openai-jsonl": OPENAI_JSONL}.get(source)
    events, _ = split(path or _agent_first_transcript(tmp_path))
    assert events  # the fixtures also hold bad lines, rejected on purpose
    if source == "agent-first":
        assert all(e["turnId"] for e in events if e["type"] in ("message", "tool.call", "tool.result"))
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")
    states: dict[str, dict] = {}
    for seq, event in enumerate(events, start=1):
        state = states.setdefault(event["sessionId"], chunker.new_state(event["sessionId"]))
        chunker.on_event(state, event["logId"], seq, event)
    assert {sid: chunker.open_min_seq(state) for sid, state in states.items()} == dict.fromkeys(states)


def test_a_transcript_opening_with_many_progress_lines_is_detected(tmp_path: Path) -> None:
    hooks = [{"type": "progress", "data": {"type": "hook_progress", "hookEvent": "SessionStart"},
              "sessionId": "s-1", "timestamp": "2025-10-14T08:59:59.000Z", "uuid": f"p{n}",
              "parentUuid": None} for n in range(30)]
    path = write_lines(tmp_path / "hooks.jsonl", [*hooks, cc_line("u1", "user", "hello")])
    assert detect_format(path) == "claude-code"
    events, rejected = split(path)
    assert not rejected and [e["type"] for e in events].count("x.claude-code.progress") == 30


def test_responses_api_runs_import_as_conversations(tmp_path: Path) -> None:
    """Runs logged from the Responses API: request/response pairs whose steps resend the items
    (one session), a bare response object, and a plain list of items."""
    user = {"role": "user", "content": [{"type": "input_text", "text": "What's the weather in Oslo?"}]}
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Use the tool."}]}
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "get_weather",
            "arguments": '{"city": "Oslo"}', "status": "completed"}
    output = {"type": "function_call_output", "call_id": "call_9", "output": '{"temp": -3}'}
    answer = {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
              "content": [{"type": "output_text", "text": "It is -3°C in Oslo.", "annotations": []}]}
    steps = [
        {"request": {"model": "gpt-4.1", "instructions": "You are a weather bot.", "input": [user]},
         "response": {"id": "resp_1", "object": "response", "created_at": 1764000000, "model": "gpt-4.1",
                      "output": [reasoning, call]}},
        {"request": {"model": "gpt-4.1", "instructions": "You are a weather bot.",
                     "input": [user, reasoning, call, output]},
         "response": {"id": "resp_2", "object": "response", "created_at": 1764000003, "model": "gpt-4.1",
                      "output": [answer]}},
    ]
    path = write_lines(tmp_path / "responses.jsonl", steps)
    assert detect_format(path) == "openai-chat"
    events, rejected = split(path)
    assert not rejected and {e["sessionId"] for e in events} == {"resp_1"}
    shape = [(e["type"], e.get("role"), e["visibility"]) for e in events]
    assert shape == [
        ("session.started", None, "visible"), ("message", "system", "visible"),
        ("turn.started", "user", "visible"), ("message", "user", "visible"),
        ("message", "assistant", "hidden"), ("tool.call", "assistant", "visible"),
        ("tool.result", "tool", "visible"), ("message", "assistant", "visible"),
        ("turn.ended", None, "visible"), ("session.ended", None, "visible"),
    ]
    by_type = {e["type"]: e for e in events}
    assert by_type["tool.call"]["fields"] == {"toolName": "get_weather", "toolCallId": "call_9", "input": {"city": "Oslo"}}
    assert by_type["tool.result"]["fields"]["output"] == '{"temp": -3}'
    assert by_type["tool.result"]["parentEventId"] == by_type["tool.call"]["eventId"]
    assert events[4]["fields"] == {"text": "Use the tool.", "kind": "thinking", "model": "gpt-4.1"}
    assert events[0]["time"] == "2025-11-24T16:00:00.000Z"

    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"id": "resp_3", "object": "response", "created_at": 1764000100, "model": "gpt-4.1",
                                "output": [call, {"type": "mcp_list_tools", "id": "mcpl_1"}, answer]}))
    events, rejected = split(bare)
    assert [e["type"] for e in events] == ["session.started", "tool.call", "message", "session.ended"]
    assert [(r.record, r.reason) for r in rejected] == [
        ("bare.json/messages[1]", "Responses API item type 'mcp_list_tools' is not imported")]

    items = tmp_path / "items.json"
    items.write_text(json.dumps([user, call, output, answer]))
    events, rejected = split(items)
    assert not rejected
    assert [e["type"] for e in events if e["type"] not in ("turn.started", "turn.ended")] == [
        "session.started", "message", "tool.call", "tool.result", "message", "session.ended"]


def test_responses_api_built_in_tools_are_calls_and_results(tmp_path: Path) -> None:
    """The Responses API's built-in tools (the Agents SDK's WebSearchTool, FileSearchTool,
    CodeInterpreterTool, HostedMCPTool, ComputerTool, LocalShellTool, ShellTool, ApplyPatchTool)
    leave items of their own in a run's output and input list. Each was dead-lettered as an
    item type not imported, losing the query, the files found and the code run."""
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "find the rebalance notes"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "faust rebalance", "sources": [{"type": "url", "url": "https://example.org/f"}]}},
        {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["rebalance"],
         "results": [{"file_id": "file-1", "filename": "notes.md", "score": 0.9, "text": "Rebalance happens on join."}]},
        {"type": "code_interpreter_call", "id": "ci_1", "status": "completed", "code": "print(2 + 2)",
         "container_id": "cntr_1", "outputs": [{"type": "logs", "logs": "4"}]},
        {"type": "mcp_call", "id": "mcp_1", "server_label": "gh", "name": "create_issue",
         "arguments": '{"title": "flaky rebalance test"}', "output": None, "error": "permission denied"},
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "iVBORw0KGgo="},
        {"type": "computer_call", "id": "cu_1", "call_id": "call_c", "action": {"type": "click", "x": 1, "y": 2},
         "pending_safety_checks": [], "status": "completed"},
        {"type": "computer_call_output", "call_id": "call_c",
         "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"}},
        {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_l",
         "action": {"type": "exec", "command": ["ls", "-la"], "env": {}}, "status": "completed"},
        {"type": "local_shell_call_output", "id": "call_l", "output": "total 0"},
        {"type": "shell_call", "call_id": "call_s", "action": {"commands": ["git status"]}, "status": "completed"},
        {"type": "shell_call_output", "call_id": "call_s",
         "output": [{"stdout": "nothing to commit", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
        {"type": "apply_patch_call", "call_id": "call_p", "status": "completed",
         "operation": {"type": "update_file", "path": "a.py", "diff": "@@ -1 +1 @@\n-a\n+b"}},
        {"type": "apply_patch_call_output", "call_id": "call_p", "status": "completed", "output": "patched a.py"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "All done."}]},
    ]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(items))
    events, rejected = split(path)
    assert rejected == []
    calls = {e["fields"]["toolCallId"]: e for e in events if e["type"] == "tool.call"}
    assert [(c["fields"]["toolName"], c["fields"]["input"]) for c in calls.values()] == [
        ("web_search", {"type": "search", "query": "faust rebalance"}), ("file_search", {"queries": ["rebalance"]}),
        ("code_interpreter", {"code": "print(2 + 2)"}), ("create_issue", {"title": "flaky rebalance test"}),
        ("image_generation", {}), ("computer", {"type": "click", "x": 1, "y": 2}),
        ("local_shell", {"type": "exec", "command": ["ls", "-la"], "env": {}}), ("shell", {"commands": ["git status"]}),
        ("apply_patch", {"type": "update_file", "path": "a.py", "diff": "@@ -1 +1 @@\n-a\n+b"})]
    results = [e for e in events if e["type"] == "tool.result"]
    assert [(r["fields"]["toolName"], r["fields"]["status"], r["fields"]["output"]) for r in results] == [
        ("web_search", "ok", "https://example.org/f"), ("file_search", "ok", "notes.md\nRebalance happens on join."),
        ("code_interpreter", "ok", "4"), ("create_issue", "error", "permission denied"),
        ("image_generation", "ok", "[image]"), ("computer", "ok", "[computer_screenshot]"),
        ("local_shell", "ok", "total 0"), ("shell", "ok", "nothing to commit"), ("apply_patch", "ok", "patched a.py")]
    for result in results:
        assert result["parentEventId"] == calls[result["fields"]["toolCallId"]]["eventId"]
    # One turn, which the answer ends.
    assert [e["type"] for e in events].count("turn.started") == 1
    assert [e["type"] for e in events][-3:] == ["message", "turn.ended", "session.ended"]


def _linked_survey_episode(folder: Path) -> dict[str, object]:
    """The one episode of ``folder``'s import, checked to be linked to its "Survey modules"
    Task call (no record rejected)."""
    events, rejected = split(folder)
    assert not rejected
    call = next(e for e in events if e["type"] == "tool.call")
    (episode,) = [e for e in events if e["type"] == "episode.started"]
    assert episode["parentEventId"] == call["eventId"]
    assert episode["fields"] == {"toolCallId": "toolu_agent", "title": "Survey modules", "agentId": "ab12cd"}
    return episode


@pytest.mark.parametrize("named_in", ["toolUseResult", "result text"])
def test_a_subagent_file_is_linked_to_the_call_in_its_sessions_file(tmp_path: Path, named_in: str) -> None:
    """Claude Code keeps a subagent's transcript in SESSION/subagents/agent-ID.jsonl; the main
    file's Agent result names the agentId, and a directory import links the episode to the call."""
    session = tmp_path / "s-1.jsonl"
    result_text = "Found 3 modules." + ("\nagentId: ab12cd" if named_in == "result text" else "")
    extra = {"toolUseResult": {"status": "completed", "agentId": "ab12cd"}} if named_in == "toolUseResult" else {}
    write_lines(session, [
        cc_line("u1", "user", "survey the code"),
        cc_line("a1", "assistant", [{"type": "tool_use", "id": "toolu_agent", "name": "Agent",
                                      "input": {"description": "Survey modules", "prompt": "list modules"}}],
                parent="u1", time="2025-10-14T09:00:01.000Z"),
        cc_line("u2", "user", [{"type": "tool_result", "tool_use_id": "toolu_agent", "content": result_text}],
                parent="a1", time="2025-10-14T09:00:09.000Z", **extra),
    ])
    (tmp_path / "s-1" / "subagents").mkdir(parents=True)
    write_lines(tmp_path / "s-1" / "subagents" / "agent-ab12cd.jsonl", [
        cc_line("x1", "user", "list modules", isSidechain=True, agentId="ab12cd", time="2025-10-14T09:00:02.000Z"),
        cc_line("x2", "assistant", [{"type": "text", "text": "web, api, db"}], parent="x1",
                isSidechain=True, agentId="ab12cd", time="2025-10-14T09:00:05.000Z"),
    ])
    _linked_survey_episode(tmp_path)
    # Imported alone, the subagent file has no call to point at (and says nothing it cannot know).
    alone, _ = split(tmp_path / "s-1" / "subagents" / "agent-ab12cd.jsonl")
    assert next(e for e in alone if e["type"] == "episode.started")["fields"] == {"agentId": "ab12cd"}


def test_an_injected_system_reminder_is_hidden_and_starts_no_turn(tmp_path: Path) -> None:
    reminder = "<system-reminder>\nThe todo list is empty. Do not mention this to the user.\n</system-reminder>"
    path = write_lines(tmp_path / "r.jsonl", [
        cc_line("u1", "user", "rename the module"),
        cc_line("a1", "assistant", [{"type": "text", "text": "Renamed."}], parent="u1"),
        cc_line("u2", "user", reminder, parent="a1"),
        cc_line("u3", "user", [{"type": "text", "text": reminder}, {"type": "text", "text": "now run the tests"}],
                parent="u2"),
    ])
    events, rejected = split(path)
    assert not rejected
    assert [e["type"] for e in events].count("turn.started") == 2
    hidden = [e for e in events if e["type"] == "message" and e["visibility"] == "hidden"]
    assert len(hidden) == 2 and all(e["fields"]["kind"] == "meta" for e in hidden)
    asked = next(e for e in events if e.get("fields", {}).get("text") == "now run the tests")
    assert asked["visibility"] == "visible" and asked["turnId"] != hidden[0]["turnId"]


def test_a_queued_message_written_as_text_parts_keeps_its_text(tmp_path: Path) -> None:
    queued = {"type": "queue-operation", "operation": "enqueue", "timestamp": "2025-10-14T09:00:03.000Z",
              "sessionId": "s-1", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "World"}]}
    events, rejected = split(write_lines(tmp_path / "q.jsonl", [cc_line("u1", "user", "hi"), queued]))
    assert not rejected
    (event,) = [e for e in events if e["type"] == "x.claude-code.queue-operation"]
    assert event["fields"] == {"operation": "enqueue", "text": "Hello\nWorld"}


@pytest.mark.parametrize(("path", "fmt"), [
    (ASP, "asp"), (CLAUDE, "claude-code"), (OPENAI_ARRAY, "openai-chat"), (OPENAI_JSONL, "openai-chat"),
    *[(file, "codex") for file in sorted((FIXTURES / "codex").glob("*.jsonl"))],
    *[(file, "gemini-cli") for file in sorted((FIXTURES / "gemini_cli").glob("*.jsonl"))],
    (Path(__file__).resolve().parents[2] / "examples" / "sessions" / "claude-code-session.jsonl", "claude-code"),
])
def test_an_importer_given_a_files_bytes_reads_them_as_the_file(path: Path, fmt: str, tmp_path: Path) -> None:
    """``usl ingest`` hands the importers the bytes it read (issue #16: no copy on disk): the
    same records, byte for byte, as importing the file; the path only names them."""
    elsewhere = tmp_path / path.name  # never written: an importer that opened it would fail
    from_file = list(importers.iter_file(path, fmt, label=path.name))
    from_bytes = list(importers.iter_file(elsewhere, fmt, label=path.name, data=path.read_bytes()))
    assert from_bytes == from_file and len(from_file) > 3
    assert [canonical_bytes(r.event) for r in from_bytes if isinstance(r, Accepted)] == [
        canonical_bytes(r.event) for r in from_file if isinstance(r, Accepted)]


def test_an_importer_reads_a_files_bytes_given_in_parts_as_one(tmp_path: Path) -> None:
    """The parts of ``data`` are read as if joined (``usl ingest`` adds its end-of-input line
    as a second part instead of copying the whole file to append it)."""
    lines = ASP.read_bytes().splitlines(keepends=True)
    whole = list(importers.iter_file(ASP, "asp", label="x"))
    parts = (b"".join(lines[:3]), b"".join(lines[3:-1]), lines[-1])
    assert list(importers.iter_file(tmp_path / "gone.jsonl", "asp", label="x", data=parts)) == whole


CODEX_REAL = FIXTURES / "codex" / "rollout-2026-06-05T04-58-20-019e9625-802f-7e91-840a-cfe88d14117a.jsonl"
CLAUDE_STOP = FIXTURES.parent / "turn_ends" / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl"


@pytest.mark.parametrize(("path", "marker"), [
    (CLAUDE_STOP, "x.claude-code.system"), (CODEX_REAL, "x.codex.event_msg"),
], ids=["claude-code stop_hook_summary", "codex task_complete"])
def test_a_turn_ends_where_the_agent_recorded_its_end(path: Path, marker: str) -> None:
    """Real transcripts say when the agent finished its turn (Claude Code's stop_hook_summary or
    turn_duration line, Codex's task_complete): turn.ended follows that record at once, so a
    followed file's last turn needs no idle wait, and nothing after it reopens a unit."""
    results = [r for r in iter_records(path) if isinstance(r, Accepted)]
    ends = [i for i, r in enumerate(results) if r.event["type"] == "turn.ended"]
    assert ends and all(results[i - 1].event["type"] == marker for i in ends)
    assert all(results[i - 1].record == results[i].record for i in ends)  # the same line
    last = results[ends[-1] - 1].event
    assert last.get("fields", {}).get("subtype", last.get("fields", {}).get("kind")) in (
        "stop_hook_summary", "turn_duration", "task_complete")


def test_claude_code_turn_end_records_and_a_stop_hook_that_keeps_the_agent_going(tmp_path: Path) -> None:
    def system(uuid: str, subtype: str, **extra: object) -> dict:
        return {"parentUuid": None, "isSidechain": False, "sessionId": "s-1", "type": "system",
                "subtype": subtype, "uuid": uuid, "timestamp": "2025-10-14T09:00:05.000Z", **extra}

    path = write_lines(tmp_path / "stops.jsonl", [
        cc_line("u1", "user", "fix the build"),
        cc_line("a1", "assistant", [{"type": "text", "text": "Looking."}], parent="u1"),
        system("h1", "stop_hook_summary", preventedContinuation=True),  # a Stop hook said go on
        cc_line("a2", "assistant", [{"type": "text", "text": "Fixed."}], parent="h1"),
        system("h2", "stop_hook_summary", preventedContinuation=False),
        system("d1", "turn_duration", durationMs=5000),
        cc_line("n1", "user", "<task-notification>done</task-notification>", parent="d1"),
        cc_line("a3", "assistant", [{"type": "text", "text": "The task finished."}], parent="n1"),
        system("d2", "turn_duration", durationMs=100),
        {**system("d3", "turn_duration"), "isSidechain": True},
    ])
    events, _ = split(path)
    kinds = [(e["type"], e.get("fields", {}).get("subtype")) for e in events]
    ended = [i for i, kind in enumerate(kinds) if kind[0] == "turn.ended"]
    assert [kinds[i - 1] for i in ended] == [("x.claude-code.system", "stop_hook_summary"),
                                             ("x.claude-code.system", "turn_duration")]
    # The hook that kept the agent going left "Fixed." in the first turn; the notification the
    # agent answered after the turn's end is a turn of its own.
    by_text = {e["fields"].get("text"): e.get("turnId") for e in events if e["type"] == "message"}
    assert by_text["Looking."] == by_text["Fixed."] != by_text["The task finished."]
    assert events[-1]["type"] == "x.claude-code.system" and events[-1].get("turnId") is None


def test_openai_an_answer_without_tool_calls_ends_the_turn(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Where is my order?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "find", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
        {"role": "assistant", "content": "It shipped yesterday."},
        {"role": "assistant", "content": "Anything else?"},
    ]
    path = write_lines(tmp_path / "run.jsonl", messages)
    events, rejected = split(path, "openai-chat")
    assert not rejected
    types = [e["type"] for e in events]
    answer = next(i for i, e in enumerate(events) if e["fields"].get("text") == "It shipped yesterday.")
    assert types[answer + 1] == "turn.ended"
    follow_up = next(e for e in events if e["fields"].get("text") == "Anything else?")
    assert follow_up["turnId"] and follow_up["turnId"] != events[answer]["turnId"]
    assert types.count("turn.started") == types.count("turn.ended") == 2
    system = next(e for e in events if e["fields"].get("text") == "You are a support agent.")
    assert system.get("turnId") is None


def test_an_asp_file_ending_in_loose_events_is_closed_by_an_empty_turn(tmp_path: Path) -> None:
    """An ASP file whose last messages name no turn (hand-written, or exported from elsewhere)
    left a session-level unit open at its end: never searchable under `indexed` on a quiet log.
    The events stay as they are; an empty turn after the run closes its unit. Loose events
    before a turn are closed by that turn and get nothing."""
    def event(n: int, kind: str, **extra: object) -> dict:
        return {"eventId": f"e{n}", "sessionId": "s-asp", "type": kind, "time": f"2026-11-01T09:00:{n:02d}Z",
                "fields": {"text": f"line {n} of the deploy notes"} if kind == "message" else {}, **extra}

    lines = [event(0, "session.started"), event(1, "message", role="user"), event(2, "message", role="assistant"),
             event(3, "turn.started", turnId="t1"), event(4, "message", role="user", turnId="t1"),
             event(5, "turn.ended", turnId="t1"), event(6, "message", role="user"), event(7, "x.note")]
    path = write_lines(tmp_path / "loose.jsonl", lines)
    events, rejected = split(path, "asp")
    assert not rejected
    assert [e["eventId"] for e in events[:8]] == [f"e{n}" for n in range(8)]
    assert all(e == validate_event({**line, "logId": "default"}) for e, line in zip(events, lines, strict=False))
    assert [e["type"] for e in events[8:]] == ["turn.started", "turn.ended"]
    assert events[8]["turnId"] == events[9]["turnId"] and events[9]["time"] == lines[6]["time"]
    assert split(path, "asp")[0] == events  # deterministic
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="policy-test")

    def open_unit(stream: list[dict]) -> int | None:
        state = chunker.new_state("s-asp")
        for seq, item in enumerate(stream, start=1):
            chunker.on_event(state, item["logId"], seq, item)
        return chunker.open_min_seq(state)

    assert open_unit(events) is None and open_unit(events[:8]) == 7
    # A file whose loose events come before its turns, or that ends in a turn, gets nothing.
    assert split(write_lines(tmp_path / "closed.jsonl", lines[:6]), "asp")[0] == events[:6]


def test_an_asp_line_rejected_with_its_access_list_takes_its_sessions_later_lines(tmp_path: Path) -> None:
    """The session's first line sets its list but is invalid (dead-lettered by usl ingest): the
    lines after it without acl would create the session readable by the default tenant's
    ``*``. They are rejected naming it, until a line states an acl; other sessions go on."""
    def line(event_id: str, session: str, **extra: object) -> str:
        return json.dumps({"eventId": event_id, "sessionId": session, "type": "message", "role": "user",
                           "time": "2026-01-01T00:00:01Z", "fields": {"text": event_id}, **extra})

    private = {"tenant": "acme", "read": ["user:alice"]}
    path = tmp_path / "hq.jsonl"
    path.write_text("\n".join([
        line("hq-1", "hq-s", type="x.meta", visibility="hidden", acl=private, time="yesterday"),
        line("hq-2", "hq-s"), line("other-1", "other-s"), line("hq-3", "hq-s"),
        line("hq-4", "hq-s", acl=private), line("hq-5", "hq-s"),
    ]) + "\n")
    outcome = {item.event["eventId"] if isinstance(item, Accepted) else item.record: item
               for item in iter_records(path, "asp")}
    assert {key for key, item in outcome.items() if isinstance(item, Rejected)} == {
        "hq.jsonl:1", "hq.jsonl:2", "hq.jsonl:4"}
    assert all("event hq.jsonl:1 of the same session 'hq-s'" in outcome[record].reason  # type: ignore[union-attr]
               for record in ("hq.jsonl:2", "hq.jsonl:4"))
    assert {"other-1", "hq-4", "hq-5"} <= outcome.keys()


def test_a_running_subagents_file_is_linked_by_its_progress_lines(tmp_path: Path) -> None:
    """QA: while a subagent runs, the main file holds the Agent call and Claude Code's
    agent_progress lines (parentToolUseID, data.agentId), not yet the call's result; the
    subagent's own file is already there. A follower imports exactly that state, and the
    episode's eventId then stands: it must be linked as the finished directory's import links
    it, from the progress lines."""
    session = tmp_path / "s-1.jsonl"
    progress = {"type": "progress", "sessionId": "s-1", "uuid": "p1", "parentUuid": "a1", "isSidechain": False,
                "timestamp": "2025-10-14T09:00:02.500Z", "toolUseID": "agent_msg_1",
                "parentToolUseID": "toolu_agent",
                "data": {"type": "agent_progress", "agentId": "ab12cd", "prompt": "list modules",
                         "normalizedMessages": []}}
    running = [
        cc_line("u1", "user", "survey the code"),
        cc_line("a1", "assistant", [{"type": "tool_use", "id": "toolu_agent", "name": "Agent",
                                      "input": {"description": "Survey modules", "prompt": "list modules"}}],
                parent="u1", time="2025-10-14T09:00:01.000Z"),
        progress,
    ]
    write_lines(session, running)
    (tmp_path / "s-1" / "subagents").mkdir(parents=True)
    write_lines(tmp_path / "s-1" / "subagents" / "agent-ab12cd.jsonl", [
        cc_line("x1", "user", "list modules", isSidechain=True, agentId="ab12cd", time="2025-10-14T09:00:02.000Z"),
    ])
    episode = _linked_survey_episode(tmp_path)

    # The finished directory (the result naming the agent) gives the same episode event.
    write_lines(session, [*running, cc_line(
        "u2", "user", [{"type": "tool_result", "tool_use_id": "toolu_agent", "content": "Found 3 modules."}],
        parent="a1", time="2025-10-14T09:00:09.000Z", toolUseResult={"status": "completed", "agentId": "ab12cd"})])
    finished, rejected = split(tmp_path)
    assert not rejected
    assert next(e for e in finished if e["type"] == "episode.started") == episode


TAU_TRAJ = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "I want to cancel reservation EHGLP3."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_reservation_details", "arguments": "{\"reservation_id\": \"EHGLP3\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_reservation_details",
     "content": "{\"reservation_id\": \"EHGLP3\", \"cabin\": \"economy\"}"},
    {"role": "assistant", "content": "The reservation EHGLP3 is in economy; economy fares cannot be refunded."},
]


def test_a_benchmark_dump_of_runs_under_traj_is_openai_chat(tmp_path: Path) -> None:
    """Found by a new user: tau-bench's published trajectories (`historical_trajectories/*.json`:
    runs with `task_id`, `reward`, `info` and the chat messages under `traj`) could not be told
    apart ("format cannot be told") and needed a converter. Two trials of one task are two
    sessions; a `trajectory` of another shape (no roles) is no conversation."""
    runs = [{"task_id": 0, "trial": trial, "reward": 1.0, "info": {"task": {"user_id": "mia"}}, "traj": TAU_TRAJ}
            for trial in (0, 1)]
    path = tmp_path / "gpt-4o-airline.json"
    path.write_text(json.dumps(runs, indent=2))
    assert detect_format(path) == "openai-chat"
    events, rejected = split(path)
    assert not rejected
    assert len({e["sessionId"] for e in events}) == 2
    calls = [e for e in events if e["type"] == "tool.call"]
    assert [c["fields"]["toolName"] for c in calls] == ["get_reservation_details"] * 2
    assert any("cannot be refunded" in str(e["fields"].get("text")) for e in events if e["type"] == "message")
    other = tmp_path / "swe.json"
    other.write_text(json.dumps([{"trajectory": [{"action": "ls", "observation": "a.py"}]}]))
    with pytest.raises(ImportFormatError, match="cannot tell the format"):
        detect_format(other)
