"""Redacting one text: run the triggered rules until nothing changes."""

from __future__ import annotations

from functools import lru_cache

from streams.exceptions import RedactionError
from streams.redaction.base import MARKER_PREFIX, USER_MARKER, Rule, Scan
from streams.redaction.policy import DEFAULT_POLICY, RedactionPolicy
from streams.redaction.rules import build_rules

__all__ = ["clip", "redact_text", "redact_text_plain"]

_MAX_PASSES = 8  # converges in 1-2 passes on real text; a bound keeps odd input cheap
_SHORTEST_FINDING = 6  # a@b.io; nothing any rule replaces is shorter
_SHORT_TEXT = 512
# Texts up to this long are remembered (an LRU of 8192: at most some 2 MB).
_REMEMBERED_CHARS = 256


def redact_text(text: str, policy: RedactionPolicy | None = None) -> tuple[str, dict[str, int]]:
    """Return ``text`` with every secret (and the policy's personal data) replaced by markers,
    and how many replacements each rule made.

    Idempotent: ``redact_text(redact_text(x)[0])[0] == redact_text(x)[0]``. A text in which
    no rule fired costs one pass. Rules run in order and each sees the replacements of the
    rules before it; a replacement can only matter to an *earlier* rule when it changes what a
    guard sees (``...@example.comsk-...``), so text changed by a rule that can do that gets a
    second pass confirming nothing new appeared. Personal data, URL passwords, key blocks and
    environment dumps, by far the most common findings, are placed first and never need it.
    """
    if not isinstance(text, str):
        raise RedactionError(f"redact_text takes a str, not {type(text).__name__}")
    if len(text) < _SHORTEST_FINDING:
        return text, {}
    if len(text) <= _REMEMBERED_CHARS:
        # Short strings recur in every event of a session (hook names, tool names, statuses,
        # model names): most are answered from memory, with a fresh hits dict each time.
        redacted, found = _redact_short(text, policy or DEFAULT_POLICY)
        return redacted, dict(found)
    return _redact(text, build_rules(policy or DEFAULT_POLICY))


def redact_text_plain(text: str, policy: RedactionPolicy | None = None) -> tuple[str, dict[str, int]]:
    """:func:`redact_text` without any shortcut: no memory, and every rule applied to every
    text, whatever its gates say. Slow; the reference the fast path is tested against."""
    if len(text) < _SHORTEST_FINDING:
        return text, {}
    hits: dict[str, int] = {}
    rules = build_rules(policy or DEFAULT_POLICY)
    for _ in range(_MAX_PASSES):
        text, again = _one_pass(text, rules, hits, plain=True)
        if not again:
            break
    return text, hits


def _redact(text: str, rules: tuple[Rule, ...]) -> tuple[str, dict[str, int]]:
    hits: dict[str, int] = {}
    for _ in range(_MAX_PASSES):
        text, again = _one_pass(text, rules, hits)
        if not again:
            break
    return text, hits


@lru_cache(maxsize=8192)
def _redact_short(text: str, policy: RedactionPolicy) -> tuple[str, tuple[tuple[str, int], ...]]:
    redacted, hits = _redact(text, build_rules(policy))
    return redacted, tuple(hits.items())


def _one_pass(text: str, rules: tuple[Rule, ...], hits: dict[str, int], *, plain: bool = False) -> tuple[str, bool]:
    """Apply every wanted rule once (with ``plain``, every rule); also say whether a
    confirming pass is needed."""
    scan = Scan(text)
    # Short texts (ids, names, one-line fields: most strings of an event) are dominated by
    # per-rule overhead; their character set lets most rules be skipped outright.
    chars = frozenset(text) if len(text) <= _SHORT_TEXT and not plain else None
    again = False
    for rule in rules:
        if chars is not None and rule.needs and chars.isdisjoint(rule.needs):
            continue
        if plain or scan.wants(rule):
            redacted = rule.apply(scan, hits)
            if redacted is not scan.text:
                scan = Scan(redacted)
                chars = frozenset(redacted) if len(redacted) <= _SHORT_TEXT else None
                again = again or rule.repass
    return scan.text, again


def clip(text: str, limit: int, *, note_inside: bool = True) -> str:
    """``text`` cut to ``limit`` characters plus a `` … [N bytes]`` note (N: UTF-8 size of
    the whole text); ``text`` itself when it is not longer than ``limit``.

    With ``note_inside`` the note counts towards ``limit``, so a clipped text is never clipped
    again (clipping is idempotent); summaries keep ``limit`` characters and add the note.
    A cut never splits a marker.
    """
    if len(text) <= limit:
        return text
    note = f" … [{len(text.encode('utf-8'))} bytes]"
    cut = max(0, limit - len(note)) if note_inside else limit
    opening = text.rfind("[", max(0, cut - 64), cut)
    if opening != -1 and text.find("]", opening) >= cut and (
        text.startswith(MARKER_PREFIX, opening) or text.startswith(USER_MARKER, opening)
    ):
        cut = opening
    return text[:cut] + note
