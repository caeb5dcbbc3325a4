"""SessionQL: the small structured query language over the ASP projection (sessions, runs,
turns, events, tool calls, chunks) and its lineage, answered at one asOfSeq under the ACL.

::

    FROM tool_calls WHERE status = "error" GROUP BY toolName
    SELECT toolName, count() AS errors ORDER BY errors DESC LIMIT 10

    LINEAGE DESCENDANTS OF "s-root" WHERE kind = "session-parent"

Modules: :mod:`~planner.sessionql.lexer` and :mod:`~planner.sessionql.parser` (text → a
checked :class:`~planner.sessionql.nodes.Query`), :mod:`~planner.sessionql.catalog` (tables
and field types: exactly the SQL attachment's views), :mod:`~planner.sessionql.compile`
(query → DuckDB SQL over those views), :mod:`~planner.sessionql.lineage` (lineage edges under
the ACL) and :mod:`~planner.sessionql.run` (:func:`run_sessionql`). The language reference is
the "SessionQL" section of ``docs/sql.md``.
"""

from __future__ import annotations

from planner.sessionql.catalog import TABLES
from planner.sessionql.compile import compile_query
from planner.sessionql.exceptions import SessionQLError
from planner.sessionql.nodes import Query, to_text
from planner.sessionql.parser import parse
from planner.sessionql.run import run_sessionql

__all__ = ["TABLES", "Query", "SessionQLError", "compile_query", "parse", "run_sessionql", "to_text"]
