"""The direct check of an event's top level (``streams.asp._plainly_valid``) against the compiled
JSON Schema: it may only accept what the schema accepts, so ``validate_event`` accepts and refuses
exactly what it did with the schema alone (issue #16: the direct check is the cheaper path)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import fastjsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams.asp
from streams.asp import _plainly_valid, _validator, validate_event_bytes
from streams.exceptions import SchemaError

BASE: dict[str, Any] = {
    "aspVersion": "1.0", "eventId": "e-1", "logId": "default", "sessionId": "s-1", "type": "message",
    "time": "2026-01-31T12:00:00.123Z", "role": "assistant", "visibility": "visible", "turnId": "t-1",
    "episodeId": None, "runId": None, "parentEventId": None, "parentSessionId": None,
    "acl": {"tenant": "acme", "read": ["group:ops", "*"]}, "fields": {"text": "hello"}, "payload": [1, {"a": 2}],
}
DELETE = object()
EDGE_STRINGS = [
    "", "1.0", "1.1", "a" * 256, "a" * 257, "default", "team-a.b_c", "team a", "-lead", "team-a\n", "x" * 129,
    "message", "tool.call", "tool.result", "session.acl", "turn.ended", "x.custom-1", "x.", "X.big", "x.a\n",
    "messages", "user", "assistant", "developer", "system", "tool", "bot", "visible", "hidden", "Visible",
    "2026-01-31T12:00:00Z", "2026-01-31 12:00:00+01:00", "2026-01-31T12:00:00.123456789z", "2026-01-31T12:00:00",
    "2026-01-31T12:00:00Z\n", "2026-13-31T12:00:00Z", "*", "user:bob", "group:ops", "user:", "group:\n", "bob",
]
SCALARS = st.one_of(st.sampled_from(EDGE_STRINGS), st.text(max_size=12), st.none(), st.booleans(),
                    st.integers(-3, 3), st.floats(allow_nan=False))
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3),
                   st.dictionaries(st.sampled_from(["tenant", "read", "text", "other"]), SCALARS, max_size=3))
KEYS = st.sampled_from([*BASE, "extra", "acl"])


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event with a few of its top-level keys (or the acl's) changed, added or removed."""
    event = copy.deepcopy(BASE)
    for key, value in draw(st.dictionaries(KEYS, st.one_of(st.just(DELETE), VALUES), max_size=3)).items():
        if value is DELETE:
            event.pop(key, None)
        else:
            event[key] = value
    if draw(st.booleans()) and isinstance(event.get("acl"), dict):
        event["acl"] = {**event["acl"], **draw(st.dictionaries(st.sampled_from(["tenant", "read", "x"]), VALUES,
                                                                max_size=2))}
    return event


def _schema_accepts(event: dict[str, Any]) -> bool:
    try:
        _validator()(copy.deepcopy(event))
    except fastjsonschema.JsonSchemaValueException:
        return False
    return True


def _outcome(event: dict[str, Any]) -> tuple[dict[str, Any], bytes] | str:
    try:
        return validate_event_bytes(copy.deepcopy(event))
    except SchemaError as exc:
        return f"{exc.field}: {exc.reason}"


@settings(max_examples=600, deadline=None)
@given(events())
def test_property_the_direct_check_accepts_only_what_the_schema_accepts(event: dict[str, Any]) -> None:
    if _plainly_valid(event):
        assert _schema_accepts(event), event


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events())
def test_property_validate_event_answers_as_with_the_schema_alone(monkeypatch: pytest.MonkeyPatch,
                                                                  event: dict[str, Any]) -> None:
    with_direct_check = _outcome(event)
    with monkeypatch.context() as patch:
        patch.setattr(streams.asp, "_plainly_valid", lambda _event: False)
        assert _outcome(event) == with_direct_check


def test_every_edge_string_in_every_place_is_judged_as_the_schema_judges_it() -> None:
    for key in [*BASE, "extra"]:
        for text in EDGE_STRINGS:
            for event in ({**BASE, key: text}, {**BASE, "acl": {"tenant": "t", key: text}},
                          {**BASE, "acl": {"tenant": text, "read": [text]}}):
                assert not _plainly_valid(event) or _schema_accepts(event), event


def test_the_shapes_importers_write_take_the_direct_check() -> None:
    minimal = {key: BASE[key] for key in ("aspVersion", "eventId", "logId", "sessionId", "type", "time")}
    for event in (BASE, minimal, {**minimal, "type": "x.note", "fields": {}, "visibility": "hidden", "role": None},
                  {**minimal, "acl": {"tenant": "t"}}):
        assert _plainly_valid(event), event


