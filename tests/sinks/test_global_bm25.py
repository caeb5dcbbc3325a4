"""BM25 over shards as one index (:mod:`sinks.text.global_bm25`): the text engines' and the
tool-results reader's ``search_shards`` over N shard indexes answer exactly what one index over
the same documents answers: the same ids in the same order with bit-identical scores, at any
limit, under filters, with any split (an empty shard included). Whoosh's BM25F takes the
summed statistics as its weighting; tantivy's hits are rescored (the module docstring)."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tantivy import Query

import sinks.text.global_bm25 as global_bm25
from sinks.testing import make_toolresult
from sinks.text.base import parse_query
from sinks.text.global_bm25 import field_stats
from sinks.text.tantivy_engine import TantivyEngine
from sinks.text.whoosh_engine import WhooshEngine
from sinks.toolresults import ToolResultsReader, ToolResultsWriter, search_shards

WORDS = ("deploy", "refund", "kafka", "broker", "timeout", "retry", "cache", "数", "据")
ENGINE = TantivyEngine()


def _chunks(texts: Sequence[str]) -> list[dict[str, Any]]:
    return [{"chunkId": f"c{i:04d}", "sessionId": f"s{i % 3}", "text": text, "minSeq": i, "maxSeq": i}
            for i, text in enumerate(texts)]


def _text_indexes(root: Path, chunks: list[dict[str, Any]], shard_of: Sequence[int],
                  shards: int, engine: Any = ENGINE) -> tuple[Path, list[Path]]:
    one = root / "one"
    engine.create(one)
    engine.add(one, chunks)
    parts = []
    for shard in range(shards):
        part = root / f"shard-{shard}"
        engine.create(part)
        engine.add(part, [chunk for chunk, owner in zip(chunks, shard_of, strict=True) if owner == shard])
        parts.append(part)
    return one, parts


def _local_merge(parts: list[Path], query: str, limit: int) -> list[tuple[str, float]]:
    """The merge before global statistics: every shard's top ``limit`` by its own scores."""
    hits = [hit for part in parts for hit in ENGINE.search(part, query, limit=limit)]
    hits.sort(key=lambda hit: (-hit.score, hit.chunk_id))
    return [(hit.chunk_id, hit.score) for hit in hits[:limit]]


def _ranked(hits: Sequence[Any]) -> list[tuple[str, float, int]]:
    return [(hit.chunk_id, hit.score, hit.rank) for hit in hits]


texts = st.lists(st.lists(st.sampled_from(WORDS), min_size=0, max_size=30).map(" ".join),
                 min_size=1, max_size=60)
queries = st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(WORDS).flatmap(
    lambda first: st.sampled_from(WORDS).map(lambda second: f'"{first} {second}"'))),
    min_size=1, max_size=5).map(" ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=texts, data=st.data(), query=queries, limit=st.integers(1, 40),
       shards=st.integers(2, 3), filtered=st.booleans())
def test_shards_rank_and_score_as_one_index(texts: list[str], data: st.DataObject, query: str,
                                            limit: int, shards: int, filtered: bool) -> None:
    shard_of = data.draw(st.lists(st.integers(0, shards - 1), min_size=len(texts), max_size=len(texts)))
    options: dict[str, Any] = {}
    if filtered:
        options = {"max_seq": data.draw(st.integers(0, len(texts))),
                   "session_ids": data.draw(st.sets(st.sampled_from(["s0", "s1", "s2"]), min_size=1)),
                   "exclude_ids": data.draw(st.sets(st.sampled_from([f"c{i:04d}" for i in range(len(texts))])))}
    with tempfile.TemporaryDirectory() as tmp:
        one, parts = _text_indexes(Path(tmp), _chunks(texts), shard_of, shards)
        expected = _ranked(ENGINE.search(one, query, limit=limit, **options))
        assert _ranked(ENGINE.search_shards(parts, query, limit=limit, **options)) == expected


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=texts, data=st.data(), query=queries, limit=st.integers(1, 40))
def test_whoosh_shards_rank_and_score_as_one_index(texts: list[str], data: st.DataObject, query: str,
                                                   limit: int) -> None:
    whoosh = WhooshEngine()
    shard_of = data.draw(st.lists(st.integers(0, 1), min_size=len(texts), max_size=len(texts)))
    with tempfile.TemporaryDirectory() as tmp:
        one, parts = _text_indexes(Path(tmp), _chunks(texts), shard_of, 2, whoosh)
        expected = _ranked(whoosh.search(one, query, limit=limit, max_seq=len(texts) - 2))
        assert _ranked(whoosh.search_shards(parts, query, limit=limit, max_seq=len(texts) - 2)) == expected


