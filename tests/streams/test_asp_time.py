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
