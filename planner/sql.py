"""The read-only SQL attachment: DuckDB over the analytics Parquet, fixed to one asOfSeq and
restricted to the sessions the caller may read.

Each query gets a fresh in-memory DuckDB connection. Before any user SQL runs:

1. the SQL must be exactly one read-only ``SELECT``/``WITH`` statement (checked with DuckDB's
   own parser), naming only the attachment's views and harmless table functions;
2. the rows of the snapshot are copied into temporary tables: only rows with
   ``seq <= as_of_seq`` (chunks: ``maxSeq <= as_of_seq``) of sessions whose *latest* access
   list admits the caller. The user's query never sees another row, so no filter order, error
   message or aggregate can reveal a hidden one;
3. the connection is locked: no file system access, configuration frozen, one thread, a memory
   limit, and a timer that interrupts the query at ``timeout_seconds``.

Views (documented column by column in ``docs/sql.md``): ``events``, ``tool_calls`` (with their
results), ``chunks``, and the aggregates ``sessions``, ``runs``, ``turns``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import duckdb

from planner.acl import Principal, can_read
from planner.exceptions import QueryError
from sinks.analytics import SCHEMAS
from sinks.writer import scan_sql

__all__ = ["NOTICE", "VIEWS", "SqlAttachment"]

NOTICE = ("The SQL attachment is a read-only snapshot at asOfSeq; it does not provide semantic "
          "search, evidence snippets, resume, lineage semantics or subscriptions.")

VIEWS = ("sessions", "runs", "turns", "events", "tool_calls", "chunks")
# Table functions that compute rather than read: everything else (read_*, glob, query,
# duckdb_*, pragma_*, ...) is refused before execution.
_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
# Scalar functions that could reveal the server's configuration or environment.
_SCALAR_DENYLIST = frozenset({"current_setting", "getenv", "getvariable"})
_ALLOWED_TABLE = "_usl_allowed_sessions"
_HINT = ("Write one SELECT (or WITH ... SELECT) over the views "
         + ", ".join(VIEWS) + "; see docs/sql.md.")

_EVENT_COLUMNS = [f.name for f in SCHEMAS["events"] if f.name != "aclRead"]
_NEEDS = {  # view → the snapshot tables it is built from
    "events": ("events",), "sessions": ("events",), "runs": ("events",), "turns": ("events",),
    "tool_calls": ("tool_calls", "tool_results"), "chunks": ("chunks",),
}

_AGGREGATES = """
    min(time) AS startTime, max(time) AS endTime,
    epoch(max(time)) - epoch(min(time)) AS durationSeconds,
    min(seq) AS firstSeq, max(seq) AS lastSeq, count(*) AS eventCount,
    count(*) FILTER (WHERE type = 'message') AS messageCount,
    count(*) FILTER (WHERE type = 'tool.call') AS toolCallCount,
    count(*) FILTER (WHERE type = 'error' OR (type = 'tool.result' AND status = 'error')) AS errorCount,
    coalesce(sum(inputTokens), 0) AS inputTokens, coalesce(sum(outputTokens), 0) AS outputTokens,
    arg_min(model, seq) FILTER (WHERE model IS NOT NULL) AS model
