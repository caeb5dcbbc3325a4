"""Splitting one rendered event that is longer than a chunk into overlapping parts.

Parts are cut at token boundaries of the event's own tokenization, so no token (and no
multi-byte character) is ever cut in half. Every size claim is a real count of the part's
text: each part counts at most ``target`` tokens and the text two consecutive parts share
counts at most ``overlap`` tokens.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np

from streams.chunking.tokenizer import Tokenizer, substring_counter

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
    count = substring_counter(tokenizer, text)
    last = len(token_index) - 1
    parts: list[Part] = []
    start = 0
    while True:
        end = max(bisect_right(token_index, token_index[start] + target) - 1, start + 1)
        tokens = count(char_pos[start], char_pos[end])
        # A substring can tokenize into a few more tokens than its slice of the whole text
        # (word-start markers); step back until the real count fits.
        while tokens > target and end > start + 1:
            excess_at = token_index[end] - (tokens - target)
            end = max(min(bisect_right(token_index, excess_at) - 1, end - 1), start + 1)
            tokens = count(char_pos[start], char_pos[end])
        parts.append(Part(char_pos[start], char_pos[end], tokens))
        if end == last:
            return parts
        next_start = max(bisect_left(token_index, token_index[end] - overlap), start + 1)
        while next_start < end and count(char_pos[next_start], char_pos[end]) > overlap:
            next_start += 1
        start = next_start


def _cut_points(text: str, tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """Token indexes where the text may be cut, with their character positions.

    A token starts a clean cut only if no earlier token reaches past its start: byte-fallback
    tokens of one character share that character's range and must stay together. The list
    always starts at (0, 0) and ends at (number of tokens, len(text)).
    """
    offsets = np.asarray(tokenizer.encode_offsets(text), dtype=np.int64).reshape(-1, 2)
    starts = offsets[:, 0]
    if len(starts) > 1 and np.all(starts[1:] >= starts[:-1]):
        return _cut_points_in_order(offsets, len(text))
    return _cut_points_scan(offsets, len(text))


def _cut_points_in_order(offsets: np.ndarray, length: int) -> tuple[list[int], list[int]]:
    """:func:`_cut_points_scan` for tokens in text order, without a Python step per token (a
    tool result of tens of KB has thousands)."""
    starts, ends = offsets[:, 0], offsets[:, 1]
    reach = np.maximum.accumulate(ends)
    cut = np.zeros(len(starts), dtype=bool)
    cut[1:] = (starts[1:] >= reach[:-1]) & (starts[1:] < length) & (starts[1:] > 0)
    indexes = np.flatnonzero(cut)
    # Of cuts at one place only the first (the scan's ``start > char_pos[-1]``): starts are in
    # order, so a later cut at the same place follows it directly.
    keep = np.ones(len(indexes), dtype=bool)
    keep[1:] = starts[indexes[1:]] > starts[indexes[:-1]]
    indexes = indexes[keep]
    return [0, *indexes.tolist(), len(starts)], [0, *starts[indexes].tolist(), length]


def _cut_points_scan(offsets: np.ndarray, length: int) -> tuple[list[int], list[int]]:
    token_index, char_pos = [0], [0]
    reach = 0
    for index, (start, end) in enumerate(offsets.tolist()):
        if index > 0 and start >= reach and start > char_pos[-1] and start < length:
            token_index.append(index)
            char_pos.append(start)
        reach = max(reach, end)
    token_index.append(len(offsets))
    char_pos.append(length)
    return token_index, char_pos
