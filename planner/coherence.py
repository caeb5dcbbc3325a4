"""Whether the indexes a search joins by chunk id hold the same chunks.

A search names every hit by its chunk id and resolves it through the other indexes: the
structured index's chunk table gives a text or vector hit its session, seqs and evidence, and
the text index gives a vector hit its text. A chunk id is derived from the redaction policy's
hash and the chunker's version (docs/chunking.md, "Chunk ids"), and the chunker's settings
decide where chunks begin and end. Generations built under different policies or chunkers
therefore hold different chunks of the same events and share no id: joined anyway, every text
hit misses in the chunk table and is dropped, and every vector hit shows no text, while the
coverage looks complete. That is the state an upgrade leaves between ``usl rebuild text`` and
the rebuild of the other kinds.

The ids stay bound to the policy on purpose: a text redacted under another policy has other
byte offsets, and through its token count other chunk boundaries, so no policy-free key could
pair one index's chunk with the other's without trimming one index's text by the other's
offsets. So the planner refuses such a search (:class:`planner.exceptions.IndexMismatch`, with
the remedy) and ``usl status`` shows the state, each from the generations' manifests;
:func:`find_mismatch` is the one rule both apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sinks.exceptions import GenerationError
from sinks.generations import DEFAULT_LINE, GenerationStore

if TYPE_CHECKING:  # status imports this module and needs no index reader
    from planner.readers import IndexPin

__all__ = ["CHUNK_KINDS", "ChunkOrigin", "Mismatch", "find_mismatch", "origins_of_pin",
           "origins_of_watermark", "remedy"]

CHUNK_KINDS = ("structured", "text", "vector")
"""Index kinds keyed by chunk id that one search joins (tool results are keyed by event)."""


@dataclass(frozen=True)
class ChunkOrigin:
    """What decided the chunk ids of one generation (or of one index kind, for status)."""

    kind: str
    where: str
    """The generation, for a message: ``generation 41``, ``generation 2 (line rebuild-1)``."""
    policy: str
    """The redaction policy's hash ('' when the generation does not say)."""
    chunker: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Mismatch:
    """Indexes of one log that name different chunks, and why."""

    what: str
    """``redaction policy`` or ``chunker``."""
    groups: tuple[tuple[str, tuple[ChunkOrigin, ...]], ...]
    """Each distinct value (a policy hash, a chunker's differing settings) and who has it."""

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({origin.kind for _, origins in self.groups for origin in origins}))

    def describe(self) -> str:
        """``text (generation 1, line rebuild-1) under redaction policy 685d...; structured
        (generation 41), vector (generation 41) under 2fdadad...``"""
        parts = []
        for value, origins in self.groups:
            names = ", ".join(f"{origin.kind} ({origin.where})" for origin in origins)
            parts.append(f"{names} under {self.what} {value}")
        return "; ".join(parts)

    def message(self, log_id: str) -> str:
        return (f"the indexes of log {log_id!r} disagree on the {self.what} they were built "
                f"under: {self.describe()}. Chunk ids depend on it, so these indexes name "
                f"different chunks and a search joining them would lose its hits")

    def by_kind(self) -> dict[str, str]:
        """kind → its value (a sharded kind with shards on both sides: the values joined)."""
        values: dict[str, list[str]] = {}
        for value, origins in self.groups:
            for origin in origins:
                values.setdefault(origin.kind, []).append(value)
        return {kind: " / ".join(found) for kind, found in sorted(values.items())}


def remedy(log_id: str) -> str:
    """What an operator runs (or waits for) to end a mismatch of ``log_id``."""
    return (f"Rebuild every index of the log under one policy: usl rebuild all --log {log_id} "
            "(a rebuild of this log that is still running ends this once its last index "
            "switches; `usl status` shows each index's policy).")


def origins_of_pin(pin: IndexPin) -> list[ChunkOrigin]:
    """The origin of each generation ``pin`` holds (one per shard of a sharded kind)."""
    out = []
    for part in pin.shards:
        out.append(ChunkOrigin(pin.kind, _where(part.generation_id, part.shard, part.line),
                               part.manifest.redaction_policy_hash, dict(part.manifest.chunker or {})))
    return out


def origins_of_watermark(root: Path, log_id: str, kind: str, watermark: Mapping[str, Any]) -> list[ChunkOrigin]:
    """The origin of each generation ``watermark`` names (every shard's of a sharded kind), read
    from its manifest under ``root``: a watermark's own ``versions`` are those of the process
    that published it (a sink restarted under a new policy republishes its old generation),
    never evidence of how the generation was built. A manifest that cannot be read gives none."""
    shards = watermark.get("shards")
    records = sorted(shards.items()) if isinstance(shards, Mapping) else [(None, watermark)]
    out = []
    for shard, record in records:
        try:
            line = str(record.get("line") or DEFAULT_LINE)
            manifest = GenerationStore(root, log_id, kind, line, shard=shard).load(int(record["generationId"]))
        except (GenerationError, OSError, KeyError, TypeError, ValueError):
            continue
        out.append(ChunkOrigin(kind, _where(manifest.generation_id, shard, line), manifest.redaction_policy_hash,
                               dict(manifest.chunker or {})))
    return out


def _where(generation_id: int, shard: str | None, line: str) -> str:
    """``generation 41``, ``shard-1-of-2 generation 3``, ``generation 2, line rebuild-1``."""
    where = f"generation {generation_id}"
    if shard:
        where = f"{shard} {where}"
    return where if line == DEFAULT_LINE else f"{where}, line {line}"


def find_mismatch(origins: Iterable[ChunkOrigin]) -> Mismatch | None:
    """The first way ``origins`` disagree on their chunks: the redaction policy, else a chunker
    setting every one of them records. A generation that does not record a value (an empty
    policy, a setting an older release did not write) is no evidence either way."""
    origins = list(origins)
    by_policy = _group(origins, lambda origin: origin.policy or None)
    if len(by_policy) > 1:
        return Mismatch("redaction policy", by_policy)
    recorded = [origin for origin in origins if origin.chunker]
    shared = set.intersection(*(set(origin.chunker) for origin in recorded)) if recorded else set()
    differing = sorted(key for key in shared
                       if len({repr(origin.chunker[key]) for origin in recorded}) > 1)

    def settings(origin: ChunkOrigin) -> str:
        return ", ".join(f"{key}={origin.chunker[key]}" for key in differing)

    by_chunker = _group(recorded, settings)
    if differing and len(by_chunker) > 1:
        return Mismatch("chunker", by_chunker)
    return None


def _group(origins: Sequence[ChunkOrigin], value_of: Any) -> tuple[tuple[str, tuple[ChunkOrigin, ...]], ...]:
    groups: dict[str, list[ChunkOrigin]] = {}
    for origin in origins:
        value = value_of(origin)
        if value is not None:
            groups.setdefault(value, []).append(origin)
    return tuple((value, tuple(found)) for value, found in groups.items())
