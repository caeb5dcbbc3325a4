"""The search request: one validated, normalized form shared by the HTTP API, the CLI and tests.

:func:`parse_request` turns the JSON body of ``POST /v1/search`` (or the CLI's options) into a
:class:`SearchRequest`, or raises :class:`~planner.exceptions.QueryError` naming the field
and what to send instead. Nothing downstream re-checks types.

Body fields (all but ``query`` optional)::

    {"query": "retry budget", "log": "default", "freshness": "indexed|latest|wait:S",
     "k": 10, "explain": false, "cursor": null, "mode": "hybrid|text|vector",
     "filters": {"sessionId", "runId", "turnId", "toolName", "status", "role",
                 "timeFrom", "timeTo"},
     "toolResults": false}

A filter value is a string or a list of strings (any of them matches); ``timeFrom`` and
``timeTo`` are RFC 3339 times bounding the hit's event time (inclusive).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.cursors import query_hash
from planner.exceptions import QueryError
from planner.quotes import phrase_quotes
from planner.snapshot import Freshness, parse_freshness
from streams.asp import ROLES, json_kind, parse_time, posix_seconds
from streams.names import LOG_ID, LOG_ID_HINT

__all__ = [
    "FILTER_FIELDS",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "MODES",
    "Filters",
    "SearchRequest",
    "log_param",
    "parse_request",
    "query_params",
]

MODES = ("hybrid", "text", "vector")
MAX_K = 100
MAX_QUERY_CHARS = 2000
# Filter name in the request -> structured-reader keyword.
FILTER_FIELDS = {
    "sessionId": "session_ids",
    "runId": "run_ids",
    "turnId": "turn_ids",
    "toolName": "tool_names",
    "status": "statuses",
    "role": "roles",
}
_TIME_FIELDS = ("timeFrom", "timeTo")
_FIELDS = frozenset({"query", "log", "freshness", "k", "explain", "cursor", "mode", "filters",
                     "toolResults", "json"})
_LOG_NAME_HINT = f"Log names are {LOG_ID_HINT}."
_MAX_FILTER_VALUES = 1000


@dataclass(frozen=True)
class Filters:
    """Structured filters: every given field must match (values of one field are OR-ed)."""

    values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    time_from: float | None = None
    time_to: float | None = None
    time_text: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.values) or self.time_from is not None or self.time_to is not None

    def reader_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``StructuredReader.filter_chunk_ids`` for these filters."""
        kwargs: dict[str, Any] = {FILTER_FIELDS[name]: list(values)
                                  for name, values in self.values.items()}
        if self.time_from is not None:
            kwargs["time_from"] = self.time_from
        if self.time_to is not None:
            kwargs["time_to"] = self.time_to
        return kwargs

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {name: list(values) for name, values in sorted(self.values.items())}
        body.update(sorted(self.time_text.items()))
        return body

    def admits_chunk(self, chunk: Mapping[str, Any]) -> bool:
        """In-process check of a trimmed or tail chunk (the indexes apply the same rules)."""
        if not self:
            return True
        fields = chunk.get("fields") or {}
        plain = {"sessionId": chunk.get("sessionId"), "runId": chunk.get("runId"),
                 "turnId": chunk.get("turnId")}
        listed = {"toolName": fields.get("toolNames"), "status": fields.get("statuses"),
                  "role": fields.get("roles")}
        for name, values in self.values.items():
            if name in plain:
                if plain[name] not in values:
                    return False
            elif not set(listed.get(name) or ()) & set(values):
                return False
        start = posix_seconds(chunk.get("startTime") or chunk.get("eventTime"))
        end = posix_seconds(chunk.get("eventTime") if chunk.get("trimmed")
                            else chunk.get("endTime") or chunk.get("eventTime"))
        if self.time_from is not None and end < self.time_from:
            return False
        return not (self.time_to is not None and start > self.time_to)

    def admits_tool_result(self, record: Mapping[str, Any]) -> bool:
        """Check of a full tool result (it has no run or turn id in the index)."""
        if not self:
            return True
        own = {"sessionId": record.get("sessionId"), "toolName": record.get("toolName"),
               "status": record.get("status"), "role": "tool"}
        for name, values in self.values.items():
            if own.get(name) not in values:
                return False
        when = posix_seconds(record.get("time"))
        if self.time_from is not None and when < self.time_from:
            return False
        return not (self.time_to is not None and when > self.time_to)


