"""The sink loop: consume → dedup → batch → write a generation → commit → publish watermark.

One :class:`SinkRunner` drives one index kind for every log. It consumes the derived topics its
writer reads (all partitions, or a shard's: :mod:`sinks.shards`; manual assignment,
read_committed), buffers records per log,
and on each flush writes one new immutable generation per log that changed, commits it
atomically and only then publishes the log's watermark.

Exactly-once effect: each manifest records the source offsets it consumed through; on start
the runner seeks every partition to the smallest offset any log still needs, skips records a
log's current generation already holds (offset below its manifest's offset, or a chunk whose
``maxSeq`` is at or below the generation's ``builtThroughSeq``) and drops duplicates by id
(``sinks.writer.record_id``), so a crash at any point loses and duplicates nothing.

Faults: a commit that fails on a write error (full disk, I/O error) discards its staging dir,
publishes nothing and is retried with back-off, so the sink catches up once the disk recovers.
At start-up every log's current generation is verified against its manifest (and before each
commit, the files the next generation reuses); a generation that fails is never built on: the
log is rebuilt from L1 into a new line (:func:`sinks.rebuild.rebuild`) that replaces it.

Stalled lines: a log whose active line was built under another redaction policy or chunker
than this process writes (:func:`sinks.generations.pipeline_difference`: the code was upgraded
to a new policy, or ``usl rebuild KIND --log LOG`` ran newer code) cannot take another
generation, since one line never mixes them. The runner stops consuming and committing for that
log alone, says so once in its log, sets ``usl_index_stalled{log,kind}`` and republishes the
line's watermark with a ``stalled`` entry, which ``usl status`` turns into its verdict; every
other log goes on indexing. Once ``usl rebuild all --log LOG`` switches the log to a line of
this process's pipeline, the runner follows the switch (:meth:`SinkRunner._follow_line_switches`)
and the stall ends.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from kafka import KafkaConsumer, TopicPartition

import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
from sinks.exceptions import GenerationError, GenerationLockedError, SinkError
from sinks.generations import (
    FileDigests,
    GenerationStore,
    Manifest,
    RedactionPolicyMismatchError,
    chunk_seq_bound,
    pipeline_difference,
)
from sinks.merger import BackgroundMerger, MergingWriter, commit_merge, merge_work_root
from sinks.retired import collect_retired_lines_due
from sinks.shards import Shard
from sinks.watermarks import WatermarkPublisher
from sinks.writer import RECORD_KINDS, IndexWriter, record_id
from streams.asp import ASP_VERSION
from streams.fsio import atomic_write
from streams.metrics import (
    SINK_FAILURE_REASONS,
    usl_dead_letters_total,
    usl_duplicate_events_total,
    usl_generation_id,
    usl_generation_switches_total,
    usl_index_stalled,
    usl_records_total,
    usl_sink_batch_chunks,
    usl_sink_batch_seconds,
    usl_sink_commit_seconds,
    usl_sink_failures_total,
    usl_watermark_seq,
)
from streams.settings import Settings
from streams.topics import Topics

__all__ = ["LogState", "SinkRunner", "flush_due", "index_root", "is_disk_error", "stall_of", "watermark_of",
           "write_ids"]

log = logging.getLogger("usl.sink")

_IDS_PREFIX = "ids-"
_IDS_FOLD_RATIO = 2
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS}
# Engines written in Rust or C++ (tantivy, faiss) report a failed write as their own
# exception type; these are the OS messages they pass on.
_DISK_MESSAGES = ("No space left", "Disk quot", "File too large", "Input/output error",
                  "Read-only file system")
_MAX_BACKOFF_SECONDS = 10.0
# A sink that commits early waits at least this many times its last flush's length after it, so
# early commits take at most a fifth of its time. A generation costs more as the pipeline gets
# busier (bigger batches, more segments to clone and merge, five sinks and the worker on the
# same cores); at the worker's full rate, early commits without this bound took 2-3x the wall
# time per commit and cost 10-19 % of the end-to-end rate (docs/benchmarks.md, issue 16).
_EARLY_COMMIT_SPACING = 4.0
# Longest a poll of the sink loop waits for records (SinkRunner._poll_seconds may wait less).
_POLL_SECONDS = 0.2
# Every collection of a line (after a commit, after a merge, on a quiet log) keeps the newest
# this many generations besides the pinned ones, so the line holds the same generations
# whichever of them ran last.
_KEEP_LAST_GENERATIONS = 3


def is_disk_error(exc: BaseException) -> bool:
    """True if ``exc`` is a storage failure a later retry may get past (full disk, I/O error)."""
    if isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS:
        return True
    return any(message in str(exc) for message in _DISK_MESSAGES)


def index_root(settings: Settings) -> Path:
    return Path(settings.home).resolve() / "indexes"


def write_ids(staging: Path, ids: list[str]) -> None:
    """Record the dedup ids a new generation adds (its ``ids-<generation>.txt``), if any, and
    fold the newest ids files together so a generation holds few of them.

    A generation hard-links every file of its parent, so with one file per commit and none
    ever merged, each generation held as many ids files as commits before it: after an hour
    of a live stack the structured and analytics generations listed 2 700 files each, every
    commit cloned, stat-ed and listed them all in its manifest, and a day would have made it
    tens of thousands. Folding a file into the next newer one while it is at most
    ``_IDS_FOLD_RATIO`` times as large keeps each file more than that much larger than the
    next (so at most about log2 of the ids' bytes files), and rewrites each id a logarithmic
    number of times. A fold writes a new file in place of the parent's links, never into them.
    """
    if not ids:
        return
    generation_id = int(staging.name.rsplit("-", 1)[-1])
    (staging / f"{_IDS_PREFIX}{generation_id:08d}.txt").write_text("\n".join(ids) + "\n")
    _fold_ids(staging)


def _fold_ids(staging: Path) -> None:
    files = sorted(staging.glob(f"{_IDS_PREFIX}*.txt"))  # zero-padded ids: oldest first
    if len(files) < 2:
        return
    sizes = [path.stat().st_size for path in files]
    first, total = len(files) - 1, sizes[-1]
    while first > 0 and sizes[first - 1] <= _IDS_FOLD_RATIO * total:
        first -= 1
        total += sizes[first]
    if first == len(files) - 1:
        return
    newest = files[-1]
    folded = newest.with_name(newest.name + ".fold")
    with folded.open("wb") as out:
        for path in files[first:]:
            out.write(path.read_bytes())
    for path in files[first:-1]:
        path.unlink()
    os.replace(folded, newest)


def flush_due(settings: Settings, *, pending: int, watermark_moves: bool, backlog: bool,
              since_flush_began: float, since_flush_ended: float, last_flush_seconds: float) -> bool:
    """Whether the sink loop commits now: ``pending`` records buffered, ``watermark_moves`` if a
    commit now would raise some log's ``builtThroughSeq``, ``backlog`` if the last poll came back
    full (more records are waiting), seconds since the last flush began and since it ended, and
    how long that flush took.

    Group commit: a commit that makes more of a log searchable runs once
    ``sink_commit_gap_seconds`` have passed since the last flush ended. A quiet sink so
    publishes within about that gap instead of waiting out ``sink_batch_seconds``, while a busy
    one still batches: the gap counts from the end of the last flush and is at least
    ``_EARLY_COMMIT_SPACING`` times that flush's length, so as commits grow slower under load
    the sink falls back to ``sink_batch_seconds``. Records its watermark cannot cover yet wait
    for ``sink_batch_size`` or ``sink_batch_seconds``: a generation is not free (files, hashing,
    GC, merges), and one that moves no watermark makes nothing searchable. A sink with a
    backlog (its last poll came back full) batches as before: it is catching up, and each
    generation has a fixed cost that small commits would pay many times over.
    ``sink_batch_seconds`` also runs a flush with nothing new, which follows a rebuild's line
    switch.
    """
    if pending >= settings.sink_batch_size:
        return True
    if watermark_moves and not backlog and since_flush_ended >= _commit_gap(settings, last_flush_seconds):
        return True
    return since_flush_began >= settings.sink_batch_seconds


def _commit_gap(settings: Settings, last_flush_seconds: float) -> float:
    """Seconds after the last flush ended before a commit that moves a watermark may run
    (:func:`flush_due`): ``sink_commit_gap_seconds``, or more after a slow flush."""
    return max(settings.sink_commit_gap_seconds, _EARLY_COMMIT_SPACING * last_flush_seconds)


def stall_of(manifest: Manifest | None, versions: dict[str, Any], *, chunk_based: bool = True,
             analyzer: str | None = None, schema: str | None = None) -> dict[str, Any] | None:
    """The ``stalled`` entry of a line whose current generation ``manifest`` was built under
    another redaction policy or (for a sink that reads chunks, ``chunk_based``) chunker than
    ``versions`` (:func:`sinks.service.pipeline_versions`) write, or (for a sink whose writer
    names one, ``analyzer``) another text analyzer, or (for a writer that cannot extend an index
    of another schema, ``schema``) another index schema; None when the sink can commit to it.
    The entry's ``remedy`` is the rebuild that ends the stall: every kind for a pipeline change
    (the kinds join by chunk id), the one kind for an analyzer or a schema."""
    if manifest is None:
        return None
    difference = pipeline_difference(
        manifest.redaction_policy_hash, manifest.chunker if chunk_based else {},
        str(versions.get("redactionPolicy") or ""), versions.get("chunker", {}) if chunk_based else {})
    remedy = f"usl rebuild all --log {manifest.log_id}"
    if difference is None and analyzer is not None:
        built_with = str(manifest.extra.get("analyzer") or "words/1")  # no marker: the first analyzer
        if built_with != analyzer:
            difference = ("text analyzer", built_with, analyzer)
            remedy = f"usl rebuild {manifest.kind} --log {manifest.log_id}"
    if difference is None and schema is not None and manifest.schema_version != schema:
        difference = (f"{manifest.kind} index schema", manifest.schema_version, schema)
        remedy = f"usl rebuild {manifest.kind} --log {manifest.log_id}"
    if difference is None:
        return None
    what, built, writes = difference
    return {"what": what, "built": built, "writes": writes, "generationId": manifest.generation_id,
            "since": time.time(), "remedy": remedy,
            "message": f"built under {what} {built}, this sink writes {writes}: run {remedy}"}


def watermark_of(manifest: Manifest, store: GenerationStore, versions: dict[str, Any],
                 stalled: dict[str, Any] | None = None) -> dict[str, Any]:
    """The watermark record a committed generation publishes (docs/architecture.md); a
    shard's names its shard (``shard-I-of-N``); a stalled line's carries the ``stalled``
    entry of :func:`stall_of`."""
    record = {
        "logId": manifest.log_id, "kind": manifest.kind, "line": manifest.line,
        "generationId": manifest.generation_id, "builtThroughSeq": manifest.built_through_seq,
        "manifest": str(store.manifest_path(manifest.generation_id)),
        "committedAt": manifest.created_at, "versions": {**versions, "embedding": manifest.embedding},
    }
    if store.shard is not None:
        record["shard"] = store.shard
    if stalled is not None:
        record["stalled"] = stalled
    return record


@dataclass
class LogState:
    """What the runner knows of one log's current generation and what is pending for it."""

    manifest: Manifest | None = None
    ids: set[str] = field(default_factory=set)
    pending: list[dict[str, Any]] = field(default_factory=list)
    pending_ids: set[str] = field(default_factory=set)
    # record_id of each pending record, in its order (the ids file of the next generation)
    pending_order: list[str] = field(default_factory=list)
    # (source, partition) -> highest seq known to be fully delivered for this log
    progress: dict[str, int] = field(default_factory=dict)
    line: str | None = None
    # Set while the line was built under another policy or chunker (stall_of): nothing of the
    # log is buffered or committed until a rebuild switches it to a line the sink can extend.
    stalled: dict[str, Any] | None = None


def _load_ids(gen_dir: Path) -> set[str]:
    ids: set[str] = set()
    if gen_dir.is_dir():
        for path in gen_dir.glob(f"{_IDS_PREFIX}*.txt"):
            ids.update(line for line in path.read_text().splitlines() if line)
    return ids


class SinkRunner:
    """Drives one :class:`IndexWriter` from its source topics into generations (with ``shard``:
    only that shard's partitions, into that shard's generation lines)."""

    def __init__(self, settings: Settings, bootstrap: str, writer: IndexWriter, *,
                 versions: dict[str, Any] | None = None,
                 on_commit: Callable[[Manifest], None] | None = None,
                 shard: Shard | None = None) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.writer = writer
        self.kind = writer.kind
        self.root = index_root(settings)
        self.topics = Topics.from_settings(settings)
        self.sources = {name: getattr(self.topics, name) for name in writer.sources}
        self.versions = versions or {}
        self.on_commit = on_commit
        self.logs: dict[str, LogState] = {}
        self._stop = threading.Event()
        self._publisher: WatermarkPublisher | None = None
        self._consumer: KafkaConsumer | None = None
        self._last_flush = time.monotonic()
        self._flush_ended = self._last_flush
        self._last_flush_seconds = 0.0
        self._backlog = False  # the last poll came back full
        self._progressed: set[str] = set()  # logs a progress marker or tick arrived for since the last flush
        self._partitions: dict[str, list[int]] = {}
        self.shard = shard
        self.label = self.kind if shard is None else f"{self.kind} {shard.name}"
        self._ledger_path = self.root / (f".ledger-{self.kind}.json" if shard is None
                                         else f".ledger-{self.kind}-{shard.name}.json")
        self._digests = FileDigests()
        self._failures = 0
        self._merger: BackgroundMerger | None = None
        self._stalled_reported: set[tuple[str, str | None]] = set()
        # log id -> time.monotonic() of the last collection of its line (_collect)
        self._collected: dict[str, float] = {}
        # The counters _handle bumps for every record, labelled once (labels() per record was
        # a tenth of the structured and analytics sinks' per-record time: docs/benchmarks.md).
        self._records_counter = usl_records_total.labels(stage=f"sink_{self.kind}")
        self._duplicates_counter = usl_duplicate_events_total.labels(stage=f"sink_{self.kind}")
        # The text analyzer this writer's terms come from (text, toolresults): a line of another
        # one stalls like a line of another policy, never crashes the sink for every log.
        self._analyzer: str | None = writer.describe().get("analyzer")
        # Likewise an index whose schema the writer cannot extend (sinks.toolresults).
        self._schema: str | None = (str(writer.describe().get("schemaVersion"))
                                    if getattr(writer, "schema_stalls", False) else None)

    # -- state ---------------------------------------------------------------------------------

    def _store(self, log_id: str, line: str | None = None) -> GenerationStore:
        return GenerationStore(self.root, log_id, self.kind, line,
                               shard=None if self.shard is None else self.shard.name)

    def _load_log(self, log_id: str) -> LogState:
        store = self._store(log_id)
        manifest = store.current()
        state = LogState(manifest=manifest, line=store.line)
        state.stalled = stall_of(manifest, self.versions, chunk_based="chunks" in self.sources,
                                 analyzer=self._analyzer, schema=self._schema)
        self._note_stall(log_id, state)
        if manifest is not None and state.stalled is None:
            state.ids = _load_ids(store.generation_dir(manifest.generation_id))
            state.progress = {k: int(v) for k, v in manifest.extra.get("sourceProgress", {}).items()}
        return state

    def _note_stall(self, log_id: str, state: LogState) -> None:
        """Log a line's stall once (not per record, not per restart of the loop), and keep the
        gauge on it."""
        usl_index_stalled.labels(log=log_id, kind=self.kind).set(1 if state.stalled else 0)
        key = (log_id, state.line)
        if state.stalled is None:
            if any(reported == log_id for reported, _line in self._stalled_reported):
                log.warning("%s sink: log %s resumes indexing on line %s", self.label, log_id, state.line)
            self._stalled_reported = {k for k in self._stalled_reported if k[0] != log_id}
            return
        if key in self._stalled_reported:
            return
        self._stalled_reported.add(key)
        stalled = state.stalled
        log.error("%s sink: log %s stalled: line %s (generation %s) was built under %s %s, this sink "
                  "writes %s; one line never mixes them, so this log is not indexed (the other logs "
                  "are) until `%s` switches it to a new line", self.label, log_id,
                  state.line, stalled["generationId"], stalled["what"], stalled["built"], stalled["writes"],
                  stalled["remedy"])

    def _known_logs(self) -> list[str]:
        logs = set()
        if self.root.is_dir():
            for log_dir in self.root.iterdir():
                kind_dir = log_dir / self.kind
                if (kind_dir if self.shard is None else kind_dir / self.shard.name).is_dir():
                    logs.add(log_dir.name)
        if self._ledger_path.exists():
            logs.update(orjson.loads(self._ledger_path.read_bytes()).get("logs", {}))
        return sorted(logs)

    def _start_positions(self) -> dict[TopicPartition, int]:
        """Smallest offset any known log still needs, per source partition (0 for new logs)."""
        ledger = orjson.loads(self._ledger_path.read_bytes()) if self._ledger_path.exists() else {"logs": {}}
        positions: dict[TopicPartition, int] = {}
        for source, topic in self.sources.items():
            for partition in self._partitions[source]:
                needed = []
                for log_id in self._known_logs():
                    state = self.logs.setdefault(log_id, self._load_log(log_id))
                    if state.stalled is not None:
                        continue  # reads nothing; the rebuild that ends the stall says where it resumes
                    if state.manifest is not None:
                        needed.append(int(state.manifest.source_offsets.get(topic, {}).get(partition, 0)))
                    else:
                        first = ledger["logs"].get(log_id, {}).get(f"{topic}:{partition}")
                        needed.append(0 if first is None else int(first))
                positions[TopicPartition(topic, partition)] = min(needed) if needed else 0
        return positions

    def _note_new_logs(self, first_offsets: dict[str, dict[str, int]]) -> None:
        """Before committing anything, remember where logs without a generation begin."""
        if not first_offsets:
            return
        ledger = orjson.loads(self._ledger_path.read_bytes()) if self._ledger_path.exists() else {"logs": {}}
        changed = False
        for log_id, offsets in first_offsets.items():
            entry = ledger["logs"].setdefault(log_id, {})
            for key, offset in offsets.items():
                if key not in entry or offset < entry[key]:
                    entry[key] = offset
                    changed = True
        if changed:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write(self._ledger_path, orjson.dumps(ledger))

    # -- the loop -----------------------------------------------------------------------------

    def stop(self) -> None:
        self._stop.set()

    def run(self, *, until_caught_up: bool = False, idle_exit_seconds: float | None = None) -> None:
        """Consume and commit until :meth:`stop` (or, with ``until_caught_up``, the topic end)."""
        self._consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                       isolation_level="read_committed",
                                       client_id=f"usl-sink-{self.label.replace(' ', '-')}",
                                       max_partition_fetch_bytes=8 * 1024 * 1024)
        self._publisher = WatermarkPublisher(self.bootstrap, self.settings)
        for reason in SINK_FAILURE_REASONS:  # exported at 0 so rate() and increase() see the first failure
            usl_sink_failures_total.labels(kind=self.kind, reason=reason)
        # Imported here: importing sinks.runner must not load tantivy.
        from sinks.text_writer import TextWriter

        work = self.kind if self.shard is None else f"{self.kind}.{self.shard.name}"
        if isinstance(self.writer, MergingWriter) and not until_caught_up:
            # Merges in the background; a catch-up run (rebuild, tests) merges inline, so it
            # ends with the layout it would have had.
            self.writer.background_merges = True
            self._merger = BackgroundMerger(self.writer, merge_work_root(self.settings.home, work),
                                            digests=self._digests)
        if isinstance(self.writer, TextWriter) and not until_caught_up:
            # tantivy merges in its own threads beside the commits (sinks/text_writer.py).
            self.writer.live = True
        try:
            for source, topic in self.sources.items():
                parts = self._consumer.partitions_for_topic(topic)
                deadline = time.monotonic() + 30
                while not parts and time.monotonic() < deadline:
                    time.sleep(0.5)
                    parts = self._consumer.partitions_for_topic(topic)
                owned = parts or set()
                self._partitions[source] = sorted(owned) if self.shard is None else self.shard.partitions(owned)
                if self.shard is not None and owned and not self._partitions[source]:
                    # It would never publish a watermark, so readers would never read its set.
                    raise SinkError(f"{self.label}: {topic} has {len(owned)} partitions, none of them "
                                    f"p % {self.shard.count} == {self.shard.index}; run at most "
                                    f"{len(owned)} shards")
            self._verify_current()
            positions = self._start_positions()
            for log_id, state in sorted(self.logs.items()):
                if state.manifest is not None:  # its last publish may have been lost in a crash
                    store = self._store(log_id, state.line)
                    self._publish(log_id, state.manifest, store)
                    if self._merger is not None:
                        # A merge a crash or stop took with it is planned again now, not only
                        # after the log's next commit, which a quiet log may never have.
                        self._merger.offer(log_id, store.line, state.manifest.generation_id,
                                           store.generation_dir(state.manifest.generation_id))
            self._consumer.assign(list(positions))
            for tp, offset in positions.items():
                self._consumer.seek(tp, offset)
            ends = self._consumer.end_offsets(list(positions)) if until_caught_up else {}
            first_offsets: dict[str, dict[str, int]] = defaultdict(dict)
            last_record = time.monotonic()
            while not self._stop.is_set():
                batch = self._consumer.poll(timeout_ms=round(1000 * self._poll_seconds()),
                                            max_records=self.settings.sink_batch_size)
                for tp, records in batch.items():
                    source = next(s for s, t in self.sources.items() if t == tp.topic)
                    for record in records:
                        self._handle(source, tp, record, first_offsets)
                if batch:
                    last_record = time.monotonic()
                self._backlog = sum(map(len, batch.values())) >= self.settings.sink_batch_size
                if self._merger is not None:
                    self._guarded(self._publish_merges)
                if self._should_flush():
                    if not self._guarded(lambda: self._note_new_logs(first_offsets)):
                        continue
                    first_offsets.clear()
                    self._guarded(self.flush)
                self.collect_quiet_logs()
                if until_caught_up and all(self._consumer.position(tp) >= end for tp, end in ends.items()):
                    self._note_new_logs(first_offsets)
                    self.flush(force=True)
                    return
                if idle_exit_seconds is not None and time.monotonic() - last_record > idle_exit_seconds:
                    self.flush(force=True)
                    return
        finally:
            if self._merger is not None:
                self._merger.close()
                self._merger = None
            if isinstance(self.writer, MergingWriter):
                self.writer.background_merges = False
            if isinstance(self.writer, TextWriter):
                self.writer.close_live()
            self._consumer.close()
            self._publisher.close()

    def _guarded(self, step: Callable[[], bool | None]) -> bool:
        """Run a step that writes to disk; on a disk error, log it, wait (doubling back-off)
        and return False so the loop retries it. Other errors propagate (the process exits
        non-zero and its supervisor restarts it)."""
        try:
            wrote = step()
        except Exception as exc:
            if not is_disk_error(exc):
                raise
            self._failures += 1
            usl_sink_failures_total.labels(kind=self.kind, reason="write_error").inc()
            delay = min(0.5 * 2 ** (self._failures - 1), _MAX_BACKOFF_SECONDS)
            log.error("%s sink: commit failed on a write error (%s); staging discarded, nothing "
                      "published, retry %d in %.1fs", self.label, exc, self._failures, delay)
            self._stop.wait(delay)
            return False
        if self._failures and wrote:
            log.warning("%s sink: commit succeeded again after %d failed attempt(s)", self.label,
                        self._failures)
            self._failures = 0
        return True

    def _verify_current(self) -> None:
        """Verify every known log's current generation; rebuild from L1 each one that fails."""
        for log_id in self._known_logs():
            store = self._store(log_id)
            try:
                manifest = store.current()
                if manifest is not None:
                    store.verify(manifest, digests=self._digests)
                continue
            except GenerationLockedError:
                raise
            except GenerationError as exc:
                usl_sink_failures_total.labels(kind=self.kind, reason="verification").inc()
                log.error("%s sink: the current generation of log %s on line %s fails verification "
                          "(%s); it will not be read or built on; rebuilding the log from L1 into a "
                          "new line", self.label, log_id, store.line, exc)
            self.logs.pop(log_id, None)
            self._rebuild(log_id)

    def _rebuild(self, log_id: str) -> None:
        from sinks.rebuild import rebuild

        manifest = rebuild(self.settings, self.bootstrap, self.kind, log_id=log_id, shard=self.shard)
        log.warning("%s sink: log %s rebuilt into line %s, generation %d through seq %d", self.label,
                    log_id, manifest.line, manifest.generation_id, manifest.built_through_seq)

    def _handle(self, source: str, tp: TopicPartition, record: Any, first_offsets: dict[str, dict[str, int]]) -> None:
        try:
            body = orjson.loads(record.value)
            log_id = str(body["logId"])
            kind = body["kind"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            usl_dead_letters_total.labels(stage=f"sink_{self.kind}", reason="sink_failed").inc()
            log.warning("skipping unreadable record %s@%d", tp, record.offset)
            return
        state = self.logs.get(log_id)
        if state is None:
            state = self.logs[log_id] = self._load_log(log_id)
        if state.stalled is not None:
            return  # the rebuild that ends the stall records where its line resumes
        key = f"{source}:{tp.partition}"
        manifest = state.manifest
        if manifest is not None and record.offset < manifest.source_offsets.get(tp.topic, {}).get(tp.partition, 0):
            return  # already inside the current generation
        if manifest is None:
            first_offsets[log_id].setdefault(f"{tp.topic}:{tp.partition}", record.offset)
        if kind == "progress" or kind == "tick":
            if source != "chunks" or kind == "progress":
                state.progress[key] = max(state.progress.get(key, 0), int(body["seq"]))
                self._progressed.add(log_id)
            return
        if source != "chunks":
            state.progress[key] = max(state.progress.get(key, 0), int(body["seq"]))
            self._progressed.add(log_id)
        if kind not in RECORD_KINDS:
            return
        if kind == "chunk" and body.get("provisional"):
            return
        if kind == "chunk" and manifest is not None and int(body["maxSeq"]) <= manifest.built_through_seq:
            return
        rid = record_id(body)
        if rid in state.ids or rid in state.pending_ids:
            self._duplicates_counter.inc()
            return
        state.pending.append(body)
        state.pending_ids.add(rid)
        state.pending_order.append(rid)
        self._records_counter.inc()

    def _should_flush(self) -> bool:
        now = time.monotonic()
        since_flush_ended = now - self._flush_ended
        # _watermark_moves walks the logs that got progress: only asked once it could matter.
        could_move = since_flush_ended >= _commit_gap(self.settings, self._last_flush_seconds) and not self._backlog
        return flush_due(self.settings, pending=sum(len(s.pending) for s in self.logs.values()),
                         watermark_moves=could_move and self._watermark_moves(),
                         backlog=self._backlog, since_flush_began=now - self._last_flush,
                         since_flush_ended=since_flush_ended, last_flush_seconds=self._last_flush_seconds)

    def _poll_seconds(self) -> float:
        """How long the next poll may wait for records: :data:`_POLL_SECONDS`, or less when
        :func:`flush_due` turns true sooner without new records (the batch window ends, or
        the commit gap ends while progress that may move a watermark waits for it). A poll
        that slept past that point held a quiet sink's commit back by up to a whole poll."""
        now = time.monotonic()
        wait = min(_POLL_SECONDS, self._last_flush + self.settings.sink_batch_seconds - now)
        if self._progressed and not self._backlog:
            wait = min(wait, self._flush_ended + _commit_gap(self.settings, self._last_flush_seconds) - now)
        return max(wait, 0.0)

    def _watermark_moves(self) -> bool:
        """True if a commit now would raise the watermark of a log that received progress since
        the last flush. A log whose progress does not move its watermark yet (another partition
        is behind) is dropped from the set until more progress arrives for it."""
        for log_id in list(self._progressed):
            state = self.logs.get(log_id)
            previous = state.manifest.built_through_seq if state and state.manifest else 0
            if state is not None and self.built_through(state) > previous:
                return True
            self._progressed.discard(log_id)
        return False

    def built_through(self, state: LogState) -> int:
        """min over every source partition of its progress (0 until all have reported)."""
        values = []
        for source, partitions in self._partitions.items():
            for partition in partitions:
                value = state.progress.get(f"{source}:{partition}")
                if value is None:
                    return state.manifest.built_through_seq if state.manifest else 0
                values.append(value)
        through = min(values) if values else 0
        previous = state.manifest.built_through_seq if state.manifest else 0
        return max(through, previous)

    def flush(self, *, force: bool = False) -> bool:
        """Commit a new generation for every log with new records or progress; True if any."""
        self._last_flush = time.monotonic()
        assert self._consumer is not None
        self._follow_line_switches()
        offsets: dict[str, dict[int, int]] = defaultdict(dict)
        for tp in self._consumer.assignment():
            offsets[tp.topic][tp.partition] = int(self._consumer.position(tp))
        committed = False
        for log_id, state in sorted(self.logs.items()):
            if state.stalled is not None:
                continue
            through = self.built_through(state)
            advanced = state.manifest is None or through > state.manifest.built_through_seq
            if not state.pending and not advanced:
                continue
            if not state.pending and state.manifest is None and through == 0:
                continue
            try:
                self._commit(log_id, state, through, dict(offsets))
            except RedactionPolicyMismatchError:
                # The line changed under this state (another writer committed to it): stall the
                # log as the check at load time would have.
                fresh = self._load_log(log_id)
                if fresh.stalled is None:
                    raise
                self.logs[log_id] = fresh
                if fresh.manifest is not None:
                    self._publish(log_id, fresh.manifest, self._store(log_id, fresh.line))
                continue
            committed = True
        # Only once every log's commit went through: a failed one is retried as soon as due.
        self._progressed.clear()
        self._flush_ended = time.monotonic()
        self._last_flush_seconds = self._flush_ended - self._last_flush
        return committed

    def _follow_line_switches(self) -> None:
        """A rebuild switched a log's ACTIVE line: continue on the new line, from what it holds.

        The new line's manifest says where on the derived topics it needs records from; the
        consumer seeks back there (never forward), and the skip rules drop what it has.
        """
        assert self._consumer is not None
        for log_id, state in list(self.logs.items()):
            if state.line is None or self._store(log_id).line == state.line:
                continue
            # No progress carried over from the old line: it may be past what the new line
            # holds, and a chunk at or below builtThroughSeq would then be skipped as held.
            # The records re-read from the new line's offsets deliver progress again.
            fresh = self._load_log(log_id)
            self.logs[log_id] = fresh
            log.info("%s sink: log %s switched to line %s", self.label, log_id, fresh.line)
            if fresh.manifest is None:
                continue
            # A commit of the old line may have published its watermark after the rebuild
            # published the new line's: publish the new line's again, so it is the latest.
            self._publish(log_id, fresh.manifest, self._store(log_id, fresh.line))
            for tp in self._consumer.assignment():
                needed = fresh.manifest.source_offsets.get(tp.topic, {}).get(tp.partition)
                if needed is not None and needed < self._consumer.position(tp):
                    self._consumer.seek(tp, needed)

    def _commit(self, log_id: str, state: LogState, through: int, offsets: dict[str, dict[int, int]]) -> None:
        started = time.monotonic()
        # The line this state was loaded from, not ACTIVE: a rebuild may have switched ACTIVE
        # since _follow_line_switches ran; the next flush follows it.
        store = self._store(log_id, state.line)
        previous = state.manifest
        previous_dir = store.generation_dir(previous.generation_id) if previous else None
        if previous is not None:
            # The new generation hard-links the previous one's files: a file damaged since it
            # was written must not be carried forward (raises; the restart rebuilds the log).
            store.verify(previous, digests=self._digests)
        staging = store.begin()
        try:
            records = state.pending
            self.writer.write(staging, previous_dir, records)
            write_ids(staging, state.pending_order)
            written = time.monotonic()
            describe = self.writer.describe()
            manifest = Manifest(
                kind=self.kind, log_id=log_id, line=store.line, generation_id=0, built_through_seq=through,
                schema_version=str(describe.get("schemaVersion", "1")), asp_version=ASP_VERSION,
                chunker=dict(self.versions.get("chunker", {})), embedding=describe.get("embedding"),
                redaction_policy_hash=str(self.versions.get("redactionPolicy", "")),
                source_offsets=offsets,
                progress={int(k.split(":")[1]): v for k, v in state.progress.items() if k.startswith("chunks:")},
                chunk_count=(previous.chunk_count if previous else 0) + len(records),
                extra={**describe, "sourceProgress": dict(state.progress),
                       **chunk_seq_bound(previous, records)},
            )
            committed = store.commit(staging, manifest)
        except BaseException:
            store.abort()
            raise
        # Files this commit hashed itself need no second hash. Not the reused ones: a file
        # damaged since the check above would be remembered with its old hash and never
        # caught again; those are checked (and cached) by the next commit's verify.
        committed_dir = store.generation_dir(committed.generation_id)
        reused = {(ref.path, ref.sha256) for ref in previous.segments} if previous else set()
        for ref in committed.segments:
            if (ref.path, ref.sha256) not in reused:
                self._digests.remember(committed_dir / ref.path, ref.sha256)
        usl_sink_batch_seconds.labels(kind=self.kind).observe(written - started)
        usl_sink_commit_seconds.labels(kind=self.kind).observe(time.monotonic() - written)
        usl_sink_batch_chunks.labels(kind=self.kind).observe(len(records))
        usl_generation_switches_total.labels(kind=self.kind).inc()
        state.ids.update(state.pending_ids)
        state.pending = []
        state.pending_ids = set()
        state.pending_order = []
        state.manifest = committed
        state.line = store.line
        self._publish(log_id, committed, store)
        if self.on_commit is not None:
            self.on_commit(committed)
        self._collect(log_id, store)
        if self._merger is not None:
            self._merger.offer(log_id, store.line, committed.generation_id, committed_dir)

    def _publish_merges(self) -> bool:
        """Publish each finished background merge as a new generation of its log (same
        records, same watermark); drop one whose log moved to another line or lost an input."""
        assert self._merger is not None and isinstance(self.writer, MergingWriter)
        published = False
        for job in self._merger.finished():
            try:
                state = self.logs.get(job.log_id)
                if state is None or state.manifest is None or state.line != job.line:
                    continue
                store = self._store(job.log_id, state.line)
                store.verify(state.manifest, digests=self._digests)
                committed = commit_merge(store, state.manifest, self.writer, job, digests=self._digests)
                if committed is None:
                    continue
                usl_generation_switches_total.labels(kind=self.kind).inc()
                state.manifest = committed
                self._publish(job.log_id, committed, store)
                if self.on_commit is not None:
                    self.on_commit(committed)
                self._collect(job.log_id, store)
                self._merger.offer(job.log_id, store.line, committed.generation_id,
                                   store.generation_dir(committed.generation_id))
                published = True
                log.info("%s sink: log %s merged %s in the background (%.1fs)", self.label,
                         job.log_id, ", ".join(job.names), job.seconds)
            finally:
                self._merger.settled(job)
        return published

    def _collect(self, log_id: str, store: GenerationStore) -> None:
        """Collect ``store``'s line (its expired pins, and the generations beyond the newest
        :data:`_KEEP_LAST_GENERATIONS` that no unexpired pin holds) and, when due, the log's
        retired lines. Called from the sink loop only, between commits, so it never races a
        commit of this runner; a commit of another process is safe too, since GC never touches
        a generation above the CURRENT it read or that generation itself."""
        store.gc(keep_last=_KEEP_LAST_GENERATIONS)
        self._collected[log_id] = time.monotonic()
        collect_retired_lines_due(self.root, log_id, self.kind, shard=store.shard,
                                  grace_seconds=self.settings.retired_line_grace_seconds)

    def collect_quiet_logs(self) -> list[str]:
        """Collect the line of every log not collected for ``sink_gc_interval_seconds`` (a
        commit or merge collects its own log's); return those logs. Without it, a log that gets
        no new event keeps every pin that expired since its last commit, and the generations
        those pins held, for as long as it stays quiet (docs/operations.md, "Generations and
        pins"). Stalled logs too: their lines take pins like any other. A file system error is
        logged and left for the next pass; it must not stop the sink."""
        due = time.monotonic() - self.settings.sink_gc_interval_seconds
        collected = []
        for log_id, state in sorted(self.logs.items()):
            if self._collected.get(log_id, float("-inf")) > due:
                continue
            try:
                self._collect(log_id, self._store(log_id, state.line))
            except (OSError, GenerationError) as exc:
                self._collected[log_id] = time.monotonic()
                log.warning("%s sink: collecting log %s failed (%s); retrying in %.0fs", self.label, log_id,
                            exc, self.settings.sink_gc_interval_seconds)
                continue
            collected.append(log_id)
        return collected

    def _publish(self, log_id: str, manifest: Manifest, store: GenerationStore) -> None:
        """Publish ``manifest``'s watermark and set the gauges to it: every publication (a
        commit, a background merge, the republish at start-up, after a line switch and of a
        stalled line) goes through here, so ``usl_watermark_seq`` and ``usl_generation_id``
        always show the last published watermark, also after a restart that commits nothing
        (which USLWatermarkStalled must see) and after a rebuild switched the line."""
        assert self._publisher is not None
        state = self.logs.get(log_id)
        stalled = state.stalled if state is not None and state.line == store.line else None
        self._publisher.publish(watermark_of(manifest, store, self.versions, stalled))
        usl_generation_id.labels(log=log_id, kind=self.kind).set(manifest.generation_id)
        usl_watermark_seq.labels(log=log_id, kind=self.kind).set(manifest.built_through_seq)
