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

A log that goes quiet would keep an open turn open for good: log time only moves with events.
So a worker that holds a log's clock and has seen no new record of it for
``USL_QUIET_LOG_SECONDS``, while the present is more than G past the log's clock, appends a
*clock record* to L1 (:func:`clock_record`: the log and the present, no event). Read back, it
moves the log clock to its time (bounded like an event's) and triggers a *quiet* tick, which
cuts every unit idle for more than G of the new log time, whether or not its session had an
event since the previous tick. The record is in the log, so a replay cuts at the same place;
at most one is written per quiet spell (the clock remembers the seq of the last one). Readers
that want events (``L1Reader.read`` without ``clocks``) never see it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from streams.asp import event_time as _event_time
from streams.asp import parse_time

__all__ = ["DEFAULT_MAX_SKEW_SECONDS", "FlushPacer", "advance_clock", "clock_record", "clock_record_time",
           "clock_time", "event_clock_time", "flush_tick", "new_clock", "quiet_clock_due"]

_CLOCK_MARK = "uslClock"
"""The member that makes an L1 record a clock record; an event never has it (the schema refuses
members it does not know), and a clock record has no eventId, so event readers skip it."""

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


def clock_record(log_id: str, when: float) -> dict[str, Any]:
    """The L1 record that moves ``log_id``'s clock to ``when`` (POSIX seconds)."""
    moment = datetime.fromtimestamp(when, UTC).replace(tzinfo=None)
    return {_CLOCK_MARK: 1, "logId": log_id, "time": moment.isoformat(timespec="microseconds") + "Z"}


def clock_record_time(record: Any) -> float | None:
    """The time of an L1 clock record (a parsed JSON value); None for anything else."""
    if not isinstance(record, Mapping) or record.get(_CLOCK_MARK) != 1 or not isinstance(record.get("logId"), str):
        return None
    try:
        return parse_time(record["time"]).timestamp()
    except (KeyError, ValueError):
        return None


def quiet_clock_due(clock: Mapping[str, Any] | None, *, now: float, quiet_for: float, quiet_seconds: float,
                    idle_gap_seconds: float) -> bool:
    """Whether a worker should append a clock record for a log whose ``clock`` it holds: no new
    record of the log for ``quiet_for`` >= ``quiet_seconds``, its last record is not already a
    clock record, and the present (``now``) is more than G past the log's clock (else the record
    could cut nothing)."""
    if not clock or clock.get("maxTime") is None or quiet_for < quiet_seconds:
        return False
    if clock.get("quietSeq") == clock["lastSeq"]:
        return False
    return bool(now - float(clock["maxTime"]) > idle_gap_seconds)


def new_clock() -> dict[str, Any]:
    """Per-log clock state: last applied seq and max event time so far."""
    return {"lastSeq": 0, "maxTime": None}


def advance_clock(clock: dict[str, Any], log_id: str, seq: int, event_time: float | None,
                  every: int, *, quiet: bool = False) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Apply the event at ``seq`` (``quiet``: the clock record at ``seq``); return the new clock
    and the tick it triggers, if any: a regular tick when ``seq`` passes a multiple of K, a quiet
    tick after every clock record.

    A record at or below the clock's last seq is a replay and changes nothing.
    """
    last = int(clock["lastSeq"])
    if seq <= last:
        return clock, None
    max_time = clock["maxTime"]
    if event_time is not None and (max_time is None or event_time > max_time):
        max_time = event_time
    new = {"lastSeq": seq, "maxTime": max_time}
    if quiet:
        new["quietSeq"] = seq
    tick = None
    if quiet or seq // every > last // every:
        tick = {"kind": "tick", "logId": log_id, "seq": seq, "logTime": max_time, "flush": False}
        if quiet:
            tick["quiet"] = True
    return new, tick


def flush_tick(clock: dict[str, Any], log_id: str) -> dict[str, Any]:
    return {"kind": "tick", "logId": log_id, "seq": int(clock["lastSeq"]),
            "logTime": clock["maxTime"], "flush": True}


class FlushPacer:
    """When a worker sends flush ticks besides its timer's: right after a redaction batch, if
    none went out for ``every`` seconds (``USL_FLUSH_TICK_SECONDS``).

    The seqs of a batch reach a progress marker of every chunks partition only with the next
    tick, and the timer's next run came up to ``every`` later: on a quiet log, a quarter of a
    second of a turn's lag to ``indexed`` was that wait. Paced so, the first batch after a
    quiet spell is released at once, and a busy log still gets at most one such flush per
    ``every`` besides the timer's (each is a tick on every partition, and a marker and a sink
    progress step for each).
    """

    def __init__(self, every: float) -> None:
        self.every = every
        self._last = float("-inf")

    def due(self, now: float) -> bool:
        """Whether a batch handled at ``now`` (monotonic) is flushed at once."""
        return now - self._last >= self.every

    def flushed(self, now: float, released: Mapping[str, int]) -> None:
        """A flush (the timer's or a batch's) ran at ``now`` and released ``released`` (log ->
        seq). Only one that sent ticks counts: the timer runs every ``every`` whether or not a
        log moved, and counting its idle runs held every batch back for the timer again."""
        if released:
            self._last = now
