"""SessionQL and the SQL attachment return the same rows (SPEC §8).

A seeded generator writes a log of sessions of several tenants and access lists (runs, turns,
episodes, tool calls answered, failed, unanswered and answered twice, subagents, hidden
events, access-list changes, gappy seqs), runs it through the real redaction and chunking code
(:class:`sinks.rebuild.ReplayStream`) and the real analytics and structured writers into three
generations. Then it generates many SessionQL queries together with their SQL, written by an
independent translator in this file from the documented semantics (not by
``planner.sessionql.compile``), and runs both at several asOfSeq values for several
principals: same columns and types, same rows, in the same order whenever the query's order is
total, as multisets otherwise.

``USL_SESSIONQL_QUERIES`` raises the number of generated queries (default 150). A failure
prints the SessionQL text, the SQL, the principal and the asOfSeq.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from planner.acl import Principal
from planner.sessionql import parse, run_sessionql
from planner.sql import VIEWS, SqlAttachment
from sinks.analytics import AnalyticsWriter
from sinks.rebuild import ReplayStream
from sinks.structured import StructuredReader, StructuredWriter
from sinks.testing import commit_batches
from streams.settings import Settings

SEED = 20260131
QUERIES = int(os.environ.get("USL_SESSIONQL_QUERIES", "150"))

ACL_CHOICES = [
    {"tenant": "acme", "read": ["user:ann"]},
    {"tenant": "acme", "read": ["user:bob"]},
    {"tenant": "acme", "read": ["group:eng"]},
    {"tenant": "acme", "read": ["*"]},
    {"tenant": "acme", "read": ["user:ann", "user:bob"]},
    {"tenant": "acme", "read": []},
    {"tenant": "globex", "read": ["*"]},
    {"tenant": "globex", "read": ["user:ann"]},
]
PRINCIPALS = [
    Principal("acme", "ann"),
    Principal("acme", "bob"),
    Principal("acme", "carol", groups=frozenset({"eng"})),
    Principal("globex", "ann"),
    Principal("acme", "mallory"),
]
TOOLS = ["Bash", "Read", "Edit", "kubectl"]
PARAMS = ["cmd", "path", "args", "timeout"]
MODELS = ["opus-4", "sonnet-4", "haiku-4"]
# Unique per row within the log: the independent statement of what makes an order total.
ROW_KEYS = {"sessions": ["sessionId"], "runs": ["sessionId", "runId"],
            "turns": ["sessionId", "turnId"], "events": ["seq"], "tool_calls": ["seq"],
            "chunks": ["chunkId"]}
PLUS_TWO = timezone(timedelta(hours=2))
SQL_AGGREGATE = {"count": "count", "sum": "sum", "avg": "avg", "min": "min", "max": "max"}


# -- the log -----------------------------------------------------------------------------------


def generate_sessions(rng: random.Random, count: int = 16) -> list[list[dict[str, Any]]]:
    """Each session's events in session order (times and seqs are given when merged)."""
    sessions: list[list[dict[str, Any]]] = []
    calls_of: dict[str, list[str]] = {}
    for number in range(count):
        sid = f"s{number:02d}"
        acl = rng.choice(ACL_CHOICES)
        counter = itertools.count()

        def event(kind: str, *, sid: str = sid, counter: Any = counter, acl: Any = acl,
                  **extra: Any) -> dict[str, Any]:
            body = {"eventId": f"{sid}-e{next(counter)}", "logId": "default", "sessionId": sid,
                    "type": kind, "acl": acl, **extra}
            if kind not in ("session.started", "session.acl") and rng.random() < 0.08:
                body["visibility"] = "hidden"
            return body

        parent = rng.choice(sessions)[0]["sessionId"] if sessions and rng.random() < 0.4 else None
        title = rng.choice(["fix the 'retry' budget", 'deploy "cache"', "refactor billing", None])
        start_fields: dict[str, Any] = {"model": rng.choice(MODELS)} if rng.random() < 0.5 else {}
        if title:
            start_fields["title"] = title
        start = event("session.started", fields=start_fields)
        if parent:
            start["parentSessionId"] = parent
            if calls_of.get(parent):  # a subagent spawned by one of the parent's tool calls
                start["parentEventId"] = rng.choice(calls_of[parent])
        events = [start]
        calls_of[sid] = []
        for run in range(rng.randint(1, 2)):
            run_id = f"{sid}-r{run}"
            events.append(event("run.started", runId=run_id,
                                fields={"title": f"run {run} of {sid}"} if rng.random() < 0.5 else {}))
            episode = f"{sid}-ep{run}" if rng.random() < 0.4 else None
            if episode:
                events.append(event("episode.started", runId=run_id, episodeId=episode,
                                    fields={"goal": f"goal of {episode}"}))
            for turn in range(rng.randint(0, 3)):
                turn_id = f"{sid}-r{run}-t{turn}"
                ids = {"runId": run_id, "turnId": turn_id}
                if episode:
                    ids["episodeId"] = episode
                events.append(event("turn.started", role="user", **ids))
                events.append(event("message", role="user", **ids,
                                    fields={"text": "please " + "word " * rng.randint(1, 30)}))
                for call in range(rng.randint(0, 2)):
                    call_id = f"{turn_id}-c{call}"
                    keys = rng.sample(PARAMS, rng.randint(0, 3))
                    tool = rng.choice(TOOLS)
                    call_event = event("tool.call", role="assistant", **ids,
                                       fields={"toolName": tool, "toolCallId": call_id,
                                               "input": {k: f"v-{k}" for k in keys}})
                    events.append(call_event)
                    calls_of[sid].append(call_event["eventId"])
                    answers = rng.choices([0, 1, 2], weights=[15, 80, 5])[0]
                    for _ in range(answers):
                        result_fields: dict[str, Any] = {
                            "toolCallId": call_id, "status": rng.choice(["ok", "ok", "error"]),
                            "output": "x" * rng.randint(0, 200)}
                        if rng.random() < 0.7:
                            result_fields["toolName"] = tool
                        events.append(event("tool.result", role="tool", **ids,
                                            parentEventId=call_event["eventId"],
                                            fields=result_fields))
                reply: dict[str, Any] = {"text": "done " * rng.randint(1, 20)}
                if rng.random() < 0.7:
                    reply["model"] = rng.choice(MODELS)
                    reply["usage"] = {"inputTokens": rng.randint(0, 5000),
                                      "outputTokens": rng.randint(0, 900)}
                events.append(event("message", role="assistant", **ids, fields=reply))
                if rng.random() < 0.15:
                    events.append(event("error", **ids, fields={"message": "boom", "code": "E1"}))
                if rng.random() < 0.8:
                    events.append(event("turn.ended", role="assistant", **ids))
            if episode and rng.random() < 0.7:
                events.append(event("episode.ended", runId=run_id, episodeId=episode))
            if rng.random() < 0.6:
                events.append(event("run.ended", runId=run_id))
        if rng.random() < 0.15:  # the access list changes: the latest one applies
            events.append(event("session.acl", acl=rng.choice(ACL_CHOICES)))
        if rng.random() < 0.6:
            events.append(event("session.ended", acl=events[-1]["acl"]))
        sessions.append(events)
    return sessions


