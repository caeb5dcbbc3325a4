"""``usl status`` and ``GET /v1/status``: committed L1 seq per log and, per index, its
generation, watermark, lag (seqs and seconds), last commit, a one-line verdict and, while it
lags, ``heldBy``: the first event above its watermark (seq, session, turn, event time). An index
is built through a seq only once every event up to it is inside an emitted chunk, so a stuck
watermark names the open unit that holds it back (SPEC §10, invariant 11).

``heldBy`` names a session, so what the API answers goes through :func:`for_principal`: a
caller sees the session and turn ids only of a session it may read (the seq and time stay, so
every caller still sees that and when a log is held back).

L1 seqs are positions in a partition that several logs may share, so what status reports of a
log counts that log's events alone: ``heldBy`` is the first event *of the log* above the
watermark and ``lagSeqs`` the log's events above it (read from L1 up to ``_SCAN_LIMIT`` records
past the watermark; what lies beyond is counted whole). An index held back by an open unit (a
turn with no end yet) is ``waiting``, not ``catching up``: it moves once the turn ends.

A sink that cannot extend a log's line (built under another redaction policy or chunker than the
sink writes, :func:`sinks.runner.stall_of`) publishes the line's watermark with a ``stalled``
entry; the index then shows it (``stalled``) and the verdict ``stalled: ...`` naming the
rebuild that ends it. A ``log`` that does not exist is a :class:`planner.exceptions.NotFound`.

Each index shows the ``redactionPolicy`` hash its watermark records, and a log whose
chunk-keyed indexes disagree on it (or on the chunker) has a ``mismatch`` entry saying which
and what to run: searches of that log are refused meanwhile (:mod:`planner.coherence`).

Each log also shows its ``deadLetters``: how many records of it were rejected (by stage) and
when the newest was, pending ones only (a letter a later import resolved, the record taken
since, is not counted: :meth:`streams.l1.DeadLetters.resolve`), so an import that lost lines shows in status, not only in
``usl deadletters``; letters that name no log (unreadable before their log was known) are
counted in the report's own ``deadLetters``, and so are those of a log that has no event in L1
(``logsWithoutEvents``: every record of its import was rejected). Counts, stages and times only: a reason can name
another tenant's session, and reading them is the operator's ``usl deadletters``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from planner.acl import Principal
from planner.coherence import CHUNK_KINDS, ChunkOrigin, find_mismatch, origins_of_watermark, remedy
from planner.exceptions import NotFound
from planner.snapshot import published_stall
from sinks.kinds import ALL_KINDS
from streams.settings import Settings
from streams.topics import Topics

if TYPE_CHECKING:
    from kafka import KafkaConsumer, TopicPartition

__all__ = ["INDEX_KINDS", "DeadLetterTally", "StatusSources", "build_status", "collect_status", "export_status_metrics", "for_principal", "held_by"]

INDEX_KINDS = ALL_KINDS
#: L1 records read past a log's lowest watermark to find and count its own unindexed events
#: (its partition may be shared); the rest, if any, is counted as the log's.
_SCAN_LIMIT = 20_000
_UNIT_ENDS = frozenset({"turn.ended", "episode.ended", "session.ended"})


class DeadLetterTally:
    """Dead letters per log, read on from where the previous read ended through one kept
    consumer (:class:`streams.l1.TopicTail`): the API's status (also behind every ``/metrics``
    scrape) reads only what was written since, not the topic's 30 days again. Letters the topic
    no longer holds (retention) are forgotten. One thread at a time: :class:`StatusSources`
    reads and closes it under its lock."""

    def __init__(self) -> None:
        self._tail: Any = None  # streams.l1.TopicTail, made by the first read
        # offset, logId, stage, time and resolution key of each pending letter still on the topic:
        # a few bytes each, and the topic holds only what failed.
        self._letters: list[tuple[int, str | None, str | None, str | None, tuple[Any, Any, Any] | None]] = []

    def read(self, bootstrap: str, settings: Settings) -> dict[str | None, dict[str, Any]]:
        """``{logId or None: {"count", "byStage", "newest"}}`` of the letters on the topic now."""
        tally: dict[str | None, dict[str, Any]] = {}
        for _, log_id, stage, at, _key in self._read_on(bootstrap, settings):
            entry = tally.setdefault(log_id, {"count": 0, "byStage": {}, "newest": None})
            entry["count"] += 1
            entry["byStage"][stage or "unknown"] = entry["byStage"].get(stage or "unknown", 0) + 1
            entry["newest"] = at or entry["newest"]  # the topic is in the order they were written
        return tally

    def _read_on(self, bootstrap: str,
                 settings: Settings) -> list[tuple[int, str | None, str | None, str | None, tuple[Any, Any, Any] | None]]:
        from streams.l1 import TopicTail, letter_of, resolution_key

        if self._tail is None:
            self._tail = TopicTail(bootstrap, Topics.from_settings(settings).deadletters)
        restarted, records, first = self._tail.read()
        if restarted:
            self._letters = []
        held = first.get(0, 0)
        self._letters = [letter for letter in self._letters if letter[0] >= held]
        for record in records:
            letter = letter_of(record)
            key = resolution_key(letter)
            if letter.get("resolves"):
                # A later import took the record: its earlier letters are no longer pending.
                self._letters = [kept for kept in self._letters if kept[4] is None or kept[4] != key]
                continue
            log_id, stage, at = letter.get("logId"), letter.get("stage"), letter.get("time")
            self._letters.append((record.offset, log_id if isinstance(log_id, str) else None,
                                  stage if isinstance(stage, str) else None, at if isinstance(at, str) else None, key))
        return self._letters

    def close(self) -> None:
        if self._tail is not None:
            self._tail.close()
            self._tail = None


class StatusSources:
    """What a status collect reads through, kept between collects: the watermarks, the logs'
    committed L1 seqs (each through a consumer of its own) and the dead-letter tally. The API
    keeps one for its life: a new kafka-python client costs ~100 ms of connection and metadata,
    and a cold ``/v1/status`` took ~0.6 s, mostly three of them. ``usl status`` without an API
    makes one for its collect."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # kafka-python consumers serve one thread at a time
        self._closed = False
        self.dead_letters = DeadLetterTally()
        self._bootstrap: str | None = None
        self._watermarks: Any = None  # sinks.watermarks.WatermarkReader
        self._reader: Any = None  # streams.l1.L1Reader, over a registry that keeps its consumer

    def read(self, bootstrap: str, settings: Settings) -> tuple[dict[tuple[str, str], dict[str, Any]],
                                                                dict[str, int], dict[str, int],
                                                                dict[str | None, dict[str, Any]]]:
        """The watermarks, then each log's committed L1 seq; each log's partition; and the dead
        letters (:meth:`DeadLetterTally.read`)."""
        if self._lock.acquire(blocking=False):
            try:
                if not self._closed:
                    return self._read(bootstrap, settings)
            finally:
                self._lock.release()
        # Another collect is reading through the kept consumers (the API's threads), or the API
        # has closed them: this one reads through its own, as every collect did before they were
        # kept, rather than queue behind one that may wait 30 s on an unreachable broker, or
        # reopen consumers no one would close.
        alone = StatusSources()
        try:
            return alone.read(bootstrap, settings)
        finally:
            alone.close()

    def _read(self, bootstrap: str, settings: Settings) -> tuple[dict[tuple[str, str], dict[str, Any]],
                                                                 dict[str, int], dict[str, int],
                                                                 dict[str | None, dict[str, Any]]]:
        # Imported here: `usl status` through the API only renders the report.
        from sinks.watermarks import WatermarkReader
        from streams.l1 import L1Reader, LogRegistry

        if self._bootstrap != bootstrap:
            self._close()
        self._bootstrap = bootstrap
        try:
            if self._watermarks is None:
                self._watermarks = WatermarkReader(bootstrap, settings)
            # Watermarks first: a sink publishes one only for seqs already committed in L1, so
            # an L1 seq read after it is at or above it. Read the other way round, a commit
            # between the two reads showed builtThroughSeq above l1CommittedSeq (1 poll in 57
            # under load).
            watermarks = self._watermarks.read()
            if self._reader is None:
                registry = LogRegistry(bootstrap, settings, keep_consumer=True, refresh=False)
                self._reader = L1Reader(bootstrap, settings, registry=registry)
            l1_seqs = self._reader.committed_seqs()
            return watermarks, l1_seqs, self._reader.registry.logs, self.dead_letters.read(bootstrap, settings)
        except Exception:
            self._close()  # the next collect connects afresh
            raise

    def open(self) -> None:
        """Keep consumers again after :meth:`close` (the app started once more)."""
        with self._lock:
            self._closed = False

    def close(self) -> None:
        """Close the kept consumers, once no collect reads through them; until :meth:`open`,
        collects read through consumers of their own (the API is stopping)."""
        with self._lock:
            self._closed = True
            self._close()

    def _close(self) -> None:
        if self._watermarks is not None:
            self._watermarks.close()
            self._watermarks = None
        if self._reader is not None:
            self._reader.close()
            self._reader.registry.close()
            self._reader = None
        self.dead_letters.close()


