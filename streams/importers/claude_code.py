"""Claude Code session transcripts (``~/.claude/projects/*/*.jsonl``) → ASP v1 events.

Each ``user`` / ``assistant`` line carries one API message, often one content block per line
(a single API response is split over several lines sharing ``message.id``). Every block
becomes its own event with an id derived from the line's ``uuid`` and the block's index, so
nothing is duplicated and a re-import yields the same ids. Human turns, subagent episodes
(``isSidechain`` lines) and tool-call lineage are reconstructed here; the mapping is
documented in ``docs/importers.md``.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from streams.asp import json_kind
from streams.importers.base import (
    Accepted,
    Content,
    JsonLine,
    Rejected,
    SessionEmitter,
    fed_lines,
    field_problem,
    iter_json_lines,
    json_lines,
    line_values,
    parse_json,
    raw_text,
    read_lines,
    small_payload,
    valid_time,
)

__all__ = ["AUXILIARY_TYPE_RE", "SOURCE", "SUMMARIES_ONLY", "SubagentLinks", "TranscriptCursor", "iter_claude_code",
           "names_model", "summaries_only"]

SOURCE = "claude-code"
#: The source of a Qwen Code transcript's sessions, read as the Claude Code line each of its
#: lines amounts to (:func:`_claude_shaped`).
QWEN_SOURCE = "qwen-code"

Result = Accepted | Rejected

# Known line types that are not conversation; they become hidden ``x.claude-code.*`` events.
_AUXILIARY_TYPES = ("summary", "system", "file-history-snapshot", "queue-operation", "progress")
# Claude Code adds line types over time (``progress`` came with hooks and subagents, several per
# tool call). A line with another type of this shape is kept the same way, as a hidden
# ``x.claude-code.<type>`` event, instead of turning every such line of a newer transcript into
# a dead letter; a type outside it (not a short lowercase name) is rejected as foreign.
AUXILIARY_TYPE_RE = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_SUBAGENT_TOOLS = ("Task", "Agent")
# A call the model makes: a client tool's, or one the API runs itself (the advisor, web search,
# code execution: ``server_tool_use``; an MCP connector's ``mcp_tool_use``), whose result comes
# back in the same response as a ``*_tool_result`` block.
_CALL_BLOCKS = ("tool_use", "server_tool_use", "mcp_tool_use")
_SERVER_RESULT_TEXT = ("title", "url", "text", "stdout", "stderr", "error_code", "content")
_SERVER_RESULT_OPAQUE = ("encrypted_content", "encrypted_index", "encrypted_stdout", "signature")
_COMMAND_PREFIXES = ("<command-name>", "<command-message>", "<bash-input>")
_OUTPUT_PREFIXES = (
    "<local-command-stdout>", "<local-command-stderr>", "<bash-stdout>", "<bash-stderr>",
)
_INTERRUPT_PREFIX = "[Request interrupted by user"
# Context the client injects into the user's side of the conversation (todo reminders, "file
# changed" notes), like an isMeta line but without the flag.
_INJECTED_PREFIX = "<system-reminder>"
# What the client queues for the model when a background task ends: no words of the user's.
_NOTIFICATION_PREFIX = "<task-notification>"
_SLASH_COMMAND = re.compile(r"/[\w:.-]+(?:\s|$)")
_WHAT = "a transcript line"
_EPOCH = "1970-01-01T00:00:00.000Z"
_UUID_FIELD = re.compile(rb'"uuid"\s*:\s*"([^"\\]+)"')
_SESSION_FIELD = re.compile(rb'"session(?:Id|_id)"\s*:\s*"([^"\\]+)"')


@dataclass
class _Session:
    emitter: SessionEmitter
    active: bool = False
    tool_calls: dict[str, tuple[str, str]] = field(default_factory=dict)  # id → (eventId, name)
    subagent_calls: list[tuple[str, str, Any]] = field(default_factory=list)
    # message.id → the usage snapshot of its last line that got an event (see _counted_usage).
    usage_seen: dict[str, dict[str, int]] = field(default_factory=dict)
    episode_agent: str | None = None
    # A prompt the user queues while the agent works is written as a queue-operation ``enqueue``
    # and taken one of three ways: ``dequeue`` (it becomes the next turn's own user line),
    # ``popAll`` (back into the input box) or ``remove`` (the running turn absorbed it; some
    # clients add a ``queued_command`` attachment with its text, before or after the remove,
    # older ones none). Tuples, so that a copy of the session (``_Transcript.ending``) leaves
    # them be. ``queued``: the texts enqueued and not yet taken, oldest first; ``told``: the
    # absorbed ones already told as a message by one of their two records, awaiting the other
    # (("remove" | "attachment", text)).
    queued: tuple[str, ...] = ()
    told: tuple[tuple[str, str], ...] = ()


@dataclass
class _Pending:
    """An auxiliary line seen before its session had a conversation line to place it after."""

    record: str
    raw: bytes
    place: str  # JsonLine.position of the line
    line_type: str
    value: dict[str, Any]
    session_id: str | None


# (sessionId, agentId) → (eventId, toolCallId, input) of the Task/Agent call that started the
# subagent, learned from the call's result (its toolUseResult names the agentId).
SubagentLinks = dict[tuple[str, str], tuple[str, str, Any]]


def iter_claude_code(
    path: Path, *, label: str, log_id: str = "default", acl: dict[str, Any] | None = None,
    links: SubagentLinks | None = None, data: Content | None = None,
) -> Iterator[Accepted | Rejected]:
    """Events of one Claude Code transcript (``data``: its bytes, when the caller holds them),
    and a Rejected per line that cannot be imported.

    ``links`` is shared by the files of one directory import: Claude Code keeps a subagent's
    transcript in its own file (``SESSION/subagents/agent-ID.jsonl``, after ``SESSION.jsonl`` in
    path order), and the main file's Task result is what ties the agentId to its call."""
    yield from _Transcript(path, label=label, log_id=log_id, acl=acl, links=links, data=data).run()


class TranscriptCursor:
    """A Claude Code import kept open between the parts of a growing file (follow mode): each
    :meth:`feed` reads only the lines written since the last, numbered on from them, so it says
    what an import of the whole file says of those lines; :meth:`finish` says what the import
    says at the end of its input, and the cursor reads on after it.

    What a one-shot import decides from the whole file before its first line (the title and
    model of ``session.started``, see :func:`_prescan`) and the subagent links its sidechain
    lines looked up (``links``, shared by a directory's files) may change as files grow; the
    lines read before would then be read otherwise, and :meth:`feed` says the cursor is stale
    instead of reading on."""

    def __init__(self, path: Path, *, label: str, log_id: str = "default", acl: dict[str, Any] | None = None,
                 links: SubagentLinks | None = None) -> None:
        self.path, self.label, self.log_id, self.acl = path, label, log_id, acl
        self.links: SubagentLinks = {} if links is None else links
        self.lines = 0  # the lines fed so far (blank ones too: they are numbered)
        self._scan = _Prescan(path.stem)
        self._transcript: _Transcript | None = None
        self.stale = False  # a feed found it stale: it reads nothing more

    def feed(self, data: bytes) -> list[Result] | None:
        """The records of ``data`` (whole lines: it ends with a newline), the file's bytes after
        those fed before; None when the cursor is stale (a fresh import must read the file)."""
        lines = fed_lines(data, self.lines)
        self._scan.update(line for _, line in lines)
        if self.stale:
            return None
        transcript = self._transcript
        if transcript is None:
            transcript = self._transcript = _Transcript(
                self.path, label=self.label, log_id=self.log_id, acl=self.acl, links=self.links,
                facts=self._scan.facts())
        elif (transcript.titles, transcript.model) != self._scan.facts() or any(
                key in self.links for key in transcript.link_misses):
            self.stale = True  # what it read is not what a fresh import reads now
            return None
        results: list[Result] = []
        for number, line in lines:
            for part in json_lines(number, line, label=self.label, what=_WHAT):
                results += transcript._line(part)
        self.lines += data.count(b"\n")
        return results

    def finish(self, last_record: str) -> list[Result]:
        """What the import says at the end of its input, ``last_record`` the input's last record
        (the cursor is left as it was)."""
        if self._transcript is None or self.stale:
            return []
        return list(self._transcript.ending()._finish(last_record))


