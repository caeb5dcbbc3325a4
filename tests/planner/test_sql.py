"""The read-only SQL attachment: snapshot semantics, ACL isolation, lock-down, timeouts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import planner.sql
from planner.acl import Principal
from planner.exceptions import PlannerError, QueryError
from planner.sql import NOTICE, SqlAttachment
from sinks.analytics import AnalyticsWriter
from sinks.structured import StructuredWriter
from sinks.testing import commit_batches, make_chunk, make_event
from sinks.writer import parquet_segments
from tests.fuzz.profile import fuzz

ANN = Principal("acme", "ann")
BOB = Principal("acme", "bob")
ENG = Principal("acme", "carol", groups=frozenset({"eng"}))
OTHER = Principal("other", "ann")

ACLS = {
    "s-ann": {"tenant": "acme", "read": ["user:ann"]},
    "s-bob": {"tenant": "acme", "read": ["user:bob"]},
    "s-eng": {"tenant": "acme", "read": ["group:eng"]},
    "s-other": {"tenant": "other", "read": ["*"]},
}


def session(session_id: str, seqs: list[int], *, model: str) -> list[dict[str, Any]]:
    """Events of one session at the given (gappy, interleaved) seqs: start, a turn with a tool
    call and its result, a reply, a chunk, and the end."""
    acl = ACLS[session_id]
    s0, s1, s2, s3, s4, s5 = seqs
    turn = f"{session_id}-t1"
    call_id = f"{session_id}-call"
    return [
        make_event(s0, session_id, "session.started", acl=acl, run_id=f"{session_id}-r",
                   fields={"title": f"title of {session_id}", "model": model}),
        make_event(s1, session_id, "message", role="user", acl=acl, turn_id=turn,
                   run_id=f"{session_id}-r", fields={"text": "hi"}),
        make_event(s2, session_id, "tool.call", role="assistant", acl=acl, turn_id=turn,
                   run_id=f"{session_id}-r",
                   fields={"toolName": "Bash", "toolCallId": call_id, "input": {"cmd": "x"},
                           "usage": {"inputTokens": 100, "outputTokens": 10}}),
        make_event(s3, session_id, "tool.result", role="tool", acl=acl, turn_id=turn,
                   run_id=f"{session_id}-r",
                   fields={"toolName": "Bash", "toolCallId": call_id,
                           "status": "error" if session_id == "s-bob" else "ok", "output": "out"}),
        make_event(s4, session_id, "message", role="assistant", acl=acl, turn_id=turn,
                   run_id=f"{session_id}-r", fields={"text": "bye", "model": model}),
        make_chunk(session_id, [s1, s4], turn_id=turn, acl=acl),
        make_event(s5, session_id, "session.ended", acl=acl, run_id=f"{session_id}-r"),
    ]


SEQS = {
    "s-ann": [1, 4, 7, 10, 13, 30],
    "s-bob": [2, 5, 8, 11, 14, 31],
    "s-eng": [3, 6, 9, 12, 16, 33],
    "s-other": [20, 21, 22, 23, 24, 40],
}


@pytest.fixture(scope="module")
def gens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("sql")
    records = [r for sid, seqs in SEQS.items() for r in session(sid, seqs, model=f"m-{sid}")]
    records.sort(key=lambda r: r.get("seq", r.get("maxSeq")))
    # Three generations, so the views read several segments.
    batches = [records[:9], records[9:20], records[20:]]
    analytics = commit_batches(root, AnalyticsWriter(), batches)[-1]
    structured = commit_batches(root, StructuredWriter(), batches)[-1]
    return analytics, structured


@pytest.fixture(scope="module")
def attachment(gens: tuple[Path, Path]) -> SqlAttachment:
    return SqlAttachment(*gens)


def run(attachment: SqlAttachment, sql: str, *, as_of: int = 100, who: Principal = ANN,
        acls: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return attachment.query(sql, as_of_seq=as_of, principal=who,
                            session_acls=ACLS if acls is None else acls, **kwargs)


def refused(attachment: SqlAttachment, sql: str, **kwargs: Any) -> QueryError:
    with pytest.raises(QueryError) as info:
        run(attachment, sql, **kwargs)
    error = info.value
    assert error.status == 400 and error.code == "bad_query"
    assert "Traceback" not in error.message and "/tmp" not in error.message
    assert "/work" not in error.message and ".parquet" not in error.message
    return error


def test_public_surface() -> None:
    assert set(planner.sql.__all__) == {"DEFAULT_MAX_RESULT_BYTES", "NOTICE", "VIEWS", "SqlAttachment"}
    assert planner.sql.VIEWS == ("sessions", "runs", "turns", "events", "tool_calls", "chunks")


def test_response_shape(attachment: SqlAttachment, gens: tuple[Path, Path]) -> None:
    body = run(attachment, "SELECT sessionId, startTime, durationSeconds FROM sessions")
    assert body["columns"] == ["sessionId", "startTime", "durationSeconds"]
    assert body["rows"] == [["s-ann", "2026-01-31T12:00:01Z", 29.0]]
    assert (body["rowCount"], body["truncated"], body["asOfSeq"], body["notice"]) == (1, False, 100, NOTICE)
    assert body["generations"]["analytics"] == {"generationId": 3, "builtThroughSeq": 40}
    assert body["generations"]["structured"]["generationId"] == 3
    assert body["uncovered"] == {"fromSeq": 41, "toSeq": 100}
    assert "uncovered" not in run(attachment, "SELECT 1", as_of=40)
    json.dumps(body)


@pytest.mark.parametrize("as_of", [0, 1, 5, 9, 12, 16, 29, 33, 100])
def test_views_show_exactly_the_rows_at_or_below_as_of(attachment: SqlAttachment, as_of: int) -> None:
    visible = {"s-ann", "s-eng"}  # carol is in eng... but we ask as ENG below; ann first
    for who, sessions in ((ANN, {"s-ann"}), (ENG, {"s-eng"})):
        expected = sorted(s for sid in sessions for s in SEQS[sid] if s <= as_of)
        events = run(attachment, "SELECT seq FROM events ORDER BY seq", as_of=as_of, who=who)
        assert [r[0] for r in events["rows"]] == expected
        summary = run(attachment, "SELECT coalesce(sum(eventCount), 0), count(*) FROM sessions",
                      as_of=as_of, who=who)["rows"]
        assert summary == [[len(expected), 1 if expected else 0]]
        calls = run(attachment, "SELECT seq, resultSeq, status FROM tool_calls", as_of=as_of, who=who)
        sid, = sessions
        call_seq, result_seq = SEQS[sid][2], SEQS[sid][3]
        want = [] if call_seq > as_of else [[call_seq, result_seq if result_seq <= as_of else None,
                                             "ok" if result_seq <= as_of else None]]
        assert calls["rows"] == want
        chunks = run(attachment, "SELECT minSeq, maxSeq FROM chunks", as_of=as_of, who=who)
        assert chunks["rows"] == ([[SEQS[sid][1], SEQS[sid][4]]] if SEQS[sid][4] <= as_of else [])
        turns = run(attachment, "SELECT eventCount, toolCallCount FROM turns", as_of=as_of, who=who)
        in_turn = [s for s in SEQS[sid][1:5] if s <= as_of]
        assert turns["rows"] == ([[len(in_turn), int(call_seq <= as_of)]] if in_turn else [])
    assert visible


def test_principals_see_disjoint_rows_and_counts_reveal_nothing(attachment: SqlAttachment) -> None:
    seen = {}
    for who in (ANN, BOB, ENG, OTHER, Principal("acme", "mallory")):
        body = run(attachment, "SELECT DISTINCT sessionId FROM events ORDER BY 1", who=who)
        seen[who.user + who.tenant] = {r[0] for r in body["rows"]}
        counts = run(attachment, """
            SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM sessions),
                   (SELECT count(*) FROM tool_calls), (SELECT count(*) FROM chunks),
                   (SELECT count(*) FROM runs), (SELECT count(*) FROM turns),
                   (SELECT coalesce(max(seq), 0) FROM events)""", who=who)["rows"][0]
        n = len(seen[who.user + who.tenant])
        top = max((s for sid in seen[who.user + who.tenant] for s in SEQS[sid]), default=0)
        assert counts == [6 * n, n, n, n, n, n, top]
    assert seen == {"annacme": {"s-ann"}, "bobacme": {"s-bob"}, "carolacme": {"s-eng"},
                    "annother": {"s-other"}, "malloryacme": set()}


def test_latest_acl_applies_and_unknown_sessions_are_invisible(attachment: SqlAttachment) -> None:
    revoked = {**ACLS, "s-ann": {"tenant": "acme", "read": ["user:bob"]}}
    assert run(attachment, "SELECT count(*) FROM events", acls=revoked)["rows"] == [[0]]
    shared = run(attachment, "SELECT DISTINCT sessionId FROM events ORDER BY 1", who=BOB, acls=revoked)
    assert shared["rows"] == [["s-ann"], ["s-bob"]]
    assert run(attachment, "SELECT count(*) FROM events", acls={})["rows"] == [[0]]
    malformed = {"s-ann": {"tenant": "acme", "read": "user:ann"}}
    assert run(attachment, "SELECT count(*) FROM sessions", acls=malformed)["rows"] == [[0]]


@pytest.mark.parametrize("who", [ANN, BOB, ENG, OTHER])
def test_errors_never_show_rows_of_hidden_sessions(attachment: SqlAttachment, who: Principal) -> None:
    # s-ann's rows come first in every file, so for BOB a filter evaluated before the ACL
    # would fail on one of them and name it.
    mine = {"ann": "s-ann", "bob": "s-bob", "carol": "s-eng"}[who.user] if who.tenant == "acme" else "s-other"
    for sql in ("SELECT * FROM events WHERE CAST(sessionId || '-x' AS INTEGER) = 1",
                "SELECT * FROM tool_calls WHERE CAST(sessionId AS INTEGER) = 1",
                "SELECT * FROM chunks WHERE error(sessionId) IS NULL",
                "SELECT * FROM sessions WHERE error(sessionId) IS NULL",
                "SELECT error(string_agg(sessionId, ',')) FROM events"):
        try:
            shown = json.dumps(run(attachment, sql, who=who))
        except QueryError as error:
            shown = error.message
        assert mine in shown
        for hidden in {"s-ann", "s-bob", "s-eng", "s-other"} - {mine}:
            assert hidden not in shown, sql


def test_aggregate_views(attachment: SqlAttachment) -> None:
    row = run(attachment, """
        SELECT title, model, runCount, turnCount, eventCount, messageCount, toolCallCount,
               errorCount, inputTokens, outputTokens, ended, firstSeq, lastSeq FROM sessions""",
              who=BOB)["rows"]
    assert row == [["title of s-bob", "m-s-bob", 1, 1, 6, 2, 1, 1, 100, 10, True, 2, 31]]
    assert run(attachment, "SELECT runId, eventCount, ended FROM runs", who=BOB)["rows"] == [
        ["s-bob-r", 6, False]]
    assert run(attachment, "SELECT ended FROM sessions", who=BOB, as_of=30)["rows"] == [[False]]
    rate = run(attachment, """
        SELECT toolName, count(*) AS calls, avg((status = 'error')::INT) AS errorRate
        FROM tool_calls GROUP BY toolName""", who=BOB)["rows"]
    assert rate == [["Bash", 1, 1.0]]
    assert run(attachment, "SELECT paramKeys, outputBytes, durationSeconds FROM tool_calls",
               who=BOB)["rows"] == [[["cmd"], 3, 3.0]]


def test_ordinary_selects_work(attachment: SqlAttachment) -> None:
    for sql in (
        "WITH e AS (SELECT * FROM events) SELECT type, count(*) FROM e GROUP BY ALL ORDER BY 1",
        "SELECT seq, row_number() OVER (PARTITION BY sessionId ORDER BY seq) FROM events",
        "FROM events SELECT seq QUALIFY seq = max(seq) OVER ()",
        "SELECT x FROM range(3) t(x)",
        "SELECT * FROM events, unnest([1, 2]) AS u(i) LIMIT 1",
        "SELECT [x * 2 FOR x IN [1, 2]] AS doubled, {'a': 1} AS s, 1.5::DECIMAL(4,2) AS d",
        "DESCRIBE tool_calls",
        "SELECT list(seq ORDER BY seq) FROM events;",
        "select * from EVENTS where Seq < 5",
        "(SELECT 1) UNION ALL (SELECT 2)",
    ):
        json.dumps(run(attachment, sql))


def test_max_rows_truncates(attachment: SqlAttachment) -> None:
    body = run(attachment, "SELECT * FROM range(50)", max_rows=10)
    assert (body["rowCount"], body["truncated"], len(body["rows"])) == (10, True, 10)
    assert body["truncation"] == {"reason": "rows", "maxRows": 10,
                                  "maxResultBytes": planner.sql.DEFAULT_MAX_RESULT_BYTES}
    body = run(attachment, "SELECT * FROM range(10)", max_rows=10)
    assert (body["rowCount"], body["truncated"]) == (10, False) and "truncation" not in body


@pytest.mark.parametrize("limit", [1, 1000, 250_000, planner.sql.DEFAULT_MAX_RESULT_BYTES])
def test_result_bytes_are_capped(attachment: SqlAttachment, limit: int) -> None:
    """issue 15: the memory limit does not bound the answer; a 1 GB result must not be built."""
    body = run(attachment, "SELECT range, repeat('x', 100000) AS pad FROM range(10000)",
               max_result_bytes=limit)
    assert body["truncated"] and body["truncation"]["reason"] == "bytes"
    assert body["truncation"]["maxResultBytes"] == limit
    assert len(orjson.dumps(body["rows"])) <= max(limit, 2)
    assert body["rowCount"] == len(body["rows"]) == (limit - 1) // len(b'[0,"' + b"x" * 100000 + b'"],')
    assert [row[0] for row in body["rows"]] == list(range(body["rowCount"]))


def test_rows_that_fit_are_not_truncated_by_bytes(attachment: SqlAttachment) -> None:
    body = run(attachment, "SELECT repeat('x', 10) FROM range(3)", max_result_bytes=len(b'[["xxxxxxxxxx"],["xxxxxxxxxx"],["xxxxxxxxxx"]]'))
    assert (body["rowCount"], body["truncated"]) == (3, False)
    body = run(attachment, "SELECT repeat('x', 10) FROM range(3)", max_result_bytes=len(b'[["xxxxxxxxxx"],["xxxxxxxxxx"],["xxxxxxxxxx"]]') - 1)
    assert (body["rowCount"], body["truncated"]) == (2, True)


def test_integers_wider_than_64_bits_are_text(attachment: SqlAttachment) -> None:
    body = run(attachment, "SELECT 170141183460469231731687303715884105727::HUGEINT AS h, "
               "18446744073709551615::UHUGEINT AS u, (-9223372036854775807 - 1)::BIGINT AS b, "
               "1180591620717411303424::DECIMAL(38, 0) AS d")
    assert body["rows"] == [["170141183460469231731687303715884105727", 18446744073709551615,
                             -9223372036854775808, "1180591620717411303424"]]
    orjson.dumps(body)


@pytest.mark.parametrize("sql", [
    "INSERT INTO events SELECT * FROM events",
    "CREATE TABLE x AS SELECT 1",
    "CREATE VIEW v AS SELECT 1",
    "DROP TABLE events",
    "UPDATE events SET seq = 0",
    "DELETE FROM events",
    "ALTER TABLE events ADD COLUMN x INT",
    "ATTACH '/tmp/evil.db' AS evil",
    "DETACH memory",
    "COPY (SELECT * FROM events) TO '/tmp/out.csv'",
    "EXPORT DATABASE '/tmp/dump'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "PRAGMA database_list",
    "SET threads = 8",
    "RESET memory_limit",
    "CALL pragma_version()",
    "CHECKPOINT",
    "VACUUM",
    "PREPARE p AS SELECT 1",
    "USE memory",
    "EXPLAIN SELECT 1",
    "SELECT 1; SELECT 2",
    "SELECT 1; DROP TABLE events",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/hostname')",
    "SELECT * FROM glob('/*')",
    "SELECT * FROM '/etc/passwd'",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM query('SELECT 1')",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_views()",
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM pg_settings",
    "SELECT * FROM duckdb_tables",
    "SELECT * FROM temp.main.events",
    "SELECT * FROM _usl_allowed_sessions",
    "SELECT * FROM _snap_tool_calls",
    "SELECT current_setting('temp_directory')",
    "SELECT * FROM (WITH pg_settings AS (SELECT 1) SELECT 1), pg_settings",
    # issue 15: a WITH name declared in one scope does not cover a reference in another.
    "SELECT r.sessionId, r.parentSessionId, r.aclRead FROM (WITH _raw_events AS (SELECT 1) "
    "SELECT 1) q, _raw_events r WHERE r.parentSessionId IS NOT NULL",
    "SELECT * FROM (WITH duckdb_x AS (SELECT 1) SELECT 1) q, (SELECT * FROM duckdb_x) r",
    "WITH b AS (SELECT * FROM a), a AS (SELECT 1) SELECT * FROM b",
    "WITH a AS (SELECT * FROM a) SELECT * FROM a",
    "SHOW TABLES",
    "SELEC 1",
    "",
    "   ",
])
def test_refused_statements(attachment: SqlAttachment, sql: str) -> None:
    error = refused(attachment, sql)
    assert error.message


def test_read_parquet_of_a_real_index_file_is_refused(attachment: SqlAttachment, gens: tuple[Path, Path]) -> None:
    real = parquet_segments(gens[0], "events")[0]
    error = refused(attachment, f"SELECT count(*) FROM read_parquet('{real}')")
    assert "read_parquet" in error.message
    refused(attachment, f"SELECT count(*) FROM '{real}'")


def test_lockdown_holds_even_if_the_validator_let_a_statement_through(
        attachment: SqlAttachment, monkeypatch: pytest.MonkeyPatch, gens: tuple[Path, Path]) -> None:
    monkeypatch.setattr(planner.sql, "_validate", lambda con, sql: {"events"})
    real = parquet_segments(gens[0], "events")[0]
    for sql in ("SELECT * FROM read_csv('/etc/passwd')", f"SELECT * FROM read_parquet('{real}')",
                "SELECT * FROM glob('/*')", "COPY events TO '/tmp/usl-sql-leak.csv'",
                "ATTACH '/tmp/usl-sql-evil.db'", "INSTALL httpfs"):
        error = refused(attachment, sql)
        assert "cannot read or write files" in error.message
    for sql in ("SET threads = 8", "SET enable_external_access = true", "RESET memory_limit"):
        assert "locked" in refused(attachment, sql).message
    assert not Path("/tmp/usl-sql-leak.csv").exists()
    # Nothing but the public views exists under any name: no relation under them can be named.
    for table in ("_raw_events", "_snap_events", "_snap_tool_calls", "_snap_tool_results",
                  "_snap_chunks", "_allowed_sessions", "tool_results"):
        assert "does not exist" in refused(attachment, f"SELECT * FROM {table}").message
    names = run(attachment, "SELECT database_name, schema_name, table_name FROM duckdb_tables() "
                "UNION ALL SELECT database_name, schema_name, view_name FROM duckdb_views() "
                "WHERE NOT internal")["rows"]
    assert sorted(name for _db, _schema, name in names) == sorted(planner.sql.VIEWS)


_KEPT_QUERIES = (
    "SELECT sessionId, model, toolCallCount FROM sessions ORDER BY sessionId",
    "SELECT seq, type FROM events ORDER BY seq",
    "SELECT toolName, status FROM tool_calls ORDER BY sessionId",
    "SELECT count(*) FROM chunks",
)


@fuzz(25, deadline=None)  # each example opens up to eight fresh connections (~0.2 s each)
@given(st.lists(st.tuples(st.sampled_from([ANN, BOB, ENG, OTHER]), st.sampled_from([3, 12, 30, 40, 100]),
                          st.sampled_from(_KEPT_QUERIES)), min_size=1, max_size=8))
def test_a_kept_connection_answers_as_a_fresh_one(
        attachment: SqlAttachment, asked: list[tuple[Principal, int, str]]) -> None:
    """Any order of principals, snapshots and queries over kept connections gives each query
    the answer a fresh connection gives it: a kept connection is one key's (generation,
    snapshot, readable sessions), and no query leaves anything for the next."""
    kept = [run(attachment, sql, as_of=as_of, who=who) for who, as_of, sql in asked]
    fresh = []
    for who, as_of, sql in asked:
        planner.sql._PREPARED.clear()
        fresh.append(run(attachment, sql, as_of=as_of, who=who))
    assert kept == fresh


def test_the_views_are_built_once_per_snapshot_and_readable_sessions(
        gens: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    attachment = SqlAttachment(*gens)
    planner.sql._PREPARED.clear()
    built: list[tuple[int, tuple[str, ...]]] = []
    prepare = SqlAttachment._prepare

    def counting(self: SqlAttachment, con: Any, as_of_seq: int, allowed: list[str]) -> None:
        built.append((as_of_seq, tuple(allowed)))
        prepare(self, con, as_of_seq, allowed)

    monkeypatch.setattr(SqlAttachment, "_prepare", counting)
    for _ in range(3):
        assert run(attachment, "SELECT sessionId FROM sessions")["rows"] == [["s-ann"]]
        assert run(attachment, "SELECT sessionId FROM sessions", who=BOB)["rows"] == [["s-bob"]]
    run(attachment, "SELECT 1", as_of=12)
    run(attachment, "SELECT 1", acls={**ACLS, "s-bob": ACLS["s-ann"]})  # bob's session now readable by ann
    assert built == [(40, ("s-ann",)), (40, ("s-bob",)), (12, ("s-ann",)), (40, ("s-ann", "s-bob"))]


def test_a_connection_whose_query_failed_or_timed_out_is_not_kept(attachment: SqlAttachment) -> None:
    planner.sql._PREPARED.clear()
    with pytest.raises(QueryError, match="longer than"):
        run(attachment, "SELECT count(*) FROM range(200000) a, range(200000) b WHERE a.range <> b.range",
            timeout_seconds=0.3)
    assert not planner.sql._PREPARED._idle
    with pytest.raises(QueryError):
        run(attachment, "SELECT no_such_column FROM events")
    assert not planner.sql._PREPARED._idle
    assert run(attachment, "SELECT count(*) FROM events")["rows"] == [[6]]
    assert len(planner.sql._PREPARED._idle) == 1


def test_a_heavy_query_is_interrupted(attachment: SqlAttachment) -> None:
    started = time.monotonic()
    error = refused(attachment, "SELECT count(*) FROM range(200000) a, range(200000) b WHERE a.range <> b.range",
                    timeout_seconds=0.5)
    assert "longer than 0.5 s" in error.message and error.hint
    assert time.monotonic() - started < 5
    started = time.monotonic()
    refused(attachment, "SELECT count(*) FROM events a, events b, tool_calls c, chunks d, "
            "range(10000000) r WHERE (a.seq * b.seq + r.range) % 7 = 3", timeout_seconds=0.5, who=BOB)
    assert time.monotonic() - started < 5


def test_a_timeout_that_passes_while_the_views_are_defined_still_stops_the_query(
        attachment: SqlAttachment, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupt that lands between statements is lost: the watchdog repeats it until the
    query is done, so a slow setup cannot let the query run unbounded."""
    prepare = SqlAttachment._prepare

    def slow_prepare(self: SqlAttachment, *args: Any) -> None:
        time.sleep(0.6)  # the deadline passes here, before the views are defined
        prepare(self, *args)

    monkeypatch.setattr(SqlAttachment, "_prepare", slow_prepare)
    error = refused(attachment, "SELECT count(*) FROM range(100000) a, range(100000) b "
                    "WHERE a.range <> b.range", timeout_seconds=0.2)
    assert "longer than 0.2 s" in error.message


