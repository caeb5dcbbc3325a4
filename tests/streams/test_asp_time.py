"""``posix_seconds``: the one "POSIX seconds, 0.0 when absent" the sinks and the planner share."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from streams.asp import posix_seconds, posix_time


def test_absent_is_the_epoch_and_present_is_posix_time() -> None:
    assert posix_seconds(None) == 0.0
    assert posix_seconds("1970-01-01T00:00:10Z") == 10.0
    assert posix_seconds(datetime(2024, 5, 1, tzinfo=UTC)) == datetime(2024, 5, 1, tzinfo=UTC).timestamp()


@given(st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False), st.integers(-10**9, 10**9),
                 st.datetimes(timezones=st.just(UTC))))
def test_property_posix_seconds_is_posix_time_with_none_as_zero(value: object) -> None:
    expected = posix_time(value)
    assert posix_seconds(value) == (0.0 if expected is None else expected)
    assert isinstance(posix_seconds(value), float)


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59), timezones=st.just(UTC)))
def test_property_every_time_the_code_writes_reads_back_whatever_its_year(moment: datetime) -> None:
    """An event of 0001-01-01 (the schema allows years 1..9999) made chunks timed '1-01-01T...':
    glibc's strftime %Y leaves out a year's leading zeros, and parse_time refuses it, so every
    sink failed on the chunk and the planner's tail scan answered 500 for the log."""
    from planner.explain import rfc3339 as explain_time
    from streams.asp import parse_time
    from streams.chunking.records import rfc3339
    from streams.importers.base import time_from_posix

    assert parse_time(rfc3339(moment)) == moment
    # From POSIX seconds (a float: a few microseconds lost far from 1970; milliseconds kept).
    assert abs(parse_time(explain_time(moment.timestamp())) - moment).total_seconds() < 1e-4
    assert abs(parse_time(time_from_posix(moment.timestamp())) - moment).total_seconds() < 0.002


def test_an_event_of_year_one_chunks_into_times_the_sinks_read() -> None:
    from streams.asp import posix_seconds, validate_event
    from streams.chunking import Chunker, ChunkerConfig, default_tokenizer

    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="p")
    base = {"aspVersion": "1.0", "sessionId": "s", "logId": "l", "turnId": "t", "time": "0001-01-01T00:00:00Z"}
    chunks, state = [], chunker.new_state("s")
    for seq, event in enumerate([
            {**base, "eventId": "e1", "type": "turn.started", "role": "user"},
            {**base, "eventId": "e2", "type": "message", "role": "user", "fields": {"text": "at the start of time"}},
            {**base, "eventId": "e3", "type": "turn.ended"}], 1):
        chunks += chunker.on_event(state, "l", seq, validate_event(event))
    assert chunks and chunks[0]["eventTime"].startswith("0001-01-01T00:00:00")
    for key in ("eventTime", "startTime", "endTime"):
        assert posix_seconds(chunks[0][key]) == datetime(1, 1, 1, tzinfo=UTC).timestamp()
