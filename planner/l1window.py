"""A per-log memory of the most recent L1 events the planner has read.

Every ``latest`` query reads the log above the indexes, and every query reads the events above
the structured index to bring access lists up to date. Consecutive queries ask for nearly the
same ranges, and L1 never changes below its committed seq, so the planner keeps one contiguous
window of events per log (at most ``max_events``, the newest) and only asks Kafka for what the
window does not hold yet.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from streams.l1 import L1Reader

__all__ = ["L1Window"]


@dataclass
class _Range:
    """Events of seqs ``first..last`` (every one of them; seqs may have gaps)."""

    first: int
    last: int
    seqs: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


class L1Window:
    """Recent L1 events per log, read through on demand (thread-safe)."""

    def __init__(self, *, max_events: int = 50_000) -> None:
        self.max_events = max_events
        self._ranges: dict[str, _Range] = {}
        self._lock = threading.Lock()

    def read(self, reader: L1Reader, log_id: str, from_seq: int, to_seq: int,
             *, limit: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``(seq, event)`` of ``from_seq..to_seq`` in log order; with ``limit``, only the first
        ``limit`` of them.

        ``to_seq`` must not exceed a committed seq the caller read: the window treats every
        seq up to it as final.
        """
        if to_seq < from_seq or (limit is not None and limit <= 0):
            return []
        with self._lock:
            window = self._ranges.get(log_id)
            if window is not None and from_seq < window.first:
                if window.first - from_seq > self.max_events:
                    # Far older than the window: read it directly, leave the window as it is.
                    return _take(reader.read(log_id, from_seq, to_seq, clocks=True), limit)
                older = list(reader.read(log_id, from_seq, window.first - 1, clocks=True))
                window.seqs[:0] = [seq for seq, _ in older]
                window.events[:0] = [event for _, event in older]
                window.first = from_seq
            if window is None or from_seq > window.last + 1:
                window = self._ranges[log_id] = _Range(from_seq, from_seq - 1)
            low = bisect_left(window.seqs, from_seq)
            high = bisect_right(window.seqs, to_seq)
            found = list(zip(window.seqs[low:high], window.events[low:high], strict=True))
            if to_seq > window.last and (limit is None or len(found) < limit):
                need = None if limit is None else limit - len(found)
                complete = True
                for seq, event in reader.read(log_id, window.last + 1, to_seq, clocks=True):
                    window.seqs.append(seq)
                    window.events.append(event)
                    found.append((seq, event))
                    if need is not None:
                        need -= 1
                        if need == 0:
                            complete = False
                            break
                window.last = to_seq if complete or not window.seqs else window.seqs[-1]
                self._trim(window)
            return _take(found, limit)

    def _trim(self, window: _Range) -> None:
        extra = len(window.seqs) - self.max_events
        if extra > 0:
            window.first = window.seqs[extra]
            del window.seqs[:extra]
            del window.events[:extra]


def _take(items: Iterable[tuple[int, dict[str, Any]]], limit: int | None) -> list[tuple[int, dict[str, Any]]]:
    taken: list[tuple[int, dict[str, Any]]] = []
    for item in items:
        if limit is not None and len(taken) >= limit:
            break
        taken.append(item)
    return taken
