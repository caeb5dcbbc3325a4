"""``usl export`` and ``GET /v1/export``: what a caller may read, at one asOfSeq, as a file.

Three things can be exported, each under the caller's access lists (the ones search applies:
each session's latest, so a revocation applies at once) and redacted as the indexes are:

``sessions``
    The canonical events of every session the caller may read, with seq <= asOfSeq, in log
    order, each redacted by the stream's policy (:func:`streams.redaction.redact_event`: no
    payload, secrets replaced, full tool output reduced to its summary) and hidden events left
    out (``sessionId`` narrows it to one session: the search page's session view). One ASP v1
    event per line: ``usl ingest FILE --format asp`` imports it into another
    deployment, which then finds what this one finds (``tests/planner/test_export.py``).
    Every event carries its session's access list as this export applied it (the latest one,
    also where the event that set it is hidden or a later hidden event revoked a reader), so
    the import rebuilds each session with exactly that list whichever of its lines it keeps.
    As the redaction agent does, the first seq of an ``eventId`` wins, and an event whose
    tenant is not its session's owner is left out. ``asOfSeq`` defaults to the committed L1 seq.
``turns``
    The SessionQL ``turns`` table (one row per turn: times, counts, tokens, model), at the
    analytics index's ``asOfSeq`` (or an earlier one).
``hits``
    Every result of a search (``query``, ``freshness``, ``mode``), page after page at the first
    page's ``asOfSeq``, up to ``limit`` hits (default 10 000). When the results stop at the rank
    depth while a source had more (the search's ``end``), the export says so: ``end`` of
    :class:`Export`, the ``X-USL-Results-End`` header, ``usl.end`` in Parquet metadata.

Formats: ``jsonl`` (one JSON object per line) or ``parquet`` (one column per top-level field;
objects and lists are JSON text; the ``usl.asOfSeq`` and ``usl.export`` keys of the file's
metadata say what it holds). The HTTP answer carries the position in ``X-USL-As-Of-Seq``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.acl import Principal, can_read
from planner.client import AS_OF_HEADER, END_HEADER
from planner.exceptions import PlannerError, QueryError
from planner.request import MODES, log_param, query_params
from planner.snapshot import parse_freshness
from streams.exceptions import USLError

if TYPE_CHECKING:
    from planner.engine import Planner

__all__ = ["FORMATS", "KINDS", "Export", "export", "parquet_bytes", "write_jsonl"]

KINDS = ("sessions", "turns", "hits")
FORMATS = ("jsonl", "parquet")
# The query parameters of GET /v1/export (its OpenAPI entry lists the same).
PARAMS = ("what", "format", "log", "asOfSeq", "sessionId", "query", "freshness", "mode", "limit")
_DEFAULT_HIT_LIMIT = 10000
_TURN_PAGE = 5000
_HIT_PAGE = 100


@dataclass
class Export:
    """The rows of one export and the log position they reflect."""

    kind: str
    log: str
    as_of_seq: int
    rows: Iterator[dict[str, Any]]
    # Of hits: the search's `end` when its results stopped at the rank depth with more matches.
    end: dict[str, Any] | None = None


def export(planner: Planner, principal: Principal, params: Mapping[str, Any]) -> Export:
    """Check ``params`` (``what``, ``log``, ``asOfSeq``, ``sessionId``, ``query``, ``freshness``,
    ``mode``, ``limit``) and return the export; rows are produced as they are iterated."""
    # Absent is the default; given empty (`what=`) is a value, and not one of KINDS.
    kind = str(params.get("what", "sessions"))
    if kind not in KINDS:
        raise QueryError(f"cannot export {kind!r}", hint=f"Export one of: {', '.join(KINDS)}.")
    # Given empty is a value here too (as GET /v1/status takes it): not the default log.
    log_id = "default" if params.get("log") is None else (log_param(str(params["log"])) or "default")
    as_of = _optional_int(params, "asOfSeq", minimum=0)
    # The search parameters are checked whatever is exported: a malformed one is a mistake
    # the caller should hear of, even where it would not change the rows.
    limit = _optional_int(params, "limit", minimum=1) or _DEFAULT_HIT_LIMIT
    mode = params.get("mode")
    if mode is not None and mode not in MODES:
        raise QueryError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    freshness = str(params.get("freshness") or "indexed")
    parse_freshness(freshness)
    query = params.get("query")
    if kind == "hits" and not query:
        raise QueryError("exporting hits needs a query", hint='Add query, e.g. query=retry budget.')
    if kind != "hits" and query:
        raise QueryError(f"a query applies to exporting hits, not {kind}",
                         hint="Leave the query out, or export hits.")
    only = params.get("sessionId")
    if kind != "sessions" and only is not None:
        raise QueryError(f"sessionId applies to exporting sessions, not {kind}",
                         hint="Leave sessionId out, or export sessions.")
    if kind == "hits":
        return _hits(planner, principal, log_id, str(query), freshness, str(mode or "hybrid"), limit, as_of)
    if kind == "turns":
        return _turns(planner, principal, log_id, as_of)
    if only is not None and not str(only):
        # ?sessionId= from an unset variable: exporting every session instead would be the
        # opposite of what was asked.
        raise QueryError("sessionId is empty", hint="Name one session, or leave sessionId out "
                         "to export every session you may read.")
    return _sessions(planner, principal, log_id, as_of, None if only is None else str(only))


def _optional_int(params: Mapping[str, Any], name: str, *, minimum: int) -> int | None:
    value = params.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise QueryError(f"{name} must be an integer, not {value!r}") from None
    if number < minimum:
        raise QueryError(f"{name} must be at least {minimum}")
    return number


def _hits(planner: Planner, principal: Principal, log_id: str, query: str, freshness: str, mode: str,
          limit: int, as_of: int | None) -> Export:
    request: dict[str, Any] = {"query": query, "log": log_id, "freshness": freshness, "mode": mode,
                               "k": min(_HIT_PAGE, limit)}
    first = planner.search(request, principal)
    if as_of is not None and as_of != first["asOfSeq"]:
        raise QueryError(f"hits are exported at the search's asOfSeq ({first['asOfSeq']}), not {as_of}",
                         hint="Leave asOfSeq out; the export says which position it reflects.")

    # Read whole before answering (the rank depth bounds them): where the results stopped at
    # it is known only on the last page, and an export that ended there without a word read as
    # every hit of the search.
    rows: list[dict[str, Any]] = []
    page, end = first, None
    while True:
        rows += ({"rank": len(rows) + 1, "asOfSeq": first["asOfSeq"], **hit}
                 for hit in page["results"][:limit - len(rows)])
        if len(rows) >= limit:
            break
        if page.get("end"):
            end = page["end"]
        if not page.get("cursor") or not page["results"]:
            break
        page = planner.search({**request, "cursor": page["cursor"]}, principal)
    return Export("hits", log_id, int(first["asOfSeq"]), iter(rows), end)


def _turns(planner: Planner, principal: Principal, log_id: str, as_of: int | None) -> Export:
    from planner.sessionql_service import sessionql_request

    def page(after: dict[str, Any] | None, at: int | None) -> dict[str, Any]:
        where = ""
        if after is not None:
            session, turn = json.dumps(after["sessionId"]), json.dumps(after["turnId"])
            where = f" WHERE sessionId > {session} OR (sessionId = {session} AND turnId > {turn})"
        body: dict[str, Any] = {"query": f"FROM turns{where} ORDER BY sessionId, turnId LIMIT {_TURN_PAGE}",
                                "log": log_id}
        if at is not None:
            body["asOfSeq"] = at
        return sessionql_request(planner, body, principal)

    first = page(None, as_of)
    position = int(first["asOfSeq"])

    def rows() -> Iterator[dict[str, Any]]:
        answer = first
        while True:
            records = [dict(zip(answer["columns"], row, strict=True)) for row in answer["rows"]]
            yield from records
            if len(records) < _TURN_PAGE:
                return
            answer = page(records[-1], position)

    return Export("turns", log_id, position, rows())


def _sessions(planner: Planner, principal: Principal, log_id: str, as_of: int | None,
              only: str | None = None) -> Export:
    from streams.asp import validate_event
    from streams.redaction import redact_event
    from streams.stages.records import keep_remembered, recall_of

    # The planner's snapshot, as search and SessionQL use it: the same L1 readers, watermarks,
    # pins and access lists, so an export shows exactly what search would.
    with planner.snapshot(log_id) as snapshot:
        l1_now = snapshot.l1_seq
        if as_of is not None and as_of > l1_now:
            raise QueryError(f"asOfSeq {as_of} is past the log's committed seq ({l1_now})",
                             hint=f"Use an asOfSeq of at most {l1_now}, or leave it out.")
        position = l1_now if as_of is None else as_of
        # Verified, as search pins it: access lists never come from a damaged generation.
        acls = snapshot.access_lists(snapshot.pin("structured"))
    readable = {session for session, acl in acls.items()
                if can_read(principal, acl) and (only is None or session == only)}

    def rows() -> Iterator[dict[str, Any]]:
        seen: set[str] = set()
        # Each session's memory of the secrets it removed (streams.redaction.memory): the export
        # reads the log from its start, so it is built as the stage built it.
        memories: dict[str, list[list[Any]]] = {}
        try:
            with planner.l1_reader() as reader:
                for seq, raw in reader.read(log_id, 1, position):
                    if raw.get("sessionId") not in readable:
                        # Left out unread: validating every event of the log was a fifth of
                        # exporting one session. Its eventId still counts as seen (L1 holds
                        # only events validated when appended), so a later copy in a session
                        # read here stays out, as the indexes leave it out.
                        if isinstance(raw.get("eventId"), str):
                            seen.add(raw["eventId"])
                        continue
                    try:
                        event = validate_event(raw)
                    except USLError:
                        continue  # dead-lettered by the stream: never in an index
                    if event["eventId"] in seen:
                        continue
                    seen.add(event["eventId"])
                    session = event["sessionId"]
                    owner = acls.get(session, {}).get("tenant")
                    if session not in readable or (
                            isinstance(event.get("acl"), dict) and event["acl"].get("tenant") != owner):
                        continue
                    recall = recall_of(log_id, event, seq, memories)
                    try:
                        redacted = redact_event(event, recall=recall).event
                    except USLError:
                        continue  # dead-lettered by the stream
                    keep_remembered(memories, recall, seq)
                    if event.get("visibility") == "hidden":
                        continue  # left out, after its secrets were remembered as the stage does
                    # Every line states the session's access list, the one this export applied:
                    # a line's own acl may be an older one, and the event that set the list may
                    # be hidden (left out), so a re-import would otherwise rebuild the session
                    # with another list, or the default one readable by its whole tenant.
                    yield {**redacted, "acl": dict(acls[session])}
        except USLError as exc:
            raise PlannerError(f"the export failed while reading the log: {exc}",
                               hint="Check `usl status`; retry once the broker answers.") from exc

    return Export("sessions", log_id, position, rows())


def write_jsonl(rows: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    """One JSON object per line, UTF-8."""
    for row in rows:
        yield json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def parquet_bytes(result: Export) -> bytes:
    """The rows as one Parquet file: a column per top-level field (objects and lists as JSON
    text, a column of mixed scalar types as text), the position in the file's metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(result.rows)
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    columns: dict[str, list[Any]] = {}
    for name in names:
        values = [row.get(name) for row in rows]
        kinds = {type(v) for v in values if v is not None}
        if kinds & {dict, list, tuple}:
            values = [None if v is None else json.dumps(v, ensure_ascii=False, sort_keys=True) for v in values]
        elif len(kinds) > 1 and not kinds <= {int, float}:
            values = [None if v is None else str(v) for v in values]
        columns[name] = values
    table = pa.table(columns) if columns else pa.table({})
    metadata = {"usl.asOfSeq": str(result.as_of_seq), "usl.export": result.kind, "usl.log": result.log}
    if result.end is not None:
        metadata["usl.end"] = json.dumps(result.end, sort_keys=True)
    table = table.replace_schema_metadata(metadata)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def endpoint(principal_of: Any, the_planner: Any) -> Any:
    """The ``GET /v1/export`` handler of :func:`planner.api.create_app`."""
    from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
    from starlette.responses import Response, StreamingResponse

    async def handle(request: Any) -> Any:
        principal = principal_of(request)
        params = query_params(request.query_params.multi_items(), PARAMS)
        fmt = params.pop("format", "jsonl")
        limit = params.get("limit")
        if limit is not None and not (limit.isascii() and limit.isdigit() and len(limit) <= 9):
            raise QueryError(f"limit must be a whole number of rows, not {limit[:32]!r}")
        if fmt not in FORMATS:
            raise QueryError(f"unknown export format {fmt!r}", hint="Use format=jsonl or format=parquet.")
        result = await run_in_threadpool(export, the_planner(), principal, params)
        headers = {AS_OF_HEADER: str(result.as_of_seq)}
        if result.end is not None:
            headers[END_HEADER] = json.dumps(result.end, sort_keys=True, separators=(",", ":"))
        if fmt == "parquet":
            body = await run_in_threadpool(parquet_bytes, result)
            return Response(body, media_type="application/vnd.apache.parquet", headers=headers)
        # The first rows are produced before answering, so a failure still gets the error shape.
        lines = write_jsonl(result.rows)
        first = await run_in_threadpool(next, lines, b"")

        async def stream() -> Any:
            if first:
                yield first
            async for line in iterate_in_threadpool(lines):
                yield line

        return StreamingResponse(stream(), media_type="application/x-ndjson", headers=headers)

    return handle
