"""A small typed client for the planner's HTTP API.

One :class:`Client` per API; it keeps one connection open and sends every request as one
principal: with ``api_key`` the key's (``Authorization: Bearer``), narrowed by ``principal``
if given; without a key, ``principal`` goes in ``X-USL-Principal`` (loopback deployments).
Every method returns the API's JSON as a plain dict, exactly as ``usl ... --json`` prints it::

    from planner.client import Client

    with Client("http://127.0.0.1:8765", principal="tenant:acme/user:alice") as usl:
        page = usl.search("refund rounding", freshness="latest", k=5)
        print(page["asOfSeq"], [hit["chunkId"] for hit in page["results"]])
        for hit in usl.iter_results("retry budget", limit=200):   # follows the cursors
            ...
        rows = usl.sessionql('FROM tool_calls WHERE status = "error" GROUP BY toolName')

An error answer raises :class:`APIError`, a :class:`~planner.exceptions.PlannerError` with the
status, code, message and hint of the API's one error shape; no answer at all (refused,
timed out) raises :class:`Unreachable`.

It is built on the standard library's ``http.client`` on purpose: ``usl search`` goes through
it, and importing an HTTP stack such as httpx would cost a shell command more than the whole
search takes (docs/benchmarks.md, "usl search as a whole process").
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from planner.exceptions import PlannerError
from streams.exceptions import USLError

__all__ = ["AS_OF_HEADER", "END_HEADER", "PRINCIPAL_HEADER", "APIError", "Client", "Evidence", "Exported", "SearchHit",
           "SearchResponse", "Unreachable"]

# The API's own headers: the server (planner.api, planner.export) reads and writes these names.
PRINCIPAL_HEADER = "X-USL-Principal"
AS_OF_HEADER = "X-USL-As-Of-Seq"
# Of a hits export: the search's `end` (JSON) when its results stopped at the rank depth.
END_HEADER = "X-USL-Results-End"
_DEFAULT_TIMEOUT = 120.0
_CONNECT_TIMEOUT = 2.0


class Evidence(TypedDict):
    """One canonical event proving a hit: its UTF-8 byte span in the hit's text."""

    eventId: str
    seq: int
    start: int
    end: int


class SearchHit(TypedDict, total=False):
    """One result of ``POST /v1/search`` (SPEC §12)."""

    chunkId: str
    sessionId: str
    runId: str | None
    turnId: str | None
    episodeId: str | None
    text: str
    evidence: list[Evidence]
    score: dict[str, Any]
    eventTime: str


class SearchResponse(TypedDict, total=False):
    """The answer of ``POST /v1/search``: one page at one asOfSeq."""

    asOfSeq: int
    freshness: dict[str, Any]
    results: list[SearchHit]
    cursor: str | None
    explain: dict[str, Any]


@dataclass(frozen=True)
class Exported:
    """An export: the log position it reflects, its format and its bytes; of hits, ``end`` is
    the search's ``end`` when its results stopped at the rank depth with more matches."""

    as_of_seq: int
    format: str
    data: bytes
    end: dict[str, Any] | None = None


