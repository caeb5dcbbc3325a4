"""What the follow tests share: a made-up Claude Code session's lines, the eventIds a one-shot
import appends, and a cursor that counts what it is fed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.follow import Follower, PositionStore
from streams.importers import Accepted, iter_records
from streams.testing import Clock, Crash, MemoryL1

__all__ = ["LIMIT", "SESSION", "TRANSCRIPTS", "Pair", "but_amendments", "counted", "follow_as_it_grows", "follower", "one_shot_ids",
           "transcript_line", "whole_import_ids", "write_as_written"]

SESSION = "7d1c9a52-5b8e-4f0b-9c3a-1e2f3a4b5c6d"
_ROOT = Path(__file__).resolve().parents[2]
# Real transcripts of the repository's examples and fixtures, followed as they grow.
TRANSCRIPTS = [
    _ROOT / "examples" / "sessions" / "claude-code-session.jsonl",
    _ROOT / "tests" / "fixtures" / "importers" / "claude_code" / "3f6c2a8e-1b7d-4c55-9e0a-5d2f8b1c7e94.jsonl",
    _ROOT / "tests" / "fixtures" / "importers" / "codex" / "rollout-2025-12-05T11-00-00-rejection-codex-001.jsonl",
]
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


def whole_import_ids(path: Path) -> set[str]:
    """The eventIds a one-shot import of ``path`` appends, at the default event size limit."""
    return {i.event["eventId"] for i in iter_records(path) if isinstance(i, Accepted)}


def follower(path: Path, l1: MemoryL1, home: Path, clock: Clock, **options: Any) -> Follower:
    return Follower([path], appender=l1, store=PositionStore(home), idle_seconds=5.0, clock=clock, **options)


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


def follow_as_it_grows(live: Path, lines: list[bytes], home: Path, *, first: int = 2) -> MemoryL1:
    """What a follower of ``live``'s directory appends while ``live`` is written ``first`` lines
    at once and then a line at a time, the follower polling after each, until it idles out."""
    live.write_bytes(b"".join(lines[:first]))
    l1, clock = MemoryL1(), Clock()
    tail = Follower([live.parent], appender=l1, store=PositionStore(home), idle_seconds=5.0, clock=clock,
                    max_event_bytes=LIMIT)
    tail.poll()
    for line in lines[first:]:
        with live.open("ab") as handle:
            handle.write(line)
        tail.poll()
    clock.now += 10
    tail.poll()
    return l1


def write_as_written(live: Path, lines: list[bytes], tail: Follower, clock: Clock) -> None:
    """Append ``lines`` to ``live`` one a second, ``tail`` polling after each, then let it idle
    out: a transcript as its agent writes it."""
    for line in lines:
        with live.open("ab") as handle:
            handle.write(line)
        tail.poll()
        clock.now += 1
    clock.now += 10
    tail.poll()


class Pair:
    """The follower under test (resumed imports) and one importing the whole file on every
    change, in step. ``dead_in_order=False`` compares their dead letters as sets: a whole import
    of an OpenAI-chat file says a bad line inside a message run before the run's messages."""

    def __init__(self, root: Path, home: Path, clock: Clock, l1s: tuple[MemoryL1, MemoryL1] | None = None, *,
                 dead_in_order: bool = True) -> None:
        self.root, self.home, self.clock = root, home, clock
        self.l1s = l1s or (MemoryL1(), MemoryL1())
        self.dead_in_order = dead_in_order
        self.followers = [self._follower(i) for i in range(2)]

    def _follower(self, i: int) -> Follower:
        return Follower([self.root], appender=self.l1s[i], store=PositionStore(self.home / str(i)),
                        idle_seconds=5.0, clock=self.clock, resume=i == 0, max_event_bytes=LIMIT)

    def restart(self) -> None:
        self.followers = [self._follower(i) for i in range(2)]

    def poll(self, crash_in: int | None) -> bool:
        """Both poll (both killed at the same append, when ``crash_in``); whether they crashed."""
        crashed = []
        for i, l1 in enumerate(self.l1s):
            l1.crash_in = crash_in
            try:
                self.followers[i].poll()
                crashed.append(False)
            except Crash:
                self.followers[i] = self._follower(i)
                crashed.append(True)
            l1.crash_in = None
        assert crashed[0] == crashed[1]
        self.check()
        return crashed[0]

    def check(self) -> None:
        resumed, whole = self.l1s
        assert resumed.log == whole.log  # the same events in the same order, field for field
        dead = [[(d.record, d.reason, d.raw, d.log_id) for d in l1.dead] for l1 in self.l1s]
        if not self.dead_in_order:
            dead = [sorted(letters) for letters in dead]
        assert dead[0] == dead[1]
        records = [PositionStore(self.home / str(i)).records(self.l1s[i]) for i in range(2)]
        assert records[0] == records[1]
