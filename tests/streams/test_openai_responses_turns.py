"""OpenAI Responses API: a message item the same response's function calls follow.

A model often writes a preamble before its calls; the Responses API returns it as a ``message``
output item followed by ``function_call`` items. That message is not an answer that waits for
the user: the human turn must go on with the calls, not end at the preamble and have the calls
open a turn of their own (which no user message started).
"""

from __future__ import annotations

import json
from pathlib import Path

from streams.importers import Accepted, iter_records


def _events(path: Path) -> list[dict]:
    return [r.event for r in iter_records(path) if isinstance(r, Accepted)]


def _response(rid: str, created: int, output: list[dict]) -> dict:
    return {"id": rid, "object": "response", "created_at": created, "model": "gpt-5", "output": output}


QUESTION = {"role": "user", "content": [{"type": "input_text", "text": "What is the weather like in Bogota today?"}]}
PREAMBLE = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "Let me check the forecast.", "annotations": []}]}
THINKING = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Which tool?"}]}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
        "arguments": "{\"location\": \"Bogota\"}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "14 C, drizzle"}
ANSWER = {"type": "message", "id": "msg_2", "role": "assistant",
          "content": [{"type": "output_text", "text": "It is 14 C with drizzle.", "annotations": []}]}


def test_a_preamble_before_calls_does_not_end_the_turn(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    steps = [
        {"request": {"model": "gpt-5", "input": [QUESTION]},
         "response": _response("resp_1", 1741476542, [PREAMBLE, THINKING, CALL])},
        {"request": {"model": "gpt-5", "input": [QUESTION, PREAMBLE, THINKING, CALL, OUTPUT]},
         "response": _response("resp_2", 1741476550, [ANSWER])},
    ]
    path.write_text("".join(json.dumps(step) + "\n" for step in steps))
    events = _events(path)
    assert [e["type"] for e in events].count("turn.started") == 1
    turn = next(e["turnId"] for e in events if e["type"] == "turn.started")
    body = [e for e in events if e["type"] in ("message", "tool.call", "tool.result")]
    assert all(e.get("turnId") == turn for e in body)
    ends = [i for i, e in enumerate(events) if e["type"] == "turn.ended"]
    assert len(ends) == 1 and events[ends[0] - 1]["fields"].get("text") == "It is 14 C with drizzle."


def test_an_answer_without_calls_still_ends_the_turn(tmp_path: Path) -> None:
    path = tmp_path / "answer.json"
    path.write_text(json.dumps({"request": {"model": "gpt-5", "input": [QUESTION]},
                                "response": _response("resp_3", 1741476542, [THINKING, ANSWER])}))
    events = _events(path)
    kinds = [e["type"] for e in events]
    assert kinds[-3:] == ["message", "turn.ended", "session.ended"]