class APIError(PlannerError):
    """The API answered with its error shape; ``status`` and ``code`` are the API's."""

    def __init__(self, status: int, code: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status, self.code = status, code


class Unreachable(USLError):
    """Nothing answered at the API's address (refused, reset or timed out)."""


class Client:
    """The planner API at ``base_url`` (``http://host:port``), asked as one principal."""

    def __init__(self, base_url: str, *, principal: str | None = None, api_key: str | None = None,
                 timeout: float = _DEFAULT_TIMEOUT, connect_timeout: float = _CONNECT_TIMEOUT) -> None:
        parsed = urllib.parse.urlsplit(base_url if "://" in base_url else f"http://{base_url}")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise USLError(f"{base_url!r} is not an http(s) URL of the planner API")
        self.base_url = f"{parsed.scheme}://{parsed.netloc}{parsed.path.rstrip('/')}"
        self._scheme, self._host = parsed.scheme, parsed.hostname
        self._port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self._prefix = parsed.path.rstrip("/")
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self._headers = {"Accept": "application/json", "User-Agent": "usl-client/1"}
        if principal:
            self._headers[PRINCIPAL_HEADER] = principal
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._connection: http.client.HTTPConnection | None = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # -- routes -------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok", "ready": bool}`` (ready once the planner is up)."""
        return self._json("GET", "/healthz", timeout=self.connect_timeout)

    def search(self, query: str, *, freshness: str = "indexed", k: int = 10, explain: bool = False,
               cursor: str | None = None, log: str = "default", mode: str = "hybrid",
               filters: Mapping[str, str | Sequence[str]] | None = None,
               tool_results: bool = False) -> SearchResponse:
        """One page of ``POST /v1/search``; pass the previous page's ``cursor`` for the next."""
        body: dict[str, Any] = {"query": query, "freshness": freshness, "k": k, "explain": explain,
                                "cursor": cursor, "log": log, "mode": mode, "toolResults": tool_results}
        if filters:
            body["filters"] = {name: value if isinstance(value, str) else list(value)
                               for name, value in filters.items()}
        answer: SearchResponse = self.request("POST", "/v1/search", body,  # type: ignore[assignment]
                                              timeout=self.timeout_for(freshness))
        return answer

    def iter_pages(self, query: str, **options: Any) -> Iterator[SearchResponse]:
        """Every page of a search, following each page's cursor (all at the first page's asOfSeq)."""
        cursor = options.pop("cursor", None)
        while True:
            page = self.search(query, cursor=cursor, **options)
            yield page
            cursor = page.get("cursor")
            if not cursor or not page.get("results"):
                return

    def iter_results(self, query: str, *, limit: int | None = None, **options: Any) -> Iterator[SearchHit]:
        """The hits of a search in rank order across pages, up to ``limit`` (default: all the
        search gives, which stop at the rank depth; the last page's ``end`` from
        :meth:`iter_pages` says when a source had more)."""
        served = 0
        for page in self.iter_pages(query, **options):
            for hit in page.get("results", []):
                if limit is not None and served >= limit:
                    return
                served += 1
                yield hit

    def sql(self, query: str, *, as_of_seq: int | None = None, log: str = "default") -> dict[str, Any]:
        """``POST /v1/sql``: read-only SQL on the analytics snapshot at one asOfSeq."""
        return self.request("POST", "/v1/sql", _with_as_of({"query": query, "log": log}, as_of_seq))

    def sessionql(self, query: str, *, as_of_seq: int | None = None, log: str = "default",
                  max_rows: int | None = None) -> dict[str, Any]:
        """``POST /v1/sessionql``: one SessionQL query at one asOfSeq."""
        body = _with_as_of({"query": query, "log": log}, as_of_seq)
        if max_rows is not None:
            body["maxRows"] = max_rows
        return self.request("POST", "/v1/sessionql", body)

    def status(self, log: str | None = None) -> dict[str, Any]:
        """``GET /v1/status``: per log, the committed L1 seq and each index's generation and lag."""
        return self._json("GET", "/v1/status" + (f"?{urllib.parse.urlencode({'log': log})}" if log else ""))

    def events(self, events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``POST /v1/events``: append ASP v1 events; answers after L1 commit with ``appended``,
        ``duplicates``, ``rejected`` and ``l1CommittedSeq`` (SPEC §12)."""
        return self.request("POST", "/v1/events", {"events": list(events)})

    def export(self, what: Literal["sessions", "turns", "hits"] = "sessions", *,
               query: str | None = None, fmt: Literal["jsonl", "parquet"] = "jsonl",
               as_of_seq: int | None = None, log: str = "default", freshness: str | None = None,
               mode: str | None = None, limit: int | None = None, session_id: str | None = None) -> Exported:
        """``GET /v1/export``: every session's events, turn or search hit (``query``) the caller
        may read, at one asOfSeq, as JSONL or Parquet bytes (``docs/planner.md``, "Export");
        ``session_id`` narrows a sessions export to that one session."""
        params: dict[str, Any] = {"what": what, "format": fmt, "log": log, "query": query,
                                  "asOfSeq": as_of_seq, "freshness": freshness, "mode": mode,
                                  "limit": limit, "sessionId": session_id}
        query_string = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        status, headers, data = self._exchange("GET", f"/v1/export?{query_string}", None, timeout=self.timeout)
        if status >= 400:
            raise _api_error(status, data)
        end = headers.get(END_HEADER.lower())
        return Exported(int(headers.get(AS_OF_HEADER.lower(), -1)), fmt, data, json.loads(end) if end else None)

    # -- transport ----------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, *, timeout: float | None = None) -> dict[str, Any]:
        """Any route: the decoded JSON answer, or :class:`APIError` with the API's error."""
        return self._json(method, path, body, timeout=timeout)

    def _json(self, method: str, path: str, body: Any = None, *, timeout: float | None = None) -> dict[str, Any]:
        status, _, data = self._exchange(method, path, body, timeout=timeout or self.timeout)
        if status >= 400:
            raise _api_error(status, data)
        try:
            answer: dict[str, Any] = json.loads(data)
        except ValueError:
            raise APIError(status, "bad_response", f"{self.base_url}{path} did not answer with JSON",
                           hint="Is USL_API_URL the planner API?") from None
        return answer

    def _exchange(self, method: str, path: str, body: Any, *,
                  timeout: float) -> tuple[int, dict[str, str], bytes]:
        payload = None if body is None else json.dumps(body).encode("utf-8")
        headers = dict(self._headers)
        if payload is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            fresh = self._connection is None
            connection = self._connect()
            try:
                connection.sock.settimeout(timeout)  # type: ignore[union-attr]
                connection.request(method, self._prefix + path, body=payload, headers=headers)
                response = connection.getresponse()
                data = response.read()
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                self.close()
                # A kept-alive connection the server closed meanwhile: one retry on a new one.
                if attempt == 1 and not fresh and not isinstance(exc, socket.timeout):
                    continue
                raise Unreachable(f"no answer from the planner API at {self.base_url}: {exc}") from None
            if response.will_close:  # `Connection: close`, or an HTTP/1.0 server's answer
                self.close()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, data
        raise AssertionError("unreachable")

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            kind = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
            connection = kind(self._host, self._port, timeout=self.connect_timeout)
            try:
                connection.connect()
            except OSError as exc:
                raise Unreachable(f"no answer from the planner API at {self.base_url}: {exc}") from None
            self._connection = connection
        return self._connection

    def timeout_for(self, freshness: str) -> float:
        """How long to wait for a search's answer: a ``wait:S`` search may take S seconds."""
        if freshness.startswith("wait:"):
            try:
                return max(self.timeout, float(freshness[5:]) + 30.0)
            except ValueError:
                pass  # the API says what is wrong with it
        return self.timeout


def _with_as_of(body: dict[str, Any], as_of_seq: int | None) -> dict[str, Any]:
    if as_of_seq is not None:
        body["asOfSeq"] = as_of_seq
    return body


def _api_error(status: int, data: bytes) -> APIError:
    """The API's one error shape as an exception (or a plain one for a foreign answer)."""
    try:
        error = json.loads(data)["error"]
        return APIError(int(error.get("status", status)), str(error["code"]), str(error["message"]),
                        hint=error.get("hint"))
    except (ValueError, KeyError, TypeError):
        return APIError(status, "bad_response", f"the API answered HTTP {status} without its error shape",
                        hint="Is USL_API_URL the planner API?")
