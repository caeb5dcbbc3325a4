"""The scaled-out index tier end to end (issue 18, "Show"): two sink shards per shardable index
kind and two stateless planner replicas over a real S3 server, with a shard and a replica
killed by SIGKILL under steady ingest.

The sinks run as ``usl up`` runs them with ``USL_SINK_SHARDS=2`` (:func:`deploy.stack.sink_children`),
each publishing to the object store; the replicas are ``usl serve`` with
``USL_PLANNER_SOURCE=object-store``, each on a ``USL_HOME`` of its own (nothing shared with the
sinks or with each other). Afterwards: every appended event is in L1 once, every chunk is in
exactly one shard of each kind, the replicas answer alike (a cursor of one continues on the
other), and their whole result lists (hits, order, scores) are those of one unsharded index
read by one planner, built by a plain ``usl sink`` from the same derived topics into a fresh home.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from deploy.stack import sink_children
from deploy.testing import Stack, free_port, same_generations, wait_for_api
from planner.acl import parse_principal
from planner.engine import Planner
from reliability.load import Ingest, l1_event_counts
from sinks.runner import index_root
from sinks.shards import parse_shard
from sinks.testing import (
    assert_no_duplicates,
    assert_watermarks_monotone,
    expected_keys,
    index_keys,
    wait_for_a_write,
    wait_for_raw_watermarks,
    watermark_history,
)
from streams.settings import Settings
from streams.testing import l1_seq

if TYPE_CHECKING:
    from deploy.s3proxy.server import S3ProxyInfo

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]

SEARCHED = ("text", "vector", "structured")  # what a search reads
QUERIES = ("deploy refund", "kafka broker timeout", "parquet schema cursor", "retry",
           "permission denied", "watermark generation manifest")
MODES = ("text", "vector", "hybrid")
PAGE = 100  # the largest page; a query's whole list is read page by page


def post(api: str, body: Mapping[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(f"{api}/v1/search", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            answer: dict[str, Any] = json.load(response)
            return answer
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{api} answered {exc.code}: {exc.read().decode(errors='replace')}") from None


def settled(api: str, body: Mapping[str, Any], head: int, timeout: float = 240.0) -> dict[str, Any]:
    """``api``'s indexed answer once its asOfSeq reached ``head`` (everything mirrored)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = post(api, {"freshness": "indexed", **body})
            if answer["asOfSeq"] >= head:
                return answer
            seen = f"asOfSeq {answer['asOfSeq']}"
        except AssertionError as exc:  # 503 index_unavailable until the first generations are mirrored
            assert "index_unavailable" in str(exc), exc
            seen = str(exc)
        assert time.monotonic() < deadline, f"{api} did not reach asOfSeq {head}: {seen}"
        time.sleep(0.5)