class _Transcript:
    """One pass over a transcript; holds the per-session state that lines refer back to."""

    def __init__(self, path: Path, *, label: str, log_id: str, acl: dict[str, Any] | None,
                 links: SubagentLinks | None = None, data: Content | None = None,
                 facts: tuple[_Titles, str | None] | None = None) -> None:
        """``facts``: :func:`_prescan`'s (titles, model) of the whole file, when the caller knows
        them (else the file, or ``data``, is scanned for them now)."""
        self.path = path
        self.data = data
        self.links: SubagentLinks = {} if links is None else links
        self.label = label
        self.log_id = log_id
        self.acl = acl
        self.sessions: dict[str, _Session] = {}
        self.current: _Session | None = None
        self.line_events: dict[str, str] = {}  # uuid → eventId of the line's last event
        # uuid → (line number (JsonLine.position), digest of what it said), to tell a copy of a
        # line from another line under its uuid
        self.seen_uuids: dict[str, tuple[str, bytes]] = {}
        self.pending: list[_Pending] = []
        # Subagent links looked up and not found: a later link under one of them changes what
        # a fresh import of the same lines says (see TranscriptCursor.feed).
        self.link_misses: set[tuple[str, str]] = set()
        self.titles, self.model = _prescan(path, data) if facts is None else facts
        # sessionId → the agent that wrote it, when not Claude Code (see _claude_shaped)
        self.sources: dict[str, str] = {}

    def run(self) -> Iterator[Result]:
        last_record = f"{self.label}:0"
        for item in iter_json_lines(self.path, label=self.label, what=_WHAT, data=self.data):
            last_record = item.record
            yield from self._line(item)
        yield from self._finish(last_record)

    def _line(self, item: JsonLine | Rejected) -> Iterator[Result]:
        """The records of one line of the file (:func:`iter_json_lines`' reading of it)."""
        if isinstance(item, Rejected):
            yield item
            return
        place, record, value, line = item.position, item.record, item.value, item.raw
        shaped = _claude_shaped(value)
        if shaped is not value:
            self.sources.setdefault(_line_session(value) or self.path.stem, QWEN_SOURCE)
            value = shaped
        line_type = value.get("type")
        if line_type in ("user", "assistant"):
            yield from self._conversation(value, line_type, record, line, place)
        elif line_type in _AUXILIARY_TYPES or (
                isinstance(line_type, str) and AUXILIARY_TYPE_RE.fullmatch(line_type)):
            yield from self._auxiliary(value, line_type, record, line, place)
        elif line_type is None:
            yield Rejected(record, "missing field 'type'", raw_text(line))
        else:
            yield Rejected(record, f"foreign record type {line_type!r}", raw_text(line))

    def ending(self) -> _Transcript:
        """A copy whose :meth:`_finish` leaves this one as it was: what ``_finish`` changes (the
        pending lines, the sessions' emitters and the sessions it may add) is copied, what it
        only reads (the lines' and calls' ids, the links) is shared."""
        copied = copy.copy(self)
        copied.sessions = {key: replace(session, emitter=copy.copy(session.emitter))
                           for key, session in self.sessions.items()}
        copied.pending = list(self.pending)
        if self.current is not None:
            copied.current = copied.sessions[self.current.emitter.session_id]
        return copied

    def _line_position(self, session_id: str, place: str, raw: bytes) -> str:
        """What stands in for the ``uuid`` of a line without one (a summary, a file history
        snapshot, a queue operation) in its session's ids: its line number, and in a file that
        is not the session's own ``SESSION.jsonl`` a digest of the line too. A session spans
        files (a resumed session goes on in a file of another name that repeats its lines, a
        subagent's lines have a file of their own), and two of its files both have a line 1
        without a uuid: named by the number alone, the second file's was dead-lettered as a
        conflict with the first's. The digest, not the file's name, keeps a renamed file's ids."""
        if self.path.stem == session_id:
            return f"line-{place}"
        return f"line-{place}-{hashlib.sha256(raw).hexdigest()[:16]}"

    def _session(self, session_id: str) -> _Session:
        if session_id not in self.sessions:
            emitter = SessionEmitter(
                source=self.sources.get(session_id, SOURCE), id_prefix="cc", session_id=session_id,
                log_id=self.log_id, acl=self.acl,
            )
            self.sessions[session_id] = _Session(emitter)
        return self.sessions[session_id]

    # -- conversation lines ---------------------------------------------------------------

    def _conversation(
        self, line: dict[str, Any], role: str, record: str, raw: bytes, place: str
    ) -> Iterator[Result]:
        uuid = line.get("uuid") if isinstance(line.get("uuid"), str) and line["uuid"] else None
        if uuid is not None and uuid in self.seen_uuids:
            first, said = self.seen_uuids[uuid]
            if said == _said(line):
                # Claude Code writes a line again (the session replayed when an editor reopens
                # it, a resume, concurrent writers), its metadata (cwd, gitBranch, version)
                # perhaps moved on: the copy says nothing new and is no broken record. It is
                # kept hidden, so its line is accounted for without importing it twice.
                yield from self._copy(line, uuid, first, record, raw, place)
                return
            yield Rejected(record, f"duplicate record: uuid {uuid!r} was already imported from line {first} "
                           "with another message", raw_text(raw))
            return
        problem, blocks, stamp = _check_conversation_line(line)
        if problem is not None:
            yield Rejected(record, problem, raw_text(raw))
            return
        session_id = _line_session(line) or self.path.stem
        known = self.sessions.get(session_id)
        # A stream line times nothing (stamp None): it keeps the file's order at the time of the
        # event before it, the stream's first at the epoch (an OpenAI conversation's default).
        time = stamp or (known.emitter.last_time if known else None) or _EPOCH
        if uuid is not None:
            self.seen_uuids[uuid] = (place, _said(line))
        session = self._session(session_id)
        self.current = session
        emitter = session.emitter
        position = uuid or self._line_position(session_id, place, raw)
        results: list[Result] = []
        if line.get("isSidechain") is True:
            results += self._flush_pending(session, time)
            results += self._enter_episode(session, line, position, time, record, raw)
        else:
            results += emitter.end_episode(record=record, raw=raw)
            results += emitter.start_session(
                time=time, record=record, raw=raw, fields=self._session_fields(session_id, line),
            )
            results += self._flush_pending(session, time)
            if (role == "user" and _starts_human_turn(line, blocks) and not _in_subagent(line)) \
                    or emitter.turn_id is None:
                # A transcript that opens with the agent (a resumed or headless session, a
                # file cut from a longer one) still gets a turn, closed at the file's end; a
                # session-level unit would stay open, and hold the log's watermark below it,
                # until an event G later in log time arrived.
                results += emitter.start_turn(position, time=time, record=record, raw=raw)
        session.active = True
        yield from results
        yield from self._blocks(session, line, role, blocks, position, time, record, raw)

    def _copy(self, line: dict[str, Any], uuid: str, first: str, record: str, raw: bytes,
              place: str) -> Iterator[Result]:
        session = self._session(_line_session(line) or self.path.stem)
        emitter = session.emitter
        time = valid_time(line.get("timestamp")) or emitter.last_time or _EPOCH
        yield emitter.emit(
            "x.claude-code.copy", event_id=emitter.event_id("x", self._line_position(emitter.session_id, place, raw)),
            time=time, record=record, raw=raw, fields={"uuid": uuid, "copyOf": f"line {first}"},
            visibility="hidden",
        )

    def _enter_episode(
        self, session: _Session, line: dict[str, Any], position: str, time: str,
        record: str, raw: bytes,
    ) -> list[Result]:
        """Open a subagent episode at the root line of a sidechain (or a new agentId)."""
        agent = line.get("agentId") if isinstance(line.get("agentId"), str) else None
        emitter = session.emitter
        is_new = (
            emitter.episode_id is None
            or line.get("parentUuid") is None
            or (agent is not None and agent != session.episode_agent)
        )
        if not is_new:
            return []
        fields: dict[str, Any] = {}
        parent_event_id = None
        linked = self.links.get((emitter.session_id, agent)) if agent is not None else None
        if agent is not None and linked is None:
            self.link_misses.add((emitter.session_id, agent))
        if linked is not None:
            # The call's result named this agent (possibly in the main transcript's file).
            parent_event_id, call_id, call_input = linked
            session.subagent_calls = [call for call in session.subagent_calls if call[1] != call_id]
        elif session.subagent_calls:
            # Subagents start in the order their Task calls were made.
            parent_event_id, call_id, call_input = session.subagent_calls.pop(0)
        if parent_event_id is not None:
            fields["toolCallId"] = call_id
            if isinstance(call_input, dict) and isinstance(call_input.get("description"), str):
                fields["title"] = call_input["description"]
        if agent is not None:
            fields["agentId"] = agent
        session.episode_agent = agent
        return emitter.start_episode(
            agent or position, time=time, record=record, raw=raw, fields=fields,
            parent_event_id=parent_event_id,
        )

    def _session_fields(self, session_id: str, line: dict[str, Any]) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        title = self.titles.of(session_id)
        if title:
            fields["title"] = title
        if self.model:
            fields["model"] = self.model
        cwd = line.get("cwd")
        if not isinstance(cwd, str):
            # A headless run's stream names its directory once, on the `system` `init` line
            # that waits (pending) for the run's first conversation line.
            cwd = next((entry.value["cwd"] for entry in self.pending
                        if entry.line_type == "system" and isinstance(entry.value.get("cwd"), str)), None)
        if cwd is not None:
            fields["cwd"] = cwd
        return fields

    def _blocks(
        self, session: _Session, line: dict[str, Any], role: str, blocks: list[Any],
        position: str, time: str, record: str, raw: bytes,
    ) -> Iterator[Result]:
        message = line["message"]
        emitter = session.emitter
        parent_uuid = line.get("parentUuid")
        parent_event_id = self.line_events.get(parent_uuid) if isinstance(parent_uuid, str) else None
        model = message.get("model") if role == "assistant" else None
        api_id = message.get("id") if isinstance(message.get("id"), str) else None
        snapshot = _usage(message.get("usage")) if role == "assistant" else None
        usage = _counted_usage(snapshot, session.usage_seen.get(api_id) if api_id else None)
        payload = small_payload(line)
        line_kind = _line_kind(line)
        last_event_id = None
        for index, block in enumerate(blocks):
            if not isinstance(block, dict):
                reason = f"message.content[{index}] is {json_kind(block)}, not a content block"
                yield Rejected(record, reason, raw_text(raw))
                continue
            built = _block_event(session, block, index, role, line_kind, model)
            if isinstance(built, str):
                yield Rejected(record, built, raw_text(raw))
                continue
            event_type, event_role, fields, visibility, call_event_key = built
            if event_type == "tool.result" and block.get("type") == "tool_result":
                fields["output"] = self._full_output(fields["output"], line, blocks)
            if snapshot is not None and event_type in ("message", "tool.call"):
                if usage:
                    fields["usage"] = usage
                if api_id is not None:  # a count that went down counts nothing, nor again later
                    before = session.usage_seen.get(api_id, {})
                    session.usage_seen[api_id] = {
                        key: max(value, before.get(key, 0)) for key, value in (before | snapshot).items()}
                snapshot = usage = None
            event_id = emitter.event_id(position, index)
            parent = parent_event_id
            if call_event_key is not None:
                parent = session.tool_calls.get(call_event_key, (parent, ""))[0]
            result = emitter.emit(
                event_type, event_id=event_id, time=time, record=record, raw=raw,
                role=event_role, fields=fields, parent_event_id=parent,
                visibility=visibility, payload=payload,
            )
            payload = None  # the line's record rides on its first event only
            if isinstance(result, Accepted):
                last_event_id = event_id
                if event_type == "tool.result":
                    self._link_subagent(session, fields, line)
                _remember_call(session, fields, event_type, event_id)
            yield result
        if not blocks:
            yield Rejected(record, "field 'message.content' is empty; nothing to import", raw_text(raw))
        if last_event_id is not None and isinstance(line.get("uuid"), str):
            self.line_events[line["uuid"]] = last_event_id

    def _full_output(self, output: str, line: dict[str, Any], blocks: list[Any]) -> str:
        """A tool result's ``output``, or the whole of it when the model saw only a preview.

        Claude Code hands the model a ``<persisted-output>`` envelope instead of an output over
        the tool's size limit (30 000 characters for Bash: a test run, a broad Grep), the whole
        output written to ``SESSION/tool-results/ID.txt`` beside the transcript. The envelope
        was the event's output, and the index held the first 2 KB of it. The whole is read
        from the line's ``toolUseResult`` when it holds it (:func:`_tool_use_output`, the only
        source a line of one tool result needs), else from that file (:meth:`_sidecar`), else
        the preview stays. What follows the envelope (Bash's stderr after a spilled stdout)
        is kept after the whole. An MCP tool's too-large-result notice
        (:func:`_mcp_saved_output`) is read from its file the same way."""
        envelope = _persisted_output(output)
        if envelope is None:
            # An MCP tool's result over its token limit has a notice of its own and no preview;
            # its toolUseResult holds the notice too, so the file is the only whole.
            saved = _mcp_saved_output(output)
            return (self._sidecar(saved) or output) if saved is not None else output
        path, rest = envelope
        results = [block for block in blocks if isinstance(block, dict) and block.get("type") == "tool_result"]
        tool_use = line.get("toolUseResult") if len(results) == 1 else None
        whole = _tool_use_output(tool_use)
        if whole is None:
            spilled = tool_use.get("persistedOutputPath") if isinstance(tool_use, dict) else None
            whole = self._sidecar(spilled if isinstance(spilled, str) else path)
        if whole is None and isinstance(tool_use, dict) and isinstance(tool_use.get("persistedOutputPath"), str):
            whole = _bash_stdout(tool_use)  # the head Bash kept: more than the preview
        if not whole:
            return output
        return f"{whole}\n{rest}" if rest else whole

    def _sidecar(self, path: str | None) -> str | None:
        """The text of the file a ``<persisted-output>`` envelope names, found beside this
        transcript: the envelope's absolute path is the writer's machine's
        (``~/.claude/projects/PROJECT/SESSION/tool-results/NAME``), and only its last three
        names are looked up, under the transcript's directory (a subagent's file,
        ``SESSION/subagents/agent-ID.jsonl``, under its session's). None when there is none."""
        if path is None:
            return None
        names = re.split(r"[\\/]", path.strip())[-3:]
        if len(names) != 3 or names[1] != "tool-results" or not all(_SIDECAR_NAME.fullmatch(name) for name in names):
            return None
        session, name = names[0], names[2]
        here = self.path.parent
        candidates = [here / session / "tool-results" / name]
        if here.name == "subagents" and here.parent.name == session:
            candidates.append(here.parent / "tool-results" / name)
        for candidate in candidates:
            try:
                with candidate.open("rb") as handle:
                    data = handle.read(_SIDECAR_MAX_BYTES)
            except OSError:
                continue
            text = data.decode("utf-8", "replace")
            if name.endswith(".json"):
                # A result of content blocks is saved as their JSON array: its texts are the output
                # (Claude Code writes it as it writes its lines: a lone surrogate is read as one).
                blocks, error = parse_json(data)
                return text if error is not None else _result_text(blocks)
            return text
        return None

    def _link_subagent(self, session: _Session, fields: dict[str, Any], line: dict[str, Any]) -> None:
        """Remember the call a Task/Agent result answers under the agentId it names, for the
        subagent's sidechain lines later in this file or in its own file."""
        call = next((c for c in session.subagent_calls if c[1] == fields["toolCallId"]), None)
        if call is None:
            return  # most results answer no subagent call: their output is not searched
        agent = _result_agent_id(line.get("toolUseResult"), fields.get("output"))
        if agent is not None:
            self.links.setdefault((session.emitter.session_id, agent), call)

    def _link_progress(self, session: _Session, line: dict[str, Any]) -> None:
        """Remember the call a subagent's ``agent_progress`` line names: Claude Code writes
        them to the main file while the subagent runs (``parentToolUseID`` is the Task/Agent
        call, ``data.agentId`` the subagent), long before the call's result. A follower sees
        the subagent's own file grow long before that result too: without this, its episode
        went out unlinked (no ``parentEventId``, ``toolCallId`` or ``title``), and its eventId
        then stood for good, while a one-shot import of the finished directory linked it."""
        data = line.get("data")
        if not isinstance(data, dict) or data.get("type") != "agent_progress":
            return
        agent, call_id = data.get("agentId"), line.get("parentToolUseID")
        if not isinstance(agent, str) or not agent or not isinstance(call_id, str):
            return
        call = next((c for c in session.subagent_calls if c[1] == call_id), None)
        if call is not None:
            self.links.setdefault((session.emitter.session_id, agent), call)

    # -- auxiliary lines --------------------------------------------------------------------

    def _auxiliary(
        self, line: dict[str, Any], line_type: str, record: str, raw: bytes, place: str
    ) -> Iterator[Result]:
        session_id = _line_session(line)
        session = self.sessions.get(session_id) if session_id else self.current
        if line_type == "progress" and session is not None:
            self._link_progress(session, line)
        entry = _Pending(record, raw, place, line_type, line, session_id)
        if session is None or not session.active:
            self.pending.append(entry)
            return
        time = _own_time(line) or session.emitter.last_time
        if time is None:
            self.pending.append(entry)
            return
        yield from self._auxiliary_events(session, entry, time)
        if _ends_turn(line_type, line):
            # Claude Code says here that the agent finished responding: the turn ends now, not
            # when the next human message or the file's end shows it, so a followed session's
            # last turn is chunked (and searchable under `indexed`) as soon as it is written.
            yield from session.emitter.end_turn(record=record, raw=raw)

    def _auxiliary_events(self, session: _Session, entry: _Pending, time: str) -> list[Result]:
        emitter = session.emitter
        uuid = entry.value.get("uuid")
        position = uuid if isinstance(uuid, str) and uuid else self._line_position(emitter.session_id, entry.place, entry.raw)
        time = _own_time(entry.value) or time
        results = [emitter.emit(
            f"x.claude-code.{entry.line_type}", event_id=emitter.event_id("x", position),
            time=time, record=entry.record, raw=entry.raw,
            fields=_auxiliary_fields(entry.line_type, entry.value), visibility="hidden",
            payload=small_payload(entry.value),
        )]
        prompt = self._absorbed_prompt(session, entry)
        if prompt is not None:
            # What the user typed while the agent worked, which Claude Code hands the model
            # inside the running turn and records only as queue operations (and, in some
            # versions, an attachment): the user's words, searchable like any prompt, in the
            # turn that read them.
            if emitter.turn_id is None and emitter.episode_id is None:
                results += emitter.start_turn(position, time=time, record=entry.record, raw=entry.raw)
            results.append(emitter.emit(
                "message", event_id=emitter.event_id(position, "queued"), time=time, record=entry.record,
                raw=entry.raw, role="user", fields={"text": prompt, "kind": "queued"},
            ))
        return results

    def _absorbed_prompt(self, session: _Session, entry: _Pending) -> str | None:
        """The text of a queued prompt the running turn absorbed that this line is the first
        record of (a queue ``remove``, a ``queued_command`` attachment), else None; it keeps
        the session's queue (:class:`_Session`) as the line says. The first of the two records
        tells the prompt, the other then tells nothing more."""
        line = entry.value
        if entry.line_type == "attachment":
            text = _queued_prompt(line)
            if text is None:
                return None
            return self._take(session, "attachment", text)
        if entry.line_type != "queue-operation":
            return None
        operation = line.get("operation")
        if operation == "enqueue":
            text = _enqueued_prompt(line)
            if text is not None:
                session.queued = (*session.queued, text)
        elif operation == "popAll":
            session.queued = ()
        elif operation in ("remove", "dequeue"):
            named = _enqueued_prompt(line)  # newer clients name the prompt they take
            # One that does not takes the oldest: of those an attachment told absorbed, if
            # any, else of the queue.
            attached = [text for record, text in session.told if record == "attachment"]
            oldest = (attached if operation == "remove" and attached else session.queued)[:1]
            if named is None and (line.get("content") is not None or not oldest):
                return None  # what it takes is no prompt (a task notification, a command)
            text = named if named is not None else oldest[0]
            if operation == "dequeue":
                session.queued = _without(session.queued, text)  # its own user line follows
                return None
            return self._take(session, "remove", text)
        return None

    @staticmethod
    def _take(session: _Session, record: str, text: str) -> str | None:
        """``text`` absorbed, as ``record`` says: the text to tell, or None when the other of
        its two records told it already."""
        other = "attachment" if record == "remove" else "remove"
        session.queued = _without(session.queued, text)
        if (other, text) in session.told:
            session.told = _without(session.told, (other, text))
            return None
        session.told = (*session.told, (record, text))
        return text

    def _flush_pending(self, session: _Session, time: str) -> list[Result]:
        """Place waiting auxiliary lines of this session right after its first conversation line."""
        results: list[Result] = []
        keep: list[_Pending] = []
        for entry in self.pending:
            if entry.session_id in (None, session.emitter.session_id):
                results += self._auxiliary_events(session, entry, time)
            else:
                keep.append(entry)
        self.pending = keep
        return results

    def _finish(self, last_record: str) -> Iterator[Result]:
        for entry in self.pending:
            session = self.sessions.get(entry.session_id or "") or self.current
            time = _own_time(entry.value) or (session.emitter.last_time if session else None)
            if session is None and time is not None:
                session = self._session(entry.session_id or self.path.stem)
            if session is None or time is None:
                reason = (
                    f"{entry.line_type} line has no timestamp and no conversation line in "
                    "this file to place it after"
                )
                yield Rejected(entry.record, reason, raw_text(entry.raw))
                continue
            yield from self._auxiliary_events(session, entry, time)
        self.pending = []
        for session in self.sessions.values():
            yield from session.emitter.end_turn(record=last_record, raw="")


