"""The query syntax's phrase quote, however the query was typed.

Only ``"`` makes a phrase (``sinks.text.base.parse_query``), and the planner, the CLI's snippet
and the search page all split a query on it. A query typed in an editor or chat, or in a
language that quotes otherwise, carries other double quotation marks; read as words, its phrase
was no phrase. Kept apart from :mod:`planner.request` so the CLI reads a query as the planner
does without loading the planner.
"""

from __future__ import annotations

__all__ = ["phrase_quotes"]

# Double quotation marks a query may be typed or pasted with, read as the ASCII quote that makes
# a phrase: typographic ones (an editor's or chat's smart quotes, German „…“), guillemets
# (French, Russian «…»), the full-width one NFKC folds to it, and CJK double primes. The
# analyzer drops them all as punctuation, so nothing could be searched for in them; read as
# words, “exit code 1” matched any chunk with one of its words where "exit code 1" matches the phrase.
_QUOTES = str.maketrans(dict.fromkeys("\u201c\u201d\u201e\u201f\u00ab\u00bb\uff02\u301d\u301e\u301f", '"'))


def phrase_quotes(query: str) -> str:
    """``query`` with every double quotation mark written as ``"``, the query syntax's phrase quote."""
    return query.translate(_QUOTES)
