"""Progress markers and open turns: an open turn holds the markers back, but by at most the
idle gap G of log time (plus the K seqs until the next regular tick).

Proved twice: at the pure level (``streams.progress`` + ``Chunker`` + ``streams.ticks``, the same
code the faust agents run, with sessions spread over several partitions), including a
hypothesis property over random logs, K and G; and through the real ``usl worker`` and text
sink, reading the progress records on the chunks topic and the sink's ``builtThroughSeq``.

The marker helpers (history, floor, waiting for markers) live in the shipped kit
``streams.testing``; the fast group fail-over fixture in this package's conftest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from deploy.testing import Stack
from sinks.testing import wait_for_watermarks
from streams.asp import event_time, validate_event
from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
from streams.progress import marker_seq, new_progress, note_seq, note_session
from streams.settings import Settings
from streams.testing import (
    append_events,
    check_markers,
    chunks_topic,
    marker_floor,
    marker_history,
    topic_records,
    wait_for_markers,
    wait_until,
)
from streams.ticks import FlushPacer, advance_clock, new_clock

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


# -- scenario ---------------------------------------------------------------------------------


def _event(session_id: str, n: int, kind: str, seconds: float, *, turn: str | None = None,
           role: str | None = None, **fields: Any) -> dict[str, Any]:
    when = (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")
    return validate_event({"eventId": f"{session_id}-e{n}", "sessionId": session_id, "type": kind,
                           "role": role, "turnId": turn, "time": when, "fields": fields})


def _open_turn(session_id: str, start: float) -> list[dict[str, Any]]:
    """A turn that starts and never ends: turn.started, a user message, a tool call."""
    turn = f"{session_id}-t0"
    return [
        _event(session_id, 1, "turn.started", start, turn=turn),
        _event(session_id, 2, "message", start + 1, turn=turn, role="user", text="please refund the duplicate order"),
        _event(session_id, 3, "tool.call", start + 2, turn=turn, role="assistant", toolName="Bash",
               toolCallId=f"{turn}-c0", input={"command": "psql -c 'select 1'"}),
    ]


class _BusySession:
    """A session of short closed turns whose event times keep the log clock moving."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.count = 0

    def next(self, seconds: float) -> dict[str, Any]:
        turn = f"{self.session_id}-t{self.count // 4}"
        step = self.count % 4
        self.count += 1
        if step == 0:
            return _event(self.session_id, self.count, "turn.started", seconds, turn=turn)
        if step == 1:
            return _event(self.session_id, self.count, "message", seconds, turn=turn, role="user",
                          text=f"check the watermark lag number {self.count}")
        if step == 2:
            return _event(self.session_id, self.count, "message", seconds, turn=turn, role="assistant",
                          text=f"the lag is fine at step {self.count}")
        return _event(self.session_id, self.count, "turn.ended", seconds, turn=turn)


class _Pipeline:
    """The faust agents' per-record logic, in process: one clock, P partitions of progress."""

    def __init__(self, every: int, gap: float, route: Callable[[str], int], partitions: int) -> None:
        self.chunker = Chunker(ChunkerConfig(idle_gap_seconds=gap), default_tokenizer(), policy_hash="test")
        self.every = every
        self.route = route
        self.clock = new_clock()
        self.states: dict[str, dict[str, Any]] = {}
        self.progress = [new_progress() for _ in range(partitions)]
        self.chunks: list[tuple[int, dict[str, Any]]] = []  # (seq of the record that closed it, chunk)

    def _marker(self, partition: int) -> int:
        progress = self.progress[partition]
        progress["lastMarker"] = marker_seq(progress)
        return int(progress["lastMarker"])

    def markers(self) -> list[int]:
        return [self._marker(p) for p in range(len(self.progress))]

    def feed(self, seq: int, event: dict[str, Any]) -> dict[str, Any] | None:
        """Apply one L1 event; return the regular tick it triggered, if any."""
        session_id = event["sessionId"]
        partition = self.route(session_id)
        state = self.states.setdefault(session_id, self.chunker.new_state(session_id))
        self.chunks += [(seq, c) for c in self.chunker.on_event(state, "default", seq, event)]
        note_session(self.progress[partition], session_id, self.chunker.open_min_seq(state))
        note_seq(self.progress[partition], seq)
        self.clock, tick = advance_clock(self.clock, "default", seq, event_time(event), self.every)
        if tick is not None:  # broadcast to every partition, as the redaction agent does
            for progress in self.progress:
                for open_session in sorted(progress["open"]):
                    open_state = self.states[open_session]
                    self.chunks += [(seq, c) for c in self.chunker.on_tick(open_state, tick)]
                    note_session(progress, open_session, self.chunker.open_min_seq(open_state))
                progress["lastTickSeq"] = seq
                note_seq(progress, seq)
        return tick


