"""Batch use of the chunker: a log-ordered list of redacted records in, all chunks out.

The rebuild path and the planner's tail scan call :func:`chunk_stream`; tests and benchmarks
build their input with :func:`make_ticks`, which places regular ticks exactly where the
redaction agent places them. The faust agent calls :class:`~streams.chunking.Chunker`
directly, one record at a time, with the same results.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from streams.asp import event_time
from streams.chunking.chunker import Chunker
from streams.exceptions import ChunkingError

__all__ = ["chunk_stream", "make_ticks"]

_BATCH = 512
"""Events rendered and token-counted together (the tokenizer encodes a batch in parallel)."""


def chunk_stream(
    records: Iterable[dict[str, Any]], chunker: Chunker, *, finalize: bool = False,
) -> list[dict[str, Any]]:
    """Chunk redacted-event and tick records given in log order; one state per session. An
    event record's ``clockTime`` (set by the redaction agent) bounds its time for idle cuts.

    Returns the chunks in the order they close; a tick closes the idle units of its log in
    (logId, sessionId) order. ``finalize`` closes every unit still open at the end, marking
    those chunks provisional (the tail scan's view of open turns).
    """
    run = _Run(chunker)
    batch: list[dict[str, Any]] = []
    for record in records:
        kind = record.get("kind")
        if kind == "event":
            batch.append(record)
            if len(batch) >= _BATCH:
                run.events(batch)
                batch = []
        elif kind == "tick":
            run.events(batch)
            batch = []
            run.tick(record)
        else:
            raise ChunkingError(f"chunk_stream takes event and tick records, not {kind!r}")
    run.events(batch)
    if finalize:
        run.finalize()
    return run.chunks


def make_ticks(
    events_with_seq: Iterable[tuple[int, dict[str, Any]]], every: int, *, policy: str | None = None,
) -> list[dict[str, Any]]:
    """Event records of ``(seq, event)`` pairs (log order) with regular ticks inserted.

    As the redaction agent does it: after an event whose seq crosses a multiple of ``every``
    (``seq // every > previous seq // every``) comes a tick carrying that seq and the log's
    max event time over seqs <= seq (POSIX seconds). Ticks are per log.
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, not {every}")
    previous_seq: dict[str, int] = {}
    log_time: dict[str, float] = {}
    records: list[dict[str, Any]] = []
    for seq, event in events_with_seq:
        log_id = event.get("logId", "default")
        record: dict[str, Any] = {"kind": "event", "logId": log_id, "seq": seq, "event": event}
        if policy is not None:
            record["policy"] = policy
        records.append(record)
        log_time[log_id] = max(log_time.get(log_id, float("-inf")), event_time(event))
        if seq // every > previous_seq.get(log_id, 0) // every:
            records.append({
                "kind": "tick", "logId": log_id, "seq": seq, "logTime": log_time[log_id],
                "flush": False,
            })
        previous_seq[log_id] = seq
    return records


class _Run:
    """Session states of one batch run, and the index of sessions with an open unit."""

    def __init__(self, chunker: Chunker) -> None:
        self.chunker = chunker
        self.states: dict[tuple[str, str], dict[str, Any]] = {}
        self.open: dict[str, set[str]] = {}
        self.chunks: list[dict[str, Any]] = []
        self.event_ids: set[tuple[str, str]] = set()

    def events(self, records: list[dict[str, Any]]) -> None:
        # The first copy of an eventId wins, as the redaction agent admits events
        # (streams.ownership): the chunker itself no longer remembers a session's ids.
        records = [record for record in records if self._first(record)]
        if not records:
            return
        for record, (text, tokens) in zip(records, self.chunker.render_many([r["event"] for r in records]),
                                          strict=True):
            log_id, event = record["logId"], record["event"]
            session_id = event["sessionId"]
            state = self.states.get((log_id, session_id))
            if state is None:
                state = self.states[(log_id, session_id)] = self.chunker.new_state(session_id)
            self.chunks += self.chunker.apply_event(state, log_id, record["seq"], event, text, tokens,
                                                    clock_time=record.get("clockTime"))
            self._track(log_id, session_id, state)

    def _first(self, record: dict[str, Any]) -> bool:
        key = (record["logId"], str(record["event"].get("eventId")))
        if key in self.event_ids:
            return False
        self.event_ids.add(key)
        return True

    def tick(self, tick: dict[str, Any]) -> None:
        log_id = tick["logId"]
        # Only a session with an open unit can be cut; the others need not see the tick.
        for session_id in sorted(self.open.get(log_id, ())):
            state = self.states[(log_id, session_id)]
            self.chunks += self.chunker.on_tick(state, tick)
            self._track(log_id, session_id, state)

    def finalize(self) -> None:
        for log_id, session_id in sorted(self.states):
            self.chunks += self.chunker.close(self.states[(log_id, session_id)], provisional=True)
        self.open.clear()

    def _track(self, log_id: str, session_id: str, state: dict[str, Any]) -> None:
        if state["unit"] is None:
            self.open.get(log_id, set()).discard(session_id)
        else:
            self.open.setdefault(log_id, set()).add(session_id)
