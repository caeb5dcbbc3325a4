"""What SessionQL can query: the tables, each field's type, and each table's row key.

The tables are exactly the SQL attachment's views (``docs/sql.md``) with exactly their columns,
so a SessionQL answer and an SQL answer can be compared column for column;
``tests/planner/test_sessionql.py`` checks this catalog against ``DESCRIBE`` of every view.
``lineage`` is the table a ``LINEAGE ... OF "id"`` query reads.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["LINEAGE_TABLE", "ROW_KEYS", "TABLES", "FieldType", "field_named"]


class FieldType(Enum):
    """A field's kind, which decides the literals and operators it accepts."""

    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    TIME = "time"
    STRING_LIST = "list of strings"

    @property
    def described(self) -> str:
        """The type with its article, for messages: "an integer", "a time", ..."""
        return ("an " if self.value[0] in "aeiou" else "a ") + self.value

    @property
    def numeric(self) -> bool:
        return self in (FieldType.INTEGER, FieldType.NUMBER)


# Short names keep the tables below readable, one line per few columns.
S, INT, N, B, T, L = (FieldType.STRING, FieldType.INTEGER, FieldType.NUMBER, FieldType.BOOLEAN,
                      FieldType.TIME, FieldType.STRING_LIST)

# The aggregate columns the sessions, runs and turns views share, in view order.
_AGGREGATED = {
    "startTime": T, "endTime": T, "durationSeconds": N, "firstSeq": INT, "lastSeq": INT,
    "eventCount": INT, "messageCount": INT, "toolCallCount": INT, "errorCount": INT,
    "inputTokens": INT, "outputTokens": INT, "model": S,
}

LINEAGE_TABLE = "lineage"

TABLES: dict[str, dict[str, FieldType]] = {
    "sessions": {"sessionId": S, "logId": S, "tenant": S, "parentSessionId": S, "title": S,
                 "runCount": INT, "turnCount": INT, "ended": B, **_AGGREGATED},
    "runs": {"runId": S, "sessionId": S, "title": S, "turnCount": INT, "ended": B, **_AGGREGATED},
    "turns": {"turnId": S, "sessionId": S, "runId": S, "ended": B, **_AGGREGATED},
    "events": {"logId": S, "seq": INT, "eventId": S, "sessionId": S, "runId": S, "turnId": S,
               "episodeId": S, "parentSessionId": S, "parentEventId": S, "type": S, "role": S,
               "time": T, "visibility": S, "tenant": S, "model": S, "inputTokens": INT,
               "outputTokens": INT, "toolName": S, "toolCallId": S, "status": S, "textBytes": INT,
               "title": S},
    "tool_calls": {"logId": S, "seq": INT, "eventId": S, "sessionId": S, "runId": S, "turnId": S,
                   "toolCallId": S, "toolName": S, "time": T, "paramKeys": L, "resultSeq": INT,
                   "resultEventId": S, "status": S, "resultTime": T, "outputBytes": INT,
                   "durationSeconds": N},
    "chunks": {"chunkId": S, "logId": S, "sessionId": S, "runId": S, "turnId": S,
               "episodeId": S, "unit": S, "minSeq": INT, "maxSeq": INT, "tokenCount": INT,
               "eventTime": T},
    LINEAGE_TABLE: {"kind": S, "fromId": S, "toId": S, "seq": INT, "sessionId": S, "depth": INT},
}

ROW_KEYS: dict[str, tuple[str, ...]] = {
    # Unique per row within one log, so appending them to any ORDER BY makes the order total
    # and every answer (and every LIMIT) deterministic.
    "sessions": ("sessionId",),
    "runs": ("sessionId", "runId"),
    "turns": ("sessionId", "turnId"),
    "events": ("seq",),
    "tool_calls": ("seq",),
    "chunks": ("chunkId",),
    LINEAGE_TABLE: ("depth", "seq", "kind", "fromId", "toId"),
}


def field_named(table: str, name: str) -> str | None:
    """The field of ``table`` spelled ``name`` in any letter case, in its canonical spelling."""
    fields = TABLES[table]
    if name in fields:
        return name
    folded = {field.lower(): field for field in fields}
    return folded.get(name.lower())
