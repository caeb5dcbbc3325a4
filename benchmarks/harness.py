"""Benchmark harness: one command that measures the pipeline on the local stack and writes
``BENCHMARKS.md`` plus PNG plots (SPEC §11).

Every figure is measured in the same run as its reference and reported next to it as a ratio:

1. ingest: one workload (``benchmarks.workload``) appended to L1; end-to-end indexing rate
   (events/s from the first append until every index's watermark reaches the last seq, real
   ``usl worker`` and ``usl sink`` processes) next to the raw rate at which kafka-python (the
   client library of the pipeline) reads the same L1 topic; the worker's MB of L1 per CPU
   second; the same with a second worker; ``usl ingest`` of the same records next to a plain
   kafka-python producer;
2. stages, in this process on the same events, CPU time of one core: redaction MB/s and
   chunking events/s;
3. sinks, in this process on the chunks of the same events: chunks/s of each sink's writer as
   ``SinkRunner`` drives it; tantivy next to whoosh on the same chunks; embeddings/s;
4. freshness: steady appends at several rates; per index, the time from an event's append until
   a watermark of that index covers its seq (p50/p99), next to the same lag of the worker's
   progress markers (the chunks topic, before any sink);
5. rebuild of ``text`` from offset 0, next to the live text indexing rate of step 1;
6. peak memory (VmHWM) of the worker, each sink process, a planner process and the broker JVM;
7. queries: a corpus built in steps (e.g. 10k, 30k, 100k chunks); at each step p50/p99 of text,
   vector and hybrid searches under ``indexed`` and ``latest``, vector recall@10 against exact
   search, and the bytes of each index — the growth plot. 1M chunks: ``--scale large``, or
   ``--include-large`` with the JSON (or the printed output) of ``bench_query.py --large``;
8. sink shards: text+vector chunks/s of one ``usl sink`` against two shards over the same chunks
   (``benchmarks.bench_shards``);
9. segment cache: a planner replica reading from the object store (a local S3Proxy), query
   latency with a cold cache (a fresh cache directory) against a warm one, and the bytes fetched
   (``benchmarks.scaleout``; without S3Proxy the section says why).

This module is the driver: the measurements live in ``benchmarks.measure``, the plots in
``benchmarks.plot`` and BENCHMARKS.md in ``benchmarks.report``. No figure is a pass/fail
threshold. Usage::

    .venv/bin/python -m benchmarks.harness [--scale tiny|standard|large] [--out-dir .]
        [--include-large results.json]

``KAFKA_BOOTSTRAP_SERVERS`` selects a broker; otherwise a local one is started and stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.measure import (
    ROOT,
    SCALES,
    bench_broker,
    ingest_and_freshness,
    load_large,
    machine,
    query_growth,
    raw_read,
    rebuild_rate,
    say,
    sink_rates,
    stage_rates,
    vm_hwm,
)
from benchmarks.plot import plots
from benchmarks.report import project, report
from benchmarks.scaleout import SCALEOUT, segment_cache, shard_rates
from benchmarks.workload import generate
from streams.settings import Settings

__all__ = ["SCALES", "load_large", "main", "run"]


# -- driver ----------------------------------------------------------------------------------


def run(*, scale_name: str, out_dir: Path, seed: int = 1, include_large: Path | None = None,
        command: str = "") -> dict[str, Any]:
    """The whole benchmark; writes ``out_dir/BENCHMARKS.md``, plots and ``results.json``."""
    from streams.topics import ensure_topics

    scale = SCALES[scale_name]
    logging.getLogger("kafka").setLevel(logging.WARNING)  # its INFO lines would bury the progress
    large = load_large(include_large) if include_large else None
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="usl-bench-harness-"))
    bootstrap, broker_settings, broker_pid = bench_broker(work)
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    settings = Settings.from_env({}, home=work / "ingest", bootstrap_servers=bootstrap, topic_prefix=f"{prefix}i.",
                                 l1_partitions=2, stream_partitions=2, embedder=scale.embedder)
    results: dict[str, Any] = {"scale": scale_name, "seed": seed, "machine": machine(bootstrap, broker_pid,
                                                                                      settings.kafka_version),
                               "freshnessSeconds": scale.fresh_seconds, "tailEvents": scale.tail_events,
                               "queriesPerRow": scale.queries, "recallQueries": scale.recall_queries,
                               "settings": {"l1Partitions": settings.l1_partitions,
                                            "streamPartitions": settings.stream_partitions,
                                            "sinkBatchSize": settings.sink_batch_size,
                                            "sinkBatchSeconds": settings.sink_batch_seconds}}
    try:
        ensure_topics(bootstrap, settings)
        results["machine"]["diskBytes"] = shutil.disk_usage(work).total  # where the indexes are written
        events = list(generate(events=scale.events, seed=seed))
        say(f"workload: {len(events)} events")
        results["ingest"] = ingest_and_freshness(settings, scale, events, seed)
        results["rawRead"] = raw_read(settings)
        say("usl ingest vs a plain kafka-python producer ...")
        from benchmarks.bench_pipeline import ingest_vs_producer

        results["append"] = ingest_vs_producer(bootstrap, events[:10_000], work / "append", prefix=f"{prefix}a")
        say("stage rates ...")
        results["stages"] = stage_rates(settings, events)
        say("sink writers ...")
        sink_events = events if scale.sink_events == scale.events else \
            list(generate(events=scale.sink_events, seed=seed))
        results["sinks"] = sink_rates(dataclasses.replace(settings, home=work / "sinks"), sink_events,
                                      scale.whoosh_chunks, work / "sink-indexes")
        results["sinks"]["events"] = len(sink_events)
        say("rebuild text from offset 0 ...")
        results["rebuild"] = rebuild_rate(settings, results["ingest"]["totalEvents"])
        query_settings = Settings.from_env({}, home=work / "query", bootstrap_servers=bootstrap,
                                           topic_prefix=f"{prefix}q.", l1_partitions=1, stream_partitions=1,
                                           embedder=scale.embedder, cursor_key="bench-cursor-key-0123456789")
        results["queries"] = query_growth(query_settings, scale, scale.query_sizes)
        results["projection"] = project(results["queries"]["steps"], results["machine"])
        results["large"] = large
        scaleout = SCALEOUT[scale_name]
        say("sink shards: one sink vs two shards ...")
        results["shards"] = shard_rates(bootstrap, f"{prefix}s.", work / "shards", scaleout.shard_sessions,
                                        scaleout.shard_runs, scale.embedder)
        results["segmentCache"] = segment_cache(bootstrap, f"{prefix}c.", work / "segment-cache",
                                                scaleout.cache_chunks, scaleout.cache_queries, scale.tail_events,
                                                scale.embedder)
        memory = {name: value for name, value in results["ingest"]["memory"].items()}
        memory["planner (process, largest corpus)"] = results["queries"]["plannerPeakBytes"]
        memory["broker JVM"] = vm_hwm(broker_pid) if broker_pid else None
        memory["harness (in-process measurements)"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        results["memory"] = memory
    finally:
        if broker_settings is not None:
            from deploy.kafka.broker import stop_broker

            stop_broker(broker_settings)
        else:
            _delete_topics(bootstrap, prefix)
        shutil.rmtree(work, ignore_errors=True)
    results["machine"]["loadEnd"] = os.getloadavg()
    results["seconds"] = time.monotonic() - started
    plot_dir = out_dir / "benchmarks" / "plots"
    results["plots"] = plots(results, plot_dir)
    (plot_dir / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (out_dir / "BENCHMARKS.md").write_text(report(results, command, "benchmarks/plots/"))
    say(f"wrote {out_dir / 'BENCHMARKS.md'} and {len(results['plots'])} plots in {results['seconds'] / 60:.1f} min")
    return results


def _delete_topics(bootstrap: str, prefix: str) -> None:
    """The run's topics on a shared broker (their names start with the run's prefix)."""
    from kafka.admin import KafkaAdminClient

    import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            names = [name for name in admin.list_topics() if name.startswith(prefix)]
            if names:
                admin.delete_topics(names)
        finally:
            admin.close()
    except Exception as error:  # leftover topics are harmless; say so rather than fail the run
        say(f"could not delete the run's topics ({error})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="standard",
                        help="tiny: seconds (the test); standard: ~30 min on 2 cores; large: 1M-chunk queries too")
    parser.add_argument("--out-dir", type=Path, default=ROOT, help="BENCHMARKS.md goes here, plots in benchmarks/plots/")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--include-large", type=Path,
                        help="JSON written by `bench_query.py --large --out FILE` (or its printed output)")
    args = parser.parse_args(argv)
    if args.include_large and not args.include_large.is_file():
        parser.error(f"--include-large: no such file {args.include_large}")
    given = " ".join(argv if argv is not None else sys.argv[1:])
    if os.environ.get("USL_BENCH_VIA_MAKE"):
        command = f'make bench BENCH_ARGS="{given}"' if given else "make bench"
    else:
        command = f"python -m benchmarks.harness {given}"
    try:
        run(scale_name=args.scale, out_dir=args.out_dir, seed=args.seed, include_large=args.include_large,
            command=command.strip())
    except (TimeoutError, ValueError, OSError, RuntimeError, subprocess.SubprocessError) as error:
        print(f"benchmark failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
