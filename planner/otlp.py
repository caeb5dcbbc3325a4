"""``POST /v1/traces`` and ``POST /v1/logs``: the OTLP/HTTP traces and logs receivers
(protobuf or JSON).

The body is an ``ExportTraceServiceRequest`` (``application/x-protobuf``, decoded with the
``opentelemetry-proto`` package, or ``application/json``). Its GenAI spans become ASP events
(:mod:`streams.importers.otel`) that go through :class:`planner.receivers.EventReceiver`: the
caller's tenant, dedup by eventId, and the answer only after L1 committed them. The answer is an
``ExportTraceServiceResponse`` in the request's encoding, with ``partialSuccess`` naming how many
spans were refused and why, or (``rejectedSpans`` 0, a warning as OTLP has it) which events were
cut to fit ``USL_MAX_EVENT_BYTES``. The log is ``?log=NAME`` (default ``default``). A body may be
gzip or deflate compressed (``Content-Encoding``, :mod:`planner.bodies`): OTLP/HTTP requires
servers to accept gzip, and exporters send it (the Collector's by default).

Spans are mapped under the receiver's append lock, after it read what L1 holds, so a span
without ``gen_ai.conversation.id`` joins the conversation that earlier spans of its trace named,
in any request or receiver (:class:`streams.importers.otel.TraceSessions`).

``/v1/logs`` takes an ``ExportLogsServiceRequest`` the same way: the GenAI log records (the
events instrumentations emit through the logs API, with the message content their spans lack)
are read as the spans they were emitted in (:func:`streams.importers.otel.log_spans`) and go the
same way from there; Claude Code's own events (``claude_code.*``, no span to read them as) are
mapped by :func:`streams.importers.claude_code_otel.claude_code_events`. The answer is an
``ExportLogsServiceResponse`` (``rejectedLogRecords``).
"""

from __future__ import annotations

import base64
import importlib
import json
from functools import cache
from typing import Any, NamedTuple

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response

from planner.acl import Principal
from planner.bodies import json_error, read_body, without_bom
from planner.exceptions import PlannerError, QueryError
from streams.asp import json_kind
from streams.importers.base import (
    Accepted,
    Rejected,
    loads_with_lone_surrogates,
    without_lone_surrogates,
)
from streams.importers.claude_code_otel import claude_code_events
from streams.importers.otel import TraceSessions, log_spans, span_events

__all__ = ["OTLP_ACCEPTED", "OTLP_HEADER", "decode_request", "logs_endpoint", "status_response", "traces_endpoint",
           "wants_status"]

_PROTOBUF = "application/x-protobuf"
#: What a 415 of /v1/traces says it takes, and the header it names (OTLP exporters send protobuf).
OTLP_ACCEPTED = "OTLP protobuf (application/x-protobuf) or OTLP JSON (application/json)"
OTLP_HEADER = "Content-Type: application/x-protobuf"


class _Signal(NamedTuple):
    """What differs between the OTLP traces and logs receivers."""

    service: str  # ExportTraceService / ExportLogsService: + Request, + Response
    module: str  # where opentelemetry-proto defines them
    levels: tuple[str, str, str]  # the request's three nested lists
    ids: tuple[str, ...]  # the ids its protobuf holds as bytes
    rejected: str  # partialSuccess' count, as JSON names it
    rejected_field: str  # and as protobuf does


_SIGNALS = {
    "traces": _Signal("ExportTraceService", "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
                      ("resourceSpans", "scopeSpans", "spans"), ("traceId", "spanId", "parentSpanId"),
                      "rejectedSpans", "rejected_spans"),
    "logs": _Signal("ExportLogsService", "opentelemetry.proto.collector.logs.v1.logs_service_pb2",
                    ("resourceLogs", "scopeLogs", "logRecords"), ("traceId", "spanId"), "rejectedLogRecords",
                    "rejected_log_records"),
}


def wants_status(headers: Headers) -> bool:
    """Whether a request's error is answered as a protobuf ``google.rpc.Status``: it was sent as
    protobuf, which only an OTLP exporter sends here."""
    return headers.get("content-type", "").split(";")[0].strip().lower() == _PROTOBUF


