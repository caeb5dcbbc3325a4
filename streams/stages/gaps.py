"""Finding records a consumer never delivered.

faust may skip records of a source partition around a rebalance (see
:mod:`streams.faust_compat`). Each stage remembers the offset of the last record it applied per
source partition; a record past the next offset means some were skipped. The stage then does not
apply it, the wiring holds the partition's commits and seeks back to the committed offset, and the
records arrive again.

A hole that is still there after :data:`MAX_ROUNDS` seeks is judged by the broker: the wiring reads
its offsets with a consumer of its own. Transaction markers (which L1's contract allows other
producers to write) take offsets and hold no record: a hole of those alone is real and accepted.
A hole whose records the broker does hold is not: faust dropped them again on every seek (a fetch
still being handed on after the seek moves its read offset past them, and it drops records below
it). Accepting it lost those records from every index, behind flush ticks that had claimed past
them; the wiring restarts the worker instead, which reads them from the committed offset, held
before the hole all along.

A hole at the end of a partition shows no record past it: faust also drops records it already
fetched without handing them to a stage (records below its read offset after a seek back, the
rest of a fetch when a rebalance begins), and when they were a partition's last ones nothing
arrived to reveal them until the log grew again. :class:`Tails` finds those: a partition whose
end offset, as the consumer last saw it, is past the stage's last applied record while neither
moved for :data:`TAIL_PATIENCE_SECONDS` is read again the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping

__all__ = ["MAX_ROUNDS", "TAIL_PATIENCE_SECONDS", "Gaps", "Tails"]

log = logging.getLogger("usl.worker")

MAX_ROUNDS = 3

TAIL_PATIENCE_SECONDS = 5.0
"""How long a partition's unapplied end may stand still before it is read again: far longer than
a batch takes (a batch that is only slow is read again for nothing, which is safe), far shorter
than anyone waits for an index."""

SourcePartition = tuple[str, int]


class Gaps:
    """The holes found per source partition, how often each was read again, and what the broker
    said of those read again :data:`MAX_ROUNDS` times."""

    def __init__(self) -> None:
        self.expected: dict[SourcePartition, int] = {}  # the offset a hole was found before
        self.rounds: dict[tuple[SourcePartition, int], int] = {}
        # (source, first offset of the hole) -> its end: read again MAX_ROUNDS times, for the broker to judge
        self.unjudged: dict[tuple[SourcePartition, int], int] = {}
        # (source, first offset of the hole) -> its end: the broker holds no record there
        self.empty: dict[tuple[SourcePartition, int], int] = {}

    def hole(self, source: SourcePartition, offset: int, last_offset: int | None) -> bool:
        """True when records between ``last_offset`` and ``offset`` were never delivered (and the
        broker did not find that range empty once it was read again :data:`MAX_ROUNDS` times)."""
        if last_offset is None or offset <= last_offset + 1:
            return False
        key = (source, last_offset + 1)
        if self.rounds.get(key, 0) >= MAX_ROUNDS:
            if offset <= self.empty.get(key, -1):
                log.warning("accepting a gap in %s at offsets %d to %d: the broker holds no record there",
                            source, last_offset + 1, offset - 1)
                return False
            self.unjudged[key] = min(offset, self.unjudged.get(key, offset))
        self.expected[source] = last_offset + 1
        return True

    def to_judge(self, applied: Mapping[SourcePartition, int | None],
                 assigned: Collection[SourcePartition]) -> list[tuple[SourcePartition, int, int]]:
        """The holes read again :data:`MAX_ROUNDS` times and still there, as ``(source, start,
        end)``, for the broker to say whether it holds records at offsets ``start`` to ``end - 1``;
        ``applied`` is the offset of the last record the stages applied per source partition
        (a hole a later read filled is forgotten) and ``assigned`` the source partitions this
        process reads. The holes of a partition a rebalance took away are forgotten, with how
        often they were read: its new owner reads it from the committed offset, and the records
        the broker holds there are no reason for this process to restart."""
        for source, start in list(self.unjudged):
            last = applied.get(source)
            if source not in assigned or (last is not None and last >= start):
                del self.unjudged[source, start]
        for source, start in list(self.rounds):
            if source not in assigned:
                del self.rounds[source, start]
        return [(source, start, end) for (source, start), end in sorted(self.unjudged.items())]

    def judged_empty(self, source: SourcePartition, start: int, end: int) -> None:
        """The broker holds no record at offsets ``start`` to ``end - 1`` of ``source``: the hole
        is accepted when it is next met."""
        self.unjudged.pop((source, start), None)
        self.empty[source, start] = max(end, self.empty.get((source, start), end))

    def reread(self, source: SourcePartition) -> None:
        """Note that ``source`` was sought back to its committed offset once more."""
        if source in self.expected:
            key = (source, self.expected.pop(source))
            self.rounds[key] = self.rounds.get(key, 0) + 1


class Tails:
    """Source partitions whose last records were read by the consumer but never applied."""

    def __init__(self, gaps: Gaps, patience: float = TAIL_PATIENCE_SECONDS) -> None:
        self.gaps = gaps
        self.patience = patience
        # Per source partition: (last applied offset, end offset) when first seen so, and since when;
        # None once that end was accepted.
        self.seen: dict[SourcePartition, tuple[tuple[int, int], float | None]] = {}

    def check(self, now: float, ends: Mapping[SourcePartition, int],
              applied: Mapping[SourcePartition, int | None]) -> list[SourcePartition]:
        """The partitions to read again: per source partition, ``ends`` is its end offset (the
        offset its next record gets) as the consumer last saw it and ``applied`` the offset of the
        last record the stage applied from it. A partition is read again once its records up to the
        end stood unapplied, with nothing moving, for ``patience`` seconds; after
        :data:`MAX_ROUNDS` such reads with nothing applied the end is accepted as it is."""
        stalled: list[SourcePartition] = []
        for source, end in sorted(ends.items()):
            last = applied.get(source)
            if last is None or end <= last + 1:  # caught up, or nothing applied to judge by
                self.seen.pop(source, None)
                continue
            state = (last, end)
            seen = self.seen.get(source)
            if seen is None or seen[0] != state:
                self.seen[source] = (state, now)
                continue
            since = seen[1]
            if since is None or now - since < self.patience:
                continue
            if self.gaps.hole(source, end, last):
                self.seen[source] = (state, now)  # the next read waits as long again
                stalled.append(source)
            else:
                self.seen[source] = (state, None)
        return stalled

    def reset(self) -> None:
        """Forget what was seen (a rebalance moves positions and restores tables)."""
        self.seen.clear()
