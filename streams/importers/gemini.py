"""Gemini CLI chat recordings (``~/.gemini/tmp/<projectHash>/chats/session-*.json``) → ASP v1.

A recording is one JSON document ``{"sessionId", "projectHash", "startTime", "lastUpdated",
"messages": [...]}``, rewritten as the chat goes on; the same records also come as JSONL (a
header line with ``sessionId`` / ``projectHash``, then one message per line), which newer
versions write as a log of changes: a message appended again each time it changes, ``$set``
and ``$rewindTo`` lines (``docs/importers.md``). Messages:

- ``user`` starts a human turn and is its ``message``; a ``gemini`` answer that calls no tool ends
  it;
- ``gemini`` is the assistant's ``message`` (``model``, ``usage`` from ``tokens``); its
  ``thoughts`` are hidden thinking messages; each of its ``toolCalls`` is a ``tool.call`` and a
  ``tool.result`` (output from the ``functionResponse``, ``status`` ok unless the call's status
  is not ``success``) linked to the call;
- ``error`` is an ASP ``error``; ``info``, ``warning`` and other types are hidden
  ``x.gemini-cli.<type>`` events.

Ids come from the message ``id`` (or its position), so a rewritten recording yields the same
events for the messages it already had.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from streams.importers.base import (
    Accepted,
    Content,
    Rejected,
    SessionEmitter,
    iter_json_lines,
    parse_json,
    raw_text,
    read_bytes,
    read_lines,
    small_payload,
    valid_time,
)
from streams.importers.claude_code import AUXILIARY_TYPE_RE

__all__ = ["SOURCE", "is_gemini_record", "iter_gemini"]

SOURCE = "gemini-cli"
Result = Accepted | Rejected


def is_gemini_record(value: Any) -> bool:
    """A recording, its header line, or one of its message lines."""
    if not isinstance(value, dict):
        return False
    if "projectHash" in value and "sessionId" in value:
        return True
    return value.get("type") == "gemini" and "id" in value and "timestamp" in value


def iter_gemini(path: Path, *, label: str, log_id: str = "default",
                acl: dict[str, Any] | None = None, data: Content | None = None) -> Iterator[Result]:
    """Events of one Gemini CLI recording (document or JSONL; ``data``: its bytes, when the
    caller holds them), and a Rejected per bad record."""
    recording = _Recording(path, label=label, log_id=log_id, acl=acl, data=data)
    if path.suffix.lower() == ".json":
        yield from recording.document()
    else:
        yield from recording.lines()


class _Recording:
    def __init__(self, path: Path, *, label: str, log_id: str, acl: dict[str, Any] | None,
                 data: Content | None = None) -> None:
        self.path, self.label, self.log_id, self.acl, self.data = path, label, log_id, acl, data
        self.emitter: SessionEmitter | None = None
        # Gemini CLI appends a message again, whole, each time its tool calls, their results or
        # its tokens change: the ids of the messages and events taken so far, so that a later
        # copy adds only what the earlier ones did not say.
        self.messages: set[str] = set()
        self.emitted: set[str] = set()
        self.title: str | None = None  # the recording's last summary (see _last_summary)

    def _new(self, event_id: str) -> bool:
        """Whether ``event_id`` is not out yet (and is now)."""
        if event_id in self.emitted:
            return False
        self.emitted.add(event_id)
        return True

    def _session(self, header: dict[str, Any], record: str, raw: Any, time: str) -> list[Result]:
        if self.emitter is None:
            session_id = str(header["sessionId"]) if isinstance(header.get("sessionId"), str) else self.path.stem
            self.emitter = SessionEmitter(source=SOURCE, id_prefix="gm", session_id=session_id,
                                          log_id=self.log_id, acl=self.acl)
        fields = {"projectHash": header["projectHash"]} if isinstance(header.get("projectHash"), str) else {}
        if self.title is not None:
            fields["title"] = self.title
        return self.emitter.start_session(time=valid_time(header.get("startTime")) or time, record=record,
                                          raw=raw, fields=fields)

    def document(self) -> Iterator[Result]:
        data = read_bytes(self.path, self.data)
        value, error = parse_json(data)
        record = f"{self.label}:1"
        if error is not None or not isinstance(value, dict) or not isinstance(value.get("messages"), list):
            yield Rejected(record, error or "a Gemini CLI recording is an object with a 'messages' array",
                           raw_text(data))
            return
        self.title = _summary(value)
        for index, message in enumerate(value["messages"]):
            yield from self._message(value, message, index, f"{self.label}#messages[{index}]")
        if self.emitter is not None:
            yield from self.emitter.end_turn(record=record, raw="")

    def lines(self) -> Iterator[Result]:
        header: dict[str, Any] = {}
        last_record = f"{self.label}:0"
        self.title = _last_summary(read_lines(self.path, self.data))
        for item in iter_json_lines(self.path, label=self.label, what="a recording line", data=self.data):
            last_record = item.record
            if isinstance(item, Rejected):
                yield item
                continue
            place, record, value, line = item.position, item.record, item.value, item.raw
            if _is_update(value):
                yield from self._update(header, value, place, record, line)
            elif "type" not in value and "projectHash" in value:
                header = value
                time = valid_time(value.get("startTime")) or valid_time(value.get("lastUpdated"))
                if time is None:
                    yield Rejected(record, "the recording's header has no startTime (RFC 3339)", raw_text(line))
                else:
                    started = list(self._session(header, record, line, time))
                    assert self.emitter is not None
                    yield from started or [self.emitter.emit(
                        "x.gemini-cli.header", event_id=self.emitter.event_id("header", place), time=time,
                        record=record, raw=line, visibility="hidden", fields={}, payload=small_payload(value))]
            else:
                yield from self._message(header, value, place, record)
        if self.emitter is not None:
            yield from self.emitter.end_turn(record=last_record, raw="")

    def _update(self, header: dict[str, Any], value: dict[str, Any], place: int | str, record: str,
                line: bytes) -> Iterator[Result]:
        """A ``{"$set": {...}}`` line (metadata: ``lastUpdated``, ``summary``, or ``messages``, the
        conversation as it stands after a compression or rollback) or a ``{"$rewindTo": id}`` line
        (the user went back to before that message): kept hidden. The messages of a ``$set`` are
        read as message lines; a rewind takes nothing back, as what was said before it was said."""
        kind = "set" if "$set" in value else "rewind"
        changes = value.get("$set")
        if isinstance(changes, dict):
            for index, message in enumerate(_items(changes.get("messages"))):
                yield from self._message(header, message, f"{place}-{index}", f"{record}/$set.messages[{index}]")
        time = (self.emitter.last_time if self.emitter else None) or valid_time(header.get("startTime"))
        if self.emitter is None or time is None:
            yield Rejected(record, f"a ${kind} line before the recording's header and first message",
                           raw_text(line))
            return
        fields: dict[str, Any] = ({"keys": sorted(map(str, changes))} if isinstance(changes, dict)
                                  else {"messageId": str(value.get("$rewindTo"))})
        yield self.emitter.emit(f"x.gemini-cli.{kind}", event_id=self.emitter.event_id(kind, place), time=time,
                                record=record, raw=line, visibility="hidden", fields=fields,
                                payload=small_payload(value))

    def _message(self, header: dict[str, Any], message: Any, index: int | str, record: str) -> Iterator[Result]:
        if not isinstance(message, dict):
            yield Rejected(record, "a message must be a JSON object", raw_text(message))
            return
        kind = message.get("type")
        if not isinstance(kind, str) or not AUXILIARY_TYPE_RE.fullmatch(kind):
            yield Rejected(record, f"unknown record type {kind!r}: not a Gemini CLI message (foreign record)",
                           raw_text(message))
            return
        time = valid_time(message.get("timestamp")) or (self.emitter.last_time if self.emitter else None)
        if time is None:
            yield Rejected(record, "field 'timestamp' is missing or not an RFC 3339 time", raw_text(message))
            return
        yield from self._session(header, record, message, time)
        emitter = self.emitter
        assert emitter is not None
        key = str(message["id"]) if isinstance(message.get("id"), str) else f"at-{index}"
        text = _text(message.get("content"))
        again = key in self.messages
        self.messages.add(key)
        if again:
            # A later copy of a message (its tool calls or their results came): kept hidden, and
            # only what the earlier copies did not say is imported, in the turn it is in.
            yield emitter.emit("x.gemini-cli.update", event_id=emitter.event_id(key, "update", index), time=time,
                               record=record, raw=message, visibility="hidden", fields={"messageId": key})
            if kind == "gemini":
                yield from self._reply(emitter, message, key, text, time, record, again=True)
            return
        if kind == "user" or (kind in ("gemini", "error") and emitter.turn_id is None):
            # A reply or an error outside every turn (after an answer ended one, or in a
            # recording that opens with the model) opens a turn of its own, as a user message
            # does: outside every turn it would form a unit that nothing closes.
            yield from emitter.start_turn(key, time=time, record=record, raw=message)
        if kind == "user":
            yield emitter.emit("message", event_id=emitter.event_id(key), time=time, record=record,
                               raw=message, role="user", fields={"text": text})
        elif kind == "gemini":
            yield from self._reply(emitter, message, key, text, time, record)
        elif kind == "error":
            yield emitter.emit("error", event_id=emitter.event_id(key), time=time, record=record, raw=message,
                               fields={"message": text or "error"})
        else:
            yield emitter.emit(f"x.gemini-cli.{kind}", event_id=emitter.event_id(key), time=time, record=record,
                               raw=message, visibility="hidden", fields={"text": text},
                               payload=small_payload(message))

    def _reply(self, emitter: SessionEmitter, message: dict[str, Any], key: str, text: str, time: str,
               record: str, *, again: bool = False) -> Iterator[Result]:
        for position, thought in enumerate(_items(message.get("thoughts"))):
            if isinstance(thought, dict) and self._new(emitter.event_id(key, "thought", position)):
                summary = ": ".join(str(thought[k]) for k in ("subject", "description") if thought.get(k))
                yield emitter.emit("message", event_id=emitter.event_id(key, "thought", position),
                                   time=valid_time(thought.get("timestamp")) or time, record=record, raw=message,
                                   role="assistant", fields={"text": summary, "kind": "thinking"},
                                   visibility="hidden")
        fields: dict[str, Any] = {"text": text}
        if isinstance(message.get("model"), str):
            fields["model"] = message["model"]
        tokens = message.get("tokens")
        if isinstance(tokens, dict):
            usage = {"inputTokens": tokens.get("input"), "outputTokens": tokens.get("output")}
            fields["usage"] = {k: v for k, v in usage.items() if isinstance(v, int)}
        reply_id = emitter.event_id(key)
        if not text and not _items(message.get("toolCalls")) and not _items(message.get("thoughts")) \
                and not again and self._new(reply_id):
            yield emitter.emit("x.gemini-cli.gemini", event_id=reply_id, time=time, record=record, raw=message,
                               visibility="hidden", fields=fields, payload=small_payload(message))
        if text and self._new(reply_id):
            yield emitter.emit("message", event_id=reply_id, time=time, record=record, raw=message,
                               role="assistant", fields=fields)
        for position, call in enumerate(_items(message.get("toolCalls"))):
            if not isinstance(call, dict):
                if not again:
                    yield Rejected(record, f"toolCalls[{position}] is not an object", raw_text(message))
                continue
            name = str(call.get("name") or "tool")
            call_id = str(call.get("id") or f"{key}-{position}")
            call_time = valid_time(call.get("timestamp")) or time
            call_event = emitter.event_id(key, "call", position)
            args = call.get("args")
            if self._new(call_event):
                if again and emitter.turn_id is None:
                    # Gemini CLI writes a reply's text before its calls: that first copy, an
                    # answer calling no tool, ended the turn, so the calls open one of their own
                    # (as a follower that read the first copy alone had to end the turn there).
                    yield from emitter.start_turn(f"{key}/calls", time=call_time, record=record, raw=message)
                yield emitter.emit("tool.call", event_id=call_event, time=call_time, record=record, raw=message,
                                   role="assistant", fields={"toolName": name, "toolCallId": call_id,
                                                             "input": args if isinstance(args, dict) else {}})
            result_event = emitter.event_id(key, "result", position)
            if call.get("status") in _RUNNING or not self._new(result_event):
                continue  # no result yet: it comes with a later copy of the message
            output, failed = _result(call)
            yield emitter.emit("tool.result", event_id=result_event, time=call_time,
                               record=record, raw=message, role="tool", parent_event_id=call_event,
                               fields={"toolCallId": call_id, "toolName": name,
                                       "status": "error" if failed else "ok", "output": output})
        if text and not again and not _items(message.get("toolCalls")) and emitter.turn_id is not None:
            # An answer that calls no tool ends the turn (the model waits for the user now), so a
            # recording followed line by line has its last turn chunked as soon as it is written.
            yield from emitter.end_turn(record=record, raw=message)


# A tool call's states before it has a result (gemini-cli's scheduler): a message copy that
# records the call in one of them says nothing of its result yet.
_RUNNING = ("validating", "scheduled", "executing", "awaiting_approval")


def _is_update(value: dict[str, Any]) -> bool:
    """A JSONL recording's ``$set`` (metadata) or ``$rewindTo`` line."""
    return isinstance(value.get("$set"), dict) or isinstance(value.get("$rewindTo"), str)


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(content: Any) -> str:
    """``content`` is a string or a list of parts (``{"text": ...}``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    parts = [part.get("text") for part in content or [] if isinstance(part, dict)] if isinstance(content, list) else []
    return "\n".join(part for part in parts if isinstance(part, str))


def _result(call: dict[str, Any]) -> tuple[str, bool]:
    """(output, failed) of one tool call record."""
    failed = call.get("status") not in (None, "success")
    texts: list[str] = []
    for part in _items(call.get("result")):
        function = part.get("functionResponse") if isinstance(part, dict) else None
        response = function.get("response") if isinstance(function, dict) else None
        if isinstance(response, dict):
            value = response.get("output", response.get("error"))
            failed = failed or "error" in response
            texts.append(value if isinstance(value, str) else orjson.dumps(value).decode())
    if not texts and isinstance(call.get("error"), str):
        texts.append(call["error"])
    if not texts and isinstance(call.get("resultDisplay"), str):
        texts.append(call["resultDisplay"])
    return "\n".join(texts), failed


def _summary(record: dict[str, Any]) -> str | None:
    """The ``summary`` a record sets, if any: the one-line title Gemini CLI generates for a
    session (sessionSummaryService) and lists it under in ``/resume``."""
    summary = record.get("summary")
    return summary.strip() if isinstance(summary, str) and summary.strip() else None


def _last_summary(lines: Iterable[tuple[int, bytes]]) -> str | None:
    """The last summary a JSONL recording sets (its header line, or a later ``$set``), which
    titles its ``session.started``: only the lines that name one are parsed."""
    title = None
    for _number, line in lines:
        if b'"summary"' not in line:
            continue
        value, _error = parse_json(line)
        if isinstance(value, dict):
            changes = value.get("$set")
            title = _summary(changes if isinstance(changes, dict) else value) or title
    return title
