"""SessionQL's parser: text → a :class:`~planner.sessionql.nodes.Query` checked against the
catalog, or a :class:`SessionQLError` that says what is wrong and where.

The grammar (``docs/sql.md`` has the reference with examples)::

    query     := source [WHERE cond] [GROUP BY field {, field}] [SELECT item {, item}]
                 [ORDER BY key {, key}] [LIMIT integer]
    source    := FROM table | LINEAGE (ANCESTORS | DESCENDANTS) OF string
    cond      := conj {OR conj}
    conj      := neg {AND neg}
    neg       := NOT neg | "(" cond ")" | pred
    pred      := field op literal | field [NOT] IN "(" literal {, literal} ")"
               | field [NOT] CONTAINS string | field IS [NOT] NULL
    op        := "=" | "!=" | "<>" | "<" | "<=" | ">" | ">="
    item      := (field | agg "(" [field | "*"] ")") [AS name]
    key       := name [ASC | DESC]

Keywords and field names are read without regard to letter case. A literal must suit its
field: a string for text fields, a number for numeric ones, ``TRUE``/``FALSE`` for flags and
an RFC 3339 time (or a ``YYYY-MM-DD`` date, midnight UTC) in quotes for time fields.
"""

from __future__ import annotations

import difflib
import json
import re
from datetime import UTC, datetime
from typing import NoReturn

from planner.sessionql.catalog import LINEAGE_TABLE, TABLES, FieldType, field_named
from planner.sessionql.exceptions import SessionQLError
from planner.sessionql.lexer import Token, tokenize
from planner.sessionql.nodes import (
    Aggregate,
    BoolOp,
    Comparison,
    Condition,
    Contains,
    InList,
    IsNull,
    LineageSource,
    Not,
    OrderKey,
    Query,
    SelectItem,
    TableSource,
    Value,
    output_items,
    resolve_order_key,
)
from streams.asp import parse_time

__all__ = ["AGGREGATES", "KEYWORDS", "MAX_QUERY_CHARS", "parse"]

MAX_QUERY_CHARS = 20_000
MAX_NESTING = 64
KEYWORDS = frozenset({
    "FROM", "WHERE", "GROUP", "BY", "SELECT", "ORDER", "LIMIT", "AND", "OR", "NOT", "IN",
    "CONTAINS", "IS", "NULL", "AS", "ASC", "DESC", "TRUE", "FALSE", "LINEAGE", "ANCESTORS",
    "DESCENDANTS", "OF",
})
AGGREGATES = ("count", "sum", "avg", "min", "max")
_CLAUSES = ("WHERE", "GROUP", "SELECT", "ORDER", "LIMIT")
_ORDER_HINT = ("Clauses go in the order FROM (or LINEAGE), WHERE, GROUP BY, SELECT, ORDER BY, "
               "LIMIT, each at most once.")
_COMPARISONS = ("=", "!=", "<>", "<", "<=", ">", ">=")
_INT64 = 2**63 - 1
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_EXAMPLES = {
    FieldType.STRING: 'a quoted string, e.g. "Bash"',
    FieldType.INTEGER: "a number, e.g. 42",
    FieldType.NUMBER: "a number, e.g. 2.5",
    FieldType.BOOLEAN: "TRUE or FALSE",
    FieldType.TIME: 'a quoted RFC 3339 time, e.g. "2026-01-31T12:00:00Z"',
}


def parse(text: str) -> Query:
    """Parse and check one SessionQL query."""
    if not isinstance(text, str) or not text.strip():
        raise SessionQLError("the SessionQL query is empty", text="", offset=0,
                             hint='Start with FROM <table>, e.g. FROM sessions LIMIT 10.')
    if len(text) > MAX_QUERY_CHARS:
        raise SessionQLError(f"the query is longer than {MAX_QUERY_CHARS} characters",
                             text=text, offset=MAX_QUERY_CHARS)
    return _Parser(text).query()


