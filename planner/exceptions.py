"""Errors the query planner raises, each carrying the HTTP status and machine code it maps to.

The HTTP API, the CLI and the tests all turn a :class:`PlannerError` into the one JSON error
shape of the API with :func:`error_body`, so a user always reads what went wrong and what to
do, never a traceback::

    streams.exceptions.USLError
    └── PlannerError       500 internal           base; also the shape of unexpected errors
        ├── QueryError     400 bad_query          malformed request (freshness, principal, ...)
        ├── CursorError    400 bad_cursor         not a cursor this deployment signed, unchanged
        ├── CursorExpired  410 cursor_expired     a genuine cursor whose TTL has passed
        ├── CursorMismatch 409 cursor_mismatch    cursor of another query, principal or log
        ├── Unauthorized   401 unauthorized       no API key, or not one of this deployment's
        ├── AccessDenied   403 forbidden          the principal lacks a scope the request needs
        ├── NotFound       404 not_found          no such route or log (never says what exists)
        ├── IndexUnavailable 503 index_unavailable  a required index has no generation yet
        │   └── IndexMismatch 503 index_mismatch  the indexes a search joins hold different chunks
        └── BrokerUnavailable 503 broker_unavailable  the Kafka cluster does not answer

``QueryError`` is the project's one error of that name: every malformed request or query (search,
SQL, SessionQL through :class:`planner.sessionql.exceptions.SessionQLError`) raises it. An index
reader asked to search for nothing raises :class:`sinks.exceptions.EmptyQueryError` instead; the
planner never lets an empty query reach one.

``CursorExpired`` is 410 Gone rather than 400: the request was well formed and the cursor was
genuine, but the resource it pointed at (a pinned snapshot page) no longer exists, and the
remedy differs from a bad cursor: re-run the query without a cursor.

``IndexMismatch`` is an ``IndexUnavailable``: the indexes exist but cannot be read together
(built under different redaction policies or chunkers, :mod:`planner.coherence`), and like a
missing index it clears once an operator rebuilds, which its hint names.
"""

from __future__ import annotations

from typing import Any

from streams.exceptions import USLError

__all__ = [
    "AccessDenied",
    "CursorError",
    "CursorExpired",
    "CursorMismatch",
    "IndexMismatch",
    "IndexUnavailable",
    "NotFound",
    "PlannerError",
    "QueryError",
    "Unauthorized",
    "error_body",
]


class PlannerError(USLError):
    """Root of planner errors: ``status`` is the HTTP status, ``code`` the stable machine code.

    ``hint`` (optional) tells the user what to do next; it is part of the JSON error body.
    """

    status: int = 500
    code: str = "internal"
    #: Response headers every answer of this error carries (read-only: shared by the class).
    headers: dict[str, str] | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class QueryError(PlannerError):
    status, code = 400, "bad_query"


class CursorError(PlannerError):
    status, code = 400, "bad_cursor"


class CursorExpired(PlannerError):
    status, code = 410, "cursor_expired"


class CursorMismatch(PlannerError):
    status, code = 409, "cursor_mismatch"


class Unauthorized(PlannerError):
    status, code = 401, "unauthorized"
    headers = {"WWW-Authenticate": 'Bearer realm="usl"'}


class AccessDenied(PlannerError):
    status, code = 403, "forbidden"


class NotFound(PlannerError):
    status, code = 404, "not_found"


class IndexUnavailable(PlannerError):
    status, code = 503, "index_unavailable"


class IndexMismatch(IndexUnavailable):
    status, code = 503, "index_mismatch"


class BrokerUnavailable(PlannerError):
    """The Kafka cluster the answer needs (L1, watermarks) does not answer. Before, this was a
    500 ``internal`` that sent the caller to the server's log for a broker that was simply down."""

    status, code = 503, "broker_unavailable"


def error_body(exc: PlannerError) -> dict[str, Any]:
    """The one JSON error shape of the API.

    ``{"error": {"code": str, "message": str, "status": int, "hint": str}}``; ``hint`` only
    when there is one.
    """
    error: dict[str, Any] = {"code": exc.code, "message": exc.message, "status": exc.status}
    if exc.hint:
        error["hint"] = exc.hint
    return {"error": error}
