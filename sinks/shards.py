"""Sink shards: N sink instances of one index kind, each owning a fixed part of the derived
topics' partitions.

Shard ``I`` of ``N`` (``usl sink --shard I/N``) reads the partitions ``p`` with ``p % N == I``
of every topic its writer reads, by manual assignment (no consumer-group rebalancing), and
writes its own generation lines beside the other shards' (:class:`sinks.generations.GenerationStore`
with ``shard=``)::

    <root>/<logId>/<kind>/shard-I-of-N/ACTIVE, <line>/CURRENT, <line>/gen-.../

Its manifests record the offsets of its own partitions only, so moving a shard to another
machine is starting ``--shard I/N`` there: it resumes from that shard's current generation.
The one-shard default (no ``--shard``) keeps the layout without a shard directory.

Each shard publishes its watermark under the key ``LOG/KIND/shard-I-of-N``;
:func:`fold_shards` turns the per-shard records into one watermark per index kind whose
``builtThroughSeq`` is the minimum over the shards, which is what readers of the watermark
topic see.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sinks.exceptions import SinkError

__all__ = ["SHARD_DIR_RE", "Shard", "fold_shards", "parse_shard"]

SHARD_DIR_RE = re.compile(r"^shard-(\d+)-of-(\d+)$")
"""The directory (and watermark key suffix) of one shard."""
_SPEC_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True, order=True)
class Shard:
    """Shard ``index`` of ``count``: owns the partitions ``p`` with ``p % count == index``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise SinkError(f"shard {self.index}/{self.count}: need 0 <= I < N")

    @property
    def name(self) -> str:
        """``shard-I-of-N``: the shard's directory and watermark key suffix."""
        return f"shard-{self.index}-of-{self.count}"

    def owns(self, partition: int) -> bool:
        return partition % self.count == self.index

    def partitions(self, partitions: Iterable[int]) -> list[int]:
        """The partitions among ``partitions`` this shard reads, ascending."""
        return sorted(p for p in partitions if self.owns(p))

    @classmethod
    def from_name(cls, name: str) -> Shard:
        match = SHARD_DIR_RE.match(name)
        if match is None:
            raise SinkError(f"not a shard name: {name!r} (shard-I-of-N)")
        return cls(int(match.group(1)), int(match.group(2)))


def parse_shard(spec: str | None) -> Shard | None:
    """``I/N`` → :class:`Shard` (``0/1``, empty or None → None: the unsharded default)."""
    if spec is None or not spec.strip():
        return None
    match = _SPEC_RE.match(spec)
    if match is None:
        raise SinkError(f"--shard {spec!r}: write it as I/N, e.g. 0/2 (shard 0 of 2)")
    shard = Shard(int(match.group(1)), int(match.group(2)))
    return None if shard.count == 1 else shard


def fold_shards(table: Mapping[tuple[str, str], dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """One watermark per (log, kind) from a table that may hold per-shard records.

    Raw per-shard records sit under kind ``KIND/shard-I-of-N``. The shards of one count ``N``
    form a *set*; a set counts only once every one of its ``N`` shards has published. The
    unsharded record is the set of count 1. Of the complete sets the one built furthest wins
    (ties: the larger count), so when a deployment moves from one shard to two, readers keep
    the old index until the new shards have caught up with it.

    A sharded kind's record is that of its slowest shard (``generationId``, ``line``, ...)
    with ``builtThroughSeq`` the minimum over the shards, plus ``shards``: shard name → its
    own record. A record without ``shards`` is an unsharded index, as before.
    """
    sets: dict[tuple[str, str], dict[int, dict[str, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    folded: dict[tuple[str, str], dict[str, Any]] = {}
    for (log_id, key), record in table.items():
        kind, _, shard_name = key.partition("/")
        if not shard_name:
            sets[(log_id, kind)][1][""] = record
            continue
        try:
            shard = Shard.from_name(shard_name)
        except SinkError:
            continue
        if shard.count == 1:  # never written: one shard is the unsharded layout
            continue
        sets[(log_id, kind)][shard.count][shard.name] = record
    for log_kind, by_count in sets.items():
        complete = [(min(_through(r) for r in records.values()), count, records)
                    for count, records in by_count.items() if len(records) == count]
        if not complete:
            continue
        _through_seq, count, records = max(complete, key=lambda c: (c[0], c[1]))
        if count == 1:
            folded[log_kind] = records[""]
            continue
        slowest = min(records.values(), key=_through)
        folded[log_kind] = {**slowest, "builtThroughSeq": _through(slowest),
                            "shards": {name: records[name] for name in sorted(records)}}
    return folded


def _through(record: Mapping[str, Any]) -> int:
    try:
        return int(record.get("builtThroughSeq", 0))
    except (TypeError, ValueError):
        return 0
