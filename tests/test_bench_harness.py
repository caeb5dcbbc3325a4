"""The benchmark workload is deterministic and realistic, and the harness runs end to end.

The harness runs at ``--scale tiny`` against the session's broker into a temporary directory:
BENCHMARKS.md and every plot must be written and each section must hold measured numbers.
No wall-clock threshold is asserted anywhere: the figures are whatever this machine gives.
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from benchmarks.bench_query import generate as turns
from benchmarks.bench_query import merge_lag, merge_window
from benchmarks.harness import load_large
from benchmarks.report import cache_section, growth_section, project, shard_section
from benchmarks.workload import WorkloadConfig, generate, main
from streams.asp import validate_event
from streams.chunking import render_event
from streams.redaction import redact_event
from streams.redaction.samples import SEEDED_SECRETS

ROOT = Path(__file__).resolve().parents[1]
PLOTS = ("throughput.png", "freshness.png", "query_latency.png", "growth.png", "memory.png")


def test_same_seed_gives_byte_identical_jsonl(tmp_path: Path) -> None:
    for name in ("a", "b"):
        assert main(["--events", "3000", "--seed", "7", "--out", str(tmp_path / f"{name}.jsonl")]) == 0
    assert main(["--events", "3000", "--seed", "8", "--out", str(tmp_path / "c.jsonl")]) == 0
    first = (tmp_path / "a.jsonl").read_bytes()
    assert first == (tmp_path / "b.jsonl").read_bytes()
    assert first != (tmp_path / "c.jsonl").read_bytes()
    # In a fresh interpreter too (no hash randomisation or global state leaks into the output).
    out = subprocess.run([sys.executable, "-m", "benchmarks.workload", "--events", "3000", "--seed", "7",
                          "--out", "-"], cwd=ROOT, capture_output=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "123"})
    assert out.stdout == first


def test_workload_is_realistic_and_complete() -> None:
    events = list(generate(events=4000, config=WorkloadConfig(seed=3, secret_share=0.05)))
    assert len(events) >= 4000
    assert all(validate_event(dict(e)) == e for e in events[:200])
    types = collections.Counter(e["type"] for e in events)
    for kind in ("session.started", "run.started", "turn.started", "message", "tool.call", "tool.result",
                 "turn.ended", "episode.started", "episode.ended", "session.ended"):
        assert types[kind] > 0, kind
    # Whole sessions: every turn, episode, run and session that starts also ends.
    assert types["turn.started"] == types["turn.ended"]
    assert types["episode.started"] == types["episode.ended"]
    assert types["session.started"] == types["session.ended"]
    # Tool calls carry parameters (paths, commands, URLs); results answer their call.
    calls = {e["eventId"]: e for e in events if e["type"] == "tool.call"}
    params = [e["fields"]["input"] for e in calls.values()]
    assert any("path" in p for p in params) and any("command" in p for p in params)
    assert any("url" in p for p in params)
    results = [e for e in events if e["type"] == "tool.result"]
    assert all(calls[e["parentEventId"]]["fields"]["toolCallId"] == e["fields"]["toolCallId"] for e in results)
    outputs = "\n".join(e["fields"]["output"] for e in results)
    assert "Traceback (most recent call last)" in outputs and " ERROR " in outputs
    # Access lists mixed across principals and tenants.
    acls = {orjson.dumps(e["acl"], option=orjson.OPT_SORT_KEYS) for e in events}
    assert len(acls) >= 4
    # Time order across the interleaved sessions, and more than one session open at a time.
    times = [e["time"] for e in events]
    assert times == sorted(times)
    assert len({e["sessionId"] for e in events[:50]}) > 1
    # A small share of seeded secrets, all of which the redactor removes.
    planted = [e for e in events if any(s in orjson.dumps(e["fields"]).decode() for s in SEEDED_SECRETS)]
    assert 0 < len(planted) < len(events) * 0.05
    for event in planted:
        text = orjson.dumps(redact_event(event).event).decode()
        assert not any(secret in text for secret in SEEDED_SECRETS), event["eventId"]
    assert all(render_event(e) is not None for e in events if e["type"] == "message")


def test_workload_counts_and_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert len({e["sessionId"] for e in generate(sessions=5, seed=1)}) == 5
    assert len(list(generate(events=123, seed=1, exact=True))) == 123
    with pytest.raises(ValueError, match="exactly one"):
        list(generate(seed=1))
    with pytest.raises(SystemExit):
        main(["--events", "-5", "--out", str(tmp_path / "x.jsonl")])
    assert "must be >= 0" in capsys.readouterr().err
    assert main(["--events", "10", "--out", str(tmp_path / "missing" / "x.jsonl")]) == 1
    assert "error:" in capsys.readouterr().err


def test_include_large_reads_json_or_the_printed_table(tmp_path: Path) -> None:
    printed = tmp_path / "large.txt"
    printed.write_text(
        "building 1000000 chunks (2000000 L1 events, 1000 above the indexes) ...\n"
        "mode     freshness      p50      p99     mean  hits/q  tail scan\n"
        "text     indexed       31.0    120.5     40.0    10.0  -\n"
        "vector   indexed       60.0    150.0     70.0    10.0  -\n"
        "hybrid   indexed       90.0    210.0     99.0    10.0  -\n"
        "text     latest        33.0    130.0     41.0    10.0  1999001..2000000\n"
        "vector   latest        61.0    155.0     71.0    10.0  1999001..2000000\n"
        "hybrid   latest        92.0    220.0    100.0    10.0  1999001..2000000\n")
    step = load_large(printed)
    assert step["chunks"] == 1_000_000
    assert step["latency"]["hybrid/latest"] == {"p50": 92.0, "p99": 220.0}
    as_json = tmp_path / "large.json"
    as_json.write_text(json.dumps({"chunks": 5, "latency": step["latency"], "indexBytes": {"text": 9}}))
    assert load_large(as_json)["indexBytes"] == {"text": 9}
    (tmp_path / "junk.txt").write_text("nothing here")
    with pytest.raises(ValueError, match="neither"):
        load_large(tmp_path / "junk.txt")


@pytest.mark.kafka
def test_harness_tiny_writes_report_and_plots(tmp_path: Path, kafka_bootstrap: str) -> None:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    env.pop("USL_BENCH_VIA_MAKE", None)
    run = subprocess.run([sys.executable, "-W", "ignore", "-m", "benchmarks.harness", "--scale", "tiny",
                          "--out-dir", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=540)
    assert run.returncode == 0, run.stderr[-3000:]
    report = (tmp_path / "BENCHMARKS.md").read_text()
    assert "python -m benchmarks.harness --scale tiny" in report
    for plot in PLOTS:
        data = (tmp_path / "benchmarks" / "plots" / plot).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, plot
        assert f"benchmarks/plots/{plot}" in report
    sections = re.split(r"^## ", report, flags=re.M)[1:]
    titles = [section.splitlines()[0] for section in sections]
    assert titles[0] == "Machine" and len(titles) == 12, titles
    assert titles[10].startswith("10. Sink shards") and titles[11].startswith("11. Planner replica"), titles
    for section in sections:
        rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("|---")]
        numbers = [cell for row in rows[1:] for cell in row.split("|") if re.search(r"\d", cell)]
        assert numbers, f"no figures in section {section.splitlines()[0]!r}"
    assert "load average" in report and "Kafka" in report and "CPU" in report

    results = json.loads((tmp_path / "benchmarks" / "plots" / "results.json").read_text())
    ingest = results["ingest"]
    assert ingest["endToEndEventsPerSecond"] > 0 and results["rawRead"]["eventsPerSecond"] > 0
    assert set(ingest["perIndexEventsPerSecond"]) >= {"text", "vector", "structured", "analytics", "toolresults"}
    assert all(row["lag"]["text"]["p50"] >= 0 for row in ingest["freshness"])
    assert results["stages"]["redactionMbPerCoreSecond"] > 0 and results["stages"]["chunkingEventsPerCoreSecond"] > 0
    assert {"text", "whoosh", "vector"} <= set(results["sinks"]["sinks"])
    assert results["rebuild"]["eventsPerSecond"] > 0
    for step in results["queries"]["steps"]:
        assert 0 <= step["recall"]["recallAt10"] <= 1
        assert len(step["latency"]) == 6 and all(row["p50"] > 0 for row in step["latency"].values())
        assert step["indexBytes"]["text"] > 0
    assert results["memory"]["worker"] and results["memory"]["planner (process, largest corpus)"]
    # The corpus is built as the sinks build it: vector merges in the background, and the
    # watermark's lag during the largest one, the build phases and the projection reported.
    build = results["queries"]["steps"][-1]["build"]
    assert build["merges"] > 0 and build["mergeSeconds"] > 0 and set(build["writeSeconds"]) == {"text", "vector", "structured"}
    lag = build["largestMerge"]
    assert lag["vectors"] > 0 and lag["stallSeconds"] >= 0 and lag["lagSeconds"] >= 0
    assert "stood still across the merge" in report and "Building the corpus" in report
    # The same at the live sink's commit size, beside a merge shaped as the build's longest: as
    # many vectors in a new graph, or as many rows inserted into the largest segment's graph.
    sink, longest = build["sinkMerge"], build["longestMerge"]
    if longest["graphRows"]:
        assert sink["graphRows"] >= longest["graphRows"]
        assert sink["inserted"] == longest["vectors"] - longest["graphRows"]
    else:
        assert sink["vectors"] == longest["vectors"] and sink["graphRows"] == 0
    assert sink["baseline"]["medianCommitGapSeconds"] > 0
    assert "at the live sink's commit size" in report
    assert all(step["plannerPeakBytes"] > 0 for step in results["queries"]["steps"][-2:])
    measures = {row["measure"]: row for row in results["projection"]["rows"]}
    assert {"vector index bytes", "planner peak memory", "whole build seconds", "hybrid p50 ms (indexed)"} <= set(measures)
    assert measures["vector index bytes"]["projected"] > measures["vector index bytes"]["value"]
    assert "Projection to 10 000 000 chunks" in report and "One node stops being enough" in report
    shards = results["shards"]
    assert shards["chunks"] > 0 and [row["shards"] for row in shards["runs"]] == [1, 2]
    assert shards["twoShardsVsOne"] == shards["twoShardsChunksPerSecond"] / shards["oneSinkChunksPerSecond"]
    cache = results["segmentCache"]
    assert "error" not in cache, cache  # the test session's S3Proxy prerequisites (Java, Maven) hold here
    assert cache["generations"] == 3 and cache["fetchedBytes"] > 0 and cache["fetchedBytesWarm"] == 0
    for rows in (cache["cold"], cache["warm"]):
        assert set(rows) == {"text", "vector", "hybrid"} and all(row["p50"] > 0 for row in rows.values())


SHARDS = {"events": 972, "chunks": 150, "streamPartitions": 2,
          "runs": [{"run": 1, "shards": 1, "seconds": 6.0, "chunksPerSecond": 25.0},
                   {"run": 1, "shards": 2, "seconds": 5.0, "chunksPerSecond": 30.0},
                   {"run": 2, "shards": 1, "seconds": 7.5, "chunksPerSecond": 20.0},
                   {"run": 2, "shards": 2, "seconds": 3.0, "chunksPerSecond": 50.0}],
          "oneSinkChunksPerSecond": 25.0, "twoShardsChunksPerSecond": 50.0, "twoShardsVsOne": 2.0}
CACHE = {"chunks": 500, "generations": 3, "fetchSeconds": 0.7, "fetchedBytes": 2_214_231, "fetchedBytesWarm": 0,
         "queries": 10,
         "cold": {"text": {"p50": 13.5, "p99": 313.9, "first": 313.9}, "vector": {"p50": 70.0, "p99": 90.0, "first": 80.0},
                  "hybrid": {"p50": 80.0, "p99": 140.0, "first": 140.0}},
         "warm": {"text": {"p50": 9.0, "p99": 52.0, "first": 40.0}, "vector": {"p50": 56.0, "p99": 80.0, "first": 80.0},
                  "hybrid": {"p50": 64.0, "p99": 70.0, "first": 64.0}}}


def test_shard_and_cache_sections_render_every_figure() -> None:
    shards = "\n".join(shard_section(SHARDS))
    assert shards.startswith("## 10. Sink shards")
    assert "150 chunks of 972 synthetic events" in shards and "2 partitions" in shards
    assert "| 2 | 2 shards | 3.0 | 50 | |" in shards and "| 1 | one sink | 6.0 | 25 | |" in shards
    assert "**2.00x**" in shards  # best of each: 50 / 25
    cache = "\n".join(cache_section(CACHE))
    assert cache.startswith("## 11. Planner replica over the object store")
    assert "fetched 2.2 MB in 0.7 s" in cache and "3 generations" in cache and "(same replica, same queries; 0.0 MB" in cache
    assert "| text | 13.5 / 313.9 | 313.9 | 9.0 / 52.0 | 1.50x | 6.04x |" in cache
    assert "| hybrid | 80.0 / 140.0 | 140.0 | 64.0 / 70.0 | 1.25x | 2.00x |" in cache
    assert "| vector |" in cache


def test_cache_section_says_why_it_was_not_measured() -> None:
    lines = cache_section({"error": "S3Proxy could not start: Java 17+ is needed to run the local S3Proxy"})
    assert lines[0].startswith("## 11.")
    assert "Not measured in this run: S3Proxy could not start: Java 17+ is needed" in "\n".join(lines)
    assert not any(line.startswith("| ") for line in lines)


def test_merge_lag_is_the_watermark_during_the_merge_window() -> None:
    """Commits every 10 s and appends every second; a merge from 25 s until published at 47 s."""
    appends = [(float(t), 100 * t) for t in range(0, 80)]
    commits = [(float(t), 100 * (t - 5)) for t in range(10, 80, 10)]
    merge = {"vectors": 640, "seconds": 20.0, "started": 25.0, "published": 47.0}
    lag = merge_lag(commits, appends, merge)
    assert lag["stallSeconds"] == 10.0 and lag["medianCommitGapSeconds"] == 10.0
    assert lag["commitsDuring"] == 2  # at 30 and 40 s
    # Before the commit at 50 s the watermark is at seq 3500 (the 40 s commit): seq 3501 was
    # appended at 36 s and waited until the window's end at 47 s; before 40 s, 2501 since 26 s.
    assert lag["lagSeconds"] == 14.0 and lag["lagSeqs"] == 1500
    # A merge that holds commits: none from 20 s until 70 s.
    held = [c for c in commits if not 20 < c[0] < 70]
    assert merge_lag(held, appends, merge)["stallSeconds"] == 50.0


SINK_MERGE = {"vectors": 200_000, "mergeSeconds": 100.0, "windowSeconds": 101.0, "commitsDuring": 150.0,
              "stallSeconds": 1.8, "lagSeconds": 2.2, "lagSeqs": 880.0, "medianCommitGapSeconds": 0.6,
              "flushMedianSeconds": 0.12, "flushMaxSeconds": 1.9, "publishMaxSeconds": 0.03, "rate": 200.0,
              "batchSize": 512, "batchSeconds": 1.0,
              "baseline": {"windowSeconds": 10.0, "stallSeconds": 1.0, "lagSeconds": 1.2, "lagSeqs": 470.0,
                           "medianCommitGapSeconds": 0.67, "flushMedianSeconds": 0.13, "flushMaxSeconds": 0.24}}
OLD_LAG = {"vectors": 200_000, "mergeSeconds": 61.8, "windowSeconds": 64.2, "commitsDuring": 8.0, "stallSeconds": 9.1,
           "lagSeconds": 7.7, "lagSeqs": 20_000.0, "medianCommitGapSeconds": 7.2}


def test_the_merge_window_at_the_sinks_commit_size_replaces_the_bench_batch_table() -> None:
    build = {"batch": 10_000, "generateSeconds": 1.0, "appendSeconds": 1.0, "settleSeconds": 0.0, "merges": 3,
             "mergeSeconds": 9.0, "totalSeconds": 30.0, "largestMergeVectors": 200_000, "largestMerge": OLD_LAG,
             "writeSeconds": {"text": 1.0, "vector": 2.0, "structured": 1.0}}
    steps = [{"chunks": 1_000_000, "build": {**build, "sinkMerge": SINK_MERGE}}]
    text = "\n".join(growth_section(steps, {"rows": []}))
    assert "fed 200 new chunks a second" in text and "512 chunks or 1.0 s" in text
    assert "| longest an appended event waited for the vector watermark | **2.20** s | 1.20 s |" in text
    assert "| longest the vector watermark stood still across the merge | 1.80 s | 1.00 s |" in text
    assert "| a flush (median / longest) | 0.12 / 1.90 s | 0.13 / 0.24 s |" in text
    assert "The lag is **under** the issue's 5 s." in text and "9.1" not in text
    # Results written before the window existed still render their table.
    old = "\n".join(growth_section([{"chunks": 1_000_000, "build": build}], {"rows": []}))
    assert "| longest the vector watermark stood still across the merge | **9.1** |" in old


def test_the_merge_window_runs_a_sink_beside_a_merge_and_cleans_up(tmp_path: Path) -> None:
    from sinks.vector_writer import VectorWriter
    from streams.settings import Settings

    settings = Settings.from_env({}, home=tmp_path / "home", embedder="hash:64")
    writer = VectorWriter(settings)
    source = tmp_path / "gen-00000001"
    source.mkdir()
    writer.write(source, None, [chunk for _, chunk in turns(400)])
    figures = merge_window(settings, writer, source, 400, start=10_000, rate=200.0, baseline_seconds=2.0)
    assert figures["vectors"] == 400 and 0 < figures["mergeSeconds"] <= figures["windowSeconds"]
    # A merge of 400 vectors can be published before the sink's first commit, when no appended
    # event has waited yet: the lag may be 0 here (merge_lag's own tests check its arithmetic).
    assert figures["lagSeconds"] >= 0 and figures["flushMedianSeconds"] > 0 and figures["batchSize"] == 512
    assert figures["baseline"]["medianCommitGapSeconds"] > 0 and figures["baseline"]["lagSeconds"] > 0
    assert not writer.background_merges and not (tmp_path / "home" / "merge-window").exists()


def test_projection_follows_the_last_two_steps_and_names_the_first_bound() -> None:
    def step(chunks: int) -> dict:
        scale = chunks / 1000
        return {"chunks": chunks, "indexBytes": {"text": 1000 * chunks, "vector": 4000 * chunks, "structured": 100 * chunks},
                "plannerPeakBytes": 2**28 * scale ** 0.5,
                "build": {"writeSeconds": {"text": scale, "vector": 2 * scale, "structured": scale}, "mergeSeconds": scale,
                          "totalSeconds": 10 * scale ** 1.5},
                "latency": {f"{m}/indexed": {"p50": 5.0} for m in ("text", "vector", "hybrid")}}

    result = project([step(1000), step(10_000), step(100_000)], {"memoryBytes": 2**34, "diskBytes": 5 * 10**11})
    rows = {row["measure"]: row for row in result["rows"]}
    assert rows["vector index bytes"]["exponent"] == pytest.approx(1.0)
    assert rows["vector index bytes"]["projected"] == pytest.approx(4000 * 10**7)
    assert rows["vector build seconds"]["value"] == pytest.approx(300.0)  # writes + background merges
    assert rows["hybrid p50 ms (indexed)"]["exponent"] == pytest.approx(0.0)
    # The bounds: disk at 5e11 / 5100 bytes per chunk = 98M chunks; RAM 2^34 at 2^28 * (x/1000)^0.5
    # = 4.1M chunks; a day at 10 * (x/1000)^1.5 s = 421k chunks: the build is first.
    assert rows["all index bytes"]["reachedAt"] == pytest.approx(5 * 10**11 / 5100)
    assert rows["planner peak memory"]["reachedAt"] == pytest.approx(1000 * 64**2)
    assert result["firstBound"]["measure"] == "whole build seconds"
    assert result["firstBound"]["reachedAt"] == pytest.approx(1000 * 8640 ** (2 / 3))
    text = "\n".join(growth_section([], result))
    assert "One node stops being enough at about **421 059 chunks**: whole build seconds reaches a day" in text


def test_a_nearly_flat_curve_never_reaches_its_bound() -> None:
    # At the tiny scale the build time barely grows between two steps: the power law through
    # them put the day's bound past any float and the harness died with an OverflowError.
    def step(chunks: int, seconds: float) -> dict:
        return {"chunks": chunks, "indexBytes": {"text": chunks, "vector": chunks, "structured": chunks},
                "build": {"writeSeconds": {"text": 1.0, "vector": 1.0, "structured": 1.0}, "mergeSeconds": 0.0,
                          "totalSeconds": seconds},
                "latency": {f"{m}/indexed": {"p50": 5.0} for m in ("text", "vector", "hybrid")}}

    result = project([step(500, 3.0), step(1500, 3.0001)], {"memoryBytes": 2**34, "diskBytes": 5 * 10**11})
    rows = {row["measure"]: row for row in result["rows"]}
    assert rows["whole build seconds"]["reachedAt"] is None
