"""Redacting one ASP event into what may be indexed, and the full tool result kept apart.

The indexed event keeps the event's structure (ids, type, role, time, acl, tool names,
status and every field *key*) and loses its ``payload``, its secrets and, for tool results,
the full output, which is replaced by a short summary. The full redacted output travels
separately to the ACL-isolated tool-results stream.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from streams.asp import json_kind
from streams.exceptions import RedactionError
from streams.redaction.assignments import bare_secret
from streams.redaction.base import MARKER_PREFIX, marker
from streams.redaction.context import printed_secret, prints_secret, shell_command
from streams.redaction.entropy import looks_random
from streams.redaction.keys import NameClass, name_class
from streams.redaction.memory import Recall
from streams.redaction.policy import DEFAULT_POLICY, RedactionPolicy, policy_hash
from streams.redaction.text import clip, redact_text, redact_text_into, summarize
from streams.redaction.vendors import token_heads

__all__ = ["ID_KEYS", "OUTPUT_KEYS", "STRUCTURAL_FIELDS", "STRUCTURAL_KEYS", "RedactedEvent", "redact_event",
           "redacted_session_id", "stable_id"]

STRUCTURAL_KEYS = frozenset({
    "aspVersion", "eventId", "logId", "sessionId", "runId", "turnId", "episodeId",
    "parentSessionId", "parentEventId", "type", "role", "time", "visibility", "acl",
})
"""Top-level keys copied untouched: identity, lineage, type, time and access control."""

ID_KEYS = frozenset({"eventId", "sessionId", "runId", "turnId", "episodeId", "parentSessionId", "parentEventId"})
"""Structural keys holding ids: kept as they are unless a rule finds a secret in one, which is
then replaced by :func:`stable_id` (the same id always becomes the same replacement, so lineage
still joins). ``logId`` is not among them: it chose the L1 partition before redaction ran."""

STRUCTURAL_FIELDS = frozenset({"toolName", "toolCallId", "status", "kind", "model", "agentId", "type", "role"})
"""Top-level keys of ``fields`` (plus ``id`` / ``*Id`` / ``*_id``) whose scalar values are
structural: never clipped nor treated as secrets by name. They are still scanned, so a token
pasted into one cannot slip through; a real id or tool name never matches a rule."""

OUTPUT_KEYS = ("output", "result", "content")
"""Where a ``tool.result`` event carries its output, in order of preference."""

_SECRET_FIELD = "secret-field"
# An id with no run of 16 letters and digits (a UUID, "turn-3", "s1") has no room for a secret.
_HEX_ID = re.compile(r"(?:(?P<head>[A-Za-z]{1,12})[_-])?(?:[0-9a-f]{8,64}|[0-9A-F]{8,64})(?:-[0-9a-fA-F]{1,12})*", re.ASCII)
_LONG_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{16}", re.ASCII)
_FAILED = frozenset({"error", "failed", "failure"})  # tool.result statuses that keep the output's end
_ROOM = 16  # the run _LONG_ALNUM_RUN looks for: a shorter id has none (the regex need not run)
_SHORT_KEY = 8  # keys shorter than this cannot hold anything a rule replaces


@dataclass(slots=True)
class RedactedEvent:
    """The redaction of one event.

    ``event``: the ASP event to index (no payload, strings redacted, tool output summarized).
    ``tool_result``: for ``tool.result`` events, the record for the ``usl.toolresults``
    stream (``kind``, ids, ``toolCallId``, ``toolName``, ``status``, the full redacted output
    as ``text``, ``time``, ``acl``, ``policy``; the agent adds ``seq``); for a ``tool.call``
    whose input a chunk shows cut, the same record of kind ``toolcall`` holding the whole
    input (:func:`_tool_call_record`); otherwise ``None``.
    ``hits``: replacements made, by rule name (for the redactions-by-rule metric).
    """

    event: dict[str, Any]
    tool_result: dict[str, Any] | None = None
    hits: dict[str, int] = field(default_factory=dict)


def redact_event(event: dict[str, Any], policy: RedactionPolicy | None = None, *,
                 recall: Recall | None = None) -> RedactedEvent:
    """Redact ``event`` (not modified) under ``policy``; raise RedactionError if it is not an object.

    ``recall``: the event's session memory (:mod:`streams.redaction.memory`): the values the
    session removed in earlier events are removed where this event repeats them bare, and what
    this event removes is added to ``recall.added``. Without it, the event is redacted alone."""
    if not isinstance(event, dict):
        raise RedactionError(f"an event must be a JSON object, not {json_kind(event)}")
    policy = policy or DEFAULT_POLICY
    walker = _Walker(policy, recall)
    is_message = event.get("type") == "message"
    raw_fields = event.get("fields")
    output_key = None
    if event.get("type") == "tool.result" and isinstance(raw_fields, dict):
        output_key = next((key for key in OUTPUT_KEYS if key in raw_fields), None)
    redacted: dict[str, Any] = {}
    for key, value in event.items():
        if key in STRUCTURAL_KEYS:
            if key in ID_KEYS and isinstance(value, str) and len(value) >= _ROOM:
                value = walker.identifier(value)
            redacted[key] = value
        elif key == "payload":
            continue
        elif key == "fields" and isinstance(value, dict):
            shown = {name: item for name, item in value.items() if name != output_key}
            redacted[key] = walker.fields(shown, cap=None if is_message else policy.max_field_chars)
        else:
            redacted[walker.key(key)] = walker.walk(value, cap=policy.max_field_chars)
    if is_message and recall is not None and isinstance(raw_fields, dict) and isinstance(raw_fields.get("text"), str):
        _shell_mode(event, raw_fields["text"], redacted, recall, walker.hits)
    tool_result = None
    if event.get("type") == "tool.result":
        fields = dict(redacted["fields"]) if isinstance(redacted.get("fields"), dict) else {}
        if output_key is not None and isinstance(raw_fields, dict):
            text = _as_text(walker.walk(raw_fields[output_key], cap=None))
            call_id = raw_fields.get("toolCallId")
            # 2.18: a command that prints a secret (`openssl rand -hex 32`, `gh auth token`) was
            # another event, its call; the memory says so, and its one-token output is that secret.
            printed = (recall is not None and isinstance(call_id, str) and recall.prints_secret(call_id)
                       and printed_secret(text))
            if printed or bare_secret(text):
                # 2.5: `printenv DB_PASSWORD`, `op read ...`, `... | base64 -d` print the secret
                # alone; no name beside it says so, but nothing else prints one generated token.
                if recall is not None:
                    recall.learn_value(text, SECRET_OUTPUT)
                text = marker(SECRET_OUTPUT)
                walker.hits[SECRET_OUTPUT] = walker.hits.get(SECRET_OUTPUT, 0) + 1
            # A failed tool's last lines say how it failed; a successful one's beginning is enough.
            tail = policy.summary_tail_chars if str(fields.get("status", "")).lower() in _FAILED else 0
            fields["summary"] = summarize(text, policy.summary_chars, tail)
            fields["outputBytes"] = len(text.encode("utf-8"))
            redacted["fields"] = fields
        else:
            # Already summarized (a redacted event redacted again): the summary is all there is.
            text = str(fields.get("summary", ""))
        tool_result = _tool_result_record(redacted, fields, text, policy)
    elif event.get("type") == "tool.call" and isinstance(raw_fields, dict):
        tool_result = _tool_call_record(redacted, raw_fields, policy, recall)
        call_id, command = raw_fields.get("toolCallId"), _command(raw_fields)
        if recall is not None and isinstance(call_id, str) and command and prints_secret(command):
            recall.note_call(call_id)
    return RedactedEvent(event=redacted, tool_result=tool_result, hits=walker.hits)


SECRET_OUTPUT = "secret-output"
# The memory's key of a shell-mode input message (2.19), apart from tool call ids.
_SHELL_INPUT_KEY = "\0bash-input\0"
_SHELL_OUTPUT = re.compile(r"(<bash-stdout>[ \t\r\n]*)([^\s<]{8,512})(?=[ \t\r\n]*</bash-stdout>)")


def _shell_mode(event: dict[str, Any], text: str, redacted: dict[str, Any], recall: Recall, hits: dict[str, int]) -> None:
    """Claude Code's `!` shell mode writes its command and its output as two user messages, the
    output's parent the command's (2.19): a command that prints a secret (`openssl rand -hex 32`)
    is remembered by its message's id, and its output message's one token is that secret, as a
    tool call's result is (a hex key has no other mark)."""
    command = shell_command(text)
    if command is not None:
        if isinstance(event.get("eventId"), str) and prints_secret(command):
            recall.note_call(_SHELL_INPUT_KEY + event["eventId"])
        return
    parent, fields = event.get("parentEventId"), redacted.get("fields")
    if ("<bash-stdout>" not in text or not isinstance(parent, str) or not isinstance(fields, dict)
            or not isinstance(fields.get("text"), str) or not recall.prints_secret(_SHELL_INPUT_KEY + parent)):
        return
    match = _SHELL_OUTPUT.search(fields["text"])
    if match is not None and printed_secret(match.group(2)):
        recall.learn_value(match.group(2), SECRET_OUTPUT)
        fields["text"] = fields["text"][:match.start(2)] + marker(SECRET_OUTPUT) + fields["text"][match.end(2):]
        hits[SECRET_OUTPUT] = hits.get(SECRET_OUTPUT, 0) + 1