"""

_VIEW_SQL = {
    "sessions": f"""
        SELECT sessionId, arg_max(logId, seq) AS logId, arg_max(tenant, seq) AS tenant,
            arg_min(parentSessionId, seq) FILTER (WHERE parentSessionId IS NOT NULL) AS parentSessionId,
            arg_min(title, seq) FILTER (WHERE type = 'session.started' AND title IS NOT NULL) AS title,
            count(DISTINCT runId) AS runCount, count(DISTINCT turnId) AS turnCount,
            bool_or(type = 'session.ended') AS ended, {_AGGREGATES}
        FROM events GROUP BY sessionId""",
    "runs": f"""
        SELECT runId, sessionId,
            arg_min(title, seq) FILTER (WHERE type = 'run.started' AND title IS NOT NULL) AS title,
            count(DISTINCT turnId) AS turnCount, bool_or(type = 'run.ended') AS ended, {_AGGREGATES}
        FROM events WHERE runId IS NOT NULL GROUP BY sessionId, runId""",
    "turns": f"""
        SELECT turnId, sessionId, arg_min(runId, seq) FILTER (WHERE runId IS NOT NULL) AS runId,
            bool_or(type = 'turn.ended') AS ended, {_AGGREGATES}
        FROM events WHERE turnId IS NOT NULL GROUP BY sessionId, turnId""",
    "tool_calls": """
        SELECT c.logId, c.seq, c.eventId, c.sessionId, c.runId, c.turnId, c.toolCallId,
            coalesce(c.toolName, r.toolName) AS toolName, c.time, c.paramKeys,
            r.seq AS resultSeq, r.eventId AS resultEventId, r.status, r.time AS resultTime,
            r.outputBytes, epoch(r.time) - epoch(c.time) AS durationSeconds
        FROM _snap_tool_calls c LEFT JOIN _snap_tool_results r
            ON r.sessionId = c.sessionId AND r.toolCallId = c.toolCallId""",
}


class SqlAttachment:
    """Read-only SQL over one analytics generation (and, for the report, a structured one)."""

    def __init__(self, analytics_gen_dir: Path, structured_gen_dir: Path | None = None) -> None:
        self.analytics_gen_dir = Path(analytics_gen_dir)
        self.structured_gen_dir = None if structured_gen_dir is None else Path(structured_gen_dir)
        if not self.analytics_gen_dir.is_dir():
            raise QueryError("the analytics index has no generation to query yet",
                             hint="Wait for the analytics sink to commit, then retry.")
        self._generations = {
            kind: info for kind, path in (("analytics", self.analytics_gen_dir),
                                          ("structured", self.structured_gen_dir))
            if path is not None and (info := _generation_info(path)) is not None
        }

    def query(
        self,
        sql: str,
        *,
        as_of_seq: int,
        principal: Principal,
        session_acls: Mapping[str, Mapping[str, Any]],
        timeout_seconds: float = 10.0,
        memory_limit: str = "512MB",
        max_rows: int = 10000,
    ) -> dict[str, Any]:
        """Run one read-only SELECT at ``as_of_seq`` as ``principal``.

        ``session_acls`` maps sessionId → the session's *latest* access list; a session
        missing from it is invisible. Returns ``columns``, ``types``, ``rows`` (at most
        ``max_rows``), ``rowCount``, ``truncated``, ``asOfSeq``, ``generations``, ``notice``
        and, when the analytics generation is built through less than ``as_of_seq``,
        ``uncovered`` (the seq range it does not hold). Every failure is a QueryError whose
        message says what to change; none shows a traceback or a file path.
        """
        _check_arguments(sql, as_of_seq, timeout_seconds, max_rows, memory_limit)
        allowed = sorted(sid for sid, acl in session_acls.items() if can_read(principal, acl))
        con = duckdb.connect(":memory:", config={"threads": 1, "memory_limit": memory_limit,
                                                  "temp_directory": "", "autoinstall_known_extensions": False,
                                                  "autoload_known_extensions": False})
        timer = threading.Timer(timeout_seconds, con.interrupt)
        timer.daemon = True
        try:
            views = _validate(con, sql)
            timer.start()
            self._prepare(con, views, as_of_seq, allowed)
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            result = con.execute(sql)
            columns = [d[0] for d in result.description or ()]
            types = [str(d[1]) for d in result.description or ()]
            rows = result.fetchmany(max_rows + 1)
        except duckdb.InterruptException:
            raise QueryError(f"the query ran longer than {timeout_seconds:g} s and was stopped",
                             hint="Filter or aggregate more, or raise the timeout.") from None
        except duckdb.OutOfMemoryException:
            raise QueryError(f"the query needs more than the {memory_limit} memory limit",
                             hint="Select fewer columns or rows, or aggregate.") from None
        except duckdb.Error as exc:
            raise QueryError(self._clean(exc), hint=_HINT) from None
        finally:
            timer.cancel()
            con.close()
        truncated = len(rows) > max_rows
        body: dict[str, Any] = {
            "columns": columns, "types": types, "rows": [[_jsonable(v) for v in row] for row in rows[:max_rows]],
            "rowCount": min(len(rows), max_rows), "truncated": truncated, "asOfSeq": as_of_seq,
            "generations": dict(self._generations), "notice": NOTICE,
        }
        built = self._generations.get("analytics", {}).get("builtThroughSeq")
        if built is not None and built < as_of_seq:
            body["uncovered"] = {"fromSeq": built + 1, "toSeq": as_of_seq}
        return body

    def _prepare(self, con: duckdb.DuckDBPyConnection, views: set[str], as_of_seq: int,
                 allowed: list[str]) -> None:
        """Copy the visible rows of the snapshot into temp tables and define the views."""
        con.execute(f"CREATE TEMP TABLE {_ALLOWED_TABLE} AS SELECT unnest($ids::VARCHAR[]) AS sessionId",
                    {"ids": allowed})
        visible = f"sessionId IN (SELECT sessionId FROM {_ALLOWED_TABLE})"
        needed = {table for view in views for table in _NEEDS[view]}
        gen = self.analytics_gen_dir
        if "events" in needed:
            columns = ", ".join(f'"{c}"' for c in _EVENT_COLUMNS)
            con.execute(f"CREATE TEMP TABLE events AS SELECT {columns} FROM "
                        f"{scan_sql(gen, 'events', SCHEMAS['events'])} WHERE seq <= {as_of_seq} AND {visible}")
            for view in ("sessions", "runs", "turns"):
                con.execute(f"CREATE TEMP VIEW {view} AS {_VIEW_SQL[view]}")
        if "tool_calls" in needed:
            con.execute("CREATE TEMP TABLE _snap_tool_calls AS SELECT * FROM "
                        f"{scan_sql(gen, 'tool_calls', SCHEMAS['tool_calls'])} "
                        f"WHERE seq <= {as_of_seq} AND {visible}")
            # The first result answers a call; later ones (retries of the result) are ignored.
            con.execute("CREATE TEMP TABLE _snap_tool_results AS SELECT * FROM "
                        f"{scan_sql(gen, 'tool_results', SCHEMAS['tool_results'])} "
                        f"WHERE seq <= {as_of_seq} AND {visible} "
                        "QUALIFY row_number() OVER (PARTITION BY sessionId, toolCallId ORDER BY seq) = 1")
            con.execute(f"CREATE TEMP VIEW tool_calls AS {_VIEW_SQL['tool_calls']}")
        if "chunks" in needed:
            con.execute("CREATE TEMP TABLE chunks AS SELECT * FROM "
                        f"{scan_sql(gen, 'chunks', SCHEMAS['chunks'])} WHERE maxSeq <= {as_of_seq} AND {visible}")

    def _clean(self, exc: duckdb.Error) -> str:
        """DuckDB's message without server paths (user-written literals may stay)."""
        message = str(exc).strip()
        for path in (self.analytics_gen_dir, self.structured_gen_dir):
            if path is not None:
                message = message.replace(str(path.resolve()), "<index>").replace(str(path), "<index>")
        if isinstance(exc, duckdb.PermissionException | duckdb.IOException):
            return "the SQL attachment cannot read or write files"
        return message or type(exc).__name__


