"""Reciprocal rank fusion: the formula, the total stable order, and cursor-style resumption."""

from __future__ import annotations

import json
from fractions import Fraction
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.exceptions import CursorError
from planner.rrf import (
    RankedList,
    after,
    collapse_duplicates,
    decode_sort_key,
    encode_sort_key,
    fuse,
    newest_first_among_ties,
    sort_key,
    truncation,
)

SOURCES = ("text", "vector", "toolresults")
chunk_ids = st.sampled_from([f"c_{i:02d}" for i in range(30)])


@st.composite
def ranked_lists(draw):
    sources = draw(st.lists(st.sampled_from(SOURCES), unique=True, max_size=3))
    lists = []
    for source in sources:
        ids = draw(st.lists(chunk_ids, unique=True, max_size=25))
        lists.append(RankedList(source, ids, window=25, truncated=draw(st.booleans())))
    every = {chunk for ranked in lists for chunk in ranked.ids}
    # Few distinct times, so the event-time and chunk-id tie-breakers are exercised.
    times = {chunk: draw(st.sampled_from([1.0, 2.5, 1767225600.123456])) for chunk in every}
    return lists, times


def test_formula_and_components():
    lists = [RankedList("text", ["a", "b"], window=10), RankedList("vector", ["b", "c"], window=10)]
    hits = fuse(lists, event_time={"a": 1.0, "b": 1.0, "c": 1.0})
    by_id = {hit.chunk_id: hit for hit in hits}
    assert by_id["b"].rrf == pytest.approx(1 / 62 + 1 / 61)
    assert by_id["b"].rrf_exact == Fraction(1, 62) + Fraction(1, 61)
    assert by_id["b"].components == {
        "text": {"rank": 2, "contribution": 1 / 62},
        "vector": {"rank": 1, "contribution": 1 / 61},
    }
    assert by_id["b"].best_rank == 1
    assert [hit.chunk_id for hit in hits] == ["b", "a", "c"]


def test_ties_break_by_best_rank_then_newer_event_then_chunk_id():
    # x: text rank 1 only; y: vector rank 1 only; same score, same best rank.
    lists = [RankedList("text", ["x", "p"], window=2), RankedList("vector", ["y", "q"], window=2)]
    newer_first = fuse(lists, event_time={"x": 1.0, "y": 2.0, "p": 5.0, "q": 5.0})
    assert [hit.chunk_id for hit in newer_first] == ["y", "x", "p", "q"]
    same_time = fuse(lists, event_time={"x": 1.0, "y": 1.0, "p": 5.0, "q": 5.0})
    assert [hit.chunk_id for hit in same_time] == ["x", "y", "p", "q"]


def test_best_rank_breaks_equal_scores():
    # Equal sums of different shapes are rare; k=0 gives 1/2 + 1/6 == 1/3 + 1/3.
    lists = [RankedList("text", ["a", "b", "c", "d", "e", "f"], window=6),
             RankedList("vector", ["z", "y", "b", "g", "h", "a"], window=6)]
    hits = fuse(lists, k=0, event_time=dict.fromkeys("abcdefghyz", 1.0))
    by_id = {hit.chunk_id: hit for hit in hits}
    assert by_id["a"].rrf_exact == Fraction(1, 1) + Fraction(1, 6)
    assert by_id["b"].rrf_exact == Fraction(1, 2) + Fraction(1, 3)


def test_duplicate_id_keeps_best_rank_and_bad_input_is_refused():
    hits = fuse([RankedList("text", ["a", "a", "b"], window=3)], event_time={"a": 1.0, "b": 1.0})
    assert hits[0].components["text"]["rank"] == 1
    with pytest.raises(ValueError):
        fuse([RankedList("text", ["a"], 1), RankedList("text", ["b"], 1)],
             event_time={"a": 1.0, "b": 1.0})
    with pytest.raises(ValueError):
        fuse([RankedList("text", ["a"], 1)], event_time={})
    with pytest.raises(ValueError):
        fuse([RankedList("text", ["a"], 1)], event_time={"a": float("nan")})
    with pytest.raises(ValueError):
        RankedList("text", ["a", "b"], window=1)