def merge(rng: random.Random, sessions: list[list[dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    """Interleave the sessions into one log: gappy seqs, increasing times."""
    queues = [list(events) for events in sessions]
    clock = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
    seq = 0
    log: list[tuple[int, dict[str, Any]]] = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        event = queue.pop(0)
        seq += rng.choice([1, 1, 1, 2, 3])
        clock += timedelta(milliseconds=rng.randint(200, 9000))
        event["time"] = clock.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        log.append((seq, event))
    return log


@dataclass
class World:
    analytics: Path
    structured: Path
    acls: dict[str, dict[str, Any]]
    max_seq: int
    types: dict[str, dict[str, str]]
    values: dict[str, dict[str, list[Any]]]
    as_ofs: list[int]
    sql: SqlAttachment = field(init=False)

    def __post_init__(self) -> None:
        self.sql = SqlAttachment(self.analytics, self.structured)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("sessionql-eq")
    rng = random.Random(SEED)
    log = merge(rng, generate_sessions(rng))
    replay = ReplayStream(Settings.from_env({}, home=root / "home"), "default")
    records = [record for seq, event in log for record in replay.feed(seq, event)
               if record["kind"] in ("event", "chunk") and not record.get("provisional")]
    third = len(records) // 3
    batches = [records[:third], records[third:2 * third], records[2 * third:]]
    analytics = commit_batches(root, AnalyticsWriter(), batches)[-1]
    structured = commit_batches(root, StructuredWriter(), batches)[-1]
    with StructuredReader(structured) as reader:
        acls = reader.session_acls()
    max_seq = log[-1][0]
    # Every row, to draw literals from: a principal of its own tenant that reads everything.
    everyone = {sid: {"tenant": "all", "read": ["*"]} for sid in acls}
    root_principal = Principal("all", "root")
    attachment = SqlAttachment(analytics, structured)
    types: dict[str, dict[str, str]] = {}
    values: dict[str, dict[str, list[Any]]] = {}
    for view in VIEWS:
        described = attachment.query(f"DESCRIBE {view}", as_of_seq=max_seq,
                                     principal=root_principal, session_acls=everyone)
        types[view] = {row[0]: row[1] for row in described["rows"]}
        rows = attachment.query(f"SELECT * FROM {view}", as_of_seq=max_seq,
                                principal=root_principal, session_acls=everyone)
        columns = rows["columns"]
        values[view] = {name: sorted({json.dumps(row[i]) for row in rows["rows"]
                                      if row[i] is not None})
                        for i, name in enumerate(columns)}
        assert rows["rowCount"] > 0, view
    built = max(int(r.get("seq", r.get("maxSeq", 0))) for r in records)
    as_ofs = [0, max_seq // 4, max_seq // 2, (3 * max_seq) // 4, built, built + 25]
    return World(analytics, structured, acls, max_seq, types, values, as_ofs)


def test_the_world_has_what_the_queries_need(world: World) -> None:
    tenants = {acl.get("tenant") for acl in world.acls.values()}
    assert tenants == {"acme", "globex"}
    readable = {str(p): sum(1 for a in world.acls.values()
                            if a.get("tenant") == p.tenant and _admits(p, a)) for p in PRINCIPALS}
    assert readable[str(PRINCIPALS[0])] > 0 and readable[str(PRINCIPALS[-1])] < len(world.acls)
    assert world.values["tool_calls"]["status"] and world.values["chunks"]["chunkId"]
    assert world.values["tool_calls"]["paramKeys"]


def _admits(principal: Principal, acl: dict[str, Any]) -> bool:
    read = acl.get("read") or []
    return "*" in read or f"user:{principal.user}" in read or any(
        f"group:{g}" in read for g in principal.groups)


# -- queries: one spec, two independent renderings ----------------------------------------------


@dataclass
class Spec:
    table: str
    where: Any = None
    group_by: list[str] = field(default_factory=list)
    select: list[tuple[str, str | None, str | None]] | None = None  # (func|"field", field, alias)
    order_by: list[tuple[str, bool]] = field(default_factory=list)
    limit: int | None = None
    total: bool = False


class Generator:
    """Random specs whose literals come from the data, so filters select something."""

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world = world
        self.rng = rng

    def spec(self) -> Spec:
        rng = self.rng
        table = rng.choice(list(VIEWS))
        spec = Spec(table)
        if rng.random() < 0.75:
            spec.where = self.condition(table, depth=0)
        shape = rng.random()
        if shape < 0.35:
            self.grouped(spec)
        elif shape < 0.45:
            aggregates = self.aggregates(table, rng.randint(1, 3))
            spec.select = aggregates
            if rng.random() < 0.3:
                spec.limit = rng.choice([0, 1])
            spec.total = True
        else:
            self.rows(spec)
        return spec

    def fields(self, table: str, *, lists: bool = True) -> list[str]:
        return [f for f, t in self.world.types[table].items() if lists or not t.endswith("[]")]

    def rows(self, spec: Spec) -> None:
        rng = self.rng
        names: list[str] = []
        if rng.random() < 0.6:
            chosen = rng.sample(self.fields(spec.table), rng.randint(1, 4))
            spec.select = []
            for number, name in enumerate(chosen):
                alias = f"out{number}" if rng.random() < 0.25 else None
                spec.select.append(("field", name, alias))
                names.append(alias or name)
        if rng.random() < 0.7:
            candidates = names + self.fields(spec.table)
            spec.order_by = [(rng.choice(candidates), rng.random() < 0.5)
                             for _ in range(rng.randint(1, 2))]
            spec.order_by += [(key, rng.random() < 0.3) for key in ROW_KEYS[spec.table]]
            spec.total = True
            if rng.random() < 0.6:
                spec.limit = rng.randint(0, 15)
        elif rng.random() < 0.3:
            # Only the row key: still a total order.
            spec.order_by = [(key, False) for key in ROW_KEYS[spec.table]]
            spec.total = True

    def grouped(self, spec: Spec) -> None:
        rng = self.rng
        spec.group_by = rng.sample(self.fields(spec.table, lists=False), rng.randint(1, 2))
        outputs: list[str] = []
        if rng.random() < 0.25:
            outputs = [*spec.group_by, "count"]
        else:
            spec.select = []
            for number, name in enumerate(spec.group_by):
                if rng.random() < 0.8:
                    alias = f"g{number}" if rng.random() < 0.3 else None
                    spec.select.append(("field", name, alias))
                    outputs.append(alias or name)
            aggregates = self.aggregates(spec.table, rng.randint(1, 3))
            spec.select += aggregates
            outputs += [alias or default_name(func, name) for func, name, alias in aggregates]
        if rng.random() < 0.7:
            spec.order_by = [(rng.choice(outputs), rng.random() < 0.5)
                             for _ in range(rng.randint(1, 2))]
        spec.order_by += [(name, rng.random() < 0.3) for name in spec.group_by]
        spec.total = True
        if rng.random() < 0.5:
            spec.limit = rng.randint(0, 10)

    def aggregates(self, table: str, count: int) -> list[tuple[str, str | None, str | None]]:
        rng = self.rng
        types = self.world.types[table]
        numeric = [f for f, t in types.items() if t in ("BIGINT", "HUGEINT", "DOUBLE")]
        ordered = [f for f, t in types.items() if not t.endswith("[]")]
        chosen: dict[tuple[str, str | None], str | None] = {}
        for number in range(count):
            func = rng.choice(["count", "count", "sum", "avg", "min", "max"])
            name: str | None
            if func == "count":
                name = None if rng.random() < 0.5 else rng.choice(list(types))
            elif func in ("sum", "avg"):
                name = rng.choice(numeric)
            else:
                name = rng.choice(ordered)
            alias = f"agg{number}" if rng.random() < 0.4 else None
            chosen.setdefault((func, name), alias)
        return [(func, name, alias) for (func, name), alias in chosen.items()]

    def condition(self, table: str, depth: int) -> Any:
        rng = self.rng
        roll = rng.random()
        if depth < 2 and roll < 0.3:
            op = rng.choice(["and", "or"])
            return (op, [self.condition(table, depth + 1) for _ in range(rng.randint(2, 3))])
        if depth < 3 and roll < 0.38:
            return ("not", self.condition(table, depth + 1))
        return self.predicate(table)

    def predicate(self, table: str) -> Any:
        rng = self.rng
        name = rng.choice(self.fields(table))
        kind = self.world.types[table][name]
        if rng.random() < 0.12:
            return ("null", name, rng.random() < 0.5)
        if kind.endswith("[]"):
            return ("contains", name, self.element(table, name), rng.random() < 0.3)
        if kind == "BOOLEAN":
            return ("cmp", name, rng.choice(["=", "!="]), rng.random() < 0.5)
        if kind == "VARCHAR" and rng.random() < 0.25:
            return ("contains", name, self.substring(table, name), rng.random() < 0.3)
        if rng.random() < 0.2:
            values = [self.value(table, name, kind) for _ in range(rng.randint(1, 3))]
            return ("in", name, values, rng.random() < 0.3)
        op = rng.choice(["=", "!=", "<", "<=", ">", ">="])
        return ("cmp", name, op, self.value(table, name, kind))

    def sample(self, table: str, name: str) -> Any:
        pool = self.world.values[table][name]
        return json.loads(self.rng.choice(pool)) if pool else None

    def value(self, table: str, name: str, kind: str) -> Any:
        rng = self.rng
        seen = self.sample(table, name)
        if kind == "VARCHAR":
            return seen if seen is not None and rng.random() < 0.85 else rng.choice(
                ["zzz", "it's \"quoted\"", "", "Bash", "s0"])
        if kind.startswith("TIMESTAMP"):
            moment = (datetime.fromisoformat(seen.replace("Z", "+00:00")) if seen
                      else datetime(2026, 1, 31, 12, 5, tzinfo=UTC))
            if rng.random() < 0.15:
                return datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
            return moment + timedelta(milliseconds=rng.choice([0, 0, -1, 1]))
        base = seen if isinstance(seen, int | float) else 0
        if kind == "DOUBLE" or rng.random() < 0.15:
            return float(base) + rng.choice([0.0, 0.0, 0.5, -0.25])
        return int(base) + rng.choice([0, 0, 0, 1, -1])

    def element(self, table: str, name: str) -> str:
        seen = self.sample(table, name)
        return self.rng.choice(seen) if seen and self.rng.random() < 0.8 else "nope"

    def substring(self, table: str, name: str) -> str:
        seen = self.sample(table, name)
        if not seen:
            return "x"
        start = self.rng.randrange(len(seen))
        return seen[start:start + self.rng.randint(1, 6)]


def default_name(func: str, name: str | None) -> str:
    """docs/sql.md: count() is "count", f(field) is "f_field"."""
    return func if name is None else f"{func}_{name}"


# -- rendering as SessionQL (with surface noise) --------------------------------------------------


class SessionQLText:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def kw(self, word: str) -> str:
        return self.rng.choice([word, word.lower(), word.capitalize()])

    def name(self, name: str) -> str:
        return name if self.rng.random() < 0.85 else self.rng.choice([name.lower(), name.upper()])

    def sep(self) -> str:
        return self.rng.choice([" ", " ", "  ", "\n", "\n\t"])

    def string(self, text: str) -> str:
        if self.rng.random() < 0.5:
            return json.dumps(text, ensure_ascii=self.rng.random() < 0.3)
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

    def value(self, value: Any) -> str:
        if isinstance(value, bool):
            return self.kw("TRUE" if value else "FALSE")
        if isinstance(value, datetime):
            if value == datetime(value.year, value.month, value.day, tzinfo=UTC) and self.rng.random() < 0.5:
                return self.string(value.date().isoformat())
            if self.rng.random() < 0.3:
                shifted = value.astimezone(PLUS_TWO)
                return self.string(shifted.isoformat())
            return self.string(value.isoformat().replace("+00:00", "Z"))
        if isinstance(value, str):
            return self.string(value)
        return repr(value)

    def condition(self, node: Any) -> str:
        kind = node[0]
        if kind in ("and", "or"):
            joined = f"{self.sep()}{self.kw(kind.upper())}{self.sep()}".join(
                f"({self.condition(c)})" for c in node[1])
            return joined
        if kind == "not":
            return f"{self.kw('NOT')} ({self.condition(node[1])})"
        name = self.name(node[1])
        if kind == "null":
            return f"{name} {self.kw('IS')} {self.kw('NOT') + ' ' if node[2] else ''}{self.kw('NULL')}"
        if kind == "contains":
            return f"{name} {self.kw('NOT') + ' ' if node[3] else ''}{self.kw('CONTAINS')} {self.string(node[2])}"
        if kind == "in":
            values = ", ".join(self.value(v) for v in node[2])
            return f"{name} {self.kw('NOT') + ' ' if node[3] else ''}{self.kw('IN')} ({values})"
        op = node[2]
        if op == "!=" and self.rng.random() < 0.5:
            op = "<>"
        return f"{name} {op} {self.value(node[3])}"

    def render(self, spec: Spec) -> str:
        parts = [f"{self.kw('FROM')} {spec.table}"]
        if spec.where is not None:
            parts.append(f"{self.kw('WHERE')} {self.condition(spec.where)}")
        if spec.group_by:
            parts.append(f"{self.kw('GROUP')} {self.kw('BY')} "
                         + ", ".join(self.name(n) for n in spec.group_by))
        if spec.select is not None:
            items = []
            for func, name, alias in spec.select:
                if func == "field":
                    text = self.name(str(name))
                elif name is None:
                    text = self.rng.choice(["count()", "count(*)", "COUNT()"])
                else:
                    text = f"{self.rng.choice([func, func.upper()])}({self.name(name)})"
                items.append(text + (f" {self.kw('AS')} {alias}" if alias else ""))
            parts.append(f"{self.kw('SELECT')} " + ", ".join(items))
        if spec.order_by:
            keys = []
            for name, descending in spec.order_by:
                direction = self.kw("DESC") if descending else self.rng.choice(["", " " + self.kw("ASC")])
                keys.append(self.name(name) + (" " + direction if descending else direction))
            parts.append(f"{self.kw('ORDER')} {self.kw('BY')} " + ", ".join(keys))
        if spec.limit is not None:
            parts.append(f"{self.kw('LIMIT')} {spec.limit}")
        return self.sep().join(parts)


# -- the independent SQL translation --------------------------------------------------------------


def sql_ident(name: str) -> str:
    return '"' + name + '"'


def sql_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return f"'{value.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}+00'::TIMESTAMPTZ"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, float):
        return f"({value!r})::DOUBLE"
    return str(value)


def sql_condition(node: Any, types: dict[str, str]) -> str:
    kind = node[0]
    if kind in ("and", "or"):
        return "(" + f" {kind.upper()} ".join(sql_condition(c, types) for c in node[1]) + ")"
    if kind == "not":
        return f"(NOT {sql_condition(node[1], types)})"
    column = sql_ident(node[1])
    if kind == "null":
        return f"({column} IS {'NOT ' if node[2] else ''}NULL)"
    if kind == "contains":
        needle = sql_value(node[2])
        if types[node[1]].endswith("[]"):
            # Unknown (NULL) when the list is NULL, like every other condition on a NULL.
            test = f"CASE WHEN {column} IS NULL THEN NULL ELSE list_position({column}, {needle}) IS NOT NULL END"
        else:
            test = f"strpos({column}, {needle}) > 0"
        return f"(NOT ({test}))" if node[3] else f"({test})"
    if kind == "in":
        values = ", ".join(sql_value(v) for v in node[2])
        return f"({column} {'NOT IN' if node[3] else 'IN'} ({values}))"
    return f"({column} {node[2]} {sql_value(node[3])})"


def to_sql(spec: Spec, types: dict[str, str]) -> str:
    if spec.select is None:
        select = (", ".join([*map(sql_ident, spec.group_by), 'count(*) AS "count"'])
                  if spec.group_by else "*")
    else:
        items = []
        for func, name, alias in spec.select:
            if func == "field":
                expr, default = sql_ident(str(name)), str(name)
            else:
                expr = f"{SQL_AGGREGATE[func]}({'*' if name is None else sql_ident(name)})"
                default = default_name(func, name)
            items.append(f"{expr} AS {sql_ident(alias or default)}")
        select = ", ".join(items)
    sql = f"SELECT {select} FROM {spec.table}"
    if spec.where is not None:
        sql += f" WHERE {sql_condition(spec.where, types)}"
    if spec.group_by:
        sql += " GROUP BY " + ", ".join(map(sql_ident, spec.group_by))
    if spec.order_by:
        sql += " ORDER BY " + ", ".join(
            f"{sql_ident(name)} {'DESC' if descending else 'ASC'} NULLS LAST"
            for name, descending in spec.order_by)
    if spec.limit is not None:
        sql += f" LIMIT {spec.limit}"
    return sql


# -- the comparison ---------------------------------------------------------------------------------


def _multiset(rows: list[list[Any]]) -> Counter[str]:
    return Counter(json.dumps(row) for row in rows)


def compare(world: World, spec: Spec, text: str, sql: str, principal: Principal, as_of: int) -> None:
    context = f"\nSessionQL: {text}\nSQL: {sql}\nprincipal: {principal}\nasOfSeq: {as_of}"
    expected = world.sql.query(sql, as_of_seq=as_of, principal=principal, session_acls=world.acls)
    got = run_sessionql(text, as_of_seq=as_of, principal=principal, session_acls=world.acls,
                        analytics_gen_dir=world.analytics, structured_gen_dir=world.structured)
    assert got["columns"] == expected["columns"], context
    assert got["types"] == expected["types"], context
    assert (got["rowCount"], got["truncated"]) == (expected["rowCount"], expected["truncated"]), context
    if spec.total:
        assert got["rows"] == expected["rows"], context
    else:
        assert _multiset(got["rows"]) == _multiset(expected["rows"]), context
    assert got["asOfSeq"] == as_of and got.get("uncovered") == expected.get("uncovered"), context
    # The normalized text is the same query.
    assert parse(got["query"]) == parse(text), context


# Hundreds of DuckDB queries: about 150 s alone, 360 s beside two other test workers; the
# suite's 600 s timeout is for hangs, not for a loaded machine.
@pytest.mark.timeout(1800)
def test_sessionql_and_sql_return_the_same_rows(world: World) -> None:
    rng = random.Random(SEED + 1)
    generator = Generator(world, rng)
    renderer = SessionQLText(rng)
    combos = list(itertools.product(PRINCIPALS, world.as_ofs))
    stats: Counter[str] = Counter()
    for number in range(QUERIES):
        spec = generator.spec()
        text = renderer.render(spec)
        sql = to_sql(spec, world.types[spec.table])
        # Two (principal, asOfSeq) pairs per query, walking through all of them.
        for principal, as_of in (combos[number % len(combos)],
                                 combos[(number * 7 + 3) % len(combos)]):
            compare(world, spec, text, sql, principal, as_of)
        stats["grouped" if spec.group_by else "aggregate" if spec.select and all(
            s[0] != "field" for s in spec.select) else "rows"] += 1
        stats["ordered" if spec.total else "unordered"] += 1
        stats["filtered"] += spec.where is not None
        stats["limited"] += spec.limit is not None
    # The generator covers every shape (a seed change that loses one fails here, not silently).
    assert min(stats["grouped"], stats["aggregate"], stats["rows"], stats["unordered"],
               stats["limited"]) >= QUERIES // 20, stats


def test_answers_differ_across_principals_and_snapshots(world: World) -> None:
    """The comparison above is not vacuous: principals and asOfSeq values change answers."""
    counts = {}
    for principal, as_of in itertools.product(PRINCIPALS, world.as_ofs):
        body = run_sessionql("FROM events SELECT count()", as_of_seq=as_of, principal=principal,
                             session_acls=world.acls, analytics_gen_dir=world.analytics,
                             structured_gen_dir=world.structured)
        counts[(str(principal), as_of)] = body["rows"][0][0]
    assert len({v for (_, a), v in counts.items() if a == world.as_ofs[-2]}) >= 3
    assert all(counts[(str(p), 0)] == 0 for p in PRINCIPALS)
    ann = [counts[(str(PRINCIPALS[0]), a)] for a in world.as_ofs]
    assert ann == sorted(ann) and ann[1] < ann[-1]