def _no_dead_letters() -> dict[str, Any]:
    return {"count": 0, "byStage": {}, "newest": None}


class Unindexed:
    """What L1 holds of a log above each of its watermarks (keys: ``(log, through + 1)``)."""

    def __init__(self) -> None:
        self.append_time: dict[tuple[str, int], float] = {}
        """Broker append time (seconds) of the log's first event above the watermark."""
        self.held: dict[tuple[str, int], dict[str, Any]] = {}
        """The :func:`held_by` entry of that event."""
        self.pending: dict[tuple[str, int], int] = {}
        """The log's events above the watermark."""
        self.open_unit: set[tuple[str, int]] = set()
        """Watermarks whose first unindexed event is in a turn (or episode) with no end yet."""


def _unindexed(bootstrap: str, settings: Settings, partition_of: dict[str, int], l1_seqs: dict[str, int],
               wanted: dict[str, set[int]]) -> Unindexed:
    """Read each wanted log's partition once, from its lowest wanted watermark (a builtThroughSeq)
    up, keeping the records of that log only, and tell for every wanted watermark what is above
    it (:class:`Unindexed`)."""
    found = Unindexed()
    if not any(wanted.values()):
        return found
    from kafka import KafkaConsumer, TopicPartition

    import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)

    topic = Topics.from_settings(settings).l1
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level="read_committed")
    try:
        for log_id, throughs in wanted.items():
            if log_id not in partition_of or not throughs:
                continue
            tp = TopicPartition(topic, partition_of[log_id])
            start = min(throughs)
            end = min(l1_seqs.get(log_id, 0), start + _SCAN_LIMIT)
            mine = _read_log(consumer, tp, log_id, start, end)
            for through in throughs:
                key = (log_id, through + 1)
                above = [record for record in mine if record[0] > through]
                found.pending[key] = len(above) + max(l1_seqs.get(log_id, 0) - max(end, through), 0)
                if not above:
                    continue
                seq, timestamp, raw, event = above[0]
                found.append_time[key] = timestamp
                found.held[key] = held_by(seq, raw)
                if end >= l1_seqs.get(log_id, 0) and _unit_open(event, [later for _, _, _, later in above[1:]]):
                    found.open_unit.add(key)
    finally:
        consumer.close()
    return found


