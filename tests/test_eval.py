"""The evaluation's metric functions on tiny inputs (the whole run is `make eval`)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.eval.metrics import (
    contains_phrase,
    first_hit_rank,
    hit_at,
    mrr,
    normalise,
    page_split,
    sample_phrases,
)


def test_hit_at_and_mrr_known_answers() -> None:
    ranks = [1, 2, None, 10, 11]
    assert hit_at(ranks, 10) == pytest.approx(3 / 5)
    assert hit_at(ranks, 1) == pytest.approx(1 / 5)
    assert mrr(ranks) == pytest.approx((1 + 1 / 2 + 0 + 1 / 10 + 1 / 11) / 5)
    assert hit_at([], 10) == 0.0 and mrr([]) == 0.0


def test_first_hit_rank_looks_only_at_the_top_k() -> None:
    results = [{"sessionId": s} for s in "abcdefghijkl"]
    assert first_hit_rank(results, lambda r: r["sessionId"] == "c", 10) == 3
    assert first_hit_rank(results, lambda r: r["sessionId"] == "k", 10) is None
    assert first_hit_rank(results, lambda r: r["sessionId"] == "k", 11) == 11


def test_contains_phrase_needs_the_words_in_order_and_whole() -> None:
    text = "It  failed\non the refunds\ttable migration again"
    assert contains_phrase(text, "failed on the refunds table")
    assert not contains_phrase(text, "on the failed refunds table")
    assert not contains_phrase(text, "ailed on the")
    assert normalise(" a \n b\t") == "a b"


MESSAGES = [(f"m{i}", " ".join(f"word{i}x{j}" for j in range(30))) for i in range(40)]


def test_phrase_sampling_is_deterministic_and_order_free() -> None:
    first = sample_phrases(MESSAGES, 10, seed=7)
    assert first == sample_phrases(list(reversed(MESSAGES)), 10, seed=7)
    assert first != sample_phrases(MESSAGES, 10, seed=8)
    assert len(first) == 10
    for key, phrase in first:
        assert len(phrase.split(" ")) == 8
        assert contains_phrase(dict(MESSAGES)[key], phrase)


def test_phrase_sampling_honours_accept_and_skips_short_messages() -> None:
    messages = [("short", "only five words in here"), *MESSAGES[:3]]
    picked = sample_phrases(messages, 10, seed=1, accept=lambda phrase: "word1x" not in phrase)
    assert {key for key, _ in picked} == {"m0", "m2"}


@given(st.integers(1, 60), st.integers(0, 10_000))
def test_page_split_sums_to_the_total(total: int, seed: int) -> None:
    sizes = page_split(total, random.Random(seed))
    assert sum(sizes) == total and all(size >= 1 for size in sizes)
    assert sizes == page_split(total, random.Random(seed))


def test_an_error_fragment_also_printed_outside_any_turn_is_not_asked() -> None:
    from benchmarks.eval.run import Corpus, error_task

    def result(event_id: str, turn: str | None, output: str) -> dict[str, object]:
        return {"type": "tool.result", "eventId": event_id, "sessionId": "s-1", "turnId": turn,
                "fields": {"status": "error", "output": output, "toolName": "Bash"}}

    corpus = Corpus(events=[
        result("e-1", "t-1", "<tool_use_error>Sibling tool call errored</tool_use_error>"),
        result("e-2", None, "<tool_use_error>Sibling tool call errored</tool_use_error>"),  # no turn
        result("e-3", "t-2", "fatal: not a git repository (or any parent)"),
    ])
    asked = error_task(corpus, count=10, seed=1)
    assert [task["query"] for task in asked] == ["fatal: not a git repository (or any parent)"]
    assert asked[0]["turnId"] == "t-2"


def test_an_error_ending_is_the_last_telling_line_of_a_long_output_past_its_beginning() -> None:
    from benchmarks.eval.run import Corpus, error_task

    frames = "".join(f'  File "/srv/app/m{n}.py", line {n}, in f{n}\n    g{n}()\n' for n in range(12))
    long_output = f"Exit code 1\nTraceback (most recent call last):\n{frames}KeyError: 'refund_total' missing from order payload\n\n"
    corpus = Corpus(events=[
        {"type": "tool.result", "eventId": "e-1", "sessionId": "s-1", "turnId": "t-1",
         "fields": {"status": "error", "output": long_output, "toolName": "Bash"}},
        {"type": "tool.result", "eventId": "e-2", "sessionId": "s-1", "turnId": "t-2",  # short: its summary holds it all
         "fields": {"status": "error", "output": "Traceback (most recent call last):\nValueError: bad literal x", "toolName": "Bash"}},
    ])
    asked = error_task(corpus, count=10, seed=1, ending=True)
    assert [(task["query"], task["turnId"]) for task in asked] == [("KeyError: 'refund_total' missing from order payload", "t-1")]
