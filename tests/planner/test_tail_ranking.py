"""Trimmed and tail chunks ranked as the text index ranks its own (planner.local.rank_texts_as_index).

Found on real Claude Code sessions (docs/planner.md, "Tail chunks in the index's lists"): with
the tail in a list of its own, text mode under ``latest`` put the L1 tail's best chunk level
with the index's best, however poor a match, so five held-back sessions took every other
place of the first ten for every query (paraphrase MRR 0.82 indexed, 0.51 latest).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.acl import parse_principal
from planner.engine import Planner
from planner.local import clauses_of, field_norm, rank_texts_as_index
from sinks.text.base import parse_query
from sinks.text.tantivy_engine import TantivyEngine
from tests.planner.corpus import IndexBuilder, acl, make_test_settings, serving

ENGINE = TantivyEngine()
WORDS = ("deploy", "refund", "kafka", "broker", "timeout", "retry", "cache", "数", "据")
ALICE = parse_principal("tenant:acme/user:alice/groups:eng")


def test_field_norm_is_tantivys_table() -> None:
    # tantivy/src/fieldnorm/code.rs FIELD_NORMS_TABLE, its first 70 entries
    table = [*range(41), 42, 44, 46, 48, 50, 52, 54, 56, 60, 64, 68, 72, 76, 80, 84, 88, 96, 104,
             112, 120, 128, 136, 144, 152, 168, 184, 200, 216, 232]
    assert sorted({field_norm(n) for n in range(233)}) == table
    assert field_norm(2_013_265_944) == 2_013_265_944 and field_norm(2_013_265_943) < 2_013_265_944


texts = st.lists(st.lists(st.sampled_from(WORDS), min_size=0, max_size=120).map(" ".join),
                 min_size=1, max_size=40)
queries = st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(WORDS).flatmap(
    lambda first: st.sampled_from(WORDS).map(lambda second: f'"{first} {second}"'))),
    min_size=1, max_size=4).map(" ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=texts, query=queries)
def test_texts_score_as_the_index_scores_them(texts: list[str], query: str) -> None:
    """Scored with an index's statistics, texts it holds get its very scores and order (bit
    for bit: f32 arithmetic, the field norm's rounding of long texts, phrases)."""
    chunks = [{"chunkId": f"c{i:04d}", "sessionId": "s", "text": text, "minSeq": i, "maxSeq": i}
              for i, text in enumerate(texts)]
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "one"
        ENGINE.create(index)
        ENGINE.add(index, chunks)
        expected = [(hit.chunk_id, hit.score) for hit in ENGINE.search(index, query, limit=len(texts))]
        clauses = parse_query(query, ENGINE.analyze)
        terms = set(clauses.terms) | {term for phrase in clauses.phrases for term in phrase}
        stats, freqs = ENGINE.term_statistics([index], terms)
    got = rank_texts_as_index(clauses_of(query), [(f"c{i:04d}", text) for i, text in enumerate(texts)], stats, freqs)
    assert got == expected


# -- the planner: a strong indexed match against weak ones in the L1 tail --------------------------

QUERY = "websocket reconnect test flaky"
FILLER = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
          "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def _turn(session_id: str, number: int, text: str) -> list[dict[str, Any]]:
    when = f"2026-01-01T00:{number // 60:02d}:{number % 60:02d}Z"
    base = {"logId": "tailrank", "sessionId": session_id, "time": when, "acl": acl("acme", "*"),
            "turnId": f"{session_id}-t{number}"}
    return [{**base, "eventId": f"{session_id}-{number}-s", "type": "turn.started", "role": "user"},
            {**base, "eventId": f"{session_id}-{number}-m", "type": "message", "role": "assistant",
             "fields": {"text": text}},
            {**base, "eventId": f"{session_id}-{number}-e", "type": "turn.ended", "role": "assistant"}]


@pytest.fixture(scope="module")
def planner(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Planner]:
    settings = make_test_settings(tmp_path_factory.mktemp("tailrank"), kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, "tailrank")
    # Indexed: the session the query is about, a weaker one, and 20 unrelated sessions.
    builder.append(_turn("strong-indexed", 1, "the websocket reconnect test was flaky, so I pinned "
                                              "the retry timer and the websocket reconnect test passed"))
    builder.append(_turn("weak-indexed", 2, " ".join(FILLER[:20]) + " one test"))
    for number in range(20):
        builder.append(_turn(f"other-{number}", 10 + number, " ".join(FILLER[number:number + 6])))
    builder.commit()
    # The L1 tail (above every watermark): five sessions naming one common query word in long
    # texts, and one naming the query's words as strongly as the indexed one.
    for number in range(5):
        builder.append(_turn(f"weak-tail-{number}", 40 + number,
                             " ".join(FILLER) + f" test {number} " + " ".join(reversed(FILLER))))
    builder.append(_turn("strong-tail", 50, "a flaky websocket reconnect test again: the reconnect "
                                            "websocket handler raced the test teardown"))
    with serving(settings, kafka_bootstrap, builder) as served:
        yield served


def _sessions(planner: Planner, **request: Any) -> list[str]:
    response = planner.search({"query": QUERY, "log": "tailrank", "k": 10, **request}, ALICE)
    return [hit["sessionId"] for hit in response["results"]]