#: Why a directory import, a follower and an import of the file itself skip a file of summary
#: lines only (:func:`summaries_only`).
SUMMARIES_ONLY = "Claude Code summaries of sessions in other files only, no conversation line to import"


def summaries_only(path: Path, data: Content | None = None) -> bool:
    """Whether the transcript ``path`` (or ``data``, its bytes) holds only ``summary`` lines.

    Claude Code writes, at the top of a new session's file, a summary of each earlier session of
    the project (its ``leafUuid`` names that session's last line, in that session's own file);
    a session left before its first prompt leaves a file of those lines only. They tell nothing
    of a conversation of this file, and with none to place them after (a summary has no
    timestamp) each was a dead letter: importing a real projects directory filled the
    dead-letter topic with harmless metadata. Such a file is skipped instead, and named."""
    found = False
    for _number, line in read_lines(path, data):
        if b'"summary"' not in line:
            return False
        value, error = parse_json(line)
        if error is not None or not isinstance(value, dict) or value.get("type") != "summary":
            return False
        found = True
    return found


def names_model(data: bytes) -> bool:
    """Whether the transcript ``data`` names the model its ``session.started`` takes (the first
    real assistant model, :func:`_prescan`): until it does, what an import says of its first
    line may still change (see :func:`streams.importers.cursor.settled`)."""
    return _prescan(Path(), data)[1] is not None


