"""The planner's HTTP API: a Starlette ASGI app (``usl serve``, ``usl up``).

Routes (``GET /openapi.json`` describes them; ``docs/planner.md`` has examples):

==========================  =======================================================
``POST /v1/search``         search (body: :mod:`planner.request`)
``POST /v1/sql``            read-only SQL over the analytics snapshot (:mod:`planner.sql`)
``POST /v1/sessionql``      SessionQL over the ASP projection and lineage (:mod:`planner.sessionql`)
``GET /v1/status``          L1 seq, generations, watermarks and lag (:mod:`planner.status`)
``POST /v1/events``         append ASP v1 events to L1 (:mod:`planner.receivers`)
``POST /v1/traces``         OTLP/HTTP receiver for OpenTelemetry GenAI spans (:mod:`planner.receivers`)
``POST /v1/logs``           OTLP/HTTP receiver for their GenAI log records (the messages, :mod:`planner.otlp`)
``GET /metrics``            Prometheus metrics of this process
``GET /healthz``            liveness
``GET /openapi.json``       the OpenAPI 3.1 description of these routes
``GET /``                   the search page (``planner/static``)
==========================  =======================================================

Who is calling (:mod:`planner.auth`, ``docs/security.md``): while the API keys file exists,
every ``/v1/*`` request needs ``Authorization: Bearer KEY`` (or ``X-API-Key: KEY``) and runs as
the key's principal; an ``X-USL-Principal`` header may then only narrow it (same tenant and
user, fewer groups or scopes). Without a keys file (loopback only, unless
``USL_API_ALLOW_UNAUTHENTICATED``) the caller is named by ``X-USL-Principal``
(``tenant:T/user:U[/groups:..][/scopes:..]``, default ``USL_DEFAULT_PRINCIPAL``).
``/healthz``, ``/metrics``, ``/openapi.json`` and the static page stay open: they carry no
session data.

Before routing, every request passes :class:`RequestGuard`: without API keys, the ``Host`` must
be a loopback name (``localhost``, ``127.0.0.1``, ``[::1]``) or one of
``USL_API_ALLOWED_HOSTS`` (else 400 ``host_not_allowed``), so a web page whose name rebinds to
127.0.0.1 reads nothing; a request body must be JSON (``application/json`` or ``*+json``;
``application/x-protobuf`` for OTLP), else 415, so no page can post one as a "simple" cross-site
request; and a body larger than ``USL_API_MAX_BODY_BYTES`` is refused with 413 before it is
read whole.

Every error, from any route and of any kind (a bad request, a refused cursor, an unknown route,
a wrong method, malformed JSON, a bug), has the one shape of
:func:`planner.exceptions.error_body`; a response never carries a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from kafka.errors import KafkaError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from planner import otlp, receivers
from planner.acl import Principal
from planner.auth import KeyRing, allowed_hosts, authenticate, host_allowed, keys_path
from planner.bodies import json_error, without_bom
from planner.client import PRINCIPAL_HEADER
from planner.exceptions import (
    BrokerUnavailable,
    NotFound,
    PlannerError,
    QueryError,
    error_body,
)
from planner.export import endpoint as export_endpoint
from planner.request import log_param, query_params
from planner.status_history import StatusHistory
from planner.status_history import endpoint as status_history_endpoint
from planner.tailwarm import WARM_EVERY_SECONDS
from streams.exceptions import BrokerError, USLError
from streams.metrics import METRICS_CONTENT_TYPE, metrics_text, served_by
from streams.names import LOG_ID
from streams.settings import Settings

__all__ = [
    "PRINCIPAL_HEADER",
    "HostNotAllowed",
    "MethodNotAllowed",
    "PayloadTooLarge",
    "RequestGuard",
    "UnsupportedMediaType",
    "create_app",
    "not_json",
    "openapi",
]

log = logging.getLogger("usl.api")

STATIC_DIR = Path(__file__).with_name("static")
_STATUS_CACHE_SECONDS = 1.0
_STATUS_CACHE_ENTRIES = 64
# Media types a request body may have: JSON, and protobuf for the OTLP/HTTP receiver. None of
# them is one a web page may post cross-site without asking first (CORS "simple" requests).
_BODY_MEDIA_TYPES = frozenset({"application/json", "application/x-protobuf"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# A refused body is read and dropped up to this many times the limit, for at most this long,
# so its sender reads the 413 instead of a broken pipe (RequestGuard._drain).
_DRAIN_FACTOR = 4
_DRAIN_SECONDS = 30.0


class MethodNotAllowed(PlannerError):
    status, code = 405, "method_not_allowed"


class HostNotAllowed(PlannerError):
    status, code = 400, "host_not_allowed"


class PayloadTooLarge(PlannerError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(PlannerError):
    status, code = 415, "unsupported_media_type"


class _JSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def _error(exc: PlannerError, request_headers: Headers | None = None) -> Response:
    """The error's one JSON shape, with the headers its kind carries (``WWW-Authenticate``,
    ``Retry-After``); to a protobuf request (an OTLP exporter's: no other route takes protobuf)
    the protobuf ``google.rpc.Status`` OTLP/HTTP requires instead
    (:func:`planner.otlp.status_response`), the only error body the Collector's and the Java
    SDK's exporters read: they logged a bare "HTTP 400" for the JSON one."""
    if request_headers is not None and otlp.wants_status(request_headers):
        return otlp.status_response(exc)
    return _JSON(error_body(exc), status_code=exc.status, headers=dict(exc.headers or {}) or None)


def _internal(exc: BaseException, request_headers: Headers | None = None) -> Response:
    # Logged with its traceback for operators; the caller reads one clear sentence.
    log.error("unexpected error while serving a request", exc_info=exc)
    return _error(PlannerError("the server hit an unexpected error; it has been logged",
                               hint="Retry; if it persists, check the planner's log."), request_headers)


Handler = Callable[[Request], Awaitable[Response]]


def _guarded(handler: Handler) -> Handler:
    """Turn every exception of ``handler`` into the one JSON error shape."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ClientDisconnect:
            # The caller went away mid-request: nothing to answer and nothing went wrong here.
            log.info("client disconnected before the request was read: %s %s",
                     request.method, request.url.path)
            return Response(status_code=400)
        except PlannerError as exc:
            return _error(exc, request.headers)
        except USLError as exc:
            if isinstance(exc, BrokerError):
                return _broker_down(exc, request.headers)
            # A broker or index failure: details (hosts, files) go to the log, not the caller.
            log.error("request failed: %s", exc, exc_info=exc)
            return _error(PlannerError(
                f"the request failed ({type(exc).__name__}); the server log has the details",
                hint="Check `usl status`; retry once the failing part is back."), request.headers)
        except Exception as exc:
            if isinstance(exc, KafkaError):
                return _broker_down(exc, request.headers)
            return _internal(exc, request.headers)

    return endpoint


def _broker_down(exc: Exception, request_headers: Headers | None = None) -> Response:
    # 503, not 500: nothing is wrong with the request or this server, and the remedy is the
    # broker's (before, a stopped broker read "unexpected error ... check the planner's log").
    log.error("request failed: the Kafka cluster does not answer: %s", exc, exc_info=exc)
    return _error(BrokerUnavailable(
        f"the Kafka cluster does not answer ({type(exc).__name__}); the server log has the details",
        hint="Retry once the broker is back; `usl status` answers again then."), request_headers)


def not_json(media_type: str, *, accepted: str = "JSON",
             header: str = "Content-Type: application/json") -> UnsupportedMediaType:
    """The 415 of a body sent as ``media_type``: what to add to the request, curl's way included
    (``curl -d`` alone sends a form type, the commonest way to meet this error)."""
    return UnsupportedMediaType(
        f"a request body must be {accepted}, not {media_type or 'untyped'}",
        hint=f"Send the header {header}; with curl, add -H '{header}' "
             "(curl -d alone sends application/x-www-form-urlencoded).")


def _check_media_type(headers: Headers, path: str = "") -> None:
    """Refuse a body that is not JSON (or protobuf, for OTLP) with 415: a web page can post
    text/plain or a form to any address without asking first, but never JSON."""
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in _BODY_MEDIA_TYPES and not (
            media_type.startswith("application/") and media_type.endswith("+json")):
        if path in ("/v1/traces", "/v1/logs"):  # the OTLP receivers: protobuf is what exporters send
            raise not_json(media_type, accepted=otlp.OTLP_ACCEPTED, header=otlp.OTLP_HEADER)
        raise not_json(media_type)


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        raise QueryError("the request body is empty; send a JSON object",
                         hint='For example {"query": "retry budget"}.')
    _check_media_type(request.headers)
    raw = without_bom(raw)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise json_error(exc) from None  # where, and whether it is the encoding
    if isinstance(body, dict) and orjson.dumps(body) != raw:
        # A key written twice ({"query": "a", "query": "b"}) is one parsers disagree on (the last
        # wins here, the first elsewhere): refused as /v1/events refuses it, never guessed.
        json.loads(raw, object_pairs_hook=_once_each)
    return body


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        repeated = next(key for key in keys if keys.count(key) > 1)
        raise QueryError(f"duplicate key {repeated[:64]!r} in the request body; each key may appear once",
                         hint="Send each field once.")
    return dict(pairs)


class RequestGuard:
    """ASGI middleware run before routing: the Host check (without API keys), the body's media
    type and its size. Each refusal has the one JSON error shape."""

    def __init__(self, app: ASGIApp, *, keys: KeyRing, hosts: frozenset[str],
                 max_body_bytes: int) -> None:
        self.app = app
        self.keys = keys
        self.hosts = hosts
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        try:
            self._check(scope, headers)
        except PlannerError as exc:
            if isinstance(exc, PayloadTooLarge):
                await self._drain(headers, receive)
            await _error(exc, headers)(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            # A body sent without Content-Length (chunked) is counted as it arrives.
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise self._too_large()
            return message

        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, sending)
        except PayloadTooLarge as exc:  # raised by limited() inside a route that let it through
            if started:
                raise
            await self._drain(headers, receive)
            await _error(exc, headers)(scope, receive, send)
        except ClientDisconnect:  # the caller went away; nothing to answer, nothing wrong here
            log.info("client disconnected during %s %s", scope["method"], scope["path"])

    def _check(self, scope: Scope, headers: Headers) -> None:
        self.keys.refresh()
        # Without API keys a browser is the threat (DNS rebinding, cross-site posts): check its
        # Host and the body's type here, before any route. With keys, the key is checked first,
        # by the route; a page has no key to send.
        keyless = not self.keys.enforcing
        if keyless and not host_allowed(headers.get("host", ""), self.hosts):
            raise HostNotAllowed(
                "this API answers without API keys only to loopback host names",
                hint="Call it as http://127.0.0.1 or http://localhost, add the name to "
                     "USL_API_ALLOWED_HOSTS, or create API keys (`usl apikey create`).")
        if scope["method"] not in _BODY_METHODS:
            return
        length = headers.get("content-length")
        has_body = "transfer-encoding" in headers or (length is not None and length.strip() != "0")
        if keyless and has_body:
            _check_media_type(headers, scope["path"])
        if length is not None and length.strip().isascii() and length.strip().isdigit() \
                and int(length) > self.max_body_bytes:
            raise self._too_large()

    async def _drain(self, headers: Headers, receive: Receive) -> None:
        """Read and drop the rest of a refused body, up to a bound, before answering.

        A client that sends its whole body before reading the answer (urllib, requests, the
        OTLP exporters) saw a broken pipe instead of the 413 when the server closed while it
        was still writing (about 20 MB and up here). One that asked to send only once allowed
        (``Expect: 100-continue``, curl's way with large bodies) is answered at once: reading
        would tell it to go on."""
        if "100-continue" in headers.get("expect", "").lower():
            return
        read, limit = 0, _DRAIN_FACTOR * self.max_body_bytes
        deadline = time.monotonic() + _DRAIN_SECONDS
        with contextlib.suppress(Exception):  # the caller may be gone: the answer is all that is left
            while read <= limit and time.monotonic() < deadline:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
                if message["type"] != "http.request":
                    return
                read += len(message.get("body", b""))
                if not message.get("more_body"):
                    return

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"the request body is larger than {self.max_body_bytes} bytes",
            hint="Send less per request (USL_API_MAX_BODY_BYTES sets the limit).")


def create_app(settings: Settings, bootstrap: str, *, planner: Any = None) -> Starlette:
    """The ASGI app. Without ``planner`` it builds one at startup, fed by a live
    :class:`~sinks.watermarks.WatermarkFollower` (with ``USL_PLANNER_SOURCE=object-store``, a
    :class:`~planner.mirror.MirrorFollower` over its own mirror), and stops both at shutdown."""
    state: dict[str, Any] = {"planner": planner}
    status_cache: dict[str, tuple[float, dict[str, Any]]] = {}
    status_lock = threading.Lock()
    from planner.status import StatusSources

    status_sources = StatusSources()  # kept: each collect reads on through the same consumers
    keys = KeyRing(keys_path(settings))

    def principal_of(request: Request) -> Principal:
        return authenticate(keys, request.headers, request.headers.get(PRINCIPAL_HEADER),
                            settings.acl_default)

    def the_planner() -> Any:
        current = state.get("planner")
        if current is None:
            raise PlannerError("the planner is still starting", hint="Retry in a moment.")
        return current

    async def search(request: Request) -> Response:
        principal = principal_of(request)
        body = await _json_body(request)
        result = await run_in_threadpool(the_planner().search, body, principal)
        return _JSON(result)

    async def sql(request: Request) -> Response:
        principal = principal_of(request)
        body = await _json_body(request)
        return _JSON(await run_in_threadpool(the_planner().sql, body, principal))

    async def sessionql(request: Request) -> Response:
        from planner.sessionql_service import sessionql_request

        principal = principal_of(request)
        body = await _json_body(request)
        return _JSON(await run_in_threadpool(sessionql_request, the_planner(), body, principal))

    def collect(log_id: str | None) -> dict[str, Any]:
        from planner.status import collect_status

        key = log_id or ""
        with status_lock:
            cached = status_cache.get(key)
            if cached and time.monotonic() - cached[0] < _STATUS_CACHE_SECONDS:
                return cached[1]
        report = collect_status(settings, bootstrap, log_id=log_id, sources=status_sources)
        report.pop("bootstrap", None)  # an internal address is not the caller's business
        with status_lock:
            now = time.monotonic()
            for stale in [k for k, (at, _) in status_cache.items() if now - at >= _STATUS_CACHE_SECONDS]:
                del status_cache[stale]
            while len(status_cache) >= _STATUS_CACHE_ENTRIES:  # oldest first: dicts keep order
                del status_cache[next(iter(status_cache))]
            status_cache[key] = (now, report)
        return report

    status_history = StatusHistory(lambda: collect(None))

    async def status(request: Request) -> Response:
        from planner.status import for_principal

        # Log names and positions are not for strangers; heldBy names only sessions the caller
        # may read.
        principal = principal_of(request)
        log_id = log_param(query_params(request.query_params.multi_items(), ("log",)).get("log"))

        def readable(log: str, session_id: str) -> bool:
            current = state.get("planner")
            if current is None:
                return False
            try:
                return bool(current.session_readable(log, session_id, principal))
            except PlannerError:  # the log is gone, the structured index far behind: withheld
                return False

        def answer(log: str | None) -> dict[str, Any]:
            return for_principal(collect(log), principal, readable)

        return _JSON(await run_in_threadpool(answer, log_id))

    def refresh_freshness_gauges() -> None:
        from planner.status import export_status_metrics

        try:
            export_status_metrics(collect(None))
        except Exception as exc:  # a scrape still answers while the broker is unreachable
            log.warning("freshness gauges not refreshed: %s", exc)

    async def metrics(request: Request) -> Response:
        await run_in_threadpool(refresh_freshness_gauges)
        return Response(metrics_text(served_by("planner")), media_type=METRICS_CONTENT_TYPE)

    async def healthz(request: Request) -> Response:
        return _JSON({"status": "ok", "ready": state.get("planner") is not None})

    async def openapi_json(request: Request) -> Response:
        keys.refresh()
        return _JSON(openapi(auth_required=keys.enforcing))

    async def index(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8")

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(NotFound("no such route", hint="See GET /openapi.json for the routes."), request.headers)

    async def http_error(request: Request, exc: Exception) -> Response:
        status_code = getattr(exc, "status_code", 500)
        if status_code == 404:
            return await not_found(request, exc)
        if status_code == 405:
            allowed = (getattr(exc, "headers", None) or {}).get("Allow", "")
            return _error(MethodNotAllowed(
                f"method {request.method} is not allowed here",
                hint=f"Use {allowed}." if allowed else "See GET /openapi.json."), request.headers)
        error = PlannerError(str(getattr(exc, "detail", "")) or "the request failed")
        error.status = status_code
        error.code = "bad_request" if 400 <= status_code < 500 else "internal"
        return _error(error, request.headers)

    async def server_error(request: Request, exc: Exception) -> Response:
        return _internal(exc, request.headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        follower: Any = None
        warming: threading.Thread | None = None
        status_sources.open()
        if state.get("planner") is None:
            from planner.engine import Planner
            from sinks.watermarks import WatermarkFollower

            if settings.planner_source == "object-store":
                # A stateless replica: generations mirrored from the store into its own USL_HOME.
                from planner.mirror import MirrorFollower, StoreMirror

                follower = await run_in_threadpool(
                    lambda: MirrorFollower(StoreMirror(settings, bootstrap)).start(timeout_seconds=30))
            else:
                follower = await run_in_threadpool(
                    lambda: WatermarkFollower(bootstrap, settings).start(timeout_seconds=30))
            # The server keeps the tail scans of recent latest/wait queries current as the log
            # head moves (planner/tailwarm.py), so those queries rarely scan new events themselves.
            state["planner"] = Planner(settings, bootstrap, follower=follower,
                                       warm_tail_every=WARM_EVERY_SECONDS)
            state["owned"] = True
            # Beside the first requests, not before them: the server answers at once, and a
            # search that comes later than the warm-up no longer loads the embedder itself.
            warming = threading.Thread(target=state["planner"].warm_up, name="usl-planner-warm-up",
                                       daemon=True)
            warming.start()
        try:
            yield
        finally:
            if warming is not None:
                warming.join(timeout=30)
            if state.pop("owned", False):
                state["planner"].close()
                state["planner"] = None
            if follower is not None:
                follower.stop()
            # Before the sources close: a sample taken after would open a client of its own,
            # and a thread left sampling outlives the app (a test's, an embedding program's).
            status_history.stop()
            status_sources.close()

    routes = [
        Route("/v1/search", _guarded(search), methods=["POST"]),
        Route("/v1/sql", _guarded(sql), methods=["POST"]),
        Route("/v1/sessionql", _guarded(sessionql), methods=["POST"]),
        Route("/v1/status", _guarded(status), methods=["GET"]),
        Route("/v1/export", _guarded(export_endpoint(principal_of, the_planner)), methods=["GET"]),
        Route("/v1/status/history", _guarded(status_history_endpoint(principal_of, collect, status_history)),
              methods=["GET"]),
        *receivers.routes(settings, bootstrap, principal_of, _guarded),  # POST /v1/events, /v1/traces, /v1/logs
        Route("/metrics", _guarded(metrics), methods=["GET"]),
        Route("/healthz", _guarded(healthz), methods=["GET"]),
        Route("/openapi.json", _guarded(openapi_json), methods=["GET"]),
        Route("/", _guarded(index), methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    guard = Middleware(RequestGuard, keys=keys, hosts=allowed_hosts(settings.api_allowed_hosts),
                       max_body_bytes=settings.api_max_body_bytes)
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[guard],
        exception_handlers={HTTPException: http_error, 404: not_found, 500: server_error},
    )
    app.state.status_cache = status_cache  # bounded (_STATUS_CACHE_ENTRIES); tests look at it
    return app


_ERROR_REF = {"$ref": "#/components/schemas/Error"}


def _errors(*statuses: int) -> dict[str, Any]:
    meanings = {400: "Bad request (bad_query, bad_cursor; host_not_allowed: a keyless API answers "
                     "only to loopback host names and USL_API_ALLOWED_HOSTS)",
                401: "No API key, or not a valid one (unauthorized); carries WWW-Authenticate",
                403: "Forbidden (missing scope, or X-USL-Principal wider than the API key's)",
                404: "Not found", 405: "Method not allowed", 409: "Cursor mismatch",
                410: "Cursor expired or its generation is gone",
                413: "Request body larger than USL_API_MAX_BODY_BYTES (payload_too_large)",
                415: "Request body not JSON (unsupported_media_type)", 500: "Internal error",
                503: "Index unavailable"}
    responses: dict[str, Any] = {
        str(s): {"description": meanings[s], "content": {"application/json": {"schema": _ERROR_REF}}}
        for s in statuses}
    if 401 in statuses:
        responses["401"]["headers"] = {"WWW-Authenticate": {
            "description": 'Bearer realm="usl"', "schema": {"type": "string"}}}
    return responses


def openapi(*, auth_required: bool = True) -> dict[str, Any]:
    """The hand-written OpenAPI 3.1 description of the API.

    ``auth_required`` is whether this server enforces API keys (it serves the document that is
    true of it); when it does not, the ``/v1`` routes list the empty requirement ``{}`` too.
    """
    principal = {"name": PRINCIPAL_HEADER, "in": "header", "required": False,
                 "description": "Caller, e.g. tenant:acme/user:alice/groups:eng/scopes:toolresults "
                                "(default: USL_DEFAULT_PRINCIPAL). With an API key it may only "
                                "narrow the key's principal (same tenant and user, subsets of "
                                "its groups and scopes).",
                 "schema": {"type": "string"}}
    security: list[dict[str, list[str]]] = [{"bearerKey": []}, {"headerKey": []}]
    if not auth_required:
        security.append({})
    json_body = {"application/json": {"schema": {"type": "object"}}}
    filters = {"type": "object", "additionalProperties": False, "properties": {
        name: {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
        for name in ("sessionId", "runId", "turnId", "toolName", "status", "role")
    } | {"timeFrom": {"type": "string", "format": "date-time"},
         "timeTo": {"type": "string", "format": "date-time"}}}
    search_request = {"type": "object", "required": ["query"], "additionalProperties": False,
                      "properties": {
                          "query": {"type": "string", "minLength": 1, "maxLength": 2000},
                          "log": {"type": "string", "default": "default"},
                          "freshness": {"type": "string", "default": "indexed",
                                        "pattern": "^(indexed|latest|wait:[0-9]+(\\.[0-9]+)?)$"},
                          "k": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
                          "explain": {"type": "boolean", "default": False},
                          "cursor": {"type": ["string", "null"]},
                          "mode": {"enum": ["hybrid", "text", "vector"], "default": "hybrid"},
                          "filters": filters,
                          "toolResults": {"type": "boolean", "default": False,
                                          "description": "Needs the toolresults scope."},
                      }}
    range_ = {"type": "object", "properties": {"fromSeq": {"type": "integer"},
                                               "toSeq": {"type": "integer"}}}
    texts = {"type": "array", "items": {"type": "string"}}
    nullable_int = {"type": ["integer", "null"]}
    # Every field a search answer carries, so a client (the search page is one) can rely on
    # what it reads: the SPEC §12 fields, required, and the rest the planner adds
    # (tests/planner/test_api.py checks real answers have no field this leaves out).
    search_response = {"type": "object", "required": ["asOfSeq", "freshness", "results", "cursor"],
                       "properties": {
                           "asOfSeq": {"type": "integer"},
                           "freshness": {"type": "object", "required": [
                               "mode", "label", "l1CommittedSeq", "watermarks", "tailScan",
                               "uncovered"], "properties": {
                               "mode": {"enum": ["indexed", "latest", "wait"]},
                               "label": {"type": "string", "description": "the mode, with "
                                         "-partial when part of the log is uncovered"},
                               "asOfSeq": {"type": "integer"},
                               "l1CommittedSeq": {"type": "integer"},
                               "indexThroughSeq": {"type": "integer", "description": "how far "
                                                   "every index read is built"},
                               "watermarks": {"type": "object", "additionalProperties": {
                                   "type": ["object", "null"], "properties": {
                                       "generationId": {"type": "integer"},
                                       "builtThroughSeq": {"type": "integer"}}}},
                               "tailScan": {"oneOf": [range_, {"type": "null"}]},
                               "uncovered": {"type": "array", "items": range_},
                               "missing": {**texts, "description": "indexes with no generation"},
                               "fallbacks": {**texts, "description": "what the planner did instead"},
                               "reasons": {**texts, "description": "how asOfSeq was chosen"},
                               "timedOut": {"type": "boolean", "description": "wait:SECONDS ran out"},
                               "waitSeconds": {"type": "number", "description": "with mode wait"}}},
                           "results": {"type": "array", "items": {"type": "object", "required": [
                               "chunkId", "sessionId", "runId", "turnId", "episodeId", "text",
                               "evidence", "score", "eventTime"], "properties": {
                               "chunkId": {"type": "string"}, "sessionId": {"type": "string"},
                               "runId": {"type": ["string", "null"]},
                               "turnId": {"type": ["string", "null"]},
                               "episodeId": {"type": ["string", "null"]},
                               "text": {"type": "string"},
                               "evidence": {"type": "array", "items": {"type": "object", "required": [
                                   "eventId", "seq", "start", "end"], "properties": {
                                   "eventId": {"type": "string"}, "seq": {"type": "integer"},
                                   "start": {"type": "integer", "description": "UTF-8 byte offset"},
                                   "end": {"type": "integer"}}}},
                               "score": {"type": "object", "required": ["rrf", "components"], "properties": {
                                   "rrf": {"type": "number"},
                                   "components": {"type": "object", "description": "per source "
                                                  "(text, phrase, identifier, vector, ...)",
                                                  "additionalProperties": {
                                                      "type": "object", "required": ["rank", "contribution"],
                                                      "properties": {
                                                          "rank": {"type": "integer", "minimum": 1},
                                                          "contribution": {"type": "number"},
                                                          "score": {"type": "number", "description":
                                                                    "the source's own score, where it "
                                                                    "depends on the query and this item only"}}}}}},
                               "eventTime": {"type": "string", "format": "date-time"},
                               "kind": {"enum": ["chunk", "toolcall", "toolresult"], "description":
                                        "a chunk of a turn, or (with toolResults) a tool call or result"},
                               "origin": {"enum": ["index", "tail"], "description": "an index, or "
                                          "the tail scan of events past it"},
                               "toolName": {"type": ["string", "null"], "description": "tool chunks only"},
                               "status": {"type": ["string", "null"], "description": "tool chunks only"}}}},
                           "cursor": {"type": ["string", "null"]},
                           "end": {"type": "object", "description": "present only when the results "
                                   "stop at the rank depth while a source had more matches",
                                   "properties": {"reason": {"enum": ["rankDepth"]},
                                                  "depth": {"type": "integer"},
                                                  "sources": texts,
                                                  "message": {"type": "string"}}},
                           "explain": {"type": "object", "description": "with explain: true "
                                       "(docs/planner.md, Explain)"}}}
    # SPEC §12's status fields; the rest (verdicts, dead letters, ...) is in docs/operations.md.
    status_response = {"type": "object", "required": ["logs"], "properties": {
        "logs": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["l1CommittedSeq", "indexes"], "properties": {
                "l1CommittedSeq": {"type": "integer"},
                "indexes": {"type": "object", "additionalProperties": {
                    "type": "object", "required": ["generationId", "builtThroughSeq", "lagSeqs", "lagSeconds"],
                    "properties": {"generationId": nullable_int, "builtThroughSeq": nullable_int,
                                   "lagSeqs": {"type": "integer"},
                                   "lagSeconds": {"type": ["number", "null"]}}}}}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "USL Search planner API", "version": "1",
                 "description": "Explainable search over an append-only log of AI-agent "
                                "sessions. Every answer states the log position (asOfSeq) it "
                                "reflects."},
        "paths": {
            "/v1/search": {"post": {
                "summary": "Search one log at one asOfSeq",
                "parameters": [principal],
                "security": security,
                "requestBody": {"required": True, "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/SearchRequest"}}}},
                "responses": {"200": {"description": "Results", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/SearchResponse"}}}},
                    **_errors(400, 401, 403, 404, 409, 410, 413, 415, 500, 503)}}},
            "/v1/sql": {"post": {
                "summary": "Read-only SQL over the analytics snapshot",
                "parameters": [principal],
                "security": security,
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["query"], "additionalProperties": False,
                    "properties": {"query": {"type": "string"},
                                   "asOfSeq": {"type": "integer", "minimum": 0},
                                   "log": {"type": "string", "default": "default"}}}}}},
                "responses": {"200": {"description": "Rows", "content": json_body},
                              **_errors(400, 401, 403, 404, 413, 415, 500, 503)}}},
            "/v1/sessionql": {"post": {
                "summary": "SessionQL over the ASP projection and lineage, at one asOfSeq",
                "parameters": [principal],
                "security": security,
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object", "required": ["query"], "additionalProperties": False,
                    "properties": {"query": {"type": "string"},
                                   "asOfSeq": {"type": "integer", "minimum": 0},
                                   "log": {"type": "string", "default": "default"},
                                   "maxRows": {"type": "integer", "minimum": 1}}}}}},
                "responses": {"200": {"description": "Rows", "content": json_body},
                              **_errors(400, 401, 403, 404, 413, 415, 500, 503)}}},
            "/v1/status": {"get": {
                "summary": "L1 committed seq and, per index, generation, watermark and lag",
                "parameters": [{"name": "log", "in": "query", "required": False,
                                "schema": {"type": "string", "pattern": f"^{LOG_ID.pattern}$"}}],
                "security": security,
                "responses": {"200": {"description": "Status", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/StatusResponse"}}}},
                              **_errors(400, 401, 404, 500)}}},
            "/v1/status/history": {"get": {
                "summary": "Each index's generation, watermark and lag over the last minutes, "
                           "sampled by the API every 2 s (planner.status_history)",
                "parameters": [{"name": "log", "in": "query", "required": False,
                                "schema": {"type": "string", "pattern": f"^{LOG_ID.pattern}$"}},
                               {"name": "since", "in": "query", "required": False,
                                "schema": {"type": "number"}, "description": "Only samples after this "
                                "time (seconds since the epoch)."}],
                "security": security,
                "responses": {"200": {"description": "Samples, oldest first", "content": json_body},
                              **_errors(400, 401, 404, 500)}}},
            "/v1/export": {"get": {
                "summary": "Sessions' redacted events, turns or a search's hits at one asOfSeq "
                           "(planner.export); the position is in the X-USL-As-Of-Seq header",
                "parameters": [principal, *({"name": name, "in": "query", "required": False,
                                             "schema": schema} for name, schema in (
                    ("what", {"enum": ["sessions", "turns", "hits"], "default": "sessions"}),
                    ("format", {"enum": ["jsonl", "parquet"], "default": "jsonl"}),
                    ("sessionId", {"type": "string", "description": "with what=sessions: only this session"}),
                    ("query", {"type": "string"}), ("asOfSeq", {"type": "integer", "minimum": 0}),
                    ("log", {"type": "string", "default": "default"}),
                    ("freshness", {"type": "string", "default": "indexed"}),
                    ("mode", {"enum": ["hybrid", "text", "vector"], "default": "hybrid"}),
                    ("limit", {"type": "integer", "minimum": 1, "default": 10000})))],
                "security": security,
                "responses": {"200": {"description": "JSONL or Parquet", "content": {
                    "application/x-ndjson": {}, "application/vnd.apache.parquet": {}}, "headers": {
                    "X-USL-As-Of-Seq": {"description": "The log position the export reflects",
                                        "schema": {"type": "integer"}},
                    "X-USL-Results-End": {"description": "Of hits: the search's end (JSON: reason, depth, "
                                          "sources, message) when its results stopped at the rank depth "
                                          "while a source had more matches", "schema": {"type": "string"}}}},
                    **_errors(400, 401, 403, 404, 500, 503)}}},
            **receivers.openapi_paths(security=security, principal=principal, errors=_errors),
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {
                "200": {"description": "Prometheus text format",
                        "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
            "/healthz": {"get": {"summary": "Liveness", "responses": {
                "200": {"description": "Alive", "content": json_body}}}},
            "/openapi.json": {"get": {"summary": "This document", "responses": {
                "200": {"description": "OpenAPI 3.1", "content": json_body}}}},
            "/": {"get": {"summary": "The search page", "responses": {
                "200": {"description": "HTML", "content": {"text/html": {}}}}}},
        },
        "components": {
            "securitySchemes": {
                "bearerKey": {"type": "http", "scheme": "bearer",
                              "description": "An API key from `usl apikey create` (usl_...)."},
                "headerKey": {"type": "apiKey", "in": "header", "name": "X-API-Key",
                              "description": "The same API key, for clients that cannot set "
                                             "Authorization."},
            },
            "schemas": {
                "SearchRequest": search_request,
                "SearchResponse": search_response,
                "StatusResponse": status_response,
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {
                    "type": "object", "required": ["code", "message", "status"], "properties": {
                        "code": {"type": "string"}, "message": {"type": "string"},
                        "status": {"type": "integer"}, "hint": {"type": "string"}}}}},
            },
        },
    }