def test_memory_limit_is_enforced(attachment: SqlAttachment) -> None:
    error = refused(attachment, "SELECT list(range::VARCHAR || 'padding-padding') FROM range(20000000)",
                    memory_limit="32MB", timeout_seconds=30)
    assert "memory" in error.message.lower()


def test_bad_arguments_are_query_errors(attachment: SqlAttachment, tmp_path: Path) -> None:
    refused(attachment, "SELECT 1", as_of=-1)
    refused(attachment, "SELECT 1", max_rows=0)
    refused(attachment, "SELECT 1", timeout_seconds=0)
    refused(attachment, "SELECT 1", memory_limit="lots; SET threads=9")
    refused(attachment, "SELECT nope FROM events")
    with pytest.raises(QueryError):
        SqlAttachment(tmp_path / "no-generation-yet")


def test_empty_generation_has_typed_empty_views(tmp_path: Path) -> None:
    gen, = commit_batches(tmp_path, AnalyticsWriter(), [[]])
    attachment = SqlAttachment(gen)
    for view in planner.sql.VIEWS:
        assert run(attachment, f"SELECT count(*) FROM {view}")["rows"] == [[0]]
    assert "startTime" in run(attachment, "SELECT * FROM sessions")["columns"]


def test_the_first_result_answers_a_call(tmp_path: Path) -> None:
    acl = {"tenant": "acme", "read": ["*"]}
    call = {"toolName": "Bash", "toolCallId": "c1", "input": {"cmd": "x"}}
    gen, = commit_batches(tmp_path, AnalyticsWriter(), [[
        make_event(1, "s", "tool.call", acl=acl, fields=call),
        make_event(2, "s", "tool.result", acl=acl, fields={"toolCallId": "c1", "output": "a"}),
        make_event(3, "s", "tool.result", acl=acl, fields={"toolCallId": "c1", "status": "error"}),
    ]])
    attachment = SqlAttachment(gen)
    body = run(attachment, "SELECT resultSeq, status, outputBytes, toolName FROM tool_calls",
               acls={"s": acl})
    assert body["rows"] == [[2, None, 1, "Bash"]]


