"""A session's memory of the secrets it removed, for the repeats in its later events (2.18).

A value a contextual rule removes where it is named (``DB_PASSWORD=hunter2-prod`` in a tool
result's env dump) is often repeated bare in a later event of the same session: "connected
with hunter2-prod", another tool's output, the assistant quoting it back. 2.13 finds repeats
inside one text only (:func:`streams.redaction.pieces.redact_repeats`); the memory carries
what a session removed to its later events.

What is kept is a *print* of each value, never the value: the first 16 bytes of the SHA-256 of
the session key and the value, with the value's length and the rule that removed it, and the
seq of the event that first removed it. A later text's whole tokens of a remembered length are
printed and compared. The memory lives where every caller of :func:`redact_event` can have it
and gives the same bytes in each:

- the redaction stage keeps it in a changelog-backed table (``session-secrets``), and the
  redacted event's record lists the prints it added (``secrets``), which the structured sink
  keeps (its ``secrets`` table);
- the rebuild replay and ``usl export`` read a session from its first event, so they build it
  in-process as they go;
- the planner's tail scan starts inside sessions: it reads the prints the structured index holds
  at or below its cut, and goes on in-process from there.

Determinism: the event at seq N recalls only prints first removed below N, and a print keeps its
first seq, so a replay, a redelivered batch (whose own prints the table already holds at its
seqs) and the tail scan redact each event alike. A session remembers at most
:data:`MAX_REMEMBERED` values, the first ones.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from streams.redaction.base import MARKER_PREFIX, replace_spans
from streams.redaction.pieces import removed_values, repeatable

__all__ = ["MAX_REMEMBERED", "Recall", "call_print", "memory_fingerprint", "merge_remembered", "secret_print"]

MAX_REMEMBERED = 64
"""Values one session remembers: the first ones (a session naming more is a dump being read,
whose values each text's own rules find)."""

_PRINT_HEX = 32


def secret_print(session: str, value: str) -> str:
    """The print of ``value`` in ``session`` (hex): salted by the session, so the same password in
    two sessions has two prints and a table of prints answers nothing about another session."""
    digest = hashlib.sha256(f"{session}\0{value}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:_PRINT_HEX]


# Every whole token of LENGTH printable characters, overlapping starts included: the boundaries
# are redact_repeats' (`hunter2-prod`, not the start of `hunter2-prod-replica`).
_CANDIDATE = r"(?<![A-Za-z0-9_.-])(?=([!-~]{LENGTH})(?![A-Za-z0-9_-]|\.[A-Za-z0-9]))"


def call_print(session: str, call_id: str) -> str:
    """The print of a tool call whose command prints a secret: remembered with length 0, so the
    call's result, another event, is judged as that secret (``openssl rand -hex 32``)."""
    return secret_print(session, f"\0call\0{call_id}")


@lru_cache(maxsize=256)
def _candidates(length: int) -> re.Pattern[str]:
    return re.compile(_CANDIDATE.replace("LENGTH", str(length)), re.ASCII)


def memory_fingerprint() -> list[str]:
    """What decides the recall, for the policy hash."""
    # "calls": a call whose command prints a secret, and context.printed_secret's reading of its result.
    # 2.19: a `!` shell-mode input message is remembered as a call, by its event id; its output message names it as parent.
    return [str(MAX_REMEMBERED), str(_PRINT_HEX), _CANDIDATE, "calls: one token of 8-512, a letter and a digit, or random",
            "shell mode: <bash-input> by eventId, <bash-stdout> by parentEventId"]


class Recall:
    """One event's view of its session's memory: the prints the session removed before it (and
    those the event removes itself, as its strings are walked), and what the event adds.

    ``remembered``: the session's entries ``[print, length, rule, seq]``; only those first removed
    below ``seq`` are recalled. An entry of length 0 is a tool call whose command prints a secret
    (:func:`call_print`)."""

    __slots__ = ("_by_length", "_calls", "_count", "added", "session")

    def __init__(self, session: str, remembered: Iterable[Sequence[Any]] | None, seq: int) -> None:
        self.session = session
        self._by_length: dict[int, dict[str, str]] = {}
        self._calls: set[str] = set()
        self._count = 0
        for print_, length, rule, first in remembered or ():
            if int(first) < seq:
                if int(length) == 0:
                    self._calls.add(str(print_))
                else:
                    self._by_length.setdefault(int(length), {})[str(print_)] = str(rule)
                self._count += 1
        self.added: list[list[Any]] = []  # [print, length, rule] of the values this event removed first

    @property
    def remembers(self) -> bool:
        """Whether there is any value to recall (nearly every session has none)."""
        return bool(self._by_length)

    def note_call(self, call_id: str) -> None:
        """Remember that tool call ``call_id`` runs a command that prints a secret."""
        print_ = call_print(self.session, call_id)
        if self._count < MAX_REMEMBERED and print_ not in self._calls:
            self._calls.add(print_)
            self._count += 1
            self.added.append([print_, 0, "secret-output"])

    def prints_secret(self, call_id: str) -> bool:
        """Whether an earlier event's tool call ``call_id`` runs a command that prints a secret."""
        return bool(self._calls) and call_print(self.session, call_id) in self._calls

    def recall(self, text: str, hits: dict[str, int]) -> str:
        """``text`` with every whole token the session removed before replaced by its rule's marker."""
        if not self._by_length:
            return text
        found: list[tuple[int, int, str]] = []
        for length, prints in self._by_length.items():
            if len(text) < length:
                continue
            for match in _candidates(length).finditer(text):
                rule = prints.get(secret_print(self.session, match.group(1)))
                if rule is not None:
                    found.append((match.start(), match.start() + length, rule))
        return replace_spans(text, found, hits) if found else text

    def learn(self, original: str, redacted: str) -> None:
        """Remember the values the rules removed from ``original`` (``redacted``: its redaction)."""
        if redacted != original and MARKER_PREFIX in redacted:
            for value, rule in removed_values(original, redacted).items():
                self._add(value, rule)

    def learn_value(self, value: Any, rule: str) -> None:
        """Remember a value a rule removed whole (a string under a password-like key)."""
        if isinstance(value, str) and repeatable(value.strip()):
            self._add(value.strip(), rule)

    def _add(self, value: str, rule: str) -> None:
        if self._count >= MAX_REMEMBERED:
            return
        print_ = secret_print(self.session, value)
        known = self._by_length.setdefault(len(value), {})
        if print_ not in known:
            known[print_] = rule
            self._count += 1
            self.added.append([print_, len(value), rule])


def merge_remembered(remembered: Sequence[Sequence[Any]] | None, added: Sequence[Sequence[Any]],
                     seq: int) -> list[list[Any]] | None:
    """The session's entries after the event at ``seq`` added ``added`` (None: unchanged). An
    entry keeps its first seq: one already held (a redelivered event's) is not added again."""
    if not added:
        return None
    entries = [list(entry) for entry in remembered or ()]
    held = {entry[0] for entry in entries}
    fresh = [[print_, length, rule, seq] for print_, length, rule in added if print_ not in held]
    return entries + fresh if fresh else None
