"""OpenTelemetry GenAI spans (OTLP, JSON shape) → ASP v1 events, with lineage.

Spans are read as the OTLP/JSON encoding has them (``resourceSpans[].scopeSpans[].spans[]``,
hex ``traceId`` / ``spanId``, typed attribute values); ``planner.otlp`` turns protobuf into the
same shape. Only spans with ``gen_ai.operation.name`` become events; ``docs/importers.md`` has the
mapping. In short:

- the session is the span's ``gen_ai.conversation.id``; a span without one (the conventions
  put it on ``invoke_agent`` and inference spans, not on ``execute_tool``) goes where L1 already
  has it (an exporter's retry), else to its nearest ancestor's conversation (in the request or in
  L1), else to its trace's (the one L1 knows, else the earliest span naming one in the request),
  else to ``otel-<traceId>``. What L1 knows comes from :class:`TraceSessions`, which the
  receiver feeds with the log's events. The choice is the event's ``sessionId`` in L1, and the
  first event of every span records its trace and span in ``payload.otel``, so nothing decides
  again: a receiver rebuilt from L1 knows every earlier choice. Once a trace's conversation is
  known, ``otel-<traceId>`` gets one ``x.otel.conversation`` event naming it as
  ``parentSessionId`` (:meth:`TraceSessions.links`), so lineage leads from the conversation to
  the spans that came before it;
- ``invoke_agent`` → ``run.started`` / ``run.ended`` (runId from the span), the agent's
  ``gen_ai.agent.*`` in its fields; its captured input and output messages;
- ``chat`` (also ``generate_content``, ``text_completion``) → a turn: ``turn.started``, its input
  messages (history repeated by later calls collapses: such a message's id is its place and
  content in the conversation), its output messages, ``turn.ended``;
- ``execute_tool`` → ``tool.call`` (``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
  ``gen_ai.tool.call.arguments``) and ``tool.result`` (``gen_ai.tool.call.result``, status from
  the span status);
- lineage: the first event of every span has the id ``anchor(traceId, spanId)``, and every
  span's first event names ``anchor(parent span)`` as its ``parentEventId``, so parent links
  hold across export batches; an event's ``runId`` is its nearest ``invoke_agent`` ancestor's
  (a parent span outside the batch is taken to be that run).

Ids are hashes of trace, span and content: a span exported twice yields the same events.

GenAI *log records* (``POST /v1/logs``: the events the instrumentations emit through the logs
API, e.g. OpenAI's ``gen_ai.user.message`` and ``gen_ai.choice`` with the message content, which
their spans then lack) are read as the span they name: :func:`log_spans` gathers a span's records
into one span of the shape above, its messages as ``gen_ai.input.messages`` /
``gen_ai.output.messages``, so they become the same events (same ids) as those content
attributes on the span itself would, in the span's session and turn.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from streams.asp import ROLES, json_kind, validate_event
from streams.exceptions import SchemaError
from streams.importers.base import Accepted, Rejected, raw_text, stable_id, time_from_posix

__all__ = ["AGENT_OPERATIONS", "CHAT_OPERATIONS", "TOOL_OPERATIONS", "TraceSessions", "attributes", "iter_spans",
           "log_spans", "span_events"]

AGENT_OPERATIONS = frozenset({"invoke_agent", "create_agent", "invoke_workflow"})
CHAT_OPERATIONS = frozenset({"chat", "generate_content", "text_completion"})
TOOL_OPERATIONS = frozenset({"execute_tool"})
_STATUS_ERROR = {2, "STATUS_CODE_ERROR"}


def _json_of(text: str, otherwise: Any) -> Any:
    """``text`` read as the JSON it holds; ``otherwise`` when it holds none (attribute values
    carry JSON as strings, and some carry plain text in the same place)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return otherwise


def attributes(items: Any) -> dict[str, Any]:
    """OTLP key/value list → plain dict (``{"key", "value": {"stringValue": ...}}``)."""
    found: dict[str, Any] = {}
    for item in _list(items):
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            found[item["key"]] = _value(item.get("value"))
    return found


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _value(value: Any) -> Any:
    if not isinstance(value, dict):
        return None
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return value["intValue"]
    if "arrayValue" in value:
        return [_value(v) for v in _list(_dict(value["arrayValue"]).get("values"))]
    if "kvlistValue" in value:
        return attributes(_dict(value["kvlistValue"]).get("values"))
    if "bytesValue" in value:
        return _bytes_text(value["bytesValue"])
    return None