def test_unreadable_index_files_are_index_unavailable(tmp_path: Path) -> None:
    acl = {"tenant": "acme", "read": ["*"]}
    gen, = commit_batches(tmp_path, AnalyticsWriter(), [[make_event(1, "s", acl=acl)]])
    attachment = SqlAttachment(gen)
    segment = parquet_segments(gen, "events")[0]
    segment.chmod(0o644)
    segment.write_bytes(b"not parquet at all")
    for damage in ("corrupt", "missing"):
        with pytest.raises(PlannerError) as info:
            run(attachment, "SELECT count(*) FROM events", acls={"s": acl})
        assert info.value.status == 503, damage
        assert str(gen) not in info.value.message
        segment.unlink(missing_ok=True)


# -- the scope of names: a property over generated query shapes ------------------------------

# Every name a query might try: the public views, what used to sit under them, the catalog's
# own views, and names qualified by a catalog or schema.
_NAMES = (*planner.sql.VIEWS, "_raw_events", "_snap_events", "_snap_tool_calls",
          "_snap_tool_results", "_snap_chunks", "_allowed_sessions", "tool_results",
          "duckdb_tables", "duckdb_views", "pg_settings", "sqlite_master", "pg_class")
_QUALIFIED = ("temp.main.events", "memory.main.events", "system.main.duckdb_tables",
              "information_schema.tables")
