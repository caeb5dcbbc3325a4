"""Errors of SessionQL: a malformed query names the line and column where it goes wrong.

::

    planner.exceptions.QueryError          400 bad_query
    └── SessionQLError                     a query that does not parse or does not type-check

The message already carries the position (``at line 1, column 17``), so the API's one JSON
error shape needs nothing extra; ``line``, ``column`` and ``offset`` are there for tools.
"""

from __future__ import annotations

from planner.exceptions import QueryError

__all__ = ["SessionQLError"]


class SessionQLError(QueryError):
    """A SessionQL query that cannot run as written; ``offset`` counts characters from 0."""

    def __init__(self, message: str, *, text: str, offset: int, hint: str | None = None) -> None:
        offset = max(0, min(offset, len(text)))
        before = text[:offset]
        self.line = before.count("\n") + 1
        self.column = offset - (before.rfind("\n") + 1) + 1
        self.offset = offset
        super().__init__(f"{message} at line {self.line}, column {self.column}",
                         hint=hint or "See the SessionQL reference in docs/sql.md.")