def _check_open_turn_is_held_then_cut(every: int, gap: float, steps: list[float], partitions: int,
                                      route: Callable[[str], int]) -> None:
    """Run a log of a busy session with an open turn inside it; assert the marker rules."""
    pipeline = _Pipeline(every, gap, route, partitions)
    busy = _BusySession("busy")
    seq = 0
    for _ in range(4):  # one closed busy turn first, so the held marker is not 0
        seq += 1
        pipeline.feed(seq, busy.next(seq))
    clock = float(seq)
    open_events = _open_turn("open", clock + 1)
    first_open = seq + 1
    ticks: list[int] = []  # the regular ticks so far
    for event in open_events:
        seq += 1
        if (tick := pipeline.feed(seq, event)) is not None:
            ticks.append(tick["seq"])
    last_open_seq, last_open_time = seq, event_time(open_events[-1])  # POSIX seconds
    open_partition = route("open")
    clock = last_open_time - T0.timestamp()  # seconds after T0, as _event takes them
    cut_tick: dict[str, Any] | None = None
    crossed_at: int | None = None
    for step in steps:
        clock += step
        seq += 1
        event = busy.next(clock)
        tick = pipeline.feed(seq, event)
        # Idle: log time more than G past the turn's last event, and a tick interval without an
        # event of its session (a tick at or after its last seq came before this one).
        idle = (tick is not None and tick["logTime"] - last_open_time > gap
                and any(last_open_seq <= earlier for earlier in ticks))
        if tick is not None:
            ticks.append(tick["seq"])
        if crossed_at is None and event_time(event) - last_open_time > gap:
            crossed_at = seq
        markers = pipeline.markers()
        cut = [c for at, c in pipeline.chunks if c["sessionId"] == "open"]
        if not cut:
            # Held: the open turn's partition (and so the sinks' floor) stays below its first seq.
            assert markers[open_partition] <= first_open - 1
            assert min(markers) <= first_open - 1
            # ... and only while no regular tick has found it idle.
            assert not idle
        elif cut_tick is None:
            cut_tick = tick
            assert tick is not None, "an idle turn is cut by a regular tick, never by wall-clock or a flush"
            assert idle
            assert crossed_at is not None and tick["seq"] - crossed_at < 2 * every, \
                "cut at the first tick past G that follows a tick interval without the session"
            # turn.started renders nothing, so the evidence starts one seq later.
            assert [e["seq"] for e in cut[0]["evidence"]] == list(range(first_open + 1, last_open_seq + 1))
            assert markers[open_partition] >= last_open_seq, "the markers move past the open turn's seqs"
    if crossed_at is not None and seq - crossed_at >= 2 * every:
        assert cut_tick is not None, "log time passed G and two regular ticks followed, yet the turn was not cut"


def test_open_turn_holds_markers_until_the_first_tick_past_the_idle_gap() -> None:
    """Pure level, K=8, G=60, two partitions: markers stay at first-seq-1 while the open turn
    is younger than G of log time, and move past it at the first regular tick after."""
    steps = [5.0] * 30
    for partitions, route in ((1, lambda s: 0), (2, lambda s: 0 if s == "open" else 1), (2, lambda s: 0)):
        _check_open_turn_is_held_then_cut(8, 60.0, steps, partitions, route)


@hsettings(max_examples=40, deadline=None)
@example(every=1, gap=5.13671875, steps=[5.13671875], same_partition=False)  # event times are µs-rounded
@given(every=st.integers(1, 16), gap=st.floats(5.0, 200.0),
       steps=st.lists(st.floats(0.0, 40.0), min_size=1, max_size=120),
       same_partition=st.booleans())
def test_open_turn_hold_is_bounded_by_the_idle_gap_property(every: int, gap: float, steps: list[float],
                                                            same_partition: bool) -> None:
    """For any log, K and G: held exactly while no regular tick found the open turn idle (log
    time > G past its last event, and a tick interval without an event of its session); once
    one does, the turn is cut and the markers pass it."""
    route = (lambda s: 0) if same_partition else (lambda s: 0 if s == "open" else 1)
    _check_open_turn_is_held_then_cut(every, gap, steps, 2, route)


