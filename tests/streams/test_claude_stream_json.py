"""The stream-json output of a headless Claude Code run (`claude -p --output-format stream-json
--verbose`, what CI jobs and the Agent SDK keep of a run) imports as a Claude Code transcript.

Found by a new user's import of such a run: detected as claude-code, then every line was
dead-lettered as `missing field 'timestamp'` (the stream times nothing and names its session
`session_id`), so the run appended nothing. The lines below have the shape Claude Code 2.x
writes (init, assistant lines split per content block, tool results, a subagent's lines under
`parent_tool_use_id`, rate-limit notices, the final `result`)."""

from __future__ import annotations

import json
from pathlib import Path

from streams.importers import Accepted, Rejected, detect_format, iter_records

SESSION = "81898c55-fde9-4d44-b1f5-fbd77cd4fef6"
EPOCH = "1970-01-01T00:00:00.000Z"


def _assistant(uuid: str, message_id: str, block: dict, *, parent: str | None = None) -> dict:
    return {"type": "assistant", "message": {
        "model": "claude-sonnet-4-6", "id": message_id, "type": "message", "role": "assistant",
        "content": [block], "stop_reason": None, "usage": {"input_tokens": 3, "output_tokens": 9}},
        "parent_tool_use_id": parent, "session_id": SESSION, "uuid": uuid}


def _user(uuid: str, content: object, *, parent: str | None = None) -> dict:
    return {"type": "user", "message": {"role": "user", "content": content},
            "parent_tool_use_id": parent, "session_id": SESSION, "uuid": uuid}


RUN = [
    {"type": "system", "subtype": "init", "cwd": "/work/repo", "session_id": SESSION,
     "tools": ["Task", "Bash"], "model": "claude-sonnet-4-6", "permissionMode": "default",
     "claude_code_version": "2.1.195", "uuid": "e0000000-0000-4000-8000-000000000000"},
    _assistant("e0000000-0000-4000-8000-000000000001", "msg_1",
               {"type": "text", "text": "I will look for the flaky retry test first."}),
    _assistant("e0000000-0000-4000-8000-000000000002", "msg_1",
               {"type": "tool_use", "id": "toolu_task", "name": "Task",
                "input": {"description": "Find the flaky test", "prompt": "Search tests/ for retries"}}),
    _user("e0000000-0000-4000-8000-000000000003", "Search tests/ for retries", parent="toolu_task"),
    _assistant("e0000000-0000-4000-8000-000000000004", "msg_2",
               {"type": "tool_use", "id": "toolu_grep", "name": "Bash",
                "input": {"command": "grep -rn retry tests/"}}, parent="toolu_task"),
    _user("e0000000-0000-4000-8000-000000000005",
          [{"tool_use_id": "toolu_grep", "type": "tool_result",
            "content": "tests/test_net.py:12: retry_budget = 3"}], parent="toolu_task"),
    {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}, "session_id": SESSION,
     "uuid": "e0000000-0000-4000-8000-000000000006"},
    _user("e0000000-0000-4000-8000-000000000007",
          [{"tool_use_id": "toolu_task", "type": "tool_result",
            "content": [{"type": "text", "text": "The retry budget lives in tests/test_net.py"}]}]),
    _assistant("e0000000-0000-4000-8000-000000000008", "msg_3",
               {"type": "text", "text": "The retry budget in tests/test_net.py is the flaky part."}),
    {"type": "result", "subtype": "success", "is_error": False, "duration_ms": 1425, "num_turns": 3,
     "result": "The retry budget in tests/test_net.py is the flaky part.", "session_id": SESSION,
     "total_cost_usd": 0.04, "uuid": "e0000000-0000-4000-8000-000000000009"},
]


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _split(path: Path) -> tuple[list[dict], list[Rejected]]:
    results = list(iter_records(path))
    return ([r.event for r in results if isinstance(r, Accepted)],
            [r for r in results if isinstance(r, Rejected)])


def test_a_headless_run_imports_whole(tmp_path: Path) -> None:
    path = _write(tmp_path / "run.jsonl", RUN)
    assert detect_format(path) == "claude-code"
    events, rejected = _split(path)
    assert rejected == []
    assert {event["sessionId"] for event in events} == {SESSION}
    shown = {"message": "text", "tool.call": "toolName", "tool.result": "output"}
    visible = [(event["type"], event["fields"].get(shown.get(event["type"], "")))
               for event in events if event.get("visibility") != "hidden"]
    assert visible == [
        ("session.started", None),
        ("turn.started", None),
        ("message", "I will look for the flaky retry test first."),
        ("tool.call", "Task"),
        ("message", "Search tests/ for retries"),
        ("tool.call", "Bash"),
        ("tool.result", "tests/test_net.py:12: retry_budget = 3"),
        ("tool.result", "The retry budget lives in tests/test_net.py"),
        ("message", "The retry budget in tests/test_net.py is the flaky part."),
        ("turn.ended", None),
    ]
    started = events[0]
    assert started["fields"]["model"] == "claude-sonnet-4-6"
    assert started["fields"]["cwd"] == "/work/repo"  # from the run's init line
    # The stream times nothing: its events keep the file's order at the epoch, as an OpenAI
    # conversation without `created` does; none is invented from the wall clock.
    assert {event["time"] for event in events} == {EPOCH}


def test_a_subagents_prompt_starts_no_human_turn(tmp_path: Path) -> None:
    """Lines under `parent_tool_use_id` are the subagent's, inside the turn that called it."""
    events, _ = _split(_write(tmp_path / "run.jsonl", RUN))
    turns = {event["turnId"] for event in events if event.get("turnId")}
    assert len(turns) == 1
    assert sum(event["type"] == "turn.started" for event in events) == 1


def test_the_result_line_ends_the_turn(tmp_path: Path) -> None:
    """`result` is the run's last word: the turn ends with it, not only at the file's end, so a
    followed run's turn is chunked as soon as the run finishes."""
    events, _ = _split(_write(tmp_path / "run.jsonl", RUN))
    kinds = [event["type"] for event in events]
    assert kinds[-2:] == ["x.claude-code.result", "turn.ended"]


def test_lines_a_transcript_states_no_time_for_are_still_refused(tmp_path: Path) -> None:
    """A transcript line (it names `sessionId`) without its `timestamp` stays a dead letter."""
    line = {"type": "user", "message": {"role": "user", "content": "no time"}, "uuid": "u1", "sessionId": "s-1"}
    _, rejected = _split(_write(tmp_path / "s-1.jsonl", [line]))
    assert [reject.reason for reject in rejected] == ["missing field 'timestamp'"]


def test_a_run_without_uuids_is_detected_and_imported(tmp_path: Path) -> None:
    """Older Claude Code versions wrote stream lines without `uuid`."""
    lines = [{key: value for key, value in line.items() if key != "uuid"} for line in RUN]
    path = _write(tmp_path / "old-run.jsonl", lines)
    assert detect_format(path) == "claude-code"
    events, rejected = _split(path)
    assert rejected == []
    assert sum(event["type"] == "message" for event in events) == 3
