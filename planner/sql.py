"""The read-only SQL attachment: DuckDB over the analytics Parquet, fixed to one asOfSeq and
restricted to the sessions the caller may read.

Each query gets an in-memory DuckDB connection of its own (one prepared for the same snapshot
and the same readable sessions may be reused, below). Before any user SQL runs:

1. the SQL must be exactly one read-only ``SELECT``/``WITH`` statement (checked with DuckDB's
   own parser), naming only the attachment's views, WITH names declared where the reference
   can see them (resolved by scope from DuckDB's serialized parse), and table functions that
   compute rather than read (``range``, ``generate_series``, ``unnest``);
2. each Parquet table is handed to DuckDB as an Arrow dataset that is *already filtered* to
   the snapshot (``seq <= as_of_seq``; chunks ``maxSeq <= as_of_seq``) and to the sessions
   whose *latest* access list admits the caller. DuckDB itself never opens a file, and no
   row of another session ever reaches the user's query: no filter order, error message,
   aggregate or direct reference to the underlying relation can reveal one;
3. the views are the only names the connection has: each is built from unnamed relations, so
   the Arrow data, the access-list column and every intermediate step live inside the view's
   own definition, where no user query can name them (even if the validator let one through);
4. the connection is locked: file system access off, configuration frozen, no Python
   replacement scans, one thread, a memory limit, and a timer that interrupts the query at
   ``timeout_seconds``.

A connection whose views were built is kept for the next query of the same key: the same
analytics generation (its directories, by path and inode), the same snapshot seq, the same readable sessions and memory limit (a
few, least recently used first out). Its views already say exactly what that query's would, and
a SELECT changes nothing a later query sees (the configuration is frozen; nothing can be created);
a connection whose query failed or whose timer fired is closed, never kept. Building the views
was most of a cheap query's time (a new database, a dozen relations bound: ~80 of ~110 ms).

Views (documented column by column in ``docs/sql.md``): ``events``, ``tool_calls`` (with their
results), ``chunks``, and the aggregates ``sessions``, ``runs``, ``turns``.

An analytics index written by sink shards is read as one: each table's dataset holds every
shard's segments (:mod:`sinks.shard_tables`; a session's rows live in one shard), and the
aggregates are computed over that union, so the answer is the one index's answer.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from planner.acl import Principal, can_read
from planner.exceptions import IndexUnavailable, QueryError
from sinks.analytics import SCHEMAS
from sinks.shard_tables import GenerationDirs, generation_dirs, shard_segments

__all__ = ["DEFAULT_MAX_RESULT_BYTES", "NOTICE", "VIEWS", "SqlAttachment"]

NOTICE = ("The SQL attachment is a read-only snapshot at asOfSeq; it does not provide semantic "
          "search, evidence snippets, resume, lineage semantics or subscriptions.")

VIEWS = ("sessions", "runs", "turns", "events", "tool_calls", "chunks")
# The rows of one answer, as JSON, stay under this many bytes (USL_SQL_MAX_RESULT_BYTES): the
# memory limit bounds what DuckDB holds, this bounds what the server builds and sends.
DEFAULT_MAX_RESULT_BYTES = 16 * 1024 * 1024
_FETCH_BATCH_ROWS = 256
_INTERRUPT_REPEAT_SECONDS = 0.05
_KEPT_CONNECTIONS = 8  # prepared connections kept: a few principals' queries at a few heads
# Table functions that compute rather than read: everything else (read_*, glob, query,
# duckdb_*, pragma_*, ...) is refused before execution.
_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest"})
# Scalar functions that could reveal the server's configuration or environment.
_SCALAR_DENYLIST = frozenset({"current_setting", "getenv", "getvariable"})
_HINT = ("Write one SELECT (or WITH ... SELECT) over the views "
         + ", ".join(VIEWS) + "; see docs/sql.md.")

_EVENT_COLUMNS = [f.name for f in SCHEMAS["events"] if f.name != "aclRead"]
# Lineage columns point at other sessions and events: show them only when the caller may see
# what they point at (and, for an event, it is inside the snapshot), never a hidden id.
_LINEAGE_MASKS = {
    "parentSessionId": "CASE WHEN r_allowedSessionId IS NOT NULL THEN parentSessionId END "
                       "AS parentSessionId",
    "parentEventId": "CASE WHEN parentEventId IN (SELECT eventId FROM events) THEN parentEventId "
                     "END AS parentEventId",
}
# Distinct counts are written len(list_distinct(list(x))): unlike count(DISTINCT x), DuckDB drops
# such an aggregate when a query does not use its column, and most queries use few of them.
_AGGREGATES = """
    min(time) AS startTime, max(time) AS endTime,
    epoch(max(time)) - epoch(min(time)) AS durationSeconds,
    min(seq) AS firstSeq, max(seq) AS lastSeq, count(*) AS eventCount,
    count(*) FILTER (WHERE type = 'message') AS messageCount,
    count(*) FILTER (WHERE type = 'tool.call') AS toolCallCount,
    count(*) FILTER (WHERE type = 'error' OR (type = 'tool.result' AND status = 'error')) AS errorCount,
    coalesce(sum(inputTokens), 0) AS inputTokens, coalesce(sum(outputTokens), 0) AS outputTokens"""
_FIRST_MODEL = "arg_min(model, seq) FILTER (WHERE model IS NOT NULL)"
# A session's model is what its session.started names (the main agent's), else the first named:
# a followed session's subagent often answers before the main agent (its files are written side
# by side), and the first model named was the subagent's where a one-shot import (files in path
# order) named the main agent's. A followed file's session.started that learned its model or
# title late goes out again with them (streams.follow), so of session.started the last says most:
# what a one-shot import of the whole file says.
_SESSION_MODEL = ("coalesce(arg_max(model, seq) FILTER (WHERE type = 'session.started' AND model IS NOT NULL), "
                  f"{_FIRST_MODEL}) AS model")

_VIEW_SQL = {
    "sessions": f"""
        SELECT sessionId, arg_max(logId, seq) AS logId, arg_max(tenant, seq) AS tenant,
            arg_min(parentSessionId, seq) FILTER (WHERE parentSessionId IS NOT NULL) AS parentSessionId,
            arg_max(title, seq) FILTER (WHERE type = 'session.started' AND title IS NOT NULL) AS title,
            len(list_distinct(list(runId))) AS runCount, len(list_distinct(list(turnId))) AS turnCount,
            bool_or(type = 'session.ended') AS ended, {_AGGREGATES}, {_SESSION_MODEL}
        FROM events GROUP BY sessionId""",
    "runs": f"""
        SELECT runId, sessionId,
            arg_min(title, seq) FILTER (WHERE type = 'run.started' AND title IS NOT NULL) AS title,
            len(list_distinct(list(turnId))) AS turnCount, bool_or(type = 'run.ended') AS ended, {_AGGREGATES},
            {_FIRST_MODEL} AS model
        FROM events WHERE runId IS NOT NULL GROUP BY sessionId, runId""",
    "turns": f"""
        SELECT turnId, sessionId, arg_min(runId, seq) FILTER (WHERE runId IS NOT NULL) AS runId,
            bool_or(type = 'turn.ended') AS ended, {_AGGREGATES}, {_FIRST_MODEL} AS model
        FROM events WHERE turnId IS NOT NULL GROUP BY sessionId, turnId""",
    # Each body below reads one relation, named here only inside its own view (a CTE): see
    # _prepare. Tool results come in as columns prefixed "r_", already grouped per call.
    "tool_calls": """
        SELECT logId, seq, eventId, sessionId, runId, turnId, toolCallId,
            coalesce(toolName, r_toolName) AS toolName, time, paramKeys,
            r_seq AS resultSeq, r_eventId AS resultEventId, r_status AS status, r_time AS resultTime,
            r_outputBytes AS outputBytes, epoch(r_time) - epoch(time) AS durationSeconds
        FROM tool_calls""",
    # The first result answers a call; a repeated result is ignored.
    "_first_results": """
        SELECT sessionId AS r_sessionId, toolCallId AS r_toolCallId, min(seq) AS r_seq,
            arg_min_null(eventId, seq) AS r_eventId, arg_min_null(toolName, seq) AS r_toolName,
            arg_min_null(status, seq) AS r_status, arg_min_null(time, seq) AS r_time,
            arg_min_null(outputBytes, seq) AS r_outputBytes
        FROM tool_results GROUP BY sessionId, toolCallId""",
    "events": "SELECT " + ", ".join(_LINEAGE_MASKS.get(c, f'"{c}"') for c in _EVENT_COLUMNS)
              + " FROM events",
    "chunks": "SELECT * FROM chunks",
}


class SqlAttachment:
    """Read-only SQL over one analytics generation (and, for the report, a structured one);
    either may be a sharded index's generations, one per shard, read as one."""

    def __init__(self, analytics_gen_dir: GenerationDirs,
                 structured_gen_dir: GenerationDirs | None = None) -> None:
        self.analytics_gen_dirs = generation_dirs(analytics_gen_dir)
        self.structured_gen_dirs = () if structured_gen_dir is None else generation_dirs(structured_gen_dir)
        if not self.analytics_gen_dirs or not all(path.is_dir() for path in self.analytics_gen_dirs):
            raise QueryError("the analytics index has no generation to query yet",
                             hint="Wait for the analytics sink to commit, then retry.")
        # Each generation directory by path and inode: a home wiped and rebuilt under a running
        # API makes the same paths again, and a connection kept for the old files must not answer.
        try:
            self._identity = tuple((str(path), path.stat().st_ino) for path in self.analytics_gen_dirs)
        except OSError:
            raise IndexUnavailable("the analytics index could not be read",
                                   hint="Retry; if it persists, check `usl status`.") from None
        self._generations = {
            kind: info for kind, paths in (("analytics", self.analytics_gen_dirs),
                                           ("structured", self.structured_gen_dirs))
            if paths and (info := _generation_info(paths)) is not None
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
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> dict[str, Any]:
        """Run one read-only SELECT at ``as_of_seq`` as ``principal``.

        ``session_acls`` maps sessionId → the session's *latest* access list; a session
        missing from it is invisible. Returns ``columns``, ``types``, ``rows`` (at most
        ``max_rows``, and no more than fit in ``max_result_bytes`` of JSON), ``rowCount``,
        ``truncated`` (with ``truncation`` {``reason``: ``rows`` or ``bytes``, ``maxRows``,
        ``maxResultBytes``} when true), ``asOfSeq``, ``generations``, ``notice`` and, when the
        analytics generation is built through less than ``as_of_seq``, ``uncovered`` (the seq
        range it does not hold). Every failure of the query is a QueryError whose message says
        what to change; unreadable index files are IndexUnavailable. No message shows a
        traceback or a file path.
        """
        _check_arguments(sql, as_of_seq, timeout_seconds, max_rows, memory_limit)
        if isinstance(max_result_bytes, bool) or not isinstance(max_result_bytes, int) \
                or max_result_bytes < 1:
            raise QueryError("max_result_bytes must be a positive integer")
        allowed = sorted(sid for sid, acl in session_acls.items() if can_read(principal, acl))
        covered = self._covered_through(as_of_seq)
        key = (self._identity, covered, tuple(allowed), memory_limit.strip().upper())
        con = _PREPARED.take(key)
        prepared = con is not None
        if con is None:
            try:
                con = duckdb.connect(":memory:", config={
                    "threads": 1, "memory_limit": memory_limit, "autoinstall_known_extensions": False,
                    "autoload_known_extensions": False, "python_enable_replacements": False,
                })
                con.execute("SET temp_directory = ''")  # never spill query data to disk
                con.execute("SET enable_external_access = false")
            except duckdb.Error as exc:
                raise QueryError(f"cannot start the SQL engine with memory limit {memory_limit!r}: "
                                 f"{exc}") from None
        watchdog = _Watchdog(con, timeout_seconds)
        answered = False
        try:
            watchdog.start()
            _validate(con, sql)
            if not prepared:
                self._prepare(con, covered, allowed)
                con.execute("SET lock_configuration = true")
            result = con.execute(sql)
            columns = [d[0] for d in result.description or ()]
            types = [str(d[1]) for d in result.description or ()]
            rows, truncated_by = _fetch_rows(result, max_rows, max_result_bytes)
            answered = True
        except duckdb.InterruptException:
            raise QueryError(f"the query ran longer than {timeout_seconds:g} s and was stopped",
                             hint="Filter or aggregate more, or raise the timeout.") from None
        except duckdb.OutOfMemoryException:
            raise QueryError(f"the query needs more than the {memory_limit} memory limit",
                             hint="Select fewer columns or rows, or aggregate.") from None
        except duckdb.Error as exc:
            if "reading the Arrow source failed" in str(exc):  # Arrow failed on a file
                raise IndexUnavailable("the analytics index could not be read",
                                       hint="Retry; if it persists, check `usl status`.") from None
            raise QueryError(self._clean(exc, sql), hint=_HINT) from None
        except (OSError, pa.ArrowException) as exc:
            # The pinned generation's files are gone or damaged: not the caller's fault.
            raise IndexUnavailable("the analytics index could not be read",
                                   hint="Retry; if it persists, check `usl status`.") from exc
        finally:
            watchdog.stop()
            if answered and not watchdog.fired:
                _PREPARED.give_back(key, con)
            else:
                con.close()
        body: dict[str, Any] = {
            "columns": columns, "types": types, "rows": rows, "rowCount": len(rows),
            "truncated": truncated_by is not None, "asOfSeq": as_of_seq,
            "generations": dict(self._generations), "notice": NOTICE,
        }
        if truncated_by is not None:
            body["truncation"] = {"reason": truncated_by, "maxRows": max_rows,
                                  "maxResultBytes": max_result_bytes}
        if covered < as_of_seq:
            body["uncovered"] = {"fromSeq": covered + 1, "toSeq": as_of_seq}
        return body

    def _covered_through(self, as_of_seq: int) -> int:
        """The last seq the answer holds: ``as_of_seq``, or the analytics generation's
        ``builtThroughSeq`` when that is less. A generation holds rows past its watermark (a
        partition the sink read further than another), but not all of them: read, they made an
        answer that named them uncovered yet counted some, and changed with the sink's timing
        instead of the log position."""
        built = self._generations.get("analytics", {}).get("builtThroughSeq")
        return as_of_seq if built is None else min(as_of_seq, int(built))

    def _prepare(self, con: duckdb.DuckDBPyConnection, as_of_seq: int, allowed: list[str]) -> None:
        """Define the public views over the snapshot's visible rows, and nothing else.

        Each view is built from relations (DuckDB's relational API), not from named tables: the
        Arrow data and every intermediate step exist only inside the view's own definition, so
        the catalog the user's query resolves names in holds the public views and DuckDB's
        built-in ones, and no name, in any scope, reaches anything unfiltered.
        """
        data = {table: self._snapshot_data(table, as_of_seq, allowed)
                for table in ("events", "tool_calls", "tool_results", "chunks")}
        allowed_sessions = con.from_arrow(
            pa.table({"r_allowedSessionId": pa.array(allowed, pa.string())}))
        events = _over(con.from_arrow(data["events"])
                       .join(allowed_sessions, "parentSessionId = r_allowedSessionId", how="left"),
                       "events", _VIEW_SQL["events"])
        first_results = _over(con.from_arrow(data["tool_results"]), "tool_results",
                              _VIEW_SQL["_first_results"])
        tool_calls = _over(con.from_arrow(data["tool_calls"])
                           .join(first_results, "sessionId = r_sessionId AND toolCallId = r_toolCallId",
                                 how="left"),
                           "tool_calls", _VIEW_SQL["tool_calls"])
        views = {"events": events, "tool_calls": tool_calls,
                 "chunks": _over(con.from_arrow(data["chunks"]), "chunks", _VIEW_SQL["chunks"])}
        for view in ("sessions", "runs", "turns"):
            views[view] = _over(events, "events", _VIEW_SQL[view])
        for view in VIEWS:
            views[view].create_view(view, replace=False)

    def _snapshot_data(self, table: str, as_of_seq: int, allowed: list[str]) -> Any:
        """The Arrow rows of ``table`` inside the snapshot and the allowed sessions (lazy)."""
        seq_column = "maxSeq" if table == "chunks" else "seq"
        snapshot = (pc.field("sessionId").isin(pa.array(allowed, pa.string()))
                    & (pc.field(seq_column) <= as_of_seq))
        files = [str(p) for p in shard_segments(self.analytics_gen_dirs, table)]
        schema = SCHEMAS[table]
        # Listing the schema makes a column missing from an older segment read as NULL.
        return (ds.dataset(files, schema=schema, format="parquet").filter(snapshot)
                if files else schema.empty_table())

    def _clean(self, exc: duckdb.Error, sql: str) -> str:
        """DuckDB's message without server paths (user-written literals may stay), on one line."""
        message = _one_line(str(exc).strip(), sql)
        for path in (*self.analytics_gen_dirs, *self.structured_gen_dirs):
            message = message.replace(str(path.resolve()), "<index>").replace(str(path), "<index>")
        if isinstance(exc, duckdb.PermissionException | duckdb.IOException):
            return "the SQL attachment cannot read or write files"
        return message or type(exc).__name__


def _over(relation: duckdb.DuckDBPyRelation, name: str, sql: str) -> duckdb.DuckDBPyRelation:
    """``sql`` over ``relation``, which it calls ``name``: a lazy relation in which ``name`` is
    a CTE of its own definition, never an entry of the catalog."""
    result = relation.query(name, sql)
    if result is None:  # only a SELECT was given; DuckDB returns None for other statements
        raise TypeError(f"view body for {name} is not a SELECT")
    return result


class _PreparedConnections:
    """Connections whose views are built, by key, each lent to one query at a time: a query
    takes its key's connection (or builds one) and gives it back when it answered; two at once
    with one key build two, and the second given back is closed. At most ``size`` are kept."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._idle: OrderedDict[tuple[Any, ...], duckdb.DuckDBPyConnection] = OrderedDict()

    def take(self, key: tuple[Any, ...]) -> duckdb.DuckDBPyConnection | None:
        with self._lock:
            return self._idle.pop(key, None)

    def give_back(self, key: tuple[Any, ...], con: duckdb.DuckDBPyConnection) -> None:
        closing = []
        with self._lock:
            if key in self._idle:
                closing.append(con)
            else:
                self._idle[key] = con
                while len(self._idle) > self._size:
                    closing.append(self._idle.popitem(last=False)[1])
        for old in closing:
            old.close()

    def clear(self) -> None:
        with self._lock:
            closing = list(self._idle.values())
            self._idle.clear()
        for old in closing:
            old.close()


_PREPARED = _PreparedConnections(_KEPT_CONNECTIONS)


class _Watchdog:
    """Interrupts a DuckDB connection once ``seconds`` have passed, and again every
    ``_INTERRUPT_REPEAT_SECONDS`` until stopped: an interrupt that lands between two statements
    (while the views are being defined) is lost, so a single one could let the query that
    follows run unbounded. Stopping waits for an interrupt in progress, so the connection is
    never interrupted while it closes."""

    def __init__(self, con: duckdb.DuckDBPyConnection, seconds: float) -> None:
        self._con = con
        self._seconds = seconds
        self._lock = threading.Lock()
        self._stopped = False
        self.fired = False  # an interrupt may outlive its query: the connection is not kept
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="usl-sql-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._wake.set()

    def _run(self) -> None:
        if self._wake.wait(self._seconds):
            return
        while True:
            with self._lock:
                if self._stopped:
                    return
                self.fired = True
                self._con.interrupt()
            if self._wake.wait(_INTERRUPT_REPEAT_SECONDS):
                return


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


_CONTEXT_LINE = re.compile(r"LINE (\d+): ")
# DuckDB's advice to change a setting ('Use "SET max_expression_depth TO x" to increase ...'):
# the attachment refuses SET and locks its configuration, so the advice would only mislead.
_SETTING_ADVICE = re.compile(r"\s*(?:Use|Try|Run)\b[^.]*\b(?:SET|PRAGMA)\s[^.]*\.(?=\s|$)")


def _one_line(message: str, sql: str) -> str:
    """DuckDB's error as one line: its ``LINE n: <query>`` and caret lines become "at line n,
    column c" (the column only where the shown text is found in the query: DuckDB cuts long
    lines with "..."). An error message is one line for the CLI and for logs; DuckDB's came
    as five, with a blank one."""
    lines = message.split("\n")
    place = ""
    for index, line in enumerate(lines[:-1]):
        context = _CONTEXT_LINE.match(line)
        caret_line = lines[index + 1]
        if context is None or not caret_line.strip().startswith("^"):
            continue
        number = int(context.group(1))
        place = f" at line {number}"
        shown = line[context.end():]
        cut_front = shown.startswith("...")
        body = shown[3:] if cut_front else shown
        body = body[:-3] if body.endswith("...") else body
        source_lines = sql.split("\n")
        source = source_lines[number - 1] if 0 < number <= len(source_lines) else ""
        offset = source.find(body) if body else -1
        if offset >= 0:
            caret = len(caret_line) - len(caret_line.lstrip(" ")) - context.end() - (3 if cut_front else 0)
            place += f", column {offset + caret + 1}"
        lines = lines[:index] + lines[index + 2:]
        break
    text = " ".join(part.strip() for part in lines if part.strip())
    return _SETTING_ADVICE.sub("", text) + place


def _validate(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse anything but one read-only SELECT over the views and computed tables."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"the SQL does not parse: {_one_line(str(exc), sql)}", hint=_HINT) from None
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
    scoped = list(_walk_scoped(tree["statements"]))
    declared = {name for _node, scope in scoped for name in scope}
    # Defence in depth: a WITH name that shadows a built-in view (pg_settings, duckdb_tables,
    # ...) is refused, so a reference the scope rules below misjudge still reaches no catalog.
    system = {row[0].lower() for row in con.execute("SELECT view_name FROM duckdb_views() WHERE internal").fetchall()}
    if declared & system:
        raise QueryError(f"the WITH name {sorted(declared & system)[0]!r} is reserved; rename it", hint=_HINT)
    for node, scope in scoped:
        node_type = node.get("type")
        if node_type == "BASE_TABLE":
            name = str(node.get("table_name", ""))
            if node.get("schema_name") or node.get("catalog_name"):
                raise QueryError(f"table {_qualified(node)} is not available; query the views by "
                                 "their plain names", hint=_HINT)
            if name.lower() in scope:  # a WITH name declared where this reference can see it
                continue
            if name.lower() not in VIEWS:
                if re.search(r"[/\\.:]", name):  # DuckDB reads a quoted file name as a table
                    raise QueryError("the SQL attachment cannot read files; query its views "
                                     + ", ".join(VIEWS), hint=_HINT)
                raise QueryError(f"unknown table {name[:64]!r}; the SQL attachment has the views "
                                 + ", ".join(VIEWS), hint=_HINT)
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


def _walk_scoped(value: Any) -> Iterator[tuple[dict[str, Any], frozenset[str]]]:
    """Every JSON object of a serialized parse tree, with the WITH names visible at it.

    DuckDB's scoping: a query node's WITH names are visible in that node (its FROM, WHERE,
    subqueries, set-operation branches) and nowhere outside it; the body of a WITH entry sees
    the entries declared before it, and itself only when it is recursive. A name used where
    no WITH entry is visible resolves in the catalog.
    """
    stack: list[tuple[Any, frozenset[str]]] = [(value, frozenset())]
    while stack:
        item, scope = stack.pop()
        if isinstance(item, list):
            stack.extend((child, scope) for child in item)
            continue
        if not isinstance(item, dict):
            continue
        yield item, scope
        ctes = item.get("cte_map")
        entries = ctes.get("map", []) if isinstance(ctes, dict) else []
        names = [str(entry.get("key", "")).lower() for entry in entries]
        for position, entry in enumerate(entries):
            body = entry.get("value", {})
            recursive = body.get("query_node", {}).get("type") == "RECURSIVE_CTE_NODE"
            visible = names[:position + 1] if recursive else names[:position]
            stack.append((body, scope | frozenset(visible)))
        inner = scope | frozenset(names)
        stack.extend((child, inner) for key, child in item.items() if key != "cte_map")


def _qualified(node: dict[str, Any]) -> str:
    parts = [node.get("catalog_name"), node.get("schema_name"), node.get("table_name")]
    return ".".join(str(p) for p in parts if p)


# -- results ---------------------------------------------------------------------------------


def _generation_info(gen_dirs: tuple[Path, ...]) -> dict[str, Any] | None:
    """``generationId`` and ``builtThroughSeq`` of the generation read; of a sharded index,
    the slowest shard's (the least ``builtThroughSeq``) plus ``shards``: shard name → its own."""
    shards: dict[str, dict[str, Any]] = {}
    for gen_dir in gen_dirs:
        try:
            manifest = json.loads((gen_dir / "manifest.json").read_text("utf-8"))
            info = {"generationId": int(manifest["generationId"]),
                    "builtThroughSeq": int(manifest["builtThroughSeq"])}
        except (OSError, ValueError, KeyError, TypeError):
            return None
        shards[gen_dir.parent.parent.name] = info  # <kind>/shard-I-of-N/<line>/gen-...
    slowest = min(shards.values(), key=lambda info: info["builtThroughSeq"], default=None)
    if slowest is None or len(shards) == 1:
        return slowest
    return {**slowest, "shards": dict(sorted(shards.items()))}


