"""English function words, shared by the redaction rules and the planner's ranking."""

from __future__ import annotations

__all__ = ["FUNCTION_WORDS"]

FUNCTION_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split())
"""Lucene's English stop set: words that say how the others relate, not what a text is about.
The planner ranks hybrid mode's text list without them (docs/planner.md, "Function words in
hybrid mode"); the redaction rules never take a run of words holding one for a passphrase."""
