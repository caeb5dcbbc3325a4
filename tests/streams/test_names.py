"""One log-name rule everywhere: the schema, the CLI's --log, the search body and ?log=."""

from __future__ import annotations

import pytest
from fastjsonschema import JsonSchemaException
from hypothesis import given
from hypothesis import strategies as st

from planner.exceptions import QueryError
from planner.request import log_param
from streams.asp import _validator
from streams.names import LOG_ID

NAMES = st.text(alphabet="abcAZ09._- é/", min_size=0, max_size=140)


@given(NAMES)
def test_the_schema_and_the_pattern_agree(name: str) -> None:
    event = {"aspVersion": "1.0", "eventId": "e1", "logId": name, "sessionId": "s1", "type": "message",
             "time": "2026-01-01T00:00:00Z", "payload": {"text": "hi"}, "role": "user"}
    try:
        _validator()(event)  # the schema itself, not the fast check built on LOG_ID
        accepted = True
    except JsonSchemaException:
        accepted = False
    assert accepted == bool(LOG_ID.fullmatch(name))


@pytest.mark.parametrize(("name", "ok"), [("a" * 128, True), ("a" * 129, False), ("-a", False), ("a.b_c-1", True)])
def test_the_query_side_takes_the_same_names(name: str, ok: bool) -> None:
    if ok:
        assert log_param(name) == name
    else:
        with pytest.raises(QueryError, match="not a log name"):
            log_param(name)
