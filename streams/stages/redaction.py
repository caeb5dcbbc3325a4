"""The redaction stage: L1 records in, redacted events, tool results and log-clock ticks out.

For each L1 record, in offset order: validate it (else dead-letter), admit it (session
ownership, eventId dedup with first-seq-wins, its access list resolved: :mod:`streams.ownership`),
redact it with its session's memory of the secrets it removed before (``session-secrets``:
:mod:`streams.redaction.memory`), send the redacted event (and the full tool result, to its own topic) keyed by the
redacted session id, and advance the log's clock, broadcasting a tick to every partition of both
derived topics when the clock passes a multiple of K (:mod:`streams.ticks`).

Replaying a record is safe: the clock ignores seqs it passed, admission resolves a record to the
decision it got the first time, and the chunking stage skips events it already applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

import orjson

from streams.asp import loads_event, validate_event
from streams.exceptions import USLError
from streams.ownership import admit
from streams.redaction.memory import Recall, merge_remembered
from streams.settings import Settings
from streams.stages.effects import Effects, Metric, Produce, Record, TableWrite, TopicRole
from streams.stages.gaps import Gaps
from streams.stages.keys import (
    CHUNKER_PROGRESS,
    EVENT_FIRST_SEQ,
    LOG_CLOCKS,
    SESSION_OWNERS,
    SESSION_SECRETS,
    digest_key,
    is_offset_key,
    offset_key,
    progress_key,
)
from streams.stages.records import memory_key as session_memory_key
from streams.stages.records import redact_admitted
from streams.ticks import (
    advance_clock,
    clock_record,
    clock_record_time,
    clock_time,
    event_clock_time,
    flush_tick,
    new_clock,
    quiet_clock_due,
)

__all__ = ["RedactionStage", "State", "dead_letter"]

_ROLE_OF_KIND: dict[str, TopicRole] = {"event": "redacted", "toolresult": "toolresults",
                                         "toolcall": "toolresults"}
"""The derived topic each kind of record (:mod:`streams.stages.records`) is sent to."""


class State(Protocol):
    """Read access to one state table: a faust table in the worker, a dict in tests."""

    def get(self, key: str, /) -> Any: ...


def dead_letter(stage: str, reason_code: str, reason: str, source: dict[str, Any], raw_value: bytes,
                log_id: str | None = None) -> list[Any]:
    """The record and the metric of a dead letter. Its reason is redacted and its raw value cut to
    a redacted excerpt: the dead-letter topic must hold no secret either. ``log_id`` when the
    record was read far enough to name its log (``usl deadletters --log``)."""
    from streams.l1 import dead_letter_excerpt
    from streams.redaction import redact_text

    safe_raw = dead_letter_excerpt(raw_value.decode("utf-8", errors="replace"))
    letter = {"stage": stage, "reason": redact_text(reason)[0], "record": None, "source": source, "raw": safe_raw}
    if log_id is not None:
        letter["logId"] = log_id
    return [Produce("deadletters", stage.encode(), orjson.dumps(letter)),
            Metric("usl_dead_letters_total", (("stage", stage), ("reason", reason_code)))]


class RedactionStage:
    """Applies batches of L1 records; holds the state tables it reads and, per log, the highest
    seq this process handled itself (what a flush tick may claim)."""

    def __init__(self, settings: Settings, *, tables: Mapping[str, State], gaps: Gaps, policy: str) -> None:
        self.settings = settings
        self.tables = tables
        self.gaps = gaps
        self.policy = policy
        # Per log, the highest seq this process itself has handled. A flush tick claims only these:
        # the clock restored from the changelog may be ahead of what the previous owner's producer
        # delivered before it died, while this process's own sends precede its tick on each partition.
        self.handled: dict[str, int] = {}
        # Per L1 partition, the highest seq this process handled there, of any log, and each
        # handled log's partition: logs share a partition once every partition is owned, and a
        # log's records end where its partition's handled records do, whoever's they are.
        self.handled_on: dict[int, int] = {}
        self.partition_of: dict[str, int] = {}
        self.last_flush: dict[str, int] = {}
        # Per log, (its clock's last seq, when this process first saw the clock there): how long
        # the log has been quiet. And per log, the last seq a clock record was sent after.
        self.quiet_since: dict[str, tuple[int, float]] = {}
        self.clock_sent: dict[str, int] = {}

    def apply(self, batch: list[Record]) -> Effects:
        """The effects of a batch of L1 records in offset order. Reads see the batch's own
        writes; each table key is written at most once."""
        effects = Effects(metrics=[Metric("usl_records_total", (("stage", "redaction"),), len(batch))])
        writes: dict[tuple[str, str], tuple[int, Any]] = {}  # (table, key) -> (partition, value)
        seen: dict[int, int] = {}  # partition -> offset of the last record applied in this batch

        def read(table: str, key: str) -> Any:
            held = writes.get((table, key))
            return held[1] if held is not None else self.tables[table].get(key)

        def emit(*items: Any) -> None:
            for item in items:
                (effects.metrics if isinstance(item, Metric) else effects.records).append(item)

        for record in batch:
            partition, offset = record.partition, record.offset
            last = seen[partition] if partition in seen else read(LOG_CLOCKS, offset_key(partition))
            if self.gaps.hole((record.topic, partition), offset, last):
                effects.holes.append((record.topic, partition))
                continue
            seen[partition] = offset
            writes[LOG_CLOCKS, offset_key(partition)] = (partition, offset)
            seq = offset + 1
            source = {"topic": record.topic, "partition": partition, "offset": offset}
            try:
                # A record without a value (None) is refused by the parser like any unreadable JSON.
                body = loads_event(cast(bytes, record.value))
                stamp = clock_record_time(body)
                if stamp is not None:
                    emit(*self._clock_record(body["logId"], seq, stamp, record, read, writes, effects))
                    continue
                event = validate_event(body, record=f"{record.topic}[{partition}]@{offset}")
            except (orjson.JSONDecodeError, USLError) as exc:
                code = "duplicate_keys" if "duplicate key" in str(exc) else "schema"
                emit(*dead_letter("redaction", code, str(exc), source, record.value or b""))
                continue
            log_id = event["logId"]
            # The record's timestamp is its append time (its producer set it; it replays as stored).
            clock = read(LOG_CLOCKS, log_id) or new_clock()
            when = event_clock_time(event, record.timestamp, self.settings.max_clock_skew_seconds, clock["maxTime"])
            dedup_key = digest_key(log_id, event["eventId"])
            owner_key = digest_key(log_id, event["sessionId"])
            admission = admit(event, seq, session=read(SESSION_OWNERS, owner_key), first=read(EVENT_FIRST_SEQ, dedup_key))
            if admission.verdict == "duplicate":
                emit(Metric("usl_duplicate_events_total", (("stage", "redaction"),)))
            elif admission.event is None:
                emit(*dead_letter("redaction", admission.reason_code or "schema", admission.reason or "rejected",
                                  source, record.value or b"", log_id))
            else:
                memory_key = session_memory_key(log_id, admission.event)
                remembered = read(SESSION_SECRETS, memory_key)
                recall = Recall(memory_key, remembered, seq)
                produced, redacted = self._redacted(admission.event, log_id, seq, when, source, recall)
                emit(*produced)
                if redacted:
                    if admission.event_id is not None:
                        writes[EVENT_FIRST_SEQ, dedup_key] = (partition, admission.event_id)
                    if admission.session is not None:
                        writes[SESSION_OWNERS, owner_key] = (partition, admission.session)
                    merged = merge_remembered(remembered, recall.added, seq)
                    if merged is not None:
                        writes[SESSION_SECRETS, memory_key] = (partition, merged)
            clock, tick = advance_clock(clock, log_id, seq, when, self.settings.tick_every_seqs)
            if tick is not None:
                emit(*self._broadcast(tick))
            writes[LOG_CLOCKS, log_id] = (partition, clock)
            effects.handled[log_id] = max(effects.handled.get(log_id, 0), seq)
            effects.handled_on[partition] = seq
            effects.partition_of[log_id] = partition
        effects.writes = [TableWrite(table, partition, key, value)
                          for (table, key), (partition, value) in writes.items()]
        return effects

    def _clock_record(self, log_id: str, seq: int, stamp: float, record: Record, read: Any,
                      writes: dict[tuple[str, str], tuple[int, Any]], effects: Effects) -> list[Any]:
        """A clock record of ``log_id`` at ``seq``: the log's clock moves to its time (bounded as
        an event's) and a quiet tick goes to every partition (:mod:`streams.ticks`)."""
        clock = read(LOG_CLOCKS, log_id) or new_clock()
        when = clock_time(stamp, record.timestamp, self.settings.max_clock_skew_seconds, clock["maxTime"])
        clock, tick = advance_clock(clock, log_id, seq, when, self.settings.tick_every_seqs, quiet=True)
        writes[LOG_CLOCKS, log_id] = (record.partition, clock)
        effects.handled[log_id] = max(effects.handled.get(log_id, 0), seq)
        effects.handled_on[record.partition] = seq
        effects.partition_of[log_id] = record.partition
        return self._broadcast(tick) if tick is not None else []

    def _redacted(self, event: dict[str, Any], log_id: str, seq: int, when: float | None,
                  source: dict[str, Any], recall: Recall) -> tuple[list[Any], bool]:
        """The records of an admitted event (its acl resolved: what every index sees) and True,
        or its dead letter and False when a redaction rule fails."""
        try:
            redacted = redact_admitted(event, log_id, seq, policy=self.policy, clock_time=when, recall=recall)
        except Exception as exc:  # a rule bug must not stop the log; the event is dead-lettered
            return dead_letter("redaction", "redaction_failed", f"redaction failed: {type(exc).__name__}", source, b"",
                               log_id), False
        items: list[Any] = [Metric("usl_redactions_total", (("rule", rule),), count) for rule, count in redacted.hits.items()]
        key = redacted.event["sessionId"].encode()
        items += [Produce(_ROLE_OF_KIND[body["kind"]], key, orjson.dumps(body)) for body in redacted.records]
        return items, True

    def _broadcast(self, tick: dict[str, Any]) -> list[Any]:
        """``tick`` to every partition of both derived topics, each acknowledged before the clock
        that passed it is written."""
        body = orjson.dumps(tick)
        roles: tuple[TopicRole, ...] = ("redacted", "toolresults")
        items: list[Any] = [Produce(role, tick["logId"].encode(), body, partition=partition, confirm=True)
                            for role in roles for partition in range(self.settings.stream_partitions)]
        kind = "flush" if tick["flush"] else "quiet" if tick.get("quiet") else "regular"
        items.append(Metric("usl_ticks_total", (("kind", kind),)))
        return items

    def commit(self, effects: Effects) -> None:
        """The batch's writes (or a flush's ticks) are durable: remember what it handled."""
        for log_id, seq in effects.handled.items():
            self.handled[log_id] = max(self.handled.get(log_id, 0), seq)
        for partition, seq in effects.handled_on.items():
            self.handled_on[partition] = max(self.handled_on.get(partition, 0), seq)
        self.partition_of.update(effects.partition_of)
        for log_id, seq in effects.flushed.items():
            self.last_flush[log_id] = seq

    def flush(self, restored: Mapping[Any, int], committed: Mapping[int, int]) -> Effects:
        """Flush ticks for every log with seqs no flush tick has claimed yet.

        A flush tick may claim, per log, what this process handled itself and, for a log whose
        clock it restored from the changelog (``restored``: key -> L1 partition), what the
        consumer group has committed on that partition (``committed``: partition -> offset, for
        the partitions assigned to this process). faust flushes its producer before it commits
        offsets, so every record below a committed offset had its sends delivered. Without the
        second part a log went quiet for good when its partition moved to a worker right after
        the previous owner handled its last records but before that owner's flush tick: the new
        owner had nothing to handle, so no flush tick ever released the last seqs.
        """
        claims = dict(self.handled)
        for log_id, partition in self.partition_of.items():
            claims[log_id] = max(claims.get(log_id, 0), self.handled_on.get(partition, 0))
        for key, partition in list(restored.items()):
            if is_offset_key(key) or not isinstance(key, str):
                continue
            claims[key] = max(claims.get(key, 0), self.handled_on.get(partition, 0), int(committed.get(partition) or 0))
        claims = {log_id: seq for log_id, seq in claims.items() if seq}
        effects = Effects()
        for log_id, seq in claims.items():
            clock = self.tables[LOG_CLOCKS].get(log_id)
            if not clock:
                continue
            # What the tick releases, not what was claimed: a claim past this process's clock (the
            # group committed further than the clock it holds) must be claimed again once the
            # clock gets there, or the log's last seqs wait for another event.
            # Records of other logs after this log's last one on its partition hold none of its
            # events, so the partition's applied offset (stored with the clocks) ends the log too:
            # without it, appending to one log left every log sharing its partition "behind"
            # those seqs for good (wait:N timed out, status never caught up).
            home = self.partition_of.get(log_id, restored.get(log_id))
            applied = self.tables[LOG_CLOCKS].get(offset_key(home)) if home is not None else None
            # The partition's last offsets after the last record applied may hold no committed
            # record (a transactional producer's last marker, an aborted transaction): once the
            # broker said so, they end the log as a record there would. Else the log's last seq
            # (the committed seq, the last stable offset) was never released.
            empty_end = (None if applied is None or home is None
                         else self.gaps.empty_after((self.settings.topic("l1"), home), int(applied)))
            if empty_end is not None:
                seq, applied = max(seq, empty_end), empty_end - 1
            released = min(seq, max(int(clock["lastSeq"]), int(applied) + 1 if applied is not None else 0))
            if released <= self.last_flush.get(log_id, 0):
                continue
            for item in self._broadcast(flush_tick({**clock, "lastSeq": released}, log_id)):
                (effects.metrics if isinstance(item, Metric) else effects.records).append(item)
            effects.flushed[log_id] = released
        return effects

    def quiet_clocks(self, restored: Mapping[Any, int], assigned: set[int], chunking: set[int], *, now: float,
                     monotonic: float) -> list[Produce]:
        """Clock records for the logs whose clocks this process holds (on the L1 partitions
        ``assigned`` to it) that have been quiet long enough (:func:`streams.ticks.quiet_clock_due`)
        and hold a unit open, each to its log's L1 partition. ``chunking``: the redacted
        partitions assigned to this process, whose progress tells whether a unit is open; with
        some assigned elsewhere it cannot tell, and writes. ``now`` is the present (POSIX
        seconds), ``monotonic`` measures the quiet. One per quiet spell: a record lost with its
        sender is written again after the next event's quiet."""
        homes = {key: partition for key, partition in restored.items()
                 if isinstance(key, str) and not is_offset_key(key)}
        homes.update(self.partition_of)
        out: list[Produce] = []
        for log_id, partition in sorted(homes.items()):
            clock = self.tables[LOG_CLOCKS].get(log_id)
            if not clock or partition not in assigned:
                continue
            last = int(clock["lastSeq"])
            seen = self.quiet_since.get(log_id)
            if seen is None or seen[0] != last:
                self.quiet_since[log_id] = (last, monotonic)
                continue
            if self.clock_sent.get(log_id) == last or not quiet_clock_due(
                    clock, now=now, quiet_for=monotonic - seen[1], quiet_seconds=self.settings.quiet_log_seconds,
                    idle_gap_seconds=self.settings.idle_gap_seconds):
                continue
            if not self._holds_open(log_id, chunking):
                continue
            self.clock_sent[log_id] = last
            out.append(Produce("l1", log_id.encode(), orjson.dumps(clock_record(log_id, now)), partition=partition,
                               confirm=True))
        return out

    def _holds_open(self, log_id: str, chunking: set[int]) -> bool:
        """Whether a unit of ``log_id`` may be open: False only when every redacted partition is
        this process's and none holds an open unit of the log. Most quiet spells follow an import
        whose turns all ended; a clock record after each would add a seq to the log after every
        re-import too."""
        partitions = range(self.settings.stream_partitions)
        if not set(partitions) <= chunking:
            return True
        # A partition whose chunking has not caught up yet may still open one: it is asked again
        # at the next flush, as long as the quiet lasts.
        progress = [self.tables[CHUNKER_PROGRESS].get(progress_key(partition, log_id)) for partition in partitions]
        return any(p is not None and p["open"] for p in progress)