@pytest.mark.kafka
@pytest.mark.parametrize("mode", ["text", "hybrid"])
def test_a_weak_tail_match_does_not_outrank_a_strong_indexed_one(planner: Planner, mode: str) -> None:
    indexed = _sessions(planner, mode="text", freshness="indexed")
    assert indexed[:2] == ["strong-indexed", "weak-indexed"]
    latest = _sessions(planner, mode=mode, freshness="latest")
    # The two strong matches first (the tail's is newer and as strong); no weak tail chunk
    # above the strong indexed one, as a list of the tail's own put its best there.
    assert set(latest[:2]) == {"strong-indexed", "strong-tail"}, latest
    if mode == "text":
        assert latest.index("weak-indexed") < min(latest.index(f"weak-tail-{n}") for n in range(5)
                                                   if f"weak-tail-{n}" in latest)


@pytest.mark.kafka
def test_tail_chunks_join_the_index_list_and_explain_says_so(planner: Planner) -> None:
    response = planner.search({"query": QUERY, "log": "tailrank", "k": 10, "mode": "text",
                               "freshness": "latest", "explain": True}, ALICE)
    components = {hit["sessionId"]: set(hit["score"]["components"]) for hit in response["results"]}
    assert components["strong-tail"] == {"text"} and components["strong-indexed"] == {"text"}
    assert response["explain"]["provisionalMerged"]["sources"] == ["phrase", "text"]


@pytest.mark.kafka
@pytest.mark.parametrize("mode", ["text", "hybrid"])
def test_pages_of_a_merged_list_equal_one_page(planner: Planner, mode: str) -> None:
    request = {"query": QUERY, "log": "tailrank", "mode": mode, "freshness": "latest"}
    whole = [hit["chunkId"] for hit in planner.search({**request, "k": 20}, ALICE)["results"]]
    paged: list[str] = []
    cursor = None
    for size in (3, 7, 10):
        response = planner.search({**request, "k": size, **({"cursor": cursor} if cursor else {})}, ALICE)
        paged += [hit["chunkId"] for hit in response["results"]]
        cursor = response["cursor"]
        if not cursor:
            break
    assert paged == whole


# -- the vector list: a tail chunk is a candidate as it will be once indexed ---------------------

VECTOR_QUERY = "grafana dashboard panel"


@pytest.mark.kafka
def test_a_tail_chunk_has_the_vector_rank_it_gets_once_indexed(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found on real Claude Code sessions: under ``latest`` every tail chunk was a candidate of
    the vector list and ranked by its best event, while the index's candidates are its
    ``RANK_DEPTH`` nearest chunks by whole vector. A tail chunk whose one event matched the query
    but whose tool output filled its text came 1st, and once indexed it was no candidate at
    all (and indexed chunks it had pushed out of that window came back): the same chunks at the
    same head in another order. Here the window is 3, so four indexed chunks nearer by whole
    vector keep the tail's chunk out once it is indexed."""
    import planner.engine as engine

    monkeypatch.setattr(engine, "RANK_DEPTH", 3)
    settings = make_test_settings(tmp_path, kafka_bootstrap)
    builder = IndexBuilder(settings, kafka_bootstrap, "vecrank")
    for number in range(6):
        builder.append([{**event, "logId": "vecrank"}
                        for event in _turn(f"near-{number}", number, f"grafana dashboard {FILLER[number]}")])
    builder.commit()
    # The tail: the query verbatim in one event, a long unrelated output in the other.
    base = {"logId": "vecrank", "sessionId": "tail", "time": "2026-01-01T01:00:00Z",
            "acl": acl("acme", "*"), "turnId": "tail-t1"}
    builder.append([
        {**base, "eventId": "tail-s", "type": "turn.started", "role": "user"},
        {**base, "eventId": "tail-u", "type": "message", "role": "user",
         "fields": {"text": VECTOR_QUERY}},
        {**base, "eventId": "tail-a", "type": "message", "role": "assistant",
         "fields": {"text": " ".join(FILLER * 8)}},
        {**base, "eventId": "tail-e", "type": "turn.ended", "role": "assistant"}])
    with serving(settings, kafka_bootstrap, builder) as served:
        def ranked(mode: str, freshness: str) -> list[tuple[str, dict[str, Any]]]:
            response = served.search({"query": VECTOR_QUERY, "log": "vecrank", "mode": mode, "k": 10,
                                      "freshness": freshness}, ALICE)
            return [(hit["chunkId"], hit["score"]["components"]) for hit in response["results"]]

        before = ranked("vector", "latest")
        hybrid_before = dict(ranked("hybrid", "latest"))
        manifests = builder.commit()
        deadline = time.monotonic() + 10
        while served.watermarks("vecrank").get("vector", {}).get("generationId") != \
                manifests["vector"].generation_id:
            assert time.monotonic() < deadline, "the vector watermark never moved"
            time.sleep(0.05)
        after = ranked("vector", "indexed")
        hybrid_after = dict(ranked("hybrid", "indexed"))
    assert [chunk_id for chunk_id, _ in before] == [chunk_id for chunk_id, _ in after]
    assert before == after
    # In hybrid mode the text list finds the tail's chunk, so it is a vector candidate as the
    # index's chunks the text lists find are, before and after it is indexed.
    tail_chunk = next(chunk_id for chunk_id, components in hybrid_after.items() if "text" in components
                      and chunk_id not in dict(after))
    assert "vector" in hybrid_before[tail_chunk] and "vector" in hybrid_after[tail_chunk]