# Another tenant's and other users' sessions, a lineage id pointing into one, and access lists:
# none may appear in any cell the caller gets back.
_HIDDEN = ("s-bob", "s-eng", "s-other", "s-secret-parent", "user:")


@pytest.fixture(scope="module")
def lineage_attachment(tmp_path_factory: pytest.TempPathFactory) -> SqlAttachment:
    """The fixture sessions plus one of ann's whose parent is a session she may not read."""
    root = tmp_path_factory.mktemp("sql-scope")
    records = [r for sid, seqs in SEQS.items() for r in session(sid, seqs, model=f"m-{sid}")]
    records.append(make_event(50, "s-ann-child", "session.started", acl=ACLS["s-ann"],
                              parent_session_id="s-secret-parent",
                              parent_event_id="e-of-s-secret-parent"))
    records.sort(key=lambda r: r.get("seq", r.get("maxSeq")))
    gen, = commit_batches(root, AnalyticsWriter(), [records])
    return SqlAttachment(gen)


@st.composite
def _table_name(draw: st.DrawFn, pool: tuple[str, ...]) -> str:
    name = draw(st.sampled_from(pool))
    name = "".join(c.upper() if draw(st.booleans()) else c for c in name) \
        if draw(st.booleans()) else name
    return f'"{name}"' if draw(st.booleans()) else name


