"""Reciprocal rank fusion of the text, vector and tool-results rankings, with a total order.

``rrfScore(d) = sum over sources of 1 / (k + rank_source(d))`` with ``k = 60`` (SPEC §7).
Hits are ordered by:

1. rrfScore, descending;
2. best (lowest) rank the hit has in any source, ascending;
3. event time, descending: newer first. Among hits the fusion cannot tell apart, an agent
   user nearly always wants the most recent session activity;
4. chunkId, ascending (code-point order), which makes the order total.

Float equality is avoided on purpose. The score is summed as an exact
:class:`fractions.Fraction`, so the order does not depend on the order the source lists
arrive in (float addition is not associative), and a cursor carries the score as the exact
string ``"numerator/denominator"``. The event time is carried as the float itself, which
JSON round-trips bit for bit (``repr`` is shortest-round-trip). A sort key decoded from a
cursor therefore compares exactly as it did when the page was served.

Callers must remove hits the principal cannot read *before* fusing: a rank is the position
in the list as given, so filtering afterwards would let rank gaps reveal hidden entities.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any, NamedTuple

from planner.exceptions import CursorError

__all__ = [
    "DEFAULT_K",
    "FusedHit",
    "RankedList",
    "SortKey",
    "after",
    "collapse_duplicates",
    "decode_sort_key",
    "depth_end",
    "encode_sort_key",
    "first_copies",
    "fuse",
    "newest_first",
    "newest_first_among_ties",
    "sort_key",
    "truncation",
]

DEFAULT_K = 60


@dataclass(frozen=True)
class RankedList:
    """One source's ranking: ``ids[0]`` has rank 1.

    ``window`` is how many candidates were asked of the source; ``truncated`` says the source
    had more matches than the window, which explain output must disclose.
    """

    source: str
    ids: Sequence[str]
    window: int
    truncated: bool = False

    def __post_init__(self) -> None:
        if self.window < 0 or len(self.ids) > self.window:
            raise ValueError(
                f"{self.source}: {len(self.ids)} ids do not fit a window of {self.window}"
            )


@dataclass(frozen=True)
class FusedHit:
    """A chunk with its fused score and the per-source components that explain it.

    The exact score is kept as ``rrf_numerator / rrf_scale`` (the scale is common to one
    fusion); :attr:`rrf_exact` makes the :class:`~fractions.Fraction` only when asked, since
    a fusion orders hundreds of hits and a page shows ten."""

    chunk_id: str
    rrf: float
    components: dict[str, dict[str, Any]]
    best_rank: int
    event_time: float
    rrf_numerator: int = field(repr=False)
    rrf_scale: int = field(repr=False)

    @property
    def rrf_exact(self) -> Fraction:
        """The fused score, exactly."""
        return Fraction(self.rrf_numerator, self.rrf_scale)


class SortKey(NamedTuple):
    """Ascending tuple order of this key is the result order; every field compares exactly."""

    neg_rrf: Fraction
    best_rank: int
    neg_event_time: float
    chunk_id: str


def fuse(
    lists: Sequence[RankedList],
    *,
    k: int = DEFAULT_K,
    event_time: Mapping[str, float],
) -> list[FusedHit]:
    """Fuse rankings into hits in the documented total order.

    An id repeated inside one list keeps its first (best) rank. Every fused id needs a finite
    ``event_time``; a missing one is a caller bug and raises ``ValueError``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a non-negative integer, not {k!r}")
    sources = [ranked.source for ranked in lists]
    if len(set(sources)) != len(sources):
        raise ValueError(f"each source may be fused once, got {sources}")
    ranks: dict[str, dict[str, int]] = {}
    for ranked in lists:
        for position, chunk_id in enumerate(ranked.ids, start=1):
            ranks.setdefault(chunk_id, {}).setdefault(ranked.source, position)
    # Every contribution is a multiple of 1/scale, so each score is an exact integer over one
    # common denominator: sorting integers gives the Fraction order without a Fraction
    # operation per comparison (hundreds of candidates per list at the rank depth).
    deepest = max((len(ranked.ids) for ranked in lists), default=0)
    scale = _common_denominator(k, deepest)
    shares = _shares(k, deepest)
    keyed = []
    for chunk_id, by_source in ranks.items():
        when = event_time.get(chunk_id)
        if when is None or not math.isfinite(when):
            raise ValueError(f"chunk {chunk_id} has no finite event time")
        numerator = sum(shares[rank] for rank in by_source.values())
        best_rank = min(by_source.values())
        keyed.append(((-numerator, best_rank, -float(when), chunk_id), by_source))
    keyed.sort(key=lambda item: item[0])
    hits = []
    # Many hits share a score (one source, same rank): divide big integers once per score.
    floats: dict[int, float] = {}
    for (neg_numerator, best_rank, neg_when, chunk_id), by_source in keyed:
        components = {
            source: {"rank": rank, "contribution": 1 / (k + rank)}
            for source, rank in sorted(by_source.items())
        }
        score = floats.get(neg_numerator)
        if score is None:  # int / int is correctly rounded, as float(Fraction) is
            score = floats[neg_numerator] = -neg_numerator / scale
        hits.append(FusedHit(
            chunk_id=chunk_id, rrf=score, components=components,
            best_rank=best_rank, event_time=-neg_when, rrf_numerator=-neg_numerator,
            rrf_scale=scale,
        ))
    return hits