def _parse_time_by_rewrite(value: str) -> str:
    """What ``parse_time`` answered before its direct path: every time rewritten for
    ``fromisoformat`` (its datetime in ISO form, or the message of its error)."""
    if not streams.asp._RFC3339.match(value):
        return f"not an RFC 3339 time with an offset: {value!r}"
    text = value.replace("z", "Z").replace("Z", "+00:00").replace("t", "T").replace(" ", "T")
    if text[17:19] == "60":  # a leap second: the last instant of its minute
        text = text[:17] + "59.999999" + text[-6:]
    try:
        return datetime.fromisoformat(streams.asp._BEYOND_MICROSECONDS.sub(r"\1", text)).astimezone(UTC).isoformat()
    except OverflowError:
        return f"time out of range (years 1..9999 in UTC): {value!r}"
    except ValueError:
        return (f"not a valid RFC 3339 time: {value!r} (a month, day, hour, minute or second out of range, "
                "or an offset beyond ±23:59)")


def _parse_time_answer(value: str) -> str:
    try:
        return streams.asp.parse_time(value).isoformat()  # its zone too (== compares instants)
    except ValueError as exc:
        return str(exc)


TIME_PARTS = st.tuples(
    st.sampled_from(["2026-01-31", "0001-01-01", "9999-12-31", "2026-02-30", "2026-13-01", "٢٠٢٦-01-31"]),
    st.sampled_from(["T", "t", " "]),
    st.sampled_from(["12:00:00", "23:59:60", "24:00:00", "00:00:00"]),
    st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=10).map(lambda digits: "." + digits)),
    st.sampled_from(["Z", "z", "+00:00", "-00:00", "+05:30", "-01:00", "+24:00", "", "Z\n", "+01:00\n"]),
)


@settings(max_examples=800, deadline=None)
@given(TIME_PARTS)
def test_property_parse_time_answers_as_the_rewrite_did(parts: tuple[str, ...]) -> None:
    value = "".join(parts)
    assert _parse_time_answer(value) == _parse_time_by_rewrite(value)


def test_parse_time_takes_canonical_times_as_they_are() -> None:
    assert streams.asp.parse_time("2026-01-31T12:00:00.123456Z") == datetime(2026, 1, 31, 12, 0, 0, 123456, tzinfo=UTC)
    assert streams.asp.parse_time("2026-01-31T12:00:00.1234567Z") == datetime(2026, 1, 31, 12, 0, 0, 123456, tzinfo=UTC)
    assert streams.asp.parse_time("2026-01-31t13:00:00+01:00") == datetime(2026, 1, 31, 12, tzinfo=UTC)


def test_a_time_out_of_range_is_said_in_rfc_3339_words_and_a_leap_second_is_a_time() -> None:
    """Found by a new user posting to /v1/events: `+25:00` was refused as "offset must be a
    timedelta strictly between -timedelta(hours=24) and timedelta(hours=24)", and RFC 3339's
    leap second `23:59:60` as "second must be in 0..59"."""
    with pytest.raises(ValueError, match="not a valid RFC 3339 time") as refused:
        streams.asp.parse_time("2026-01-01T00:00:00+25:00")
    assert "timedelta" not in str(refused.value)
    assert streams.asp.parse_time("2016-12-31T23:59:60Z") == datetime(2016, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert streams.asp.parse_time("2016-12-31T18:59:60-05:00") == datetime(2016, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


@pytest.mark.parametrize(("change", "says"), [
    ({"role": "robot"}, 'role must be one of ["user", "assistant", "system", "developer", "tool", null] (field $.role)'),
    ({"eventId": DELETE, "time": DELETE}, 'event must contain ["eventId", "time"] properties (field $)'),
    ({"extra": 1, "zz": 2}, 'event must not contain ["extra", "zz"] properties (field $)'),
    ({"acl": {"read": ["*"]}}, 'acl must contain ["tenant"] properties (field $.acl)'),
])
def test_a_refusal_names_the_values_as_json_does(change: dict[str, Any], says: str) -> None:
    """Found posting events: `role must be one of [..., None]` and `must contain ['b'] properties`
    named the values as Python writes them, to someone who wrote JSON."""
    event = {**BASE, **change}
    event = {key: value for key, value in event.items() if value is not DELETE}
    with pytest.raises(SchemaError) as refused:
        validate_event_bytes(event)
    assert str(refused.value) == says
