"""OpenAI chat: logged API exchanges whose response an SDK serialised or streamed.

API recorders (llama-stack's integration-test recordings, for one) log each call as
``{"request": {"body": {...}}, "response": {"body": ...}}`` where the body is the SDK object
serialised with its type (``{"__type__": "openai.types.chat...ChatCompletion", "__data__":
{...}}``) or, for a streamed call, the list of ``chat.completion.chunk`` objects. The answer must
be imported (or dead-lettered with its reason), never dropped without a word.
"""

from __future__ import annotations

import json
from pathlib import Path

from streams.importers import Accepted, Rejected, iter_records

REQUEST = {
    "method": "POST", "url": "http://0.0.0.0:11434/v1/v1/chat/completions", "headers": {},
    "body": {"model": "llama3.2:3b-instruct-fp16", "stream": False, "messages": [
        {"role": "user", "content": "What's the weather in Tokyo? Use the get_weather function to get the weather."}]},
}
CALL = {"id": "call_99dd5wna", "function": {"arguments": "{\"city\":\"Tokyo\"}", "name": "get_weather"},
        "type": "function", "index": 0}


def _typed(kind: str, data: dict) -> dict:
    return {"__type__": f"openai.types.chat.{kind}", "__data__": data}


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return _typed("chat_completion_chunk.ChatCompletionChunk", {
        "id": "chatcmpl-457", "object": "chat.completion.chunk", "created": 1754090032,
        "model": "llama3.2:3b-instruct-fp16",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})


def _split(path: Path) -> tuple[list[dict], list[Rejected]]:
    results = list(iter_records(path))
    return ([r.event for r in results if isinstance(r, Accepted)],
            [r for r in results if isinstance(r, Rejected)])


def test_an_sdk_serialised_response_is_read(tmp_path: Path) -> None:
    completion = _typed("chat_completion.ChatCompletion", {
        "id": "chatcmpl-651", "object": "chat.completion", "created": 1755294941, "model": "llama3.2:3b-instruct-fp16",
        "choices": [{"finish_reason": "tool_calls", "index": 0, "message": {
            "content": "", "refusal": None, "role": "assistant", "function_call": None, "tool_calls": [CALL]}}]})
    path = tmp_path / "35db283fef1d.json"
    path.write_text(json.dumps({"request": REQUEST, "response": {"body": completion, "is_streaming": False}}))
    events, rejected = _split(path)
    assert rejected == []
    calls = [e for e in events if e["type"] == "tool.call"]
    assert [c["fields"]["input"] for c in calls] == [{"city": "Tokyo"}]
    assert {e["sessionId"] for e in events} == {"chatcmpl-651"}


def test_a_streamed_response_is_assembled(tmp_path: Path) -> None:
    chunks = [
        _chunk({"role": "assistant", "content": "Let me "}),
        _chunk({"content": "check Tokyo."}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_rolv1ozt", "type": "function",
                                "function": {"name": "get_weather", "arguments": "{\"ci"}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "ty\":\"Tokyo\"}"}}]}),
        _chunk({"content": None}, finish="tool_calls"),
    ]
    path = tmp_path / "stream.jsonl"
    lines = [{"request": REQUEST, "response": {"body": chunks, "is_streaming": True}},
             # the plain OpenAI shape, as a proxy logs it: no SDK type wrapper
             {"request": REQUEST["body"], "response": [{**c["__data__"], "id": "chatcmpl-458"} for c in chunks]}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    events, rejected = _split(path)
    assert rejected == []
    assert {e["sessionId"] for e in events} == {"chatcmpl-457", "chatcmpl-458"}
    for session in {e["sessionId"] for e in events}:
        mine = [e for e in events if e["sessionId"] == session]
        assert [e["fields"]["text"] for e in mine if e["type"] == "message" and e["role"] == "assistant"] == [
            "Let me check Tokyo."]
        assert [(e["fields"]["toolCallId"], e["fields"]["input"]) for e in mine if e["type"] == "tool.call"] == [
            ("call_rolv1ozt", {"city": "Tokyo"})]


def test_a_streamed_responses_reasoning_is_assembled(tmp_path: Path) -> None:
    """vLLM and DeepSeek stream the thinking as `reasoning_content` deltas before the answer."""
    chunks = [_chunk({"role": "assistant", "reasoning_content": "Tokyo needs "}),
              _chunk({"reasoning_content": "a lookup."}), _chunk({"content": "It is sunny."}, finish="stop")]
    path = tmp_path / "stream.json"
    path.write_text(json.dumps({"request": REQUEST, "response": {"body": chunks, "is_streaming": True}}))
    events, rejected = _split(path)
    assert rejected == []
    assert [(e["fields"]["text"], e.get("visibility")) for e in events if e.get("role") == "assistant"] == [
        ("Tokyo needs a lookup.", "hidden"), ("It is sunny.", "visible")]


def test_a_response_holding_no_answer_is_dead_lettered(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    lines = [
        {"request": REQUEST, "response": {"body": {"__type__": "ollama._types.ChatResponse",
                                                   "__data__": {"model": "m", "message": {"role": "assistant"}}}}},
        {"request": REQUEST["body"], "response": {"error": {"message": "Rate limit reached for gpt-4o"}}},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    events, rejected = _split(path)
    # The requests' messages are imported; each unreadable answer has a dead letter.
    assert [e["fields"]["text"] for e in events if e["type"] == "message"] == [
        REQUEST["body"]["messages"][0]["content"]] * 2
    assert [r.record for r in rejected] == ["calls.jsonl:1/response", "calls.jsonl:2/response"]
    assert "holds no chat.completion 'choices'" in rejected[0].reason
    assert rejected[1].reason.startswith("field 'response' is an API error") and "Rate limit" in rejected[1].reason
