"""Pure metric functions of the evaluation: no Kafka, no planner, no files.

Ranked results are lists of result dicts as ``POST /v1/search`` returns them (``chunkId``,
``sessionId``, ``turnId``, ``text``); every metric takes them as they are, so the runner and
the tests share one definition of a hit.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "PHRASE_WORDS",
    "contains_phrase",
    "first_hit_rank",
    "hit_at",
    "mean",
    "mrr",
    "normalise",
    "page_split",
    "sample_phrases",
]

PHRASE_WORDS = 8
_SPACE = re.compile(r"\s+")
# A phrase word: letters or digits with inner punctuation (don't, v1.2, snake_case), nothing
# that is mostly markup, so a phrase reads as prose a person could have copied.
_WORD = re.compile(r"^[\w][\w'’.,:;()/-]*$")


def normalise(text: str) -> str:
    """Whitespace runs as one space, ends trimmed: how phrases and chunk texts are compared."""
    return _SPACE.sub(" ", text).strip()


def contains_phrase(text: str, phrase: str) -> bool:
    """Whether ``text`` holds the words of ``phrase`` consecutively, in order (whitespace-normalised)."""
    return f" {normalise(phrase)} " in f" {normalise(text)} "


def sample_phrases(messages: Iterable[tuple[str, str]], count: int, seed: int,
                   words: int = PHRASE_WORDS,
                   accept: Callable[[str], bool] | None = None) -> list[tuple[str, str]]:
    """Up to ``count`` (key, phrase) pairs: ``words`` consecutive words of a message, chosen
    with ``random.Random(seed)``; messages are (key, text) and are visited in sorted key
    order, so the sample depends only on the seed and the messages. A message gives at most
    one phrase; a window with a word that is not word-like is skipped; ``accept`` may refuse
    a phrase (for example one the indexes cannot hold because redaction changed it)."""
    rng = random.Random(seed)
    pool = sorted((key, text) for key, text in messages if text)
    rng.shuffle(pool)
    chosen: list[tuple[str, str]] = []
    seen: set[str] = set()
    for key, text in pool:
        if len(chosen) >= count:
            break
        tokens = normalise(text).split(" ")
        starts = [i for i in range(len(tokens) - words + 1)
                  if all(_WORD.match(token) for token in tokens[i:i + words])]
        if not starts:
            continue
        rng.shuffle(starts)
        for start in starts[:5]:
            phrase = " ".join(tokens[start:start + words])
            if phrase in seen or (accept is not None and not accept(phrase)):
                continue
            seen.add(phrase)
            chosen.append((key, phrase))
            break
    return chosen


def first_hit_rank(results: Sequence[Mapping[str, Any]], is_hit: Callable[[Mapping[str, Any]], bool],
                   k: int = 10) -> int | None:
    """1-based rank of the first result in the top ``k`` that ``is_hit``; None if none is."""
    for rank, result in enumerate(results[:k], start=1):
        if is_hit(result):
            return rank
    return None


def hit_at(ranks: Sequence[int | None], k: int = 10) -> float:
    """Share of queries whose first hit is at rank ``k`` or better (0.0 for no queries)."""
    return sum(1 for rank in ranks if rank is not None and rank <= k) / len(ranks) if ranks else 0.0


def mrr(ranks: Sequence[int | None]) -> float:
    """Mean reciprocal rank; a query with no hit counts 0."""
    return sum(1.0 / rank for rank in ranks if rank) / len(ranks) if ranks else 0.0


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def page_split(total: int, rng: random.Random, pages: int | None = None) -> list[int]:
    """Random positive page sizes summing to ``total`` (2 to 4 pages unless ``pages`` says)."""
    if total < 1:
        raise ValueError("total must be at least 1")
    count = min(total, pages if pages is not None else rng.randint(2, 4))
    cuts = sorted(rng.sample(range(1, total), count - 1)) if count > 1 else []
    bounds = [0, *cuts, total]
    return [bounds[i + 1] - bounds[i] for i in range(count)]
