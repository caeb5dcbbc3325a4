"""The canonical text of a redacted ASP event: what a chunk says about that event.

Rendering is a pure, deterministic function of the event; its output is what byte offsets
point into, so changing it is a chunker version change. Formats (``docs/chunking.md``):

- ``message``         ``[ROLE] text``                              (``fields.text``;
  ``[ROLE thinking] text`` when ``fields.kind`` is ``thinking``), then a
  ``[tool.call NAME] key1=v1`` line per call of ``fields.toolCalls`` (``name``, ``arguments``)
- ``tool.call``       ``[tool.call NAME] key1=v1, key2=v2``        (``fields.toolName``,
  ``fields.input``; keys sorted, each value at most 400 characters, non-strings as JSON)
- ``tool.result``     ``[tool.result NAME STATUS] summary``        (``fields.summary``, else a
  truncated ``fields.output``: full results belong to the ACL-isolated tool-results index)
- ``error``           ``[error] message``
- ``session.started`` ``[session] title=…, cwd=…, model=…``       (only the keys present)
- ``episode.started`` ``[episode] title``                          (``fields.title`` or ``goal``)

Everything else renders nothing (``None``): hidden events, structural events
(``turn.*``, ``run.*``, ``episode.ended``, ``session.ended``, ``session.acl``), custom ``x.*``
types, and events whose content is empty.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_VALUE_CHARS", "TOOL_INPUT_KEYS", "param_keys", "render_event", "tool_name", "tool_status",
           "value_text"]

MAX_VALUE_CHARS = 400
"""Longest tool-call value or unsummarized tool output kept in a rendering (in characters)."""

_ELLIPSIS = "…"

TOOL_INPUT_KEYS = ("input", "arguments", "params")
"""Where a ``tool.call`` event carries its input, in order of preference."""


def render_event(event: dict[str, Any]) -> str | None:
    """The canonical text of ``event``, or ``None`` when it contributes no text to chunks."""
    if event.get("visibility", "visible") != "visible":
        return None
    render = _RENDERERS.get(event.get("type", ""))
    if render is None:
        return None
    fields = event.get("fields") or {}
    text = render(event, fields if isinstance(fields, dict) else {})
    return None if text is None else _valid_utf8(text)


def tool_name(event: dict[str, Any]) -> str | None:
    """The tool a ``tool.call`` / ``tool.result`` event names, if any."""
    fields = event.get("fields") or {}
    if not isinstance(fields, dict):
        return None
    for key in ("toolName", "name", "tool"):
        value = fields.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def tool_status(event: dict[str, Any]) -> str | None:
    """The status a ``tool.result`` event reports (``ok``, ``error``, …), if any."""
    fields = event.get("fields") or {}
    value = fields.get("status") if isinstance(fields, dict) else None
    if value is None or isinstance(value, str):
        return value or None
    return _compact(value)


def param_keys(event: dict[str, Any]) -> list[str]:
    """Sorted parameter keys of a ``tool.call`` event's input."""
    tool_input = _tool_input(event.get("fields") or {})
    return sorted(str(key) for key in tool_input) if isinstance(tool_input, dict) else []


def _message(event: dict[str, Any], fields: dict[str, Any]) -> str | None:
    text = _text(fields.get("text", fields.get("content")))
    # The calls a model's answer asks for, when they ride on the message (OpenTelemetry's
    # `tool_call` parts) instead of being tool.call events of their own as every importer makes
    # them: rendered as such an event would be, so an answer that only calls tools still says
    # which tool and with what (it rendered nothing, and its tool and arguments were unsearchable).
    calls = [_call_text(call) for call in fields.get("toolCalls") or () if isinstance(call, dict)] \
        if isinstance(fields.get("toolCalls"), list) else []
    if not text and not calls:
        return None
    label = event.get("role") or "message"
    if fields.get("kind") == "thinking":
        label += " thinking"
    return "\n".join(([f"[{label}] {text}"] if text else []) + calls)


def _tool_call(event: dict[str, Any], fields: dict[str, Any]) -> str:
    return _call_line(tool_name(event), _tool_input(fields))


def _call_text(call: dict[str, Any]) -> str:
    """A ``toolCalls`` item (``{"id", "name", "arguments"}``, the arguments an object or its
    JSON text) as its tool.call event renders."""
    name = call.get("name")
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            arguments = parsed
    return _call_line(name if isinstance(name, str) else None, arguments)


def _call_line(name: str | None, tool_input: Any) -> str:
    head = _head("tool.call", name)
    if isinstance(tool_input, dict):
        body = ", ".join(f"{key}={_value(tool_input[key])}" for key in sorted(tool_input, key=str))
    else:
        body = "" if tool_input is None else _value(tool_input)
    return f"{head} {body}" if body else head


def _tool_result(event: dict[str, Any], fields: dict[str, Any]) -> str:
    head = _head("tool.result", tool_name(event), tool_status(event))
    body = _text(fields.get("summary"))
    if not body:
        body = _truncate(_text(fields.get("output")))
    return f"{head} {body}" if body else head


def _error(event: dict[str, Any], fields: dict[str, Any]) -> str | None:
    for key in ("message", "text", "error"):
        text = _text(fields.get(key))
        if text:
            return f"[error] {text}"
    return None


def _session_started(event: dict[str, Any], fields: dict[str, Any]) -> str | None:
    parts = [f"{key}={_value(fields[key])}" for key in ("title", "cwd", "model") if fields.get(key)]
    return f"[session] {', '.join(parts)}" if parts else None


def _episode_started(event: dict[str, Any], fields: dict[str, Any]) -> str | None:
    title = _text(fields.get("title") or fields.get("goal"))
    return f"[episode] {title}" if title else None


_RENDERERS = {
    "message": _message,
    "tool.call": _tool_call,
    "tool.result": _tool_result,
    "error": _error,
    "session.started": _session_started,
    "episode.started": _episode_started,
}


def _tool_input(fields: dict[str, Any]) -> Any:
    for key in TOOL_INPUT_KEYS:
        if key in fields:
            return fields[key]
    return None


def _head(kind: str, *labels: str | None) -> str:
    named = [label for label in labels if label]
    return f"[{kind} {' '.join(named)}]" if named else f"[{kind}]"


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else _compact(value)


def _value(value: Any) -> str:
    return _truncate(value_text(value))


def value_text(value: Any) -> str:
    """A tool-call value as a rendering shows it before the cut: a string as it is, anything
    else as compact JSON."""
    return value if isinstance(value, str) else _compact(value)


def _compact(value: Any) -> str:
    # sort_keys so the rendering does not depend on the key order a producer happened to use.
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def _truncate(text: str) -> str:
    if len(text) <= MAX_VALUE_CHARS:
        return text
    return text[:MAX_VALUE_CHARS] + _ELLIPSIS


def _valid_utf8(text: str) -> str:
    # Lone surrogates (possible in JSON decoded by the stdlib) cannot become UTF-8 bytes, and
    # every offset we publish is a UTF-8 byte offset; replace them deterministically.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text