def _prescan(path: Path, data: Content | None = None) -> tuple[_Titles, str | None]:
    """(titles, model) for session.started, which is emitted before the lines that carry them
    (:meth:`_Prescan.facts`). Only lines that can hold either are parsed."""
    scan = _Prescan(path.stem)
    scan.update(line for _, line in read_lines(path, data))
    return scan.facts()


@dataclass(frozen=True)
class _Titles:
    """The title of each session of a transcript: the last name the user gave it (``/rename``
    writes a ``custom-title`` line), else the last title Claude Code generated for it (2.1.97+
    writes an ``ai-title`` line, the title its session list shows), else the first summary
    whose ``leafUuid`` is a line of that
    session, else the first summary whose leaf is no line of the file (Claude Code writes the
    summary of the conversation a session resumes at the top of its file), else none. A file of
    several sessions so gives each its own, not the file's first summary to all."""

    own: tuple[tuple[str, str], ...] = ()  # (sessionId, title), in the order of the summaries
    unplaced: str | None = None
    named: tuple[tuple[str, str], ...] = ()  # (sessionId, the last title the user gave it)
    generated: tuple[tuple[str, str], ...] = ()  # (sessionId, the last title generated for it)

    def of(self, session_id: str) -> str | None:
        return next((title for session, title in (*self.named, *self.generated, *self.own)
                     if session == session_id), self.unplaced)


