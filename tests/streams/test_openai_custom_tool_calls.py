"""OpenAI chat: custom tool calls (``"type": "custom"``, free-form input) in Chat Completions.

GPT-5's custom tools answer in Chat Completions with ``{"id", "type": "custom", "custom": {"name",
"input"}}`` instead of a ``function``; such a call was dead-lettered (``missing field
'...function'``), so its result came without a tool name or a link to its call.
"""

from __future__ import annotations

import json
from pathlib import Path

from streams.importers import Accepted, Rejected, iter_records


def test_a_custom_tool_call_is_imported_and_linked(tmp_path: Path) -> None:
    path = tmp_path / "custom.json"
    path.write_text(json.dumps({"id": "chatcmpl-custom", "messages": [
        {"role": "user", "content": "Run the snippet that prints the first primes"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_c1", "type": "custom", "custom": {"name": "code_exec", "input": "print([2, 3, 5, 7])"}}]},
        {"role": "tool", "tool_call_id": "call_c1", "content": "[2, 3, 5, 7]"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_c2", "type": "custom", "custom": {}}]},
    ]}))
    results = list(iter_records(path))
    events = [r.event for r in results if isinstance(r, Accepted)]
    call = next(e for e in events if e["type"] == "tool.call")
    result = next(e for e in events if e["type"] == "tool.result")
    assert call["fields"] == {"toolName": "code_exec", "toolCallId": "call_c1", "input": {"input": "print([2, 3, 5, 7])"}}
    assert result["parentEventId"] == call["eventId"] and result["fields"]["toolName"] == "code_exec"
    assert [r.reason for r in results if isinstance(r, Rejected)] == [
        "missing field 'messages[3].tool_calls[0].custom.name'"]
