"""The worker's stages: the redaction stage and the chunking stage as plain classes.

Each stage turns a batch of consumed records into :class:`Effects` -- records to send (topic
role, key, value, partition), table writes, dead letters, metric updates and progress markers --
and holds the state it needs (read access to its tables, and what this process itself sent).
Nothing here knows about faust or Kafka: :mod:`streams.app` reads a batch, calls
``stage.apply`` and performs the effects in the order :mod:`streams.stages.effects` states;
tests drive the stages with dicts for tables.

- :mod:`streams.stages.redaction`: L1 records -> redacted events, tool results, ticks;
- :mod:`streams.stages.chunking`: redacted events and ticks -> chunks, progress markers;
- :mod:`streams.stages.keys`: the one spelling of every table name and key;
- :mod:`streams.stages.records`: the one definition of each derived record (event, tool result,
  chunk), which the rebuild replay and the planner's tail scan build too;
- :mod:`streams.stages.gaps`: records a consumer never delivered, a partition's last ones included.
"""

from __future__ import annotations

from streams.stages.chunking import ChunkingStage
from streams.stages.effects import Effects, Marker, Metric, Produce, Record, TableWrite
from streams.stages.gaps import Gaps, Tails
from streams.stages.redaction import RedactionStage

__all__ = ["ChunkingStage", "Effects", "Gaps", "Marker", "Metric", "Produce", "Record", "RedactionStage", "TableWrite",
           "Tails"]
