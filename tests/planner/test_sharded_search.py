"""The planner over sink shards (issue 18): a query over a text, vector or tool-results index
written by two shards reads every shard's pinned generation and answers as one index would.

One pipeline (real ``usl worker`` and ``usl sink`` processes, the session's broker) builds
every kind unsharded and, beside it, text, vector and tool results as two shards. The same planner code
answers twice over the same chunks: once reading the shards (the watermarks readers see fold
to them) and once reading the unsharded indexes. The lists must be equal, scores included:
vector by an exact merge of cosines, text and tool results by BM25 with the shards' summed
statistics (:mod:`sinks.text.global_bm25`, whose property tests over random corpora, queries,
shard assignments and limits are ``tests/sinks/test_global_bm25.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from deploy.testing import Stack
from planner.acl import parse_principal
from planner.engine import Planner
from sinks.testing import wait_for_raw_watermarks, watermark_history
from streams.settings import Settings
from streams.testing import append_events, interleave, session_events

pytestmark = pytest.mark.kafka

SHARDED = ("text", "vector", "toolresults")
SHARDS = ("shard-0-of-2", "shard-1-of-2")
QUERIES = ("deploy refund", "kafka broker timeout", '"permission denied"', "parquet schema cursor",
           "vector faiss chunk manifest", "retry")


class Pipeline:
    """The two planners over one pipeline's indexes: ``sharded`` and ``single``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        bootstrap = settings.bootstrap_servers or ""
        self.principal = parse_principal(settings.acl_default)
        self.tools = parse_principal(f"{settings.acl_default}/scopes:toolresults")
        self.sharded = Planner(settings, bootstrap)
        self.single = Planner(settings, bootstrap)
        history = watermark_history(settings)
        unsharded = {key.split("/")[1]: records[-1] for key, records in history.items()
                     if key.count("/") == 1 and key.startswith("default/")}
        # The unsharded indexes' own watermarks, as a planner sees them when nothing is sharded.
        self.single.watermarks = lambda log_id: dict(unsharded)  # type: ignore[method-assign]

    def close(self) -> None:
        self.sharded.close()
        self.single.close()


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    settings = Settings.from_env(
        {}, home=tmp_path_factory.mktemp("sharded"), topic_prefix=f"t{uuid.uuid4().hex[:10]}.",
        bootstrap_servers=kafka_bootstrap, l1_partitions=4, stream_partitions=4, sink_batch_seconds=0.3,
        sink_batch_size=16, embedder="hash:64")
    stack = Stack(settings)
    try:
        stack.worker()
        stack.sinks()
        for index in range(2):
            stack.start(f"shard-{index}", "sink", "--kind", ",".join(SHARDED), "--shard", f"{index}/2")
        events = interleave(*[session_events(f"sharded-{i:02d}", turns=3, seed=40 + i,
                                             long_output_words=300 if i % 3 == 0 else 0)
                              for i in range(12)], seed=4)
        head = append_events(settings, events)
        keys = [f"default/{kind}" for kind in ("text", "vector", "structured", "analytics", "toolresults")]
        keys += [f"default/{kind}/{shard}" for kind in SHARDED for shard in SHARDS]
        wait_for_raw_watermarks(settings, head, keys)
    finally:
        stack.close()
    built = Pipeline(settings)
    yield built
    built.close()


def _ask(planner: Planner, principal: Any, **request: Any) -> dict[str, Any]:
    return planner.search({"freshness": "indexed", "k": 10, **request}, principal)


def _ranked(response: dict[str, Any]) -> list[tuple[str, float]]:
    return [(hit["chunkId"], hit["score"]["rrf"]) for hit in response["results"]]