@st.composite
def _relation(draw: st.DrawFn, pool: tuple[str, ...], depth: int) -> str:
    alias = f"t{draw(st.integers(0, 10**6))}"
    shapes = ["name", "function"] + (["subquery", "with", "join", "lateral", "exists"] if depth else [])
    shape = draw(st.sampled_from(shapes))
    if shape == "name":
        name = draw(st.one_of(_table_name(pool), st.sampled_from(_QUALIFIED))) \
            if draw(st.integers(0, 9)) == 0 else draw(_table_name(pool))
        return f"{name} AS {alias}"
    if shape == "function":
        functions = ["range(3)", "generate_series(1, 2)", "unnest([1, 2])"] * 3 + [
            "read_parquet('x.parquet')", "duckdb_tables()", "query_table('events')"]
        return f"{draw(st.sampled_from(functions))} AS {alias}"
    if shape == "subquery":
        return f"({draw(_select(pool, depth - 1))}) AS {alias}"
    if shape == "with":
        cte = draw(_table_name(pool))
        return (f"(WITH {cte} AS ({draw(_select(pool, depth - 1))}) "
                f"SELECT * FROM {draw(_relation(pool, depth - 1))}) AS {alias}")
    if shape == "join":
        kind = draw(st.sampled_from(["CROSS JOIN", "NATURAL JOIN", "POSITIONAL JOIN", ","]))
        return f"{draw(_relation(pool, depth - 1))} {kind} {draw(_relation(pool, depth - 1))}"
    if shape == "lateral":
        return f"{draw(_relation(pool, depth - 1))}, LATERAL ({draw(_select(pool, depth - 1))}) AS {alias}"
    return (f"(SELECT * FROM {draw(_relation(pool, depth - 1))} "
            f"WHERE EXISTS ({draw(_select(pool, depth - 1))})) AS {alias}")