class _Parser:
    """Recursive descent over the tokens; ``table`` is known once the source is read."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.table = ""
        self.depth = 0

    # -- clauses -----------------------------------------------------------------------------

    def query(self) -> Query:
        source = self.source()
        self.table = source.table
        where: Condition | None = None
        group_by: list[str] = []
        select: list[SelectItem] = []
        order_by: list[OrderKey] = []
        limit: int | None = None
        group_offsets: list[int] = []
        select_offsets: list[int] = []
        if self.take_keyword("WHERE"):
            where = self.condition()
        if self.take_keyword("GROUP"):
            self.expect_keyword("BY")
            group_by, group_offsets = self.field_list()
        if self.take_keyword("SELECT"):
            select, select_offsets = self.select_items()
        query = Query(source, where, tuple(group_by), tuple(select))
        self.check_grouping(query, group_offsets, select_offsets)
        if self.take_keyword("ORDER"):
            self.expect_keyword("BY")
            order_by = self.order_keys(query)
        if self.take_keyword("LIMIT"):
            limit = self.limit()
        end = self.peek()
        if end.kind != "end":
            if self.is_keyword(end, *_CLAUSES, "FROM", "LINEAGE"):
                self.fail(f"{end.text.upper()} is out of place", end, hint=_ORDER_HINT)
            self.fail(f"unexpected {end.describe()}", end, hint=_ORDER_HINT)
        return Query(source, where, query.group_by, query.select, tuple(order_by), limit)

    def source(self) -> TableSource | LineageSource:
        first = self.peek()
        if self.take_keyword("FROM"):
            token = self.next()
            name = token.text.lower() if token.kind == "word" else ""
            if name == LINEAGE_TABLE:
                self.fail("the lineage table is read with LINEAGE ANCESTORS|DESCENDANTS OF \"id\"",
                          token)
            if name not in TABLES:
                tables = [t for t in TABLES if t != LINEAGE_TABLE]
                what = f"unknown table {token.describe()}" if token.kind != "end" else "a table name is missing"
                self.fail(what, token, hint=_suggest(token.text, tables, "Tables"))
            return TableSource(name)
        if self.take_keyword("LINEAGE"):
            direction = self.next()
            if not self.is_keyword(direction, "ANCESTORS", "DESCENDANTS"):
                self.fail(f"expected ANCESTORS or DESCENDANTS after LINEAGE, found "
                          f"{direction.describe()}", direction)
            self.expect_keyword("OF")
            entity = self.next()
            if entity.kind != "string" or not entity.text:
                self.fail(f"expected the quoted id of a session, run, episode or event after OF, "
                          f"found {entity.describe()}", entity,
                          hint='For example LINEAGE ANCESTORS OF "s-1234".')
            return LineageSource("ancestors" if direction.text.upper() == "ANCESTORS"
                                 else "descendants", entity.text)
        self.fail(f"a query starts with FROM <table> or LINEAGE, not {first.describe()}", first,
                  hint='For example FROM sessions LIMIT 10, or LINEAGE DESCENDANTS OF "s-1".')

    def field_list(self) -> tuple[list[str], list[int]]:
        fields: list[str] = []
        offsets: list[int] = []
        while True:
            token = self.peek()
            field = self.field()
            if field in fields:
                self.fail(f"{field} appears twice in GROUP BY", token)
            fields.append(field)
            offsets.append(token.offset)
            if not self.take_symbol(","):
                return fields, offsets

    def select_items(self) -> tuple[list[SelectItem], list[int]]:
        items: list[SelectItem] = []
        offsets: list[int] = []
        names: set[str] = set()
        while True:
            token = self.peek()
            expr: str | Aggregate
            if token.kind == "word" and self.peek(1).text == "(" and self.peek(1).kind == "symbol":
                expr = self.aggregate()
            else:
                expr = self.field()
            name, aliased = (expr if isinstance(expr, str) else expr.default_name()), False
            if self.take_keyword("AS"):
                alias = self.next()
                if alias.kind != "word" or self.is_keyword(alias):
                    self.fail(f"expected a column name after AS, found {alias.describe()}", alias,
                              hint="A name is letters, digits and _ (not a keyword), e.g. AS calls.")
                name, aliased = alias.text, True
            if name.lower() in names:
                self.fail(f"two columns are named {name}", token, hint="Rename one with AS.")
            names.add(name.lower())
            items.append(SelectItem(expr, name, aliased))
            offsets.append(token.offset)
            if not self.take_symbol(","):
                return items, offsets

    def aggregate(self) -> Aggregate:
        token = self.next()
        function = token.text.lower()
        if function not in AGGREGATES:
            self.fail(f"unknown function {token.text}()", token,
                      hint="Aggregates are count(), count(field), sum, avg, min and max.")
        self.expect_symbol("(")
        field: str | None = None
        if self.take_symbol("*"):
            if function != "count":
                self.fail(f"{function}(*) is not an aggregate; name a field", token)
        elif self.peek().text != ")" or self.peek().kind != "symbol":
            argument = self.peek()
            field = self.field()
            kind = TABLES[self.table][field]
            if function in ("sum", "avg") and not kind.numeric:
                self.fail(f"{function}() needs a numeric field; {field} is {kind.described}", argument)
            if function in ("min", "max") and kind is FieldType.STRING_LIST:
                self.fail(f"{function}() cannot compare lists; {field} is {kind.described}", argument)
        elif function != "count":
            self.fail(f"{function}() needs a field, e.g. {function}(durationSeconds)", token)
        self.expect_symbol(")")
        return Aggregate(function, field)

    def check_grouping(self, query: Query, group_offsets: list[int],
                       select_offsets: list[int]) -> None:
        if not query.aggregated:
            return
        for item, offset in zip(query.select, select_offsets, strict=True):
            if isinstance(item.expr, str) and item.expr not in query.group_by:
                raise SessionQLError(
                    f"{item.expr} is neither grouped nor aggregated", text=self.text,
                    offset=offset,
                    hint=f"Add it to GROUP BY, or aggregate it, e.g. min({item.expr}).")

    def order_keys(self, query: Query) -> list[OrderKey]:
        keys: list[OrderKey] = []
        while True:
            token = self.next()
            if token.kind != "word" or self.is_keyword(token):
                self.fail(f"expected a column name after ORDER BY, found {token.describe()}", token)
            resolved = resolve_order_key(query, token.text)
            if resolved is None:
                names = [item.name for item in output_items(query)]
                if query.aggregated:
                    self.fail(f"cannot order by {token.text}: an aggregated query orders by its "
                              "SELECT columns or GROUP BY fields", token,
                              hint=_suggest(token.text, names + list(query.group_by), "Columns")
                              + " Name an aggregate with AS to order by it.")
                self.fail(f"unknown column {token.text!r} to order by", token,
                          hint=_suggest(token.text, list(TABLES[self.table]), "Fields"))
            kind, target = resolved
            name = output_items(query)[int(target)].name if kind == "output" else str(target)
            descending = False
            if self.take_keyword("DESC"):
                descending = True
            else:
                self.take_keyword("ASC")
            keys.append(OrderKey(name, descending))
            if not self.take_symbol(","):
                return keys

    def limit(self) -> int:
        token = self.next()
        if token.kind != "number" or not token.text.isdigit():
            self.fail(f"LIMIT takes a whole number, not {token.describe()}", token)
        value = int(token.text)
        if value > _INT64:
            self.fail("LIMIT is too large", token)
        return value

    # -- conditions --------------------------------------------------------------------------

    def condition(self) -> Condition:
        operands = [self.conjunction()]
        while self.take_keyword("OR"):
            operands.append(self.conjunction())
        return _joined("OR", operands)

    def conjunction(self) -> Condition:
        operands = [self.negation()]
        while self.take_keyword("AND"):
            operands.append(self.negation())
        return _joined("AND", operands)

    def negation(self) -> Condition:
        token = self.peek()
        self.depth += 1
        if self.depth > MAX_NESTING:
            self.fail(f"the condition is nested more than {MAX_NESTING} levels deep", token)
        try:
            if self.take_keyword("NOT"):
                return Not(self.negation())
            if self.take_symbol("("):
                inner = self.condition()
                self.expect_symbol(")")
                return inner
            return self.predicate()
        finally:
            self.depth -= 1

    def predicate(self) -> Condition:
        field_token = self.peek()
        field = self.field()
        kind = TABLES[self.table][field]
        token = self.next()
        if token.kind == "symbol" and token.text in _COMPARISONS:
            op = "!=" if token.text == "<>" else token.text
            if kind is FieldType.STRING_LIST:
                self.fail(f"{field} is a list of strings: use CONTAINS or IS [NOT] NULL", token)
            if kind is FieldType.BOOLEAN and op not in ("=", "!="):
                self.fail(f"{field} is TRUE or FALSE: compare it with = or !=", token)
            return Comparison(field, op, self.literal(field, kind))
        negated = self.is_keyword(token, "NOT")
        if negated:
            token = self.next()
            if not self.is_keyword(token, "IN", "CONTAINS"):
                self.fail(f"expected IN or CONTAINS after NOT, found {token.describe()}", token)
        if self.is_keyword(token, "IN"):
            if kind is FieldType.STRING_LIST:
                self.fail(f"{field} is a list of strings: use CONTAINS", token)
            self.expect_symbol("(")
            if self.peek().kind == "symbol" and self.peek().text == ")":
                self.fail("IN needs at least one value", self.peek())
            values = [self.literal(field, kind)]
            while self.take_symbol(","):
                values.append(self.literal(field, kind))
            self.expect_symbol(")")
            return InList(field, tuple(values), negated)
        if self.is_keyword(token, "CONTAINS"):
            if kind not in (FieldType.STRING, FieldType.STRING_LIST):
                self.fail(f"CONTAINS needs a string or list field; {field} is {kind.described}", token)
            text = self.next()
            if text.kind != "string":
                self.fail(f"CONTAINS takes a quoted string, not {text.describe()}", text)
            return Contains(field, text.text, negated)
        if self.is_keyword(token, "IS"):
            is_not = self.take_keyword("NOT")
            self.expect_keyword("NULL")
            return IsNull(field, is_not)
        self.fail(f"expected an operator after {field} (=, !=, <, <=, >, >=, IN, CONTAINS or "
                  f"IS NULL), found {token.describe()}", token if token.kind != "end" else field_token)

    def literal(self, field: str, kind: FieldType) -> Value:
        token = self.next()
        wanted = _EXAMPLES.get(kind, "a value")
        if self.is_keyword(token, "NULL"):
            self.fail(f"NULL is not a value to compare with: write {field} IS NULL or "
                      f"{field} IS NOT NULL", token)
        if kind is FieldType.BOOLEAN:
            if self.is_keyword(token, "TRUE", "FALSE"):
                return token.text.upper() == "TRUE"
        elif kind.numeric:
            sign = 1
            if token.kind == "symbol" and token.text == "-":
                sign, token = -1, self.next()
            if token.kind == "number":
                return self.number(token, sign)
        elif token.kind == "string":
            return self.time(token) if kind is FieldType.TIME else token.text
        self.fail(f"{field} is {kind.described}; compare it with {wanted}, not {token.describe()}",
                  token)

    def number(self, token: Token, sign: int) -> int | float:
        if token.text.isdigit():
            value = sign * int(token.text)
            if not -_INT64 - 1 <= value <= _INT64:
                self.fail(f"the number {token.text} is out of range (64-bit integers)", token)
            return value
        number = sign * float(token.text)
        if number in (float("inf"), float("-inf")):
            self.fail(f"the number {token.text} is out of range", token)
        return number

    def time(self, token: Token) -> datetime:
        value = token.text.strip()
        try:
            if _DATE.fullmatch(value):
                return datetime.fromisoformat(value).replace(tzinfo=UTC)
            return parse_time(value)
        except ValueError:
            pass
        hint = "Write e.g. \"2026-01-31T12:00:00Z\", \"2026-01-31T14:00:00+02:00\" or \"2026-01-31\"."
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?", value):
            self.fail(f"the time {json.dumps(value)} needs a time zone: add Z (UTC) or an "
                      "offset such as +02:00", token, hint=hint)
        self.fail(f"{token.describe()} is not a time", token, hint=hint)

    # -- tokens ------------------------------------------------------------------------------

    def field(self) -> str:
        token = self.next()
        if token.kind != "word" or self.is_keyword(token):
            self.fail(f"expected a field of {self.table}, found {token.describe()}", token,
                      hint=_suggest("", list(TABLES[self.table]), "Fields"))
        field = field_named(self.table, token.text)
        if field is None:
            self.fail(f"unknown field {token.text!r} of {self.table}", token,
                      hint=_suggest(token.text, list(TABLES[self.table]), "Fields"))
        return field

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.index + ahead, len(self.tokens) - 1)]

    def next(self) -> Token:
        token = self.peek()
        if token.kind != "end":
            self.index += 1
        return token

    @staticmethod
    def is_keyword(token: Token, *words: str) -> bool:
        if token.kind != "word":
            return False
        upper = token.text.upper()
        return upper in words if words else upper in KEYWORDS

    def take_keyword(self, word: str) -> bool:
        if self.is_keyword(self.peek(), word):
            self.index += 1
            return True
        return False

    def expect_keyword(self, word: str) -> None:
        token = self.next()
        if not self.is_keyword(token, word):
            self.fail(f"expected {word}, found {token.describe()}", token)

    def take_symbol(self, symbol: str) -> bool:
        token = self.peek()
        if token.kind == "symbol" and token.text == symbol:
            self.index += 1
            return True
        return False

    def expect_symbol(self, symbol: str) -> None:
        token = self.next()
        if token.kind != "symbol" or token.text != symbol:
            self.fail(f"expected '{symbol}', found {token.describe()}", token)

    def fail(self, message: str, token: Token, hint: str | None = None) -> NoReturn:
        raise SessionQLError(message, text=self.text, offset=token.offset, hint=hint)


def _joined(op: str, operands: list[Condition]) -> Condition:
    if len(operands) == 1:
        return operands[0]
    flat: list[Condition] = []
    for operand in operands:
        # a AND (b AND c) is a AND b AND c: one spelling, one normalized text.
        flat.extend(operand.operands if isinstance(operand, BoolOp) and operand.op == op
                    else (operand,))
    return BoolOp("AND" if op == "AND" else "OR", tuple(flat))


def _suggest(word: str, names: list[str], label: str) -> str:
    close = difflib.get_close_matches(word.lower(), [n.lower() for n in names], n=1, cutoff=0.6)
    listed = f"{label}: {', '.join(names)}."
    if close:
        match = next(n for n in names if n.lower() == close[0])
        return f"Did you mean {match}? {listed}"
    return listed