def _read_log(consumer: KafkaConsumer, tp: TopicPartition, log_id: str, after: int,
              through: int) -> list[tuple[int, float, bytes | None, dict[str, Any]]]:
    """(seq, append time, raw value, event) of the records of ``log_id`` with ``after < seq <=
    through`` on ``tp``; a record that names no log (unreadable: dead-lettered) is nobody's."""
    out: list[tuple[int, float, bytes | None, dict[str, Any]]] = []
    if through <= after:
        return out
    consumer.assign([tp])
    consumer.seek(tp, after)
    deadline = time.monotonic() + 10
    while consumer.position(tp) < through and time.monotonic() < deadline:
        for record in consumer.poll(timeout_ms=1000, max_records=5000).get(tp, []):
            seq = record.offset + 1
            if seq > through:
                return out
            try:
                event = orjson.loads(record.value or b"")
            except orjson.JSONDecodeError:
                continue
            if isinstance(event, dict) and event.get("logId") == log_id:
                out.append((seq, record.timestamp / 1000.0, record.value, event))
    return out


def _unit_open(event: dict[str, Any], later: list[dict[str, Any]]) -> bool:
    """Whether ``event`` is in a turn or episode that none of the ``later`` events of its log
    ends: no end event of it or of its session, no event of another unit of the session."""
    unit = ("episodeId", event.get("episodeId")) if event.get("episodeId") else ("turnId", event.get("turnId"))
    if not unit[1]:
        return False
    session = event.get("sessionId")
    for other in later:
        if other.get("sessionId") != session:
            continue
        if other.get("type") == "session.ended" or other.get(unit[0]) != unit[1]:
            return False
        if other.get("type") in _UNIT_ENDS:
            return False
    return True