def _tool_result_record(event: dict[str, Any], fields: dict[str, Any], text: str, policy: RedactionPolicy) -> dict[str, Any]:
    return {
        "kind": "toolresult",
        "logId": event.get("logId"),
        "eventId": event.get("eventId"),
        "sessionId": event.get("sessionId"),
        "runId": event.get("runId"),
        "turnId": event.get("turnId"),
        "toolCallId": fields.get("toolCallId"),
        "toolName": fields.get("toolName"),
        "status": fields.get("status"),
        "text": text,
        "time": event.get("time"),
        "acl": event.get("acl"),
        "policy": policy_hash(policy),
    }


def _tool_call_record(event: dict[str, Any], raw_fields: dict[str, Any], policy: RedactionPolicy,
                      recall: Recall | None) -> dict[str, Any] | None:
    """The tool-results record of a ``tool.call`` whose input a chunk shows cut: the whole
    input, redacted as the event's fields are but uncut, one ``key: value`` line per key
    (sorted). A chunk shows each value up to ``MAX_VALUE_CHARS``; the file an agent wrote, the
    patch it applied or the script it ran is found here whole, in the ACL-isolated index, as a
    tool's output is. None when the chunk shows it all."""
    # What a chunk shows is the chunker's rendering, so its numbers are asked of it; loaded
    # here, not with this module, so redacting text alone (dead letters) never loads a tokenizer.
    from streams.chunking.render import MAX_VALUE_CHARS, TOOL_INPUT_KEYS, value_text

    shown = event.get("fields")
    fields: dict[str, Any] = shown if isinstance(shown, dict) else {}
    # Whether the chunk shows it cut is read off the event as redacted (what the chunk renders):
    # the uncut walk below, a second redaction of the input, runs only for the few calls that are.
    shown_input = next((fields[name] for name in TOOL_INPUT_KEYS if name in fields), None)
    values = shown_input.values() if isinstance(shown_input, dict) else (shown_input,)
    key = next((name for name in TOOL_INPUT_KEYS if name in raw_fields), None)
    if key is None or all(len(value_text(value)) <= MAX_VALUE_CHARS for value in values):
        return None
    # A walker of its own: the event's walk already counted these replacements.
    tool_input = _Walker(policy, recall).fields({key: raw_fields[key]}, cap=None)[key]
    if isinstance(tool_input, dict):
        text = "\n".join(f"{name}: {value_text(tool_input[name])}" for name in sorted(tool_input, key=str))
    else:
        text = value_text(tool_input)
    return {**_tool_result_record(event, {**fields, "status": None}, text, policy), "kind": "toolcall"}