def status_response(exc: PlannerError) -> Response:
    """``exc`` as OTLP/HTTP answers a failed protobuf request: the HTTP status, and a
    protobuf-encoded ``google.rpc.Status`` whose ``message`` is the error's message, its code and
    its hint (OTLP uses no ``Status.code``; it is left out), with the headers its kind carries. The Collector's ``otlphttp`` exporter
    and the Java SDK's read only this body: given the API's JSON error they logged "responded with
    HTTP Status Code 400" and no reason. Encoded here: ``google.rpc.Status`` is not in
    opentelemetry-proto, and its two fields are two length-prefixed bytes strings."""
    message = f"{exc.code}: {exc.message}" + (f" ({exc.hint})" if exc.hint else "")
    text = message.encode("utf-8")
    return Response(b"\x12" + _varint(len(text)) + text, status_code=exc.status, media_type=_PROTOBUF,
                    headers=dict(exc.headers or {}) or None)


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        out.append(low | (0x80 if number else 0))
        if not number:
            return bytes(out)


def decode_request(body: bytes, media_type: str, signal: str = "traces") -> dict[str, Any]:
    """An ExportTraceServiceRequest (``signal`` "logs": an ExportLogsServiceRequest) as an
    OTLP/JSON-shaped dict (ids as hex)."""
    kind = _SIGNALS[signal]
    name, levels = f"{kind.service}Request", kind.levels
    if media_type == _PROTOBUF:
        from google.protobuf.json_format import MessageToDict
        from google.protobuf.message import DecodeError

        message = _message(signal, "Request")
        try:
            message.ParseFromString(body)
        except DecodeError as exc:
            # What upb found ("String field had bad UTF-8", "Wire format was corrupt") after the
            # message type it names: the one thing that tells a sender what to change.
            detail = str(exc).rpartition("': ")[2]
            if "UTF-8" in detail:
                detail = _parse_lenient(message, body)
            if detail:
                raise QueryError(f"the body is not an OTLP {name} (protobuf): {detail}",
                                 hint="Send what an OTLP/HTTP exporter sends, or OTLP JSON.") from None
        request: dict[str, Any] = MessageToDict(message)
        for resource in request.get(levels[0], []):
            for scope in resource.get(levels[1], []):
                for item in scope.get(levels[2], []):
                    for key in kind.ids:
                        if item.get(key):
                            item[key] = base64.b64decode(item[key]).hex()
        return request
    try:
        request = _loads(without_bom(body))
    except json.JSONDecodeError as exc:
        raise json_error(exc, "the OTLP JSON body", hint=f"Send an {name}.") from None
    problem = _shape_problem(request, levels)
    if problem is not None:
        raise QueryError(f"the body is not an OTLP {name}: {problem}",
                         hint=f'For example {{"{levels[0]}": [{{"{levels[1]}": [{{"{levels[2]}": [...]}}]}}]}}.')
    return request


def _message(signal: str, kind: str) -> Any:
    """An empty protobuf Export{Trace,Logs}Service{Request,Response} (imported when first used)."""
    found = _SIGNALS[signal]
    return getattr(importlib.import_module(found.module), f"{found.service}{kind}")()


def _parse_lenient(message: Any, body: bytes) -> str:
    """Fill ``message`` from the protobuf ``body`` whose strings are not all UTF-8, each string
    decoded as the JSON path reads a lone surrogate (U+FFFD for it, or for each byte that is no
    UTF-8): "", or what is wrong with ``body`` besides. protobufjs (the JavaScript SDK's
    exporter) encodes the half of an emoji that an attribute cut to its length limit leaves as
    the three bytes of a lone surrogate, and protobuf's parser refuses the whole export: a 400,
    which an exporter does not retry, where the JSON exporter's same span is read."""
    from google.protobuf.message import DecodeError

    lenient = _strings_as_bytes(type(message).DESCRIPTOR.full_name, type(message).DESCRIPTOR.file)()
    try:
        lenient.ParseFromString(body)
    except DecodeError as exc:
        return str(exc).rpartition("': ")[2]
    message.Clear()  # the parse that refused the body left what it read before the bad string
    _copy_decoded(lenient, message)
    return ""


