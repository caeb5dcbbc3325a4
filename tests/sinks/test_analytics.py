"""The analytics sink: Parquet row-level facts with seq on every row, and nothing secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq

import sinks.analytics
from sinks.analytics import SCHEMAS, AnalyticsWriter
from sinks.testing import commit_batches, file_digests, make_chunk, make_event
from sinks.writer import IndexWriter, parquet_segments

SENTINEL = "SENTINEL-free-text-7f3a"


def _rows(gen: Path, table: str) -> list[dict[str, Any]]:
    files = parquet_segments(gen, table)
    rows: list[dict[str, Any]] = []
    for path in files:
        rows.extend(pq.read_table(path).to_pylist())
    return rows


def session_batch(session_id: str = "s1", first_seq: int = 1) -> list[dict[str, Any]]:
    """One small session: start, user message, a tool call answered with an error, a reply."""
    n = first_seq
    return [
        make_event(n, session_id, "session.started", run_id="r1",
                   fields={"title": "Fix the build", "model": "m-large", "cwd": "/home/<user>/src"}),
        make_event(n + 1, session_id, "message", role="user", run_id="r1", turn_id="t1",
                   fields={"text": f"please fix {SENTINEL}"}),
        make_event(n + 2, session_id, "tool.call", role="assistant", run_id="r1", turn_id="t1",
                   event_id=f"{session_id}-call", fields={
                       "toolName": "Bash", "toolCallId": "call-1",
                       "input": {"command": f"make {SENTINEL}", "timeout": 30},
                       "usage": {"inputTokens": 1200, "outputTokens": 80}}),
        make_event(n + 3, session_id, "tool.result", role="tool", run_id="r1", turn_id="t1",
                   parent_event_id=f"{session_id}-call", fields={
                       "toolName": "Bash", "toolCallId": "call-1", "status": "error",
                       "output": f"error: {SENTINEL} ünïcode"}),
        make_event(n + 4, session_id, "message", role="assistant", run_id="r1", turn_id="t1",
                   fields={"text": "done", "model": "m-large", "usage": {"inputTokens": 1300,
                                                                         "outputTokens": 20}}),
        make_chunk(session_id, [n + 1, n + 4], run_id="r1", turn_id="t1"),
    ]


def test_public_surface() -> None:
    assert set(sinks.analytics.__all__) == {"SCHEMAS", "SCHEMA_VERSION", "AnalyticsWriter"}
    writer = AnalyticsWriter()
    assert isinstance(writer, IndexWriter)
    assert writer.kind == "analytics" and writer.sources == ("redacted", "chunks")
    assert writer.describe()["tables"] == ["chunks", "events", "tool_calls", "tool_results"]


def test_writes_one_segment_per_table_and_batch(tmp_path: Path) -> None:
    names = AnalyticsWriter().write(tmp_path / "g", None, session_batch())
    assert sorted(names) == ["chunks-00000001.parquet", "events-00000001.parquet",
                             "tool_calls-00000001.parquet", "tool_results-00000001.parquet"]
    for table, schema in SCHEMAS.items():
        assert pq.read_schema(tmp_path / "g" / f"{table}-00000001.parquet") == schema
    assert AnalyticsWriter().write(tmp_path / "h", None, [{"kind": "progress", "seq": 3}]) == []


def test_event_facts(tmp_path: Path) -> None:
    gen, = commit_batches(tmp_path, AnalyticsWriter(), [session_batch()])
    events = {row["seq"]: row for row in _rows(gen, "events")}
    assert sorted(events) == [1, 2, 3, 4, 5]
    start, call, result, reply = events[1], events[3], events[4], events[5]
    assert (start["title"], start["model"], start["type"]) == ("Fix the build", "m-large", "session.started")
    assert events[2]["title"] is None and events[2]["textBytes"] == len(f"please fix {SENTINEL}")
    assert (call["toolName"], call["toolCallId"], call["inputTokens"], call["outputTokens"]) == (
        "Bash", "call-1", 1200, 80)
    assert (result["status"], result["toolName"], result["parentEventId"]) == ("error", "Bash", "s1-call")
    assert result["textBytes"] == len(f"error: {SENTINEL} ünïcode".encode())
    assert (reply["model"], reply["inputTokens"]) == ("m-large", 1300)
    assert start["time"].isoformat() == "2026-01-31T12:00:01+00:00"
    assert (start["tenant"], start["aclRead"]) == ("acme", ["*"])
    calls, results = _rows(gen, "tool_calls"), _rows(gen, "tool_results")
    assert [(c["seq"], c["toolName"], c["paramKeys"]) for c in calls] == [(3, "Bash", ["command", "timeout"])]
    assert [(r["seq"], r["toolCallId"], r["status"], r["sessionId"]) for r in results] == [
        (4, "call-1", "error", "s1")]
    assert results[0]["outputBytes"] == len(f"error: {SENTINEL} ünïcode".encode())
    chunk, = _rows(gen, "chunks")
    assert (chunk["minSeq"], chunk["maxSeq"], chunk["tokenCount"], chunk["turnId"]) == (2, 5, 20, "t1")


def test_no_free_text_or_parameter_values_in_any_row(tmp_path: Path) -> None:
    gen, = commit_batches(tmp_path, AnalyticsWriter(), [session_batch()])
    for table in SCHEMAS:
        for row in _rows(gen, table):
            assert SENTINEL not in repr(row), f"{table} leaks free text: {row}"


def test_every_row_carries_seq_and_session(tmp_path: Path) -> None:
    gen = commit_batches(tmp_path, AnalyticsWriter(), [session_batch("a"), session_batch("b", 10)])[-1]
    for table in ("events", "tool_calls", "tool_results"):
        assert all(row["seq"] is not None and row["sessionId"] for row in _rows(gen, table))
    assert all(row["minSeq"] <= row["maxSeq"] for row in _rows(gen, "chunks"))


def test_previous_generation_untouched_and_shared(tmp_path: Path) -> None:
    writer = AnalyticsWriter()
    gen1, = commit_batches(tmp_path, writer, [session_batch("a")])
    before = file_digests(gen1)
    gen3 = commit_batches(tmp_path, writer, [session_batch("b", 10), [make_event(20, "c")]])[-1]
    assert file_digests(gen1) == before
    for name, digest in before.items():
        if name.endswith(".parquet"):
            assert file_digests(gen3)[name] == digest
    assert [p.name for p in parquet_segments(gen3, "events")] == [
        "events-00000001.parquet", "events-00000002.parquet", "events-00000003.parquet"]
    count = duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{gen3}/events-*.parquet')").fetchone()
    assert count == (11,)


def test_duplicates_in_a_batch_are_written_once(tmp_path: Path) -> None:
    batch = session_batch()
    gen, = commit_batches(tmp_path, AnalyticsWriter(), [batch + batch[1:3] + [batch[-1]]])
    assert len(_rows(gen, "events")) == 5 and len(_rows(gen, "chunks")) == 1


def test_odd_fields_do_not_break_the_writer(tmp_path: Path) -> None:
    odd = [
        make_event(1, "s", "message", fields={"text": {"parts": ["a", 1]}, "usage": "n/a"}),
        make_event(2, "s", "tool.result", fields={"status": {"code": 2}, "inputTokens": True}),
        make_event(3, "s", "x.custom", fields={"title": "not a session title", "outputTokens": 1.5e400}),
        make_event(4, "s", "error", acl={"tenant": "acme"}, fields={"message": "E"}),
    ]
    gen, = commit_batches(tmp_path, AnalyticsWriter(), [odd])
    events = {row["seq"]: row for row in _rows(gen, "events")}
    assert events[1]["textBytes"] == len('{"parts": ["a", 1]}') and events[1]["inputTokens"] is None
    assert events[2]["status"] == '{"code":2}' and events[2]["inputTokens"] is None
    assert events[3]["title"] is None and events[3]["outputTokens"] is None
    assert events[4]["aclRead"] is None and events[4]["textBytes"] == 1


def test_many_small_batches_are_compacted_by_size_tier(tmp_path: Path) -> None:
    writer = AnalyticsWriter()
    store_root = tmp_path / "store"
    batches = [[make_event(seq, f"s{seq % 3}", "message", fields={"text": "x"})]
               for seq in range(1, 41)]
    gens = commit_batches(store_root, writer, batches)
    before = {name: digest for name, digest in file_digests(gens[10]).items()}
    last = gens[-1]
    files = parquet_segments(last, "events")
    assert len(files) <= 8, [p.name for p in files]  # 40 batches, not 40 files
    seqs = sorted(row["seq"] for row in _rows(last, "events"))
    assert seqs == list(range(1, 41))
    assert {n: file_digests(gens[10])[n] for n in before} == before  # older generation intact
    assert sorted(row["seq"] for row in _rows(gens[10], "events")) == list(range(1, 12))