@st.composite
def _select(draw: st.DrawFn, pool: tuple[str, ...], depth: int) -> str:
    relation = draw(_relation(pool, depth))
    body = f"SELECT {draw(st.sampled_from(['*', 'count(*)']))} FROM {relation}"
    if depth and draw(st.booleans()):
        body = f"{body} UNION ALL BY NAME SELECT * FROM ({draw(_select(pool, depth - 1))})"
    if depth and draw(st.booleans()):
        names = draw(st.lists(_table_name(pool), min_size=1, max_size=3,
                             unique_by=lambda name: name.strip('"').lower()))
        recursive = "RECURSIVE " if draw(st.booleans()) else ""
        ctes = ", ".join(f"{name} AS ({draw(_select(pool, depth - 1))})" for name in names)
        body = f"WITH {recursive}{ctes} {body}"
    return body


def _cells(value: Any) -> Iterator[str]:
    if isinstance(value, list | tuple):
        for item in value:
            yield from _cells(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _cells(item)
    elif value is not None:
        yield str(value)


@st.composite
def _query(draw: st.DrawFn) -> str:
    # A few names per query, so a WITH name and a bare reference to it meet often.
    pool = tuple(draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=3, unique=True)))
    return draw(_select(pool, 3))


@fuzz(250, deadline=None)
@given(sql=_query())
def test_no_query_shape_reaches_an_internal_relation_or_a_hidden_row(
        lineage_attachment: SqlAttachment, sql: str) -> None:
    """Whatever the nesting of WITH, subqueries, joins, LATERAL and table functions, and however
    names are cased or quoted, a query sees only the public views' rows of the caller."""
    try:
        body = run(lineage_attachment, sql, timeout_seconds=5,
                   acls={**ACLS, "s-ann-child": ACLS["s-ann"]})
    except QueryError:
        return
    assert not any(column.lower() in {"aclread", "r_allowedsessionid"} or column.startswith("r_")
                   for column in body["columns"]), sql
    leaked = [cell for cell in _cells(body["rows"]) for hidden in _HIDDEN if hidden in cell]
    assert not leaked, (sql, leaked[:3])


