"""Sink shards (issue 18): N sink processes per index kind, each owning the derived topics'
partitions ``p % N == I``, each with its own generation lines and manifest offsets.

Unit tests drive :mod:`sinks.shards` and the shard layout of :class:`GenerationStore`
directly; the pipeline tests run real ``usl worker`` / ``usl sink --shard I/N`` processes
against the session's broker and compare what two shards hold with what one sink holds.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deploy.testing import Stack
from sinks.exceptions import GenerationError, SinkError
from sinks.generations import GenerationStore, Manifest
from sinks.kinds import make_writer
from sinks.rebuild import rebuild
from sinks.runner import SinkRunner, index_root
from sinks.shards import Shard, fold_shards, parse_shard
from sinks.testing import (
    assert_no_duplicates,
    assert_watermarks_monotone,
    expected_keys,
    index_keys,
    wait_for_a_write,
    wait_for_raw_watermarks,
    wait_for_watermarks,
    watermark_history,
)
from sinks.watermarks import read_watermarks
from streams.settings import Settings
from streams.testing import append_events, interleave, l1_seq, session_events

SHARDS = ("shard-0-of-2", "shard-1-of-2")
KINDS = ("text", "vector", "structured", "analytics", "toolresults")


# -- pure parts --------------------------------------------------------------------------------


def test_parse_shard() -> None:
    assert parse_shard("1/3") == Shard(1, 3)
    assert parse_shard(" 0 / 2 ") == Shard(0, 2)
    assert parse_shard("") is None and parse_shard(None) is None
    assert parse_shard("0/1") is None  # one shard is the unsharded layout
    for bad in ("2/2", "1", "a/b", "-1/2", "0/0"):
        with pytest.raises(SinkError):
            parse_shard(bad)
    assert Shard(1, 2).name == "shard-1-of-2"
    assert Shard.from_name("shard-1-of-2") == Shard(1, 2)


@given(st.integers(1, 8), st.lists(st.integers(0, 63), max_size=40))
def test_shards_partition_the_partitions(count: int, partitions: list[int]) -> None:
    """Every partition belongs to exactly one shard of a set."""
    owned = [Shard(i, count).partitions(partitions) for i in range(count)]
    assert sorted(p for part in owned for p in part) == sorted(partitions)


def _record(through: int, generation: int = 1, shard: str | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"logId": "default", "kind": "text", "line": "live",
                              "generationId": generation, "builtThroughSeq": through}
    if shard is not None:
        record["shard"] = shard
    return record


@given(st.lists(st.integers(0, 10_000), min_size=2, max_size=5))
def test_folded_watermark_is_the_minimum_over_the_shards(throughs: list[int]) -> None:
    count = len(throughs)
    table = {("default", f"text/shard-{i}-of-{count}"): _record(t, generation=i + 1, shard=f"shard-{i}-of-{count}")
             for i, t in enumerate(throughs)}
    folded = fold_shards(table)[("default", "text")]
    assert folded["builtThroughSeq"] == min(throughs)
    assert folded["generationId"] == throughs.index(min(throughs)) + 1  # the slowest shard's
    assert sorted(folded["shards"]) == [f"shard-{i}-of-{count}" for i in range(count)]
    # A set with a shard missing is not an index yet.
    del table[("default", f"text/shard-{count - 1}-of-{count}")]
    assert ("default", "text") not in fold_shards(table)


def test_fold_keeps_the_unsharded_index_until_the_shards_catch_up() -> None:
    table = {("default", "text"): _record(50), ("default", "vector"): _record(7),
             ("default", "text/shard-0-of-2"): _record(60, shard="shard-0-of-2"),
             ("default", "text/shard-1-of-2"): _record(40, shard="shard-1-of-2")}
    folded = fold_shards(table)
    assert folded[("default", "text")] == _record(50)  # the shards' min (40) is behind
    assert folded[("default", "vector")] == _record(7)  # unsharded records pass unchanged
    table[("default", "text/shard-1-of-2")] = _record(55, shard="shard-1-of-2")
    assert fold_shards(table)[("default", "text")]["builtThroughSeq"] == 55
    assert "shards" in fold_shards(table)[("default", "text")]


def test_shard_layout_sits_below_the_kind_and_is_never_a_line(tmp_path: Path) -> None:
    manifest = Manifest(kind="text", log_id="default", line="live", generation_id=0, built_through_seq=3,
                        schema_version="1", asp_version="1", chunker={}, embedding=None,
                        redaction_policy_hash="p")
    for name in (None, *SHARDS):
        store = GenerationStore(tmp_path, "default", "text", shard=name)
        staging = store.begin()
        (staging / "data.bin").write_bytes(b"x")
        store.commit(staging, manifest)
    unsharded = GenerationStore(tmp_path, "default", "text")
    assert unsharded.line_dir == tmp_path / "default" / "text" / "live"  # the layout of old
    assert unsharded.lines() == ["live"]
    shard = GenerationStore(tmp_path, "default", "text", shard="shard-1-of-2")
    assert shard.generation_dir(1) == tmp_path / "default" / "text" / "shard-1-of-2" / "live" / "gen-00000001"
    assert shard.current() is not None and shard.lines() == ["live"]
    with pytest.raises(GenerationError):
        GenerationStore(tmp_path, "default", "text", "shard-0-of-2")  # not a line name
    with pytest.raises(GenerationError):
        GenerationStore(tmp_path, "default", "text", shard="../x")


def test_a_shard_without_partitions_refuses_to_start(make_settings: Callable[..., Settings]) -> None:
    """Shard 5 of 6 over 4 partitions would never publish (its set would never be read)."""
    settings = make_settings(stream_partitions=4)
    Stack(settings)  # creates the topics
    runner = SinkRunner(settings, settings.bootstrap_servers or "", make_writer("text", settings),
                        shard=Shard(5, 6))
    with pytest.raises(SinkError, match="none of them p % 6 == 5"):
        runner.run(until_caught_up=True)


# -- the pipeline ------------------------------------------------------------------------------


def _events(prefix: str, sessions: int, seed: int) -> list[dict[str, Any]]:
    return interleave(*[session_events(f"{prefix}-{i:02d}", turns=3, seed=seed + i)
                        for i in range(sessions)], seed=seed)


def _start_shard(stack: Stack, index: int, kinds: str = ",".join(KINDS)) -> None:
    stack.start(f"shard-{index}", "sink", "--kind", kinds, "--shard", f"{index}/2")


def _merged(settings: Settings) -> dict[str, dict[str, list[Any]]]:
    """What the two shards hold together, kind → table → keys (duplicates kept)."""
    merged: dict[str, dict[str, list[Any]]] = {}
    for shard in SHARDS:
        for kind, tables in index_keys(settings, shard=shard).items():
            for table, keys in tables.items():
                merged.setdefault(kind, {}).setdefault(table, []).extend(keys)
    return merged


def _shard_watermarks(settings: Settings) -> dict[str, dict[str, dict[str, Any]]]:
    """kind → shard → the last watermark it published."""
    last: dict[str, dict[str, dict[str, Any]]] = {}
    for key, records in watermark_history(settings).items():
        _log, kind, *shard = key.split("/")
        if shard:
            last.setdefault(kind, {})[shard[0]] = records[-1]
    return last


@pytest.mark.slow
def test_two_shards_hold_what_one_sink_holds(make_settings: Callable[..., Settings]) -> None:
    """Two shard processes per kind and one unsharded sink over the same derived topics: the
    shards hold disjoint parts whose union is exactly the one sink's index, every shard
    resumed only its own partitions, and the watermark readers see is the shards' minimum."""
    settings = make_settings(stream_partitions=4, embedder="hash:64", sink_batch_size=16)
    stack = Stack(settings)
    try:
        stack.worker()
        stack.sinks()
        _start_shard(stack, 0)
        _start_shard(stack, 1)
        head = append_events(settings, _events("shard", 10, seed=5))
        wait_for_raw_watermarks(settings, head, [f"default/{kind}{suffix}" for kind in KINDS
                                                 for suffix in ("", *(f"/{shard}" for shard in SHARDS))])
        for name in ("sinks", "shard-0", "shard-1"):
            stack.kill(name)
        folded = read_watermarks(settings.bootstrap_servers or "", settings)
        single = index_keys(settings)
        merged = _merged(settings)
        assert_no_duplicates(merged)
        assert set(merged) == set(KINDS)
        for kind, tables in single.items():
            for table, keys in tables.items():
                assert sorted(merged[kind][table], key=repr) == sorted(keys, key=repr), (kind, table)
        for shard in SHARDS:  # each shard holds a real part of the chunks
            assert index_keys(settings, shard=shard)["text"]["chunks"], shard
        shards = _shard_watermarks(settings)
        for kind in KINDS:
            assert sorted(shards[kind]) == list(SHARDS), kind
            lowest = min(int(w["builtThroughSeq"]) for w in shards[kind].values())
            # Both the unsharded index and the shards reached the head: the fold prefers the
            # larger shard count on a tie, and its record carries the shards' minimum.
            assert sorted(folded[("default", kind)]["shards"]) == list(SHARDS), kind
            assert int(folded[("default", kind)]["builtThroughSeq"]) == lowest >= head
            for shard_name, watermark in shards[kind].items():
                store = GenerationStore(index_root(settings), "default", kind, shard=shard_name)
                manifest = store.current()
                assert manifest is not None and manifest.generation_id == watermark["generationId"]
                owner = Shard.from_name(shard_name)
                for topic, offsets in manifest.source_offsets.items():
                    assert all(owner.owns(p) for p in offsets), (kind, shard_name, topic, offsets)
    finally:
        stack.close()


