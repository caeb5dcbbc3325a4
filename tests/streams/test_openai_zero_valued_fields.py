"""OpenAI chat: an OpenAI-compatible server that writes every field of its response type.

Snowflake Cortex's chat completions (recorded in pydantic-ai's test cassettes) answer a tool
call with the real ``tool_calls`` beside a zero-valued legacy ``"function_call": {"name": "",
"arguments": ""}`` (and ``audio``, ``custom`` placeholders). Every such answer was
dead-lettered as ``missing field 'messages[1].function_call.function.name'``, a path that does
not exist (the legacy call has no ``function``).
"""

from __future__ import annotations

import json
from pathlib import Path

from streams.importers import Accepted, Rejected, iter_records

ANSWER = {
    "annotations": None, "audio": {"data": "", "expires_at": 0, "id": "", "transcript": ""},
    "content": "", "function_call": {"arguments": "", "name": ""}, "refusal": "", "role": "assistant",
    "tool_calls": [{"custom": {"input": "", "name": ""},
                    "function": {"arguments": "{\"city\":\"Mexico City\"}", "name": "get_weather"},
                    "id": "toolu_bdrk_015BgHUFs4HS1TVWWwNRNxip", "type": "function"}],
}


def test_a_zero_valued_legacy_call_is_no_call(tmp_path: Path) -> None:
    path = tmp_path / "cortex.jsonl"
    path.write_text(json.dumps({
        "request": {"model": "claude-sonnet-4-6", "messages": [
            {"role": "user", "content": "What is the weather in Mexico City?"}]},
        "response": {"id": "cortex-1", "created": 1767225600, "model": "claude-sonnet-4-6",
                     "choices": [{"index": 0, "finish_reason": "tool_calls", "message": ANSWER}]},
    }) + "\n")
    results = list(iter_records(path))
    assert [r.reason for r in results if isinstance(r, Rejected)] == []
    calls = [r.event for r in results if isinstance(r, Accepted) and r.event["type"] == "tool.call"]
    assert [c["fields"]["toolName"] for c in calls] == ["get_weather"]


def test_a_legacy_call_without_a_name_names_its_own_field(tmp_path: Path) -> None:
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps({"id": "legacy", "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "function_call": {"name": "", "arguments": "{\"city\": \"Oslo\"}"}},
    ]}))
    reasons = [r.reason for r in iter_records(path) if isinstance(r, Rejected)]
    assert reasons == ["field 'messages[1].function_call.name' is empty"]
