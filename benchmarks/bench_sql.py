"""Benchmark: the SQL attachment against plain DuckDB on the same analytics Parquet.

Writes ``--events`` synthetic redacted events (default 1,000,000) through
:class:`sinks.analytics.AnalyticsWriter` in batches of ``--batch``, one committed generation
per batch, then times a handful of typical analytics queries two ways:

- ``attachment``: :meth:`planner.sql.SqlAttachment.query` (validation, snapshot + ACL copy of
  the rows, lock-down, the query), as a caller who may read 90% of the sessions;
- ``direct``: the equivalent SQL run straight on the same files by DuckDB, with the same
  ``seq <= asOfSeq`` filter and no ACL.

Both use one thread. Prints p50/p99 latency per query and the ratio attachment/direct::

    .venv/bin/python benchmarks/bench_sql.py [--events N] [--batch N] [--repeat N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from planner.acl import Principal
from planner.sql import SqlAttachment
from sinks.analytics import AnalyticsWriter
from sinks.generations import GenerationStore, Manifest
from sinks.writer import parquet_segments

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TOOLS = ("Bash", "Read", "Edit", "Grep", "WebFetch", "Task")
MODELS = ("model-large", "model-small", "model-mini")
EVENTS_PER_SESSION = 500

QUERIES: dict[str, tuple[str, str]] = {
    "tool error rate by tool": (
        """SELECT toolName, count(*) AS calls, avg((status = 'error')::INT) AS errorRate
           FROM tool_calls GROUP BY toolName ORDER BY calls DESC""",
        """SELECT coalesce(c.toolName, r.toolName) AS toolName, count(*) AS calls,
                  avg((r.status = 'error')::INT) AS errorRate
           FROM (SELECT * FROM read_parquet({tool_calls}) WHERE seq <= {as_of}) c
           LEFT JOIN (SELECT * FROM read_parquet({tool_results}) WHERE seq <= {as_of}) r
             ON r.sessionId = c.sessionId AND r.toolCallId = c.toolCallId
           GROUP BY 1 ORDER BY calls DESC""",
    ),
    "session durations": (
        """SELECT sessionId, durationSeconds, eventCount FROM sessions
           ORDER BY durationSeconds DESC, sessionId LIMIT 20""",
        """SELECT sessionId, epoch(max(time)) - epoch(min(time)) AS durationSeconds,
                  count(*) AS eventCount
           FROM read_parquet({events}) WHERE seq <= {as_of}
           GROUP BY sessionId ORDER BY durationSeconds DESC, sessionId LIMIT 20""",
    ),
    "tokens by model": (
        """SELECT model, sum(inputTokens) AS input, sum(outputTokens) AS output
           FROM events WHERE model IS NOT NULL GROUP BY model ORDER BY model""",
        """SELECT model, sum(inputTokens) AS input, sum(outputTokens) AS output
           FROM read_parquet({events}) WHERE seq <= {as_of} AND model IS NOT NULL
           GROUP BY model ORDER BY model""",
    ),
    "events by type": (
        "SELECT type, count(*) AS n FROM events GROUP BY type ORDER BY type",
        """SELECT type, count(*) AS n FROM read_parquet({events}) WHERE seq <= {as_of}
           GROUP BY type ORDER BY type""",
    ),
    "turns per session": (
        "SELECT avg(turnCount) AS turns, max(toolCallCount) AS maxCalls FROM sessions",
        """SELECT avg(turns) AS turns, max(calls) AS maxCalls FROM (
               SELECT count(DISTINCT turnId) AS turns, count(*) FILTER (WHERE type = 'tool.call') AS calls
               FROM read_parquet({events}) WHERE seq <= {as_of} GROUP BY sessionId)""",
    ),
}


def _acl(session_number: int) -> dict[str, Any]:
    # Every tenth session is private to someone else: the benchmark caller cannot read it.
    return {"tenant": "acme", "read": ["user:someone-else"] if session_number % 10 == 0 else ["*"]}


def _events(first_seq: int, count: int) -> list[dict[str, Any]]:
    """``count`` redacted event records from ``first_seq`` on; sessions of 500 events in turns
    of message → tool.call → tool.result → assistant message."""
    records = []
    for seq in range(first_seq, first_seq + count):
        n = seq - 1
        session_number, position = divmod(n, EVENTS_PER_SESSION)
        session_id = f"s{session_number:06d}"
        turn = position // 4
        step = position % 4
        call_id = f"{session_id}-call-{turn}"
        tool = TOOLS[(session_number + turn) % len(TOOLS)]
        event: dict[str, Any] = {
            "aspVersion": "1.0", "eventId": f"e{seq}", "logId": "default", "sessionId": session_id,
            "runId": f"{session_id}-run", "turnId": f"{session_id}-turn-{turn}",
            "time": (T0 + timedelta(seconds=session_number * 3600 + position * 7)).isoformat(),
            "visibility": "visible", "acl": _acl(session_number),
        }
        if position == 0:
            event.update(type="session.started", role=None, turnId=None,
                         fields={"title": f"session {session_number}",
                                 "model": MODELS[session_number % 3]})
        elif step == 1:
            event.update(type="tool.call", role="assistant",
                         fields={"toolName": tool, "toolCallId": call_id,
                                 "input": {"path": "/src/x.py", "limit": 10}})
        elif step == 2:
            event.update(type="tool.result", role="tool", parentEventId=f"e{seq - 1}",
                         fields={"toolName": tool, "toolCallId": call_id,
                                 "status": "error" if (seq * 7919) % 13 == 0 else "ok",
                                 "output": "x" * (seq % 200)})
        elif step == 3:
            event.update(type="message", role="assistant",
                         fields={"text": "done", "model": MODELS[(session_number + turn) % 3],
                                 "usage": {"inputTokens": 1000 + seq % 500, "outputTokens": seq % 300}})
        else:
            event.update(type="message", role="user", fields={"text": "please continue"})
        records.append({"kind": "event", "logId": "default", "seq": seq, "event": event, "policy": "p"})
    return records


def build(root: Path, total: int, batch: int) -> tuple[Path, float]:
    """Write ``total`` events as generations of ``batch``; the last generation dir and seconds."""
    writer = AnalyticsWriter()
    store = GenerationStore(root, "default", "analytics")
    started = time.perf_counter()
    gen_dir = root
    for first in range(1, total + 1, batch):
        count = min(batch, total - first + 1)
        current = store.current_id()
        previous = store.generation_dir(current) if current is not None else None
        staging = store.begin()
        writer.write(staging, previous, _events(first, count))
        manifest = Manifest(kind="analytics", log_id="default", line="live", generation_id=0,
                            built_through_seq=first + count - 1, schema_version="1",
                            asp_version="1.0", chunker={}, embedding=None, redaction_policy_hash="p")
        gen_dir = store.generation_dir(store.commit(staging, manifest).generation_id)
        print(f"  wrote events {first}..{first + count - 1}", file=sys.stderr)
    return gen_dir, time.perf_counter() - started


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(gen_dir: Path, total: int, repeat: int) -> dict[str, Any]:
    attachment = SqlAttachment(gen_dir)
    principal = Principal("acme", "analyst")
    sessions = (total + EVENTS_PER_SESSION - 1) // EVENTS_PER_SESSION
    acls = {f"s{n:06d}": _acl(n) for n in range(sessions)}
    as_of = total
    files = {table: "[" + ", ".join(f"'{p}'" for p in parquet_segments(gen_dir, table)) + "]"
             for table in ("events", "tool_calls", "tool_results")}
    direct = duckdb.connect(":memory:", config={"threads": 1})
    results: dict[str, Any] = {}
    for name, (attachment_sql, direct_template) in QUERIES.items():
        direct_sql = direct_template.format(as_of=as_of, **files)
        timings: dict[str, list[float]] = {"attachment": [], "direct": []}
        for _ in range(repeat):
            started = time.perf_counter()
            body = attachment.query(attachment_sql, as_of_seq=as_of, principal=principal,
                                    session_acls=acls, timeout_seconds=120, memory_limit="2GB")
            timings["attachment"].append(time.perf_counter() - started)
            started = time.perf_counter()
            direct.execute(direct_sql).fetchall()
            timings["direct"].append(time.perf_counter() - started)
        p50 = {k: statistics.median(v) for k, v in timings.items()}
        results[name] = {
            "attachmentP50Ms": round(p50["attachment"] * 1000, 1),
            "attachmentP99Ms": round(_percentile(timings["attachment"], 0.99) * 1000, 1),
            "directP50Ms": round(p50["direct"] * 1000, 1),
            "directP99Ms": round(_percentile(timings["direct"], 0.99) * 1000, 1),
            "ratio": round(p50["attachment"] / p50["direct"], 2),
            "rows": body["rowCount"],
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="usl-bench-sql-") as tmp:
        gen_dir, write_seconds = build(Path(tmp), args.events, args.batch)
        size = sum(p.stat().st_size for p in gen_dir.glob("*.parquet"))
        results = run(gen_dir, args.events, args.repeat)
    report = {"events": args.events, "batch": args.batch, "repeat": args.repeat,
              "writeSeconds": round(write_seconds, 1),
              "writeEventsPerSecond": round(args.events / write_seconds),
              "parquetBytes": size, "queries": results}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{args.events:,} events written in {write_seconds:.1f} s "
          f"({report['writeEventsPerSecond']:,}/s), {size / 1e6:.1f} MB of Parquet")
    print(f"{'query':28} {'attachment p50':>15} {'direct p50':>11} {'ratio':>6}")
    for name, r in results.items():
        print(f"{name:28} {r['attachmentP50Ms']:>12.1f} ms {r['directP50Ms']:>8.1f} ms {r['ratio']:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