class _Prescan:
    """What :func:`_prescan` gathers, line by line, so a growing file's facts are kept up to date
    with only its new lines read (:class:`TranscriptCursor`). ``default_session`` is the session
    of a line that names none (the file's stem, as the importer has it)."""

    def __init__(self, default_session: str) -> None:
        self.default_session = default_session.encode()
        self.line_sessions: dict[bytes, bytes] = {}  # uuid → the session of its (first) line
        self.summaries: list[tuple[str, str | None]] = []
        self.named: dict[str, str] = {}  # sessionId → the title of its last custom-title line
        self.generated: dict[str, str] = {}  # sessionId → the title of its last ai-title line
        self.model: str | None = None

    def update(self, lines: Iterable[bytes]) -> None:
        for line in lines:
            uuids = _UUID_FIELD.findall(line)
            if uuids:
                named = _SESSION_FIELD.search(line)
                session = named.group(1) if named else self.default_session
                for uuid in uuids:
                    self.line_sessions.setdefault(uuid, session)
            if b'"summary"' in line:
                for value in _line_values(line):
                    if value.get("type") == "summary":
                        text, leaf = value.get("summary"), value.get("leafUuid")
                        if isinstance(text, str) and text:
                            self.summaries.append((text, leaf if isinstance(leaf, str) else None))
            for kind, key, titles in ((b'"custom-title"', "customTitle", self.named),
                                      (b'"ai-title"', "aiTitle", self.generated)):
                if kind not in line:
                    continue
                for value in _line_values(line):
                    title, session = value.get(key), _line_session(value)
                    if value.get("type") == kind.decode().strip('"') and isinstance(title, str) and title.strip():
                        titles[session or self.default_session.decode("utf-8", "replace")] = title.strip()
            if b'"custom_title"' in line:
                for value in _line_values(line):
                    payload = value.get("systemPayload")
                    title = payload.get("customTitle") if isinstance(payload, dict) else None
                    if value.get("subtype") == "custom_title" and isinstance(title, str) and title.strip():
                        # Qwen Code's title: /rename's (titleSource manual, or none), or generated
                        automatic = isinstance(payload, dict) and payload.get("titleSource") == "auto"
                        session = _line_session(value) or self.default_session.decode("utf-8", "replace")
                        (self.generated if automatic else self.named)[session] = title.strip()
            if self.model is None and b'"model"' in line and b'"assistant"' in line:
                for value in map(_claude_shaped, _line_values(line)):
                    message = value.get("message")
                    if self.model is None and isinstance(message, dict) and isinstance(message.get("model"), str):
                        self.model = message["model"] if message["model"] != "<synthetic>" else None

    def facts(self) -> tuple[_Titles, str | None]:
        own: dict[str, str] = {}
        unplaced: str | None = None
        for text, leaf in self.summaries:
            session = self.line_sessions.get(leaf.encode()) if leaf is not None else None
            if session is None:
                unplaced = unplaced or text
            else:
                own.setdefault(session.decode("utf-8", "replace"), text)
        return _Titles(tuple(own.items()), unplaced, tuple(sorted(self.named.items())),
                       tuple(sorted(self.generated.items()))), self.model


def _line_values(line: bytes) -> list[dict[str, Any]]:
    """The JSON objects of a transcript line: the line, or the records a line that is no JSON
    text holds (:func:`streams.importers.base.line_values`)."""
    return [value for _at, _part, value, _error, _canonical in line_values(line) if isinstance(value, dict)]


def other_prompt_spelling(content: Any) -> Any | None:
    """A message's ``content`` as Claude Code also writes it: ``"say lol"`` and ``[{"type":
    "text", "text": "say lol"}]`` say the same (Claude Code 1.0 wrote the prompts a resumed
    session's file repeats the second way). None for content that has no other spelling."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if (isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict)
            and content[0].keys() == {"type", "text"} and content[0]["type"] == "text"
            and isinstance(content[0]["text"], str)):
        return content[0]["text"]
    return None


def _said(line: dict[str, Any]) -> bytes:
    """A digest of what a conversation line says (its type and message), not of the metadata
    a later copy of it may carry otherwise, nor of how it spells its content
    (:func:`other_prompt_spelling`; streams.follow takes such a copy from another file as a
    duplicate too)."""
    message = line.get("message")
    if isinstance(message, dict) and isinstance(message.get("content"), list):
        spelt = other_prompt_spelling(message["content"])
        if spelt is not None:
            message = {**message, "content": spelt}
    what = [line.get("type"), message]
    try:
        said = orjson.dumps(what, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # nested past orjson's depth: its text still tells copies apart
        said = repr(what).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(said, digest_size=16).digest()


def _check_conversation_line(line: dict[str, Any]) -> tuple[str | None, list[Any], str | None]:
    """(problem, content blocks, time) of a user/assistant line; problem names the field."""
    message = line.get("message")
    if not isinstance(message, dict):
        wanted = "an object with role and content"
        problem = f"missing field 'message' ({wanted})" if message is None else field_problem("message", message, wanted)
        return problem, [], None
    content = message.get("content")
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        blocks = content
    elif content is None:
        return "missing field 'message.content'", [], None
    else:
        return field_problem("message.content", content, "a string or a list of content blocks"), [], None
    stamp = line.get("timestamp")
    if stamp is None and "timestamp" not in line and _is_stream_line(line):
        return None, blocks, None  # the caller places it after the event before it
    if stamp is None:
        return "missing field 'timestamp'", [], None
    time = valid_time(stamp)
    if time is None:
        return f"field 'timestamp' is not an RFC 3339 time with an offset: {stamp!r}", [], None
    return None, blocks, time


def _line_session(line: dict[str, Any]) -> str | None:
    """The session a line names: ``sessionId`` in a transcript, ``session_id`` in the stream-json
    output of a headless run (``claude -p --output-format stream-json``)."""
    for key in ("sessionId", "session_id"):
        value = line.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _is_stream_line(line: dict[str, Any]) -> bool:
    """A line of a headless run's stream-json output, which names its session ``session_id`` and
    times nothing (a transcript line names ``sessionId`` and must carry its ``timestamp``)."""
    return "sessionId" not in line and isinstance(line.get("session_id"), str)


def _in_subagent(line: dict[str, Any]) -> bool:
    """A stream line of a subagent's conversation: the stream writes a subagent's lines inline,
    naming the Task/Agent call that started it (``parent_tool_use_id``); its prompt is no human's."""
    return isinstance(line.get("parent_tool_use_id"), str) and bool(line["parent_tool_use_id"])


