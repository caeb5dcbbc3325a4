"""What the follow tests share: a made-up Claude Code session's lines, the eventIds a one-shot
import appends, and a cursor that counts what it is fed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.importers import Accepted, iter_records
from streams.testing import MemoryL1

__all__ = ["LIMIT", "SESSION", "but_amendments", "counted", "one_shot_ids", "transcript_line"]

SESSION = "7d1c9a52-5b8e-4f0b-9c3a-1e2f3a4b5c6d"
# Small, so that events are cut to fit, or rejected when they cannot be (the same limit for the
# one-shot import the followers are compared with).
LIMIT = 16384


def transcript_line(kind: str, uuid: str, minute: int, content: Any, *, parent: str | None = None,
                    model: str = "claude-sonnet-4-5-20250929", **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message.update({"id": f"msg_{uuid}", "model": model,
                        "usage": {"input_tokens": 10, "output_tokens": minute}})
    return {"parentUuid": parent, "isSidechain": False, "sessionId": SESSION, "type": kind, "message": message,
            "uuid": uuid, "timestamp": f"2026-03-01T10:{minute:02d}:00.000Z", "cwd": "/src/app", **extra}


def one_shot_ids(root: Path) -> set[str]:
    return {i.event["eventId"] for i in iter_records(root, max_event_bytes=LIMIT) if isinstance(i, Accepted)}


def but_amendments(l1: MemoryL1, root: Path) -> set[str]:
    """The eventIds ``l1`` holds but the session.started a follower sent again because its
    facts came later (a title, a model): what a one-shot import of ``root`` appends."""
    one_shot = one_shot_ids(root)
    return {e["eventId"] for e in l1.log if e["eventId"] in one_shot or e["type"] != "session.started"}


def counted(made: Any, sizes: list[int]) -> Any:
    """``made`` (a FileCursor) with the size of every chunk fed to it appended to ``sizes``."""
    assert made is not None
    cursor = made  # mypy narrows no name a nested class reads

    class Counted:
        lines = property(lambda _self: cursor.lines)
        finish = cursor.finish

        def feed(self, chunk: bytes) -> Any:
            sizes.append(len(chunk))
            return cursor.feed(chunk)

    return Counted()
