"""JSON text inside a string: the secrets behind one more layer of escaping (policy 2.4).

A tool's output or arguments is often JSON text held in a string: OpenAI tool-call
``arguments``, ``kubectl get secret -o json``, ``docker inspect``, an API body, a document
serialised once more. Inside its string literals a line break is the two characters ``\\n``
and a quote is ``\\"``, so the rules that read lines (environment dumps, markdown tables, YAML
``key: value`` pairs, Kubernetes ``- name:`` / ``value:`` lists) saw one long line and missed.

Each double-quoted literal that holds a backslash escape is decoded, and the decoded literals
of a text are redacted with the same rules, together (one redaction for a document's many
values), their own literals in turn, so a twice-escaped document is read to the bottom. A
literal is written back only where its redaction changed it, and then only between its first
and last change: text with nothing to remove keeps every byte, and a literal that lost a secret
keeps its quotes and its other escapes (``\\u002f``, ``\\/``, ``\\u00e9``). Nothing here knows
the rules: the caller passes its redaction in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from json.decoder import scanstring  # type: ignore[attr-defined]

__all__ = ["ESCAPED_LITERAL", "encode_like", "fingerprint", "redact_literals"]

ESCAPED_LITERAL = re.compile(r'(?<!\\)"[^"\\\n]*+(?:\\.[^"\\\n]*+)++"')
"""A JSON string literal on one line with at least one backslash escape. An opening quote never
follows a backslash (in JSON a literal opens after ``:``, ``,``, ``[`` or a space), so a quote
escaped inside a document written without its outer quotes (``{\\"k\\": …}``) opens nothing,
and a failed attempt (a literal cut at the line's end) is never read again from inside: the
scan stays linear. In valid JSON, a misaligned attempt from a closing quote reaches the next
opening quote with no escape between and fails, so every match is a real literal."""

_SHORTEST_LITERAL = 8  # quotes and six characters: nothing any rule replaces is shorter (a@b.io)
_SEPARATOR = "\n\x1e\n"
"""What stands between two decoded literals redacted together: a line of one ASCII record
separator, which no rule reads as part of a value, an environment dump, a list, a table or a
wrapped secret, and which no replacement writes."""

Redact = Callable[[str], tuple[str, Iterable[tuple[str, int]]]]


def redact_literals(text: str, hits: dict[str, int], redact: Redact) -> str:
    """``text`` with each escaped JSON string literal (:data:`ESCAPED_LITERAL`) whose decoded
    value ``redact`` changes replaced by the redacted value, encoded as :func:`encode_like`
    says; what ``redact`` found is added to ``hits``. ``text`` itself when nothing changes.

    A literal that is not valid JSON (``"\\d+"`` in a regex, ``"\\x41"`` in C) stays as it is."""
    literals: list[tuple[int, int, str]] = []
    for match in ESCAPED_LITERAL.finditer(text):
        start, end = match.span()
        if end - start < _SHORTEST_LITERAL:
            continue
        try:
            decoded, _ = scanstring(text, start + 1, False)
        except ValueError:
            continue
        literals.append((start, end, decoded))
    if not literals:
        return text
    pieces: list[str] = []
    done = 0
    for (start, end, decoded), redacted in zip(literals, _redact_values([decoded for _, _, decoded in literals], hits, redact), strict=True):
        if redacted != decoded:
            pieces += (text[done:start], encode_like(redacted, decoded, text[start:end]))
            done = end
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def _redact_values(values: list[str], hits: dict[str, int], redact: Redact) -> list[str]:
    """Each of ``values`` redacted. A JSON document holds many escaped literals (an API's list of
    issues, each body with line breaks), and a redaction's fixed cost outweighs a short text's,
    so they are redacted as one text, a :data:`_SEPARATOR` between each two; one by one when a
    replacement took a separator in (a key block's BEGIN in one literal, an END in a later one)
    or a value holds its character."""
    if len(values) > 1 and not any("\x1e" in value for value in values):
        redacted, found = redact(_SEPARATOR.join(values))
        parts = redacted.split(_SEPARATOR)
        if len(parts) == len(values):
            _add(hits, found)
            return parts
    redactions = []
    for value in values:
        redacted, found = redact(value)
        _add(hits, found)
        redactions.append(redacted)
    return redactions


def _add(hits: dict[str, int], found: Iterable[tuple[str, int]]) -> None:
    for rule, count in found:
        hits[rule] = hits.get(rule, 0) + count


def fingerprint() -> list[str]:
    """What decides which literals are read decoded and how, for the policy hash."""
    return [ESCAPED_LITERAL.pattern, str(_SHORTEST_LITERAL), _SEPARATOR]


def encode_like(redacted: str, decoded: str, literal: str) -> str:
    """``literal`` (which decodes to ``decoded``) changed to decode to ``redacted``: what the two
    have in common at each end keeps its bytes, and the part between is JSON-encoded as
    ``literal`` wrote its characters: a character it always escaped (``\\/``, ``\\u002f``,
    ``\\u00e9``) is escaped so again, so only the replacements change bytes."""
    same_start = _common_prefix(decoded, redacted)
    same_end = _common_prefix(decoded[same_start:][::-1], redacted[same_start:][::-1])
    middle = json.dumps(redacted[same_start: len(redacted) - same_end], ensure_ascii=False)[1:-1].translate(_style(literal))
    if literal.isascii() and not middle.isascii():
        middle = json.dumps(redacted[same_start: len(redacted) - same_end])[1:-1].translate(_style(literal))
    return literal[: _raw_offset(literal, same_start)] + middle + literal[_raw_offset(literal, len(decoded) - same_end):]


def _style(literal: str) -> dict[int, str]:
    """The printable characters ``literal`` wrote only as ``\\/`` or ``\\u`` escapes, with their
    escape (JSON's other escapes, ``\\n``, ``\\"``, ``\\\\``, are what :func:`json.dumps` writes)."""
    escaped: dict[int, str] = {}
    counts: dict[int, int] = {}
    for escape in _ESCAPE.finditer(literal, 1, len(literal) - 1):
        text = escape.group()
        if text[1] not in "u/":
            continue
        char = json.loads(f'"{text}"')
        if char >= " " and char not in '"\\':
            escaped[ord(char)] = text
            counts[ord(char)] = counts.get(ord(char), 0) + 1
    # A character also written as itself (a "/" beside "\\/") keeps json.dumps' form.
    return {code: text for code, text in escaped.items()
            if literal.count(chr(code)) == (counts[code] if text == "\\/" else 0)}


def _common_prefix(first: str, second: str) -> int:
    # Halving slices compares in C: a literal may be a whole document serialised once more.
    low, high = 0, min(len(first), len(second))
    while low < high:
        middle = (low + high + 1) // 2
        if first[:middle] == second[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


# One escape of a JSON string: a surrogate pair (one character once decoded), \uXXXX or \x.
_ESCAPE = re.compile(r"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)")


def _raw_offset(literal: str, position: int) -> int:
    """Where in ``literal`` (quotes included) its decoded value's ``position`` begins."""
    raw, decoded = 1, 0
    for escape in _ESCAPE.finditer(literal, 1, len(literal) - 1):
        plain = escape.start() - raw
        if position <= decoded + plain:
            break
        decoded += plain + 1
        raw = escape.end()
    return raw + (position - decoded)
