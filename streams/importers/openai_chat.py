"""OpenAI chat-completions message lists → ASP v1 events.

Accepted shapes: a JSON array of messages; an object ``{"messages": [...], "id"?, "created"?,
"model"?, "title"?}``; a JSON array of such conversations (objects or message arrays); or JSONL
with one conversation per line. Conversations carry no per-message times, so message ``i`` is
timed ``created + i`` seconds (``created`` defaults to 0, the Unix epoch): deterministic, never
the wall clock. The mapping is documented in ``docs/importers.md``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from streams.exceptions import ImportFormatError
from streams.importers.base import (
    Accepted,
    Rejected,
    SessionEmitter,
    parse_json,
    raw_text,
    read_lines,
    small_payload,
    time_from_posix,
)

__all__ = ["ROLES", "SOURCE", "iter_openai_chat"]

SOURCE = "openai-chat"
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# 9999-12-31T23:59:59Z: message i is timed created + i, and no later time can be written.
_LAST_POSIX_SECOND = 253402300799

Result = Accepted | Rejected


def iter_openai_chat(
    path: Path, *, label: str, log_id: str = "default", acl: dict[str, Any] | None = None
) -> Iterator[Accepted | Rejected]:
    """Events of every conversation in ``path``, and a Rejected per unusable record."""
    for conversation, conv_label, index in _conversations(path, label):
        if isinstance(conversation, Rejected):
            yield conversation
            continue
        yield from _Conversation(
            conversation, label=conv_label, key=(label, index), log_id=log_id, acl=acl,
        ).run()


def _conversations(path: Path, label: str) -> Iterator[tuple[Any, str, object]]:
    """(conversation or Rejected, record label, position) for each conversation in the file."""
    if path.suffix.lower() != ".jsonl":
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ImportFormatError(f"{path}: cannot read the file: {exc.strerror or exc}") from exc
        document, error = parse_json(data)
        if error is None:
            yield from _document_conversations(document, label)
            return
        if not _looks_like_jsonl(data):
            yield Rejected(label, error, raw_text(data)), label, 0
            return
    for number, line in read_lines(path):
        record = f"{label}:{number}"
        value, error = parse_json(line)
        if error is not None:
            yield Rejected(record, error, raw_text(line)), record, number
        else:
            yield value, record, number


def _looks_like_jsonl(data: bytes) -> bool:
    """A document that fails to parse whole is JSONL when a leading line parses alone."""
    lines = [line for line in data.splitlines() if line.strip()][:5]
    return any(parse_json(line)[1] is None and line.strip()[:1] in (b"{", b"[") for line in lines)


def _document_conversations(document: Any, label: str) -> Iterator[tuple[Any, str, object]]:
    is_message_list = isinstance(document, list) and any(
        isinstance(item, dict) and "role" in item for item in document
    )
    if isinstance(document, list) and not is_message_list:
        for index, item in enumerate(document):
            yield item, f"{label}#{index}", index
    else:
        yield document, label, 0


class _Conversation:
    """One conversation: its session identity, times, turns and tool-call bookkeeping."""

    def __init__(
        self, value: Any, *, label: str, key: tuple[str, object], log_id: str,
        acl: dict[str, Any] | None,
    ) -> None:
        self.value = value
        self.label = label
        self.key = key
        self.log_id = log_id
        self.acl = acl
        self.calls: dict[str, tuple[str, str]] = {}  # toolCallId → (eventId, toolName)
        self.function_calls: dict[str, tuple[str, str]] = {}  # legacy name → (eventId, id)

    def run(self) -> Iterator[Result]:
        meta, problem = _conversation_parts(self.value)
        if problem is not None:
            yield Rejected(self.label, problem, raw_text(self.value))
            return
        messages: list[Any] = meta["messages"]
        base: float = meta["created"]
        session_id = meta["id"] or _derived_session_id(self.key, messages)
        emitter = SessionEmitter(
            source=SOURCE, id_prefix="oai", session_id=session_id, log_id=self.log_id,
            acl=self.acl,
        )
        fields = {name: meta[name] for name in ("title", "model") if meta[name]}
        yield from emitter.start_session(
            time=time_from_posix(base), record=self.label, raw=self.value, fields=fields,
        )
        for index, message in enumerate(messages):
            record = f"{self.label}/messages[{index}]"
            time = time_from_posix(base + index)
            yield from self._message(emitter, message, index, time, record, meta["model"])
        last = f"{self.label}/messages[{len(messages) - 1}]" if messages else self.label
        yield from emitter.end_turn(record=last, raw="")
        yield emitter.emit(
            "session.ended", event_id=emitter.event_id("session.ended"),
            time=emitter.last_time or time_from_posix(base), record=last, raw="",
        )

    def _message(
        self, emitter: SessionEmitter, message: Any, index: int, time: str, record: str,
        model: str | None,
    ) -> Iterator[Result]:
        if not isinstance(message, dict):
            reason = f"messages[{index}] must be an object, not {type(message).__name__}"
            yield Rejected(record, reason, raw_text(message))
            return
        role = message.get("role")
        if role is None:
            yield Rejected(record, f"missing field 'messages[{index}].role'", raw_text(message))
            return
        if role not in ROLES:
            reason = f"field 'messages[{index}].role' is {role!r}, not one of {', '.join(ROLES)}"
            yield Rejected(record, reason, raw_text(message))
            return
        payload = small_payload(message)
        if role == "user":
            yield from emitter.start_turn(index, time=time, record=record, raw=message)
        if role in ("tool", "function"):
            yield self._tool_result(emitter, message, index, time, record, payload)
            return
        text = _content_text(message)
        tool_calls = message.get("tool_calls") or []
        legacy_call = message.get("function_call")
        if text or not (tool_calls or legacy_call):
            fields: dict[str, Any] = {"text": text}
            if isinstance(message.get("name"), str):
                fields["name"] = message["name"]
            if role == "assistant" and model:
                fields["model"] = model
            yield emitter.emit(
                "message", event_id=emitter.event_id(index, "message"), time=time,
                record=record, raw=message, role=role, fields=fields, payload=payload,
            )
            payload = None
        if role != "assistant":
            return
        if not isinstance(tool_calls, list):
            yield Rejected(record, f"field 'messages[{index}].tool_calls' must be a list", raw_text(message))
            tool_calls = []
        for position, call in enumerate(tool_calls):
            yield self._tool_call(emitter, call, index, position, time, record, message, payload)
            payload = None
        if legacy_call is not None:
            yield self._tool_call(
                emitter, {"id": None, "function": legacy_call}, index, "function_call",
                time, record, message, payload,
            )

    def _tool_call(
        self, emitter: SessionEmitter, call: Any, index: int, position: int | str, time: str,
        record: str, message: dict[str, Any], payload: Any,
    ) -> Result:
        legacy = position == "function_call"
        where = f"messages[{index}].function_call" if legacy else f"messages[{index}].tool_calls[{position}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            return Rejected(record, f"missing field '{where}.function'", raw_text(message))
        name = function.get("name")
        if not isinstance(name, str) or not name:
            return Rejected(record, f"missing field '{where}.function.name'", raw_text(message))
        call_id = call.get("id")
        if legacy:
            call_id = f"function_call-{index}"
        elif not isinstance(call_id, str) or not call_id:
            return Rejected(record, f"missing field '{where}.id'", raw_text(message))
        fields = {"toolName": name, "toolCallId": call_id, "input": _arguments(function.get("arguments"))}
        event_id = emitter.event_id(index, "tool_call", position)
        result = emitter.emit(
            "tool.call", event_id=event_id, time=time, record=record, raw=message,
            role="assistant", fields=fields, payload=payload,
        )
        if isinstance(result, Accepted):
            self.calls[call_id] = (event_id, name)
            if legacy:
                self.function_calls[name] = (event_id, call_id)
        return result

    def _tool_result(
        self, emitter: SessionEmitter, message: dict[str, Any], index: int, time: str,
        record: str, payload: Any,
    ) -> Result:
        name: str | None = message["name"] if isinstance(message.get("name"), str) else None
        parent: str | None = None
        call_id: Any
        if message["role"] == "function":
            # Legacy function results answer the latest call of the same name.
            if name is None:
                return Rejected(record, f"missing field 'messages[{index}].name'", raw_text(message))
            parent, call_id = self.function_calls.get(name, (None, f"function_call-{name}"))
        else:
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                return Rejected(record, f"missing field 'messages[{index}].tool_call_id'", raw_text(message))
            if call_id in self.calls:
                parent, name = self.calls[call_id]
        fields: dict[str, Any] = {"toolCallId": call_id}
        if name is not None:
            fields["toolName"] = name
        fields["status"] = "ok"
        fields["output"] = _content_text(message)
        return emitter.emit(
            "tool.result", event_id=emitter.event_id(index, "tool_result"), time=time,
            record=record, raw=message, role="tool", fields=fields, parent_event_id=parent,
            payload=payload,
        )


def _conversation_parts(value: Any) -> tuple[dict[str, Any], str | None]:
    """Messages, id, created, model and title of a conversation, or the problem with it."""
    meta: dict[str, Any] = {"messages": [], "id": None, "created": 0, "model": None, "title": None}
    if isinstance(value, list):
        meta["messages"] = value
        return meta, None
    if not isinstance(value, dict):
        return meta, f"a conversation must be a list of messages or an object, not {type(value).__name__}"
    messages = value.get("messages")
    if not isinstance(messages, list):
        return meta, "missing field 'messages' (a list of chat messages)"
    meta["messages"] = messages
    created = value.get("created")
    if created is not None:
        if isinstance(created, bool) or not isinstance(created, int | float) or created < 0:
            return meta, f"field 'created' must be Unix seconds, not {created!r}"
        if created + len(messages) > _LAST_POSIX_SECOND:
            return meta, f"field 'created' is past the year 9999: {created!r}"
        meta["created"] = created
    for name in ("id", "model", "title"):
        if isinstance(value.get(name), str) and value[name]:
            meta[name] = value[name]
    return meta, None


def _derived_session_id(key: tuple[str, object], messages: list[Any]) -> str:
    """``oai-`` + 16 hex of sha256(file, conversation position, first message)."""
    first = messages[0] if messages else None
    try:
        first_bytes = orjson.dumps(first, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        first_bytes = repr(first).encode()
    digest = hashlib.sha256(f"{key[0]}\x1f{key[1]}\x1f".encode() + first_bytes)
    return "oai-" + digest.hexdigest()[:16]


def _content_text(message: dict[str, Any]) -> str:
    """Text of a message: a string, ``null``, or parts (non-text parts as ``[type]``)."""
    content = message.get("content")
    if content is None:
        refusal = message.get("refusal")
        return refusal if isinstance(refusal, str) else ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                text = part.get("text", part.get("refusal"))
                parts.append(text if isinstance(text, str) else f"[{part.get('type', 'part')}]")
        return "\n".join(parts)
    return raw_text(content)


def _arguments(arguments: Any) -> dict[str, Any]:
    """The arguments object of a call; unparseable or non-object JSON is kept as ``_raw``."""
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        value, error = parse_json(arguments)
        if error is None and isinstance(value, dict):
            return value
    return {"_raw": arguments}
