"""OpenAI chat-completions message lists → ASP v1 events.

Accepted shapes: a JSON array of messages; an object ``{"messages": [...], "id"?, "created"?,
"model"?, "title"?}``; a JSON array of such conversations (objects or message arrays); JSONL
with one conversation per line; or JSONL with one message per line (each run of such lines is
one conversation). Logged API exchanges (a chat.completion response, a
request/response pair, Batch API lines, and the Responses API's requests, responses and item
lists) count as conversations too (:func:`api_conversation`). Conversations carry no
per-message times, so message ``i`` is
timed ``created + i`` seconds (``created`` defaults to 0, the Unix epoch): deterministic, never
the wall clock. The mapping is documented in ``docs/importers.md``.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from streams.asp import json_kind
from streams.importers.base import (
    BOM,
    Accepted,
    Content,
    CutArray,
    CutObject,
    Rejected,
    SessionEmitter,
    fed_lines,
    field_problem,
    line_values,
    parse_json,
    raw_text,
    read_bytes,
    read_cut,
    read_lines,
    small_payload,
    split_line,
    time_from_posix,
)

__all__ = ["MESSAGE_LIST_KEYS", "ROLES", "SOURCE", "ChatCursor", "api_conversation", "conversation_messages",
           "cut_conversations", "is_message_line", "iter_openai_chat"]

SOURCE = "openai-chat"
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# 9999-12-31T23:59:59Z: message i is timed created + i, and no later time can be written.
_LAST_POSIX_SECOND = 253402300799

Result = Accepted | Rejected


def iter_openai_chat(
    path: Path, *, label: str, log_id: str = "default", acl: dict[str, Any] | None = None,
    data: Content | None = None,
) -> Iterator[Accepted | Rejected]:
    """Events of every conversation in ``path`` (``data``: its bytes, when the caller holds
    them), and a Rejected per unusable record.

    A record whose messages repeat those of the conversation before it and add to them is the
    next step of the same run (an agent loop logs one request per model call, each resending
    the history): its new messages continue that session instead of starting another one
    that would repeat the history.
    """
    reading = _Reading(label=label, log_id=log_id, acl=acl)
    for conversation, conv_label, index in _conversations(path, label, data):
        yield from reading.take(conversation, conv_label, index)
    yield from reading.end()


class _Reading:
    """What :func:`iter_openai_chat` keeps from one conversation to the next: the conversation
    still open (a later record may continue it) and the messages imported under each session id.
    :class:`ChatCursor` keeps one open between the parts of a growing file."""

    def __init__(self, *, label: str, log_id: str, acl: dict[str, Any] | None) -> None:
        self.label, self.log_id, self.acl = label, log_id, acl
        self.current: _Conversation | None = None
        # Per session id of this file, the messages imported under it (their signatures' digests,
        # not the signatures: a cursor keeps these for every conversation of a growing file, and
        # the texts were 1.2 times the file): a later conversation that reuses an id for other
        # messages must not have them taken for copies.
        self.imported: dict[str, list[bytes]] = {}

    def take(self, conversation: Any, conv_label: str, index: object) -> Iterator[Result]:
        """The records of one conversation (or the Rejected :func:`_conversations` gave)."""
        if isinstance(conversation, Rejected):
            yield conversation
            return
        current, imported = self.current, self.imported
        exchange = api_conversation(conversation)
        meta, problem = _conversation_parts(exchange or conversation)
        # An API exchange's id names one model call, so it never says "another conversation";
        # a conversation's own id does.
        own_id = None if exchange is not None else meta["id"]
        unread = exchange.get("responseProblem") if exchange is not None else None
        run = conversation if isinstance(conversation, _Run) else None
        if (current is not None and problem is None and own_id in (None, current.source_id)
                and current.continued_by(meta["messages"])):
            yield from current.extend(meta, conv_label, run)
            current.cut = isinstance(conversation, CutObject | CutArray)
            imported[current.emitter.session_id] = [_signature_digest(m) for m in current.messages]
            if unread is not None:
                yield Rejected(f"{conv_label}/response", unread, raw_text(conversation))
            return
        if problem is not None:
            # Rejected before the conversation before it is finished: a record that is no
            # conversation says nothing about whether that one is over (when the follower's
            # end-of-input line is that record, its end must come after it, as the end of input).
            yield Rejected(conv_label, problem, raw_text(conversation))
            return
        if current is not None:
            yield from current.finish()
            self.current = None
        signatures = [_signature_digest(m) for m in meta["messages"]]
        source_id = meta["id"]
        if source_id is not None and not _same_conversation(imported.get(source_id), signatures):
            # The id names another conversation earlier in the file (a reused or constant id, a
            # regenerated branch): its events would share eventIds with that one's and be
            # dropped downstream as duplicates. It is a session of its own, named by its place.
            meta = {**meta, "id": f"{source_id}@{index}"}
        current = self.current = _Conversation(conversation, meta, label=conv_label, key=(self.label, index),
                                               log_id=self.log_id, acl=self.acl)
        current.source_id = source_id
        current.cut = isinstance(conversation, CutObject | CutArray)
        yield from current.begin(meta, run)
        known = imported.get(current.emitter.session_id, [])
        imported[current.emitter.session_id] = signatures if len(signatures) >= len(known) else known
        if unread is not None:
            # The request's messages are imported; the answer the log holds but this cannot
            # read is dead-lettered, never dropped without a word.
            yield Rejected(f"{conv_label}/response", unread, raw_text(conversation))

    def end(self) -> Iterator[Result]:
        """What the end of the input says: the open conversation's end."""
        if self.current is not None:
            yield from self.current.finish()