def held_by(seq: int, raw: bytes | None) -> dict[str, Any]:
    """The ``heldBy`` entry of the L1 record ``raw`` at ``seq``: its seq, and the ``sessionId``,
    ``turnId`` and event ``time`` it names (None where unreadable: a bad record is
    dead-lettered, it holds nothing back for long), and the ``tenant`` of its ``acl``
    (None without one), which :func:`for_principal` needs and removes."""
    try:
        event = orjson.loads(raw or b"")
    except orjson.JSONDecodeError:
        event = None
    if not isinstance(event, dict):
        event = {}

    def text(key: str) -> str | None:
        value = event.get(key)
        return value if isinstance(value, str) else None

    acl = event.get("acl")
    tenant = acl.get("tenant") if isinstance(acl, dict) else None
    return {"seq": seq, "sessionId": text("sessionId"), "turnId": text("turnId"), "time": text("time"),
            "tenant": tenant if isinstance(tenant, str) else None}


def for_principal(report: dict[str, Any], principal: Principal | None,
                  readable: Callable[[str, str], bool] | None = None) -> dict[str, Any]:
    """``report`` as ``principal`` may see it: in each ``heldBy``, the ``sessionId`` and
    ``turnId`` only when the principal may read the held event's session
    (``readable(log, session)``, by its latest access list, as every answer judges it; the API
    asks its planner; without it, or when it cannot tell, the ids are withheld), and no
    ``tenant`` at all. ``None`` is the operator reading the broker itself (``usl status``
    without an API): every id stays. The report itself (a cached, shared document) is not
    changed."""
    logs: dict[str, Any] = {}
    resolved: dict[tuple[str, str], bool] = {}
    for log_id, entry in report["logs"].items():
        indexes: dict[str, Any] = {}
        for kind, index in entry["indexes"].items():
            held = index.get("heldBy")
            if held:
                tenant = held.get("tenant")
                own = principal is None
                if not own and held.get("sessionId") and readable is not None \
                        and (tenant is None or tenant == principal.tenant):  # type: ignore[union-attr]
                    key = (log_id, held["sessionId"])
                    if key not in resolved:  # several indexes often wait on the same event
                        resolved[key] = readable(*key)
                    own = resolved[key]
                held = {"seq": held["seq"], "sessionId": held["sessionId"] if own else None,
                        "turnId": held["turnId"] if own else None, "time": held["time"]}
            indexes[kind] = {**index, "heldBy": held}
        logs[log_id] = {**entry, "indexes": indexes}
    return {**report, "logs": logs}


