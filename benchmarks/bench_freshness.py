"""Freshness benchmark (issue 16): where the lag from an L1 append to ``indexed`` goes, per
index kind, and the end-to-end rate through every index, for one setting of the sink and
worker windows.

One run: a real ``usl worker`` and one ``usl sink`` process for every kind (as ``usl up``
runs them); after a warm-up, steady appends at each ``--rates`` for ``--seconds`` (whole
sessions, 4 open at a time: ``benchmarks.measure.steady``), then ``--events`` events at once
until every index covers the head. Per rate it prints, per kind, the lag p50/p99 from append
to the first watermark covering the event, and ``chunks`` (the worker's part: the progress
markers' floor); per kind, the sink's commits per second and the mean write and commit time of
a generation (``usl_sink_batch_seconds``, ``usl_sink_commit_seconds`` from the sink's
``/metrics``); and how long a watermark took from its commit to this process
(``committedAt`` to seen, the publish and follow hop). Asserts nothing.

An A/B of a setting goes through ``--set`` (``deploy.testing.settings_env`` pins the sinks'
settings from the Settings object); the worker's flush tick is not pinned, so it goes through
``--worker-env``. The issue-16 comparison (docs/benchmarks.md, "5. Freshness")::

    KAFKA_BOOTSTRAP_SERVERS=<broker> .venv/bin/python -W ignore -m benchmarks.bench_freshness \
        --label before --set sink_commit_gap_seconds=1.0 --worker-env USL_FLUSH_TICK_SECONDS=1.0
    KAFKA_BOOTSTRAP_SERVERS=<broker> .venv/bin/python -W ignore -m benchmarks.bench_freshness --label after
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from benchmarks.measure import KINDS, LOG, Coverage, Tail, append, steady
from benchmarks.workload import WorkloadConfig, generate
from deploy.jars import free_port
from deploy.testing import Stack
from streams.settings import Settings
from streams.topics import Topics

__all__ = ["main"]

_METRIC = re.compile(r'(usl_sink_commit_seconds_(?:sum|count)|usl_sink_batch_seconds_sum)\{kind="(\w+)"\} (\S+)')


def _scrape(ports: list[int]) -> dict[str, float]:
    found = {}
    for port in ports:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        found.update({f"{m.group(1)}/{m.group(2)}": float(m.group(3)) for m in map(_METRIC.match, text.splitlines()) if m})
    return found


def _commits(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, dict[str, float]]:
    """Per kind: commits per second, mean write and commit ms of a generation, over a phase."""
    def grew(name: str, kind: str) -> float:
        return after.get(f"{name}/{kind}", 0.0) - before.get(f"{name}/{kind}", 0.0)

    rows = {}
    for kind in KINDS:
        count = grew("usl_sink_commit_seconds_count", kind)
        rows[kind] = {"commitsPerSecond": round(count / seconds, 2),
                      "writeMs": round(1000 * grew("usl_sink_batch_seconds_sum", kind) / max(count, 1), 1),
                      "commitMs": round(1000 * grew("usl_sink_commit_seconds_sum", kind) / max(count, 1), 1)}
    return rows


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="run")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a Settings field for every process, e.g. sink_commit_gap_seconds=1.0")
    parser.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for the worker only, e.g. USL_FLUSH_TICK_SECONDS=1.0")
    parser.add_argument("--rates", default="100,300", help="steady append rates, events/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each steady phase")
    parser.add_argument("--events", type=int, default=15_000, help="events of the end-to-end phase")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--sink-processes", choices=("one", "per-kind"), default="one",
                        help="all sinks in one `usl sink` process (as `usl up` runs them), or one process per kind")
    args = parser.parse_args(argv)
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        parser.error("needs KAFKA_BOOTSTRAP_SERVERS (a broker of your own)")
    overrides = {name: _value(value) for name, value in (item.split("=", 1) for item in args.set)}
    worker_env = dict(item.split("=", 1) for item in args.worker_env)
    home = Path(tempfile.mkdtemp(prefix=f"usl-bench-freshness-{args.label}-"))
    settings = Settings.from_env({}, home=home, bootstrap_servers=bootstrap,
                                 topic_prefix=f"fresh{uuid.uuid4().hex[:8]}.", **overrides)
    stack = Stack(settings)
    coverage = Coverage(settings.stream_partitions)
    published: list[float] = []  # seconds from a watermark's commit to this process seeing it

    def on_watermark(partition: int, key: bytes | None, body: dict[str, Any], seen: float) -> None:
        if key and key.startswith(f"{LOG}/".encode()):
            published.append(time.time() - float(body.get("committedAt", 0.0)))
        coverage.on_watermark(partition, key, body, seen)

    result: dict[str, Any] = {"label": args.label, "settings": overrides, "workerEnv": worker_env}
    tails: list[Tail] = []
    try:
        stack.worker(env=worker_env)
        groups = [",".join(KINDS)] if args.sink_processes == "one" else list(KINDS)
        ports = [free_port() for _ in groups]
        for number, (kinds, port) in enumerate(zip(groups, ports, strict=True)):
            stack.sinks(kinds, name=f"sinks-{number}", env={"USL_METRICS_PORT": str(port)})
        topics = Topics.from_settings(settings)
        tails.append(Tail(bootstrap, topics.watermarks, on_watermark))
        tails.append(Tail(bootstrap, topics.chunks, coverage.on_chunk_record))
        _, head = append(settings, generate(sessions=2, config=WorkloadConfig(seed=1001, concurrent=2)))
        coverage.wait((*KINDS, "chunks"), head, timeout=300)
        for rate in (float(value) for value in args.rates.split(",")):
            before, began, mark = _scrape(ports), time.monotonic(), len(published)
            row = steady(settings, coverage, rate, args.seconds, 2000 + int(rate))
            row["sinks"] = _commits(before, _scrape(ports), time.monotonic() - began)
            hops = sorted(published[mark:])
            row["publishToSeenMs"] = {"p50": round(1000 * hops[len(hops) // 2], 1),
                                      "p99": round(1000 * hops[int(len(hops) * 0.99)], 1)}
            result[f"steady{rate:g}"] = row
            print(args.label, f"{rate:g}", json.dumps(row), flush=True)
        events = list(generate(events=args.events, seed=7000))
        before, began = _scrape(ports), time.monotonic()
        count, head = append(settings, events)
        done = coverage.wait((*KINDS, "chunks"), head, timeout=1800)
        finished = max(done[kind] for kind in KINDS)
        result["endToEnd"] = {"events": count, "eventsPerSecond": round(count / (finished - began), 1),
                              "perIndex": {name: round(count / (at - began), 1) for name, at in done.items()},
                              "sinks": _commits(before, _scrape(ports), finished - began)}
        print(args.label, "e2e", json.dumps(result["endToEnd"]), flush=True)
    finally:
        for tail in tails:
            tail.close()
        stack.close()
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
