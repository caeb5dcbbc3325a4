"""Claude Code's own OpenTelemetry events (``POST /v1/logs``) → ASP v1 events.

With ``CLAUDE_CODE_ENABLE_TELEMETRY=1`` and ``OTEL_LOGS_EXPORTER=otlp`` Claude Code exports what
a session does as OTLP log records (scope ``com.anthropic.claude_code.events``), not as GenAI
spans: each record's body is ``claude_code.<name>`` and its ``event.name`` attribute ``<name>``
(``user_prompt``, ``api_request``, ``tool_result``, ``tool_decision``, ``api_error``, ...), with
``session.id`` (the session's UUID, the one its transcript is named after), ``prompt.id`` (2.x:
the prompt every later record of that exchange belongs to), ``event.sequence`` and the event's
own attributes. They name no trace or span, so the GenAI log path (:func:`log_spans`) has nothing
to put them in; read as an application's own logs, they were ignored and the export answered 200
with nothing appended.

The mapping (``docs/importers.md``):

- ``user_prompt`` starts a turn (``turn.started``, then a user ``message`` of ``prompt``; Claude
  Code writes ``<REDACTED>`` there unless ``OTEL_LOG_USER_PROMPTS=1``, kept as it says);
- ``tool_result`` → ``tool.call`` (``tool_name``, ``tool_use_id``, the input of ``tool_input`` or
  ``tool_parameters``) and its ``tool.result`` (``status`` ``error`` when ``success`` is false, the
  ``error`` as output: the telemetry carries no tool output);
- ``api_request`` → hidden ``x.claude-code.api_request`` with ``model`` and ``usage`` (token
  counts, so SQL counts them), ``costUsd``, ``durationMs``;
- ``api_error`` → ``error``;
- any other ``claude_code.*`` record → hidden ``x.claude-code.<name>`` with its attributes.

A record's events carry the turn of its ``prompt.id``, so the records of one exchange form one
turn whichever export batch brought them; each request closes every turn it gave events with a
``turn.ended`` named after the last of them (a later batch of the same prompt closes it again,
and a retry names the same event, adding nothing). Records without ``prompt.id`` (1.x) after a
``user_prompt`` of the same request are in its turn; the others are loose, framed per request as
every receiver frames loose events. Ids are hashes of the record's content: an exporter's retry
appends nothing new. A record without ``session.id`` (``OTEL_METRICS_INCLUDE_SESSION_ID=false``)
or without a time is refused with its reason, never guessed into a session.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from typing import Any

import orjson

from streams.asp import validate_event
from streams.exceptions import SchemaError
from streams.importers.base import Accepted, Rejected, raw_text, stable_id, valid_time
from streams.importers.otel import _dict, _duplicate_problem, _list, _time, attributes

__all__ = ["SCOPE", "claude_code_events", "claude_code_name"]

SCOPE = "com.anthropic.claude_code.events"
_PREFIX = "claude_code."
#: Attributes every record carries, which say where and when, not what happened.
_CONTEXT = frozenset({"event.name", "event.timestamp", "event.sequence", "session.id", "prompt.id",
                      "user.id", "user.email", "user.account_uuid", "organization.id", "terminal.type",
                      "app.version"})
#: Counts and measures Claude Code exports as strings as often as numbers.
_NUMERIC = frozenset({"duration_ms", "cost_usd", "status_code", "attempt", "prompt_length"})
_USAGE = (("input_tokens", "inputTokens"), ("output_tokens", "outputTokens"),
          ("cache_read_tokens", "cacheReadInputTokens"), ("cache_creation_tokens", "cacheCreationInputTokens"))


def claude_code_name(record: dict[str, Any], values: dict[str, Any], scope: str) -> str | None:
    """The event name (``user_prompt``) of a Claude Code record, or None for any other record.
    Claude Code names it in the body (``claude_code.user_prompt``) and, bare, in ``event.name``;
    an SDK that sets the record's ``eventName`` may give either."""
    for name in (record.get("eventName"), values.get("event.name"), _dict(record.get("body")).get("stringValue")):
        if isinstance(name, str) and name.startswith(_PREFIX) and len(name) > len(_PREFIX):
            return name[len(_PREFIX):]
    bare = record.get("eventName") or values.get("event.name")
    if scope == SCOPE and isinstance(bare, str) and bare and not bare.startswith("gen_ai."):
        return bare
    return None


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return None
    # "nan", "inf" and "1e400" parse as floats no count is: int() raises on them, and JSON has none.
    return value if isinstance(value, float) and math.isfinite(value) else None


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _json_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def _camel(key: str) -> str:
    head, *rest = key.replace(".", "_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _time_of(record: dict[str, Any], values: dict[str, Any]) -> str | None:
    return (_time(record.get("timeUnixNano")) or _time(record.get("observedTimeUnixNano"))
            or valid_time(values.get("event.timestamp")))


class _Session:
    """What one request said of a session so far: its turn, the events each turn got."""

    def __init__(self) -> None:
        self.started = False
        self.turn: str | None = None  # the turn of the last user_prompt without prompt.id
        self.last: dict[str, dict[str, Any]] = {}  # turnId -> its last event in the request


def claude_code_events(request: dict[str, Any], *, log_id: str = "default") -> list[Accepted | Rejected]:
    """The ASP events of every Claude Code record of an ExportLogsServiceRequest (OTLP/JSON
    shape), in the request's order, with a ``turn.ended`` after each turn they touched; the
    records refused as :class:`Rejected`. Other records are left to :func:`log_spans`."""
    out: list[Accepted | Rejected] = []
    sessions: dict[str, _Session] = {}
    number = -1
    for resource_logs in _list(request.get("resourceLogs")):
        resource = attributes(_dict(_dict(resource_logs).get("resource")).get("attributes"))
        for scope_logs in _list(_dict(resource_logs).get("scopeLogs")):
            scope = _dict(_dict(scope_logs).get("scope")).get("name")
            for record in _list(_dict(scope_logs).get("logRecords")):
                number += 1
                record = _dict(record)
                values = attributes(record.get("attributes"))
                name = claude_code_name(record, values, scope if isinstance(scope, str) else "")
                if name is None:
                    continue
                where = f"logRecord[{number}] claude_code.{name}"
                problem = _duplicate_problem([("the record's attributes", record.get("attributes"))])
                session_id = values.get("session.id")
                time = _time_of(record, values)
                if problem is None and not (isinstance(session_id, str) and session_id):
                    problem = ("a Claude Code event needs its session.id attribute (Claude Code leaves it out "
                               "with OTEL_METRICS_INCLUDE_SESSION_ID=false): there is no session to put it in")
                if problem is None and time is None:
                    problem = "no timeUnixNano, observedTimeUnixNano or event.timestamp gives the event a time"
                if problem is not None:
                    out.append(Rejected(where, problem, raw_text(record)))
                    continue
                assert isinstance(session_id, str) and time is not None
                state = sessions.setdefault(session_id, _Session())
                if name == "user_prompt":  # the session's next exchange: the ones before it are over
                    out.extend(_ends(log_id, session_id, state))
                out.extend(_Record(log_id, where, record, values, name, session_id, time, resource, state).events())
    for session_id, state in sessions.items():
        out.extend(_ends(log_id, session_id, state))
    return out


def _ends(log_id: str, session_id: str, state: _Session) -> list[Accepted | Rejected]:
    """A ``turn.ended`` for each turn the request gave events since the last call, timed at and
    named after its last one: a later batch of the turn's records closes it again under another
    id, a retry of this one adds nothing."""
    ends = [_accepted({"eventId": stable_id("otel-cc", log_id, session_id, turn_id, "ended", last["eventId"]),
                       "logId": log_id, "sessionId": session_id, "type": "turn.ended", "turnId": turn_id,
                       "time": last["time"], "fields": {}}, "claude_code turn end")
            for turn_id, last in state.last.items()]
    state.last.clear()
    return ends


def _accepted(event: dict[str, Any], where: str, raw: Any = None) -> Accepted | Rejected:
    try:
        return Accepted(validate_event(event, record=where), where)
    except SchemaError as exc:
        return Rejected(where, f"{exc.reason} (field {exc.field})" if exc.field else exc.reason,
                        raw_text(raw if raw is not None else event))


class _Record:
    """The events of one Claude Code record."""

    def __init__(self, log_id: str, where: str, record: dict[str, Any], values: dict[str, Any], name: str,
                 session_id: str, time: str, resource: dict[str, Any], state: _Session) -> None:
        self.log_id, self.where, self.record, self.values, self.name = log_id, where, record, values, name
        self.session, self.time, self.resource, self.state = session_id, time, resource, state
        # The record's identity is its content: a retried export maps to the same ids. Not the
        # time the SDK observed it, which it stamps anew when the event is sent again.
        said = [name, record.get("timeUnixNano") or record.get("observedTimeUnixNano"), values]
        try:
            content = orjson.dumps(said, option=orjson.OPT_SORT_KEYS, default=str)
        except orjson.JSONEncodeError:  # an intValue past 64 bits, or nested past orjson's depth
            content = repr(said).encode("utf-8", "surrogatepass")
        self.digest = hashlib.sha256(content).hexdigest()[:32]
        prompt = values.get("prompt.id")
        self.turn = stable_id("turn", log_id, session_id, "claude-code-prompt",
                              prompt if isinstance(prompt, str) and prompt else self.digest) \
            if (isinstance(prompt, str) and prompt) or name == "user_prompt" else state.turn

    def event(self, kind: str, part: str, *, role: str | None = None, fields: dict[str, Any] | None = None,
              parent: str | None = None, hidden: bool = False, turn: bool = True) -> Accepted | Rejected:
        event: dict[str, Any] = {"eventId": stable_id("otel-cc", self.log_id, self.session, self.digest, part),
                                 "logId": self.log_id, "sessionId": self.session, "type": kind,
                                 "time": self.time, "fields": fields or {}}
        if hidden:
            event["visibility"] = "hidden"
        for key, value in (("turnId", self.turn if turn else None), ("role", role), ("parentEventId", parent)):
            if value is not None:
                event[key] = value
        made = _accepted(event, self.where, self.record)
        if isinstance(made, Accepted) and self.turn and turn:
            self.state.last[self.turn] = made.event
        return made

    def events(self) -> Iterator[Accepted | Rejected]:
        if not self.state.started:
            self.state.started = True
            service = self.resource.get("service.name")
            version = self.resource.get("service.version")
            yield _accepted({
                "eventId": stable_id("otel-cc", self.log_id, self.session, "session.started"), "logId": self.log_id,
                "sessionId": self.session, "type": "session.started", "time": self.time,
                "fields": {"source": "opentelemetry", **({"service": service} if service else {}),
                           **({"serviceVersion": version} if version else {})}}, self.where)
        own = {_camel(key): (_number(value) if key in _NUMERIC and _number(value) is not None else value)
               for key, value in sorted(self.values.items()) if key not in _CONTEXT}
        if self.name == "user_prompt":
            self.state.turn = None if isinstance(self.values.get("prompt.id"), str) else self.turn
            yield self.event("turn.started", "turn", role="user")
            prompt = self.values.get("prompt")
            yield self.event("message", "prompt", role="user", fields={
                "text": prompt if isinstance(prompt, str) else "",
                **{key: value for key, value in own.items() if key != "prompt"}})
        elif self.name == "tool_result":
            yield from self._tool(own)
        elif self.name == "api_request":
            usage = {name: int(count) for key, name in _USAGE
                     if isinstance(count := _number(self.values.get(key)), int | float)}
            yield self.event("x.claude-code.api_request", "api_request", hidden=True, fields={
                **{key: value for key, value in own.items() if key not in {_camel(k) for k, _ in _USAGE}},
                **({"usage": usage} if usage else {})})
        elif self.name == "api_error":
            message = self.values.get("error")
            yield self.event("error", "error", fields={
                "message": message if isinstance(message, str) and message else "Claude Code API request failed",
                **{key: value for key, value in own.items() if key != "error"}})
        else:
            yield self.event(f"x.claude-code.{self.name}", self.name, hidden=True, fields=own)

    def _tool(self, own: dict[str, Any]) -> Iterator[Accepted | Rejected]:
        name = self.values.get("tool_name")
        name = name if isinstance(name, str) and name else "tool"
        call_id = self.values.get("tool_use_id")
        call_id = call_id if isinstance(call_id, str) and call_id else f"claude-code-otel-{self.digest[:16]}"
        tool_input = _json_object(self.values.get("tool_input")) or _json_object(self.values.get("tool_parameters"))
        extra = {key: value for key, value in own.items()
                 if key not in ("toolName", "toolUseId", "toolInput", "success", "error")}
        call = self.event("tool.call", "call", role="assistant", fields={
            "toolName": name, "toolCallId": call_id, "input": tool_input or {}, **extra})
        yield call
        failed = _flag(self.values.get("success")) is False
        error = self.values.get("error")
        yield self.event("tool.result", "result", role="tool", fields={
            "toolCallId": call_id, "toolName": name, "status": "error" if failed else "ok",
            "output": error if failed and isinstance(error, str) else ""},
            parent=call.event["eventId"] if isinstance(call, Accepted) else None)
