"""OpenAI chat: a tool message that says its call failed is a ``tool.result`` with ``status: error``.

Chat completions carry no error flag, and every tool result was ``status: ok``: tau-bench's
airline runs (the real corpus) hold 17 results like ``Error: not enough seats on flight
HAT229``, which its environment writes as ``f"Error: {e}"`` for a tool call that raised (as
LangGraph's ToolNode and most hand-written agent loops do), and a search for failed tool calls
found none of them. A flag a framework adds (LangChain's ``status``, Anthropic's and MCP's
``is_error`` / ``isError``) says it too; what any other tool output says is the tool's own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streams.importers import Accepted, Rejected, iter_records


def _status(tmp_path: Path, **tool_message: object) -> str:
    conversation = {"id": "run-1", "model": "gpt-4o", "messages": [
        {"role": "user", "content": "book the 10:00 flight"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "book_reservation", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "book_reservation", **tool_message},
    ]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(conversation))
    results = list(iter_records(path))
    assert [r.reason for r in results if isinstance(r, Rejected)] == []
    (result,) = [r.event for r in results if isinstance(r, Accepted) and r.event["type"] == "tool.result"]
    return str(result["fields"]["status"])


@pytest.mark.parametrize("message", [
    {"content": "Error: not enough seats on flight HAT229"},
    {"content": "Error: ValueError('date must be ISO')\n Please fix your mistakes."},
    {"content": '{"error": "reservation not found"}'},
    {"content": "the reservation service timed out", "status": "error"},
    {"content": [{"type": "text", "text": "timed out"}], "is_error": True},
    {"content": "timed out", "isError": True},
])
def test_a_tool_message_that_says_its_call_failed_is_an_error(tmp_path: Path, message: dict) -> None:
    assert _status(tmp_path, **message) == "error"


@pytest.mark.parametrize("message", [
    {"content": '{"reservation_id": "HATHAT", "status": "confirmed"}'},
    {"content": "Transfer successful"},
    {"content": "2024-05-13 ERROR: disk full\nError: retrying"},
    {"content": "error: lowercase is a log line, not the loop's words"},
    {"content": '{"error": null, "result": "ok"}'},
    {"content": "Errors: none", "status": "success"},
])
def test_any_other_tool_output_is_ok(tmp_path: Path, message: dict) -> None:
    assert _status(tmp_path, **message) == "ok"