def _text_kind(text: str) -> str | None:
    stripped = text.lstrip()
    if stripped.startswith(_COMMAND_PREFIXES):
        return "command"
    if stripped.startswith(_OUTPUT_PREFIXES):
        return "command-output"
    if stripped.startswith(_INTERRUPT_PREFIX):
        return "interrupt"
    if stripped.startswith(_INJECTED_PREFIX):
        return "meta"
    return None


def _line_kind(line: dict[str, Any]) -> str | None:
    if line.get("type") != "user":
        return None
    if line.get("isMeta") is True:
        return "meta"
    if line.get("isCompactSummary") is True:
        return "compact-summary"
    return None


def _starts_human_turn(line: dict[str, Any], blocks: list[Any]) -> bool:
    """A real human message: typed text, a slash command or an image, not tool output."""
    if _line_kind(line) is not None:
        return False
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") in ("image", "document"):
            return True
        text = block.get("text")
        if block.get("type") == "text" and isinstance(text, str):
            if _text_kind(text) in (None, "command"):
                return True
    return False


BlockEvent = tuple[str, str, dict[str, Any], str | None, str | None]


def _block_event(
    session: _Session, block: dict[str, Any], index: int, role: str,
    line_kind: str | None, model: Any,
) -> BlockEvent | str:
    """(type, role, fields, visibility, answered toolCallId) of one block, or a reject reason."""
    where = f"message.content[{index}]"
    block_type = block.get("type")
    if block_type == "text":
        text = block.get("text")
        if not isinstance(text, str):
            return field_problem(f"{where}.text", text, "a string")
        fields: dict[str, Any] = {"text": text}
        kind = line_kind or (_text_kind(text) if role == "user" else None)
        if kind is not None:
            fields["kind"] = kind
        if isinstance(model, str):
            fields["model"] = model
        return "message", role, fields, "hidden" if kind == "meta" else None, None
    if block_type in ("thinking", "redacted_thinking"):
        thinking = block.get("thinking")
        if not isinstance(thinking, str):
            if block_type == "thinking":
                return field_problem(f"{where}.thinking", thinking, "a string")
            thinking = "[redacted thinking]"
        fields = {"text": thinking, "kind": "thinking"}
        if isinstance(model, str):
            fields["model"] = model
        return "message", "assistant", fields, "hidden", None
    if block_type in _CALL_BLOCKS:
        call_id, name = block.get("id"), block.get("name")
        if not isinstance(call_id, str) or not call_id:
            return field_problem(f"{where}.id", call_id, "a non-empty string", f" of a {block_type} block")
        if not isinstance(name, str) or not name:
            return field_problem(f"{where}.name", name, "a non-empty string", f" of a {block_type} block")
        arguments = block.get("input")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            arguments = {"_raw": arguments}
        fields = {"toolName": name, "toolCallId": call_id, "input": arguments}
        if isinstance(model, str):
            fields["model"] = model  # the call's usage is the model's: count it under its name
        return "tool.call", "assistant", fields, None, None
    server_result = isinstance(block_type, str) and block_type.endswith("_tool_result")
    if block_type == "tool_result" or server_result:
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            return field_problem(f"{where}.tool_use_id", call_id, "a non-empty string", f" of a {block_type} block")
        fields = {"toolCallId": call_id}
        if call_id in session.tool_calls:
            fields["toolName"] = session.tool_calls[call_id][1]
        content = block.get("content")
        failed = block.get("is_error") is True or (
            server_result and isinstance(content, dict) and str(content.get("type", "")).endswith("_error"))
        fields["status"] = "error" if failed else "ok"
        fields["output"] = "\n".join(_server_result_parts(content)) if server_result else _result_text(content)
        return "tool.result", "tool", fields, None, call_id
    if block_type in ("image", "document"):
        return "message", role, {"text": f"[{block_type}]", "kind": block_type}, None, None
    if block_type == "tool_reference":
        # A tool ToolSearch found, named outside a tool_result: no words of either side.
        return "message", role, {"text": _part_label(block), "kind": block_type}, "hidden", None
    return f"unknown content block type {block_type!r} at {where}"


def _remember_call(
    session: _Session, fields: dict[str, Any], event_type: str, event_id: str
) -> None:
    if event_type == "tool.call":
        session.tool_calls[fields["toolCallId"]] = (event_id, fields["toolName"])
        if fields["toolName"] in _SUBAGENT_TOOLS:
            session.subagent_calls.append((event_id, fields["toolCallId"], fields["input"]))
    elif event_type == "tool.result":
        # A subagent that answered without sidechain lines in this file no longer waits.
        session.subagent_calls = [
            call for call in session.subagent_calls if call[1] != fields["toolCallId"]
        ]


