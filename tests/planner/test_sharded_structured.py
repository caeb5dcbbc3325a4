"""The planner over sharded structured and analytics indexes (issue 18): each table of a sharded
index is read as the union of its shards' tables, so every answer equals one index's.

One pipeline (real ``usl worker`` and ``usl sink`` processes, the session's broker) builds
every kind unsharded and, beside it, structured and analytics as two shards. Two planners over
the same text, vector and tool-results indexes differ only in the structured and analytics
generations they read: the two shards' or the one index's. SQL, SessionQL (tables and lineage),
export, access lists and searches in every mode, with filters the structured index answers,
must be identical; and reading one shard alone must not be.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from deploy.testing import Stack
from planner.acl import can_read, parse_principal
from planner.engine import Planner
from planner.export import export
from planner.sessionql_service import sessionql_request
from planner.sql import SqlAttachment
from sinks.shards import fold_shards
from sinks.structured import StructuredReader
from sinks.testing import wait_for_raw_watermarks, watermark_history
from streams.settings import Settings
from streams.testing import append_events, interleave, session_events

pytestmark = pytest.mark.kafka

SHARDED = ("structured", "analytics")
SHARDS = ("shard-0-of-2", "shard-1-of-2")
SQL = (
    "SELECT sessionId, eventCount, toolCallCount, errorCount, runCount, turnCount, firstSeq, lastSeq "
    "FROM sessions ORDER BY sessionId",
    "SELECT toolName, count(*) AS calls, sum(outputBytes) AS bytes FROM tool_calls GROUP BY toolName ORDER BY toolName",
    "SELECT sessionId, turnId, eventCount FROM turns ORDER BY sessionId, turnId",
    "SELECT type, count(*) AS n FROM events GROUP BY type ORDER BY type",
    "SELECT chunkId, sessionId, minSeq, maxSeq, tokenCount FROM chunks ORDER BY chunkId",
)
SESSIONQL = (
    "FROM sessions ORDER BY sessionId",
    "FROM events GROUP BY sessionId ORDER BY sessionId",
    "FROM turns ORDER BY sessionId, turnId",
)
QUERIES = ("deploy refund", "kafka broker timeout", "permission denied", "retry")


class Pipeline:
    """Two planners over one pipeline's indexes: ``sharded`` reads structured and analytics from
    the two shards, ``single`` from the unsharded sink; both read the unsharded text, vector and
    tool results."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        bootstrap = settings.bootstrap_servers or ""
        self.principal = parse_principal(settings.acl_default)
        self.other = parse_principal("tenant:default/user:bob")
        last = {key: records[-1] for key, records in watermark_history(settings).items()
                if key.startswith("default/")}
        unsharded = {key.split("/")[1]: record for key, record in last.items() if key.count("/") == 1}
        shard_records = {("default", key.split("/", 1)[1]): record for key, record in last.items()
                         if key.count("/") == 2 and key.split("/")[1] in SHARDED}
        folded = {kind: record for (_log, kind), record in fold_shards(shard_records).items()}
        self.folded = folded
        self.sharded = Planner(settings, bootstrap)
        self.single = Planner(settings, bootstrap)
        self.sharded.watermarks = lambda log_id: {**unsharded, **folded}  # type: ignore[method-assign]
        self.single.watermarks = lambda log_id: dict(unsharded)  # type: ignore[method-assign]

    def close(self) -> None:
        self.sharded.close()
        self.single.close()


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    settings = Settings.from_env(
        {}, home=tmp_path_factory.mktemp("sharded-structured"), topic_prefix=f"t{uuid.uuid4().hex[:10]}.",
        bootstrap_servers=kafka_bootstrap, l1_partitions=4, stream_partitions=4, sink_batch_seconds=0.3,
        sink_batch_size=16, embedder="hash:64")
    stack = Stack(settings)
    try:
        stack.worker()
        stack.sinks()
        for index in range(2):
            stack.start(f"shard-{index}", "sink", "--kind", ",".join(SHARDED), "--shard", f"{index}/2")
        bob = {"tenant": "default", "read": ["user:bob"]}
        events = interleave(*[session_events(f"shq-{i:02d}", turns=3, seed=60 + i, acl=bob if i % 4 == 1 else None,
                                             long_output_words=200 if i % 3 == 0 else 0)
                              for i in range(12)], seed=6)
        for event in events:  # lineage: a run per session, odd sessions children of the one before
            number = int(event["sessionId"].rsplit("-", 1)[1])
            event["runId"] = f"run-{event['sessionId']}"
            if number % 2 and event["type"] == "session.started":
                event["parentSessionId"] = f"shq-{number - 1:02d}"
        head = append_events(settings, events)
        keys = [f"default/{kind}" for kind in ("text", "vector", "structured", "analytics", "toolresults")]
        keys += [f"default/{kind}/{shard}" for kind in SHARDED for shard in SHARDS]
        wait_for_raw_watermarks(settings, head, keys)
    finally:
        stack.close()
    built = Pipeline(settings)
    yield built
    built.close()


def _answer(body: dict[str, Any]) -> tuple[Any, ...]:
    return body["columns"], body["rows"], body["asOfSeq"]