def test_truncation_is_reported_per_source():
    lists = [RankedList("text", ["a"], window=1, truncated=True), RankedList("vector", [], 5)]
    assert truncation(lists) == {
        "text": {"window": 1, "returned": 1, "truncated": True},
        "vector": {"window": 5, "returned": 0, "truncated": False},
    }


@given(ranked_lists(), st.randoms())
def test_order_is_total_and_independent_of_list_order(case, rnd):
    lists, times = case
    hits = fuse(lists, event_time=times)
    keys = [sort_key(hit) for hit in hits]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)
    # The exact score is the sum of the fractions (fuse sorts integers over a common denominator).
    assert all(hit.rrf_exact == sum(Fraction(1, 60 + c["rank"]) for c in hit.components.values())
               for hit in hits)
    shuffled = list(lists)
    rnd.shuffle(shuffled)
    again = fuse(shuffled, event_time=times)
    assert [(h.chunk_id, h.rrf, h.components) for h in again] == \
        [(h.chunk_id, h.rrf, h.components) for h in hits]
    for earlier, later in pairwise(hits):
        assert earlier.rrf_exact >= later.rrf_exact


@settings(max_examples=200)
@given(ranked_lists(), st.integers(min_value=1, max_value=8))
def test_pages_resumed_from_json_keys_equal_one_shot(case, page_size):
    lists, times = case
    one_shot = fuse(lists, event_time=times)
    pages: list[str] = []
    remaining = fuse(lists, event_time=times)
    while remaining:
        page = remaining[:page_size]
        pages.extend(hit.chunk_id for hit in page)
        # The key crosses a JSON round trip, as it does inside a cursor.
        key = decode_sort_key(json.loads(json.dumps(encode_sort_key(sort_key(page[-1])))))
        assert key == sort_key(page[-1])
        remaining = after(fuse(lists, event_time=times), key)
    assert pages == [hit.chunk_id for hit in one_shot]


def test_after_resumes_even_when_the_last_row_disappeared():
    lists = [RankedList("text", ["a", "b", "c"], window=3)]
    times = {"a": 1.0, "b": 1.0, "c": 1.0}
    key = sort_key(fuse(lists, event_time=times)[1])  # page 1 ended with "b"
    # "b" became unreadable: "c" moved up to rank 2 but was never served, so it comes next.
    without_b = fuse([RankedList("text", ["a", "c"], window=3)], event_time=times)
    assert [hit.chunk_id for hit in after(without_b, key)] == ["c"]


@given(ranked_lists(), st.integers(min_value=1, max_value=8), st.data())
def test_a_revocation_between_pages_never_repeats_a_served_hit(case, page_size, data):
    lists, times = case
    first = fuse(lists, event_time=times)[:page_size]
    if not first:
        return
    revoked = data.draw(st.sets(st.sampled_from(sorted(times))))
    filtered = [RankedList(r.source, [i for i in r.ids if i not in revoked], r.window)
                for r in lists]
    rest = after(fuse(filtered, event_time=times), sort_key(first[-1]))
    assert not {hit.chunk_id for hit in rest} & {hit.chunk_id for hit in first}
    assert not {hit.chunk_id for hit in rest} & revoked


@pytest.mark.parametrize("value", [
    None, [], ["1/0", 1, 1.0, "a"], ["x/y", 1, 1.0, "a"], ["1/61", 0, 1.0, "a"],
    ["1/61", 1, "t", "a"], ["1/61", 1, 1.0, 7], ["1/61", True, 1.0, "a"], "1/61",
])
def test_malformed_sort_key_is_a_cursor_error(value):
    with pytest.raises(CursorError):
        decode_sort_key(value)


def test_collapse_keeps_the_first_copy_of_each_text_in_rank_order() -> None:
    ranked = RankedList("text", ["a", "b", "c", "d", "e", "f"], window=8, truncated=True)
    digests = {"a": b"x", "b": b"y", "c": b"x", "d": b"x", "f": b"y"}  # e has no digest
    collapsed, stands_for = collapse_duplicates(ranked, digests)
    assert collapsed == RankedList("text", ["a", "b", "e"], window=8, truncated=True)
    assert stands_for == {"a": 2, "b": 1}
    same, none = collapse_duplicates(ranked, {"a": b"x", "b": b"y"})
    assert same is ranked and none == {}