def _server_result_parts(value: Any) -> Iterator[str]:
    """The readable text of a server tool's result (``web_search_tool_result``,
    ``web_fetch_tool_result``, ``advisor_tool_result``, ``code_execution_tool_result``, ...):
    its titles, URLs, texts, outputs and error codes in the order the API wrote them. Their
    shapes differ per tool and grow with the API, so they are walked, not mapped one by one;
    encrypted payloads and signatures are opaque, and a ``data`` is text only in a ``text``
    source (a fetched page), never an image's or PDF's base64."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _server_result_parts(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in _SERVER_RESULT_TEXT and isinstance(item, str) and item:
                yield item
            elif key == "data" and value.get("type") == "text" and isinstance(item, str):
                yield item
            elif isinstance(item, (dict, list)) and key not in _SERVER_RESULT_OPAQUE:
                yield from _server_result_parts(item)


_PERSISTED_OPEN = "<persisted-output>"
_PERSISTED_CLOSE = "</persisted-output>"
# The file an envelope names: "Output too large (141KB). Full output saved to: PATH", "Output
# exceeded the 64MB persist limit; only the first 64MB were saved to: PATH", or (an old result
# cleared from the context) "Tool result saved to: PATH".
_PERSISTED_PATH = re.compile(r"saved to: ([^\n<]+)")
_SIDECAR_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
# Claude Code saves at most 64 MB; an event keeps far less (USL_MAX_EVENT_BYTES cuts it).
_SIDECAR_MAX_BYTES = 16 * 1024 * 1024


# An MCP tool's result over its token limit, as Claude Code hands it to the model in its stead
# (mcpOutputStorage.ts): "Error: result (307,533 characters) exceeds maximum allowed tokens. Output
# has been saved to PATH.\nFormat: ..." (2.1.x: "(N characters across N lines)"), then how to read it.
_MCP_SAVED = re.compile(r"Error: result \([0-9,.\u00a0 ]+ characters(?: across [0-9,.\u00a0 ]+ lines)?\) exceeds "
                        r"maximum allowed tokens\. Output has been saved to ([^\n]+)")


def _mcp_saved_output(output: str) -> str | None:
    """The file an MCP tool's too-large-result notice names (its sentence's full stop left off),
    else None."""
    found = _MCP_SAVED.match(output[:4096].lstrip())
    return found.group(1).strip().removesuffix(".") if found else None


def _persisted_output(output: str) -> tuple[str | None, str] | None:
    """(the file it names, the text after it) of a tool result that begins with a
    ``<persisted-output>`` envelope, else None."""
    if _PERSISTED_OPEN not in output[:256]:
        return None  # most results: no copy of a long output to look at its start
    head = output.lstrip()
    if not head.startswith(_PERSISTED_OPEN):
        return None
    end = head.find(_PERSISTED_CLOSE)
    body = head[len(_PERSISTED_OPEN):end] if end >= 0 else head
    rest = head[end + len(_PERSISTED_CLOSE):].strip("\n") if end >= 0 else ""
    named = _PERSISTED_PATH.search(body)
    return (named.group(1).strip() if named else None), rest


def _bash_stdout(tool_use: dict[str, Any]) -> str | None:
    """Bash's stdout as its tool result gives it: leading blank lines and the trailing
    whitespace dropped."""
    stdout = tool_use.get("stdout")
    return re.sub(r"^(\s*\n)+", "", stdout).rstrip() if isinstance(stdout, str) else None


def _tool_use_output(tool_use: Any) -> str | None:
    """The whole output a tool result's ``toolUseResult`` holds, as Claude Code gave it to the
    model before cutting it to a preview, or None when it holds none.

    Bash (and PowerShell): stdout, then stderr, then the abort notice, one per line (a result
    with a ``persistedOutputPath`` kept only the head of its stdout: the file holds the whole).
    Grep: its ``content``, or the file names it matched; Glob: the file names; Read: the
    file's text (without the line numbers the model saw); an MCP tool's or a subagent's
    content blocks: their texts."""
    if isinstance(tool_use, list):
        return _result_text(tool_use) or None
    if not isinstance(tool_use, dict):
        return None
    if isinstance(tool_use.get("stdout"), str) and isinstance(tool_use.get("stderr"), str):
        if isinstance(tool_use.get("persistedOutputPath"), str):
            return None
        stderr = tool_use["stderr"].strip()
        if tool_use.get("interrupted") is True:
            stderr = "\n".join(filter(None, [stderr, "<error>Command was aborted before completion</error>"]))
        return "\n".join(filter(None, [_bash_stdout(tool_use), stderr])) or None
    file = tool_use.get("file")
    if isinstance(file, dict) and isinstance(file.get("content"), str):
        return file["content"] or None
    content = tool_use.get("content")
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        return _result_text(content) or None
    names = tool_use.get("filenames")
    if isinstance(names, list) and names and all(isinstance(name, str) for name in names):
        return "\n".join(names)
    return None


_AGENT_ID_LINE = re.compile(r"^agentId: ([A-Za-z0-9_-]{1,64})", re.MULTILINE)


def _result_agent_id(tool_use_result: Any, output: Any) -> str | None:
    """The agentId a Task/Agent result names: ``toolUseResult.agentId``, else the
    ``agentId: ID`` line Claude Code appends to the result text."""
    if isinstance(tool_use_result, dict) and isinstance(tool_use_result.get("agentId"), str):
        agent: str = tool_use_result["agentId"]
        return agent
    found = _AGENT_ID_LINE.search(output) if isinstance(output, str) else None
    return found.group(1) if found else None


def _result_text(content: Any) -> str:
    """A tool result's output as text: strings as they are, another part as what names it
    (:func:`_part_label`)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict):
                parts.append(_part_label(part))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return raw_text(content)


# What names a part of a tool result that holds no text: a ``tool_reference`` (what ToolSearch
# returns) its ``tool_name``, an MCP resource descriptor (``ListMcpResources``, no ``type``) its
# name, URI and description.
_PART_NAMES = ("tool_name", "name", "title", "uri", "url", "description")


def _part_label(part: dict[str, Any]) -> str:
    """A part without text as ``[type]`` and the strings that name it: ``[image]``,
    ``[tool_reference] mcp__slack__post``; a part of no type by its names alone, else its JSON.
    Those names were dropped, and a part of no type with them: a search for the tool or the
    resource a result named found nothing."""
    names = [part[key] for key in _PART_NAMES if isinstance(part.get(key), str) and part[key]]
    kind = part.get("type")
    if isinstance(kind, str):
        return " ".join([f"[{kind}]", *names])
    return " ".join(names) or raw_text(part)


_USAGE_KEYS = (
    ("input_tokens", "inputTokens"), ("output_tokens", "outputTokens"),
    ("cache_read_input_tokens", "cacheReadInputTokens"),
    ("cache_creation_input_tokens", "cacheCreationInputTokens"),
)


def _usage(usage: Any) -> dict[str, int] | None:
    """The token counts of a line's ``message.usage`` (a snapshot of its response so far)."""
    if not isinstance(usage, dict):
        return None
    mapped = {
        name: usage[key]
        for key, name in _USAGE_KEYS
        if isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool) and usage[key] >= 0
    }
    return mapped or None


def _counted_usage(snapshot: dict[str, int] | None, before: dict[str, int] | None) -> dict[str, int] | None:
    """What a line adds to its response's usage: each count's increase over the snapshot of the
    response's line before it (all of it on the response's first line).

    Claude Code writes one line per content block of a response, each with the usage of the
    stream so far: the input and cache counts stay, the output count grows (1 on an opening
    text line, the full count on the closing tool_use line). Summing the increases over a
    response's events gives its last snapshot, and each line's share is known when the line
    arrives, so a follower that has not seen the later lines yet emits the same event."""
    if snapshot is None or before is None:
        return snapshot
    return {key: value - before.get(key, 0) for key, value in snapshot.items() if value > before.get(key, 0)}


def _ends_turn(line_type: str, line: dict[str, Any]) -> bool:
    """A main-conversation line Claude Code writes once the agent finished its turn: a ``system``
    ``turn_duration``, or ``stop_hook_summary`` when no Stop hook kept the agent going, and the
    ``result`` a headless run's stream ends with."""
    if line.get("isSidechain") is True or _in_subagent(line):
        return False
    if line_type == "result":
        return True
    if line_type != "system":
        return False
    subtype = line.get("subtype")
    return subtype == "turn_duration" or (
        subtype == "stop_hook_summary" and line.get("preventedContinuation") is not True)


def _own_time(line: dict[str, Any]) -> str | None:
    time = valid_time(line.get("timestamp"))
    snapshot = line.get("snapshot")
    if time is None and isinstance(snapshot, dict):
        time = valid_time(snapshot.get("timestamp"))
    return time


def _queued_prompt(line: dict[str, Any]) -> str | None:
    """The text of an ``attachment`` line that is a prompt the user queued while the agent was
    busy (``queued_command``, ``commandMode`` ``prompt``), else None: a queued task
    notification or an injected reminder is no prompt."""
    attachment = line.get("attachment")
    if not isinstance(attachment, dict) or attachment.get("type") != "queued_command":
        return None
    if attachment.get("commandMode", "prompt") != "prompt" or attachment.get("isMeta") is True:
        return None
    prompt = attachment.get("prompt")
    text = _result_text(prompt) if isinstance(prompt, str | list) else ""
    if not text.strip() or _text_kind(text) == "meta":
        return None
    return text


