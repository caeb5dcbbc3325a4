"""What one query holds while it runs: a :class:`Snapshot` of the log, and the pinned generations.

A :class:`Snapshot` (opened by :meth:`planner.engine.Planner.snapshot`, shared by search, SQL,
SessionQL and export) holds an L1 reader, the log's committed seq read when it opened, the
log's watermarks and every generation pinned through it; it reads each session's latest access
list through :class:`planner.access.AccessLists`. Closing it releases its pins, unless a cursor
needs them a while longer (:meth:`Snapshot.keep_for`).

A query pins one generation per index kind for its lifetime (:mod:`planner.readers`); a
:class:`Pinner` adds the check that the pinned files are the ones the manifest names. A
generation that fails is never read: the newest older generation of its line that verifies is
pinned instead and what was refused is returned as a problem the response discloses. Each
generation is hashed once; later queries compare a stat signature of its files (a write
changes their mtime).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planner.access import AccessLists, Readable
from planner.acl import Principal
from planner.exceptions import CursorExpired
from planner.readers import IndexPin, pin_for_cursor, pin_for_query
from sinks.exceptions import GenerationError
from sinks.generations import FileDigests, GenerationStore
from sinks.text import ENGINES, get_engine
from sinks.text.base import ANALYZER as TEXT_ANALYZER
from streams.l1 import L1Reader

__all__ = ["QUERY_PIN_SECONDS", "Pinner", "Snapshot"]

log = logging.getLogger("usl.planner")

QUERY_PIN_SECONDS = 600.0
"""How long a query's pin holds its generation if the query never releases it (a crash)."""
_ANALYZED_KINDS = ("text", "toolresults")
"""Index kinds searched with the text analyzer: a generation of another analyzer is refused."""


def _text_schema_problem(extra: Mapping[str, Any]) -> str | None:
    """Why a text generation's index layout is not the one its engine reads (None: it is, or
    the generation does not say: then the engine itself refuses an index without its fields).
    ``extra`` holds the text writer's ``describe()``, whatever the manifest's own field says."""
    engine, schema_version = extra.get("engine"), extra.get("schemaVersion")
    if engine not in ENGINES or schema_version is None:
        return None
    expected = get_engine(str(engine)).schema_version
    if str(schema_version) == expected:
        return None
    return (f"has {engine} text schema {schema_version}, this planner reads schema {expected}; "
            f"rebuild it from the log: usl rebuild text")


class Pinner:
    """Pins generations under ``root`` for ``holder`` (thread-safe)."""

    def __init__(self, root: Path, holder: str) -> None:
        self.root = root
        self.holder = holder
        self._lock = threading.Lock()
        self._digests = FileDigests()
        # generation dir -> (stat signature of its files, problem or None)
        self._verdicts: dict[str, tuple[tuple[Any, ...], str | None]] = {}
        self._unavailable: set[tuple[str, str]] = set()

    def pin(self, log_id: str, kind: str, watermark: Mapping[str, Any] | None) -> IndexPin | None:
        """The generation ``watermark`` names (else the newest of the line), not verified."""
        return pin_for_query(self.root, log_id, kind, watermark,
                             ttl_seconds=QUERY_PIN_SECONDS, holder=self.holder)

    def pin_verified(self, log_id: str, kind: str, watermark: Mapping[str, Any] | None,
                     ) -> tuple[IndexPin | None, str | None]:
        """Pin the generation ``watermark`` names if its files match its manifest; else the
        newest older generation of its line that does, with what was refused (disclosed as a
        fallback); (None, why) if none does. Bad data is never read."""
        try:
            pin = self.pin(log_id, kind, watermark)
        except (GenerationError, OSError) as exc:  # a damaged manifest, a full disk for the pin
            unavailable = f"index unavailable: {exc}"
            with self._lock:
                new = (kind, unavailable) not in self._unavailable
                if len(self._unavailable) > 100:
                    self._unavailable.clear()
                self._unavailable.add((kind, unavailable))
            if new:
                log.error("%s index of %s unavailable: %s", kind, log_id, exc)
            return None, unavailable
        if pin is None:
            return None, None
        problem = self.verify(pin)
        if problem is None:
            return pin, None
        if pin.parts:  # no fallback to older generations of a sharded kind (yet)
            pin.release()
            return None, f"{problem}; so the sharded {kind} index is unavailable"
        refused = f"generation {pin.generation_id} refused ({problem})"
        store = GenerationStore(self.root, log_id, kind, pin.line)
        pin.release()
        try:
            older = [g for g in store.generation_ids() if g < pin.generation_id]
        except (GenerationError, OSError):
            older = []
        for generation_id in reversed(older):
            try:
                file_pin = store.pin(generation_id, ttl_seconds=QUERY_PIN_SECONDS, holder=self.holder)
            except (GenerationError, OSError):
                continue
            try:
                manifest = store.load(generation_id)
            except GenerationError:
                file_pin.release()
                continue
            candidate = IndexPin(kind, store.line, generation_id, manifest.built_through_seq,
                                 store.generation_dir(generation_id), manifest, file_pin)
            if self.verify(candidate) is None:
                return candidate, f"{refused}; answering from generation {generation_id}"
            file_pin.release()
        return None, f"{refused}; no older generation verifies, so the {kind} index is unavailable"

    def pin_for_cursor(self, log_id: str, kind: str, generation_id: int, line: str | None,
                       shards: Mapping[str, Any] | None = None) -> IndexPin:
        """Re-pin the very generation(s) a cursor binds (``CursorExpired`` when one is gone)."""
        return pin_for_cursor(self.root, log_id, kind, generation_id, line,
                              ttl_seconds=QUERY_PIN_SECONDS, holder=self.holder, shards=shards)

    def verify(self, pin: IndexPin) -> str | None:
        """Why ``pin``'s generation must not be read (None if its files match its manifest;
        a sharded pin: the first shard's problem). Hashes once per generation and file; later
        calls compare a stat signature."""
        if pin.parts:
            problems = [f"{part.shard}: {why}" for part in pin.parts if (why := self.verify(part))]
            return problems[0] if problems else None
        key = str(pin.directory)
        problem: str | None
        try:
            # os.stat of joined strings: a Path per file cost more than the stat itself, and a
            # generation of a million chunks lists ~100 files, each checked on every query.
            directory = os.fspath(pin.directory)
            signature = tuple((path, *_stat_key(os.path.join(directory, path)))
                              for path in ("manifest.json", *(ref.path for ref in pin.manifest.segments)))
        except OSError as exc:
            signature, problem = (), f"unreadable: {exc}"
        else:
            with self._lock:
                cached = self._verdicts.get(key)
            if cached is not None and cached[0] == signature:
                return cached[1]
            try:
                GenerationStore(self.root, pin.manifest.log_id, pin.kind, pin.line, shard=pin.shard).verify(
                    pin.manifest, digests=self._digests)
                problem = None
            except GenerationError as exc:
                problem = f"fails verification: {exc}"
            analyzer = pin.manifest.extra.get("analyzer") or "words/1"
            if problem is None and pin.kind in _ANALYZED_KINDS and analyzer != TEXT_ANALYZER:
                # Query terms of another analyzer would silently miss (CJK); never read it.
                problem = (f"was built with text analyzer {analyzer}, this planner searches with "
                           f"{TEXT_ANALYZER}; rebuild it from the log: usl rebuild {pin.kind}")
            if problem is None and pin.kind == "text":
                problem = _text_schema_problem(pin.manifest.extra)
        if problem is not None:
            log.error("%s generation %d of %s refused: %s", pin.kind, pin.generation_id,
                      pin.manifest.log_id, problem)
        with self._lock:
            if len(self._verdicts) > 1000:
                self._verdicts.clear()
            self._verdicts[key] = (signature, problem)
        return problem