def _bytes_text(encoded: Any) -> Any:
    """A ``bytesValue`` (base64, in OTLP JSON and as :mod:`planner.otlp` decodes protobuf) as the
    text it holds when its bytes are UTF-8: an SDK sends a byte array as such (a JavaScript
    ``Uint8Array``, a Go ``[]byte`` log body), and its base64 became the message text, found by
    no search for its words. Other bytes stay the base64 that was sent."""
    if not isinstance(encoded, str):
        return encoded
    try:
        return base64.b64decode(encoded, validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return encoded


def iter_spans(request: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(resource attributes, span) for every span of an ExportTraceServiceRequest."""
    for resource_spans in _list(request.get("resourceSpans")):
        if not isinstance(resource_spans, dict):
            continue
        resource = attributes(_dict(resource_spans.get("resource")).get("attributes"))
        for scope_spans in _list(resource_spans.get("scopeSpans")):
            for span in _list(_dict(scope_spans).get("spans")):
                if isinstance(span, dict):
                    yield resource, span


def _hex(value: Any) -> str:
    """An id as lowercase hex; "" for none, for what is no id, and for an id of zeroes, which
    OTLP calls invalid and the Collector reads as no id (a ``parentSpanId`` of zeroes: a root)."""
    read = _id_hex(value)
    return "" if not read.strip("0") else read


def _id_hex(value: Any) -> str:
    if not isinstance(value, str) or not value:
        return ""
    if all(c in "0123456789abcdefABCDEF" for c in value):
        return value.lower()
    try:  # base64, as protobuf's JSON mapping writes bytes
        return base64.b64decode(value, validate=True).hex()
    except ValueError:
        return ""  # not an id: the span is refused for it


def _id_problem(value: Any, name: str, size: int) -> str | None:
    """Why ``value`` is no span ``name`` of ``size`` bytes, or None. OTLP: a trace id is 16
    bytes, a span id 8, and one of another length or of zeroes is invalid (the Collector
    refuses the request); hex of any length was taken, and such a span's lineage matched no
    conforming span's. A protobuf id's bytes arrive as their hex, so both encodings are held
    to it."""
    if value is None or value == "":
        return f"a span needs a {name}"
    read = _id_hex(value)
    if read and len(read) == 2 * size and read.strip("0"):
        return None
    if read and not read.strip("0"):
        return f"{name} {str(value)[:48]!r} is all zeroes, which OTLP calls invalid (no id)"
    if read and len(read) % 2 == 0:
        return (f"{name} {str(value)[:48]!r} is an id of {len(read) // 2} bytes; OTLP's is {size} bytes "
                f"({2 * size} hex digits)")
    return (f"{name} {str(value)[:48]!r} is not hex of the right length (OTLP: {2 * size} hex digits, an "
            f"id of {size} bytes, or its base64 as protobuf's JSON mapping writes it)")


def _span_duplicates(span: dict[str, Any]) -> str | None:
    """:func:`_duplicate_problem` of a span's attributes and of each of its events'."""
    return _duplicate_problem([("the span's attributes", span.get("attributes"))] + [
        (f"the span's events[{index}].attributes", _dict(event).get("attributes"))
        for index, event in enumerate(_list(span.get("events")))])


def _duplicate_problem(lists: list[tuple[str, Any]]) -> str | None:
    """Why a span or log record is refused for an attribute key given twice with different
    values in one of its ``(where, key/value list)``, or None. OTLP gives each key once per
    list; read as a dict, the last copy stood and the first was dropped without a word (two
    ``gen_ai.input.messages``: one conversation lost). Which one the sender meant is not ours to
    guess; the same value twice says one thing and is read once."""
    for where, items in lists:
        seen: dict[str, Any] = {}
        for item in _list(items):
            if not isinstance(item, dict) or not isinstance(item.get("key"), str):
                continue
            key, value = item["key"], _value(item.get("value"))
            if key in seen and seen[key] != value:
                return (f"attribute {key[:64]!r} is given twice in {where} with different values "
                        "(OTLP: each key once per list); send the one that holds")
            seen[key] = value
    return None


def _time_problem(value: Any, name: str) -> str:
    """Why ``value`` is not a span time (``_time`` read none)."""
    if value is None or value == "":
        return f"a span needs {name}"
    try:
        int(value)
    except (TypeError, ValueError):
        return f"{name} {str(value)[:48]!r} is not a number (nanoseconds since the Unix epoch)"
    return f"{name} {str(value)[:48]!r} is not a time after the Unix epoch in nanoseconds"


def _time(nanos: Any) -> str | None:
    try:
        value = int(nanos)
        return time_from_posix(value / 1e9) if value > 0 else None
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _messages(value: Any) -> list[dict[str, Any]]:
    """``gen_ai.input.messages`` / ``output.messages``: a JSON string (or list) of
    ``{"role", "parts": [{"type": "text", "content"}, {"type": "tool_call", ...}]}``.

    Instrumentations do not all write that shape: one message alone, an array attribute of
    JSON strings, a plain string. Each is read as the messages it holds, and what is no message
    as the text it is, never dropped: content a span carried must be searchable."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return [_plain_message(value)]
        if not isinstance(value, list | dict):
            return [_plain_message(orjson.dumps(value).decode())]
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return []
    found: list[dict[str, Any]] = []
    for item in value:
        if isinstance(item, str):
            parsed = _json_of(item, None)
            found.append(parsed if isinstance(parsed, dict) else _plain_message(item))
        elif isinstance(item, dict):
            found.append(item)
    return found


def _plain_message(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


#: ``llm.request.type`` of the instrumentations that predate ``gen_ai.operation.name``
#: (OpenLLMetry's) → the operation it names.
_REQUEST_TYPES = {"chat": "chat", "completion": "text_completion"}
#: Span events of the GenAI conventions before 1.37 that carry a message of the input.
_INPUT_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                 "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
_NUMBERED = re.compile(r"gen_ai\.(prompt|completion)\.(\d+)\.(role|content|tool_calls\.(\d+)\.(id|name|arguments))")
#: The event the conventions from 1.37 on may record a call's messages on, in place of the span's
#: attributes (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``).
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"


#: OpenInference's span kinds (``openinference.span.kind``) → the GenAI operation they amount to.
_OPENINFERENCE_KINDS = {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent"}
_OPENINFERENCE_MESSAGE = re.compile(r"llm\.(input|output)_messages\.(\d+)\.message\.(.+)")
_OPENINFERENCE_PART = re.compile(r"contents\.(\d+)\.message_content\.(type|text)")
_OPENINFERENCE_CALL = re.compile(r"tool_calls\.(\d+)\.tool_call\.(id|function\.name|function\.arguments)")


def _from_openinference(attrs: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` of an OpenInference span (Arize Phoenix's instrumentations: OpenAI, Anthropic,
    LangChain, LlamaIndex, the OpenAI Agents SDK, ...) with the GenAI attributes it amounts to,
    where it states none: ``openinference.span.kind`` ``LLM`` / ``TOOL`` / ``AGENT`` as the
    operation, the flattened ``llm.input_messages.N.message.*`` / ``llm.output_messages.*``
    (role, content or text contents, tool calls, a tool message's ``tool_call_id``) as the
    messages, ``llm.model_name``, ``llm.token_count.prompt`` / ``completion``, a tool's ``tool.name`` and ``input.value`` / ``output.value`` as its call
    and result, an agent's ``input.value`` / ``output.value`` as its messages. Such a span has
    no ``gen_ai.operation.name``: it was ignored, answered 200, nothing appended. Other kinds
    (``CHAIN``, ``RETRIEVER``, ...) stay ignored, as spans of no GenAI operation are; a
    ``session.id`` on any span names the conversation (:func:`_conversation`). Spans of neither
    are read as OpenLLMetry's (:func:`_from_traceloop`)."""
    kind = attrs.get("openinference.span.kind")
    if not isinstance(kind, str) or isinstance(attrs.get("gen_ai.operation.name"), str):
        return _from_traceloop(attrs)
    operation = _OPENINFERENCE_KINDS.get(kind.upper())
    if operation is None:
        return attrs
    found = dict(attrs)
    found["gen_ai.operation.name"] = operation
    for old, new in (("llm.model_name", "gen_ai.request.model"), ("llm.token_count.prompt", "gen_ai.usage.input_tokens"),
                     ("llm.token_count.completion", "gen_ai.usage.output_tokens"),
                     ("agent.name", "gen_ai.agent.name"), ("tool.name", "gen_ai.tool.name"),
                     ("tool.description", "gen_ai.tool.description")):
        if new not in found and attrs.get(old) not in (None, ""):
            found[new] = attrs[old]
    if operation == "execute_tool":
        for old, new in (("input.value", "gen_ai.tool.call.arguments"), ("output.value", "gen_ai.tool.call.result"),
                         ("tool_call.id", "gen_ai.tool.call.id"), ("tool.id", "gen_ai.tool.call.id")):
            if new not in found and attrs.get(old) not in (None, ""):
                found[new] = attrs[old]
        return found
    messages: dict[tuple[str, int], dict[str, Any]] = {}
    for key, value in attrs.items():
        if (match := _OPENINFERENCE_MESSAGE.fullmatch(key)) is not None:
            messages.setdefault((match[1], int(match[2])), {})[match[3]] = value
    built: dict[str, list[dict[str, Any]]] = {"input": [], "output": []}
    for (side, _index), values in sorted(messages.items()):
        message = _openinference_message(values, "user" if side == "input" else "assistant")
        if message is not None:
            built[side].append(message)
    for side, key in (("input", "gen_ai.input.messages"), ("output", "gen_ai.output.messages")):
        if key in found:
            continue
        if built[side]:
            found[key] = built[side]
        elif operation == "invoke_agent" and isinstance(attrs.get(f"{side}.value"), str) and attrs[f"{side}.value"]:
            found[key] = _agent_value(attrs[f"{side}.value"], side)
    return found


#: Where the JSON object of a LangChain chain's or agent's inputs or outputs holds the text
#: (OpenInference writes the object when it is more than one string: ``{"input": ...,
#: "chat_history": [...]}``, ``{"output": ..., "intermediate_steps": [...]}``), in this order.
_AGENT_TEXT_KEYS = ("input", "question", "query", "output", "answer", "result", "text", "content")
#: LangChain's message types (``{"type": "human", "content"}``) → the role they are.
_LANGCHAIN_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _agent_value(value: str, side: str) -> Any:
    """An OpenInference agent's ``input.value`` / ``output.value`` as the messages it holds: text
    (the OpenAI Agents SDK's run input, a chain's single string), JSON of messages (the Agents
    SDK's input items), or the JSON object of a LangChain run's inputs or outputs, read as the
    text it holds under ``_AGENT_TEXT_KEYS`` or as its ``messages`` (LangGraph's state; the
    output's last one, the answer). Such an object was read as a message of no role or
    parts and dropped without a word; one of none of these shapes is kept as the JSON it is."""
    parsed = _json_of(value, None)
    if isinstance(parsed, dict) and "role" not in parsed and "parts" not in parsed:
        history = [message for message in map(_langchain_message, _list(parsed.get("messages")))
                   if message is not None]
        if history:
            return history if side == "input" else history[-1:]
        value = next((parsed[key] for key in _AGENT_TEXT_KEYS if isinstance(parsed.get(key), str) and parsed[key]),
                     value)
    elif side == "input":
        return value
    return [{"role": "user" if side == "input" else "assistant", "parts": [{"type": "text", "content": value}]}]


def _langchain_message(item: Any) -> dict[str, Any] | None:
    """A message of a LangChain state's ``messages``: the conventions' or OpenAI's shape as it
    is, LangChain's ``{"type": "human", "content"}`` (or its serialised ``{"lc": 1, "kwargs":
    {...}}``) as the role it names; None for what is no message."""
    if not isinstance(item, dict):
        return None
    if "role" in item:
        return item
    fields = _dict(item.get("kwargs")) if item.get("lc") is not None else item
    role = _LANGCHAIN_ROLES.get(str(fields.get("type")))
    if role is None or fields.get("content") in (None, "", []):
        return None
    return {"role": role, "content": fields["content"]}


#: OpenLLMetry's ``traceloop.span.kind`` of the spans its decorators and agent instrumentations
#: make (``@tool``, ``@agent``) → the GenAI operation they amount to.
_TRACELOOP_KINDS = {"tool": "execute_tool", "agent": "invoke_agent"}


def _from_traceloop(attrs: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` of an OpenLLMetry (Traceloop) ``tool`` or ``agent`` span with the GenAI
    attributes it amounts to, where it states no ``gen_ai.operation.name``: the name of its
    entity (``traceloop.entity.name``) as the tool's or agent's, a tool's
    ``traceloop.entity.input`` (``{"args": [], "kwargs": {...}}``: its keyword arguments) and
    ``traceloop.entity.output`` as its call's arguments and result. Such spans were ignored
    (answered 200): a decorated tool's calls were searchable nowhere."""
    operation = _TRACELOOP_KINDS.get(str(attrs.get("traceloop.span.kind")))
    if operation is None or isinstance(attrs.get("gen_ai.operation.name"), str):
        return attrs
    found = {**attrs, "gen_ai.operation.name": operation}
    name = attrs.get("traceloop.entity.name")
    key = "gen_ai.tool.name" if operation == "execute_tool" else "gen_ai.agent.name"
    if key not in found and isinstance(name, str) and name:
        found[key] = name
    if operation == "execute_tool":
        arguments = attrs.get("traceloop.entity.input")
        if isinstance(arguments, str):
            parsed = _json_of(arguments, None)
            if isinstance(parsed, dict) and set(parsed) <= {"args", "kwargs"} and not parsed.get("args") \
                    and isinstance(parsed.get("kwargs"), dict):
                arguments = parsed["kwargs"]  # a function's call as the decorator records it
        for new, value in (("gen_ai.tool.call.arguments", arguments),
                           ("gen_ai.tool.call.result", attrs.get("traceloop.entity.output"))):
            if new not in found and value not in (None, ""):
                found[new] = value
    return found


def _openinference_message(values: dict[str, Any], role: str) -> dict[str, Any] | None:
    """One flattened OpenInference message (``role``, ``content``, ``contents.N.*``,
    ``tool_calls.N.*``, ``tool_call_id``) in the conventions' ``{"role", "parts"}`` shape."""
    role = values["role"] if isinstance(values.get("role"), str) and values["role"] else role
    texts: dict[int, str] = {}
    calls: dict[int, dict[str, Any]] = {}
    for key, value in values.items():
        if (part := _OPENINFERENCE_PART.fullmatch(key)) is not None and part[2] == "text" and isinstance(value, str):
            texts[int(part[1])] = value
        elif (call := _OPENINFERENCE_CALL.fullmatch(key)) is not None:
            calls.setdefault(int(call[1]), {})[call[2].removeprefix("function.")] = value
    content = values.get("content")
    text = content if isinstance(content, str) and content else "\n".join(texts[i] for i in sorted(texts))
    parts: list[dict[str, Any]] = []
    if role == "tool" and text:
        parts.append({"type": "tool_call_response", "response": text,
                      **({"id": values["tool_call_id"]} if isinstance(values.get("tool_call_id"), str) else {})})
    elif text:
        parts.append({"type": "text", "content": text})
    for _index, stated in sorted(calls.items()):
        arguments = stated.get("arguments")
        if isinstance(arguments, str):
            arguments = _json_of(arguments, arguments)
        parts.append({"type": "tool_call", "id": stated.get("id"), "name": stated.get("name"),
                      "arguments": arguments})
    return {"role": role, "parts": parts} if parts else None


def _with_older_content(attrs: dict[str, Any], span: dict[str, Any]) -> dict[str, Any]:
    """``attrs`` with the operation and the messages that instrumentations older than the
    conventions' ``gen_ai.input.messages`` / ``gen_ai.output.messages`` record otherwise, in
    that shape: numbered ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*`` attributes and
    ``llm.request.type`` (OpenLLMetry), the ``gen_ai.*.message`` / ``gen_ai.choice`` span
    events (the conventions up to 1.36), the ``gen_ai.content.prompt`` / ``.completion``
    events (OpenLIT), and ``gen_ai.usage.prompt_tokens`` / ``completion_tokens``. Such a span
    was answered 200 and its content (or, without ``gen_ai.operation.name``, the whole span)
    was dropped without a word. The ``gen_ai.*`` attributes of a
    ``gen_ai.client.inference.operation.details`` span event (the conventions' place for the
    content from 1.37 on, besides the span) count as the span's. What the span states in the
    current shape is kept as it is."""
    found = dict(attrs)
    if not isinstance(found.get("gen_ai.operation.name"), str) and \
            _REQUEST_TYPES.get(str(found.get("llm.request.type"))):
        found["gen_ai.operation.name"] = _REQUEST_TYPES[str(found["llm.request.type"])]
    for old, new in (("gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens"),
                     ("gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens")):
        if new not in found and old in found:
            found[new] = found[old]
    numbered: dict[tuple[str, int], dict[str, Any]] = {}
    for key, value in attrs.items():
        if (match := _NUMBERED.fullmatch(key)) is not None:
            fields = numbered.setdefault((match[1], int(match[2])), {})
            if match[4] is None:
                fields[match[3]] = value
            else:  # OpenLLMetry's gen_ai.completion.N.tool_calls.K.*: a message of calls alone had none
                fields.setdefault("calls", {}).setdefault(int(match[4]), {})[match[5]] = value
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for (kind, _index), fields in sorted(numbered.items()):
        role = fields["role"] if isinstance(fields.get("role"), str) else ("user" if kind == "prompt" else "assistant")
        message = _numbered_message(role, fields)
        if message is not None:
            (inputs if kind == "prompt" else outputs).append(message)
    for item in _list(span.get("events")):
        event = _dict(item)
        name, values = event.get("name"), attributes(event.get("attributes"))
        if name == _DETAILS_EVENT:
            for key, value in values.items():
                if key.startswith("gen_ai.") and key not in found:
                    found[key] = value
        elif name in _INPUT_EVENTS and isinstance(values.get("content"), str):
            inputs.append({"role": values.get("role") if isinstance(values.get("role"), str)
                           else _INPUT_EVENTS[name], "content": values["content"]})
        elif name == "gen_ai.choice":
            message = values.get("message")
            if isinstance(message, str):
                message = _json_of(message, {"content": message})
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                outputs.append({"role": "assistant", "content": message["content"]})
        elif name == "gen_ai.content.prompt" and isinstance(values.get("gen_ai.prompt"), str):
            inputs.append({"role": "user", "content": values["gen_ai.prompt"]})
        elif name == "gen_ai.content.completion" and isinstance(values.get("gen_ai.completion"), str):
            outputs.append({"role": "assistant", "content": values["gen_ai.completion"]})
    if inputs and "gen_ai.input.messages" not in found:
        found["gen_ai.input.messages"] = inputs
    if outputs and "gen_ai.output.messages" not in found:
        found["gen_ai.output.messages"] = outputs
    return found


def _numbered_message(role: str, fields: dict[str, Any]) -> dict[str, Any] | None:
    """One of OpenLLMetry's numbered messages (``role``, ``content``, ``tool_calls``) in the
    older events' shape; None when it holds nothing. Its ``content`` may be the provider's list of
    content blocks as JSON (Anthropic's, Gemini's), read as those blocks, not as their JSON."""
    content = fields.get("content")
    if isinstance(content, str) and content.startswith("["):
        blocks = _json_of(content, None)
        if isinstance(blocks, list) and blocks and all(isinstance(b, dict) and "type" in b for b in blocks):
            content = blocks
    calls = []
    for _index, stated in sorted(_dict(fields.get("calls")).items()):
        arguments = stated.get("arguments")
        if isinstance(arguments, str):
            arguments = _json_of(arguments, arguments)
        if stated.get("name"):
            calls.append({"type": "tool_call", "id": stated.get("id"), "name": stated["name"], "arguments": arguments})
    if not (isinstance(content, str | list) and content) and not calls:
        return None
    return {"role": role, **({"content": content} if isinstance(content, str | list) else {}),
            **({"parts": calls} if calls else {})}


def _text(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    parts, content = message.get("parts"), message.get("content")
    if isinstance(parts, str):  # text where the conventions have a list of parts
        parts = [parts]
    if isinstance(content, str):  # the older events shape
        content = [content]
    # The conventions' parts, then the content blocks that instrumentations passing the
    # provider's own messages through write (OpenAI's and Anthropic's ``content`` list,
    # ``{"type": "text", "text"}``): those spans were answered 200 and their text dropped.
    for part in [*_list(parts), *_list(content)]:
        if isinstance(part, str):
            texts.append(part)
        elif not isinstance(part, dict):
            continue
        elif part.get("type") in _TEXT_PARTS or ("type" not in part and ("content" in part or "text" in part)):
            # A part of no type that holds text (``{"content": ...}``, as instrumentations write
            # the conventions' text part without its type) is that text: it was dropped.
            said = part["content"] if "content" in part else part.get("text")
            if isinstance(said, str):
                texts.append(said)
            elif said is not None:
                texts.append(orjson.dumps(said).decode())
        elif part.get("type") in ("tool_call", "tool_use"):
            call = {**part, "arguments": part["input"]} if "arguments" not in part and "input" in part else part
            calls.append({k: call.get(k) for k in ("id", "name", "arguments") if call.get(k) is not None})
        elif part.get("type") in ("tool_call_response", "tool_result"):
            response = part.get("response", part.get("content"))
            if isinstance(response, list):
                response = _text({"content": response})[0]
            if response is not None:
                texts.append(response if isinstance(response, str) else orjson.dumps(response).decode())
        elif part.get("type") in _MEDIA_PARTS:
            # An image, audio or file the message carried: named by its kind and where it is (a
            # blob's base64 is no text), not dropped without a word.
            texts.append(" ".join([f"[{part['type']}]", *(str(part[key]) for key in _MEDIA_NAMES
                                                          if isinstance(part.get(key), str) and part[key])]))
    return "\n".join(texts), calls


#: Part types whose ``content`` (or, in the providers' blocks, ``text``) is the message's text.
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
#: The conventions' parts (1.37) that hold media, not text, and the fields that name them.
_MEDIA_PARTS = frozenset({"blob", "file", "uri"})
_MEDIA_NAMES = ("modality", "mime_type", "uri", "file_id")


def _reasoning(message: dict[str, Any]) -> str:
    """The text of a message's ``reasoning`` parts (the model's thinking, semconv 1.37), which
    the importers of agents' own transcripts keep as a hidden thinking message."""
    return "\n".join(part["content"] for part in _list(message.get("parts"))
                     if isinstance(part, dict) and part.get("type") == "reasoning"
                     and isinstance(part.get("content"), str) and part["content"])


class _Trace:
    __slots__ = ("conversation", "linked", "orphaned", "spans")

    def __init__(self) -> None:
        self.conversation = ""  # the first conversation its spans' events went to, in L1 order
        self.orphaned = ""  # the time of its first span event in otel-<traceId>, if any
        self.linked = False  # otel-<traceId> names the conversation (x.otel.conversation)
        self.spans: dict[str, str] = {}  # spanId -> the session its events went to


class TraceSessions:
    """What a log's events say about its OpenTelemetry traces: the session each span's events
    went to and each trace's conversation, read from the ``payload.otel`` of the events
    :func:`span_events` makes (:meth:`feed` them in L1 order; feeding one twice changes nothing).

    A receiver keeps one per log, rebuilt from L1 when it starts, so the session it chooses for a
    span follows every earlier span of the trace, whichever request or receiver brought them.
    It holds the ``max_traces`` traces fed or looked up last: a span of a trace that fell out is
    mapped as though its trace were new (a retry of its own spans then is not recognized)."""

    def __init__(self, max_traces: int = 100_000) -> None:
        self._traces: OrderedDict[str, _Trace] = OrderedDict()
        self._max_traces = max_traces
        self._unlinked: set[str] = set()  # conversation known, otel-<traceId> not yet linked to it

    def _get(self, trace: str) -> _Trace | None:
        entry = self._traces.get(trace)
        if entry is not None:
            self._traces.move_to_end(trace)
        return entry

    def feed(self, event: dict[str, Any]) -> None:
        mark = _mark(event)
        if mark is None:
            return
        trace = mark["traceId"]
        entry = self._get(trace)
        if entry is None:
            entry = self._traces[trace] = _Trace()
            if len(self._traces) > self._max_traces:
                dropped, _ = self._traces.popitem(last=False)
                self._unlinked.discard(dropped)
        session = str(event.get("sessionId"))
        if mark.get("conversation"):
            entry.linked = True
        elif mark.get("spanId"):
            entry.spans.setdefault(mark["spanId"], session)
            if session == f"otel-{trace}":
                entry.orphaned = entry.orphaned or str(event.get("time"))
            else:
                entry.conversation = entry.conversation or session
        if entry.conversation and entry.orphaned and not entry.linked:
            self._unlinked.add(trace)
        else:
            self._unlinked.discard(trace)

    def span_session(self, trace: str, span_id: str) -> str:
        """The session the span's events went to ("" if none did)."""
        entry = self._get(trace)
        return entry.spans.get(span_id, "") if entry is not None else ""

    def conversation(self, trace: str) -> str:
        entry = self._get(trace)
        return entry.conversation if entry is not None else ""

    def links(self, log_id: str, events: Iterable[dict[str, Any]] = ()) -> list[dict[str, Any]]:
        """The ``x.otel.conversation`` events still missing: one in ``otel-<traceId>`` for every
        trace with events there whose conversation is known, from the events fed or from
        ``events`` (about to be appended). Ids derive from log and trace, so whichever
        receiver appends one first, the others' copies are duplicates."""
        revealed: dict[str, str] = {}
        for event in events:
            mark = _mark(event)
            if mark is not None and mark.get("spanId") and event["sessionId"] != f"otel-{mark['traceId']}":
                revealed.setdefault(mark["traceId"], str(event["sessionId"]))
        found = []
        for trace in sorted(self._unlinked | revealed.keys()):
            entry = self._traces.get(trace)
            if entry is None or not entry.orphaned or entry.linked:
                continue
            conversation = entry.conversation or revealed[trace]
            found.append(validate_event({
                "eventId": stable_id("otel", log_id, trace, "conversation"), "logId": log_id,
                "sessionId": f"otel-{trace}", "parentSessionId": conversation, "type": "x.otel.conversation",
                "time": entry.orphaned, "fields": {"conversationId": conversation, "traceId": trace},
                "payload": {"otel": {"traceId": trace, "conversation": conversation}}}))
        return found


def _mark(event: dict[str, Any]) -> dict[str, Any] | None:
    payload = event.get("payload")
    mark = payload.get("otel") if isinstance(payload, dict) else None
    return mark if isinstance(mark, dict) and isinstance(mark.get("traceId"), str) else None


class _Batch:
    """The spans of one request, for the lineage lookups."""

    def __init__(self, spans: list[tuple[dict[str, Any], dict[str, Any]]], known: TraceSessions) -> None:
        self.spans = {(_hex(s.get("traceId")), _hex(s.get("spanId"))):
                      (r, s, _from_openinference(attributes(s.get("attributes")))) for r, s in spans}
        self.known = known

    def session_of(self, trace: str, span: dict[str, Any], attrs: dict[str, Any]) -> str:
        """Where L1 has its events (a retry must neither move nor duplicate them); else the
        span's conversation; else its nearest ancestor's conversation, the ancestor in the request
        or in L1; else its trace's, as L1 knows it or as the earliest span of the trace in the
        request names it (by start time then spanId); else ``otel-<traceId>``. A span sent again
        naming another conversation stays where it went: moved, its messages would land in the
        other session under a turn whose start and end L1 already holds elsewhere, a turn that
        never closes there and so holds the log's indexes back."""
        known = self.known.span_session(trace, _hex(span.get("spanId")))
        if known:
            return known
        own = _conversation(attrs)
        if own:
            return own
        orphan = f"otel-{trace}"
        parent, seen = _hex(span.get("parentSpanId")), 0
        while parent and seen < 64:
            found = self.spans.get((trace, parent))
            above_attrs = found[2] if found is not None else {}
            recorded = self.known.span_session(trace, parent)
            conversation = _conversation(above_attrs) or (recorded if recorded != orphan else "")
            if conversation:
                return conversation
            if found is None:
                break
            parent, seen = _hex(found[1].get("parentSpanId")), seen + 1
        if self.known.conversation(trace):
            return self.known.conversation(trace)
        named = sorted((_nanos(other.get("startTimeUnixNano")), span_id, _conversation(other_attrs))
                       for (other_trace, span_id), (_r, other, other_attrs) in self.spans.items()
                       if other_trace == trace and _conversation(other_attrs))
        return named[0][2] if named else orphan

    def run_of(self, trace: str, span: dict[str, Any], attrs: dict[str, Any]) -> str | None:
        if attrs.get("gen_ai.operation.name") in AGENT_OPERATIONS:
            return stable_id("run", trace, _hex(span.get("spanId")))
        parent = _hex(span.get("parentSpanId"))
        seen = 0
        while parent and seen < 64:
            found = self.spans.get((trace, parent))
            if found is None:
                return stable_id("run", trace, parent)  # outside this batch: taken to be the run
            _resource, above, above_attrs = found
            if above_attrs.get("gen_ai.operation.name") in AGENT_OPERATIONS:
                return stable_id("run", trace, parent)
            parent, seen = _hex(above.get("parentSpanId")), seen + 1
        return None


def span_events(request: dict[str, Any], *, log_id: str = "default",
                known: TraceSessions | None = None) -> Iterator[Accepted | Rejected]:
    """The ASP events of every GenAI span of ``request`` (an OTLP/JSON-shaped dict); ``known``:
    what the log already holds of the traces (nothing if None)."""
    spans = list(iter_spans(request))
    batch = _Batch(spans, known if known is not None else TraceSessions(max_traces=0))
    started: set[str] = set()
    for index, (resource, span) in enumerate(spans):
        trace, span_id = _hex(span.get("traceId")), _hex(span.get("spanId"))
        from_logs = bool(span.get(_FROM_LOGS))
        record = f"logRecords@{trace}/{span_id}" if from_logs else f"span[{index}] {trace}/{span_id}"
        if span.get("attributes") is not None and not isinstance(span["attributes"], list):
            # Read as no attributes, the span was no GenAI span: ignored, answered 200.
            yield Rejected(record, "the span's attributes must be a list of {key, value} objects, "
                                   f"not {json_kind(span['attributes'])}", raw_text(span))
            continue
        attrs = _with_older_content(_from_openinference(attributes(span.get("attributes"))), span)
        operation = attrs.get("gen_ai.operation.name")
        if not isinstance(operation, str):
            continue
        parent = span.get("parentSpanId")
        problem = (_id_problem(span.get("traceId"), "traceId", 16)
                   or _id_problem(span.get("spanId"), "spanId", 8)
                   # Read as no parent, the span was a root: its run and lineage lost, silently.
                   # One of zeroes is a root's, as the Collector reads it (_hex).
                   or (None if parent in (None, "") or (_id_hex(parent) and not _hex(parent))
                       else _id_problem(parent, "parentSpanId", 8))
                   or (None if from_logs else _span_duplicates(span)))
        start, end = _time(span.get("startTimeUnixNano")), _time(span.get("endTimeUnixNano"))
        if problem is not None or start is None:
            problem = problem or ("no record has a timeUnixNano or observedTimeUnixNano after the Unix epoch"
                                  if from_logs else _time_problem(span.get("startTimeUnixNano"), "startTimeUnixNano"))
            yield Rejected(record, problem, raw_text(span))
            continue
        yield from _Span(log_id, record, resource, span, attrs, operation, trace, span_id, start,
                         end or start, batch.run_of(trace, span, attrs), started,
                         batch.session_of(trace, span, attrs)).events()


class _Span:
    """The events of one GenAI span."""

    def __init__(self, log_id: str, record: str, resource: dict[str, Any], span: dict[str, Any],
                 attrs: dict[str, Any], operation: str, trace: str, span_id: str, start: str, end: str,
                 run_id: str | None, started: set[str], session: str) -> None:
        self.log_id, self.record, self.span, self.attrs = log_id, record, span, attrs
        self.operation, self.trace, self.span_id = operation, trace, span_id
        self.start, self.end, self.run_id, self.started = start, end, run_id, started
        self.session = session
        self.service = resource.get("service.name")
        parent = _hex(span.get("parentSpanId"))
        self.parent_event = _anchor(log_id, trace, parent) if parent else None
        self.turn_id = stable_id("turn", trace, span_id) if operation in CHAT_OPERATIONS else None
        status = _dict(span.get("status"))
        code = status.get("code")
        self.failed = isinstance(code, int | str) and code in _STATUS_ERROR
        self.status_message = str(status.get("message") or "")
        self.usage: dict[str, int] | None = None  # the span's token counts until an event carries them

    def event(self, event_type: str, event_id: str, time: str, *, role: str | None = None,
              fields: dict[str, Any] | None = None, parent: str | None = None,
              turn: bool = True, run: bool = True, hidden: bool = False) -> Accepted | Rejected:
        event: dict[str, Any] = {"eventId": event_id, "logId": self.log_id, "sessionId": self.session,
                                 "type": event_type, "time": time, "fields": fields or {}}
        if hidden:
            event["visibility"] = "hidden"
        if event_id == _anchor(self.log_id, self.trace, self.span_id):  # the span's first event
            event["payload"] = {"otel": {"traceId": self.trace, "spanId": self.span_id}}
        for key, value in (("runId", self.run_id if run else None), ("turnId", self.turn_id if turn else None),
                           ("role", role), ("parentEventId", parent)):
            if value is not None:
                event[key] = value
        try:
            return Accepted(validate_event(event, record=self.record), self.record)
        except SchemaError as exc:
            return Rejected(self.record, f"{exc.reason} (field {exc.field})" if exc.field else exc.reason,
                            raw_text(self.span))

    def events(self) -> Iterator[Accepted | Rejected]:
        if self.session not in self.started:
            self.started.add(self.session)
            fields = {"source": "opentelemetry", **({"service": self.service} if self.service else {})}
            yield self.event("session.started", stable_id("otel", self.log_id, self.session, "session.started"),
                             self.start, fields=fields, turn=False, run=False)
        anchor = _anchor(self.log_id, self.trace, self.span_id)
        model = self.attrs.get("gen_ai.response.model") or self.attrs.get("gen_ai.request.model")
        if self.operation in TOOL_OPERATIONS:
            yield from self._tool(anchor)
            return
        if self.operation in CHAT_OPERATIONS:
            yield self.event("turn.started", anchor, self.start, role="user", parent=self.parent_event)
            opening = None
        else:
            agent = {key.removeprefix("gen_ai."): value for key, value in self.attrs.items()
                     if key.startswith("gen_ai.agent.") or key in ("gen_ai.provider.name", "gen_ai.system")}
            fields = {"operation": self.operation, **{_camel(k): v for k, v in agent.items()},
                      **({"model": model} if model else {})}
            yield self.event("run.started", anchor, self.start, fields=fields, parent=self.parent_event)
            opening = anchor
        # Only an inference span's usage is counted: an agent span's is the sum of its inference
        # calls (so the conventions and the instrumentations have it), and both would count twice.
        self.usage = _usage(self.attrs) if self.operation in CHAT_OPERATIONS and not self.span.get(_FROM_LOGS) \
            else None  # a span's log records leave its token counts to the span
        last = anchor  # the span's last event so far
        for item in self._messages(anchor, model):
            if isinstance(item, Accepted):
                last = item.event["eventId"]
            yield item
        if self.failed:
            yield self.event("error", stable_id("otel", anchor, "error"), self.end,
                             fields={"message": self.status_message or f"{self.operation} failed"})
        closing = "turn.ended" if self.operation in CHAT_OPERATIONS else "run.ended"
        # Without captured output messages (content capture is often off) the turn's end counts it.
        ending = {"usage": self.usage, **({"model": model} if model else {})} if self.usage else None
        # A span's log records close the turn they opened, or reopened after the span closed it
        # (exporters send the two in either order): an end of their own, not the span's, whose
        # id would make whichever came second a duplicate. It names the last message they gave:
        # a span's records may come in several exports (SimpleLogRecordProcessor sends each
        # alone), and each export that reopens the turn must close it again, where one id for
        # all was a duplicate that left the turn open after the second export (and the log's
        # indexes waiting at it); a retried export names the same message, and adds nothing.
        ended = stable_id("otel", anchor, "ended", "logs", last) if self.span.get(_FROM_LOGS) \
            else stable_id("otel", anchor, "ended")
        yield self.event(closing, ended, self.end, parent=opening, fields=ending)

    def _messages(self, anchor: str, model: Any) -> Iterator[Accepted | Rejected]:
        history = _messages(self.attrs.get("gen_ai.input.messages"))
        instructions = self.attrs.get("gen_ai.system_instructions")
        if instructions:  # a JSON array of parts, or plain text
            parts: Any = instructions
            if isinstance(parts, str):
                parts = _json_of(parts, [{"type": "text", "content": instructions}])
            history = [{"role": "system", "parts": parts if isinstance(parts, list) else []}, *history]
        for position, message in enumerate(history):
            text, calls = _text(message)
            role = message.get("role") if isinstance(message.get("role"), str) and message["role"] in ROLES \
                else "user"
            thought = _reasoning(message)
            if thought:
                digest = hashlib.sha256(f"{role}\x1f{thought}".encode()).hexdigest()[:16]
                yield self.event("message", stable_id("otel", self.log_id, self.session, "in", position, "thinking",
                                                      digest),
                                 self.start, role=role, fields={"text": thought, "kind": "thinking"}, hidden=True)
            if not text and not calls:
                continue
            # Each call repeats the conversation so far: the same message at the same place
            # in the same conversation is one event.
            digest = hashlib.sha256(f"{role}\x1f{text}".encode()).hexdigest()[:16]
            event_id = stable_id("otel", self.log_id, self.session, "in", position, digest)
            yield self.event("message", event_id, self.start, role=role,
                             fields={"text": text, **({"toolCalls": calls} if calls else {})})
        for position, message in enumerate(_messages(self.attrs.get("gen_ai.output.messages"))):
            text, calls = _text(message)
            thought = _reasoning(message)
            if thought:
                yield self.event("message", stable_id("otel", anchor, "out", position, "thinking"), self.end,
                                 role="assistant", fields={"text": thought, "kind": "thinking",
                                                           **({"model": model} if model else {})},
                                 parent=anchor, hidden=True)
            if not text and not calls:
                continue
            fields: dict[str, Any] = {"text": text}
            if calls:
                fields["toolCalls"] = calls
            if model:
                fields["model"] = model
            if self.usage:  # on the first output message that is an event
                fields["usage"], self.usage = self.usage, None
            yield self.event("message", stable_id("otel", anchor, "out", position), self.end,
                             role="assistant", fields=fields, parent=anchor)

    def _tool(self, anchor: str) -> Iterator[Accepted | Rejected]:
        name = str(self.attrs.get("gen_ai.tool.name") or "tool")
        call_id = str(self.attrs.get("gen_ai.tool.call.id") or self.span_id)
        arguments = self.attrs.get("gen_ai.tool.call.arguments")
        if isinstance(arguments, str):
            arguments = _json_of(arguments, arguments)
        call_fields: dict[str, Any] = {"toolName": name, "toolCallId": call_id,
                                       "input": arguments if isinstance(arguments, dict) else
                                       ({} if arguments is None else {"arguments": arguments})}
        for key in ("gen_ai.tool.type", "gen_ai.tool.description"):
            if self.attrs.get(key) is not None:
                call_fields[_camel(key.removeprefix("gen_ai."))] = self.attrs[key]
        yield self.event("tool.call", anchor, self.start, role="assistant", fields=call_fields,
                         parent=self.parent_event, turn=False)
        result = self.attrs.get("gen_ai.tool.call.result")
        output = result if isinstance(result, str) else ("" if result is None else orjson.dumps(result).decode())
        if self.failed and not output:
            output = self.status_message
        yield self.event("tool.result", stable_id("otel", anchor, "result"), self.end, role="tool",
                         fields={"toolCallId": call_id, "toolName": name,
                                 "status": "error" if self.failed else "ok", "output": output},
                         parent=anchor, turn=False)


_FROM_LOGS = "_uslFromLogRecords"  # marks a span log_spans made: no OTLP field has an underscore
#: The log records of the GenAI conventions up to 1.36 (and OpenAI's instrumentation since) that
#: carry one input message each, by event name → the message's role.
_MESSAGE_RECORDS = {f"gen_ai.{role}.message": role for role in ("system", "user", "assistant", "tool")}


def log_spans(request: dict[str, Any]) -> tuple[dict[str, Any], list[Rejected]]:
    """An ExportLogsServiceRequest (OTLP/JSON-shaped) as an ExportTraceServiceRequest of the
    spans its GenAI records belong to, for :func:`span_events`; and the records refused.

    A record is GenAI when its event name (``eventName``, or the ``event.name`` attribute of
    older SDKs) starts with ``gen_ai.``; other records (an application's logs) are ignored, as
    spans without ``gen_ai.operation.name`` are. Each span's records become one ``chat`` span
    (the operation a ``gen_ai.client.inference.operation.details`` record names, if any) from
    its first record's time to its last: ``gen_ai.{system,user,assistant,tool}.message`` in
    order are its input messages, ``gen_ai.choice`` by ``index`` its output messages (their
    ``tool_calls`` as tool-call parts, a tool message's ``id`` on its response part), and the
    ``gen_ai.*`` attributes of an operation-details record are the span's. A GenAI record
    without the trace and span it was emitted in is refused: no span, no turn or session to
    put it in."""
    spans: dict[tuple[int, str, str], dict[str, Any]] = {}
    resources: list[dict[str, Any]] = []
    rejected: list[Rejected] = []
    number = -1
    for resource_logs in _list(request.get("resourceLogs")):
        resource_logs = _dict(resource_logs)
        resources.append(_dict(resource_logs.get("resource")))
        for scope_logs in _list(resource_logs.get("scopeLogs")):
            for record in _list(_dict(scope_logs).get("logRecords")):
                number += 1
                record = _dict(record)
                values = attributes(record.get("attributes"))
                name = record.get("eventName") or values.get("event.name")
                if not isinstance(name, str) or not name.startswith("gen_ai."):
                    continue
                trace, span_id = _hex(record.get("traceId")), _hex(record.get("spanId"))
                twice = _duplicate_problem([("the record's attributes", record.get("attributes"))])
                if twice is not None:
                    rejected.append(Rejected(f"logRecord[{number}] {name}", twice, raw_text(record)))
                    continue
                malformed = [problem for value, field, size in (
                    (record.get("traceId"), "traceId", 16), (record.get("spanId"), "spanId", 8))
                    if value not in (None, "") and (problem := _id_problem(value, field, size))]
                if not trace or not span_id or malformed:
                    # A malformed id is named as /v1/traces names it, not as one left out (OTLP:
                    # a record of an invalid id is in no trace, and a GenAI record needs one).
                    rejected.append(Rejected(f"logRecord[{number}] {name}", "; ".join(malformed) or (
                        "a GenAI log record needs the traceId and spanId of the span it was emitted in (the "
                        "instrumentation's context)"), raw_text(record)))
                    continue
                at = _nanos(record.get("timeUnixNano")) or _nanos(record.get("observedTimeUnixNano"))
                span = spans.setdefault((len(resources) - 1, trace, span_id), {
                    "traceId": trace, "spanId": span_id, "times": [], "inputs": [], "outputs": [], "details": [],
                    "conversation": None})
                span["times"].append(at)
                body = _value(record.get("body"))
                if name in _MESSAGE_RECORDS:
                    span["inputs"].append(_log_message(_MESSAGE_RECORDS[name], body, values))
                elif name == "gen_ai.choice":
                    choice = _dict(body)
                    message = choice.get("message") if isinstance(choice.get("message"), dict) else choice
                    index = choice.get("index")
                    span["outputs"].append((index if isinstance(index, int) else len(span["outputs"]),
                                            _log_message("assistant", message, {})))
                elif name == _DETAILS_EVENT:
                    span["details"] += _list(record.get("attributes"))
                if _conversation(values):
                    span["conversation"] = span["conversation"] or _conversation(values)
    by_resource: dict[int, list[dict[str, Any]]] = {}
    for (resource, _trace, _span), found in spans.items():
        times = [at for at in found["times"] if at > 0]
        typed = [item for item in found["details"] if isinstance(item, dict) and isinstance(item.get("key"), str)
                 and item["key"].startswith("gen_ai.")]
        stated = {item["key"] for item in typed}
        own = [("gen_ai.operation.name", "chat"), ("gen_ai.conversation.id", found["conversation"]),
               ("gen_ai.input.messages", [m for m in found["inputs"] if m] or None),
               ("gen_ai.output.messages", [m for _, m in sorted(found["outputs"], key=lambda o: o[0]) if m] or None)]
        for key, value in own:
            if value and key not in stated:
                text = value if isinstance(value, str) else orjson.dumps(value).decode()
                typed.append({"key": key, "value": {"stringValue": text}})
        by_resource.setdefault(resource, []).append({
            "traceId": found["traceId"], "spanId": found["spanId"], "name": "log records",
            "startTimeUnixNano": str(min(times)) if times else None,
            "endTimeUnixNano": str(max(times)) if times else None, "attributes": typed, _FROM_LOGS: True})
    return {"resourceSpans": [{"resource": resources[index], "scopeSpans": [{"spans": found}]}
                              for index, found in sorted(by_resource.items())]}, rejected


def _log_message(role: str, body: Any, values: dict[str, Any]) -> dict[str, Any] | None:
    """One message of a log record's body (``{"content", "tool_calls", "id"}``, or the text
    itself) in the conventions' ``{"role", "parts"}`` shape; None when it holds nothing."""
    message = _dict(body) if not isinstance(body, str) else {"content": body}
    parts: list[dict[str, Any]] = []
    content = message.get("content", values.get("content"))
    if role == "tool" and content is not None:
        parts.append({"type": "tool_call_response", "response": content,
                      **({"id": message["id"]} if isinstance(message.get("id"), str) else {})})
    elif isinstance(content, str) and content:
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):  # already parts, or OpenAI's list of content parts
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("text", "tool_call", "tool_call_response"):
                parts.append(part if "content" in part or part.get("type") != "text"
                             else {"type": "text", "content": part.get("text")})
    for call in _list(message.get("tool_calls")):
        call = _dict(call)
        function = _dict(call.get("function"))
        arguments = function.get("arguments", call.get("arguments"))
        if isinstance(arguments, str):
            arguments = _json_of(arguments, arguments)
        parts.append({"type": "tool_call", "id": call.get("id"), "name": function.get("name", call.get("name")),
                      "arguments": arguments})
    if not parts:
        return None
    return {"role": message["role"] if isinstance(message.get("role"), str) else role, "parts": parts}


#: Where instrumentations name the conversation a span belongs to, the conventions' key first:
#: OpenInference's ``session.id``, OpenLLMetry's association property, Langfuse's. A span naming
#: it only so went to ``otel-<traceId>``: one session per trace, a chat split across them.
_CONVERSATION_KEYS = ("gen_ai.conversation.id", "session.id", "traceloop.association.properties.session_id",
                      "langfuse.session.id")


def _conversation(attrs: dict[str, Any]) -> str:
    for key in _CONVERSATION_KEYS:
        value = attrs.get(key)
        if value not in (None, "") and not isinstance(value, dict | list):
            return str(value)
    return ""


def _nanos(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _anchor(log_id: str, trace: str, span_id: str) -> str:
    return stable_id("otel", log_id, trace, span_id)


def _camel(dotted: str) -> str:
    head, *rest = dotted.replace("_", ".").split(".")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _usage(attrs: dict[str, Any]) -> dict[str, int] | None:
    usage = {name: attrs.get(key) for key, name in (
        ("gen_ai.usage.input_tokens", "inputTokens"), ("gen_ai.usage.output_tokens", "outputTokens"))}
    counted = {name: value for name, value in usage.items() if isinstance(value, int) and not isinstance(value, bool)}
    return counted or None