# -- through the real worker ------------------------------------------------------------------


@pytest.mark.kafka
@pytest.mark.slow
def test_worker_markers_and_sink_watermark_wait_for_the_idle_cut(make_settings: Callable[..., Settings]) -> None:
    """Real ``usl worker`` + text sink, K=8, G=60, 2 partitions: progress records on the chunks
    topic and the text watermark stay at the open turn's first seq - 1 while log time is
    within G of it, stay there after log time passes G but before the next regular tick (flush
    ticks never cut), and move past the turn once that tick arrives."""
    # Log time moves with events alone here: no clock record, however long a phase waits.
    settings = make_settings(tick_every_seqs=8, idle_gap_seconds=60.0, stream_partitions=2, quiet_log_seconds=3600.0)
    busy = _BusySession("busy")
    # seqs 1-4: a closed turn (t+1..t+4); 5-7: the open turn (t+5..t+7).
    head_events = [busy.next(float(s)) for s in range(1, 5)] + _open_turn("open", 5.0)
    last_open_time = 7.0
    first_open, last_open_seq = 5, 7
    # seqs 8-19: log time climbs to t+55 (< t+7+60); regular ticks at 8 and 16 do not cut.
    phase1 = [busy.next(last_open_time + 4.0 * n) for n in range(1, 13)]
    # seqs 20-23: log time passes t+67 at seq 20 (t+68); no multiple of K, so no regular tick yet.
    phase2 = [busy.next(last_open_time + 61.0 + n) for n in range(4)]
    # seqs 24-27: seq 24 is a multiple of K: its tick (log time > G past the turn) cuts it.
    phase3 = [busy.next(last_open_time + 70.0 + n) for n in range(4)]

    stack = Stack(settings)
    try:
        stack.worker()
        stack.sinks("text")
        assert append_events(settings, head_events + phase1) == 19

        def busy_chunk_through(seq: int) -> bool:
            return any(r.get("kind") == "chunk" and r["sessionId"] == "busy" and r["maxSeq"] == seq
                       for r in topic_records(settings, "chunks"))

        wait_until(lambda: busy_chunk_through(18), "the busy session's chunks of phase 1", timeout=180)
        wait_for_watermarks(settings, first_open - 1, ["text"], timeout=120)
        assert marker_floor(settings) == first_open - 1
        assert not [r for r in topic_records(settings, "chunks") if r.get("sessionId") == "open"]

        assert append_events(settings, phase2) == 23
        wait_until(lambda: busy_chunk_through(22), "the busy session's chunk of phase 2")
        time.sleep(2.0)  # let the flush tick at 23 arrive too: it must not cut or advance
        assert marker_floor(settings) == first_open - 1, "log time passed G but no regular tick yet"
        assert not [r for r in topic_records(settings, "chunks") if r.get("sessionId") == "open"]
        text = wait_for_watermarks(settings, first_open - 1, ["text"], timeout=60)["text"]
        assert int(text["builtThroughSeq"]) == first_open - 1

        assert append_events(settings, phase3) == 27
        wait_for_markers(settings, 27, timeout=120)
        wait_for_watermarks(settings, 27, ["text"], timeout=120)
        records = topic_records(settings, "chunks")
        cut = [r for r in records if r.get("kind") == "chunk" and r["sessionId"] == "open"]
        assert len({c["chunkId"] for c in cut}) == 1
        assert [e["seq"] for e in cut[0]["evidence"]] == [6, 7] and cut[0]["maxSeq"] == last_open_seq

        # On the open turn's partition, no marker claimed its seqs before its chunk was sent.
        history = marker_history(settings)
        cut_at = _offset_of(settings, cut[0]["chunkId"])
        partition, chunk_offset = cut_at
        assert all(seq <= first_open - 1 for offset, seq in history[partition] if offset < chunk_offset)
        assert max(seq for _, seq in history[partition]) == 27
        check_markers(settings)
    finally:
        stack.close()


def _offset_of(settings: Settings, chunk_id: str) -> tuple[int, int]:
    for partition, offset, body in chunks_topic(settings):
        if body.get("chunkId") == chunk_id:
            return partition, offset
    raise AssertionError(f"chunk {chunk_id} is not on the chunks topic")