@pytest.mark.slow
def test_kill_9_of_one_shard_mid_ingest_loses_and_duplicates_nothing(
        make_settings: Callable[..., Settings]) -> None:
    """Shard 1 is SIGKILLed four times while events arrive (after 0.5-2.5 s, then aimed at the
    middle of a write) and started again (as a move to another machine would start it): both shards together then hold every chunk/record of
    the derived topics exactly once, each shard's watermarks never went backwards, and the
    folded watermark is the minimum of the two shards'."""
    settings = make_settings(stream_partitions=4, embedder="hash:64", sink_batch_size=6,
                             sink_batch_seconds=0.2)
    rng = random.Random(18)
    events = _events("kill", 12, seed=11)
    kills = 4
    size = -(-len(events) // kills)
    parts = [events[i:i + size] for i in range(0, len(events), size)]
    stack = Stack(settings)
    try:
        stack.worker()
        _start_shard(stack, 0)
        for part in parts:
            _start_shard(stack, 1)
            appender = threading.Thread(target=append_events, args=(settings, part))
            appender.start()
            time.sleep(rng.uniform(0.5, 2.5))
            wait_for_a_write([index_root(settings) / "default" / kind / "shard-1-of-2" / "live" for kind in KINDS],
                             timeout=5.0)
            stack.kill("shard-1")
            appender.join(timeout=60)
            assert_no_duplicates(index_keys(settings, shard="shard-1-of-2"))
        _start_shard(stack, 1)
        head = l1_seq(settings)
        wait_for_watermarks(settings, head, KINDS, timeout=240)
        stack.kill("shard-0")
        stack.kill("shard-1")
        folded = read_watermarks(settings.bootstrap_servers or "", settings)
        merged = _merged(settings)
        assert_no_duplicates(merged)
        want = expected_keys(settings)
        assert want["chunks"]
        for kind in ("text", "vector", "structured", "analytics"):
            assert set(merged[kind]["chunks"]) == want["chunks"], kind
        assert set(merged["structured"]["sessions"]) == want["events"]
        for table in ("events", "tool_calls", "tool_results"):
            assert set(merged["analytics"][table]) == want[table], table
        assert set(merged["toolresults"]["results"]) == want["toolresults"]
        assert_watermarks_monotone(watermark_history(settings))
        shards = _shard_watermarks(settings)
        for kind in KINDS:
            lowest = min(int(w["builtThroughSeq"]) for w in shards[kind].values())
            assert folded[("default", kind)]["builtThroughSeq"] == lowest >= head, kind
    finally:
        stack.close()


@pytest.mark.slow
def test_a_shard_rebuilt_from_l1_holds_what_it_held_and_goes_on(make_settings: Callable[..., Settings]) -> None:
    """``usl rebuild KIND --shard 1/2`` replays L1 into a new line of shard 1 only: it holds the
    very records the live shard held (the derived records' partitions are computed as the
    producers computed them), and the restarted shard goes on from it: after more events both
    shards together hold every record exactly once."""
    settings = make_settings(stream_partitions=4, embedder="hash:64", sink_batch_size=16)
    kinds = ("text", "structured", "toolresults")
    stack = Stack(settings)
    try:
        stack.worker()
        for index in range(2):
            _start_shard(stack, index, ",".join(kinds))
        wait_for_watermarks(settings, append_events(settings, _events("rb", 8, seed=21)), kinds, timeout=240)
        stack.kill("shard-1")
        before = index_keys(settings, shard="shard-1-of-2")
        for kind in kinds:
            manifest = rebuild(settings, settings.bootstrap_servers or "", kind, shard=Shard(1, 2))
            assert manifest.line == "rebuild-1"
            assert all(Shard(1, 2).owns(p) for parts in manifest.source_offsets.values() for p in parts)
        after = index_keys(settings, shard="shard-1-of-2")
        assert_no_duplicates(after)
        assert before["text"]["chunks"]
        for kind, tables in before.items():
            for table, keys in tables.items():
                assert sorted(after[kind][table], key=repr) == sorted(keys, key=repr), (kind, table)
        _start_shard(stack, 1, ",".join(kinds))
        head = append_events(settings, _events("rb-more", 6, seed=31))
        wait_for_watermarks(settings, head, kinds, timeout=240)
        stack.kill("shard-0")
        stack.kill("shard-1")
        merged = _merged(settings)
        assert_no_duplicates(merged)
        want = expected_keys(settings)
        assert set(merged["text"]["chunks"]) == want["chunks"]
        assert set(merged["structured"]["chunks"]) == want["chunks"]
        assert set(merged["structured"]["sessions"]) == want["events"]
        assert set(merged["toolresults"]["results"]) == want["toolresults"]
    finally:
        stack.close()
