"""Deterministic synthetic ASP sessions for pipeline tests (validated events, realistic shape)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from streams.asp import validate_event

_WORDS = ("deploy refund migration pytest rounding kafka broker index tantivy vector faiss chunk "
          "session turn tool result error permission denied timeout retry cache schema parquet "
          "duckdb latency watermark generation manifest cursor planner snapshot redaction").split()
_TOOLS = ("Bash", "Read", "Edit", "Grep", "run_sql")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def session_events(session_id: str, *, turns: int = 3, seed: int = 0, log_id: str = "default",
                   start: datetime | None = None, acl: dict[str, Any] | None = None,
                   secret: str | None = None, long_output_words: int = 0) -> list[dict[str, Any]]:
    """A session: session.started, then per turn a user message, tool calls with results and an
    assistant answer, each turn closed by turn.ended. ``secret`` is planted in a tool output."""
    rng = random.Random(f"{session_id}:{seed}")
    clock = start or datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
    events: list[dict[str, Any]] = []
    n = 0

    def add(kind: str, *, role: str | None = None, turn: str | None = None, **fields: Any) -> None:
        nonlocal clock, n
        clock += timedelta(seconds=rng.randint(1, 20))
        n += 1
        event: dict[str, Any] = {
            "eventId": f"{session_id}-e{n}", "logId": log_id, "sessionId": session_id, "type": kind,
            "role": role, "time": clock.isoformat().replace("+00:00", "Z"), "turnId": turn, "fields": fields,
        }
        if acl is not None:
            event["acl"] = acl
        events.append(validate_event(event))

    add("session.started", title=f"session {session_id}", model="test-model")
    for t in range(turns):
        turn = f"{session_id}-t{t}"
        add("turn.started", turn=turn)
        add("message", role="user", turn=turn, text=f"please {_text(rng, 12)}")
        for c in range(rng.randint(1, 3)):
            call = f"{turn}-c{c}"
            tool = rng.choice(_TOOLS)
            add("tool.call", role="assistant", turn=turn, toolName=tool, toolCallId=call,
                input={"command": _text(rng, 6)})
            output = _text(rng, rng.randint(5, 40) + long_output_words)
            if secret is not None and t == 0 and c == 0:
                output = f"{output}\nexport API_TOKEN={secret}\n{_text(rng, 5)}"
            add("tool.result", role="tool", turn=turn, toolName=tool, toolCallId=call,
                status=rng.choice(("ok", "ok", "error")), output=output)
        add("message", role="assistant", turn=turn, text=_text(rng, rng.randint(10, 80)))
        add("turn.ended", turn=turn)
    return events


def interleave(*sessions: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """Merge sessions into one log order, keeping each session's own order."""
    rng = random.Random(seed)
    queues = [list(s) for s in sessions if s]
    merged: list[dict[str, Any]] = []
    while queues:
        queue = rng.choice(queues)
        merged.append(queue.pop(0))
        if not queue:
            queues.remove(queue)
    return merged