@lru_cache(maxsize=64)
def _common_denominator(k: int, deepest: int) -> int:
    """The least common multiple of ``k + 1 .. k + deepest``: every ``1/(k + rank)`` of a list
    at most ``deepest`` long is a whole multiple of its inverse."""
    return math.lcm(1, *range(k + 1, k + deepest + 1))


@lru_cache(maxsize=64)
def _shares(k: int, deepest: int) -> tuple[int, ...]:
    """``scale // (k + rank)`` at index ``rank`` (1 .. ``deepest``): each rank's contribution
    over the common denominator, divided once per list depth instead of once per hit."""
    scale = _common_denominator(k, deepest)
    return (0, *(scale // (k + rank) for rank in range(1, deepest + 1)))


def sort_key(hit: FusedHit) -> SortKey:
    """The key whose ascending order is the result order; total because chunk ids are unique."""
    return SortKey(-hit.rrf_exact, hit.best_rank, -hit.event_time, hit.chunk_id)


def after(hits: Sequence[FusedHit], key: SortKey) -> list[FusedHit]:
    """The hits of a :func:`fuse` result that come strictly after ``key``.

    Over the same pinned snapshot and readable set, concatenated pages equal the one-shot
    list. ``key`` need not belong to any hit in ``hits``: if sessions were revoked since the
    previous page, the remaining hits only move up (ranks are recomputed without the revoked
    ones), so no hit already served repeats; an unserved hit that moved above the key is
    skipped, the price of never letting ranks reveal what the caller cannot see. A session
    granted since would push served hits down past the key, to be served again: the planner
    keeps such sessions out of a cursor's pages.
    """
    return list(hits[bisect_right(hits, key, key=sort_key):])


def encode_sort_key(key: SortKey) -> list[Any]:
    """JSON form of a sort key: ``["num/den", bestRank, eventTime, chunkId]``."""
    score = -key.neg_rrf
    return [f"{score.numerator}/{score.denominator}", key.best_rank, -key.neg_event_time,
            key.chunk_id]


def decode_sort_key(value: Any) -> SortKey:
    """Inverse of :func:`encode_sort_key`; a malformed value raises :class:`CursorError`."""
    try:
        score_text, best_rank, when, chunk_id = value
        numerator, _, denominator = score_text.partition("/")
        score = Fraction(int(numerator), int(denominator))
        valid = (
            isinstance(best_rank, int) and not isinstance(best_rank, bool) and best_rank >= 1
            and isinstance(when, int | float) and not isinstance(when, bool)
            and math.isfinite(when) and isinstance(chunk_id, str)
        )
    except (TypeError, ValueError, AttributeError, ZeroDivisionError):
        valid = False
    if not valid:
        raise CursorError("the cursor's sort key is malformed",
                          hint="Run the query again without a cursor.")
    return SortKey(-score, best_rank, -float(when), chunk_id)


def newest_first(chunk_id: str, event_time: float, last_seq: int) -> tuple[float, int, str]:
    """The order of tied chunks, copies of one text among them: newest event time, then the
    higher last seq, then chunkId. Event time and seq come from the log, the same under any
    redaction policy and on replay."""
    return (-event_time, -last_seq, chunk_id)


def newest_first_among_ties(ranked: RankedList, scores: Mapping[str, float],
                            recency: Mapping[str, tuple[float, int]]) -> RankedList:
    """``ranked`` with each run of equal scores ordered newest first: ``recency`` (event time,
    then the chunk's last seq) descending, then chunkId ascending.

    The engines break score ties by chunkId, and a chunk id carries the redaction policy's hash.
    Copies of one text (a system prompt in every session) always tie, so the copy a list ranked
    first, the one :func:`collapse_duplicates` keeps and the session a result names, changed
    with every policy version while no text did. Event time and seq come from the log: the
    same under any policy and on replay. It is the fusion's own tie rule too (newer first).
    Only the ids the list holds are reordered: a run cut at the window's end keeps the
    members the engine chose. A list with an id that has no score is returned as given.
    """
    if any(chunk_id not in scores or chunk_id not in recency for chunk_id in ranked.ids):
        return ranked
    ids = list(ranked.ids)
    ordered: list[str] = []
    start = 0
    while start < len(ids):
        end = start + 1
        while end < len(ids) and scores[ids[end]] == scores[ids[start]]:
            end += 1
        run = ids[start:end]
        if len(run) > 1:
            run.sort(key=lambda chunk_id: newest_first(chunk_id, *recency[chunk_id]))
        ordered += run
        start = end
    if ordered == ids:
        return ranked
    return RankedList(ranked.source, ordered, ranked.window, ranked.truncated)


def collapse_duplicates(ranked: RankedList, digests: Mapping[str, bytes]) -> tuple[RankedList, dict[str, int]]:
    """``ranked`` without the chunks whose text another chunk higher in the same list already
    has, and per kept chunk how many identical ones it stands for.

    Boilerplate repeated verbatim in many sessions (a system prompt, a policy text) would
    otherwise fill a ranked list with copies that tie with each other: they push distinct
    candidates out of the window and say nothing about which session is meant. The first
    copy in rank order stays, so the result depends only on the list as given (the same
    snapshot gives the same lists at any page size). ``digests`` maps a chunk id to a digest of
    its text; an id without one is never collapsed.
    """
    kept, collapsed = first_copies(ranked.ids, digests)
    if not collapsed:
        return ranked, {}
    return RankedList(ranked.source, [ranked.ids[i] for i in kept], ranked.window,
                      ranked.truncated), collapsed


def first_copies(chunk_ids: Sequence[str], digests: Mapping[str, bytes]) -> tuple[list[int], dict[str, int]]:
    """The positions in ``chunk_ids`` of the ids whose text no id before them has, and per
    kept id how many later ids of its text it stands for (an id without a digest is kept)."""
    first: dict[bytes, str] = {}
    collapsed: dict[str, int] = {}
    kept: list[int] = []
    for position, chunk_id in enumerate(chunk_ids):
        digest = digests.get(chunk_id)
        if digest is not None:
            holder = first.setdefault(digest, chunk_id)
            if holder != chunk_id:
                collapsed[holder] = collapsed.get(holder, 0) + 1
                continue
        kept.append(position)
    return kept, collapsed


def truncation(lists: Sequence[RankedList]) -> dict[str, dict[str, Any]]:
    """Per source: window asked, ids returned and whether the source was cut (for explain)."""
    return {
        ranked.source: {"window": ranked.window, "returned": len(ranked.ids),
                        "truncated": ranked.truncated}
        for ranked in lists
    }


def depth_end(lists: Sequence[RankedList], window: int) -> dict[str, Any] | None:
    """The explicit end of a result list that stops at the rank depth while a source had
    more matches (None when the results simply ran out)."""
    cut_short = sorted(ranked.source for ranked in lists if ranked.truncated)
    if not cut_short:
        return None
    return {"reason": "rankDepth", "depth": window, "sources": cut_short,
            "message": f"results end at rank depth {window}: {', '.join(cut_short)} had more "
                       "matches; refine the query or add filters to reach them"}
