"""SessionQL's parser against hostile text: random strings, token soup from the grammar and
mutations of valid queries. A query parses (and then normalizes, re-parses to the same
query and compiles) or fails with a :class:`SessionQLError` naming a position inside the text;
nothing else may escape ``parse``.

``tests/planner/test_sessionql.py`` holds the grammar-driven round trip and the error
catalogue; this file adds mutation and edge-literal fuzzing on top.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from planner.sessionql import SessionQLError, compile_query, parse, to_text
from planner.sessionql.catalog import TABLES
from planner.sessionql.parser import AGGREGATES, KEYWORDS
from tests.fuzz.profile import fuzz

VALID = [
    'FROM tool_calls WHERE status = "error" GROUP BY toolName SELECT toolName, count() AS errors '
    "ORDER BY errors DESC LIMIT 10",
    'FROM sessions WHERE tenant = "acme" AND ended = FALSE',
    'FROM events WHERE model IS NOT NULL AND time >= "2026-01-01"',
    'FROM tool_calls WHERE paramKeys CONTAINS "path" AND resultSeq IS NULL',
    "FROM events GROUP BY type",
    'LINEAGE DESCENDANTS OF "s-1234" WHERE kind = "session-parent"',
    'LINEAGE ANCESTORS OF "evt-tool-result-77"',
    "FROM events WHERE seq > -2.5e3 AND NOT (seq = 1 OR seq = 2) ORDER BY seq DESC LIMIT 3",
    "FROM turns WHERE durationSeconds >= 0.5 SELECT turnId, durationSeconds",
    "FROM chunks WHERE unit IN ('turn', 'episode') AND eventTime < \"2026-01-31T14:00:00+02:00\"",
    "FROM runs SELECT sum(turnCount), avg(durationSeconds), min(startTime), max(endTime)",
]
# Literals at the edges of what each type can hold.
EDGE_LITERALS = [
    '"9999-12-31T23:59:59-01:00"', '"0001-01-01T00:00:00+01:00"', '"0000-01-01"', '"2026-02-30"',
    '"2026-01-31T24:00:00Z"', '"2026-01-31T12:00:00.1234567891Z"', '"2026-01-31T12:00:00+99:00"',
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e308", "1e309",
    "1e-400", "0.0", "00", "1.", ".5", "1e", '"\\ud800"', '"\\ud83d\\ude00"', '"\\u0000"',
    '"\\uZZZZ"', "'\\''", '"\u2028"', "TRUE", "NULL", "*",
]
WORDS = sorted(KEYWORDS) + list(AGGREGATES) + sorted(TABLES) + sorted(
    {field for fields in TABLES.values() for field in fields})
SYMBOLS = ["=", "!=", "<>", "<", "<=", ">", ">=", "(", ")", ",", "*", "-", "--", "~", ";", "`",
           "\\", '"', "'", "\n", "\t", "\x00", "\ufeff"]
TOKEN = st.sampled_from(WORDS + SYMBOLS + EDGE_LITERALS)


def check(text: str) -> None:
    """Parse ``text``: a clean round trip, or a SessionQLError pointing into the text."""
    try:
        query = parse(text)
    except SessionQLError as error:
        assert error.status == 400 and error.code == "bad_query" and error.hint
        assert 0 <= error.offset <= len(text)
        assert (error.line, error.column) >= (1, 1)
        assert error.message.endswith(f"at line {error.line}, column {error.column}")
        return
    normalized = to_text(query)
    assert parse(normalized) == query, normalized
    assert to_text(parse(normalized)) == normalized
    compile_query(query)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(VALID))
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["cut", "insert", "delete", "replace-token", "swap-literal"]))
        at = draw(st.integers(0, len(text)))
        if how == "cut":
            text = text[:at]
        elif how == "insert":
            text = text[:at] + draw(TOKEN | st.text(max_size=3)) + text[at:]
        elif how == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 6)):]
        else:
            words = text.split(" ")
            index = draw(st.integers(0, len(words) - 1))
            words[index] = draw(st.sampled_from(EDGE_LITERALS) if how == "swap-literal" else TOKEN)
            text = " ".join(words)
    return text


@fuzz(400)
@given(text=st.one_of(
    mutated(),
    st.lists(TOKEN, max_size=16).map(" ".join),
    st.lists(TOKEN, max_size=16).map("".join),
    st.text(max_size=80),
))
@example(text='FROM events WHERE time > "9999-12-31T23:59:59-01:00"')  # was an OverflowError
@example(text='FROM events WHERE time < "0001-01-01T00:00:00+01:00"')  # was an OverflowError
@example(text="FROM events WHERE seq = 1e-400")
@example(text='FROM events WHERE title = "\\ud83d\\ude00"')
def test_any_text_parses_round_trips_or_fails_with_a_position(text: str) -> None:
    check(text)


@fuzz(100)
@given(table=st.sampled_from(sorted(TABLES)), data=st.data())
def test_every_field_with_edge_literals(table: str, data: st.DataObject) -> None:
    field = data.draw(st.sampled_from(sorted(TABLES[table])))
    op = data.draw(st.sampled_from(["=", "<", ">=", "IN", "NOT IN", "CONTAINS", "IS NOT"]))
    literal = data.draw(st.sampled_from(EDGE_LITERALS))
    value = f"({literal}, {literal})" if op.endswith("IN") else literal
    source = 'LINEAGE ANCESTORS OF "x"' if table == "lineage" else f"FROM {table}"
    check(f"{source} WHERE {field} {op} {value} ORDER BY {field} LIMIT 1")
