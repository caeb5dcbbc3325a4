"""The parsed form of a SessionQL query, and its normalized text.

A :class:`Query` is already resolved against the catalog: field names are in their canonical
spelling and every literal has the type of the field it is compared with (a time field's
literal is an aware UTC datetime). :func:`to_text` writes the one normalized spelling of a
query; parsing that text gives an equal :class:`Query`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal as TypingLiteral

from planner.sessionql.catalog import TABLES, field_named

__all__ = [
    "Aggregate",
    "BoolOp",
    "Comparison",
    "Condition",
    "Contains",
    "InList",
    "IsNull",
    "LineageSource",
    "Not",
    "OrderKey",
    "Query",
    "SelectItem",
    "TableSource",
    "Value",
    "output_items",
    "resolve_order_key",
    "to_text",
]

Value = str | int | float | bool | datetime


@dataclass(frozen=True)
class Comparison:
    """``field op value`` with op one of ``= != < <= > >=``."""

    field: str
    op: str
    value: Value


@dataclass(frozen=True)
class InList:
    """``field [NOT] IN (v1, v2, ...)``."""

    field: str
    values: tuple[Value, ...]
    negated: bool = False


@dataclass(frozen=True)
class Contains:
    """``field [NOT] CONTAINS "text"``: a substring of a string, an element of a list."""

    field: str
    text: str
    negated: bool = False


@dataclass(frozen=True)
class IsNull:
    """``field IS [NOT] NULL``."""

    field: str
    negated: bool = False


@dataclass(frozen=True)
class Not:
    """``NOT condition``."""

    operand: Condition


@dataclass(frozen=True)
class BoolOp:
    """Two or more conditions joined by one ``AND`` or ``OR`` (nested ones are flattened)."""

    op: TypingLiteral["AND", "OR"]
    operands: tuple[Condition, ...]


Condition = Comparison | InList | Contains | IsNull | Not | BoolOp


@dataclass(frozen=True)
class Aggregate:
    """``count()``, ``count(field)``, ``sum``, ``avg``, ``min`` or ``max`` of a field."""

    function: str
    field: str | None = None

    def default_name(self) -> str:
        return self.function if self.field is None else f"{self.function}_{self.field}"


@dataclass(frozen=True)
class SelectItem:
    """One output column: a field or an aggregate, and the column's name."""

    expr: str | Aggregate
    name: str
    aliased: bool = False


@dataclass(frozen=True)
class OrderKey:
    """``name [ASC|DESC]``: an output column's name or, for row queries, any field."""

    name: str
    descending: bool = False


@dataclass(frozen=True)
class TableSource:
    """``FROM table``."""

    table: str


@dataclass(frozen=True)
class LineageSource:
    """``LINEAGE ANCESTORS|DESCENDANTS OF "id"``: the edges reachable from one entity."""

    direction: TypingLiteral["ancestors", "descendants"]
    entity_id: str

    table = "lineage"


@dataclass(frozen=True)
class Query:
    """A whole SessionQL query, clause by clause (``select`` empty: the default columns)."""

    source: TableSource | LineageSource
    where: Condition | None = None
    group_by: tuple[str, ...] = ()
    select: tuple[SelectItem, ...] = ()
    order_by: tuple[OrderKey, ...] = ()
    limit: int | None = None

    @property
    def table(self) -> str:
        return self.source.table

    @property
    def aggregated(self) -> bool:
        """Whether the answer has one row per group (or one row) rather than one per row."""
        return bool(self.group_by) or any(isinstance(i.expr, Aggregate) for i in self.select)


# -- normalized text -------------------------------------------------------------------------


def to_text(query: Query) -> str:
    """The normalized spelling: upper-case keywords, canonical field names, JSON strings, one
    space between tokens, and only the parentheses precedence needs."""
    source = query.source
    if isinstance(source, TableSource):
        parts = [f"FROM {source.table}"]
    else:
        parts = [f"LINEAGE {source.direction.upper()} OF {_string(source.entity_id)}"]
    if query.where is not None:
        parts.append("WHERE " + _condition(query.where))
    if query.group_by:
        parts.append("GROUP BY " + ", ".join(query.group_by))
    if query.select:
        parts.append("SELECT " + ", ".join(_item(item) for item in query.select))
    if query.order_by:
        parts.append("ORDER BY " + ", ".join(
            f"{key.name} {'DESC' if key.descending else 'ASC'}" for key in query.order_by))
    if query.limit is not None:
        parts.append(f"LIMIT {query.limit}")
    return " ".join(parts)


def _item(item: SelectItem) -> str:
    expr = item.expr
    text = expr if isinstance(expr, str) else f"{expr.function}({expr.field or ''})"
    return f"{text} AS {item.name}" if item.aliased else text


def _condition(node: Condition) -> str:
    if isinstance(node, BoolOp):
        # AND binds tighter than OR: only an OR inside an AND needs parentheses.
        return f" {node.op} ".join(
            f"({_condition(o)})" if isinstance(o, BoolOp) and o.op == "OR" and node.op == "AND"
            else _condition(o) for o in node.operands)
    if isinstance(node, Not):
        inner = _condition(node.operand)
        return f"NOT ({inner})" if isinstance(node.operand, BoolOp) else f"NOT {inner}"
    if isinstance(node, Comparison):
        return f"{node.field} {node.op} {_value(node.value)}"
    if isinstance(node, InList):
        values = ", ".join(_value(v) for v in node.values)
        return f"{node.field} {'NOT IN' if node.negated else 'IN'} ({values})"
    if isinstance(node, Contains):
        return f"{node.field} {'NOT CONTAINS' if node.negated else 'CONTAINS'} {_string(node.text)}"
    return f"{node.field} IS {'NOT NULL' if node.negated else 'NULL'}"


def _value(value: Value) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, datetime):
        return _string(value.astimezone(UTC).isoformat().replace("+00:00", "Z"))
    if isinstance(value, str):
        return _string(value)
    return repr(value)


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def output_items(query: Query) -> tuple[SelectItem, ...]:
    """The columns a query answers with: its SELECT, or by default every field (row queries)
    or the GROUP BY fields and ``count()`` (grouped queries)."""
    if query.select:
        return query.select
    if query.group_by:
        return (*(SelectItem(field, field) for field in query.group_by),
                SelectItem(Aggregate("count"), "count"))
    return tuple(SelectItem(field, field) for field in TABLES[query.table])


def resolve_order_key(query: Query, name: str) -> tuple[str, int | str] | None:
    """What ``ORDER BY name`` orders by: ``("output", index)`` for an output column (names
    win, compared without letter case), else ``("field", field)`` for a field a row query has
    or a GROUP BY field; None when it names neither."""
    for index, item in enumerate(output_items(query)):
        if item.name.lower() == name.lower():
            return ("output", index)
    field = field_named(query.table, name)
    if field is not None and (not query.aggregated or field in query.group_by):
        return ("field", field)
    return None
