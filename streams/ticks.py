"""Log-clock ticks: deterministic markers of log position and log time.

The redaction stage broadcasts a *regular* tick to every partition of the derived topics when
an event's seq crosses a multiple of K. It carries the seq and the max event time of the log over
seqs <= seq, so idle-turn cuts depend only on the log, K and G — never on partition count or
timing. A *flush* tick tells partitions that everything up to a seq has been routed (it advances
progress markers, never chunk boundaries).

Event time is written by producers, so it is bounded before it counts (SPEC §10, invariant 11).
An event dated more than the max skew after its *append time* (the L1 record's timestamp, set by
the producer that appended it and stored with it in L1, so a replay sees the same) claims to
have happened after it was recorded: its time is an error, and its *clock time* is the log's
clock so far (at most append time + max skew; with no clock yet, exactly that). Every other
event's clock time is its own time. One event dated 2099 therefore never moves the log clock,
and its turn is cut like any idle turn once the log's time moves G past it -- in a live log and
in an import of last year's transcripts alike. A far-past time needs no bound: the clock keeps
its maximum, and an old turn is cut at the next tick.
"""

from __future__ import annotations

from typing import Any

from streams.asp import event_time as _event_time

__all__ = ["DEFAULT_MAX_SKEW_SECONDS", "advance_clock", "clock_time", "event_clock_time",
           "flush_tick", "new_clock"]

DEFAULT_MAX_SKEW_SECONDS = 300.0
"""Default of USL_MAX_CLOCK_SKEW_SECONDS."""


def clock_time(event_time: float, append_time: float | None, max_skew_seconds: float,
               log_clock: float | None = None) -> float:
    """The time an event counts for on the log clock and in idle cuts: its own, unless it lies
    more than ``max_skew_seconds`` past the time its record was appended; then the log's clock
    so far (``log_clock``, the max clock time of the log's earlier events), never later than
    append time + max skew. No append time known: its own."""
    if append_time is None or append_time <= 0:
        return event_time
    bound = append_time + max_skew_seconds
    if event_time <= bound:
        return event_time
    return bound if log_clock is None else min(bound, log_clock)


def event_clock_time(event: dict[str, Any], append_time: float | None, max_skew_seconds: float,
                     log_clock: float | None = None) -> float | None:
    """:func:`clock_time` of a validated event; None when its time cannot be read."""
    try:
        when = _event_time(event)
    except (KeyError, ValueError):
        return None
    return clock_time(when, append_time, max_skew_seconds, log_clock)


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
