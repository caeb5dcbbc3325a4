"""``POST /v1/sessionql`` and ``usl sessionql``: one SessionQL query against the live indexes.

:func:`sessionql_request` checks the request, pins the generations the query reads (the
analytics index for table queries, the structured index for lineage; the structured one also
for each session's access list), fixes ``asOfSeq`` and answers with
:func:`planner.sessionql.run_sessionql`. It reads through :meth:`planner.engine.Planner.snapshot`,
so SessionQL, search and SQL share the planner's L1 readers, watermark follower, pinning and
access lists.

``asOfSeq``: by default the planner's ``indexed`` freshness over the one index the query reads
(``min(committed L1 seq, its watermark)``); an explicit ``asOfSeq`` may not be above that, so
an answer never claims a position its index does not cover.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from planner.acl import Principal
from planner.exceptions import IndexUnavailable, PlannerError, QueryError
from planner.request import log_field
from planner.sessionql import parse, run_sessionql
from planner.sessionql.nodes import LineageSource
from planner.snapshot import Freshness, choose_as_of
from streams.exceptions import USLError

if TYPE_CHECKING:
    from planner.engine import Planner

__all__ = ["REQUEST_FIELDS", "sessionql_request"]

REQUEST_FIELDS = ("query", "asOfSeq", "log", "maxRows")
_MAX_ROWS = 10000
_EXAMPLE = '{"query": "FROM sessions ORDER BY durationSeconds DESC LIMIT 10"}'


def sessionql_request(planner: Planner, body: Any, principal: Principal) -> dict[str, Any]:
    """Answer ``body`` (``query``; optional ``asOfSeq``, ``log`` (default ``default``),
    ``maxRows`` (1-10000, default 10000)) for ``principal``.

    Returns the :func:`~planner.sessionql.run_sessionql` response plus ``log``; every failure
    is a :class:`PlannerError` carrying its HTTP status (400 for a malformed query, with its
    line and column; 503 when the index the query reads has no generation yet).
    """
    text, log_id, as_of, max_rows = _fields(body)
    query = parse(text)  # a malformed query is refused before any index is touched
    kind = "structured" if isinstance(query.source, LineageSource) else "analytics"
    try:
        # The planner's snapshot, as search and SQL use it: the same L1 reader pool, watermark
        # source, pin holder and access lists, so all three agree on what is visible.
        with planner.snapshot(log_id) as snapshot:
            # Verified as search and SQL pin: a generation whose files no longer match its
            # manifest is never read; an older one that does answers, and the answer says so.
            # The structured index is pinned also for each session's access list.
            for pinned_kind in dict.fromkeys((kind, "structured")):
                snapshot.pin(pinned_kind)
            required = snapshot.pins.get(kind)
            if required is None and kind in snapshot.problems:
                raise IndexUnavailable(f"the {kind} index of log {log_id!r} is unavailable: "
                                       f"{snapshot.problems[kind]}",
                                       hint=f"The sink rebuilds it from L1; `usl rebuild {kind}` does it now.")
            if required is None:
                raise IndexUnavailable(f"no generation of the {kind} index exists yet for log "
                                       f"{log_id!r}",
                                       hint=f"Wait until `usl status` shows the {kind} index.")
            indexed = choose_as_of(Freshness("indexed"), snapshot.l1_seq, {kind: required.watermark},
                                   (kind,)).as_of_seq
            if as_of is None:
                as_of = indexed
            elif as_of > indexed:
                raise QueryError(f"asOfSeq {as_of} is past what the {kind} index covers "
                                 f"({indexed})",
                                 hint=f"Use an asOfSeq of at most {indexed}, or leave it out "
                                      "for the freshest indexed answer.")
            structured = snapshot.pins.get("structured")
            acls = snapshot.access_lists(structured)
            analytics = snapshot.pins.get("analytics")
            response = run_sessionql(
                text, as_of_seq=as_of, principal=principal, session_acls=acls,
                analytics_gen_dir=analytics.directories if analytics is not None else None,
                structured_gen_dir=structured.directories if structured is not None else None,
                max_rows=max_rows, max_result_bytes=planner.settings.sql_max_result_bytes)
            if snapshot.problems:
                response["fallbacks"] = [f"{k}: {problem}" for k, problem in sorted(snapshot.problems.items())]
    except PlannerError:
        raise
    except USLError as exc:
        # A broker or index failure: say what failed, never how (no traceback).
        raise PlannerError(f"the SessionQL query failed: {exc}",
                           hint="Check `usl status`; retry once the failing part is back.") from exc
    return {**response, "log": log_id}


def _fields(body: Any) -> tuple[str, str, int | None, int]:
    if not isinstance(body, Mapping):
        raise QueryError("the request body must be a JSON object", hint=f"Send e.g. {_EXAMPLE}.")
    unknown = sorted(str(name) for name in set(body) - set(REQUEST_FIELDS))
    if unknown:
        raise QueryError(f"unknown field(s): {', '.join(unknown)}",
                         hint=f"Known fields: {', '.join(REQUEST_FIELDS)}.")
    text, log_id = body.get("query"), body.get("log", "default")
    as_of, max_rows = body.get("asOfSeq"), body.get("maxRows", _MAX_ROWS)
    if not isinstance(text, str) or not text.strip():
        raise QueryError("field 'query' must be a non-empty SessionQL string",
                         hint=f"Send e.g. {_EXAMPLE}.")
    log_id = log_field(log_id)
    if as_of is not None and (isinstance(as_of, bool) or not isinstance(as_of, int) or as_of < 0):
        raise QueryError("field 'asOfSeq' must be a non-negative integer")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or not 1 <= max_rows <= _MAX_ROWS:
        raise QueryError(f"field 'maxRows' must be an integer from 1 to {_MAX_ROWS}")
    return text, log_id, as_of, max_rows