class _Run(list[Any]):
    """The messages of a run of lines that each hold one, and the line each came from (what a
    message's record names: the run's last line is not known while a followed file grows)."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label
        self.lines: list[int | str] = []  # a line's number, NUMBER@BYTE for a later record of a line

    def add(self, number: int | str, message: Any) -> None:
        self.append(message)
        self.lines.append(number)


class ChatCursor:
    """An OpenAI-chat JSONL import kept open between the parts of a growing file (follow mode):
    :meth:`feed` reads only the new lines, numbered on, and says of them what
    :func:`iter_openai_chat` says of the whole file read up to them with the follower's
    end-of-input line after them; :meth:`finish` says what the end of the input says (the open
    conversation's end), and the cursor reads on after it.

    Every record but a run of message lines is read from its own line and what came before it.
    A run is one conversation named by its first message: its messages are said as their lines
    come, as a whole import ended there says them. The cursor goes stale (a fresh import must
    read the file) where the lines read before would now be read otherwise: a run that, grown,
    turns out to continue the conversation before it, and a file whose first line is no JSON
    text alone (one pretty-printed document, read whole)."""

    def __init__(self, *, label: str, log_id: str = "default", acl: dict[str, Any] | None = None) -> None:
        self.label = label
        self.lines = 0  # the lines fed so far (blank ones too: they are numbered)
        self.stale = False
        self._reading = _Reading(label=label, log_id=log_id, acl=acl)
        self._run: _Run | None = None  # the run of message lines still open, taken as read so far
        # The conversation the open run did not continue (finished when the run began): a whole
        # import continues it when the grown run repeats its messages and adds to them.
        self._before_run: _Conversation | None = None
        self._first_seen = False

    def feed(self, data: bytes) -> list[Result] | None:
        """The records of ``data`` (whole lines), the file's bytes after those fed before; None
        when the cursor is stale."""
        lines = fed_lines(data, self.lines)
        if self.stale:
            return None
        results: list[Result] = []
        for number, line in lines:
            if not self._first_seen:
                self._first_seen = True
                if _opens_document(line):
                    self.stale = True  # perhaps a document's first line (see _jsonl_document)
                    return None
            for place, record, value, error, raw in _line_values(self.label, number, line):
                if error is None and (is_message_line(value) or (self._run is not None and _message_shaped(value))):
                    if self._grow_run(place, value, results):
                        continue
                    self.stale = True
                    return None
                if error is not None:
                    results.append(Rejected(record, error, raw_text(raw)))
                    continue
                self._run = self._before_run = None
                if _is_conversation_list(value):
                    for position, item in enumerate(value):
                        results += self._reading.take(item, f"{record}/{position}", f"{place}.{position}")
                    continue
                results += self._reading.take(value, record, place)
        self.lines += data.count(b"\n")
        return results

    def _grow_run(self, number: int | str, message: Any, results: list[Result]) -> bool:
        """Add one message line to the open run (opening one), its records to ``results``;
        False when the run now reads otherwise than the lines before said (stale)."""
        reading = self._reading
        if self._run is None:
            # One message never continues a conversation (that takes two, and one more): the run
            # begins a conversation of its own, as a whole import ended here says.
            self._before_run = reading.current
            run = self._run = _Run(self.label)
            run.add(number, message)
            results += reading.take(run, f"{self.label}:{number}-{number}", number)
            return True
        run = self._run
        run.add(number, message)
        if self._before_run is not None and self._before_run.continued_by(run):
            return False  # a whole import takes the grown run for the conversation before it, continued
        current = reading.current
        assert current is not None  # the run's own conversation
        meta, _problem = _conversation_parts(run)
        results += current.extend(meta, f"{self.label}:{run.lines[0]}-{number}", run)
        signatures = [_signature_digest(m) for m in current.messages]
        known = reading.imported.get(current.emitter.session_id, [])
        reading.imported[current.emitter.session_id] = signatures if len(signatures) >= len(known) else known
        return True

    def finish(self, last_record: str) -> list[Result]:
        """What the import says at the end of its input (the cursor is left as it was)."""
        current = self._reading.current
        if current is None or self.stale:
            return []
        ending = copy.copy(current)
        ending.emitter = copy.copy(current.emitter)
        return list(ending.finish())


def _conversations(path: Path, label: str, data: Content | None) -> Iterator[tuple[Any, str, object]]:
    """(conversation or Rejected, record label, position) for each conversation in the file."""
    skip = 0  # lines a JSON document took (those after it are read as lines)
    if path.suffix.lower() != ".jsonl":
        data = read_bytes(path, data)
        document, error = parse_json(data)
        if error is None:
            yield from _document_conversations(document, label)
            return
        if not _looks_like_jsonl(data):
            if (kept := cut_conversations(data)) is not None:
                # A document cut off (a partial download): what it holds whole, as JSONL keeps
                # the whole messages of a line cut off.
                yield from _document_conversations(kept[0], label)
                error += kept[1]
            yield Rejected(label, error, raw_text(data)), label, 0
            return
    elif (found := _jsonl_document(path, data)) is not None:
        # One JSON document saved under .jsonl (a pretty-printed array of conversations or
        # messages): read line by line, every line of it would be rejected and nothing imported.
        document, through = found
        yield from _document_conversations(document, label)
        if through is None:
            return
        skip = through
    # Lines that are single chat messages (an agent that logs each message as it goes) are one
    # conversation together: each run of them, a cut or unreadable line inside it included.
    run = _Run(label)
    for number, line in read_lines(path, data):
        if number <= skip:
            continue
        for place, record, value, error, raw in _line_values(label, number, line):
            if error is None and (is_message_line(value) or (run and _message_shaped(value))):
                run.add(place, value)
                continue
            if error is not None:
                yield Rejected(record, error, raw_text(raw)), record, place
                continue
            if run:
                yield run, f"{label}:{run.lines[0]}-{run.lines[-1]}", run.lines[0]
                run = _Run(label)
            if _is_conversation_list(value):
                # A line holding an array of conversations (json.dumps of a list, saved as .jsonl):
                # each is a conversation, as in a JSON document, not one message list.
                for position, item in enumerate(value):
                    # Named as a part of the line (label:N/K), as every record of a line file is.
                    yield item, f"{record}/{position}", f"{place}.{position}"
                continue
            yield value, record, place
    if run:
        yield run, f"{label}:{run.lines[0]}-{run.lines[-1]}", run.lines[0]


def _line_values(label: str, number: int, line: bytes) -> Iterator[tuple[int | str, str, Any, str | None, bytes]]:
    """(position, record, value, error, bytes) of each record of line ``number``
    (:func:`streams.importers.base.line_values`), the ``@BYTE`` of a later one in its position
    and name."""
    for at, part, value, error, _canonical in line_values(line):
        place: int | str = f"{number}@{at}" if at else number
        if error is not None and (kept := cut_conversations(part)) is not None:
            # A record cut off: what it holds whole goes before the line's rejection, which says
            # what was kept.
            yield place, f"{label}:{place}", kept[0], None, part
            error += kept[1]
        yield place, f"{label}:{place}", value, error, part


def cut_conversations(raw: bytes) -> tuple[Any, str] | None:
    """What a record cut off holds whole (:func:`streams.importers.base.read_cut`), as a
    conversation (or a list of them, the last one cut) the importer takes, and the note its
    rejection adds; None when it holds no whole message or is no cut record.

    Each message whole before the cut is kept, with the facts read before it (``id``,
    ``created``, ``model``, ``title``): its events are those of the completed record, under the
    same eventIds, so the completed line appends the rest and nothing conflicts. A message cut
    inside is left out until it is whole: kept cut, it would hold another text under the eventId
    of the whole one (a conflict when the line is completed)."""
    found = read_cut(raw, MESSAGE_LIST_KEYS)
    if found is None:
        return None
    if isinstance(found, CutArray) and found and not any(isinstance(item, dict) and "role" in item for item in found):
        # An array of conversations: those read whole, and what the cut one holds whole.
        items: list[Any] = [item for item in found if not isinstance(item, CutObject | CutArray)]
        kept = _cut_conversation(found[-1]) if isinstance(found[-1], CutObject | CutArray) else None
        if kept is not None:
            items.append(kept[0])
        if not items or not _is_conversation_list(items):
            return None
        whole = len(items) - (kept is not None)
        note = f"conversations 0 to {whole - 1}" if whole else ""
        if kept is not None:
            note += (" and " if whole else "") + f"{kept[1]} of conversation {whole}"
        return items, f"; kept what it holds whole before the cut: {note}"
    kept = _cut_conversation(found)
    if kept is None:
        return None
    return kept[0], f"; kept what it holds whole before the cut: {kept[1]}"


def _cut_conversation(found: CutObject | CutArray) -> tuple[CutObject | CutArray, str] | None:
    """The conversation a cut object or message list holds whole (itself cut: no session.ended
    goes out for it), and which messages those are."""
    if isinstance(found, CutArray):
        whole = CutArray(item for item in found if not isinstance(item, CutObject | CutArray))
        if not whole or not all(isinstance(item, dict) and "role" in item for item in whole):
            return None
        return whole, _kept_messages(len(whole))
    if api_conversation(found) is not None:
        return None  # a logged exchange: its answer comes last, and is what was cut
    record = CutObject((key, value) for key, value in found.items() if not isinstance(value, CutObject | CutArray))
    for key, value in found.items():
        if isinstance(value, CutArray) and key in MESSAGE_LIST_KEYS:
            record[key] = [item for item in value if not isinstance(item, CutObject | CutArray)]
    messages = conversation_messages(record)
    if not messages:
        return None
    return record, _kept_messages(len(messages))


def _kept_messages(count: int) -> str:
    return "messages[0]" if count == 1 else f"messages[0] to messages[{count - 1}]"


MESSAGE_LIST_KEYS = ("messages", "traj", "trajectory", "conversation", "history")
"""Where a conversation object holds its chat messages: ``messages`` (the API's name), else the
names agent benchmarks dump their runs under (tau-bench's ``traj``), taken only when every item
is a message (an object with a ``role``), so another format's ``trajectory`` is not mistaken."""


def conversation_messages(value: Any) -> list[Any] | None:
    """The chat messages of a conversation object (see :data:`MESSAGE_LIST_KEYS`), or None."""
    if not isinstance(value, dict):
        return None
    messages = value.get("messages")
    if isinstance(messages, list):
        return messages
    for key in MESSAGE_LIST_KEYS[1:]:
        items = value.get(key)
        if isinstance(items, list) and items and all(isinstance(item, dict) and "role" in item for item in items):
            return items
    return None


def is_message_line(value: Any) -> bool:
    """A JSONL line that is one chat-completions message (``role`` and nothing of a whole
    conversation, a logged API call or another format's record)."""
    return _message_shaped(value) and value.get("role") in ROLES


def _message_shaped(value: Any) -> bool:
    """A JSONL line shaped as one message, whatever its ``role`` says: inside a run of message
    lines it is one of the run's messages, rejected for its role (a role the chat API does not
    know, ``"critic"``, an agent framework's own) while the run goes on. It ended the run and was
    read as a conversation record, rejected for a missing ``messages`` list, and the messages
    after it were another session."""
    return (isinstance(value, dict) and isinstance(value.get("role"), str) and "type" not in value
            and "messages" not in value and ("content" in value or "tool_calls" in value
                                             or "function_call" in value))


def _opens_document(line: bytes) -> bool:
    """Whether ``line`` is no JSON text alone but may open a pretty-printed document (``[`` or
    ``{``): a ``.jsonl`` file that starts so may be one document, read whole. A line that holds
    whole records (two that lost the newline between them, or a cut one and a whole one) is a
    line: taken for a document's start, it made a follower import the whole file on every change."""
    return parse_json(line)[1] is not None and line.removeprefix(BOM)[:1] in (b"[", b"{") \
        and split_line(line.removeprefix(BOM).strip()) is None


def _jsonl_document(path: Path, data: Content | None) -> tuple[Any, int | None] | None:
    """The JSON document a ``.jsonl`` file holds when its first non-blank line is no JSON text
    alone (``[`` or ``{`` opening a pretty-printed document) but the whole file is one, and None
    (nothing after it); else None. When the caller holds the bytes as parts and all but the last
    part are the document (a follower adds an end-of-input line), the second item is how many
    lines the document took: the line after it is read as a line."""
    first = next(iter(read_lines(path, data)), None)
    if first is None or not _opens_document(first[1]):
        return None
    document, error = parse_json(read_bytes(path, data))
    if error is None:
        return document, None
    if isinstance(data, tuple) and len(data) > 1:
        head = b"".join(data[:-1])
        document, error = parse_json(head)
        if error is None:
            return document, head.count(b"\n") + (not head.endswith(b"\n"))
    return None


def _is_conversation_list(value: Any) -> bool:
    """A JSON array whose items are whole conversations (message lists, ``{"messages"}``
    objects or logged API exchanges), not the messages of one."""
    return isinstance(value, list) and bool(value) and all(
        isinstance(item, list) or (isinstance(item, dict) and "role" not in item and (
            conversation_messages(item) is not None or api_conversation(item) is not None))
        for item in value)


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
        self, value: Any, meta: dict[str, Any], *, label: str, key: tuple[str, object], log_id: str,
        acl: dict[str, Any] | None,
    ) -> None:
        self.value = value
        self.label = label
        self.calls: dict[str, tuple[str, str]] = {}  # toolCallId → (eventId, toolName)
        self.function_calls: dict[str, tuple[str, str]] = {}  # legacy name → (eventId, id)
        self.base: float = meta["created"]
        self.emitter = SessionEmitter(
            source=SOURCE, id_prefix="oai", session_id=meta["id"] or _derived_session_id(key, meta["messages"]),
            log_id=log_id, acl=acl,
        )
        self.messages: list[Any] = []  # those imported so far
        self.source_id: str | None = meta["id"]  # the id the record gave (sessionId may add @position)
        self.last_record = label
        self.answered = False  # the last turn ended at the assistant's answer
        # Read from a record cut off (cut_conversations): the conversation is not over, and its
        # completed record will end it. session.ended would go out twice under one eventId, at
        # two times: a conflict when the line is completed.
        self.cut = False

    def begin(self, meta: dict[str, Any], run: _Run | None = None) -> Iterator[Result]:
        """session.started and the events of every message of ``meta`` (the conversation's
        parts); the session stays open. ``run``: as :meth:`extend`'s."""
        fields = {name: meta[name] for name in ("title", "model") if meta[name]}
        yield from self.emitter.start_session(
            time=time_from_posix(self.base), record=self.label, raw=self.value, fields=fields,
        )
        yield from self.extend(meta, self.label, run)

    def continued_by(self, messages: list[Any]) -> bool:
        """Whether ``messages`` start with every message of this conversation (two at least)
        and add to them (a record repeated as it is stays a record of its own)."""
        return (len(self.messages) >= 2 and len(messages) > len(self.messages)
                and all(_signature(a) == _signature(b) for a, b in zip(self.messages, messages, strict=False)))

    def extend(self, meta: dict[str, Any], label: str, run: _Run | None = None) -> Iterator[Result]:
        """The events of the messages past those already imported; message i is timed at the
        first record's ``created`` + i, so the steps of a run read as one timeline.

        ``run``: the run of message lines ``meta`` was read from; a message's line names its records
        (``run.jsonl:7``): a name that stays as the run grows, so a follower that reads the run
        again dead-letters a bad message once, not once per name the run's span gave it."""
        messages: list[Any] = meta["messages"]
        for index in range(len(self.messages), len(messages)):
            self.last_record = record = (f"{run.label}:{run.lines[index]}" if run is not None
                                         else f"{label}/messages[{index}]")
            time = time_from_posix(self.base + index)
            yield from self._message(self.emitter, messages[index], index, time, record, meta["model"],
                                     calls_follow=_calls_follow(messages, index))
        self.messages = list(messages)

    def finish(self) -> Iterator[Result]:
        """turn.ended of the open turn and session.ended (only the former for a conversation cut
        off: turn.ended's id names the turn's last event, so the completed turn's end is another)."""
        yield from self.emitter.end_turn(record=self.last_record, raw="")
        if self.cut:
            return
        yield self.emitter.emit(
            "session.ended", event_id=self.emitter.event_id("session.ended"),
            time=self.emitter.last_time or time_from_posix(self.base), record=self.last_record, raw="",
        )

    def _message(
        self, emitter: SessionEmitter, message: Any, index: int, time: str, record: str,
        model: str | None, *, calls_follow: bool = False,
    ) -> Iterator[Result]:
        if not isinstance(message, dict):
            reason = f"messages[{index}] must be an object, not {json_kind(message)}"
            yield Rejected(record, reason, raw_text(message))
            return
        role = message.get("role")
        if role is None:
            kind = message.get("type")
            reason = (f"Responses API item type {kind!r} is not imported" if isinstance(kind, str)
                      else f"missing field 'messages[{index}].role'")
            yield Rejected(record, reason, raw_text(message))
            return
        if role not in ROLES:
            reason = f"field 'messages[{index}].role' is {role!r}, not one of {', '.join(ROLES)}"
            yield Rejected(record, reason, raw_text(message))
            return
        payload = small_payload(message)
        if role == "user" or (self.answered and emitter.turn_id is None):
            # After an answer, whatever comes next opens a turn of its own, as a user message
            # does; a message outside every turn would form a unit that nothing closes.
            self.answered = False
            yield from emitter.start_turn(index, time=time, record=record, raw=message)
        if role in ("tool", "function"):
            yield self._tool_result(emitter, message, index, time, record, payload)
            return
        text = _content_text(message)
        tool_calls = message.get("tool_calls") or []
        legacy_call = message.get("function_call")
        if _zero_valued(legacy_call):
            # An OpenAI-compatible server that writes every field of its response type, empty
            # ones too (Snowflake Cortex: `"function_call": {"name": "", "arguments": ""}` beside
            # the real tool_calls), calls no legacy function: nothing to import, nothing to refuse.
            legacy_call = None
        thought = message.get("reasoning_content", message.get("reasoning")) if role == "assistant" else None
        if isinstance(thought, str) and thought.strip():
            # The model's thinking as DeepSeek, vLLM, SGLang and OpenRouter return it beside the
            # answer: hidden, as a Responses API reasoning item. It carries no payload, so the
            # message's own events stay what they were before it was read.
            thinking: dict[str, Any] = {"text": thought, "kind": "thinking"}
            if model:
                thinking["model"] = model
            yield emitter.emit(
                "message", event_id=emitter.event_id(index, "reasoning"), time=time, record=record,
                raw=message, role=role, fields=thinking, visibility="hidden",
            )
        if text or not (tool_calls or legacy_call):
            fields: dict[str, Any] = {"text": text}
            reasoning = message.get("type") == "reasoning"
            if reasoning:
                fields["kind"] = "thinking"
            if isinstance(message.get("name"), str):
                fields["name"] = message["name"]
            if role == "assistant" and model:
                fields["model"] = model
            yield emitter.emit(
                "message", event_id=emitter.event_id(index, "message"), time=time,
                record=record, raw=message, role=role, fields=fields, payload=payload,
                visibility="hidden" if reasoning else None,
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
        if message.get("type") in _HOSTED_CALLS and tool_calls and tool_calls[0]["id"] in self.calls:
            # A hosted tool's item holds what the call found as well: its result.
            call_id = tool_calls[0]["id"]
            output, status = _hosted_result(message)
            fields = {"toolCallId": call_id, "toolName": self.calls[call_id][1], "status": status, "output": output}
            yield emitter.emit(
                "tool.result", event_id=emitter.event_id(index, "tool_result"), time=time, record=record,
                raw=message, role="tool", fields=fields, parent_event_id=self.calls[call_id][0],
            )
        if legacy_call is not None:
            yield self._tool_call(
                emitter, {"id": None, "function": legacy_call}, index, "function_call",
                time, record, message, payload,
            )
        elif (text and not tool_calls and message.get("type") != "reasoning" and not calls_follow
              and emitter.turn_id is not None):
            # An answer that calls no tool ends the turn: the model waits for the user now. So
            # a followed run's last turn is chunked as soon as its answer is written, not
            # once the file has been idle. A Responses API message item that the same
            # response's function calls follow (a preamble: "Let me check the forecast.") is
            # no such answer: the turn goes on with the calls.
            self.answered = True
            yield from emitter.end_turn(record=record, raw=message)

    def _tool_call(
        self, emitter: SessionEmitter, call: Any, index: int, position: int | str, time: str,
        record: str, message: dict[str, Any], payload: Any,
    ) -> Result:
        legacy = position == "function_call"
        where = f"messages[{index}].function_call" if legacy else f"messages[{index}].tool_calls[{position}]"
        function = call.get("function") if isinstance(call, dict) else None
        if function is None and isinstance(call, dict) and call.get("type") == "custom" and isinstance(
                call.get("custom"), dict):
            # A custom tool's call (free-form input, GPT-5): its input is text, kept as
            # {"input": ...} as the Responses API's custom_tool_call is.
            function = {"name": call["custom"].get("name"), "arguments": {"input": call["custom"].get("input")}}
            where += ".custom"
        if not isinstance(function, dict):
            return Rejected(record, field_problem(f"{where}.function", function, "an object"), raw_text(message))
        name = function.get("name")
        if not isinstance(name, str) or not name:
            field = f"{where}.name" if where.endswith(".custom") or legacy else f"{where}.function.name"
            return Rejected(record, field_problem(field, name, "a non-empty string"), raw_text(message))
        call_id = call.get("id")
        if legacy:
            call_id = f"function_call-{index}"
        elif not isinstance(call_id, str) or not call_id:
            return Rejected(record, field_problem(f"{where}.id", call_id, "a non-empty string"), raw_text(message))
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
                return Rejected(record, field_problem(f"messages[{index}].name", message.get("name"), "a string"),
                                raw_text(message))
            parent, call_id = self.function_calls.get(name, (None, f"function_call-{name}"))
        else:
            call_id = _answered_call(message)
            if not isinstance(call_id, str) or not call_id:
                ids = message.get("tool_call_ids")
                reason = (f"field 'messages[{index}].tool_call_ids' names {len(ids)} calls; a tool message "
                          "answers one" if isinstance(ids, list) and len(ids) > 1
                          else field_problem(f"messages[{index}].tool_call_id", call_id, "a non-empty string"))
                return Rejected(record, reason, raw_text(message))
            if call_id in self.calls:
                parent, name = self.calls[call_id]
        fields: dict[str, Any] = {"toolCallId": call_id}
        if name is not None:
            fields["toolName"] = name
        fields["output"] = _content_text(message)
        fields["status"] = _tool_status(message, fields["output"])
        return emitter.emit(
            "tool.result", event_id=emitter.event_id(index, "tool_result"), time=time,
            record=record, raw=message, role="tool", fields=fields, parent_event_id=parent,
            payload=payload,
        )


def _zero_valued(value: Any) -> bool:
    """Whether ``value`` is an object whose every field is empty (``""``, ``null``, ``{}``,
    ``[]``): a client's zero value written out, not data."""
    return isinstance(value, dict) and all(field in ("", None) or field == {} or field == []
                                           for field in value.values())


# Built-in tools whose call an item of its own answers: (tool name, the field of its input).
_PAIRED_CALLS = {"computer_call": ("computer", "action"), "local_shell_call": ("local_shell", "action"),
                 "shell_call": ("shell", "action"), "apply_patch_call": ("apply_patch", "operation")}
_PAIRED_OUTPUTS = ("computer_call_output", "local_shell_call_output", "shell_call_output", "apply_patch_call_output")
# Tools the API runs itself: one item holds the call and what it found.
_HOSTED_CALLS = ("web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call", "mcp_call")
_CALL_ITEMS = ("function_call", "custom_tool_call", *_PAIRED_CALLS, *_HOSTED_CALLS)


def _calls_follow(messages: list[Any], index: int) -> bool:
    """Whether the Responses API ``message`` item at ``index`` is followed, past reasoning
    items, by a function call: the items of one response, the text a preamble to the calls."""
    if not isinstance(messages[index], dict) or messages[index].get("type") != "message":
        return False
    for later in messages[index + 1:]:
        kind = later.get("type") if isinstance(later, dict) else None
        if kind != "reasoning":
            return kind in _CALL_ITEMS
    return False


def api_conversation(value: Any) -> dict[str, Any] | None:
    """The conversation inside a logged API exchange, or None when ``value`` is not one.

    Tool-calling runs are often logged as what went over the wire rather than as a message
    list: a chat.completion response (``choices``), a request/response pair (``{"request":
    {"messages"}, "response": {"choices"}}``), or lines of the Batch API (input ``{"custom_id",
    "body": {"messages"}}``, output ``{"custom_id", "response": {"body": {"choices"}}}``). The
    conversation is the request's messages followed by the first choice's message; id, created
    and model come from the response (else the request, else ``custom_id``).

    A response logged as it was streamed (a list of ``chat.completion.chunk`` objects, or of
    Responses API stream events) is assembled into the message it streamed, and an object an SDK
    serialised with its type (``{"__type__": ..., "__data__": {...}}``) is read as its data. A
    response that is there but holds no answer this can read is named in the conversation's
    ``responseProblem``: the caller dead-letters it, so the answer is never lost silently.
    """
    value = _unwrapped(value)
    if not isinstance(value, dict) or conversation_messages(value) is not None:
        return None
    request, response = value.get("request"), value.get("response")
    if request is None and isinstance(value.get("body"), dict):
        request = value["body"]
    if request is None and "model" in value and isinstance(value.get("input"), list | str):
        request = value  # a Responses API request body on its own
    if response is None and (isinstance(value.get("choices"), list) or _is_responses_response(value)):
        response = value
    request = _body(request)
    logged_response = response
    response = _streamed(_body(response))
    sent = _sent_messages(request) if isinstance(request, dict) else None
    choices = response.get("choices") if isinstance(response, dict) else None
    output = response.get("output") if _is_responses_response(response) else None
    if not isinstance(sent, list) and not isinstance(choices, list) and not isinstance(output, list):
        return None
    messages = list(sent) if isinstance(sent, list) else []
    if isinstance(choices, list) and choices:
        first = _unwrapped(choices[0])
        messages.append(first.get("message", first) if isinstance(first, dict) else first)
    if isinstance(output, list):
        messages += output
    conversation: dict[str, Any] = {"messages": messages}
    for name, keys in (("id", ("id",)), ("created", ("created", "created_at")), ("model", ("model",))):
        for source in (response, request):
            found = next((source[key] for key in keys if isinstance(source, dict) and source.get(key) is not None),
                         None)
            if found is not None:
                conversation[name] = found
                break
    if "id" not in conversation and isinstance(value.get("custom_id"), str):
        conversation["id"] = value["custom_id"]
    if logged_response is not None and not isinstance(choices, list) and not isinstance(output, list):
        conversation["responseProblem"] = _response_problem(response)
    return conversation


def _unwrapped(value: Any) -> Any:
    """An object an SDK serialised with its type (``{"__type__": "openai.types...ChatCompletion",
    "__data__": {...}}``, as API recorders write them) as its data; anything else unchanged."""
    if isinstance(value, dict) and isinstance(value.get("__type__"), str) and "__data__" in value:
        return value["__data__"]
    return value


def _streamed(response: Any) -> Any:
    """A response logged as the list of what was streamed, as the response it amounts to.

    ``chat.completion.chunk`` objects become one chat.completion whose first choice's message
    joins the deltas (text, refusal and reasoning concatenated, tool calls merged by their ``index``, their
    ``arguments`` concatenated); Responses API stream events become the ``response`` of their
    ``response.completed`` (else last ``response.*``) event. Anything else is returned unchanged.
    """
    if not isinstance(response, list):
        return response
    items = [_unwrapped(item) for item in response]
    events = [item.get("response") for item in items
              if isinstance(item, dict) and isinstance(item.get("type"), str) and item["type"].startswith("response.")
              and _is_responses_response(item.get("response"))]
    if events:
        done = [item["response"] for item in items if isinstance(item, dict) and item.get("type") == "response.completed"
                and _is_responses_response(item.get("response"))]
        return (done or events)[-1]
    chunks = [item for item in items if isinstance(item, dict) and isinstance(item.get("choices"), list)]
    if not chunks or len(chunks) != len([item for item in items if isinstance(item, dict) and "choices" in item]):
        return response
    message: dict[str, Any] = {"role": "assistant", "content": None}
    calls: dict[Any, dict[str, Any]] = {}
    legacy: dict[str, Any] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            choice = _unwrapped(choice)
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else choice.get("message")
            if not isinstance(delta, dict):
                continue
            for key in ("content", "refusal", "reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    message[key] = (message.get(key) or "") + delta[key]
            for position, call in enumerate(delta.get("tool_calls") or []):
                if isinstance(call, dict):
                    _merge_call(calls.setdefault(call.get("index", position), {}), call)
            if isinstance(delta.get("function_call"), dict):
                _merge_call(legacy, {"function": delta["function_call"]})
    if calls:
        keys = sorted(calls) if all(isinstance(key, int) for key in calls) else list(calls)
        message["tool_calls"] = [calls[key] for key in keys]
    if legacy:
        message["function_call"] = legacy["function"]
    first = chunks[0]
    assembled = {key: first[key] for key in ("id", "created", "model") if key in first}
    assembled.update({"object": "chat.completion", "choices": [{"index": 0, "message": message}]})
    return assembled


def _merge_call(call: dict[str, Any], delta: dict[str, Any]) -> None:
    """Add one streamed tool-call delta to the call assembled so far."""
    for key in ("id", "type"):
        if isinstance(delta.get(key), str) and delta[key] and not call.get(key):
            call[key] = delta[key]
    function = delta.get("function")
    if isinstance(function, dict):
        target = call.setdefault("function", {})
        if isinstance(function.get("name"), str) and function["name"] and not target.get("name"):
            target["name"] = function["name"]
        if isinstance(function.get("arguments"), str):
            target["arguments"] = target.get("arguments", "") + function["arguments"]


def _response_problem(response: Any) -> str:
    """Why a logged response gave no answer to import (for its dead letter)."""
    if isinstance(response, dict) and isinstance(response.get("error"), dict | str):
        error = response["error"]
        detail = error.get("message") if isinstance(error, dict) else error
        return f"field 'response' is an API error, not an answer: {str(detail)[:200]}"
    shape = (f"an object with keys {', '.join(sorted(map(str, response))[:8])}" if isinstance(response, dict)
             else json_kind(response))
    return ("field 'response' holds no chat.completion 'choices', Responses API 'output' or stream of "
            f"either ({shape}); the request's messages are imported, the answer is not")


def _is_responses_response(value: Any) -> bool:
    """A Responses API response: ``{"object": "response", "output": [items]}``."""
    return isinstance(value, dict) and value.get("object") == "response" and isinstance(value.get("output"), list)


def _sent_messages(request: dict[str, Any]) -> list[Any] | None:
    """What a request sent: chat ``messages``, or the Responses API's ``instructions`` and
    ``input`` (a string is one user message)."""
    if isinstance(request.get("messages"), list):
        return list(request["messages"])
    sent = request.get("input")
    if isinstance(sent, str):
        sent = [{"role": "user", "content": sent}]
    if not isinstance(sent, list) or (sent and all(isinstance(item, str | int | float) for item in sent)):
        # Responses API input items are objects: a list of strings or numbers is the input of
        # an embeddings (or moderations) request, no conversation.
        return None
    instructions = request.get("instructions")
    if isinstance(instructions, str) and instructions:
        return [{"role": "system", "content": instructions}, *sent]
    return list(sent)


def _chat_message(item: Any) -> Any:
    """A Responses API item as the chat message it amounts to (one message per item, so
    positions keep naming the source item); chat messages and unknown items pass unchanged.

    ``function_call`` / ``custom_tool_call`` (and the built-in tools' calls answered by an
    item of their own: ``computer_call``, ``local_shell_call``, ``shell_call``,
    ``apply_patch_call``) → an assistant message with one tool call; their ``*_output`` items →
    a tool message; a hosted tool's call, which holds its result (``web_search_call``,
    ``file_search_call``, ``code_interpreter_call``, ``image_generation_call``, ``mcp_call``) →
    an assistant message with one tool call, whose result :meth:`_Conversation._message` adds;
    ``reasoning`` → an assistant message with its summary text (imported hidden, as thinking)."""
    if not isinstance(item, dict) or "role" in item:
        return item
    kind = item.get("type")
    if not isinstance(kind, str):
        return item
    if kind in ("function_call", "custom_tool_call") and isinstance(item.get("call_id"), str):
        arguments = item.get("arguments") if kind == "function_call" else {"input": item.get("input")}
        call = {"id": item["call_id"], "type": "function",
                "function": {"name": item.get("name"), "arguments": arguments}}
        return {**item, "role": "assistant", "content": None, "tool_calls": [call]}
    if kind in _PAIRED_CALLS and isinstance(item.get("call_id"), str):
        name, key = _PAIRED_CALLS[kind]
        call = {"id": item["call_id"], "type": "function", "function": {"name": name, "arguments": item.get(key)}}
        return {**item, "role": "assistant", "content": None, "tool_calls": [call]}
    if kind in _HOSTED_CALLS:
        name, arguments = _hosted_call(item)
        call_id = item.get("id") if isinstance(item.get("id"), str) and item["id"] else item.get("call_id")
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        return {**item, "role": "assistant", "content": None, "tool_calls": [call]}
    if kind in ("function_call_output", "custom_tool_call_output", *_PAIRED_OUTPUTS):
        call_id = item.get("call_id", item.get("id") if kind == "local_shell_call_output" else None)
        return {**item, "role": "tool", "tool_call_id": call_id, "content": _output_text(item.get("output"))}
    if kind == "reasoning":
        summary = item.get("summary")
        parts = summary if isinstance(summary, list) else []
        text = "\n".join(part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str))
        return {**item, "role": "assistant", "content": text}
    return item


def _hosted_call(item: dict[str, Any]) -> tuple[Any, Any]:
    """(tool name, input) of a hosted tool's call item."""
    kind = item["type"]
    if kind == "mcp_call":
        return item.get("name"), item.get("arguments")
    if kind == "web_search_call":
        action = item.get("action")
        if not isinstance(action, dict):
            return "web_search", {"query": item.get("query")}
        return "web_search", {key: value for key, value in action.items() if key != "sources"}  # what it found
    if kind == "file_search_call":
        return "file_search", {"queries": item.get("queries")}
    if kind == "code_interpreter_call":
        return "code_interpreter", {"code": item.get("code")}
    return "image_generation", {}


def _tool_status(message: dict[str, Any], output: str) -> str:
    """``error`` for a tool message that says its call failed, else ``ok`` (chat completions
    carry no error flag). It says so by a flag its framework adds (LangChain's ToolMessage
    ``status: "error"``, Anthropic's and MCP's ``is_error`` / ``isError``), or in the words
    an agent loop writes for a call that raised: ``f"Error: {e}"`` (tau-bench's environment,
    LangGraph's ToolNode, most hand-written loops; tau-bench's tools word the refusals of
    their domain the same way), or an object that is an ``error`` and nothing else. Any other
    output is the tool's, whatever it says: a log line or a page that mentions an error does
    not begin with ``Error: ``."""
    if message.get("status") == "error" or message.get("is_error") is True or message.get("isError") is True:
        return "error"
    if output.startswith("Error: "):
        return "error"
    if output.startswith("{"):
        value, _error = parse_json(output)
        if isinstance(value, dict) and list(value) == ["error"] and value["error"] not in (None, "", False):
            return "error"
    return "ok"


def _hosted_result(item: dict[str, Any]) -> tuple[str, str]:
    """(output, status) of a hosted tool's call item: what it found, as text (sources, files
    and their text, logs, an MCP tool's output; an image as ``[image]``)."""
    kind, parts = item["type"], []
    if kind == "mcp_call":
        parts += [value if isinstance(value, str) else raw_text(value) for value in (item.get("output"), item.get("error"))
                  if value not in (None, "")]
    elif kind == "web_search_call":
        action = item.get("action")
        for source in (action.get("sources") if isinstance(action, dict) else None) or []:
            if isinstance(source, dict) and isinstance(source.get("url"), str):
                parts.append(source["url"])
    elif kind == "file_search_call":
        for found in item.get("results") or []:
            if isinstance(found, dict):
                parts += [found[key] for key in ("filename", "text") if isinstance(found.get(key), str)]
    elif kind == "code_interpreter_call":
        for output in item.get("outputs") or []:
            if isinstance(output, dict):
                parts.append(output["logs"] if isinstance(output.get("logs"), str) else f"[{output.get('type')}]")
    elif item.get("result"):
        parts.append("[image]")
    failed = item.get("status") in ("failed", "incomplete") or bool(kind == "mcp_call" and item.get("error"))
    return "\n".join(part for part in parts if part), "error" if failed else "ok"


def _output_text(output: Any) -> Any:
    """A built-in tool's output as a tool message's content: text as it is, a shell's
    ``[{stdout, stderr, outcome}]`` as its streams, a screenshot as ``[computer_screenshot]``."""
    if isinstance(output, list) and any(isinstance(part, dict) and ("stdout" in part or "stderr" in part)
                                        for part in output):
        return "\n".join(part[key] for part in output if isinstance(part, dict)
                         for key in ("stdout", "stderr") if isinstance(part.get(key), str) and part[key])
    if isinstance(output, dict) and not isinstance(output.get("text"), str):
        return [output]
    return output


def _body(part: Any) -> Any:
    """A Batch API request or response keeps the API's JSON under ``body`` (an API recorder's,
    as its SDK serialised it: the streamed chunks of a list, or ``{"__type__", "__data__"}``)."""
    part = _unwrapped(part)
    if isinstance(part, dict) and isinstance(_unwrapped(part.get("body")), dict | list):
        return _unwrapped(part["body"])
    return part


def _conversation_parts(value: Any) -> tuple[dict[str, Any], str | None]:
    """Messages, id, created, model and title of a conversation, or the problem with it."""
    meta: dict[str, Any] = {"messages": [], "id": None, "created": 0, "model": None, "title": None}
    if isinstance(value, list):
        meta["messages"] = [_chat_message(item) for item in value]
        return meta, None
    if not isinstance(value, dict):
        return meta, f"a conversation must be a list of messages or an object, not {json_kind(value)}"
    messages = conversation_messages(value)
    if messages is None:
        if _message_shaped(value):  # a line of one message, outside a run of them
            return meta, (f"field 'role' is {value['role']!r}, not one of {', '.join(ROLES)} (a line of one "
                          "chat message), and the line holds no conversation ('messages')")
        return meta, "missing field 'messages' (a list of chat messages)"
    meta["messages"] = messages = [_chat_message(item) for item in messages]
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


def _signature(message: Any) -> tuple[Any, ...]:
    """What makes two copies of a message the same message: a client that resends the history
    may drop null fields or add its own, but not change role, text or tool-call ids."""
    if not isinstance(message, dict):
        return ("?", repr(message))
    calls = message.get("tool_calls")
    call_ids = tuple(c.get("id") for c in calls if isinstance(c, dict)) if isinstance(calls, list) else ()
    return (message.get("role"), _content_text(message), call_ids, _answered_call(message))


def _answered_call(message: dict[str, Any]) -> Any:
    """The id of the call a tool message answers: ``tool_call_id``, or the one id of a
    ``tool_call_ids`` list (SWE-agent's function-calling trajectories name it so; a list of
    several ids is no single answer, and gives None)."""
    ids = message.get("tool_call_ids")
    if "tool_call_id" not in message and isinstance(ids, list) and len(ids) == 1:
        return ids[0]
    return message.get("tool_call_id")


def _signature_digest(message: Any) -> bytes:
    """16 bytes that tell :func:`_signature` apart."""
    return hashlib.blake2b(repr(_signature(message)).encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _same_conversation(earlier: list[bytes] | None, later: list[bytes]) -> bool:
    """Whether ``later`` (message signature digests) can be the conversation imported as ``earlier``
    under the same id: nothing imported yet, or one of them starts with the other (a repeat, an
    earlier step, or a later step of the same run)."""
    if earlier is None:
        return True
    shorter = min(len(earlier), len(later))
    return earlier[:shorter] == later[:shorter]


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
    """Text of a message: a string, ``null``, or parts (non-text parts as ``[type]``). A part's
    text may be the Assistants API's ``{"value": ..., "annotations"}``; one part given alone,
    not in a list, is read as a list of it (an image part's data is never text)."""
    content = message.get("content")
    if content is None or content == "":
        # A model that refuses says so in ``refusal``, its content null, or "" as some loggers
        # write a null content (tests/streams/test_openai_logged_responses.py): that "" lost the words.
        refusal = message.get("refusal")
        return refusal if isinstance(refusal, str) else ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict) and isinstance(content.get("type"), str):
        content = [content]
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                text = part.get("text", part.get("refusal"))
                if isinstance(text, dict) and isinstance(text.get("value"), str):
                    text = text["value"]
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