def build_status(l1_seqs: dict[str, int], watermarks: dict[tuple[str, str], dict[str, Any]],
                 append_time: dict[tuple[str, int], float], *, now: float,
                 held: Mapping[tuple[str, int], dict[str, Any]] | None = None,
                 origins: Mapping[tuple[str, str], Sequence[ChunkOrigin]] | None = None,
                 pending: Mapping[tuple[str, int], int] | None = None,
                 open_unit: Collection[tuple[str, int]] = (),
                 dead_letters: Mapping[str | None, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The status document (pure, so the API and CLI agree and tests can call it). Keyed by
    (log, builtThroughSeq + 1): ``append_time`` and ``held``, the append time and the
    :func:`held_by` entry of the log's first event above a watermark; ``pending``, the log's
    events above it (without it, every seq above it counts); ``open_unit``, the watermarks whose
    first such event is in a turn not ended yet. ``origins``: what built each watermark's
    generations (:func:`planner.coherence.origins_of_watermark`), per (log, kind);
    ``dead_letters``: :meth:`DeadLetterTally.read`."""
    letters = dead_letters or {}
    logs: dict[str, Any] = {}
    log_ids = sorted(set(l1_seqs) | {log for log, _ in watermarks})
    for log_id in log_ids:
        l1_seq = l1_seqs.get(log_id, 0)
        indexes: dict[str, Any] = {}
        for kind in INDEX_KINDS:
            wm = watermarks.get((log_id, kind))
            if wm is None:
                indexes[kind] = {"generationId": None, "builtThroughSeq": None,
                                 "lagSeqs": (pending or {}).get((log_id, 1), l1_seq),
                                 "lagSeconds": None, "lastCommit": None, "line": None,
                                 "verdict": "missing: no generation committed yet", "heldBy": None,
                                 "stalled": None}
                continue
            through = int(wm["builtThroughSeq"])
            key = (log_id, through + 1)
            lag = max((pending or {}).get(key, l1_seq - through), 0)
            oldest = append_time.get(key) if lag else None
            lag_seconds = 0.0 if lag == 0 else (round(max(now - oldest, 0.0), 3) if oldest else None)
            heldby = (held or {}).get(key) if lag else None
            stalled = published_stall(wm, log_id)
            if stalled is not None:
                verdict = (f"stalled: built under {stalled['what']} {stalled['built']}, this code writes "
                           f"{stalled['writes']}; not indexing until `{stalled['remedy']}`")
            elif lag == 0:
                verdict = "ok: caught up"
            elif key in open_unit and heldby is not None:
                verdict = (f"waiting: an open turn holds seq {heldby['seq']}; it is indexed once the turn "
                           "ends or idles out")
            elif lag_seconds is not None and lag_seconds > 60:
                verdict = f"behind: {lag} seqs, oldest unindexed event appended {lag_seconds:.0f}s ago"
            else:
                verdict = f"catching up: {lag} seqs behind"
            shards = wm.get("shards")
            if isinstance(shards, dict) and wm.get("shard") and lag and stalled is None:
                verdict += f" (slowest shard: {wm['shard']})"
            indexes[kind] = {
                "generationId": wm["generationId"], "builtThroughSeq": through, "lagSeqs": lag,
                "lagSeconds": lag_seconds, "lastCommit": wm.get("committedAt"), "line": wm.get("line", "live"),
                "verdict": verdict, "heldBy": heldby, "stalled": stalled,
            }
            if isinstance(shards, dict):  # sink shards: the kind's watermark is their minimum
                indexes[kind]["shards"] = {
                    name: {"generationId": shard["generationId"], "builtThroughSeq": int(shard["builtThroughSeq"]),
                           "lagSeqs": max(l1_seq - int(shard["builtThroughSeq"]), 0),
                           "line": shard.get("line", "live")}
                    for name, shard in sorted(shards.items())}
        for kind, index in indexes.items():
            policies = sorted({origin.policy for origin in (origins or {}).get((log_id, kind), ())
                               if origin.policy})
            index["redactionPolicy"] = " / ".join(policies) or None
        logs[log_id] = {"l1CommittedSeq": l1_seq, "indexes": indexes,
                        "mismatch": _mismatch(log_id, origins or {}, indexes),
                        "deadLetters": letters.get(log_id) or _no_dead_letters()}
    # A log whose every record was rejected has no events in L1, so no entry above: its letters
    # are what says why (an import that appended nothing).
    only_letters = {log: letters[log] for log in sorted(log for log in letters if log is not None and log not in logs)}
    return {"logs": logs, "generatedAt": now,
            "deadLetters": {**(letters.get(None) or _no_dead_letters()), "logsWithoutEvents": only_letters}}


def _mismatch(log_id: str, origins: Mapping[tuple[str, str], Sequence[ChunkOrigin]],
              indexes: dict[str, Any]) -> dict[str, Any] | None:
    """The log's ``mismatch`` entry (None: its chunk-keyed indexes agree, as far as their
    manifests record); the verdict of each index involved says so too."""
    mismatch = find_mismatch(origin for kind in CHUNK_KINDS for origin in origins.get((log_id, kind), ()))
    if mismatch is None:
        return None
    values = mismatch.by_kind()
    for kind, value in values.items():
        if indexes[kind].get("stalled"):
            continue  # not indexing says more; the mismatch line under the table says the rest
        others = ", ".join(f"{other} {theirs}" for other, theirs in values.items() if theirs != value)
        indexes[kind]["verdict"] = (f"mismatch: {mismatch.what} {value}, unlike {others}; searches "
                                    f"are refused until `usl rebuild all --log {log_id}`")
    return {"what": mismatch.what, "indexes": values, "message": mismatch.message(log_id),
            "remedy": remedy(log_id)}


def export_status_metrics(report: dict[str, Any]) -> None:
    """Set the freshness gauges (committed L1 seq, lag in seqs and seconds) from a status report."""
    from streams.metrics import usl_index_lag_seconds, usl_index_lag_seqs, usl_l1_committed_seq

    for log_id, entry in report["logs"].items():
        usl_l1_committed_seq.labels(log=log_id).set(entry["l1CommittedSeq"])
        for kind, index in entry["indexes"].items():
            usl_index_lag_seqs.labels(log=log_id, kind=kind).set(index["lagSeqs"])
            if index["lagSeconds"] is not None:
                usl_index_lag_seconds.labels(log=log_id, kind=kind).set(index["lagSeconds"])


def collect_status(settings: Settings, bootstrap: str, *, log_id: str | None = None,
                   sources: StatusSources | None = None) -> dict[str, Any]:
    """The status report (:func:`build_status`), read through ``sources`` (the API's, kept
    between collects) or through readers made for this collect alone."""
    own = sources is None
    readers = sources or StatusSources()
    try:
        return _collect(settings, bootstrap, log_id, readers)
    finally:
        if own:
            readers.close()


def _collect(settings: Settings, bootstrap: str, log_id: str | None, sources: StatusSources) -> dict[str, Any]:
    watermarks, l1_seqs, partition_of, letters = sources.read(bootstrap, settings)
    if log_id is not None:
        watermarks = {k: v for k, v in watermarks.items() if k[0] == log_id}
        letters = {log_id: letters[log_id]} if log_id in letters else {}
        if log_id not in partition_of and not watermarks and not letters:  # rejected whole: its letters say why
            raise NotFound(f"no log named {log_id!r}",
                           hint="`usl status` without --log lists the logs; ingest events into this one first.")
        l1_seqs = {log_id: l1_seqs.get(log_id, 0)}
    wanted: dict[str, set[int]] = {}
    for log in l1_seqs:
        throughs = {int(wm["builtThroughSeq"]) for (of, _kind), wm in watermarks.items() if of == log}
        if any((log, kind) not in watermarks for kind in INDEX_KINDS):
            throughs.add(0)  # a missing index lags by every event of the log
        wanted[log] = {through for through in throughs if l1_seqs[log] > through}
    found = _unindexed(bootstrap, settings, partition_of, l1_seqs, wanted)
    root = Path(settings.home).resolve() / "indexes"  # sinks.runner.index_root, without its imports
    origins = {(log, kind): origins_of_watermark(root, log, kind, wm) for (log, kind), wm in watermarks.items()}
    report = build_status(l1_seqs, watermarks, found.append_time, now=time.time(), held=found.held,
                          origins=origins, pending=found.pending, open_unit=found.open_unit,
                          dead_letters=letters)
    report["bootstrap"] = bootstrap
    return report
