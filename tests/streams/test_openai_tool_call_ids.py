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


def test_a_directory_of_traj_files_is_imported_and_followed_as_each_file_alone(tmp_path: Path) -> None:
    """SWE-agent writes its runs as ``*.traj``: a directory of them imported nothing (``no
    non-empty *.jsonl or *.json files``) and a follower never saw them, though each file named
    alone imported."""
    from deploy.cli.progress import input_files
    from streams.follow import Follower, PositionStore
    from streams.importers import FILE_SUFFIXES, detect_format
    from streams.testing import Clock, MemoryL1

    runs = tmp_path / "trajectories"
    (runs / "sub").mkdir(parents=True)
    (runs / "sub" / "run.traj").write_text(json.dumps(_history({
        "role": "tool", "tool_call_ids": ["call_PbWE"], "content": "Found /repo/tests/missing_colon.py"})))
    alone = [r.event["type"] for r in iter_records(runs / "sub" / "run.traj") if isinstance(r, Accepted)]
    assert "tool.result" in alone and ".traj" in FILE_SUFFIXES
    assert detect_format(runs) == "openai-chat"
    assert list(input_files(runs)) == ["sub/run.traj"]
    imported = [r.event for r in iter_records(runs) if isinstance(r, Accepted)]
    assert [e["type"] for e in imported] == alone  # the session is named after the label, sub/run.traj
    l1, clock = MemoryL1(), Clock()
    follower = Follower([runs], appender=l1, store=PositionStore(tmp_path / "home"), idle_seconds=5.0, clock=clock)
    follower.poll()
    clock.now += 10
    follower.poll()
    assert sorted(e["eventId"] for e in l1.log) == sorted(e["eventId"] for e in imported)
