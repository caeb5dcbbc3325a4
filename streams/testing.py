"""Test kit for the stream side, shipped with the package so the fault suite (``python -m
reliability``), the benchmarks and the tests use one copy (as bytewax ships ``testing.py``).

- :func:`session_events` and :func:`interleave` build deterministic synthetic ASP sessions
  (validated events of a realistic shape);
- :func:`append_events` and :func:`l1_seq` write to and read the head of the L1 log;
- :func:`topic_records` and :func:`chunk_set` read back what the worker published;
  :func:`chunks_topic`, :func:`marker_history`, :func:`marker_floor`, :func:`check_markers`
  and :func:`wait_for_markers` read and check its progress markers;
- :class:`MemoryL1` is an in-memory L1 appender for the follower (with :class:`Crash` to kill
  it mid-batch) and :class:`Clock` a wall clock that moves only when told.

Nothing here starts a process; ``deploy.testing.Stack`` runs the worker and sinks.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from streams.asp import canonical_bytes, event_digest, validate_event
from streams.importers.base import Rejected
from streams.l1 import L1Producer, L1Reader, read_topic_to_end
from streams.settings import Settings
from streams.topics import Topics

__all__ = [
    "Clock", "Crash", "MemoryL1", "append_events", "check_markers", "chunk_set", "chunks_topic",
    "interleave", "l1_seq", "marker_floor", "marker_history", "session_events", "topic_records",
    "wait_for_markers", "wait_until",
]

_WORDS = ("deploy refund migration pytest rounding kafka broker index tantivy vector faiss chunk "
          "session turn tool result error permission denied timeout retry cache schema parquet "
          "duckdb latency watermark generation manifest cursor planner snapshot redaction").split()
_TOOLS = ("Bash", "Read", "Edit", "Grep", "run_sql")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def session_events(session_id: str, *, turns: int = 3, seed: int = 0, log_id: str = "default",
                   start: datetime | None = None, acl: dict[str, Any] | None = None,
                   secret: str | None = None, long_output_words: int = 0) -> list[dict[str, Any]]:
    """A session: session.started, then per turn a user message, tool calls with results and an
    assistant answer, each turn closed by turn.ended. ``secret`` is planted in a tool output."""
    rng = random.Random(f"{session_id}:{seed}")
    clock = start or datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
    events: list[dict[str, Any]] = []
    n = 0

    def add(kind: str, *, role: str | None = None, turn: str | None = None, **fields: Any) -> None:
        nonlocal clock, n
        clock += timedelta(seconds=rng.randint(1, 20))
        n += 1
        event: dict[str, Any] = {
            "eventId": f"{session_id}-e{n}", "logId": log_id, "sessionId": session_id, "type": kind,
            "role": role, "time": clock.isoformat().replace("+00:00", "Z"), "turnId": turn, "fields": fields,
        }
        if acl is not None:
            event["acl"] = acl
        events.append(validate_event(event))

    add("session.started", title=f"session {session_id}", model="test-model")
    for t in range(turns):
        turn = f"{session_id}-t{t}"
        add("turn.started", turn=turn)
        add("message", role="user", turn=turn, text=f"please {_text(rng, 12)}")
        for c in range(rng.randint(1, 3)):
            call = f"{turn}-c{c}"
            tool = rng.choice(_TOOLS)
            add("tool.call", role="assistant", turn=turn, toolName=tool, toolCallId=call,
                input={"command": _text(rng, 6)})
            output = _text(rng, rng.randint(5, 40) + long_output_words)
            if secret is not None and t == 0 and c == 0:
                output = f"{output}\nexport API_TOKEN={secret}\n{_text(rng, 5)}"
            add("tool.result", role="tool", turn=turn, toolName=tool, toolCallId=call,
                status=rng.choice(("ok", "ok", "error")), output=output)
        add("message", role="assistant", turn=turn, text=_text(rng, rng.randint(10, 80)))
        add("turn.ended", turn=turn)
    return events


def interleave(*sessions: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """Merge sessions into one log order, keeping each session's own order."""
    rng = random.Random(seed)
    queues = [list(s) for s in sessions if s]
    merged: list[dict[str, Any]] = []
    while queues:
        queue = rng.choice(queues)
        merged.append(queue.pop(0))
        if not queue:
            queues.remove(queue)
    return merged


def append_events(settings: Settings, events: Iterable[dict[str, Any]]) -> int:
    """Append validated events to L1; return the highest seq."""
    producer = L1Producer(settings.bootstrap_servers or "", settings)
    for event in events:
        producer.append(event)
    highest = producer.flush()
    producer.close()
    return highest


def l1_seq(settings: Settings, log_id: str = "default") -> int:
    """The committed L1 seq of ``log_id``."""
    reader = L1Reader(settings.bootstrap_servers or "", settings)
    try:
        return reader.committed_seq(log_id)
    finally:
        reader.close()


def topic_records(settings: Settings, name: str) -> list[dict[str, Any]]:
    """Every record of a derived topic (``chunks``, ``redacted``, ...), decoded."""
    topic = getattr(Topics.from_settings(settings), name)
    return [orjson.loads(r.value) for r in read_topic_to_end(settings.bootstrap_servers or "", topic)
            if r.value is not None]


