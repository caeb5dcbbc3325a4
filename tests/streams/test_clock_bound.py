"""A producer's event time cannot stall a log (SPEC §10, invariant 11): the log clock and the
chunker's idle cuts use the event time bounded by the record's append time."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.asp import validate_event
from streams.chunking import Chunker, ChunkerConfig, default_tokenizer
from streams.progress import marker_seq, new_progress, note_seq, note_session
from streams.ticks import advance_clock, clock_time, new_clock

NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC).timestamp()
SKEW = 300.0
GAP = 300.0


def at(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def message(n: int, session: str, turn: str, when: float) -> dict[str, Any]:
    return validate_event({"eventId": f"{session}-{n}", "sessionId": session, "type": "message",
                           "role": "user", "turnId": turn, "time": at(when),
                           "fields": {"text": f"word {n} of {session}"}})


def test_clock_time_bounds_the_future_and_leaves_the_past() -> None:
    far_future = datetime(2099, 1, 1, tzinfo=UTC).timestamp()
    last_year = NOW - 365 * 86400
    assert clock_time(far_future, NOW, SKEW) == NOW + SKEW  # no clock yet: the bound itself
    assert clock_time(far_future, NOW, SKEW, log_clock=last_year) == last_year  # moves nothing
    assert clock_time(NOW - 10 * 365 * 86400, NOW, SKEW, log_clock=last_year) == NOW - 10 * 365 * 86400
    assert clock_time(NOW + 10, NOW, SKEW, log_clock=last_year) == NOW + 10  # within the skew: as written
    assert clock_time(far_future, None, SKEW) == far_future  # no append time: nothing to bound by


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-6e10, max_value=2.5e11, allow_nan=False),
       st.floats(min_value=1.0, max_value=4e9, allow_nan=False),
       st.none() | st.floats(min_value=-6e10, max_value=4e9, allow_nan=False))
def test_property_clock_time_never_passes_append_time_plus_skew_nor_moves_the_clock_when_bounded(
    event_time: float, append: float, log_clock: float | None,
) -> None:
    bounded = clock_time(event_time, append, SKEW, log_clock)
    assert bounded <= append + SKEW or bounded == event_time <= append + SKEW
    assert bounded <= event_time
    if bounded != event_time and log_clock is not None:
        assert bounded <= log_clock  # a bounded event never advances the log clock


def _run(events: list[tuple[int, dict[str, Any], float]], *, bounded: bool) -> tuple[int, int]:
    """Feed (seq, event, append time) as the agents do, a tick every 2 seqs; return the progress
    marker and how many units were cut by a tick."""
    chunker = Chunker(ChunkerConfig(target_tokens=256, overlap_tokens=16, idle_gap_seconds=GAP),
                      default_tokenizer(), policy_hash="test")
    states: dict[str, dict[str, Any]] = {}
    progress = new_progress()
    clock = new_clock()
    cuts = 0
    for seq, event, append in events:
        when = clock_time(datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp(),
                          append if bounded else None, SKEW, clock["maxTime"])
        state = states.setdefault(event["sessionId"], chunker.new_state(event["sessionId"]))
        chunker.on_event(state, "default", seq, event, clock_time=when if bounded else None)
        note_session(progress, event["sessionId"], chunker.open_min_seq(state))
        note_seq(progress, seq)
        clock, tick = advance_clock(clock, "default", seq, when, 2)
        if tick is not None:
            for session in sorted(progress["open"]):
                closed = chunker.on_tick(states[session], tick)
                cuts += len(closed)
                note_session(progress, session, chunker.open_min_seq(states[session]))
    return marker_seq(progress), cuts


def _log_with_a_far_future_open_turn() -> list[tuple[int, dict[str, Any], float]]:
    future = datetime(2099, 1, 1, tzinfo=UTC).timestamp()
    events = [(1, message(1, "evil", "t-future", future), NOW)]
    # An hour of ordinary traffic follows, one event a minute, each turn ending at once.
    for n in range(2, 62):
        when = NOW + 60 * n
        events.append((n, message(n, f"s{n}", f"t{n}", when), when))
    return events


def test_a_far_future_open_turn_no_longer_holds_the_progress_marker() -> None:
    marker, cuts = _run(_log_with_a_far_future_open_turn(), bounded=True)
    assert cuts >= 1 and marker > 1
    unbounded_marker, _ = _run(_log_with_a_far_future_open_turn(), bounded=False)
    assert unbounded_marker == 0  # what the bound fixes: the 2099 turn held seq 1 forever


def test_a_far_future_turn_in_an_import_of_old_transcripts_is_cut_too() -> None:
    """Events dated last year, appended now (``usl ingest`` of old transcripts): the 2099 event
    counts as the log's clock so far, not as the present, so last year's events pass it."""
    last_year = NOW - 365 * 86400
    events = [(1, message(1, "old", "t-old", last_year), NOW)]
    events.append((2, message(2, "evil", "t-future", datetime(2099, 1, 1, tzinfo=UTC).timestamp()), NOW))
    events += [(n, message(n, f"s{n}", f"t{n}", last_year + 60 * n), NOW + n) for n in range(3, 30)]
    marker, cuts = _run(events, bounded=True)
    assert cuts >= 1 and marker > 2  # past the 2099 turn at seq 2 (the newest turns are still open)


def test_a_far_past_event_never_holds_the_log_either() -> None:
    events = [(1, message(1, "old", "t-old", NOW - 20 * 365 * 86400), NOW)]
    events += [(n, message(n, f"s{n}", f"t{n}", NOW + 60 * n), NOW + 60 * n) for n in range(2, 12)]
    marker, cuts = _run(events, bounded=True)
    assert cuts >= 1 and marker > 1


def test_chunk_times_stay_the_events_own(tmp_path: Path) -> None:
    from streams.chunking import chunk_stream

    future = message(1, "evil", "t-future", datetime(2099, 1, 1, tzinfo=UTC).timestamp())
    chunker = Chunker(ChunkerConfig(idle_gap_seconds=GAP), default_tokenizer(), policy_hash="test")
    records = [{"kind": "event", "logId": "default", "seq": 1, "event": future, "clockTime": NOW + SKEW}]
    chunks = chunk_stream(records, chunker, finalize=True)
    assert chunks[0]["eventTime"].startswith("2099-01-01")


def test_the_tail_scan_bounds_by_the_append_time_l1_carries(tmp_path: Path) -> None:
    """The planner's tail scan reads L1 events as AppendedEvent and bounds their time as the
    agent does: without the bound the 2099 turn would still be open at the end of the range."""
    from planner.tailscan import TailScan, chunker_for
    from streams.l1 import AppendedEvent
    from tests.planner.corpus import make_test_settings

    future = datetime(2099, 1, 1, tzinfo=UTC).timestamp()
    log = [(1, AppendedEvent(message(1, "evil", "t-future", future), NOW))]
    log += [(n, AppendedEvent(message(n, f"s{n}", f"t{n}", NOW + 60 * n), NOW + 60 * n)) for n in range(2, 16)]
    settings = make_test_settings(tmp_path, "unused:9092", idle_gap_seconds=GAP)
    result = TailScan(chunker_for(settings), tick_every_seqs=2).run(log, from_seq=1, to_seq=15)
    evil = [chunk for chunk in result.chunks if chunk["sessionId"] == "evil"]
    assert evil and not evil[0].get("provisional")  # cut by a tick, not closed at the end
    plain = [(seq, dict(event)) for seq, event in log]  # no append time: nothing bounds 2099
    unbounded = TailScan(chunker_for(settings), tick_every_seqs=2).run(plain, from_seq=1, to_seq=15)
    assert [c.get("provisional") for c in unbounded.chunks if c["sessionId"] == "evil"] == [True]


def test_the_tail_scan_cuts_at_a_clock_record_as_the_agent_does(tmp_path: Path) -> None:
    """``latest`` answers from a tail scan of L1: a quiet log's clock record (streams.ticks) must
    cut the turn it cut in the stream there too, so the tail scan's chunk is the indexed one."""
    from planner.tailscan import TailScan, chunker_for
    from streams.l1 import AppendedEvent
    from streams.ticks import clock_record
    from tests.planner.corpus import make_test_settings

    log = [(n, AppendedEvent(message(n, "open", "t-open", NOW + n), NOW + n)) for n in range(1, 4)]
    settings = make_test_settings(tmp_path, "unused:9092", idle_gap_seconds=GAP)
    scan = TailScan(chunker_for(settings), tick_every_seqs=1000)
    held = scan.run(log, from_seq=1, to_seq=3)
    assert [c.get("provisional") for c in held.chunks] == [True]  # open at the end of the range
    clocked = [*log, (4, AppendedEvent(clock_record("default", NOW + 3 + GAP + 1), NOW + 3 + GAP + 1))]
    cut = scan.run(clocked, from_seq=1, to_seq=4)
    assert [bool(c.get("provisional")) for c in cut.chunks] == [False] and cut.skipped_invalid == 0
    assert cut.chunks[0]["chunkId"] == held.chunks[0]["chunkId"]
