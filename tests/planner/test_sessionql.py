"""SessionQL: the language (parse, normalize, clear errors), its catalog, lineage under the ACL,
asOfSeq filtering, and the service, CLI and API over a real broker."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planner.sessionql
from planner.acl import Principal
from planner.exceptions import IndexUnavailable, PlannerError, QueryError, error_body
from planner.sessionql import SessionQLError, compile_query, parse, run_sessionql, to_text
from planner.sessionql.catalog import LINEAGE_TABLE, TABLES, FieldType
from planner.sessionql_service import sessionql_request
from planner.sql import VIEWS, SqlAttachment
from sinks.analytics import AnalyticsWriter
from sinks.structured import StructuredWriter
from sinks.testing import commit_batches, make_chunk, make_event

ANN = Principal("acme", "ann")
BOB = Principal("acme", "bob")
GINA = Principal("globex", "gina")
EVERYONE = {"tenant": "acme", "read": ["*"]}
ACLS = {
    "root": EVERYONE,
    "hidden": {"tenant": "acme", "read": ["user:bob"]},
    "grand": EVERYONE,
    "side": EVERYONE,
    "foreign": {"tenant": "globex", "read": ["*"]},
}


def test_public_surface() -> None:
    assert set(planner.sessionql.__all__) == {"TABLES", "Query", "SessionQLError", "compile_query",
                                              "parse", "run_sessionql", "to_text"}
    assert issubclass(SessionQLError, QueryError)


# -- the catalog is the attachment's views --------------------------------------------------------

_DUCKDB_TYPES = {"VARCHAR": FieldType.STRING, "BIGINT": FieldType.INTEGER,
                 "HUGEINT": FieldType.INTEGER, "DOUBLE": FieldType.NUMBER,
                 "BOOLEAN": FieldType.BOOLEAN, "TIMESTAMP WITH TIME ZONE": FieldType.TIME,
                 "VARCHAR[]": FieldType.STRING_LIST}


def test_the_tables_are_exactly_the_attachment_views(tmp_path: Path) -> None:
    gen, = commit_batches(tmp_path, AnalyticsWriter(), [[]])
    attachment = SqlAttachment(gen)
    assert set(TABLES) - {LINEAGE_TABLE} == set(VIEWS)
    for view in VIEWS:
        described = attachment.query(f"DESCRIBE {view}", as_of_seq=0, principal=ANN, session_acls={})
        columns = [(row[0], _DUCKDB_TYPES[row[1]]) for row in described["rows"]]
        assert columns == list(TABLES[view].items()), view


# -- the world: lineage across sessions with different access lists ------------------------------


def _world_records() -> list[dict[str, Any]]:
    """root spawns hidden (bob only) from a tool call; hidden spawns grand; root also spawns side
    (visible) and foreign (another tenant); side's result names hidden's call as its cause."""
    def ev(seq: int, sid: str, kind: str, event_id: str, **extra: Any) -> dict[str, Any]:
        return make_event(seq, sid, kind, acl=ACLS[sid], event_id=event_id, **extra)

    call = {"toolName": "Task", "toolCallId": "c-root", "input": {"prompt": "p"}}
    return [
        ev(1, "root", "session.started", "root-start", run_id="root-r", fields={"title": "root"}),
        ev(2, "root", "tool.call", "root-call", run_id="root-r", turn_id="root-t", fields=call),
        ev(4, "hidden", "session.started", "hidden-start", run_id="hidden-r",
           parent_session_id="root", parent_event_id="root-call", fields={"title": "secret"}),
        ev(5, "hidden", "tool.call", "hidden-call", run_id="hidden-r",
           fields={"toolName": "Bash", "toolCallId": "c-hidden", "input": {"cmd": "x"}}),
        ev(6, "root", "tool.result", "root-res", run_id="root-r", turn_id="root-t",
           parent_event_id="root-call",
           fields={"toolName": "Task", "toolCallId": "c-root", "status": "ok", "output": "o"}),
        ev(8, "grand", "session.started", "grand-start", run_id="grand-r", episode_id="grand-ep",
           parent_session_id="hidden"),
        ev(9, "side", "session.started", "side-start", parent_session_id="root"),
        ev(10, "side", "tool.result", "side-res", parent_event_id="hidden-call",
           fields={"toolName": "Bash", "toolCallId": "c-side", "status": "error"}),
        ev(11, "foreign", "session.started", "foreign-start", parent_session_id="root"),
        make_chunk("root", [1, 2, 6], turn_id="root-t", acl=ACLS["root"]),
        make_chunk("hidden", [4, 5], acl=ACLS["hidden"]),
        ev(14, "hidden", "tool.result", "hidden-res", run_id="hidden-r", parent_event_id="hidden-call",
           fields={"toolName": "Bash", "toolCallId": "c-hidden", "status": "ok", "output": "secret"}),
    ]


@pytest.fixture(scope="module")
def gens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sessionql")
    records = _world_records()
    batches = [records[:6], records[6:]]
    analytics = commit_batches(root, AnalyticsWriter(), batches)[-1]
    structured = commit_batches(root, StructuredWriter(), batches)[-1]
    return analytics, structured


def run(gens: tuple[Path, Path], text: str, *, who: Principal = ANN, as_of: int = 14,
        acls: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return run_sessionql(text, as_of_seq=as_of, principal=who,
                         session_acls=ACLS if acls is None else acls,
                         analytics_gen_dir=gens[0], structured_gen_dir=gens[1], **kwargs)


def edges(body: dict[str, Any]) -> set[tuple[str, str, str, int]]:
    assert body["columns"][:3] == ["kind", "fromId", "toId"] and body["columns"][5] == "depth"
    return {(row[0], row[1], row[2], row[5]) for row in body["rows"]}


def test_response_shape(gens: tuple[Path, Path]) -> None:
    body = run(gens, 'from tool_calls where toolName = "Task" select toolName, status')
    assert body["columns"] == ["toolName", "status"] and body["types"] == ["VARCHAR", "VARCHAR"]
    assert body["rows"] == [["Task", "ok"]]
    assert (body["rowCount"], body["truncated"], body["asOfSeq"]) == (1, False, 14)
    assert body["generations"] == {"analytics": 2, "structured": 2}
    # The generations as /v1/sql names them, what each is built through beside its id.
    sql = SqlAttachment(*gens).query("SELECT 1", as_of_seq=14, principal=ANN, session_acls=ACLS)
    assert body["watermarks"] == sql["generations"]
    assert {info["generationId"] for info in body["watermarks"].values()} == {2}
    assert body["query"] == 'FROM tool_calls WHERE toolName = "Task" SELECT toolName, status'
    assert "uncovered" not in body
    assert run(gens, "FROM events", as_of=20)["uncovered"] == {"fromSeq": 15, "toSeq": 20}
    # The response names the SQL that gives the same rows through the attachment.
    same = SqlAttachment(*gens).query(body["sql"], as_of_seq=14, principal=ANN, session_acls=ACLS)
    assert same["rows"] == body["rows"]
    json.dumps(body)


def test_max_rows_truncates(gens: tuple[Path, Path]) -> None:
    body = run(gens, "FROM events", who=BOB, max_rows=3)
    assert (body["rowCount"], body["truncated"], len(body["rows"])) == (3, True, 3)
    assert [row[1] for row in body["rows"]] == [1, 2, 4]  # the default order: by seq
    assert body["truncation"]["reason"] == "rows"


def test_max_result_bytes_truncates(gens: tuple[Path, Path]) -> None:
    whole = run(gens, "FROM events", who=BOB)
    assert not whole["truncated"] and len(json.dumps(whole["rows"])) > 300
    body = run(gens, "FROM events", who=BOB, max_result_bytes=300)
    assert body["truncated"] and body["truncation"] == {"reason": "bytes", "maxRows": 10000, "maxResultBytes": 300}
    assert 0 < body["rowCount"] < whole["rowCount"] and body["rows"] == whole["rows"][: body["rowCount"]]
    assert len(json.dumps(body["rows"], separators=(",", ":"))) <= 300


def test_lineage_never_passes_through_a_hidden_session(gens: tuple[Path, Path]) -> None:
    assert edges(run(gens, 'LINEAGE DESCENDANTS OF "root"')) == {
        ("run-session", "root", "root-r", 1), ("session-parent", "root", "side", 1)}
    assert edges(run(gens, 'LINEAGE DESCENDANTS OF "root"', who=BOB)) == {
        ("run-session", "root", "root-r", 1), ("session-parent", "root", "hidden", 1),
        ("session-parent", "root", "side", 1), ("run-session", "hidden", "hidden-r", 2),
        ("session-parent", "hidden", "grand", 2), ("run-session", "grand", "grand-r", 3),
        ("episode-session", "grand", "grand-ep", 3)}
    assert edges(run(gens, 'LINEAGE DESCENDANTS OF "root"', who=GINA)) == set()
    # grand is readable, but its parent is not: ann sees its run and episode, not its parent.
    assert edges(run(gens, 'LINEAGE DESCENDANTS OF "grand"')) == {
        ("run-session", "grand", "grand-r", 1), ("episode-session", "grand", "grand-ep", 1)}
    assert edges(run(gens, 'LINEAGE ANCESTORS OF "grand"')) == set()
    assert edges(run(gens, 'LINEAGE ANCESTORS OF "grand"', who=BOB)) == {
        ("session-parent", "hidden", "grand", 1), ("session-parent", "root", "hidden", 2)}
    # A run's (or a subagent episode's) ancestor is the session it belongs to.
    assert edges(run(gens, 'LINEAGE ANCESTORS OF "grand-ep"')) == {("episode-session", "grand", "grand-ep", 1)}


def test_lineage_of_a_hidden_entity_is_the_lineage_of_nothing(gens: tuple[Path, Path]) -> None:
    nothing = run(gens, 'LINEAGE DESCENDANTS OF "no-such-id"')
    for entity in ("hidden", "hidden-r", "hidden-call", "hidden-start", "foreign"):
        for direction in ("ANCESTORS", "DESCENDANTS"):
            body = run(gens, f'LINEAGE {direction} OF "{entity}"')
            assert {k: v for k, v in body.items() if k != "query"} == {
                k: v for k, v in nothing.items() if k != "query"}, (entity, direction)


def test_which_tool_call_produced_which_result(gens: tuple[Path, Path]) -> None:
    assert edges(run(gens, 'LINEAGE ANCESTORS OF "root-res"')) == {
        ("event-cause", "root-call", "root-res", 1)}
    assert edges(run(gens, 'LINEAGE DESCENDANTS OF "root-call"')) == {
        ("event-cause", "root-call", "root-res", 1)}
    # bob also sees the subagent session the call started (hidden-start's cause).
    assert edges(run(gens, 'LINEAGE DESCENDANTS OF "root-call"', who=BOB)) == {
        ("event-cause", "root-call", "root-res", 1), ("event-cause", "root-call", "hidden-start", 1)}
    # side-res names a hidden event as its cause: for ann that edge does not exist.
    assert edges(run(gens, 'LINEAGE ANCESTORS OF "side-res"')) == set()
    assert edges(run(gens, 'LINEAGE ANCESTORS OF "side-res"', who=BOB)) == {
        ("event-cause", "hidden-call", "side-res", 1)}


def test_no_hidden_id_reaches_any_answer(gens: tuple[Path, Path]) -> None:
    secret = ("hidden", "foreign", "secret", "c-hidden")
    for text in ('LINEAGE DESCENDANTS OF "root"', 'LINEAGE ANCESTORS OF "grand"',
                 'LINEAGE DESCENDANTS OF "root-call"', 'LINEAGE ANCESTORS OF "side-res"',
                 "FROM events", "FROM sessions", "FROM runs", "FROM turns", "FROM tool_calls",
                 "FROM chunks", "FROM events GROUP BY sessionId, parentSessionId",
                 'FROM events WHERE sessionId = "hidden"',
                 "FROM tool_calls WHERE resultSeq IS NULL"):
        body = run(gens, text)
        # A readable session's own events name their parent session and causing event, also
        # when that parent is hidden: the SQL attachment's views show those columns as stored,
        # and SessionQL's tables are those views. Lineage hides them (tested above).
        named = [i for i, c in enumerate(body["columns"]) if c in ("parentSessionId", "parentEventId")]
        rows = [[v for i, v in enumerate(row) if i not in named] for row in body["rows"]]
        shown = json.dumps({**body, "rows": rows, "sql": "", "query": ""})  # the caller's own words
        assert not any(word in shown for word in secret), text
    counts = run(gens, "FROM sessions SELECT count(), sum(eventCount) AS events")["rows"]
    assert counts == [[3, 6]]  # root (3 events), grand, side (2): nothing of hidden or foreign
    assert run(gens, "FROM sessions SELECT count()", who=BOB)["rows"] == [[4]]
    assert run(gens, "FROM sessions SELECT count()", who=GINA)["rows"] == [[1]]
    # A hidden session and an unknown one answer alike.
    assert run(gens, 'FROM events WHERE sessionId = "hidden" SELECT count()')["rows"] == [[0]]


def test_the_latest_acl_applies_at_once(gens: tuple[Path, Path]) -> None:
    revoked = {**ACLS, "root": {"tenant": "acme", "read": ["user:bob"]}}
    assert edges(run(gens, 'LINEAGE DESCENDANTS OF "root"', acls=revoked)) == set()
    assert run(gens, 'FROM events WHERE sessionId = "root"', acls=revoked)["rows"] == []
    assert run(gens, "FROM sessions SELECT count()", acls={})["rows"] == [[0]]


@pytest.mark.parametrize("as_of", [0, 1, 3, 5, 8, 10, 14])
def test_answers_hold_exactly_the_rows_at_or_below_as_of(gens: tuple[Path, Path], as_of: int) -> None:
    seqs = [row[0] for row in run(gens, "FROM events SELECT seq", who=BOB, as_of=as_of)["rows"]]
    assert seqs == [s for s in (1, 2, 4, 5, 6, 8, 9, 10, 14) if s <= as_of]
    lineage = run(gens, 'LINEAGE DESCENDANTS OF "root"', who=BOB, as_of=as_of)["rows"]
    assert all(row[3] <= as_of for row in lineage)
    assert (("session-parent", "hidden", "grand", 2) in edges(
        run(gens, 'LINEAGE DESCENDANTS OF "root"', who=BOB, as_of=as_of))) == (as_of >= 8)
    calls = run(gens, "FROM tool_calls SELECT seq, resultSeq", who=BOB, as_of=as_of)["rows"]
    assert calls == [[s, r if r <= as_of else None] for s, r in ((2, 6), (5, 14)) if s <= as_of]
    chunks = run(gens, "FROM chunks SELECT maxSeq", who=BOB, as_of=as_of)["rows"]
    assert chunks == [[m] for m in (5, 6) if m <= as_of]


def test_lineage_takes_the_rest_of_the_language(gens: tuple[Path, Path]) -> None:
    body = run(gens, 'LINEAGE DESCENDANTS OF "root" WHERE kind = "session-parent" GROUP BY depth '
                     "SELECT depth, count() AS edges ORDER BY depth", who=BOB)
    assert (body["columns"], body["rows"]) == (["depth", "edges"], [[1, 2], [2, 1]])
    assert body["generations"] == {"structured": 2}
    assert body["watermarks"]["structured"]["generationId"] == 2
    assert body["watermarks"]["structured"]["builtThroughSeq"] >= body["asOfSeq"]
    limited = run(gens, 'lineage descendants of "root" select toId order by toId desc limit 1', who=BOB)
    assert limited["rows"] == [["side"]]
    assert limited["query"] == 'LINEAGE DESCENDANTS OF "root" SELECT toId ORDER BY toId DESC LIMIT 1'


def test_missing_generations_are_503_and_bad_arguments_400(gens: tuple[Path, Path]) -> None:
    with pytest.raises(IndexUnavailable):
        run_sessionql('LINEAGE ANCESTORS OF "x"', as_of_seq=1, principal=ANN, session_acls=ACLS,
                      analytics_gen_dir=gens[0], structured_gen_dir=None)
    with pytest.raises(IndexUnavailable):
        run_sessionql("FROM events", as_of_seq=1, principal=ANN, session_acls=ACLS,
                      analytics_gen_dir=None, structured_gen_dir=gens[1])
    for as_of in (-1, True, "3"):
        with pytest.raises(QueryError):
            run(gens, "FROM events", as_of=as_of)  # type: ignore[arg-type]
    with pytest.raises(QueryError):
        run(gens, "FROM events", max_rows=0)


def test_literals_are_data_never_sql(gens: tuple[Path, Path]) -> None:
    for text in ('FROM events WHERE title = "x\'); DROP TABLE events; --"',
                 "FROM events WHERE title = 'it\\'s' OR title CONTAINS \"\\\"\"",
                 'FROM events WHERE title IN ("a\\u0027b", "read_csv(\'/etc/passwd\')")'):
        assert run(gens, text)["rows"] == []
    compiled = compile_query(parse('FROM events WHERE title = "x\'y"')).sql
    assert "'x''y'" in compiled


# -- the language: round trips, robustness, errors -------------------------------------------------

_FIELD_VALUES = {
    FieldType.STRING: st.text(max_size=8).filter(lambda s: "\x00" not in s and all(
        not 0xD800 <= ord(c) <= 0xDFFF for c in s)).map(lambda s: json.dumps(s)),
    FieldType.INTEGER: st.integers(-10**12, 10**12).map(str),
    FieldType.NUMBER: st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    FieldType.BOOLEAN: st.sampled_from(["TRUE", "false"]),
    FieldType.TIME: st.sampled_from(['"2026-01-31T12:00:00Z"', '"2026-01-31"',
                                     '"2026-01-31T14:00:00.25+02:00"']),
}


@st.composite
def queries(draw: st.DrawFn) -> str:
    """Random well-formed queries over the events and tool_calls tables."""
    table = draw(st.sampled_from(["events", "tool_calls", "sessions"]))
    fields = TABLES[table]
    comparable = [f for f, t in fields.items() if t in _FIELD_VALUES]

    def predicate() -> st.SearchStrategy[str]:
        @st.composite
        def one(draw: st.DrawFn) -> str:
            name = draw(st.sampled_from(comparable))
            kind = fields[name]
            value = draw(_FIELD_VALUES[kind])
            form = draw(st.sampled_from(["cmp", "in", "null", "contains"]))
            if form == "null":
                return f"{name} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
            if form == "contains" and kind is FieldType.STRING:
                return f"{name} {draw(st.sampled_from(['', 'NOT ']))}CONTAINS {value}"
            if form == "in":
                return f"{name} {draw(st.sampled_from(['', 'NOT ']))}IN ({value}, {value})"
            ops = ["=", "!="] if kind is FieldType.BOOLEAN else ["=", "!=", "<>", "<", "<=", ">", ">="]
            return f"{name} {draw(st.sampled_from(ops))} {value}"
        return one()

    condition = st.recursive(
        predicate(),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from([" AND ", " or "]), inner).map(lambda t: f"({t[0]}{t[1]}{t[2]})"),
            inner.map(lambda c: f"NOT {c}")),
        max_leaves=6)
    text = f"from {table}"
    if draw(st.booleans()):
        text += f" where {draw(condition)}"
    grouped = [f for f, t in fields.items() if t is not FieldType.STRING_LIST]
    if draw(st.booleans()):
        group = draw(st.lists(st.sampled_from(grouped), min_size=1, max_size=2, unique=True))
        text += " group by " + ", ".join(group)
        if draw(st.booleans()):
            text += " select " + ", ".join([*group, "count() as n", f"max({group[0]})"])
            text += f" order by n desc, {group[0]}"
    elif draw(st.booleans()):
        text += f" order by {draw(st.sampled_from(list(fields)))} desc"
    if draw(st.booleans()):
        text += f" limit {draw(st.integers(0, 100))}"
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queries())
def test_normalized_text_parses_to_the_same_query(text: str) -> None:
    query = parse(text)
    normalized = to_text(query)
    assert parse(normalized) == query
    assert to_text(parse(normalized)) == normalized
    compile_query(query)


_SOUP = st.lists(st.sampled_from([
    "FROM", "from", "events", "sessions", "lineage", "LINEAGE", "ANCESTORS", "OF", "WHERE", "AND",
    "OR", "NOT", "IN", "CONTAINS", "IS", "NULL", "GROUP", "BY", "SELECT", "ORDER", "LIMIT", "AS",
    "DESC", "seq", "type", "time", "count", "sum", "(", ")", ",", "=", "<", "!=", "*", "-", "1",
    "2.5", '"x"', "'y'", '"2026-01-31"', "TRUE", "\n", "'", '"', "\\", "?", ";", "1e999", "99999999999999999999",
]), max_size=14).map(" ".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(_SOUP, st.text(max_size=60)))
def test_any_text_parses_or_gets_a_positioned_error(text: str) -> None:
    try:
        parse(text)
    except SessionQLError as error:
        assert error.status == 400 and error.code == "bad_query"
        assert " at line " in error.message and error.hint
        assert 1 <= error.line and 1 <= error.column
        assert "Traceback" not in error.message


@pytest.mark.parametrize(("text", "fragment", "line", "column"), [
    ("", "empty", 1, 1),
    ("   ", "empty", 1, 1),
    ("SELECT * FROM events", "starts with FROM", 1, 1),
    ("FROM evnts", "unknown table 'evnts'", 1, 6),
    ("FROM", "a table name is missing", 1, 5),
    ("FROM lineage", "LINEAGE ANCESTORS", 1, 6),
    ("FROM events WHERE tol = 1", "unknown field 'tol'", 1, 19),
    ("FROM events WHERE seq = \"x\"", "seq is an integer", 1, 25),
    ("FROM events WHERE type = 3", "type is a string", 1, 26),
    ("FROM events WHERE type =", "the end of the query", 1, 25),
    ("FROM events WHERE type = NULL", "IS NULL", 1, 26),
    ("FROM events WHERE type", "expected an operator after type", 1, 19),
    ("FROM events WHERE type = 'abc", "not closed", 1, 26),
    ("FROM events WHERE type = 'a\\qb'", "unknown escape", 1, 28),
    ("FROM events WHERE time > \"2026-01-31T12:00:00\"", "needs a time zone", 1, 26),
    ("FROM events WHERE time > \"yesterday\"", "is not a time", 1, 26),
    ("FROM events WHERE seq IN ()", "at least one value", 1, 27),
    ("FROM events WHERE seq CONTAINS \"1\"", "CONTAINS needs a string or list", 1, 23),
    ("FROM tool_calls WHERE paramKeys = \"cmd\"", "list of strings", 1, 33),
    ("FROM sessions WHERE ended > TRUE", "compare it with = or !=", 1, 27),
    ("FROM events WHERE (seq = 1", "expected ')'", 1, 27),
    ("FROM events WHERE seq = 1 AND", "expected a field", 1, 30),
    ("FROM events WHERE seq = 99999999999999999999", "out of range", 1, 25),
    ("FROM events WHERE seq = 1x", "malformed number", 1, 25),
    ("FROM events WHERE seq = 1 -- comment", "no comments", 1, 27),
    ("FROM events WHERE seq ~ 1", "unexpected character '~'", 1, 23),
    ("FROM events SELECT type, count()", "type is neither grouped nor aggregated", 1, 20),
    ("FROM events GROUP BY type SELECT seq", "seq is neither grouped", 1, 34),
    ("FROM events GROUP BY type, type", "twice", 1, 28),
    ("FROM events SELECT sum(type)", "sum() needs a numeric field", 1, 24),
    ("FROM events SELECT avg()", "avg() needs a field", 1, 20),
    ("FROM events SELECT median(seq)", "unknown function median()", 1, 20),
    ("FROM tool_calls SELECT max(paramKeys)", "cannot compare lists", 1, 28),
    ("FROM events SELECT seq, seq", "two columns are named seq", 1, 25),
    ("FROM events SELECT seq AS from", "column name after AS", 1, 27),
    ("FROM events ORDER BY nope", "unknown column 'nope'", 1, 22),
    ("FROM events GROUP BY type ORDER BY seq", "aggregated query orders by", 1, 36),
    ("FROM events LIMIT -1", "whole number", 1, 19),
    ("FROM events LIMIT 2.5", "whole number", 1, 19),
    ("FROM events LIMIT 1 WHERE seq = 1", "WHERE is out of place", 1, 21),
    ("FROM events ORDER BY seq SELECT seq", "SELECT is out of place", 1, 26),
    ("FROM events WHERE seq = 1 WHERE seq = 2", "WHERE is out of place", 1, 27),
    ("FROM events extra", "unexpected 'extra'", 1, 13),
    ("LINEAGE OF \"x\"", "ANCESTORS or DESCENDANTS", 1, 9),
    ("LINEAGE ANCESTORS \"x\"", "expected OF", 1, 19),
    ("LINEAGE ANCESTORS OF x", "quoted id", 1, 22),
    ("LINEAGE ANCESTORS OF \"\"", "quoted id", 1, 22),
    ("FROM events\nWHERE\n  seq = \"x\"", "seq is an integer", 3, 9),
])
def test_malformed_queries_say_what_and_where(text: str, fragment: str, line: int, column: int) -> None:
    with pytest.raises(SessionQLError) as info:
        parse(text)
    error = info.value
    assert fragment in error.message, error.message
    assert (error.line, error.column) == (line, column), error.message
    assert error.message.endswith(f"at line {line}, column {column}")
    body = error_body(error)
    assert body["error"]["code"] == "bad_query" and body["error"]["status"] == 400
    assert body["error"]["hint"]


def test_too_long_and_too_deep_queries_are_refused() -> None:
    with pytest.raises(SessionQLError, match="longer than"):
        parse("FROM events WHERE " + " OR ".join(["seq = 1"] * 3000))
    with pytest.raises(SessionQLError, match="nested"):
        parse("FROM events WHERE " + "(" * 100 + "seq = 1" + ")" * 100)
    with pytest.raises(SessionQLError, match="nested"):
        parse("FROM events WHERE " + "NOT " * 100 + "seq = 1")


def test_spellings_normalize_to_one_text() -> None:
    spellings = [
        "from EVENTS where TYPE = 'tool.call' and (status <> \"ok\" or status is null) "
        "group by toolname select toolname, COUNT(*) as errors order by errors desc limit 5",
        "FROM events\n WHERE (type = \"tool.call\") AND ((status != 'ok') OR (status IS NULL))\n"
        " GROUP BY toolName SELECT toolName, count() AS errors ORDER BY errors DESC LIMIT 5",
    ]
    texts = {to_text(parse(s)) for s in spellings}
    assert texts == {'FROM events WHERE type = "tool.call" AND (status != "ok" OR status IS NULL) '
                     'GROUP BY toolName SELECT toolName, count() AS errors ORDER BY errors DESC LIMIT 5'}
    assert to_text(parse('FROM events WHERE time >= "2026-01-31T14:00:00+02:00"')) == (
        'FROM events WHERE time >= "2026-01-31T12:00:00Z"')
    assert to_text(parse("FROM events WHERE seq > -2.5e3 AND NOT (seq = 1 OR seq = 2)")) == (
        "FROM events WHERE seq > -2500.0 AND NOT (seq = 1 OR seq = 2)")


# -- the service, the CLI and the API over a real broker ------------------------------------------


@pytest.mark.parametrize(("body", "fragment"), [
    ([], "JSON object"),
    ({}, "non-empty SessionQL"),
    ({"query": "  "}, "non-empty SessionQL"),
    ({"query": "FROM events", "sql": "x"}, "unknown field(s): sql"),
    ({"query": "FROM events", "asOfSeq": -1}, "asOfSeq"),
    ({"query": "FROM events", "asOfSeq": "5"}, "asOfSeq"),
    ({"query": "FROM events", "log": ""}, "log"),
    ({"query": "FROM events", "maxRows": 0}, "maxRows"),
    ({"query": "FROM evnts"}, "unknown table"),
])
def test_bad_requests_are_refused_before_any_index_is_read(body: Any, fragment: str) -> None:
    with pytest.raises(QueryError) as info:
        sessionql_request(None, body, ANN)  # type: ignore[arg-type]  # never reached
    assert fragment in info.value.message


@pytest.fixture(scope="module")
def live(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from planner.engine import Planner
    from tests.planner.corpus import IndexBuilder, interleaved, make_test_settings

    settings_ = make_test_settings(Path(tmp_path_factory.mktemp("sessionql-live")), kafka_bootstrap)
    builder = IndexBuilder(settings_, kafka_bootstrap, "default")
    order, _ = interleaved("default")
    builder.append(order)
    builder.commit("structured", "analytics")
    planner_ = Planner(settings_, kafka_bootstrap)
    yield settings_, planner_, builder
    planner_.close()
    builder.close()


ALICE = Principal("acme", "alice", groups=frozenset({"eng"}))


@pytest.mark.kafka
def test_service_answers_at_the_indexed_seq(live: Any) -> None:
    _, planner_, builder = live
    body = sessionql_request(planner_, {"query": "FROM sessions SELECT sessionId"}, ALICE)
    built = builder.replay.chunks_through()
    assert body["asOfSeq"] == min(max(builder.seqs.values()), built)
    assert sorted(row[0] for row in body["rows"]) == ["s-alice", "s-all", "s-eng"]
    assert set(body["generations"]) == {"analytics", "structured"} and body["log"] == "default"
    other = sessionql_request(planner_, {"query": "FROM sessions SELECT sessionId"},
                              Principal("globex", "mallory"))
    assert [row[0] for row in other["rows"]] == ["s-other"]
    early = sessionql_request(planner_, {"query": "FROM events SELECT max(seq)", "asOfSeq": 5}, ALICE)
    assert early["asOfSeq"] == 5 and early["rows"][0][0] <= 5
    with pytest.raises(QueryError, match="past what the analytics index covers"):
        sessionql_request(planner_, {"query": "FROM events", "asOfSeq": body["asOfSeq"] + 1}, ALICE)
    lineage = sessionql_request(planner_, {"query": 'LINEAGE ANCESTORS OF "s-alice"'}, ALICE)
    assert set(lineage["generations"]) == {"structured"}
    assert {row[0] for row in lineage["rows"]} <= {"run-session", "episode-session", "session-parent"}
    capped = sessionql_request(planner_, {"query": "FROM events", "maxRows": 2}, ALICE)
    assert capped["rowCount"] == 2 and capped["truncated"]
    # The result cap is the deployment's USL_SQL_MAX_RESULT_BYTES, not the attachment's default.
    setting = dataclasses.replace(planner_.settings, sql_max_result_bytes=1024)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planner_, "settings", setting)
        small = sessionql_request(planner_, {"query": "FROM events"}, ALICE)
    assert small["truncated"] and small["truncation"]["maxResultBytes"] == 1024
    assert 0 < small["rowCount"] < sessionql_request(planner_, {"query": "FROM events"}, ALICE)["rowCount"]
    with pytest.raises(PlannerError) as info:
        sessionql_request(planner_, {"query": "FROM events", "log": "no-such-log"}, ALICE)
    assert info.value.status == 404  # as search: an unknown log is not an index to wait for


@pytest.mark.kafka
def test_cli(live: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from deploy.cli import app

    settings_, _, _ = live
    for name, value in (("USL_HOME", str(settings_.home)), ("USL_TOPIC_PREFIX", settings_.topic_prefix),
                        ("KAFKA_BOOTSTRAP_SERVERS", settings_.bootstrap_servers),
                        ("USL_L1_PARTITIONS", str(settings_.l1_partitions)),
                        ("USL_STREAM_PARTITIONS", str(settings_.stream_partitions)),
                        ("USL_EMBEDDER", "hash:64"), ("USL_CURSOR_KEY", "test-cursor-key-0123456789")):
        monkeypatch.setenv(name, value)
    runner = CliRunner()
    alice = "tenant:acme/user:alice/groups:eng"
    result = runner.invoke(app, ["sessionql", "FROM sessions GROUP BY tenant", "--as", alice, "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["rows"] == [["acme", 3]] and body["query"] == "FROM sessions GROUP BY tenant"
    result = runner.invoke(app, ["sessionql", "FROM sessions SELECT sessionId", "--as", alice,
                                 "--as-of", "3"])
    assert result.exit_code == 0, result.output
    # Not a terminal: the rows tab-separated on stdout, the snapshot line on stderr.
    assert result.stdout.splitlines()[0] == "sessionId" and "asOfSeq 3" in result.stderr
    result = runner.invoke(app, ["sessionql", "FROM sessions WHERE nope = 1", "--as", alice, "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "bad_query" and "line 1, column 21" in error["message"]
    result = runner.invoke(app, ["sessionql", "FROM sessions WHERE nope = 1", "--as", alice])
    assert result.exit_code == 2 and "unknown field 'nope'" in result.output


@pytest.mark.kafka
def test_api_route(live: Any) -> None:
    from starlette.testclient import TestClient

    from planner.api import PRINCIPAL_HEADER, create_app

    settings_, planner_, _ = live
    headers = {PRINCIPAL_HEADER: "tenant:acme/user:alice/groups:eng"}
    with TestClient(create_app(settings_, settings_.bootstrap_servers, planner=planner_),
                    base_url="http://localhost") as client:
        response = client.post("/v1/sessionql", json={"query": "FROM sessions SELECT count()"},
                               headers=headers)
        assert response.status_code == 200, response.text
        assert response.json()["rows"] == [[3]]
        refused = client.post("/v1/sessionql", json={"query": "FROM sessions WHERE"}, headers=headers)
        assert refused.status_code == 400
        assert set(refused.json()) == {"error"} and "column" in refused.json()["error"]["message"]


@pytest.mark.kafka
def test_a_damaged_generation_is_never_read_and_the_answer_says_so(kafka_bootstrap: str, tmp_path: Path) -> None:
    """SessionQL pins as search does: the newest analytics generation with a flipped byte is
    refused, the older one that verifies answers, and ``fallbacks`` says what was refused; with
    no generation left that verifies, the answer is a 503 naming the damage."""
    from planner.engine import Planner
    from planner.exceptions import IndexUnavailable
    from sinks.generations import GenerationStore
    from sinks.runner import index_root
    from tests.planner.corpus import IndexBuilder, interleaved, make_test_settings

    settings_ = make_test_settings(tmp_path, kafka_bootstrap)
    builder = IndexBuilder(settings_, kafka_bootstrap, "default")
    order, _ = interleaved("default")
    half = len(order) // 2
    builder.append(order[:half])
    first = builder.commit("structured", "analytics")["analytics"]
    builder.append(order[half:])
    second = builder.commit("structured", "analytics")["analytics"]
    planner_ = Planner(settings_, kafka_bootstrap)
    try:
        query = {"query": "FROM events SELECT count(*)"}
        whole = sessionql_request(planner_, query, ALICE)
        assert "fallbacks" not in whole and whole["asOfSeq"] == second.built_through_seq
        store = GenerationStore(index_root(settings_), "default", "analytics")
        fresh = [s for s in second.segments if s.path.endswith(".parquet") and s.bytes
                 and s.path not in {f.path for f in first.segments}]
        target = store.generation_dir(second.generation_id) / fresh[0].path
        target.chmod(0o644)
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
        older = sessionql_request(planner_, query, ALICE)
        assert older["asOfSeq"] == first.built_through_seq < whole["asOfSeq"]
        assert any(f.startswith("analytics: generation") and "refused" in f for f in older["fallbacks"])
        manifest = store.generation_dir(first.generation_id) / "manifest.json"
        manifest.chmod(0o644)
        manifest.write_text("{}")
        with pytest.raises(IndexUnavailable, match="analytics index of log 'default' is unavailable"):
            sessionql_request(planner_, query, ALICE)
    finally:
        planner_.close()
        builder.close()


def test_lineage_cut_at_the_depth_cap_says_so(tmp_path: Path) -> None:
    """Found on real Claude Code sessions: every message names the previous one as its cause,
    so LINEAGE DESCENDANTS OF an early tool call stopped at depth 64 and answered
    `truncated: false`, as if the rest of the conversation had no descendants."""
    from planner.sessionql.lineage import MAX_DEPTH

    def chain(length: int) -> list[dict[str, Any]]:
        records = [make_event(1, "root", "session.started", event_id="e-0", acl=ACLS["root"])]
        for i in range(1, length + 1):
            records.append(make_event(i + 1, "root", "message", event_id=f"e-{i}", acl=ACLS["root"],
                                      parent_event_id=f"e-{i - 1}", fields={"text": "t"}))
        return records

    for length, cut in ((MAX_DEPTH, False), (MAX_DEPTH + 5, True)):
        root = tmp_path / str(length)
        root.mkdir()
        records = chain(length)
        analytics = commit_batches(root, AnalyticsWriter(), [records])[-1]
        structured = commit_batches(root, StructuredWriter(), [records])[-1]
        body = run((analytics, structured), 'LINEAGE DESCENDANTS OF "e-0"', as_of=length + 1)
        assert body["rowCount"] == MAX_DEPTH and max(row[5] for row in body["rows"]) == MAX_DEPTH
        assert body["truncated"] is cut, length
        assert body.get("truncation") == ({"reason": "depth", "maxDepth": MAX_DEPTH} if cut else None)