def test_the_issue_query_and_lineage_masks(lineage_attachment: SqlAttachment) -> None:
    acls = {**ACLS, "s-ann-child": ACLS["s-ann"]}
    rows = run(lineage_attachment, "SELECT sessionId, parentSessionId, parentEventId FROM events "
               "WHERE sessionId = 's-ann-child'", acls=acls)["rows"]
    assert rows == [["s-ann-child", None, None]]
    assert run(lineage_attachment, "SELECT parentSessionId FROM sessions WHERE sessionId = "
               "'s-ann-child'", acls=acls)["rows"] == [[None]]
    error = refused(lineage_attachment,
                    "SELECT r.sessionId, r.parentSessionId, r.aclRead FROM (WITH _raw_events AS "
                    "(SELECT 1) SELECT 1) q, _raw_events r WHERE r.parentSessionId IS NOT NULL",
                    acls=acls)
    assert "_raw_events" in error.message


@pytest.mark.parametrize(("sql", "where", "token"), [
    ("SELEC 1", "at line 1, column 1", "SELEC"),
    ("SELECT 1\nFROM events\nWHERE nosuchcolumn = 2", "at line 3, column 7", "nosuchcolumn"),
    ("SELECT 1 FROM events WHERE " + " AND ".join(f"seq <> {i}" for i in range(80)) + " AND nosuch = 1",
     "at line 1, column", "nosuch"),
])
def test_a_duckdb_error_is_one_line_with_its_place(attachment: SqlAttachment, sql: str, where: str,
                                                   token: str) -> None:
    """DuckDB's errors came as five lines (a blank one, ``LINE 1: ...`` and a caret line); the
    CLI prints an error as one line, so the place is said in words, as SessionQL says it."""
    error = refused(attachment, sql)
    assert "\n" not in error.message and "LINE" not in error.message and "^" not in error.message
    assert where in error.message
    line, column = (int(n) for n in error.message.rsplit("at line ", 1)[1].split(", column "))
    assert sql.split("\n")[line - 1][column - 1:].startswith(token)