@dataclass(frozen=True)
class SearchRequest:
    """A validated search request."""

    query: str
    log: str = "default"
    freshness: Freshness = field(default_factory=lambda: Freshness("indexed"))
    k: int = 10
    explain: bool = False
    cursor: str | None = None
    mode: str = "hybrid"
    filters: Filters = field(default_factory=Filters)
    tool_results: bool = False

    @property
    def required_kinds(self) -> tuple[str, ...]:
        """Index kinds this query reads. ``structured`` always (evidence, access lists) and
        ``text`` always: the text index stores each chunk's text, which a vector-only query
        needs too for its snippets and evidence offsets."""
        kinds = {"structured", "text"}
        if self.mode in ("hybrid", "vector"):
            kinds.add("vector")
        if self.tool_results:
            kinds.add("toolresults")
        return tuple(sorted(kinds))

    def defining(self) -> dict[str, Any]:
        """The query-defining fields in normalized form (what a cursor's query hash covers)."""
        return {
            "query": self.query,
            "log": self.log,
            "freshness": str(self.freshness),
            "mode": self.mode,
            "filters": self.filters.to_json() or None,
            "toolResults": self.tool_results or None,
        }

    def query_hash(self) -> str:
        return query_hash(self.defining())


def _searchable(char: str) -> bool:
    """A letter, a digit, or a symbol such as an emoji (vector search finds those)."""
    category = unicodedata.category(char)
    return category[0] in "LN" or category == "So"


def parse_request(body: Any) -> SearchRequest:
    """Validate a request body; a :class:`QueryError` names the first bad field."""
    if not isinstance(body, Mapping):
        raise QueryError("the request body must be a JSON object",
                         hint='Send e.g. {"query": "retry budget", "k": 10}.')
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise QueryError(f"unknown field(s): {', '.join(map(str, unknown))}",
                         hint="Known fields: " + ", ".join(sorted(_FIELDS - {"json"})) + ".")
    query = body.get("query")
    if not isinstance(query, str):
        raise QueryError("field 'query' is required and must be a string",
                         hint='Send e.g. {"query": "retry budget"}.')
    query = phrase_quotes(query).strip()
    if not query:
        raise QueryError("the query is empty", hint="Give at least one word to search for.")
    if not any(_searchable(char) for char in query):
        # Text mode found nothing for '***' while vector and hybrid ranked every chunk against
        # the embedding of punctuation and answered ten arbitrary hits as if they matched.
        raise QueryError(f"the query {query[:40]!r} has nothing to search for: no letter, digit or symbol",
                         hint="Give at least one word to search for; punctuation and quotes alone match nothing.")
    if len(query) > MAX_QUERY_CHARS:
        # Said with its length and what to do: a pasted stack trace or tool output is the usual one.
        raise QueryError(f"the query is {len(query)} characters long; at most {MAX_QUERY_CHARS} are searched",
                         hint="Search its most telling line or a few of its words; quote a phrase to find it exactly.")
    log = log_field(body.get("log", "default"))
    freshness = parse_freshness(_optional(body, "freshness", str, "indexed"))
    k = _optional(body, "k", int, 10)
    if not 1 <= k <= MAX_K:
        raise QueryError(f"field 'k' must be between 1 and {MAX_K}, not {k}")
    explain = _optional(body, "explain", bool, False)
    cursor = _optional(body, "cursor", str, None)
    if cursor is not None and not cursor:
        cursor = None
    mode = _optional(body, "mode", str, "hybrid").strip().lower()
    if mode not in MODES:
        raise QueryError(f"unknown mode {mode!r}", hint="Use hybrid, text or vector.")
    if mode == "text":
        from planner.local import clauses_of

        clauses = clauses_of(query)
        if not clauses.terms and not clauses.phrases:
            # '🚀' in text mode answered no results, as if nothing held it; the index has no term for it.
            from sinks.text.base import MAX_TOKEN_BYTES, WORD_PATTERN

            long_words = [w for w in re.findall(WORD_PATTERN, query) if len(w.encode("utf-8")) >= MAX_TOKEN_BYTES]
            why = (f"words of {MAX_TOKEN_BYTES} bytes or more (a base64 blob, a long run of letters) are not indexed"
                   if long_words else "it indexes runs of letters and digits, not emoji or other symbols")
            raise QueryError(f"the query {query[:40]!r} has no word the text index holds: {why}",
                             hint="Search it with mode vector or hybrid, or add a word.")
    tool_results = _optional(body, "toolResults", bool, False)
    filters = _filters(body.get("filters"))
    return SearchRequest(query=query, log=log, freshness=freshness, k=k, explain=explain,
                         cursor=cursor, mode=mode, filters=filters, tool_results=tool_results)


