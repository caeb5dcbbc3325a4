"""What a stage reads and what it asks its wiring to do: plain data, no Kafka, no faust.

A stage turns a batch of :class:`Record` into one :class:`Effects`. The wiring performs it in
this order, and the order is the contract that makes at-least-once processing lose nothing:

1. send :attr:`Effects.records` in list order (per topic and partition, that is the order the
   records reach the broker) and apply :attr:`Effects.metrics`;
2. wait until every record marked ``confirm`` is acknowledged by the broker;
3. unless a rebalance began or ended meanwhile, make :attr:`Effects.writes` (each table key at
   most once); if the batch has :attr:`Effects.summaries`, wait until every write made so far
   (of this batch and of earlier ones) is acknowledged, then, unless a rebalance intervened,
   make the summaries; tell the stage the batch is committed (``stage.commit(effects)``);
4. wait until those writes are acknowledged, and unless a rebalance intervened, send
   :attr:`Effects.markers` and tell the stage each one was sent (``stage.sent(marker)``).

A batch abandoned at step 3 or 4 is read again; every stage skips what it already applied.
Writes of different keys are separate changelog records, and a worker killed while they are
under way leaves any subset of them stored: a stage may rely on nothing more than "a summary
stored means every write before it stored" when its restored tables are read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Effects", "Marker", "Metric", "Produce", "Record", "TableWrite", "TopicRole"]

TopicRole = Literal["redacted", "toolresults", "chunks", "deadletters", "l1"]
"""The topic a record goes to, by role; the wiring maps it to the deployment's name. Only clock
records go to L1 (:mod:`streams.ticks`): a worker appends no event."""


@dataclass(frozen=True)
class Record:
    """One consumed record: where it was read (topic, partition, offset), its append time in
    POSIX seconds (the broker record's timestamp) and its raw value."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    timestamp: float | None = None


@dataclass(frozen=True)
class Produce:
    """A record to send. ``partition`` None lets the producer's partitioner choose (by key);
    ``confirm`` means the batch's state may be written only after the broker acknowledged it."""

    topic: TopicRole
    key: bytes
    value: bytes
    partition: int | None = None
    confirm: bool = False


@dataclass(frozen=True)
class TableWrite:
    """``table[key] = value``, recorded in the changelog partition ``partition``."""

    table: str
    partition: int
    key: str
    value: Any


@dataclass(frozen=True)
class Metric:
    """A metric update: ``inc`` adds ``value`` to a counter, ``set`` sets a gauge."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()
    value: float = 1.0
    op: Literal["inc", "set"] = "inc"


@dataclass(frozen=True)
class Marker:
    """A progress marker for ``(partition, log_id)`` of the chunks topic, and the record that
    carries it."""

    log_id: str
    partition: int
    key: str
    seq: int
    record: Produce


@dataclass
class Effects:
    """Everything one batch asks for, in the order the wiring performs it (module docstring)."""

    records: list[Produce] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    writes: list[TableWrite] = field(default_factory=list)
    summaries: list[TableWrite] = field(default_factory=list)
    """Writes that sum up others (the chunking stage's progress sums up its session states):
    made only once every earlier write is acknowledged, so a restored summary is never ahead of
    what it sums up."""
    markers: list[Marker] = field(default_factory=list)
    holes: list[tuple[str, int]] = field(default_factory=list)
    """Source partitions (topic, partition) in which records were found missing: their commits
    must be held and they must be read again from the committed offset."""
    handled: dict[str, int] = field(default_factory=dict)
    """Per log, the highest seq the batch handled (the redaction stage's flush claims)."""
    handled_on: dict[int, int] = field(default_factory=dict)
    """Per L1 partition, the highest seq the batch handled, of any log (a flush tick of a log
    that shares the partition releases it too)."""
    partition_of: dict[str, int] = field(default_factory=dict)
    """The L1 partition of each log the batch handled."""
    flushed: dict[str, int] = field(default_factory=dict)
    """Per log, the seq a flush tick of this effect claimed."""