def _claude_shaped(line: dict[str, Any]) -> dict[str, Any]:
    """A Qwen Code transcript line (``~/.qwen/projects/<project>/chats/<sessionId>.jsonl``: Claude
    Code's envelope, ``uuid`` / ``parentUuid`` / ``sessionId`` / ``type``, around a Gemini
    ``message`` of ``parts``) as the Claude Code line it amounts to, else ``line`` itself. Its
    conversation lines were dead-lettered (``missing field 'message.content'``) and its tool
    results kept hidden. ``user`` / ``assistant`` / ``tool_result`` lines: a text part is a text
    block (``thought: true``: thinking), a ``functionCall`` a tool_use, a ``functionResponse`` a
    tool_result (an error when its response is an ``error``, or the line's
    ``toolCallResult.status`` says so), inline or file data an image or document; the line's
    ``model`` and ``usageMetadata`` are the message's, each line one response."""
    if line.get("type") == "system" and line.get("subtype") == "chat_compression":
        # The summary a compression put in place of the history (/compress, or the context
        # filling up): what Claude Code's isCompactSummary line holds, read as that line is.
        summary = _compression_summary(line.get("systemPayload"))
        return line if summary is None else {**line, "type": "user", "isCompactSummary": True,
                                             "message": {"role": "user", "content": summary}}
    message = line.get("message")
    if line.get("type") not in ("user", "assistant", "tool_result") or not isinstance(message, dict) \
            or "content" in message or not isinstance(message.get("parts"), list):
        return line
    role = "assistant" if line["type"] == "assistant" else "user"
    subtype = line.get("subtype")
    if role == "user" and subtype == "mid_turn_user_message":
        # What the user typed while tools ran, handed to the model inside the running turn
        # (its parts say "[User message received during tool execution]: …", displayText the
        # words typed): Claude Code's queued_command attachment, which tells it in that turn.
        shown = line.get("systemPayload")
        typed = shown.get("displayText") if isinstance(shown, dict) else None
        prompt = typed if isinstance(typed, str) and typed.strip() else message["parts"]
        return {**line, "type": "attachment", "attachment": {
            "type": "queued_command", "commandMode": "prompt", "prompt": prompt}}
    status = line.get("toolCallResult")
    failed = isinstance(status, dict) and status.get("status") in ("error", "cancelled")
    blocks = [block for index, part in enumerate(message["parts"])
              if (block := _part_block(part, f"{line.get('uuid')}-{index}", failed)) is not None]
    shaped: dict[str, Any] = {"role": role, "content": blocks}
    if role == "assistant":
        shaped["id"] = line.get("uuid")
        if isinstance(line.get("model"), str):
            shaped["model"] = line["model"]
        usage = line.get("usageMetadata")
        if isinstance(usage, dict):
            shaped["usage"] = {name: usage[key] for key, name in (
                ("promptTokenCount", "input_tokens"), ("candidatesTokenCount", "output_tokens"),
                ("cachedContentTokenCount", "cache_read_input_tokens")) if key in usage}
    # A notification or a cron-fired prompt Qwen Code hands the model as a user message is no
    # human turn: Claude Code's isMeta line.
    meta = {"isMeta": True} if role == "user" and subtype in ("notification", "cron") else {}
    return {**line, "type": role, "message": shaped, **meta}


#: The model's answer Qwen Code (as Gemini CLI) puts after a compression's summary.
_COMPRESSION_ACK = "Got it. Thanks for the additional context!"


def _compression_summary(payload: Any) -> str | None:
    """The summary of a Qwen Code ``chat_compression`` record: of its ``compressedHistory``
    (the summary as a user turn, the model's acknowledgement, then the history kept as it
    was, which the transcript holds already), the user turn before the acknowledgement, else
    the first user turn; None when it holds no text."""
    history = [item for item in _list_of(payload.get("compressedHistory") if isinstance(payload, dict) else None)
               if isinstance(item, dict)]
    texts = ["\n".join(part["text"] for part in _list_of(item.get("parts"))
                       if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought"))
             for item in history]
    answered = [at for at in range(1, len(history))
                if history[at].get("role") == "model" and texts[at].strip() == _COMPRESSION_ACK]
    users = [at for at in range(len(history)) if history[at].get("role") == "user" and texts[at].strip()]
    at = answered[0] - 1 if answered and answered[0] - 1 in users else (users[0] if users else None)
    return texts[at] if at is not None else None


def _list_of(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _part_block(part: Any, fallback_id: str, failed: bool) -> dict[str, Any] | None:
    """The Claude content block a Gemini part amounts to (:func:`_claude_shaped`), None for a
    part that holds nothing to keep."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, dict):
        return None
    if isinstance(part.get("text"), str):
        return {"type": "thinking", "thinking": part["text"]} if part.get("thought") is True \
            else {"type": "text", "text": part["text"]}
    call = part.get("functionCall")
    if isinstance(call, dict):
        return {"type": "tool_use", "id": str(call.get("id") or fallback_id), "name": str(call.get("name") or "tool"),
                "input": call.get("args")}
    answer = part.get("functionResponse")
    if isinstance(answer, dict):
        response = answer.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        output = response  # a response of its own shape is kept whole, as its JSON
        if isinstance(response, dict) and ("output" in response or "error" in response):
            output = response.get("output") if response.get("output") not in (None, "") else error
        return {"type": "tool_result", "tool_use_id": str(answer.get("id") or fallback_id),
                "content": output if isinstance(output, str) else raw_text(output),
                "is_error": failed or error not in (None, "")}
    data = part.get("inlineData") or part.get("fileData")
    if isinstance(data, dict):
        image = str(data.get("mimeType", "")).startswith("image/")
        return {"type": "image" if image else "document"}
    return None


def _enqueued_prompt(line: dict[str, Any]) -> str | None:
    """The text of a queue operation that names a prompt the user typed, else None: a task
    notification, an injected reminder or a slash command (``/mcp``: the client runs it, the
    model never reads it) is no prompt."""
    content = line.get("content")
    text = _result_text(content) if isinstance(content, str | list) else ""
    stripped = text.strip()
    if not stripped or _text_kind(text) is not None or stripped.startswith(_NOTIFICATION_PREFIX) \
            or _SLASH_COMMAND.match(stripped):
        return None
    return text


def _without(items: tuple[Any, ...], item: Any) -> tuple[Any, ...]:
    """``items`` without the first ``item`` in it."""
    if item not in items:
        return items
    at = items.index(item)
    return items[:at] + items[at + 1:]


def _auxiliary_fields(line_type: str, line: dict[str, Any]) -> dict[str, Any]:
    """The small, useful part of an auxiliary line; the rest stays in the payload."""
    keys: tuple[tuple[str, str], ...]
    if line_type == "summary":
        keys = (("summary", "summary"), ("leafUuid", "leafUuid"))
    elif line_type == "system":
        keys = (("content", "text"), ("subtype", "subtype"), ("level", "level"))
    elif line_type == "queue-operation":
        keys = (("operation", "operation"), ("content", "text"))
    elif line_type == "file-history-snapshot":
        keys = (("messageId", "messageId"), ("isSnapshotUpdate", "isSnapshotUpdate"))
    elif line_type == "progress":
        keys = (("toolUseID", "toolCallId"), ("parentToolUseID", "parentToolCallId"))
    else:
        keys = ()
    fields = {name: line[key] for key, name in keys if isinstance(line.get(key), str | bool)}
    if line_type in ("system", "queue-operation") and isinstance(line.get("content"), list):
        fields["text"] = _result_text(line["content"])  # some clients write text parts here
    payload = line.get("systemPayload")
    if line_type == "system" and line.get("subtype") == "slash_command" and isinstance(payload, dict):
        # Qwen Code's slash command (the client's, which the model never reads): the command
        # typed, and what it showed, as text a search of hidden events finds.
        command = payload.get("rawCommand")
        shown = [item["text"] for item in _list_of(payload.get("outputHistoryItems"))
                 if isinstance(item, dict) and isinstance(item.get("text"), str) and item["text"].strip()]
        if isinstance(command, str):
            fields["command"] = command
        text = "\n".join(shown) if payload.get("phase") == "result" else command
        if isinstance(text, str) and text:
            fields["text"] = text
    data = line.get("data")
    if line_type == "progress" and isinstance(data, dict):
        for key, name in (("type", "progressType"), ("hookEvent", "hookEvent"), ("hookName", "hookName")):
            if isinstance(data.get(key), str):
                fields[name] = data[key]
    snapshot = line.get("snapshot")
    if line_type == "file-history-snapshot" and isinstance(snapshot, dict):
        backups = snapshot.get("trackedFileBackups")
        if isinstance(backups, dict):
            fields["files"] = sorted(str(name) for name in backups)
    return fields