_COMMAND_KEYS = ("command", "cmd", "script")


def _command(fields: dict[str, Any]) -> str | None:
    """The shell command of a tool call's input (Claude Code's Bash ``command``, Codex's ``cmd``
    list, an OpenAI function's JSON arguments), or None."""
    tool_input = next((fields[key] for key in ("input", "arguments", "params") if key in fields), None)
    if isinstance(tool_input, str) and tool_input.lstrip().startswith("{"):
        try:
            tool_input = json.loads(tool_input)
        except ValueError:
            return None
    if isinstance(tool_input, dict):
        tool_input = next((tool_input[key] for key in _COMMAND_KEYS if key in tool_input), None)
    if isinstance(tool_input, list) and all(isinstance(part, str) for part in tool_input):
        # ["bash", "-lc", "openssl rand -hex 32"]: the script is the command a terminal shows.
        shell = len(tool_input) >= 3 and tool_input[-2] in ("-c", "-lc", "-ic", "-lic")
        tool_input = tool_input[-1] if shell else " ".join(tool_input)
    return tool_input if isinstance(tool_input, str) else None


def _as_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(isinstance(block, dict) and isinstance(block.get("text"), str) for block in output):
        return "\n".join(block["text"] for block in output)
    return json.dumps(output, ensure_ascii=False, sort_keys=True)