def test_the_local_merge_differs_and_the_global_one_does_not(tmp_path: Path) -> None:
    """A corpus where each shard's own statistics reorder the top list, and where a chunk
    outside one shard's local top ``limit`` belongs in the global one: the test above would
    fail with the merge by local scores."""
    rng = random.Random(7)
    chunks = _chunks([" ".join(rng.choice(WORDS[: rng.randint(2, 7)]) for _ in range(rng.randint(1, 25)))
                      for _ in range(300)])
    # Shard 0 holds most of the "kafka" chunks (a low local idf), shard 1 few.
    shard_of = [0 if "kafka" in chunk["text"] and rng.random() < 0.8 else 1 for chunk in chunks]
    one, parts = _text_indexes(tmp_path, chunks, shard_of, 2)
    differing = 0
    for query in ("kafka refund", "kafka deploy retry", '"kafka broker" timeout', "broker cache"):
        for limit in (1, 3, 10):
            expected = [(hit.chunk_id, hit.score) for hit in ENGINE.search(one, query, limit=limit)]
            assert [(hit.chunk_id, hit.score) for hit in ENGINE.search_shards(parts, query, limit=limit)] \
                == expected
            differing += [chunk_id for chunk_id, _ in _local_merge(parts, query, limit)] \
                != [chunk_id for chunk_id, _ in expected]
    assert differing


@settings(max_examples=40, deadline=None)
@given(texts=texts, data=st.data(), query=queries)
def test_global_scores_lie_within_the_bounds_times_the_local_ones(
        texts: list[str], data: st.DataObject, query: str) -> None:
    """The depth and explanation bounds are sound: every matching chunk of a shard scores,
    under the global statistics, between ``low`` and ``high`` times its local score."""
    shard_of = data.draw(st.lists(st.integers(0, 1), min_size=len(texts), max_size=len(texts)))
    with tempfile.TemporaryDirectory() as tmp:
        one, parts = _text_indexes(Path(tmp), _chunks(texts), shard_of, 2)
        clauses = parse_query(query, ENGINE.analyze)
        global_scores = {hit.chunk_id: hit.score for hit in ENGINE.search(one, query, limit=len(texts))}
        query_clauses = [(term,) for term in clauses.terms] + list(clauses.phrases)
        terms = {term for clause in query_clauses for term in clause}
        stats = [field_stats(part, "text") for part in parts]
        local_freqs = [{term: _doc_freq(part, term) for term in terms} for part in parts]
        total = stats[0] + stats[1]
        model = global_bm25.Bm25Model(query_clauses, {t: sum(f[t] for f in local_freqs) for t in terms},
                                      total)
        for part, part_stats, freqs in zip(parts, stats, local_freqs, strict=True):
            low, high = global_bm25.ratio_bounds(model, query_clauses, freqs, part_stats)
            for hit in ENGINE.search(part, query, limit=len(texts)):
                assert low * hit.score <= global_scores[hit.chunk_id] <= high * hit.score


def _doc_freq(directory: Path, term: str) -> int:
    return int(ENGINE._open(directory).searcher().doc_freq("text", term))


def test_field_stats_are_the_ones_tantivy_scores_with(tmp_path: Path) -> None:
    """The segment files are read as tantivy reads them (this fails loudly if an upgrade
    changes their layout): N and avgdl equal the ones an explanation shows, over several
    segments and with deleted documents (counted until a merge, as tantivy counts them)."""
    rng = random.Random(3)
    chunks = _chunks([" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40))) for _ in range(120)])
    directory = tmp_path / "index"
    ENGINE.create(directory)
    for start in range(0, 120, 40):
        ENGINE.add(directory, chunks[start:start + 40])
    ENGINE.add(directory, chunks[:7])  # upserts: 7 deleted documents stay counted
    stats = field_stats(directory, "text")
    assert stats.max_docs == 127
    index = ENGINE._open(directory)
    searcher = index.searcher()
    query = Query.term_query(index.schema, "text", "deploy")
    _, address = searcher.search(query, limit=1).hits[0]
    shown = _constants(orjson.loads(query.explain(searcher, address).to_json()))
    assert shown["N"] == stats.max_docs
    assert np.float32(shown["avgdl"]) == stats.average_length
    assert stats.total_tokens == sum(len(ENGINE.analyze(chunk["text"])) for chunk in chunks + chunks[:7])


def _constants(node: dict[str, Any]) -> dict[str, float]:
    found = {str(node.get("description", "")).split(",")[0]: float(node["value"])}
    for detail in node.get("details", ()):
        found.update(_constants(detail))
    return found


def test_tool_results_over_shards_are_one_index_results(tmp_path: Path) -> None:
    rng = random.Random(11)
    records = [make_toolresult(seq, f"s{seq % 4}", " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))),
                               tool_name=rng.choice(["Bash", "Read"]))
               for seq in range(1, 200)]
    writer = ToolResultsWriter()
    writer.write(tmp_path / "one", None, records)
    parts = []
    for shard in range(2):  # an uneven split: two fifths and three fifths
        writer.write(tmp_path / f"shard-{shard}", None,
                     [r for r in records if ((r["seq"] * 7919) % 5 < 2) == (shard == 0)])
        parts.append(ToolResultsReader(tmp_path / f"shard-{shard}"))
    one = ToolResultsReader(tmp_path / "one")
    for query in ("kafka refund", '"deploy retry" cache', "timeout", "数 据"):
        for options in ({}, {"max_seq": 120, "session_ids": ["s1", "s2"]}, {"tool_names": ["Read"]}):
            for limit in (1, 5, 25):
                expected = [(row["id"], row["score"], row["rank"]) for row in one.search(query, limit=limit, **options)]
                got = [(row["id"], row["score"], row["rank"]) for row in search_shards(parts, query, limit=limit, **options)]
                assert got == expected, (query, options, limit)
