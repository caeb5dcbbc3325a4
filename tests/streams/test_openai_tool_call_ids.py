"""OpenAI chat: a tool message naming its call in a ``tool_call_ids`` list.

SWE-agent's function-calling trajectories (``*.traj``: ``{"history": [...]}``) write each tool
result as ``{"role": "tool", "tool_call_ids": ["call_..."], "content": ...}``. Every such
message was dead-lettered (``missing field 'messages[3].tool_call_id'``), so a run's tool
outputs never reached the index: search found the calls but none of what they returned.
"""

from __future__ import annotations

import json
from pathlib import Path

from streams.importers import Accepted, Rejected, iter_records


def _history(*tool_messages: dict) -> dict:
    return {"trajectory": [{"action": "find_file x.py", "observation": "..."}], "history": [
        {"role": "system", "content": "SETTING: you work in a shell", "agent": "main", "message_type": "system_prompt"},
        {"role": "user", "content": "Fix the SyntaxError in missing_colon.py", "agent": "main"},
        {"role": "assistant", "content": "Let me find the file.", "thought": "Let me find the file.",
         "action": "find_file missing_colon.py", "agent": "main", "message_type": "action",
         "tool_calls": [{"function": {"arguments": "{\"file_name\":\"missing_colon.py\"}", "name": "find_file"},
                         "id": "call_PbWE", "type": "function"}]},
        *tool_messages,
    ]}


def test_a_one_id_tool_call_ids_list_answers_that_call(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_history({
        "role": "tool", "agent": "main", "message_type": "observation", "tool_call_ids": ["call_PbWE"],
        "content": "Found 1 matches for \"missing_colon.py\" in /repo:\r\n/repo/tests/missing_colon.py"})))
    results = list(iter_records(path))
    assert [r.reason for r in results if isinstance(r, Rejected)] == []
    events = [r.event for r in results if isinstance(r, Accepted)]
    call = next(e for e in events if e["type"] == "tool.call")
    result = next(e for e in events if e["type"] == "tool.result")
    assert result["fields"]["toolCallId"] == "call_PbWE" and result["fields"]["toolName"] == "find_file"
    assert result["parentEventId"] == call["eventId"]
    assert "/repo/tests/missing_colon.py" in result["fields"]["output"]


def test_a_tool_message_naming_several_calls_is_dead_lettered_with_why(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_history({"role": "tool", "tool_call_ids": ["call_PbWE", "call_other"],
                                         "content": "two answers in one"})))
    reasons = [r.reason for r in iter_records(path) if isinstance(r, Rejected)]
    assert reasons == ["field 'messages[3].tool_call_ids' names 2 calls; a tool message answers one"]


def test_tool_call_id_wins_over_tool_call_ids(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_history({"role": "tool", "tool_call_id": "call_PbWE", "tool_call_ids": ["call_x"],
                                         "content": "ok"})))
    result = next(r.event for r in iter_records(path) if isinstance(r, Accepted) and r.event["type"] == "tool.result")
    assert result["fields"]["toolCallId"] == "call_PbWE"