def redacted_session_id(event: dict[str, Any], policy: RedactionPolicy | None = None) -> str:
    """The event's ``sessionId`` as :func:`redact_event` leaves it: the key of the session's memory
    (:mod:`streams.redaction.memory`), known before the event is redacted."""
    session_id = event["sessionId"]
    if not isinstance(session_id, str) or len(session_id) < _ROOM:
        return str(session_id)
    return str(_identifier(session_id, policy or DEFAULT_POLICY)[0])


def stable_id(identifier: str) -> str:
    """The replacement of an id in which a secret was found: ``redacted-id-`` and 24 hex digits
    of its SHA-256, the same in every event, process and replay."""
    return "redacted-id-" + hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _is_id(key: str) -> bool:
    return key == "id" or key.endswith(("Id", "_id", "ID"))


class _Walker:
    """Redacts nested values of one event, accumulating hits.

    Most of an event is short strings under recurring keys (hook names, statuses, tool names,
    ids), so the walk stays lean: a key's redaction and class and an id's verdict are
    remembered, and string values go straight to the text redaction, which adds to ``hits``."""

    __slots__ = ("hits", "policy", "recall")

    def __init__(self, policy: RedactionPolicy, recall: Recall | None = None) -> None:
        self.policy = policy
        self.hits: dict[str, int] = {}
        self.recall = recall

    def _add(self, found: tuple[tuple[str, int], ...]) -> None:
        hits = self.hits
        for rule, count in found:
            hits[rule] = hits.get(rule, 0) + count

    def key(self, key: Any) -> Any:
        # Keys stay indexable; only a key that itself contains a secret or a home path changes.
        if not isinstance(key, str) or len(key) < _SHORT_KEY:
            return key
        redacted, found, _ = _key(key, self.policy)
        if found:
            self._add(found)
        return redacted

    def identifier(self, value: Any) -> Any:
        """An id unchanged, or its :func:`stable_id` when a rule finds a secret in it."""
        if not isinstance(value, str) or len(value) < _ROOM:
            return value
        replaced, found = _identifier(value, self.policy)
        if found:
            self._add(found)
        return replaced

    def fields(self, fields: dict[Any, Any], *, cap: int | None) -> dict[Any, Any]:
        """The top level of ``fields``: structural values are scanned but never clipped."""
        return self._mapping(fields, cap, top=True)

    def walk(self, value: Any, *, cap: int | None, name: NameClass | None = None) -> Any:
        if isinstance(value, str):
            return self._string(value, cap, name)
        if isinstance(value, dict):
            return self._mapping(value, cap)
        if isinstance(value, list | tuple):
            if name in ("password", "secret") and value:
                return self._replace()
            return [self.walk(item, cap=cap, name=name) for item in value]
        if name in ("password", "secret") and isinstance(value, int | float) and not isinstance(value, bool):
            return self._replace()
        return value

    def _string(self, value: str, cap: int | None, name: NameClass | None) -> str:
        if name is not None and value.strip() and not value.startswith(MARKER_PREFIX):
            if name != "key" or looks_random(value.strip()):
                if self.recall is not None:
                    self.recall.learn_value(value, _SECRET_FIELD)
                return self._replace()
        redacted = self._text(value)
        return redacted if cap is None or len(redacted) <= cap else clip(redacted, cap)

    def _text(self, value: str) -> str:
        redacted = redact_text_into(value, self.hits, self.policy)
        recall = self.recall
        if recall is not None:
            if MARKER_PREFIX in redacted:
                recall.learn(value, redacted)
            if recall.remembers:
                redacted = recall.recall(redacted, self.hits)
        return redacted

    def _mapping(self, value: dict[Any, Any], cap: int | None, *, top: bool = False) -> dict[Any, Any]:
        # {"name": "DB_PASSWORD", "value": "..."}: Kubernetes env entries, header lists.
        label = value.get("name", value.get("key"))
        label_class = name_class(label) if isinstance(label, str) and "value" in value else None
        policy = self.policy
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                out[key] = self.walk(item, cap=cap)
                continue
            if top and isinstance(item, str) and (key in STRUCTURAL_FIELDS or _is_id(key)):
                if not _is_id(key):
                    out[key] = redact_text_into(item, self.hits, policy)
                elif len(item) >= _ROOM:
                    out[key] = self.identifier(item)
                else:
                    out[key] = item
                continue
            redacted_key, found, key_class = _key(key, policy)
            if key == "value" and label_class is not None:
                key_class = label_class
            if key_class in ("password", "secret") and isinstance(item, dict) and item:
                replaced: Any = self._replace()
            elif isinstance(item, str):
                if key_class is None:
                    # The common case, inline: no secret-like name, so the text rules decide.
                    replaced = self._text(item)
                    if cap is not None and len(replaced) > cap:
                        replaced = clip(replaced, cap)
                else:
                    replaced = self._string(item, cap, key_class)
            else:
                replaced = self.walk(item, cap=cap, name=key_class)
            if found:
                self._add(found)
            out[redacted_key] = replaced
        return out

    def _replace(self) -> str:
        self.hits[_SECRET_FIELD] = self.hits.get(_SECRET_FIELD, 0) + 1
        return marker(_SECRET_FIELD)