# -- validation ------------------------------------------------------------------------------


def _check_arguments(sql: Any, as_of_seq: Any, timeout_seconds: float, max_rows: int,
                     memory_limit: str) -> None:
    if not isinstance(sql, str) or not sql.strip():
        raise QueryError("the SQL query is empty", hint=_HINT)
    if isinstance(as_of_seq, bool) or not isinstance(as_of_seq, int) or as_of_seq < 0:
        raise QueryError(f"asOfSeq must be a non-negative integer, not {as_of_seq!r}")
    if not timeout_seconds > 0 or not math.isfinite(timeout_seconds):
        raise QueryError("the timeout must be a positive number of seconds")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
        raise QueryError("max_rows must be a positive integer")
    if not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]?i?B", memory_limit.strip(), re.IGNORECASE):
        raise QueryError(f"memory limit {memory_limit!r} is not like 512MB")


def _validate(con: duckdb.DuckDBPyConnection, sql: str) -> set[str]:
    """Refuse anything but one read-only SELECT over the views; return the views it names."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"the SQL does not parse: {exc}", hint=_HINT) from None
    if len(statements) != 1:
        raise QueryError(f"send exactly one SQL statement, not {len(statements)}", hint=_HINT)
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        words = statements[0].query.split()
        verb = re.sub(r"[^A-Za-z]", "", words[0]).upper() if words else kind.name
        raise QueryError(f"the SQL attachment is read-only: {verb} statements are refused; "
                         "only SELECT (or WITH ... SELECT) runs", hint=_HINT)
    serialized = con.execute("SELECT json_serialize_sql($sql::VARCHAR)", {"sql": sql}).fetchone()
    tree = json.loads(serialized[0]) if serialized else {"error": True}
    if tree.get("error"):
        raise QueryError("this kind of SELECT is not supported by the SQL attachment", hint=_HINT)
    nodes = list(_walk(tree["statements"]))
    ctes = {entry["key"].lower() for node in nodes if isinstance(node.get("cte_map"), dict)
            for entry in node["cte_map"].get("map", [])}
    # CTE names are collected query-wide, not per scope: a CTE named like a system view
    # (pg_settings, duckdb_tables, ...) could let a bare reference elsewhere reach the catalog.
    system = {row[0].lower() for row in con.execute("SELECT view_name FROM duckdb_views() WHERE internal").fetchall()}
    if ctes & system:
        raise QueryError(f"the WITH name {sorted(ctes & system)[0]!r} is reserved; rename it", hint=_HINT)
    views: set[str] = set()
    for node in nodes:
        node_type = node.get("type")
        if node_type == "BASE_TABLE":
            name = str(node.get("table_name", ""))
            if node.get("schema_name") or node.get("catalog_name"):
                raise QueryError(f"table {_qualified(node)} is not available; query the views by "
                                 "their plain names", hint=_HINT)
            if name.lower() in ctes:
                continue
            if name.lower() not in VIEWS:
                if re.search(r"[/\\.:]", name):  # DuckDB reads a quoted file name as a table
                    raise QueryError("the SQL attachment cannot read files; query its views "
                                     + ", ".join(VIEWS), hint=_HINT)
                raise QueryError(f"unknown table {name[:64]!r}; the SQL attachment has the views "
                                 + ", ".join(VIEWS), hint=_HINT)
            views.add(name.lower())
        elif node_type == "TABLE_FUNCTION":
            name = str(node.get("function", {}).get("function_name", "")).lower()
            if name not in _TABLE_FUNCTIONS:
                raise QueryError(f"table function {name}() is not available in the SQL attachment "
                                 "(it cannot read files or the catalog)", hint=_HINT)
        elif node_type == "SHOW_REF" and node.get("query") is None:
            raise QueryError("SHOW is not available; use DESCRIBE <view> to see its columns", hint=_HINT)
        elif node.get("class") == "FUNCTION":
            name = str(node.get("function_name", "")).lower()
            if name in _SCALAR_DENYLIST:
                raise QueryError(f"function {name}() is not available in the SQL attachment", hint=_HINT)
    return views


def _walk(value: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object of a serialized parse tree, depth first."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _qualified(node: dict[str, Any]) -> str:
    parts = [node.get("catalog_name"), node.get("schema_name"), node.get("table_name")]
    return ".".join(str(p) for p in parts if p)


# -- results ---------------------------------------------------------------------------------


def _generation_info(gen_dir: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((gen_dir / "manifest.json").read_text("utf-8"))
        return {"generationId": int(manifest["generationId"]),
                "builtThroughSeq": int(manifest["builtThroughSeq"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _jsonable(value: Any) -> Any:
    """A DuckDB result value as JSON-ready data (times as RFC 3339 UTC)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)