@pytest.mark.parametrize("sql", [
    "SELECT " + "(" * 1200 + "1" + ")" * 1200,
    "SELECT 1" + " + 1" * 2000,
])
def test_an_error_gives_no_advice_the_attachment_refuses(attachment: SqlAttachment, sql: str) -> None:
    """Found by a new user: a deeply nested query's error said 'Use "SET max_expression_depth TO
    x" to increase the maximum expression depth.', and SET is refused here."""
    error = refused(attachment, sql)
    assert "expression depth" in error.message and "SET" not in error.message


def test_rows_past_the_generations_watermark_are_not_read(gens: tuple[Path, Path], tmp_path: Path) -> None:
    """Found by a new user: one seq above the analytics watermark, the answer said the seq was
    uncovered and counted its event (a sink reads one partition further than another, so a
    generation holds some rows past its watermark, depending on timing)."""
    import dataclasses
    import shutil

    from sinks.generations import Manifest

    analytics, structured = gens
    behind = tmp_path / analytics.name
    shutil.copytree(analytics, behind)
    manifest = Manifest.from_json((behind / "manifest.json").read_text("utf-8"))
    (behind / "manifest.json").write_text(dataclasses.replace(manifest, built_through_seq=20).dumps(), "utf-8")
    sql = "SELECT count(*) FROM events"
    body = run(SqlAttachment(behind, structured), sql, as_of=100)
    assert body["uncovered"] == {"fromSeq": 21, "toSeq": 100}
    assert body["rows"] == run(attachment=SqlAttachment(analytics, structured), sql=sql, as_of=20)["rows"]
    assert body["rows"] != run(attachment=SqlAttachment(analytics, structured), sql=sql, as_of=100)["rows"]


def test_a_sessions_model_is_the_one_its_start_names(tmp_path: Path) -> None:
    """A followed Claude Code session's subagent (another model, its own file) often answers
    before the main agent: the first model named was the subagent's, where a one-shot import of
    the same files named the main agent's. Its session.started (sent again by the follower once
    the main model is known) names the session's model; a session whose start names none keeps
    the first model named."""
    acl = {"tenant": "acme", "read": ["user:ann"]}
    records = [
        make_event(1, "s-live", "session.started", acl=acl, fields={"cwd": "/src"}),
        make_event(2, "s-live", "message", role="assistant", acl=acl, fields={"text": "sub", "model": "m-sub"}),
        make_event(3, "s-live", "message", role="assistant", acl=acl, fields={"text": "main", "model": "m-main"}),
        make_event(4, "s-live", "session.started", acl=acl, fields={"cwd": "/src", "model": "m-main",
                                                                        "title": "First summary"}),
        make_event(5, "s-plain", "session.started", acl=acl, fields={}),
        make_event(6, "s-plain", "message", role="assistant", acl=acl, fields={"text": "hi", "model": "m-first"}),
        make_event(7, "s-plain", "message", role="assistant", acl=acl, fields={"text": "hi", "model": "m-later"}),
        # The file's own summary came later still: sent again, the last start says the title.
        make_event(8, "s-live", "session.started", acl=acl, fields={"cwd": "/src", "model": "m-main",
                                                                        "title": "The file's own title"}),
    ]
    attachment = SqlAttachment(commit_batches(tmp_path, AnalyticsWriter(), [records])[-1],
                               commit_batches(tmp_path, StructuredWriter(), [records])[-1])
    rows = attachment.query("SELECT sessionId, model, title FROM sessions ORDER BY 1", as_of_seq=8, principal=ANN,
                            session_acls={"s-live": acl, "s-plain": acl})["rows"]
    assert rows == [["s-live", "m-main", "The file's own title"], ["s-plain", "m-first", None]]
