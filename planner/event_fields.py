"""The fields each ASP event type needs, checked where the receivers take events in.

The ASP schema leaves ``fields`` an open object (docs/asp-v1.md lists each type's fields), so
``{"type": "message", "fields": {"text": 12345}}`` passes it; appended, the renderer shows
``[user] 12345``, a ``tool.call`` without a ``toolName`` string renders ``[tool.call]`` and
leaves a NULL ``toolName`` row in ``tool_calls``, a non-string output reaches the tool-results
index as Python's repr. So a receiver refuses, with the field and the reason, an event whose
field that the renderer (:mod:`streams.chunking.render`), the structured sink or the analytics
tables read has another type than they need. Only at the receivers: the worker takes what L1
already holds as it always did.

It is lenient where the importers write variants (``streams/importers``), as the renderer
reads them: a message's text may be ``content``, a tool's name ``name`` or ``tool``, a call's
arguments ``arguments`` or ``params``; a ``tool.result`` may omit ``toolName`` (Claude Code's
for a call it has not seen) and carry an empty ``toolCallId`` (Codex's for an output that
names no call). Other types, and custom ``x.*`` ones, are not checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streams.asp import json_kind

__all__ = ["fields_problem"]


def fields_problem(event: dict[str, Any]) -> str | None:
    """Why ``event``'s fields cannot be appended (naming the field), or None when they can."""
    check = _CHECKS.get(event.get("type", ""))
    fields = event.get("fields")
    return check(fields) if check is not None and isinstance(fields, dict) else None


def _first(fields: dict[str, Any], names: tuple[str, ...]) -> tuple[str, Any]:
    """The first of ``names`` that ``fields`` holds, and its value; the first name if none."""
    for name in names:
        if name in fields:
            return name, fields[name]
    return names[0], None


def _string(fields: dict[str, Any], names: tuple[str, ...], what: str, *, required: bool = True,
            empty: bool = True) -> str | None:
    name, value = _first(fields, names)
    if name not in fields:
        return f"{what} needs fields.{name}, a string (field $.fields.{name})" if required else None
    if not isinstance(value, str) or not (empty or value):
        kind = "an empty string" if value == "" else json_kind(value)
        return f"fields.{name} of {what} must be a {'' if empty else 'non-empty '}string, not {kind} (field $.fields.{name})"
    return None


def _message(fields: dict[str, Any]) -> str | None:
    return _string(fields, ("text", "content"), "a message")


def _tool_call(fields: dict[str, Any]) -> str | None:
    problem = (_string(fields, ("toolName", "name", "tool"), "a tool.call", empty=False)
               or _string(fields, ("toolCallId",), "a tool.call", empty=False))
    if problem:
        return problem
    name, value = _first(fields, ("input", "arguments", "params"))
    if name not in fields:
        return f"a tool.call needs fields.{name}, an object of its arguments ({{}} for none) (field $.fields.{name})"
    if not isinstance(value, dict):
        return (f"fields.{name} of a tool.call must be an object of its arguments, not {json_kind(value)} "
                f"(field $.fields.{name})")
    return None


def _tool_result(fields: dict[str, Any]) -> str | None:
    return (_string(fields, ("toolCallId",), "a tool.result")
            or _string(fields, ("toolName", "name", "tool"), "a tool.result", required=False, empty=False)
            or _string(fields, ("status",), "a tool.result", required=False)
            or _string(fields, ("output",), "a tool.result", required=False)
            or _string(fields, ("summary",), "a tool.result", required=False))


def _error(fields: dict[str, Any]) -> str | None:
    return _string(fields, ("message", "text", "error"), "an error")


_CHECKS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "message": _message, "tool.call": _tool_call, "tool.result": _tool_result, "error": _error}
