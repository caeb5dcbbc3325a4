"""Terminal escape sequences: what coloured tool output holds besides its words.

Test runners, compilers, ``git`` and cloud CLIs with colour on write ``ESC[31mFAILED ESC[0m``,
``ESC[32mAPI_KEY:ESC[39m value``. A terminal shows none of the sequences; a regex or a tokenizer
sees them, and their last characters join the next word (``31mFAILED``). Redaction removes them
before its rules read the text (policy 2.6), the text analyzer reads them as spaces.
"""

from __future__ import annotations

import re

__all__ = ["ANSI_SEQUENCE", "without_ansi"]

_MARKER_NAME = r"[A-Z]+[:\]]"  # what follows a redaction marker's "[": REDACTED:…, USER]
ANSI_SEQUENCE = re.compile(
    rf"\x1b(?:\[(?!{_MARKER_NAME})[0-?]*[A-Za-z@`~]"
    rf"|\][^\x07\x1b]{{0,512}}(?:\x07|\x1b\\)|[()][AB0-2])")
"""One sequence, of the kinds programs write into captured output: CSI (colours, erasing,
cursor moves: ``ESC [``, parameters, a letter), OSC (titles, links: ``ESC ]`` to BEL or ``ESC \\``,
at most 512 characters; an unterminated one is left) or a character set (``ESC ( B``, which
``tput sgr0`` writes). Nothing looser: a sequence's last byte is a letter, and a bare ``ESC [``
or ``ESC (`` followed by a space or a quote is no sequence, so no secret written after one
loses its first character. ``ESC [`` before a redaction marker (``[REDACTED:…]``, ``[USER]``)
is none either: redacting its output again must not take the marker's ``[R``."""


def without_ansi(text: str, replacement: str = " ") -> str:
    """``text`` with each escape sequence replaced by ``replacement``, until none is left:
    removing one can join an ``ESC`` before it to the text after it into a new one
    (``ESC ESC[31m [31m``), and removing sequences twice must change nothing. ``text`` itself
    (the same object) when it holds no ESC."""
    while "\x1b" in text:
        removed = ANSI_SEQUENCE.sub(replacement, text)
        if removed == text:
            break
        text = removed
    return text
