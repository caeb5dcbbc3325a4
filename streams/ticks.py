"""Log-clock ticks: deterministic markers of log position and log time.

The redaction stage broadcasts a *regular* tick to every partition of the derived topics when
an event's seq crosses a multiple of K. It carries the seq and the max event time of the log over
seqs <= seq, so idle-turn cuts depend only on the log, K and G — never on partition count or
timing. A *flush* tick tells partitions that everything up to a seq has been routed (it advances
progress markers, never chunk boundaries).
"""

from __future__ import annotations

from typing import Any

__all__ = ["advance_clock", "flush_tick", "new_clock"]


def new_clock() -> dict[str, Any]:
    """Per-log clock state: last applied seq and max event time so far."""
    return {"lastSeq": 0, "maxTime": None}


def advance_clock(clock: dict[str, Any], log_id: str, seq: int, event_time: float | None,
                  every: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Apply the event at ``seq``; return the new clock and the regular tick it triggers, if any.

    A record at or below the clock's last seq is a replay and changes nothing.
    """
    last = int(clock["lastSeq"])
    if seq <= last:
        return clock, None
    max_time = clock["maxTime"]
    if event_time is not None and (max_time is None or event_time > max_time):
        max_time = event_time
    new = {"lastSeq": seq, "maxTime": max_time}
    tick = None
    if seq // every > last // every:
        tick = {"kind": "tick", "logId": log_id, "seq": seq, "logTime": max_time, "flush": False}
    return new, tick


def flush_tick(clock: dict[str, Any], log_id: str) -> dict[str, Any]:
    return {"kind": "tick", "logId": log_id, "seq": int(clock["lastSeq"]),
            "logTime": clock["maxTime"], "flush": True}
