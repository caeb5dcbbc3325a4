"""Splitting one rendered event that is longer than a chunk into overlapping parts.

Parts are cut at token boundaries of the event's own tokenization, so no token (and no
multi-byte character) is ever cut in half. Every size claim is a real count of the part's
text: each part counts at most ``target`` tokens and the text two consecutive parts share
counts at most ``overlap`` tokens.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from streams.chunking.tokenizer import Tokenizer

__all__ = ["Part", "split_text"]


@dataclass(frozen=True)
class Part:
    """One part of a long text: its character range and its token count."""

    char_start: int
    char_end: int
    tokens: int


def split_text(text: str, tokenizer: Tokenizer, *, target: int, overlap: int) -> list[Part]:
    """Cut ``text`` into parts of at most ``target`` tokens sharing up to ``overlap`` tokens."""
    token_index, char_pos = _cut_points(text, tokenizer)
    last = len(token_index) - 1
    parts: list[Part] = []
    start = 0
    while True:
        end = max(bisect_right(token_index, token_index[start] + target) - 1, start + 1)
        tokens = tokenizer.count(text[char_pos[start]:char_pos[end]])
        # A substring can tokenize into a few more tokens than its slice of the whole text
        # (word-start markers); step back until the real count fits.
        while tokens > target and end > start + 1:
            excess_at = token_index[end] - (tokens - target)
            end = max(min(bisect_right(token_index, excess_at) - 1, end - 1), start + 1)
            tokens = tokenizer.count(text[char_pos[start]:char_pos[end]])
        parts.append(Part(char_pos[start], char_pos[end], tokens))
        if end == last:
            return parts
        next_start = max(bisect_left(token_index, token_index[end] - overlap), start + 1)
        while next_start < end and tokenizer.count(text[char_pos[next_start]:char_pos[end]]) > overlap:
            next_start += 1
        start = next_start


def _cut_points(text: str, tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """Token indexes where the text may be cut, with their character positions.

    A token starts a clean cut only if no earlier token reaches past its start: byte-fallback
    tokens of one character share that character's range and must stay together. The list
    always starts at (0, 0) and ends at (number of tokens, len(text)).
    """
    offsets = tokenizer.encode_offsets(text)
    token_index, char_pos = [0], [0]
    reach = 0
    for index, (start, end) in enumerate(offsets):
        if index > 0 and start >= reach and start > char_pos[-1] and start < len(text):
            token_index.append(index)
            char_pos.append(start)
        reach = max(reach, end)
    token_index.append(len(offsets))
    char_pos.append(len(text))
    return token_index, char_pos