def chunk_set(settings: Settings) -> dict[str, bytes]:
    """chunkId → canonical bytes of every (non-provisional) chunk on the chunks topic; raises
    AssertionError when one chunkId was emitted twice with different bytes."""
    chunks: dict[str, bytes] = {}
    for record in topic_records(settings, "chunks"):
        if record.get("kind") == "chunk":
            body = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
            previous = chunks.setdefault(record["chunkId"], body)
            if previous != body:
                raise AssertionError(f"chunk {record['chunkId']} emitted twice with different bytes")
    return chunks


# -- progress markers ------------------------------------------------------------------------


def chunks_topic(settings: Settings) -> list[tuple[int, int, dict[str, Any]]]:
    """Every record of the chunks topic as (partition, offset, decoded body), in offset order."""
    topic = Topics.from_settings(settings).chunks
    records = [(r.partition, r.offset, orjson.loads(r.value))
               for r in read_topic_to_end(settings.bootstrap_servers or "", topic) if r.value is not None]
    return sorted(records, key=lambda item: (item[0], item[1]))


def marker_history(settings: Settings, log_id: str = "default") -> dict[int, list[tuple[int, int]]]:
    """Chunks-topic partition → [(offset, marker seq)] of ``log_id``'s progress markers, in
    offset order, read from the real topic."""
    history: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for partition, offset, body in chunks_topic(settings):
        if body.get("kind") == "progress" and body.get("logId") == log_id:
            history[partition].append((offset, int(body["seq"])))
    return dict(history)


def check_markers(settings: Settings, log_id: str = "default") -> None:
    """Raise AssertionError unless the progress-marker contract holds on the real topic, for
    one log:

    - per partition, markers never go backwards in offset order;
    - every marker is true when it is written: each event of the log with seq <= M that any
      chunk of that partition carries as evidence is inside a chunk at a lower offset.
    """
    by_partition: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for partition, offset, body in chunks_topic(settings):
        if body.get("logId") == log_id and body.get("kind") in ("chunk", "progress"):
            by_partition[partition].append((offset, body))
    for partition, records in by_partition.items():
        evidence = sorted({e["seq"] for _, b in records if b["kind"] == "chunk" for e in b["evidence"]})
        covered: set[int] = set()
        previous = 0
        for offset, body in records:
            if body["kind"] == "chunk":
                covered.update(e["seq"] for e in body["evidence"])
                continue
            seq = int(body["seq"])
            if seq < previous:
                raise AssertionError(f"{log_id} partition {partition}: marker {seq} at offset {offset} "
                                     f"after {previous}")
            previous = seq
            missing = [s for s in evidence if s <= seq and s not in covered]
            if missing:
                raise AssertionError(f"{log_id} partition {partition}: marker {seq} at offset {offset} "
                                     f"claims seqs {missing[:5]} before any chunk holding them")


def marker_floor(settings: Settings, log_id: str = "default") -> int:
    """min over every chunks partition of its highest marker (0 until all have one): the seq a
    sink may claim as built through."""
    history = marker_history(settings, log_id)
    if len(history) < settings.stream_partitions:
        return 0
    return min(max(seq for _, seq in entries) for entries in history.values())


def wait_for_markers(settings: Settings, seq: int, *, log_ids: tuple[str, ...] = ("default",),
                     timeout: float = 180.0) -> None:
    """Block until every log's marker floor reaches ``seq`` (bounded by ``timeout``)."""
    deadline = time.monotonic() + timeout
    floors: dict[str, int] = {}
    while time.monotonic() < deadline:
        floors = {log_id: marker_floor(settings, log_id) for log_id in log_ids}
        if all(value >= seq for value in floors.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"progress markers did not reach {seq} within {timeout}s: {floors}")


def wait_until(predicate: Callable[[], bool], what: str, *, timeout: float = 120.0) -> None:
    """Poll ``predicate`` until it holds; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# -- an in-memory L1 for the follower --------------------------------------------------------


class Crash(Exception):
    """The follower process dies here (kill -9): nothing after this line of its code runs."""


class MemoryL1:
    """L1 as a list; ``crash_in`` makes the n-th append from now raise :class:`Crash` first."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self.dead: list[Rejected] = []
        self.resolved: list[tuple[str, str]] = []  # (record, log) whose dead letters an import resolved
        self.crash_in: int | None = None

    def committed_seq(self, log_id: str) -> int:
        return len(self.log)

    def append(self, event: dict[str, Any], canonical: bytes | None = None) -> None:
        # The bytes a follower carries from validation must be the ones L1 would have made.
        assert canonical is None or canonical == canonical_bytes(event), event["eventId"]
        if self.crash_in is not None:
            self.crash_in -= 1
            if self.crash_in < 0:
                self.crash_in = None
                raise Crash
        self.log.append(event)

    def flush(self) -> int:
        return len(self.log)

    def event_digests(self, log_id: str, from_seq: int, sessions: set[str] | None = None,
                      to_seq: int | None = None) -> dict[str, bytes | None]:
        digests: dict[str, bytes | None] = {}
        for e in self.log[max(from_seq - 1, 0):to_seq]:
            if e["logId"] == log_id and (sessions is None or e["sessionId"] in sessions):
                digests.setdefault(e["eventId"], event_digest(canonical_bytes(e)))
        return digests

    def dead_letter(self, item: Rejected) -> None:
        self.dead.append(item)

    def resolve_dead_letter(self, record: str, log_id: str) -> None:
        self.resolved.append((record, log_id))

    def counts(self) -> Counter[str]:
        """eventId → how many times it is in the log."""
        return Counter(e["eventId"] for e in self.log)


class Clock:
    """Wall-clock seconds that move only when the test says (file mtimes are real)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now
