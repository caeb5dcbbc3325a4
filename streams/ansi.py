"""Terminal escape sequences: what coloured tool output holds besides its words.

Test runners, compilers, ``git`` and cloud CLIs with colour on write ``ESC[31mFAILED ESC[0m``,
``ESC[32mAPI_KEY:ESC[39m value``. A terminal shows none of the sequences; a regex or a tokenizer
sees them, and their last characters join the next word (``31mFAILED``). Redaction removes them
before its rules read the text (policy 2.6), the text analyzer reads them as spaces.
"""

from __future__ import annotations

import re

__all__ = ["ANSI_SEQUENCE", "without_ansi"]

ANSI_SEQUENCE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
"""One sequence: CSI (colours, cursor moves: ``ESC [`` parameters, final byte), OSC (titles,
links: ``ESC ]`` to BEL or ``ESC \\``), or a two-byte one (``ESC`` and one character)."""


def without_ansi(text: str, replacement: str = " ") -> str:
    """``text`` with each escape sequence replaced by ``replacement``; ``text`` itself (the same
    object) when it holds no ESC."""
    return ANSI_SEQUENCE.sub(replacement, text) if "\x1b" in text else text
