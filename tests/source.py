"""Reading the project's own source as syntax trees, for the tests that check its shape."""

from __future__ import annotations

import ast
from pathlib import Path


def parse(path: Path, text: str | None = None) -> ast.Module:
    """``path``'s syntax tree (``text`` in its place when given).

    CPython 3.11 keeps one AST-construction depth counter per interpreter (gh-106905), and
    3.11's traceback module parses source lines to place its carets: a traceback rendered in
    another thread while this parse runs (a stack stopped by an earlier test, a broker client's
    logger) leaves the counter off and the parse raises ``SystemError`` on sound source. The
    counter starts again at the next parse, so a second attempt reads the file."""
    source = path.read_text(encoding="utf-8") if text is None else text
    for _ in range(2):
        try:
            return ast.parse(source, str(path))
        except SystemError:
            pass
    return ast.parse(source, str(path))
