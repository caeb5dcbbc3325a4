"""Finding records a consumer never delivered.

faust may skip records of a source partition around a rebalance (see
:mod:`streams.faust_compat`). Each stage remembers the offset of the last record it applied per
source partition; a record past the next offset means some were skipped. The stage then does not
apply it, the wiring holds the partition's commits and seeks back to the committed offset, and the
records arrive again. A hole that is still there after :data:`MAX_ROUNDS` seeks is real (e.g.
transaction markers on L1) and is accepted.
"""

from __future__ import annotations

import logging

__all__ = ["MAX_ROUNDS", "Gaps"]

log = logging.getLogger("usl.worker")

MAX_ROUNDS = 3

SourcePartition = tuple[str, int]


class Gaps:
    """The holes found per source partition and how often each was read again."""

    def __init__(self) -> None:
        self.expected: dict[SourcePartition, int] = {}  # the offset a hole was found before
        self.rounds: dict[tuple[SourcePartition, int], int] = {}

    def hole(self, source: SourcePartition, offset: int, last_offset: int | None) -> bool:
        """True when records between ``last_offset`` and ``offset`` were never delivered (and the
        hole has not been read again :data:`MAX_ROUNDS` times already)."""
        if last_offset is None or offset <= last_offset + 1:
            return False
        if self.rounds.get((source, last_offset + 1), 0) >= MAX_ROUNDS:
            log.warning("accepting a gap in %s before offset %d", source, offset)
            return False
        self.expected[source] = last_offset + 1
        return True

    def reread(self, source: SourcePartition) -> None:
        """Note that ``source`` was sought back to its committed offset once more."""
        if source in self.expected:
            key = (source, self.expected.pop(source))
            self.rounds[key] = self.rounds.get(key, 0) + 1
