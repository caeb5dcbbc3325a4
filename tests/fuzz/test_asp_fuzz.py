"""``validate_event`` against random JSON values and mutated valid events.

It either returns an event that L1 can store (it serializes to canonical bytes and those bytes
validate to the same event) or raises :class:`~streams.exceptions.SchemaError` with a readable
reason and, where one field is at fault, that field's JSON path. No KeyError, TypeError or
OverflowError may leak: the worker dead-letters SchemaError and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import example, given
from hypothesis import strategies as st

from streams.asp import EVENT_TYPES, canonical_bytes, event_time, validate_event
from streams.exceptions import SchemaError
from tests.fuzz.profile import fuzz, json_values

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "asp" / "events.jsonl"


def _valid_fixture_events() -> list[dict[str, Any]]:
    events = []
    for line in FIXTURE.read_bytes().splitlines():
        try:
            events.append(validate_event(orjson.loads(line)))
        except (orjson.JSONDecodeError, SchemaError):
            continue  # the fixture holds bad lines on purpose
    return events


VALID = _valid_fixture_events()
KEYS = ["aspVersion", "eventId", "logId", "sessionId", "runId", "turnId", "episodeId",
        "parentSessionId", "parentEventId", "type", "role", "time", "visibility", "acl",
        "fields", "payload"]
TIMES = st.one_of(
    st.datetimes().map(lambda moment: moment.isoformat() + "Z"),
    st.from_regex(r"\A\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,12})?([Zz]|[+-]\d{2}:\d{2})\Z"),
    st.sampled_from(["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00",
                     "2026-01-31T12:00:00Z\n", "2026-02-29T00:00:00Z", "2026-01-31T12:00:60Z",
                     "2026-01-31T12:00:00+24:00", "2026-01-31t12:00:00z"]),
)
# Values Python callers (not JSON parsers) can hand to validate_event.
PYTHON_ONLY = st.sampled_from([
    "\ud800", {"k": "\udfff"}, {1: "int key"}, {"set": {1, 2}}, b"bytes", float("nan"),
    float("inf"), 2**70, object(),
])


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"input": value}
    return value


def check(candidate: Any) -> None:
    try:
        event = validate_event(candidate, record="fuzz:1")
    except SchemaError as error:
        assert error.reason and "Traceback" not in str(error)
        assert str(error).startswith("fuzz:1: ")
        assert error.field is None or error.field.startswith("$")
        return
    stored = canonical_bytes(event)
    assert validate_event(orjson.loads(stored)) == orjson.loads(stored)
    assert event["type"] in EVENT_TYPES or event["type"].startswith("x.")
    event_time(event)


@fuzz(200)
@given(value=json_values(keys=st.sampled_from(KEYS) | st.text(max_size=8)))
def test_random_json_values(value: Any) -> None:
    check(value)


@st.composite
def mutated_event(draw: st.DrawFn) -> dict[str, Any]:
    event = dict(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from([*KEYS, "extra"]))
        how = draw(st.sampled_from(["drop", "json", "time", "python", "deep", "huge"]))
        if how == "drop":
            event.pop(key, None)
        elif how == "json":
            event[key] = draw(json_values())
        elif how == "time":
            event["time"] = draw(TIMES)
        elif how == "python":
            event[key] = draw(PYTHON_ONLY)
        elif how == "deep":
            event["fields"] = {"input": _deep(draw(st.integers(1, 400)))}
        else:
            event[key] = draw(st.sampled_from(["x", "\x00", "é"])) * draw(st.integers(200, 100_000))
    return event


@fuzz(200)
@given(event=mutated_event())
@example(event={**VALID[0], "time": "9999-12-31T23:59:59-01:00"})  # was an OverflowError
@example(event={**VALID[0], "time": "0001-01-01T00:00:00+01:00"})  # was an OverflowError
@example(event={**VALID[0], "fields": {"input": _deep(300)}})  # passed, then L1 could not store it
@example(event={**VALID[0], "fields": {"text": "\ud800"}})  # passed, then L1 could not store it
@example(event={**VALID[0], "payload": {1: "int key"}})  # passed, then L1 could not store it
def test_mutated_valid_events(event: dict[str, Any]) -> None:
    check(event)