def test_the_sharded_planner_reads_every_shard(pipeline: Pipeline) -> None:
    response = _ask(pipeline.sharded, pipeline.tools, query="deploy refund", mode="hybrid", explain=True,
                    toolResults=True)
    generations = response["explain"]["generations"]
    for kind in SHARDED:
        assert sorted(generations[kind]["shards"]) == list(SHARDS), kind
    assert "shards" not in generations["structured"]
    single = _ask(pipeline.single, pipeline.principal, query="deploy refund", mode="hybrid", explain=True)
    assert "shards" not in single["explain"]["generations"]["text"]
    assert response["asOfSeq"] == single["asOfSeq"]


def _listed(response: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(hit["chunkId"], hit["score"]) for hit in response["results"]]


@pytest.mark.parametrize("mode", ["vector", "hybrid", "text"])
def test_two_shards_answer_as_one_index(pipeline: Pipeline, mode: str) -> None:
    """Identical ranked lists, scores included, at 10 and at 50: vector by cosine (a chunk
    lives in one shard), text and hybrid because BM25 uses the statistics of all the shards'
    segments and every shard is read deep enough (the merge by each shard's own BM25 reordered
    6 of these 6 text top-10 lists)."""
    for query in QUERIES:
        for k in (10, 50):
            sharded = _listed(_ask(pipeline.sharded, pipeline.principal, query=query, mode=mode, k=k))
            single = _listed(_ask(pipeline.single, pipeline.principal, query=query, mode=mode, k=k))
            assert single, (mode, query)
            assert sharded == single, (mode, query, k)


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_pages_over_shards_concatenate_to_the_one_shot_list(pipeline: Pipeline, mode: str) -> None:
    """A cursor binds every shard's generation: ten pages of 3 equal one page of 30."""
    request = {"query": "deploy refund kafka", "mode": mode}
    whole = _ranked(_ask(pipeline.sharded, pipeline.principal, k=30, **request))
    pages = [_ask(pipeline.sharded, pipeline.principal, k=3, **request)]
    while pages[-1]["cursor"] and len(pages) < 10:
        pages.append(_ask(pipeline.sharded, pipeline.principal, k=3, cursor=pages[-1]["cursor"], **request))
    assert len(pages) > 1
    assert [hit for page in pages for hit in _ranked(page)] == whole[:3 * len(pages)]


def test_full_tool_results_over_shards_are_the_one_index_results(pipeline: Pipeline) -> None:
    """Full tool results (their own ranked list) from two shards: the one index's list, in its
    order and with its scores (BM25 over both shards' statistics, as for text)."""
    found = 0
    for query in ("permission denied", "timeout", "retry cache"):
        for k in (5, 100):
            request = {"query": query, "mode": "text", "toolResults": True, "k": k}
            sharded = _listed(_ask(pipeline.sharded, pipeline.tools, **request))
            single = _listed(_ask(pipeline.single, pipeline.tools, **request))
            found += sum(chunk_id.startswith("toolresult:") for chunk_id, _ in single)
            assert sharded == single, (query, k)
    assert found, "no full tool result was found: the test reads nothing"


def test_status_shows_the_minimum_and_each_shard() -> None:
    """``usl status`` of a sharded kind: the shards' minimum, each shard's lag, the slowest named."""
    from planner.status import build_status
    from sinks.shards import fold_shards

    def record(through: int, shard: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"logId": "default", "kind": "text", "line": "live", "generationId": through // 10,
                                "builtThroughSeq": through, "committedAt": 1.0}
        return body if shard is None else {**body, "shard": shard}

    table = {("default", f"text/{name}"): record(through, name) for name, through in zip(SHARDS, (90, 70), strict=True)}
    table[("default", "vector")] = record(100)
    report = build_status({"default": 100}, fold_shards(table), {}, now=2.0)
    text = report["logs"]["default"]["indexes"]["text"]
    assert (text["builtThroughSeq"], text["lagSeqs"]) == (70, 30)
    assert text["verdict"].endswith("(slowest shard: shard-1-of-2)")
    assert {name: shard["lagSeqs"] for name, shard in text["shards"].items()} == {"shard-0-of-2": 10, "shard-1-of-2": 30}
    assert "shards" not in report["logs"]["default"]["indexes"]["vector"]
