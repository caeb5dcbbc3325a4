"""Imports kept open between the parts of a growing file (follow mode).

:func:`open_cursor` gives a :class:`FileCursor` for the formats whose importer can read on
where it stopped; :func:`streams.importers.iter_file` stays what an import of the whole file
says, and a cursor says the same of the same lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.asp import DEFAULT_MAX_EVENT_BYTES
from streams.importers import AspReading, fitted
from streams.importers.asp import WHAT as ASP_WHAT
from streams.importers.asp import asp_line
from streams.importers.base import Accepted, Rejected, fed_lines, json_lines
from streams.importers.claude_code import SubagentLinks, TranscriptCursor, names_model
from streams.importers.codex import RolloutCursor
from streams.importers.openai_chat import ChatCursor

__all__ = ["FileCursor", "open_cursor", "settled"]


class FileCursor:
    """An import of a growing line file kept open between its parts (follow mode), for the
    formats whose importer can read on where it stopped (:func:`open_cursor`): ``feed`` and
    ``finish`` say what :func:`iter_file` says of the same lines and at the same end, events
    over the size limit cut or rejected as it does."""

    def __init__(self, cursor: TranscriptCursor | RolloutCursor | AspCursor | ChatCursor,
                 max_event_bytes: int | None) -> None:
        """``max_event_bytes`` None: ``cursor`` fits its events itself."""
        self._cursor = cursor
        self._limit = max_event_bytes

    @property
    def lines(self) -> int:
        """The lines read so far (the next one fed is line ``lines + 1``)."""
        return self._cursor.lines

    def feed(self, data: bytes) -> list[Accepted | Rejected] | None:
        """The records of ``data`` (whole lines), read after those fed before; None when what
        was read before would now be read otherwise (the cursor is stale: import the file anew),
        or, for a cursor's first part, when the import reads the file only whole (an OpenAI-chat
        file that may be one pretty-printed document)."""
        items = self._cursor.feed(data)
        return None if items is None else [self._fit(item) for item in items]

    def finish(self, last_record: str) -> list[Accepted | Rejected]:
        """What the import says once its input ended at ``last_record``; the cursor reads on."""
        return [self._fit(item) for item in self._cursor.finish(last_record)]

    def _fit(self, item: Accepted | Rejected) -> Accepted | Rejected:
        return fitted(item, self._limit) if isinstance(item, Accepted) and self._limit is not None else item


class AspCursor:
    """An ASP import kept open between the parts of a growing file (follow mode): what
    :func:`iter_file` says of each line depends only on the lines before it (the sessions whose
    access list a rejected line refused, the loose runs to close), so :meth:`feed` reads only
    the new lines, numbered on; :meth:`finish` gives the empty turns that close the loose runs
    the input ends in, and the cursor reads on after them. Events are fitted to the size limit
    here: one cut into a reject refuses its session's list, as in :func:`iter_file`."""

    def __init__(self, *, label: str, log_id: str, acl: dict[str, Any] | None, max_event_bytes: int) -> None:
        self.label, self.log_id, self.acl, self._limit = label, log_id, acl, max_event_bytes
        self._reading = AspReading(label)
        self.lines = 0  # the lines fed so far (blank ones too: they are numbered)

    def feed(self, data: bytes) -> list[Accepted | Rejected]:
        """The records of ``data`` (whole lines), the file's bytes after those fed before."""
        results: list[Accepted | Rejected] = []
        for number, raw in fed_lines(data, self.lines):
            for part in json_lines(number, raw, label=self.label, what=ASP_WHAT):
                item = asp_line(part, log_id=self.log_id, acl=self.acl, refused=self._reading.refused)
                if isinstance(item, Accepted):
                    event, item = item.event, fitted(item, self._limit)
                    self._reading.took(event, item)
                results.append(item)
        self.lines += data.count(b"\n")
        return results

    def finish(self, last_record: str) -> list[Accepted | Rejected]:
        """What the import says at the end of its input (named after its last accepted event,
        not ``last_record``, as :func:`iter_file` names them)."""
        return list(self._reading.closers())


def open_cursor(path: Path, fmt: str, *, label: str, log_id: str = "default", acl: dict[str, Any] | None = None,
                max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                links: SubagentLinks | None = None) -> FileCursor | None:
    """A :class:`FileCursor` for a file of format ``fmt`` (arguments as :func:`iter_file`'s), or
    None when its importer reads only whole files. Claude Code transcripts and Codex rollouts
    have one: they are the agents' files followed as they grow, to tens of MB; so do ASP files
    (a producer's event log, an ``usl export`` grown on) and OpenAI-chat JSONL (a conversation or
    a message per line: an agent loop's log, each line resending the history, grows to tens of
    MB and was imported whole on every change). A Gemini CLI recording is rewritten whole, and
    an OpenAI-chat ``*.json`` is one document."""
    if fmt == "claude-code":
        return FileCursor(TranscriptCursor(Path(path), label=label, log_id=log_id, acl=acl,
                                           links={} if links is None else links), max_event_bytes)
    if fmt == "codex":
        return FileCursor(RolloutCursor(Path(path), label=label, log_id=log_id, acl=acl), max_event_bytes)
    if fmt == "asp":
        return FileCursor(AspCursor(label=label, log_id=log_id, acl=acl, max_event_bytes=max_event_bytes), None)
    if fmt == "openai-chat" and Path(path).suffix.lower() == ".jsonl":
        return FileCursor(ChatCursor(label=label, log_id=log_id, acl=acl), max_event_bytes)
    return None


def settled(fmt: str, data: bytes) -> bool:
    """Whether an import of a new file's first lines ``data`` already says of them what an import
    of the grown file will (else a follower waits for more lines, or for the file to go idle).

    A Claude Code transcript's ``session.started`` (its first event) takes the session's model
    from the first real assistant line, which the agent writes a few seconds after the user's
    prompt: sent before that line, it went to L1 without its model (every real transcript
    followed as written), and a later import of the file, finding its eventId with other content
    in L1, dead-lettered it as a conflict."""
    return fmt != "claude-code" or names_model(data)
