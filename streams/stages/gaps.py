"""Finding records a consumer never delivered.

faust may skip records of a source partition around a rebalance (see
:mod:`streams.faust_compat`). Each stage remembers the offset of the last record it applied per
source partition; a record past the next offset means some were skipped. The stage then does not
apply it, the wiring holds the partition's commits and seeks back to the committed offset, and the
records arrive again.

The broker judges each hole as soon as it is found, and again if it is still there after
:data:`MAX_ROUNDS` seeks: the wiring reads its offsets with a consumer of its own. Transaction
markers and aborted transactions (which L1's contract allows other producers to write) take
offsets and hold no committed record: a hole of those alone is real and accepted at once. Before,
every hole was read again :data:`MAX_ROUNDS` times first, so each transaction of a transactional
producer on L1 cost three seeks back (over a second), and a partition's last marker five seconds
per seek. A hole whose records the broker does hold is read again, and once read again
:data:`MAX_ROUNDS` times it is not accepted either: faust dropped them on every seek (a fetch still
being handed on after the seek moves its read offset past them, and it drops records below it).
Accepting it lost those records from every index, behind flush ticks that had claimed past them;
the wiring restarts the worker instead, which reads them from the committed offset, held before
the hole all along.

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
    said of them."""

    def __init__(self) -> None:
        self.expected: dict[SourcePartition, int] = {}  # the offset a hole was found before
        self.rounds: dict[tuple[SourcePartition, int], int] = {}
        # (source, first offset of the hole) -> its end: for the broker to judge
        self.unjudged: dict[tuple[SourcePartition, int], int] = {}
        # (source, first offset of the hole) -> its end: the broker holds no record there
        self.empty: dict[tuple[SourcePartition, int], int] = {}
        # (source, first offset of the hole): the broker holds records there; asked again once
        # the hole was read again MAX_ROUNDS times
        self.holding: set[tuple[SourcePartition, int]] = set()

    def hole(self, source: SourcePartition, offset: int, last_offset: int | None) -> bool:
        """True when records between ``last_offset`` and ``offset`` were never delivered (and the
        broker did not find that range empty)."""
        if last_offset is None or offset <= last_offset + 1:
            return False
        key = (source, last_offset + 1)
        if offset <= self.empty.get(key, -1):
            log.info("accepting a gap in %s at offsets %d to %d: the broker holds no committed record there",
                     source, last_offset + 1, offset - 1)
            return False
        if key not in self.holding or self.read_enough(*key):
            self.unjudged[key] = min(offset, self.unjudged.get(key, offset))
        self.expected[source] = last_offset + 1
        return True

    def read_enough(self, source: SourcePartition, start: int) -> bool:
        """The hole at ``start`` was read again :data:`MAX_ROUNDS` times: records the broker holds
        there were dropped on every read, and reading again will not bring them."""
        return self.rounds.get((source, start), 0) >= MAX_ROUNDS

    def to_judge(self, applied: Mapping[SourcePartition, int | None], assigned: Collection[SourcePartition],
                 committed: Mapping[SourcePartition, int] | None = None) -> list[tuple[SourcePartition, int, int]]:
        """The holes for the broker to judge, as ``(source, start, end)``: whether it holds
        records at offsets ``start`` to ``end - 1``. ``applied`` is the offset of the last record
        the stages applied per source partition (a hole a later read filled is forgotten, with
        how often it was read) and ``assigned`` the source partitions this process reads. The
        holes of a partition a rebalance took away are forgotten too: its new owner reads it
        from the committed offset, and the records the broker holds there are no reason for this
        process to restart. A hole found empty is forgotten once the group's ``committed``
        offset of its partition is past its end (a worker fed by a transactional producer meets
        one per transaction): no read again, which starts there, meets it. Not once the stage
        applied past it: reading again applies the same records again, from the committed
        offset. And not by its start: the group may have committed past records no stage
        applied (:func:`streams.faust_compat.rewind`), a hole that starts below that offset."""
        committed = committed or {}

        def open_(source: SourcePartition, start: int) -> bool:
            last = applied.get(source)
            return source in assigned and (last is None or last < start)

        self.unjudged = {key: end for key, end in self.unjudged.items() if open_(*key)}
        self.rounds = {key: count for key, count in self.rounds.items() if open_(*key)}
        self.holding = {key for key in self.holding if open_(*key)}
        self.empty = {key: end for key, end in self.empty.items()
                      if key[0] in assigned and end >= committed.get(key[0], 0)}
        return [(source, start, end) for (source, start), end in sorted(self.unjudged.items())]

    def found_in(self, offsets: Collection[tuple[SourcePartition, int]],
                 applied: Mapping[SourcePartition, int | None]) -> dict[SourcePartition, list[tuple[int, int]]]:
        """The holes a batch of records at ``offsets`` (source, offset; in the batch's order) will
        meet, as ``(start, end)`` per source, given the last offset the stage applied per source
        (``applied``), less those the broker already judged (found empty, or holding records that
        reading again is to bring): what to ask the broker about before the batch is applied, so
        that transaction markers do not hold it."""
        last = dict(applied)
        found: dict[SourcePartition, list[tuple[int, int]]] = {}
        for source, offset in offsets:
            before = last.get(source)
            if (before is not None and offset > before + 1 and offset > self.empty.get((source, before + 1), -1)
                    and (source, before + 1) not in self.holding):
                found.setdefault(source, []).append((before + 1, offset))
            last[source] = offset
        return found

    def judged_empty(self, source: SourcePartition, start: int, end: int) -> None:
        """The broker holds no record at offsets ``start`` to ``end - 1`` of ``source``: the hole
        is accepted when it is next met."""
        self.unjudged.pop((source, start), None)
        self.holding.discard((source, start))
        self.empty[source, start] = max(end, self.empty.get((source, start), end))

    def judged_holding(self, source: SourcePartition, start: int) -> None:
        """The broker holds records in the hole at ``start``, which was not read again
        :data:`MAX_ROUNDS` times yet: reading again is what brings them (a rebalance's
        hole); the broker is asked again if it does not."""
        self.unjudged.pop((source, start), None)
        self.holding.add((source, start))

    def empty_after(self, source: SourcePartition, applied: int) -> int | None:
        """The end of a hole right after offset ``applied`` of ``source`` that the broker found
        empty (the last offsets of a partition that end in a transaction's marker), else None."""
        return self.empty.get((source, applied + 1))

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
