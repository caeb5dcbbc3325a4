"""Progress markers: per (chunks partition, log), the highest seq M such that every event of
the log with seq <= M routed to this partition is inside an emitted chunk (or renders nothing).

Open units hold M back; regular and flush ticks move ``lastSeq`` forward for partitions that see
no events of a log.
"""

from __future__ import annotations

from typing import Any

__all__ = ["marker_seq", "new_progress", "note_seq", "note_session"]


def new_progress() -> dict[str, Any]:
    return {"lastSeq": 0, "open": {}, "lastTickSeq": 0, "lastMarker": 0}


def note_seq(progress: dict[str, Any], seq: int) -> None:
    progress["lastSeq"] = max(int(progress["lastSeq"]), seq)


def note_session(progress: dict[str, Any], session_id: str, open_min_seq: int | None) -> None:
    if open_min_seq is None:
        progress["open"].pop(session_id, None)
    else:
        progress["open"][session_id] = open_min_seq


def marker_seq(progress: dict[str, Any]) -> int:
    """M for this partition and log; never below the previous marker (markers only advance)."""
    held = [int(s) - 1 for s in progress["open"].values()]
    candidate = min([int(progress["lastSeq"]), *held])
    return max(candidate, int(progress.get("lastMarker", 0)))