@cache
def _strings_as_bytes(full_name: str, file: Any) -> Any:
    """The message class ``full_name`` of ``file`` with every string field a bytes field (no
    UTF-8 check), in a descriptor pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(described: Any) -> None:
        if described.name in added:
            return
        for dependency in described.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto()
        described.CopyToProto(proto)
        _bytes_for_strings(proto.message_type)
        pool.Add(proto)
        added.add(described.name)

    add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


def _bytes_for_strings(messages: Any) -> None:
    from google.protobuf.descriptor import FieldDescriptor

    for described in messages:
        for field in described.field:
            if field.type == FieldDescriptor.TYPE_STRING:
                field.type = FieldDescriptor.TYPE_BYTES
        _bytes_for_strings(described.nested_type)


def _copy_decoded(source: Any, target: Any) -> None:
    """``source`` (a :func:`_strings_as_bytes` message) into ``target``, its bytes decoded where
    ``target`` has strings (OTLP's messages hold no maps)."""
    from google.protobuf.descriptor import FieldDescriptor

    for field, value in source.ListFields():
        kind = target.DESCRIPTOR.fields_by_name[field.name].type
        into = getattr(target, field.name)
        if kind == FieldDescriptor.TYPE_MESSAGE and field.is_repeated:
            for item in value:
                _copy_decoded(item, into.add())
        elif kind == FieldDescriptor.TYPE_MESSAGE:
            into.SetInParent()  # an empty kvlist or array value is a value still
            _copy_decoded(value, into)
        elif kind == FieldDescriptor.TYPE_STRING and field.is_repeated:
            into.extend(_text(item) for item in value)
        elif kind == FieldDescriptor.TYPE_STRING:
            setattr(target, field.name, _text(value))
        elif field.is_repeated:
            into.extend(value)
        else:
            setattr(target, field.name, value)


def _text(data: bytes) -> str:
    try:
        return without_lone_surrogates(data.decode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace")


def _loads(body: bytes) -> Any:
    """The OTLP JSON ``body``, a lone surrogate escape read as U+FFFD (orjson.JSONDecodeError when
    it is no JSON). A JavaScript SDK cuts an attribute to its length limit by UTF-16 units, and
    JSON.stringify writes half an emoji so: the whole export was a 400, which an exporter does not
    retry, so every span of it was lost for half a character."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "surrogate" not in exc.msg:
            raise
        return loads_with_lone_surrogates(body, refuse_repeated_keys=False)


def _shape_problem(request: Any, levels: tuple[str, str, str] = _SIGNALS["traces"].levels) -> str | None:
    """What in an OTLP/JSON request is not the list or object OTLP has there (down to each
    span or log record), or None. Without this check a ``"spans": 5`` would be read as no
    spans: 200, and the exporter would never learn its spans were dropped. ``null`` stands for
    an empty list, as in protobuf's JSON mapping."""
    if not isinstance(request, dict):
        return f"it must be a JSON object, not {json_kind(request)}"
    if levels[0] not in request:
        # Another signal's request posted here (a logs exporter's endpoint set to /v1/traces) read
        # as an empty one: 200, and the exporter never learned its records went nowhere.
        for other, route in (("resourceSpans", "/v1/traces"), ("resourceLogs", "/v1/logs"), ("resourceMetrics", None)):
            if other in request:
                return (f"it holds {other}, not {levels[0]}: " + (f"post it to {route}" if route
                        else "metrics are not received here (traces to /v1/traces, logs to /v1/logs)"))
    pending: list[tuple[str, dict[str, Any], int]] = [("", request, 0)]
    while pending:
        where, parent, level = pending.pop()
        items = parent.get(levels[level])
        path = f"{where}.{levels[level]}" if where else levels[level]
        if items is None:
            continue
        if not isinstance(items, list):
            return f"{path} must be a list, not {json_kind(items)}"
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                return f"{path}[{position}] must be an object, not {json_kind(item)}"
            if level + 1 < len(levels):
                pending.append((f"{path}[{position}]", item, level + 1))
    return None


def _response(media_type: str, rejected: int, message: str, signal: str = "traces") -> Response:
    """An Export{Trace,Logs}ServiceResponse; a message with nothing rejected is a warning."""
    if media_type == _PROTOBUF:
        answer = _message(signal, "Response")
        if rejected or message:
            setattr(answer.partial_success, _SIGNALS[signal].rejected_field, rejected)
            answer.partial_success.error_message = message
        return Response(answer.SerializeToString(), media_type=_PROTOBUF)
    body: dict[str, Any] = {}
    if rejected or message:
        body["partialSuccess"] = {_SIGNALS[signal].rejected: rejected, "errorMessage": message}
    return Response(orjson.dumps(body), media_type="application/json")


async def traces_endpoint(request: Request, receiver: Any, principal: Principal) -> Response:
    """Decode, map and append; answer as OTLP/HTTP does."""
    return await _receive(request, receiver, principal, "traces")


async def logs_endpoint(request: Request, receiver: Any, principal: Principal) -> Response:
    """The GenAI log records as the spans they were emitted in; then as :func:`traces_endpoint`."""
    return await _receive(request, receiver, principal, "logs")


def _decoded(body: bytes, media_type: str, signal: str, log_id: str
             ) -> tuple[dict[str, Any], list[Accepted | Rejected], list[Rejected]]:
    """The request decoded, with (logs) Claude Code's own events, which have no span to be read
    as, and the GenAI log records refused; the rest read as the spans they were emitted in."""
    decoded = decode_request(body, media_type, signal)
    if signal != "logs":
        return decoded, [], []
    agent_events = claude_code_events(decoded, log_id=log_id)
    spans, refused_records = log_spans(decoded)
    return spans, agent_events, refused_records


async def _receive(request: Request, receiver: Any, principal: Principal, signal: str) -> Response:
    from planner.receivers import check_event, request_log
    from streams.importers.frames import frame_loose_events

    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type not in (_PROTOBUF, "application/json"):
        from planner.api import not_json

        raise not_json(media_type, accepted=OTLP_ACCEPTED, header=OTLP_HEADER)
    log_id = request_log(request.query_params.get("log", "default"))
    settings = receiver.settings
    body = await read_body(request, settings.api_max_body_bytes)
    # Off the event loop: a large export takes seconds to decode and read, and every other
    # request of the API server would wait for it.
    decoded, agent_events, refused_records = await run_in_threadpool(_decoded, body, media_type, signal, log_id)
    rejected: list[dict[str, Any]] = []
    cuts: set[int] = set()
    records: dict[int, str] = {}
    raws: dict[int, Any] = {}  # each event as mapped, by index: what a dead letter shows

    def mapped(known: TraceSessions) -> list[tuple[int | None, dict[str, Any]]]:
        """The request's events, each span in the session ``known`` (what L1 holds of its trace)
        and the request choose (:func:`span_events`); run under the receiver's append lock."""
        checked: list[tuple[int, dict[str, Any]]] = []
        items = [*refused_records, *agent_events, *span_events(decoded, log_id=log_id, known=known)]
        for index, item in enumerate(items):
            raws[index] = item.event if isinstance(item, Accepted) else item.raw
            if isinstance(item, Accepted):
                event, reason, cut = check_event(item.event, principal, log_id, settings.max_event_bytes)
                if event is not None:
                    checked.append((index, event))
                    records[index] = item.record
                    if cut:
                        cuts.add(index)
                    continue
                rejected.append({"index": index, "reason": reason, "record": item.record})
            else:
                rejected.append({"index": index, "reason": item.reason, "record": item.record})
        # A span's tool calls and an agent's own messages are in no turn: framed, as /v1/events does.
        framed, _ = frame_loose_events(checked)
        links = known.links(log_id, (event for _, event in checked))
        return [*framed, *((None, link) for link in links)]

    answer = await run_in_threadpool(receiver.append, mapped, rejected, log_id, principal, cuts=cuts)
    await run_in_threadpool(receiver.settle, f"/v1/{signal}", log_id, answer, raws)
    refused = {str(r.get("record", r["index"])).split(" ")[0] for r in answer["rejected"]}
    reasons = "; ".join(sorted({r["reason"] for r in answer["rejected"]}))
    if answer["truncated"]:
        cut = ", ".join(f"{records[item['index']].split(' ')[0]} ({item['originalBytes']} bytes)"
                        for item in answer["truncated"])
        reasons = "; ".join(filter(None, [reasons, (
            f"{len(answer['truncated'])} event(s) over USL_MAX_EVENT_BYTES were appended cut to "
            f"{answer['truncated'][0]['limitBytes']} bytes, as fields._truncated records: {cut}")]))
    return _response(media_type, len(refused), reasons[:1000], signal)