def whole_list(first: dict[str, Any], ask: Callable[[dict[str, Any]], dict[str, Any]],
               body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every result of a query: ``first`` (its first page) and the pages its cursors lead to."""
    results, page = list(first["results"]), first
    while page["cursor"]:
        page = ask({"freshness": "indexed", **body, "cursor": page["cursor"]})
        assert page["asOfSeq"] == first["asOfSeq"]
        results += page["results"]
    return results


def plain(value: Any) -> Any:
    """``value`` as it reads after a JSON round trip (what an API client compares)."""
    return json.loads(json.dumps(value))


class HomeWatermarks:
    """The watermarks one home's sinks published (told apart by their manifest paths), for a
    planner that must read that home's indexes and no other's."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = str(index_root(settings))

    def snapshot(self) -> dict[tuple[str, str], dict[str, Any]]:
        table: dict[tuple[str, str], dict[str, Any]] = {}
        for key, records in watermark_history(self.settings).items():
            log_id, kind = key.split("/", 1)
            own = [r for r in records if str(r.get("manifest", "")).startswith(self.root)]
            if own and "/" not in kind:
                table[(log_id, kind)] = own[-1]
        return table

    def wait_for_change(self, timeout: float) -> None:
        time.sleep(timeout)


def shard_layout(children: Mapping[str, list[str]]) -> dict[str, list[str | None]]:
    """kind → the shards (``shard-I-of-N``; None: unsharded) the sink processes write."""
    layout: dict[str, list[str | None]] = {}
    for args in children.values():
        kinds = args[args.index("--kind") + 1].split(",") if "--kind" in args else [
            "text", "vector", "structured", "analytics", "toolresults"]
        shard = parse_shard(args[args.index("--shard") + 1]) if "--shard" in args else None
        for kind in kinds:
            layout.setdefault(kind, []).append(None if shard is None else shard.name)
    return layout


def merged_keys(settings: Settings, layout: Mapping[str, list[str | None]]) -> dict[str, dict[str, list[Any]]]:
    """Per kind and table, every key the shards of the kind hold together (duplicates kept)."""
    merged: dict[str, dict[str, list[Any]]] = {}
    for kind, shards in layout.items():
        for shard in shards:
            for table, keys in index_keys(settings, shard=shard).get(kind, {}).items():
                merged.setdefault(kind, {}).setdefault(table, []).extend(keys)
    return merged


def test_two_shards_and_two_replicas_survive_kill_9_and_answer_as_one_index(
    make_settings: Callable[..., Settings], s3proxy: S3ProxyInfo, tmp_path: Path,
) -> None:
    settings = make_settings(
        object_store=f"s3://usl-test/scale{uuid.uuid4().hex[:8]}", s3_endpoint=s3proxy.endpoint,
        s3_access_key=s3proxy.access_key, s3_secret_key=s3proxy.secret_key, sink_shards=2,
        stream_partitions=4, embedder="hash:64", sink_batch_size=16)
    cursor_key = uuid.uuid4().hex * 2
    store_env = {"USL_OBJECT_STORE": settings.object_store or "", "USL_S3_ENDPOINT": settings.s3_endpoint or "",
                 "USL_S3_ACCESS_KEY": settings.s3_access_key or "",
                 "USL_S3_SECRET_KEY": settings.s3_secret_key or ""}
    children = sink_children(settings)
    layout = shard_layout(children)
    for kind in ("text", "vector"):
        assert len(layout[kind]) == 2, layout
    shard_name, shard_args = next((name, args) for name, args in children.items() if "--shard" in args)
    killed_shard = parse_shard(shard_args[shard_args.index("--shard") + 1])
    assert killed_shard is not None
    replicas = {f"replica-{i}": (free_port(), tmp_path / f"replica-{i}-home") for i in range(2)}
    apis = {name: f"http://127.0.0.1:{port}" for name, (port, _home) in replicas.items()}

    def start_replica(stack: Stack, name: str) -> None:
        port, home = replicas[name]
        stack.start(name, "serve", "--port", str(port), env={
            **store_env, "USL_HOME": str(home), "USL_PLANNER_SOURCE": "object-store",
            "USL_PLANNER_CACHE_BYTES": str(64 * 1024 * 1024), "USL_CURSOR_KEY": cursor_key})

    stack = Stack(settings)
    ingest = Ingest(settings, seed=18, sessions_per_batch=3, pause_seconds=0.5, max_batches=14)
    try:
        stack.worker()
        for name, args in children.items():
            stack.start(name, *args, env=store_env)
        for name in replicas:
            start_replica(stack, name)
        ingest.start()
        deadline = time.monotonic() + 600
        # Mid-run: kill -9 of one shard inside a write and of one replica; both start again
        # (the shard as a move to another node would start it, the replica on its own home).
        while ingest.batches < 4:
            assert ingest.is_alive() and time.monotonic() < deadline, "the ingest stalled"
            time.sleep(0.2)
        lines = [index_root(settings) / "default" / kind / killed_shard.name / "live"
                 for kind in shard_args[shard_args.index("--kind") + 1].split(",")]
        wait_for_a_write(lines, timeout=30.0)
        stack.kill(shard_name)
        stack.kill("replica-1")
        while ingest.batches < 8:
            assert ingest.is_alive() and time.monotonic() < deadline, "the ingest stalled"
            time.sleep(0.2)
        stack.start(shard_name, *shard_args, env=store_env)
        start_replica(stack, "replica-1")
        while ingest.batches < 14:
            assert ingest.is_alive() and time.monotonic() < deadline, "the ingest stalled"
            time.sleep(0.2)
        ingest.stop()
        ingest.join(timeout=60)
        head = l1_seq(settings)
        keys = [f"default/{kind}" + (f"/{shard}" if shard else "") for kind, shards in layout.items()
                for shard in shards]
        wait_for_raw_watermarks(settings, head, keys, timeout=300)
        for name in apis:
            wait_for_api(apis[name], stack, name=name)

        # Nothing lost or duplicated: L1 holds every appended event once, and the shards of
        # each kind together hold every chunk of the derived topics once.
        counts = l1_event_counts(settings)
        assert set(counts) == set(ingest.appended) and max(counts.values()) == 1
        merged = merged_keys(settings, layout)
        assert_no_duplicates(merged)
        want = expected_keys(settings)
        assert want["chunks"]
        for kind in ("text", "vector", "structured", "analytics"):
            assert set(merged[kind]["chunks"]) == want["chunks"], kind
        for shard in layout["text"]:
            assert index_keys(settings, shard=shard)["text"]["chunks"], shard  # each holds a real part
        assert_watermarks_monotone(watermark_history(settings))

        # Both replicas answer alike at the head, in every mode.
        answers: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for mode in MODES:
            for query in QUERIES:
                body = {"query": query, "mode": mode, "k": PAGE}
                first, second = same_generations(settled, list(apis.values()), body, head)
                assert first["asOfSeq"] == second["asOfSeq"] == head, (mode, query)
                assert first["results"] == second["results"], (mode, query)
                answers[(mode, query)] = whole_list(first, lambda b: post(apis["replica-1"], b), body)
        assert all(answers[("text", q)] for q in QUERIES)
        for name in apis:  # each replica read every shard of the sharded kinds
            explained = post(apis[name], {"query": QUERIES[0], "mode": "hybrid", "explain": True})
            for kind in ("text", "vector"):
                assert sorted(explained["explain"]["generations"][kind]["shards"]) == \
                    sorted(str(shard) for shard in layout[kind]), (name, kind)

        # A cursor of replica 0 continues on replica 1 exactly where page 1 ended.
        for mode in MODES:
            request = {"query": "deploy refund kafka", "mode": mode, "freshness": "indexed"}
            whole = post(apis["replica-0"], {**request, "k": 12})["results"]
            page = post(apis["replica-0"], {**request, "k": 4})
            assert page["cursor"], mode
            pages = [page["results"]]
            for name in ("replica-1", "replica-0", "replica-1"):
                if not page["cursor"]:
                    break
                page = post(apis[name], {**request, "k": 4, "cursor": page["cursor"]})
                assert page["asOfSeq"] == head, mode
                pages.append(page["results"])
            assert [hit for part in pages for hit in part][:12] == whole, mode

        # One unsharded index, one planner: a plain `usl sink` builds what a search reads from the
        # same derived topics into a fresh home (no object store), read by one Planner there.
        single = Settings.from_env({}, home=tmp_path / "single-home", topic_prefix=settings.topic_prefix,
                                   bootstrap_servers=settings.bootstrap_servers,
                                   l1_partitions=settings.l1_partitions,
                                   stream_partitions=settings.stream_partitions, sink_batch_seconds=0.3,
                                   sink_batch_size=64, embedder=settings.embedder)
        reference_stack = Stack(single)
        reference_stack.sinks(",".join(SEARCHED), name="single-sink")
        try:
            watch = HomeWatermarks(single)
            deadline = time.monotonic() + 300
            while not all(int(watch.snapshot().get(("default", kind), {}).get("builtThroughSeq", -1)) >= head
                          for kind in SEARCHED):
                assert time.monotonic() < deadline, watch.snapshot()
                time.sleep(0.5)
        finally:
            reference_stack.close()
        planner = Planner(single, single.bootstrap_servers or "", follower=cast(Any, watch))
        principal = parse_principal(single.acl_default)
        try:
            for (mode, query), answer in answers.items():
                body = {"query": query, "mode": mode, "k": PAGE, "freshness": "indexed"}
                first = plain(planner.search(body, principal))
                assert first["asOfSeq"] == head, (mode, query)
                one = whole_list(first, lambda b: plain(planner.search(b, principal)), body)
                # Hits, order and scores: text through the shards' summed BM25 statistics,
                # vector by an exact merge, hybrid as RRF over those.
                assert answer == one, (mode, query)
        finally:
            planner.close()
    finally:
        ingest.stop()
        stack.close()