@lru_cache(maxsize=16384)
def _key(key: str, policy: RedactionPolicy) -> tuple[str, tuple[tuple[str, int], ...], NameClass | None]:
    """A key's redaction (keys shorter than eight characters hold nothing any rule removes),
    the replacements made in it, and its name class."""
    if len(key) < _SHORT_KEY:
        return key, (), name_class(key)
    redacted, found = _redact_key(key, policy)
    return redacted, tuple(found.items()), name_class(key)


@lru_cache(maxsize=16384)
def _identifier(value: str, policy: RedactionPolicy) -> tuple[str, tuple[tuple[str, int], ...]]:
    """An id (16 characters or more) and the replacements counted for it: itself and none,
    or its :func:`stable_id` and what the rules found in it."""
    hex_id = _HEX_ID.fullmatch(value)
    if hex_id is not None and (hex_id.group("head") or "").lower() not in token_heads():
        return value, ()  # cc_8e3e685f..., turn_0e9fa6e3..., UUIDs: a word and hex digits hold no secret
    if _LONG_ALNUM_RUN.search(value) is None:
        return value, ()  # no run of 16 letters and digits: no room for a secret
    redacted, found = _redact_key(value, policy)
    if redacted == value:
        return value, ()
    return stable_id(value), tuple(found.items())


@lru_cache(maxsize=16384)
def _redact_key(key: str, policy: RedactionPolicy) -> tuple[str, dict[str, int]]:
    return redact_text(key, policy)
