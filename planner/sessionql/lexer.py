"""SessionQL's tokens: words, strings, numbers and symbols, each with its offset in the text."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from planner.sessionql.exceptions import SessionQLError

__all__ = ["Token", "tokenize"]

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_SYMBOLS = ("!=", "<>", "<=", ">=", "=", "<", ">", "(", ")", ",", "*", "-")
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n",
            "r": "\r", "t": "\t"}


@dataclass(frozen=True)
class Token:
    """``kind`` is ``word``, ``string``, ``number``, ``symbol`` or ``end``; ``text`` the
    decoded value (a string's content, a symbol itself); ``offset`` where it starts."""

    kind: str
    text: str
    offset: int

    def describe(self) -> str:
        """How an error message names this token."""
        if self.kind == "end":
            return "the end of the query"
        if self.kind == "string":
            return f"the string {_quote(self.text)}"
        return f"{self.text!r}"


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens (always ending with an ``end`` token)."""
    tokens: list[Token] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            tokens.append(Token("end", "", position))
            return tokens
        char = text[position]
        if char in "\"'":
            value, position_after = _string(text, position)
            tokens.append(Token("string", value, position))
            position = position_after
            continue
        if char == "-" and text[position:position + 2] == "--":
            raise SessionQLError("SessionQL has no comments ('--')", text=text, offset=position)
        match = _WORD.match(text, position) or _NUMBER.match(text, position)
        if match:
            kind = "word" if match.re is _WORD else "number"
            end = match.end()
            if kind == "number" and end < len(text) and (text[end].isalnum() or text[end] == "_"):
                raise SessionQLError(f"malformed number {text[position:end + 1]!r}",
                                     text=text, offset=position)
            tokens.append(Token(kind, match.group(), position))
            position = end
            continue
        symbol = next((s for s in _SYMBOLS if text.startswith(s, position)), None)
        if symbol is None:
            raise SessionQLError(f"unexpected character {char!r}", text=text, offset=position,
                                 hint='Quote strings ("Bash"); operators are = != < <= > >=; see docs/sql.md.')
        tokens.append(Token("symbol", symbol, position))
        position += len(symbol)


def _string(text: str, start: int) -> tuple[str, int]:
    """A quoted string starting at ``start``: its value and the offset after it. Escapes are
    JSON's (``\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX``) plus ``\\'``."""
    quote = text[start]
    chars: list[str] = []
    position = start + 1
    while position < len(text):
        char = text[position]
        if char == quote:
            value = "".join(chars)
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise SessionQLError("the string holds an unpaired surrogate (\\uD800-\\uDFFF)",
                                     text=text, offset=start) from None
            if "\x00" in value:
                raise SessionQLError("strings cannot hold the NUL character", text=text, offset=start)
            return value, position + 1
        if char == "\\":
            code = text[position + 1:position + 2]
            if code == "u":
                digits = text[position + 2:position + 6]
                if not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                    raise SessionQLError("\\u must be followed by four hex digits", text=text,
                                         offset=position)
                unit = int(digits, 16)
                position += 6
                # A surrogate pair written as two escapes is one character.
                low = re.match(r"\\u([dD][c-fC-F][0-9A-Fa-f]{2})", text[position:position + 6])
                if 0xD800 <= unit <= 0xDBFF and low:
                    unit = 0x10000 + ((unit - 0xD800) << 10) + (int(low.group(1), 16) - 0xDC00)
                    position += 6
                chars.append(chr(unit))
                continue
            if code not in _ESCAPES:
                raise SessionQLError(f"unknown escape '\\{code}' in a string", text=text,
                                     offset=position,
                                     hint='Escapes are \\" \\\' \\\\ \\n \\t \\r \\b \\f \\/ and \\uXXXX.')
            chars.append(_ESCAPES[code])
            position += 2
            continue
        chars.append(char)
        position += 1
    raise SessionQLError("the string is not closed", text=text, offset=start,
                         hint=f"End it with {quote}.")


def _quote(value: str) -> str:
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= 40 else shown[:37] + '..."'