def test_the_sharded_planner_pins_both_shards(pipeline: Pipeline) -> None:
    for kind in SHARDED:
        assert sorted(pipeline.folded[kind]["shards"]) == list(SHARDS), kind
    response = pipeline.sharded.search({"query": "deploy refund", "k": 5, "explain": True}, pipeline.principal)
    generations = response["explain"]["generations"]
    assert sorted(generations["structured"]["shards"]) == list(SHARDS)
    answer = pipeline.sharded.sql({"query": "SELECT count(*) FROM events"}, pipeline.principal)
    assert sorted(answer["generations"]["analytics"]["shards"]) == list(SHARDS)


def test_sql_and_sessionql_over_shards_are_the_one_index_answers(pipeline: Pipeline) -> None:
    for principal in (pipeline.principal, pipeline.other):
        for query in SQL:
            sharded = pipeline.sharded.sql({"query": query}, principal)
            single = pipeline.single.sql({"query": query}, principal)
            assert _answer(sharded) == _answer(single), query
        for query in SESSIONQL:
            sharded = sessionql_request(pipeline.sharded, {"query": query}, principal)
            single = sessionql_request(pipeline.single, {"query": query}, principal)
            assert _answer(sharded) == _answer(single), query
    rows = pipeline.single.sql({"query": SQL[0]}, pipeline.principal)["rows"]
    assert len(rows) >= 6, "the default principal reads too few sessions: the test compares little"


def test_lineage_over_shards_is_the_one_index_lineage(pipeline: Pipeline) -> None:
    """Run and parent-session edges; a child session's edge to its parent crosses shards."""
    found = 0
    for principal in (pipeline.principal, pipeline.other):
        for i in range(12):
            for direction in ("ANCESTORS", "DESCENDANTS"):
                query = f'LINEAGE {direction} OF "shq-{i:02d}"'
                sharded = sessionql_request(pipeline.sharded, {"query": query}, principal)
                single = sessionql_request(pipeline.single, {"query": query}, principal)
                assert _answer(sharded) == _answer(single), query
                found += len(single["rows"])
    assert found


def test_access_lists_and_decisions_over_shards_are_the_one_index_ones(pipeline: Pipeline) -> None:
    lists = []
    for planner in (pipeline.sharded, pipeline.single):
        with planner.snapshot("default") as snapshot:
            lists.append(snapshot.access_lists(snapshot.pin("structured")))
    sharded, single = lists
    assert sharded == single and len(single) == 12
    for principal in (pipeline.principal, pipeline.other):
        readable = {s for s, acl in single.items() if can_read(principal, acl)}
        assert {s for s, acl in sharded.items() if can_read(principal, acl)} == readable
    assert {s for s, acl in single.items() if can_read(pipeline.other, acl)}, "no session for bob"


def test_export_over_shards_is_the_one_index_export(pipeline: Pipeline) -> None:
    for params in ({"what": "turns"}, {"what": "sessions"}, {"what": "hits", "query": "deploy refund"}):
        sharded = export(pipeline.sharded, pipeline.principal, params)
        single = export(pipeline.single, pipeline.principal, params)
        assert sharded.as_of_seq == single.as_of_seq
        single_rows = list(single.rows)
        assert list(sharded.rows) == single_rows and single_rows, params


@pytest.mark.parametrize("mode", ["text", "vector", "hybrid"])
def test_searches_over_sharded_structured_are_the_one_index_searches(pipeline: Pipeline, mode: str) -> None:
    """The structured index decides candidates' sessions, trimming, filters and access: the
    ranked lists (ids, scores, evidence) over the shards equal those over one index."""
    filters: list[dict[str, Any] | None] = [
        None, {"role": ["assistant"]}, {"sessionId": ["shq-00", "shq-03", "shq-05"]}, {"toolName": ["bash"]}]
    compared = 0
    for query in QUERIES:
        for chosen in filters:
            request: dict[str, Any] = {"query": query, "mode": mode, "k": 20, "freshness": "indexed"}
            if chosen:
                request["filters"] = chosen
            for principal in (pipeline.principal, pipeline.other):
                sharded = pipeline.sharded.search(request, principal)
                single = pipeline.single.search(request, principal)
                assert sharded["asOfSeq"] == single["asOfSeq"]
                assert sharded["results"] == single["results"], (mode, query, chosen)
                compared += len(single["results"])
    assert compared


def test_one_shard_alone_is_not_the_index(pipeline: Pipeline) -> None:
    """Every shard holds a real part: a reader missing one shard gives other answers, so the
    comparisons above fail if the union leaves a shard out."""
    with pipeline.sharded.snapshot("default") as snapshot:
        structured, analytics = snapshot.pin("structured"), snapshot.pin("analytics")
        assert structured is not None and analytics is not None
        acls = snapshot.access_lists(structured)
        whole_sessions = StructuredReader(structured.directories).sessions()
        count_sql = "SELECT count(*) FROM events"
        whole = SqlAttachment(analytics.directories).query(
            count_sql, as_of_seq=analytics.built_through_seq, principal=pipeline.principal, session_acls=acls)
        assert len(structured.parts) == len(analytics.parts) == 2
        for part, analytics_part in zip(structured.parts, analytics.parts, strict=True):
            alone = StructuredReader(part.directory).sessions()
            assert alone and len(alone) < len(whole_sessions)
            one = SqlAttachment(analytics_part.directory).query(
                count_sql, as_of_seq=analytics.built_through_seq, principal=pipeline.principal, session_acls=acls)
            assert 0 < one["rows"][0][0] < whole["rows"][0][0]
