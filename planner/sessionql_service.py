"""``POST /v1/sessionql`` and ``usl sessionql``: one SessionQL query against the live indexes.

:func:`sessionql_request` checks the request, pins the generations the query reads (the
analytics index for table queries, the structured index for lineage; the structured one also
for each session's access list), fixes ``asOfSeq`` and answers with
:func:`planner.sessionql.run_sessionql`. It drives a :class:`planner.engine.Planner` so both
front ends share its L1 readers, watermark follower, pinning and access lists, exactly as
:meth:`Planner.sql` does for the SQL attachment.

``asOfSeq``: by default the planner's ``indexed`` freshness over the one index the query reads
(``min(committed L1 seq, its watermark)``); an explicit ``asOfSeq`` may not be above that, so
an answer never claims a position its index does not cover.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from planner.acl import Principal
from planner.exceptions import IndexUnavailable, NotFound, PlannerError, QueryError
from planner.readers import IndexPin, pin_for_query
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
    from planner.engine import QUERY_PIN_SECONDS

    text, log_id, as_of, max_rows = _fields(body)
    query = parse(text)  # a malformed query is refused before any index is touched
    kind = "structured" if isinstance(query.source, LineageSource) else "analytics"
    pins: list[IndexPin] = []
    try:
        # Planner internals on purpose: the same L1 reader pool, watermark source, pin holder
        # and access-list overlay as search and SQL, so all three agree on what is visible.
        with planner._l1() as l1:
            l1_now = l1.committed_seq(log_id)
            watermarks = planner._watermarks(log_id)
            # As search does: an unknown log is a 404, not an index to wait for (503).
            if l1_now == 0 and not watermarks and l1.registry.partition_of(log_id) is None:
                raise NotFound(f"no log named {log_id!r}",
                               hint="Ingest events into it first, or pick another log.")
            for pinned_kind in dict.fromkeys((kind, "structured")):
                pin = pin_for_query(planner.root, log_id, pinned_kind, watermarks.get(pinned_kind),
                                    ttl_seconds=QUERY_PIN_SECONDS, holder=planner._holder)
                if pin is not None:
                    pins.append(pin)
            by_kind = {pin.kind: pin for pin in pins}
            required = by_kind.get(kind)
            if required is None:
                raise IndexUnavailable(f"no generation of the {kind} index exists yet for log "
                                       f"{log_id!r}",
                                       hint=f"Wait until `usl status` shows the {kind} index.")
            indexed = choose_as_of(Freshness("indexed"), l1_now, {kind: required.watermark},
                                   (kind,)).as_of_seq
            if as_of is None:
                as_of = indexed
            elif as_of > indexed:
                raise QueryError(f"asOfSeq {as_of} is past what the {kind} index covers "
                                 f"({indexed})",
                                 hint=f"Use an asOfSeq of at most {indexed}, or leave it out "
                                      "for the freshest indexed answer.")
            structured = by_kind.get("structured")
            acls = planner._latest_acls(l1, log_id, structured, l1_now)
            analytics = by_kind.get("analytics")
            response = run_sessionql(
                text, as_of_seq=as_of, principal=principal, session_acls=acls,
                analytics_gen_dir=analytics.directory if analytics is not None else None,
                structured_gen_dir=structured.directory if structured is not None else None,
                max_rows=max_rows, max_result_bytes=planner.settings.sql_max_result_bytes)
    except PlannerError:
        raise
    except USLError as exc:
        # A broker or index failure: say what failed, never how (no traceback).
        raise PlannerError(f"the SessionQL query failed: {exc}",
                           hint="Check `usl status`; retry once the failing part is back.") from exc
    finally:
        for pin in pins:
            pin.release()
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
    if not isinstance(log_id, str) or not log_id:
        raise QueryError("field 'log' must be a log name")
    if as_of is not None and (isinstance(as_of, bool) or not isinstance(as_of, int) or as_of < 0):
        raise QueryError("field 'asOfSeq' must be a non-negative integer")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or not 1 <= max_rows <= _MAX_ROWS:
        raise QueryError(f"field 'maxRows' must be an integer from 1 to {_MAX_ROWS}")
    return text, log_id, as_of, max_rows
