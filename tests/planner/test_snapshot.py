"""The freshness decision: asOfSeq choice, tail scans, honest labels, wait semantics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.exceptions import IndexUnavailable, QueryError
from planner.snapshot import (
    Freshness,
    SeqRange,
    Watermark,
    choose_as_of,
    label_for,
    parse_freshness,
    record_tail_scan,
    wait_satisfied,
    with_stalls,
    with_uncovered,
)

INDEXED, LATEST, WAIT = Freshness("indexed"), Freshness("latest"), Freshness("wait", 5.0)
KINDS = ("text", "vector", "toolresults", "structured")


@pytest.mark.parametrize("text, expected", [
    ("indexed", Freshness("indexed")),
    (" Latest ", Freshness("latest")),
    ("wait:5", Freshness("wait", 5.0)),
    ("wait:0.25", Freshness("wait", 0.25)),
    ("wait:300", Freshness("wait", 300.0)),
])
def test_parse_freshness(text, expected):
    assert parse_freshness(text) == expected
    assert parse_freshness(str(expected)) == expected


@pytest.mark.parametrize("text", [
    "", "fresh", "wait", "wait:", "wait:0", "wait:0.0", "wait:301", "wait:-1", "wait:nan",
    "wait:inf", "wait:1e2", "wait: 5", "wait(5)", "indexed:5",
])
def test_bad_freshness_is_a_clear_query_error(text):
    with pytest.raises(QueryError) as caught:
        parse_freshness(text)
    assert caught.value.hint and "wait:" in caught.value.hint


@pytest.mark.parametrize("text", ["wait:0", "wait:0.0", "wait:301", "wait:-1", "wait:-0.5"])
def test_a_wait_out_of_range_says_the_range_it_allows(text):
    # wait:0 was refused with the hint "Wait between 0 and 300 seconds", which it is.
    with pytest.raises(QueryError) as caught:
        parse_freshness(text)
    assert "out of range" in caught.value.message
    assert "more than 0 and at most 300 seconds" in caught.value.hint


def test_indexed_takes_the_minimum_and_explains_it():
    decision = choose_as_of(INDEXED, 500, {"text": (12, 480), "vector": (9, 470)},
                            ["text", "vector"])
    assert decision.as_of_seq == 470 and decision.label == "indexed"
    assert decision.tail_scan is None and decision.uncovered == ()
    assert decision.generations == {"text": 12, "vector": 9}
    assert "asOfSeq = min(L1 500, text 480, vector 470) = 470" in decision.reasons[-1]
    assert any("generation 12 built through 480 (20 seqs behind L1)" in r
               for r in decision.reasons)


def test_latest_tail_scans_the_gap():
    decision = choose_as_of(LATEST, 500, {"text": (12, 480), "vector": (9, 470)},
                            ["text", "vector"])
    assert decision.as_of_seq == 500 and decision.label == "latest"
    assert decision.tail_scan == SeqRange(471, 500)
    assert decision.tail_scan.size == 30
    assert "seqs 471..500 are read from L1 by a tail scan" in decision.reasons[-1]


def test_latest_tail_scan_capped_is_not_latest():
    decision = choose_as_of(LATEST, 500, {"text": (12, 480)}, ["text"])
    capped = record_tail_scan(decision, scanned_through=490)
    assert capped.label == "latest-partial"
    assert capped.uncovered == (SeqRange(491, 500),)
    assert "seqs 491..500 are not covered" in capped.reasons[-1]
    assert record_tail_scan(decision, scanned_through=500) == decision
    nothing = record_tail_scan(decision, scanned_through=0)
    assert nothing.uncovered == (SeqRange(481, 500),)


def test_watermark_past_l1_is_capped():
    decision = choose_as_of(INDEXED, 500, {"text": (3, 510)}, ["text"])
    assert decision.as_of_seq == 500 and decision.index_through == 500
    assert any("counts as 500" in reason for reason in decision.reasons)


def test_missing_vector_falls_back_to_text_only():
    decision = choose_as_of(INDEXED, 500, {"text": (12, 480), "vector": None},
                            ["text", "vector"])
    assert decision.as_of_seq == 480 and decision.label == "indexed"
    assert decision.required == ("text",) and decision.missing == ("vector",)
    assert decision.fallbacks == ("vector index has no generation yet; results use text only",)
    assert decision.generations == {"text": 12}
    assert wait_satisfied(480, {"text": (12, 480)}, ["text", "vector"])


def test_missing_text_is_unavailable_when_indexed_and_scanned_when_latest():
    with pytest.raises(IndexUnavailable) as caught:
        choose_as_of(INDEXED, 500, {"vector": (9, 470)}, ["text", "vector"])
    assert caught.value.status == 503 and "text" in caught.value.message
    decision = choose_as_of(LATEST, 500, {"vector": (9, 470)}, ["text", "vector"])
    assert decision.tail_scan == SeqRange(1, 500) and decision.missing == ("text",)
    assert decision.label == "latest"
    # A vector-only query cannot fall back to nothing.
    with pytest.raises(IndexUnavailable):
        choose_as_of(INDEXED, 500, {}, ["vector"])


def test_wait_satisfied_and_deadline():
    marks = {"text": (12, 500), "vector": (9, 500)}
    assert wait_satisfied(500, marks, ["text", "vector"])
    done = choose_as_of(WAIT, 500, marks, ["text", "vector"])
    assert (done.as_of_seq, done.label, done.tail_scan, done.timed_out) == (500, "wait", None, False)

    lagging = {"text": (12, 500), "vector": (9, 430)}
    assert not wait_satisfied(500, lagging, ["text", "vector"])
    assert not wait_satisfied(500, {"text": None, "vector": (9, 900)}, ["text", "vector"])
    late = choose_as_of(WAIT, 500, lagging, ["text", "vector"])
    assert late.as_of_seq == 500 and late.timed_out
    assert late.tail_scan == SeqRange(431, 500)
    assert late.label == "wait"  # the tail scan is expected to fill the gap ...
    cut = record_tail_scan(late, scanned_through=450)
    assert cut.label == "wait-partial"  # ... and says plainly what it lacks if it cannot
    assert cut.to_json()["uncovered"] == [{"fromSeq": 451, "toSeq": 500}]
    assert cut.to_json()["waitSeconds"] == 5.0


def test_empty_log_and_no_required_index():
    assert choose_as_of(LATEST, 0, {}, ["text"]).tail_scan is None
    assert choose_as_of(LATEST, 0, {}, ["text"]).label == "latest"
    none_needed = choose_as_of(INDEXED, 42, {"text": (1, 7)}, [])
    assert none_needed.as_of_seq == 42 and none_needed.watermarks == {"text": Watermark(1, 7)}


def test_with_uncovered_clips_merges_and_relabels():
    decision = choose_as_of(INDEXED, 500, {"text": (12, 480)}, ["text"])
    widened = with_uncovered(decision, [SeqRange(470, 475), SeqRange(476, 490),
                                        SeqRange(0, 3)], "straddling chunk left out")
    assert widened.uncovered == (SeqRange(1, 3), SeqRange(470, 480))
    assert widened.label == "indexed-partial"
    assert widened.reasons[-1] == "straddling chunk left out"
    assert with_uncovered(decision, [SeqRange(490, 495)], "beyond asOf") == decision


def test_to_json_has_the_contract_fields():
    body = choose_as_of(LATEST, 500, {"text": (12, 480), "vector": None}, ["text", "vector"]).to_json()
    assert {"mode", "label", "l1CommittedSeq", "watermarks", "tailScan", "uncovered"} <= set(body)
    assert body["watermarks"] == {"text": {"generationId": 12, "builtThroughSeq": 480},
                                  "vector": None}
    assert body["tailScan"] == {"fromSeq": 481, "toSeq": 500}


def test_label_for_latest_requires_l1_and_full_coverage():
    assert label_for("latest", as_of_seq=5, l1_seq=5, uncovered=()) == "latest"
    assert label_for("latest", as_of_seq=4, l1_seq=5, uncovered=()) == "latest-partial"
    assert label_for("latest", as_of_seq=5, l1_seq=5, uncovered=[SeqRange(1, 1)]) == \
        "latest-partial"
    assert label_for("indexed", as_of_seq=4, l1_seq=5, uncovered=()) == "indexed"


def test_bad_inputs_are_programming_errors():
    with pytest.raises(ValueError):
        choose_as_of(INDEXED, -1, {}, [])
    with pytest.raises(ValueError):
        choose_as_of(INDEXED, 5, {"text": (1, -2)}, ["text"])
    with pytest.raises(ValueError):
        choose_as_of(Freshness("soon"), 5, {}, [])


seqs = st.integers(min_value=0, max_value=1000)
watermark_maps = st.dictionaries(
    st.sampled_from(KINDS),
    st.none() | st.tuples(st.integers(min_value=1, max_value=50), seqs),
)
required_kinds = st.sets(st.sampled_from(KINDS), max_size=4)


@given(seqs, watermark_maps, required_kinds)
def test_indexed_never_passes_a_required_watermark_or_l1(l1, marks, required):
    try:
        decision = choose_as_of(INDEXED, l1, marks, required)
    except IndexUnavailable:
        essential = [k for k in required if marks.get(k) is None]
        assert essential and (set(essential) != {"vector"} or required == {"vector"})
        return
    assert decision.as_of_seq <= l1
    for kind in decision.required:
        assert decision.as_of_seq <= marks[kind][1]
    assert decision.as_of_seq == min([l1, *(marks[k][1] for k in decision.required)])
    assert decision.label == "indexed" and decision.tail_scan is None
    assert set(decision.required) | set(decision.missing) == set(required)


@given(seqs, watermark_maps, required_kinds, seqs,
       st.sampled_from([LATEST, WAIT]))
def test_latest_and_wait_cover_up_to_l1_or_disclose(l1, marks, required, scanned, mode):
    decision = choose_as_of(mode, l1, marks, required)
    assert decision.as_of_seq == l1
    assert decision.label == mode.mode
    # Indexes plus the tail scan cover every seq <= asOfSeq.
    if decision.tail_scan is None:
        assert decision.index_through >= l1
    else:
        assert decision.tail_scan == SeqRange(decision.index_through + 1, l1)
    for kind in decision.required:
        through = 0 if marks.get(kind) is None else min(marks[kind][1], l1)
        assert decision.index_through <= through
    assert decision.timed_out == (mode.mode == "wait" and decision.tail_scan is not None)
    assert (decision.tail_scan is None) == wait_satisfied(l1, marks, required)

    after = record_tail_scan(decision, scanned_through=scanned)
    covered = decision.tail_scan is None or scanned >= decision.tail_scan.to_seq
    assert (after.uncovered == ()) == covered
    # Honest freshness: the mode's own label only with nothing uncovered.
    assert (after.label == mode.mode) == (after.uncovered == () and after.as_of_seq == l1)
    if not covered:
        assert after.uncovered[-1].to_seq == l1
        assert after.label == f"{mode.mode}-partial"


def test_a_stalled_index_is_named_stalled_not_only_behind():
    """A stalled log's answer said '356 seqs behind L1' and nothing else: as if it would catch up."""
    stall = {"what": "chunker", "built": "targetTokens=768", "writes": "targetTokens=512", "generationId": 4}
    decision = choose_as_of(LATEST, 400, {"text": (4, 44), "structured": (4, 44)}, ("text", "structured"))
    assert "text: generation 4 built through 44 (356 seqs behind L1)" in decision.reasons
    shown = with_stalls(decision, {"text": {"builtThroughSeq": 44, "stalled": stall},
                                   "structured": {"builtThroughSeq": 44, "shards": {
                                       "shard-0-of-2": {"builtThroughSeq": 44},
                                       "shard-1-of-2": {"builtThroughSeq": 50, "stalled": stall}}},
                                   "vector": {"stalled": stall}}, "steady")
    added = shown.reasons[len(decision.reasons):]
    assert shown.reasons[:len(decision.reasons)] == decision.reasons  # additive only
    assert added == (
        "structured (shard-1-of-2): stalled: built under chunker targetTokens=768, the sinks write "
        "targetTokens=512; not indexing this log until `usl rebuild all --log steady`",
        "text: stalled: built under chunker targetTokens=768, the sinks write targetTokens=512; not "
        "indexing this log until `usl rebuild all --log steady`")
    assert with_stalls(decision, {"text": {"builtThroughSeq": 44}, "structured": None}, "steady") == decision