def _optional(body: Mapping[str, Any], name: str, kind: type, default: Any) -> Any:
    value = body.get(name)
    if value is None:
        return default
    # bool is an int subclass: k=true must not pass as k=1.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise QueryError(f"field {name!r} must be {_TYPE_NAMES[kind]}, not {json_kind(value)}")
    return value


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false"}


def _filters(raw: Any) -> Filters:
    if raw is None:
        return Filters()
    if not isinstance(raw, Mapping):
        raise QueryError(f"field 'filters' must be an object, not {json_kind(raw)}")
    known = set(FILTER_FIELDS) | set(_TIME_FIELDS)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise QueryError(f"unknown filter(s): {', '.join(map(str, unknown))}",
                         hint="Known filters: " + ", ".join(sorted(known)) + ".")
    values: dict[str, tuple[str, ...]] = {}
    for name in FILTER_FIELDS:
        if name not in raw:
            continue
        value = raw[name]
        if value is None:  # {"sessionId": null} narrowed nothing, silently
            raise QueryError(f"filter {name!r} is null", hint="Leave the filter out to keep every value.")
        items = [value] if isinstance(value, str) else value
        if isinstance(items, list) and len(items) > _MAX_FILTER_VALUES:
            # Said as what it is: 1001 valid ids were refused as "must be a non-empty string or
            # a list of them", which they are.
            raise QueryError(f"filter {name!r} lists {len(items)} values; at most {_MAX_FILTER_VALUES} are allowed",
                             hint="Narrow the filter, or run the search once per group of values.")
        if (not isinstance(items, list) or not items
                or not all(isinstance(item, str) and item for item in items)):
            raise QueryError(f"filter {name!r} must be a non-empty string or a list of them")
        if name == "role" and not set(items) <= ROLES:
            # A role no event can have ('robot', 'User': roles are lower-case) matched nothing.
            raise QueryError(f"filter 'role' {sorted(set(items) - ROLES)} is not an event role",
                             hint="Roles: " + ", ".join(sorted(ROLES)) + ".")
        values[name] = tuple(sorted(set(items)))
    times: dict[str, float] = {}
    texts: dict[str, str] = {}
    for name in _TIME_FIELDS:
        value = raw.get(name)
        if value is None:
            continue
        try:
            times[name] = parse_time(value).timestamp()
        except (ValueError, TypeError):
            raise QueryError(f"filter {name!r} must be an RFC 3339 time with an offset",
                             hint="For example 2026-01-31T12:00:00Z.") from None
        texts[name] = value
    if "timeFrom" in times and "timeTo" in times and times["timeFrom"] > times["timeTo"]:
        raise QueryError("filter 'timeFrom' is after 'timeTo'")
    return Filters(values=values, time_from=times.get("timeFrom"), time_to=times.get("timeTo"),
                   time_text=texts)


def query_params(pairs: Iterable[tuple[str, str]], known: Iterable[str]) -> dict[str, str]:
    """The query string of a GET endpoint as a dict, each name one of ``known`` and given once;
    QueryError (400) otherwise. A JSON body's unknown field is refused, so a query string's is
    too: ``/v1/export?what=sessions&sessionid=S`` (one letter off) exported every session the
    caller may read, and of ``?query=a&query=b`` the last silently won."""
    names = tuple(known)
    params: dict[str, str] = {}
    unknown: list[str] = []
    for name, value in pairs:
        if name not in names:
            if name not in unknown:
                unknown.append(name)
            continue
        if name in params:
            raise QueryError(f"query parameter {name!r} is given more than once", hint="Give each parameter once.")
        params[name] = value
    if unknown:
        listed = ", ".join(repr(name[:64]) for name in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise QueryError(f"unknown query parameter(s): {listed}",
                         hint=f"Known parameters here: {', '.join(names) or 'none'}.")
    return params


def log_field(value: Any) -> str:
    """The ``log`` field of a search, SQL or SessionQL body: a log name, else QueryError (400),
    cut as :func:`log_param` cuts it (a 1 MB ``log`` came back whole in the error body, a 404
    "no log named ..." from SQL and SessionQL)."""
    if not isinstance(value, str) or not LOG_ID.fullmatch(value):
        raise QueryError(f"field 'log' {str(value)[:64]!r} is not a log name", hint=_LOG_NAME_HINT)
    return value


def log_param(log_id: str | None) -> str | None:
    """The ``?log=`` query parameter of a GET endpoint: None (every log) or a log name;
    QueryError (400) for anything else."""
    if log_id is not None and not LOG_ID.fullmatch(log_id):
        raise QueryError(f"{log_id[:64]!r} is not a log name", hint=_LOG_NAME_HINT)
    return log_id