@pytest.mark.kafka
@pytest.mark.slow
def test_a_quiet_log_is_released_by_the_worker_s_clock_record(make_settings: Callable[..., Settings]) -> None:
    """Real ``usl worker`` + text sink, on a real Claude Code turn (tests/fixtures/turn_ends,
    Claude Code 2.1.38) whose writer stopped before its end: its events as the importer makes
    them, without the turn.ended and session.ended it adds at the end of its input, and nothing
    appended after them. Before clock records the log clock never moved again, so the text
    watermark stayed below the turn for good (``indexed`` answers never held it, nor anything
    appended to the log later). Now, after USL_QUIET_LOG_SECONDS of quiet, the worker appends one
    clock record: the turn is cut, the watermark reaches the record's seq, no second record
    follows, and the rebuild replay of L1 derives the chunks the worker sent."""
    from pathlib import Path

    from sinks.testing import replay_chunks
    from streams.importers import file_format, import_files
    from streams.importers.base import Accepted
    from streams.testing import chunk_set, l1_seq

    path = Path(__file__).parents[1] / "fixtures" / "turn_ends" / "491e126e-1e71-469c-ade2-fcc8af567c74.jsonl"
    real = [item.event for item in import_files([(path, path.name, file_format(path))]) if isinstance(item, Accepted)]
    events = [e for e in real if e["type"] not in ("turn.ended", "session.ended")]
    assert len(events) < len(real) and any(e["type"] == "message" for e in events)
    settings = make_settings(tick_every_seqs=1000, quiet_log_seconds=1.0, stream_partitions=2)
    stack = Stack(settings)
    try:
        stack.worker()
        stack.sinks("text")
        head = append_events(settings, events)
        assert head == len(events)
        wait_for_watermarks(settings, head + 1, ["text"], timeout=120)
        assert l1_seq(settings) == head + 1
        time.sleep(3.0)  # quiet again, but the log's last record is its clock record: no other
        assert l1_seq(settings) == head + 1
        chunks = [r for r in topic_records(settings, "chunks") if r.get("kind") == "chunk"]
        cited = {event_id for chunk in chunks for event_id in chunk["evidenceEventIds"]}
        assert {e["eventId"] for e in events if e["type"] == "message"} <= cited
        assert not any(chunk.get("provisional") for chunk in chunks)
        assert chunk_set(settings) == replay_chunks(settings)
        check_markers(settings)
    finally:
        stack.close()


def test_a_batch_after_a_quiet_spell_is_flushed_at_once_a_busy_one_is_paced() -> None:
    pacer = FlushPacer(0.25)
    assert pacer.due(100.0)  # nothing flushed yet
    pacer.flushed(100.0, {"default": 8})
    assert not pacer.due(100.1)  # the timer's next run, or a later batch, releases it
    assert pacer.due(100.25)
    pacer.flushed(100.3, {"default": 12})  # the timer released more meanwhile
    assert not pacer.due(100.5)


def test_a_timer_run_that_released_nothing_does_not_hold_the_next_batch_back() -> None:
    pacer = FlushPacer(0.25)
    pacer.flushed(100.0, {"default": 8})
    for run in (100.25, 100.5, 100.75):  # the timer, on a quiet log
        pacer.flushed(run, {})
    assert pacer.due(100.8)


@pytest.mark.kafka
@pytest.mark.slow
def test_the_worker_releases_a_batch_s_seqs_without_waiting_for_the_flush_timer(
        make_settings: Callable[..., Settings]) -> None:
    """Real ``usl worker``, with a flush timer that never runs within the test and no regular
    tick (K above the log): the closed turns appended reach a progress marker on every chunks
    partition, released by the flush the batch itself sent. Before, every partition but the
    turns' own waited for the timer (USL_FLUSH_TICK_SECONDS, 0.25 s by default)."""
    settings = make_settings(tick_every_seqs=1000, stream_partitions=4, quiet_log_seconds=3600.0)
    busy = _BusySession("busy")
    events = [busy.next(float(s)) for s in range(1, 9)]
    stack = Stack(settings)
    try:
        stack.worker(env={"USL_FLUSH_TICK_SECONDS": "3600"})
        assert append_events(settings, events) == 8
        wait_for_markers(settings, 8, timeout=60)
        check_markers(settings)
    finally:
        stack.close()
