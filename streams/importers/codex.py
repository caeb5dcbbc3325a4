"""Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) → ASP v1 events.

Every line is ``{"timestamp", "type", "payload"}``. ``session_meta`` opens the session (its
``payload.id`` is the sessionId); ``turn_context`` names the model of the turns that follow;
``response_item`` carries the conversation: ``message`` (a user message starts a human turn,
unless it is context the client injects, such as ``<environment_context>``), ``reasoning``
(hidden, its summary as text), ``function_call`` / ``custom_tool_call`` / ``local_shell_call``
(``tool.call``) and their ``*_output`` (``tool.result``, linked to the call by ``call_id``).
``event_msg``, ``compacted`` and other line types repeat or annotate the conversation: they are
kept as hidden ``x.codex.<type>`` events. Ids come from the line number and the item's place in
it, so a re-import (or a follower reading the growing file) yields the same ids.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from streams.importers.base import (
    Accepted,
    Content,
    Rejected,
    SessionEmitter,
    fed_lines,
    iter_json_lines,
    json_lines,
    raw_text,
    small_payload,
    valid_time,
)
from streams.importers.claude_code import AUXILIARY_TYPE_RE

__all__ = ["LINE_TYPES", "SOURCE", "RolloutCursor", "iter_codex"]

SOURCE = "codex"
LINE_TYPES = frozenset({"session_meta", "response_item", "turn_context", "event_msg", "compacted"})
_CALLS = {"function_call": "arguments", "custom_tool_call": "input", "local_shell_call": "action"}
_OUTPUTS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
_WHAT = "a rollout line"
# The event_msg kinds that end a turn (older Codex versions name it task_complete).
_TURN_ENDS = frozenset({"task_complete", "turn_complete", "turn_aborted"})
_INJECTED = ("<environment_context>", "<user_instructions>", "<user_shell_command>", "# AGENTS.md",
             "<permissions instructions>")

Result = Accepted | Rejected


def iter_codex(path: Path, *, label: str, log_id: str = "default",
               acl: dict[str, Any] | None = None, data: Content | None = None) -> Iterator[Result]:
    """Events of one Codex rollout (``data``: its bytes, when the caller holds them), and a
    Rejected per line that cannot be imported."""
    yield from _Rollout(path, label=label, log_id=log_id, acl=acl, data=data).run()


class RolloutCursor:
    """A Codex import kept open between the parts of a growing rollout (follow mode): each
    :meth:`feed` reads only the lines written since the last, numbered on, and says what an
    import of the whole file says of them (a line's events depend only on the lines before it);
    :meth:`finish` says what the import says at the end of its input (the open turn's end)."""

    def __init__(self, path: Path, *, label: str, log_id: str = "default",
                 acl: dict[str, Any] | None = None) -> None:
        self._rollout = _Rollout(path, label=label, log_id=log_id, acl=acl)
        self.label = label
        self.lines = 0  # the lines fed so far (blank ones too: they are numbered)

    def feed(self, data: bytes) -> list[Result]:
        """The records of ``data`` (whole lines: it ends with a newline), the bytes after those
        fed before."""
        results: list[Result] = []
        for number, raw in fed_lines(data, self.lines):
            for line in json_lines(number, raw, label=self.label, what=_WHAT):
                if isinstance(line, Rejected):
                    results.append(line)
                else:
                    results += self._rollout._line(line.value, line.position, line.record, line.raw)
        self.lines += data.count(b"\n")
        return results

    def finish(self, last_record: str) -> list[Result]:
        """What the import says at the end of its input, ``last_record`` the input's last record
        (the cursor is left as it was: the end is said by a copy of the session's emitter)."""
        emitter = self._rollout.emitter
        return [] if emitter is None else copy.copy(emitter).end_turn(record=last_record, raw="")


class _Rollout:
    def __init__(self, path: Path, *, label: str, log_id: str, acl: dict[str, Any] | None,
                 data: Content | None = None) -> None:
        self.path, self.label, self.log_id, self.acl, self.data = path, label, log_id, acl, data
        self.emitter: SessionEmitter | None = None
        self.model: str | None = None
        self.calls: dict[str, tuple[str, str]] = {}  # call_id -> (eventId, tool name)

    def _session(self, session_id: str) -> SessionEmitter:
        if self.emitter is None:
            self.emitter = SessionEmitter(source=SOURCE, id_prefix="cx", session_id=session_id,
                                          log_id=self.log_id, acl=self.acl)
        return self.emitter

    def run(self) -> Iterator[Result]:
        last_record = f"{self.label}:0"
        for line in iter_json_lines(self.path, label=self.label, what=_WHAT, data=self.data):
            last_record = line.record
            if isinstance(line, Rejected):
                yield line
            else:
                yield from self._line(line.value, line.position, line.record, line.raw)
        if self.emitter is not None:
            yield from self.emitter.end_turn(record=last_record, raw="")

    def _line(self, value: dict[str, Any], position: str, record: str, raw: bytes) -> Iterator[Result]:
        line_type = value.get("type")
        payload = value.get("payload")
        if not isinstance(line_type, str) or not (line_type in LINE_TYPES or AUXILIARY_TYPE_RE.fullmatch(line_type)):
            yield Rejected(record, f"unknown record type {line_type!r}: not a Codex rollout line (foreign record)",
                           raw_text(raw))
            return
        if not isinstance(payload, dict):
            yield Rejected(record, "field 'payload' must be an object", raw_text(raw))
            return
        emitter = self._session(str(payload["id"]) if line_type == "session_meta" and payload.get("id")
                                else self.path.stem)
        time = valid_time(value.get("timestamp")) or emitter.last_time
        if time is None:
            yield Rejected(record, "field 'timestamp' is missing or not an RFC 3339 time", raw_text(raw))
            return
        if line_type == "session_meta":
            fields = {key: payload[key] for key in ("cwd", "originator", "cli_version", "model_provider")
                      if isinstance(payload.get(key), str)}
            started = emitter.start_session(time=time, record=record, raw=raw,
                                            fields={_camel(k): v for k, v in fields.items()})
            # A second session_meta (a resumed or forked rollout) is kept, hidden.
            yield from started or [emitter.emit(
                "x.codex.session_meta", event_id=emitter.event_id("x", position), time=time, record=record,
                raw=raw, visibility="hidden", fields={}, payload=small_payload(payload))]
            return
        yield from emitter.start_session(time=time, record=record, raw=raw, fields={})
        if line_type == "turn_context" and isinstance(payload.get("model"), str):
            self.model = payload["model"]
        if line_type != "response_item":
            kind = payload.get("type") if isinstance(payload.get("type"), str) else None
            yield emitter.emit(f"x.codex.{line_type}", event_id=emitter.event_id("x", position), time=time,
                               record=record, raw=raw, visibility="hidden",
                               fields={"kind": kind} if kind else {}, payload=small_payload(payload))
            if line_type == "event_msg" and kind in _TURN_ENDS:
                # Codex records the turn's end itself: it ends here, so a followed rollout's
                # last turn is chunked as soon as it is written, not when the file goes idle.
                yield from emitter.end_turn(record=record, raw=raw)
            return
        yield from self._item(emitter, payload, position, time, record, raw)

    def _item(self, emitter: SessionEmitter, item: dict[str, Any], position: str, time: str, record: str,
              raw: bytes) -> Iterator[Result]:
        item_type = item.get("type")
        event_id = emitter.event_id(position, 0)
        search = _web_search(item) if item_type == "web_search_call" else None
        visible = isinstance(item_type, str) and (
            (item_type == "message" and item.get("role") == "assistant") or item_type in _CALLS or item_type in _OUTPUTS
            or search is not None)
        if visible and emitter.turn_id is None:
            # The agent's work outside every turn (after task_complete, or in a rollout that
            # opens mid-session) opens a turn of its own: it would form a unit nothing closes.
            yield from emitter.start_turn(position, time=time, record=record, raw=raw)
        if item_type == "message":
            role = item.get("role")
            text = _content_text(item.get("content"))
            if role == "user" and not text.lstrip().startswith(_INJECTED):
                yield from emitter.start_turn(position, time=time, record=record, raw=raw)
                yield emitter.emit("message", event_id=event_id, time=time, record=record, raw=raw,
                                   role="user", fields={"text": text})
            elif role == "assistant":
                fields: dict[str, Any] = {"text": text, **({"model": self.model} if self.model else {})}
                yield emitter.emit("message", event_id=event_id, time=time, record=record, raw=raw,
                                   role="assistant", fields=fields)
            else:
                yield emitter.emit("message", event_id=event_id, time=time, record=record, raw=raw,
                                   role=role if role in ("user", "system", "developer") else "system",
                                   fields={"text": text, "kind": "context"}, visibility="hidden")
        elif item_type == "reasoning":
            summary = " ".join(s.get("text", "") for s in item.get("summary") or []
                               if isinstance(s, dict) and isinstance(s.get("text"), str))
            yield emitter.emit("message", event_id=event_id, time=time, record=record, raw=raw,
                               role="assistant", fields={"text": summary, "kind": "thinking"},
                               visibility="hidden")
        elif isinstance(item_type, str) and item_type in _CALLS:
            name = str(item.get("name") or ("shell" if item_type == "local_shell_call" else "tool"))
            call_id = str(item.get("call_id") or item.get("id") or f"line-{position}")
            self.calls[call_id] = (event_id, name)
            yield emitter.emit("tool.call", event_id=event_id, time=time, record=record, raw=raw,
                               role="assistant", fields={"toolName": name, "toolCallId": call_id,
                                                         "input": _arguments(item.get(_CALLS[item_type]))})
        elif item_type in _OUTPUTS:
            call_id = str(item.get("call_id") or "")
            call_event, name = self.calls.get(call_id, (None, "tool"))
            output, status = _output(item.get("output"))
            yield emitter.emit("tool.result", event_id=event_id, time=time, record=record, raw=raw,
                               role="tool", parent_event_id=call_event,
                               fields={"toolCallId": call_id, "toolName": name, "status": status,
                                       "output": output})
        else:
            kind = item_type if isinstance(item_type, str) else "unknown"
            yield emitter.emit("x.codex.response_item", event_id=event_id, time=time, record=record, raw=raw,
                               visibility="hidden", fields={"kind": kind}, payload=small_payload(item))
            if search is not None:
                # The web search the model ran (Codex keeps no result): its query or page, kept
                # as a call beside the item's hidden event, which stays as it was.
                call_id = str(item.get("call_id") or item.get("id") or f"line-{position}")
                yield emitter.emit("tool.call", event_id=emitter.event_id(position, "web_search"), time=time,
                                   record=record, raw=raw, role="assistant",
                                   fields={"toolName": "web_search", "toolCallId": call_id, "input": search})


def _web_search(item: dict[str, Any]) -> dict[str, Any] | None:
    """What a ``web_search_call`` item searched or opened (its ``action``: a query, a page, a
    pattern in a page), or None when it says nothing (older rollouts write only its status)."""
    action = item.get("action")
    if isinstance(action, dict) and any(isinstance(action.get(key), str) and action[key]
                                        for key in ("query", "url", "pattern")):
        return action
    if isinstance(item.get("query"), str) and item["query"]:
        return {"query": item["query"]}
    return None


def _content_text(content: Any) -> str:
    """A message's content as text: its text parts, and a part without text (an image the user
    pasted: ``input_image``, its data a URL) as ``[type]``, as the OpenAI-chat importer has it.
    Dropped, a message of an image alone was an empty message."""
    if isinstance(content, str):
        return content
    parts: list[str] = [part["text"] if isinstance(part.get("text"), str) else f"[{part.get('type', 'part')}]"
                        for part in content or [] if isinstance(part, dict)]
    return "\n".join(parts)


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return {"input": value}
    return value if isinstance(value, dict) else ({} if value is None else {"input": value})


def _output(value: Any) -> tuple[str, str]:
    """(output text, ok | error): a shell's output may be JSON with its exit code."""
    text = value if isinstance(value, str) else ("" if value is None else orjson.dumps(value).decode())
    decoded = value
    if isinstance(value, str) and value.startswith("{"):
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            decoded = None
    if isinstance(decoded, dict):
        metadata = decoded.get("metadata")
        exit_code = metadata.get("exit_code") if isinstance(metadata, dict) else None
        if isinstance(decoded.get("output"), str):
            text = decoded["output"]
        if isinstance(exit_code, int) and exit_code != 0:
            return text, "error"
    return text, "ok"


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.title() for part in rest)