@dataclass
class Snapshot:
    """One query's view of a log, from its start to its end.

    ``l1_seq`` is the log's committed L1 seq read when the snapshot opened; ``watermarks`` the
    log's watermarks read just after (empty for a cursor's page, which re-pins the generations
    the cursor binds). ``pins`` holds every generation pinned through this snapshot by kind
    (None: the kind has no usable generation) and ``problems`` what was refused on the way.
    """

    log_id: str
    l1: L1Reader
    l1_seq: int
    watermarks: dict[str, dict[str, Any]]
    pinner: Pinner
    access: AccessLists
    pins: dict[str, IndexPin | None] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    keep_seconds: float | None = None

    def pin(self, kind: str, *, verify: bool = True) -> IndexPin | None:
        """Pin the generation of ``kind`` the watermarks name; verified against its manifest
        unless ``verify`` is False (a refused one falls back as :meth:`Pinner.pin_verified`
        says, and the refusal lands in ``problems``)."""
        if verify:
            pin, problem = self.pinner.pin_verified(self.log_id, kind, self.watermarks.get(kind))
            if problem is not None:
                self.problems[kind] = problem
        else:
            pin = self.pinner.pin(self.log_id, kind, self.watermarks.get(kind))
        self.pins[kind] = pin
        return pin

    def pin_generation(self, kind: str, generation_id: int, line: str | None,
                       shards: Mapping[str, Any] | None = None) -> IndexPin:
        """Re-pin the generation a cursor binds (``shards``: every shard's, shard name →
        [generationId, line]); :class:`CursorExpired` when one is gone or no longer verifies."""
        pin = (self.pinner.pin_for_cursor(self.log_id, kind, generation_id, line) if not shards
               else self.pinner.pin_for_cursor(self.log_id, kind, generation_id, line, shards))
        self.pins[kind] = pin
        problem = self.pinner.verify(pin)
        if problem is not None:
            raise CursorExpired(f"the {kind} index generation this cursor reads "
                                f"failed verification: {problem}",
                                hint="Run the query again without a cursor.")
        return pin

    def access_lists(self, structured: IndexPin | None,
                     through_seq: int | None = None) -> dict[str, dict[str, Any]]:
        """sessionId → its latest access list, as of ``through_seq`` (default: ``l1_seq``),
        from ``structured`` and the L1 events above it."""
        through = self.l1_seq if through_seq is None else through_seq
        return self.access.latest(self.l1, self.log_id, structured, through)

    def readable(self, principal: Principal, structured: IndexPin | None,
                 through_seq: int | None = None) -> Readable:
        """What ``principal`` may read as of ``through_seq`` (default: ``l1_seq``; see
        :meth:`AccessLists.readable`)."""
        through = self.l1_seq if through_seq is None else through_seq
        return self.access.readable(principal, self.l1, self.log_id, structured, through)

    def keep_for(self, seconds: float) -> None:
        """On close, extend the pins by ``seconds`` instead of releasing them (a cursor's next
        page reads the same generations)."""
        self.keep_seconds = seconds

    def close(self) -> None:
        for pin in self.pins.values():
            if pin is None:
                continue
            if self.keep_seconds is not None:
                pin.keep_for(self.keep_seconds)
            else:
                pin.release()


def _stat_key(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns)
