"""SessionQL → one DuckDB ``SELECT`` over the SQL attachment's views (or the lineage table).

The SQL is generated from a checked :class:`~planner.sessionql.nodes.Query`, never pasted from
the user's text: fields are quoted identifiers qualified by their table (so an output name
can never capture a field in WHERE), literals are typed SQL literals, ORDER BY names an output
column by its position. Meaning, clause by clause (the equivalences ``docs/sql.md`` lists):

- ``f CONTAINS "x"`` is ``contains(f, 'x')`` on strings, ``list_contains(f, 'x')`` on lists;
- a condition on a NULL field is unknown, so the row is left out, also under ``NOT``;
- every ORDER BY key sorts NULLs last, and the table's row key (for grouped queries the GROUP
  BY fields) follows the given keys, so the order is total and a LIMIT always takes the same
  rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from planner.sessionql.catalog import ROW_KEYS, TABLES, FieldType
from planner.sessionql.nodes import (
    Aggregate,
    BoolOp,
    Comparison,
    Condition,
    Contains,
    InList,
    IsNull,
    Not,
    Query,
    Value,
    output_items,
    resolve_order_key,
)

__all__ = ["CompiledQuery", "compile_query"]


@dataclass(frozen=True)
class CompiledQuery:
    """The SQL of a query and the names of the columns it answers with."""

    sql: str
    columns: tuple[str, ...]


def compile_query(query: Query) -> CompiledQuery:
    """The DuckDB SQL that answers ``query`` over the view (or table) ``query.table``."""
    table = query.table
    items = output_items(query)
    select = ", ".join(f"{_expr(table, item.expr)} AS {_ident(item.name)}" for item in items)
    sql = f"SELECT {select} FROM {_ident(table)}"
    if query.where is not None:
        sql += " WHERE " + _condition(table, query.where)
    if query.group_by:
        sql += " GROUP BY " + ", ".join(_column(table, field) for field in query.group_by)
    order = _order(query)
    if order:
        sql += " ORDER BY " + ", ".join(order)
    if query.limit is not None:
        sql += f" LIMIT {int(query.limit)}"
    return CompiledQuery(sql, tuple(item.name for item in items))


def _order(query: Query) -> list[str]:
    """The ORDER BY terms: the query's keys, then the tie-breakers that make the order total."""
    if query.aggregated and not query.group_by:
        return []  # one row
    items = output_items(query)
    terms: list[str] = []
    ordered_fields: set[str] = set()
    for key in query.order_by:
        resolved = resolve_order_key(query, key.name)
        if resolved is None:  # the parser refuses these; never order by a guess
            raise ValueError(f"unresolved ORDER BY key {key.name!r}")
        kind, target = resolved
        direction = "DESC" if key.descending else "ASC"
        if kind == "output":
            index = int(target)
            terms.append(f"{index + 1} {direction} NULLS LAST")
            expr = items[index].expr
            if isinstance(expr, str):
                ordered_fields.add(expr)
        else:
            terms.append(f"{_column(query.table, str(target))} {direction} NULLS LAST")
            ordered_fields.add(str(target))
    breakers = query.group_by or ROW_KEYS[query.table]
    terms += [f"{_column(query.table, field)} ASC NULLS LAST" for field in breakers
              if field not in ordered_fields]
    return terms


def _expr(table: str, expr: str | Aggregate) -> str:
    if isinstance(expr, str):
        return _column(table, expr)
    if expr.field is None:
        return "count(*)"
    return f"{expr.function}({_column(table, expr.field)})"


def _condition(table: str, node: Condition) -> str:
    if isinstance(node, BoolOp):
        return "(" + f" {node.op} ".join(_condition(table, o) for o in node.operands) + ")"
    if isinstance(node, Not):
        return f"(NOT {_condition(table, node.operand)})"
    column = _column(table, node.field)
    if isinstance(node, Comparison):
        op = "<>" if node.op == "!=" else node.op
        return f"({column} {op} {_literal(node.value)})"
    if isinstance(node, InList):
        values = ", ".join(_literal(v) for v in node.values)
        return f"({column} {'NOT IN' if node.negated else 'IN'} ({values}))"
    if isinstance(node, Contains):
        function = ("list_contains" if TABLES[table][node.field] is FieldType.STRING_LIST
                    else "contains")
        test = f"{function}({column}, {_literal(node.text)})"
        return f"(NOT {test})" if node.negated else f"({test})"
    assert isinstance(node, IsNull)
    return f"({column} IS {'NOT NULL' if node.negated else 'NULL'})"


def _literal(value: Value) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"CAST('{value!r}' AS DOUBLE)"
    if isinstance(value, datetime):
        return f"TIMESTAMPTZ '{value.astimezone(UTC).isoformat()}'"
    return "'" + value.replace("'", "''") + "'"


def _column(table: str, field: str) -> str:
    return f"{_ident(table)}.{_ident(field)}"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