def _fetch_rows(result: duckdb.DuckDBPyConnection, max_rows: int,
                max_bytes: int) -> tuple[list[list[Any]], str | None]:
    """The first rows of ``result`` as JSON-ready lists, stopping before ``max_rows`` or
    ``max_bytes`` of JSON would be passed; the second item says which limit cut the answer
    (``rows`` or ``bytes``), or None when every row fit. Rows are fetched in small batches,
    so an answer too big to send is never built whole."""
    rows: list[list[Any]] = []
    size = 1  # "[", then each row with the "," or "]" after it
    while batch := result.fetchmany(min(_FETCH_BATCH_ROWS, max_rows + 1 - len(rows))):
        for row in batch:
            if len(rows) == max_rows:
                return rows, "rows"
            cells = [_jsonable(v) for v in row]
            size += len(orjson.dumps(cells)) + 1
            if size > max_bytes:
                return rows, "bytes"
            rows.append(cells)
    return rows, None


# orjson (and many JSON readers) take integers of at most 64 bits; wider ones travel as text.
_INT_RANGE = range(-(2 ** 63), 2 ** 64)


def _jsonable(value: Any) -> Any:
    """A DuckDB result value as JSON-ready data (times as RFC 3339 UTC)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value in _INT_RANGE else str(value)
    if value is None or isinstance(value, bool | str):
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
        return _jsonable(int(value)) if value == value.to_integral_value() else float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)