@settings(max_examples=200)
@given(ids=st.lists(chunk_ids, max_size=25),
       digests=st.dictionaries(chunk_ids, st.sampled_from([b"p", b"q", b"r", b"s"])))
def test_collapse_is_a_prefix_stable_filter(ids: list[str], digests: dict[str, bytes]) -> None:
    """The collapsed list is a subsequence of the list with one chunk per text, each dropped
    chunk's text held by a kept chunk above it; and collapsing a prefix gives a prefix of the
    collapsed list, so a deeper read never reorders what a shallower one kept."""
    ranked = RankedList("vector", ids, window=25)
    collapsed, stands_for = collapse_duplicates(ranked, digests)
    kept = list(collapsed.ids)
    iterator = iter(ids)
    assert all(chunk in iterator for chunk in kept)  # a subsequence
    kept_digests = [digests[c] for c in dict.fromkeys(kept) if c in digests]
    assert len(kept_digests) == len(set(kept_digests))
    for position, chunk in enumerate(ids):
        if chunk in digests and digests[chunk] not in {digests.get(c) for c in ids[:position]}:
            assert chunk in kept
    assert sum(stands_for.values()) == len(ids) - len(kept)
    for cut in range(len(ids) + 1):
        shallow, _ = collapse_duplicates(RankedList("vector", ids[:cut], window=25), digests)
        assert list(shallow.ids) == kept[:len(shallow.ids)]


@st.composite
def tied_lists(draw):
    """A list in the engines' order (score descending, then chunkId), with few distinct scores
    and times so runs of equal scores are common; every chunk's seq is its own."""
    count = draw(st.integers(0, 20))
    ids = [f"c_{i:02d}" for i in range(count)]
    scores = {chunk: draw(st.sampled_from([1.0, 2.5, 7.0])) for chunk in ids}
    recency = {chunk: (draw(st.sampled_from([10.0, 20.0, 30.0])), seq)
               for seq, chunk in zip(draw(st.permutations(range(count))), ids, strict=True)}
    return scores, recency


def _engine_order(scores):
    return sorted(scores, key=lambda chunk: (-scores[chunk], chunk))


@settings(max_examples=300)
@given(case=tied_lists(), data=st.data())
def test_ties_newest_first_does_not_depend_on_chunk_ids(case, data) -> None:
    """Only runs of equal scores are reordered, each newest first (time, then seq, descending);
    and renaming the chunks (another redaction policy's hash in their ids), which reorders
    the engines' ties, gives the same chunks in the same order."""
    scores, recency = case
    ranked = newest_first_among_ties(RankedList("text", _engine_order(scores), window=25), scores, recency)
    assert sorted(ranked.ids) == sorted(scores)
    assert [scores[c] for c in ranked.ids] == sorted(scores.values(), reverse=True)
    for above, below in pairwise(ranked.ids):
        if scores[above] == scores[below]:
            assert recency[above] > recency[below]
    names = data.draw(st.permutations([f"c_{i:02d}" for i in range(len(scores))]))
    renamed = dict(zip(scores, names, strict=True))
    again = newest_first_among_ties(
        RankedList("text", _engine_order({renamed[c]: s for c, s in scores.items()}), window=25),
        {renamed[c]: s for c, s in scores.items()}, {renamed[c]: r for c, r in recency.items()})
    assert list(again.ids) == [renamed[c] for c in ranked.ids]


def test_ties_newest_first_leaves_a_list_without_scores_as_given() -> None:
    ranked = RankedList("toolresults", ["b", "a"], window=5)
    assert newest_first_among_ties(ranked, {"b": 1.0}, {"a": (2.0, 1), "b": (1.0, 2)}) is ranked
    assert newest_first_among_ties(ranked, {"a": 1.0, "b": 1.0}, {"a": (2.0, 1)}) is ranked
    flipped = newest_first_among_ties(ranked, {"a": 1.0, "b": 1.0}, {"a": (2.0, 1), "b": (1.0, 2)})
    assert flipped == RankedList("toolresults", ["a", "b"], window=5)
