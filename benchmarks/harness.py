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
   ``--include-large`` with the JSON (or the printed output) of ``bench_query.py --large``.

No figure is a pass/fail threshold. Usage::

    .venv/bin/python -m benchmarks.harness [--scale tiny|standard|large] [--out-dir .]
        [--include-large results.json]

``KAFKA_BOOTSTRAP_SERVERS`` selects a broker; otherwise a local one is started and stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import multiprocessing
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from kafka import KafkaConsumer, TopicPartition

from benchmarks.workload import WorkloadConfig, generate
from sinks.kinds import ALL_KINDS
from streams.settings import Settings

__all__ = ["SCALES", "Scale", "main", "run"]

LOG = "default"
KINDS = ALL_KINDS
ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Scale:
    events: int                      # workload of the ingest and stage measurements
    sink_events: int                 # workload of the in-process sink writers (same seed)
    whoosh_chunks: int               # whoosh indexes only this many chunks (tantivy too, for the ratio)
    fresh_rates: tuple[int, ...]     # steady append rates of the freshness phase, events/s
    fresh_seconds: float
    query_sizes: tuple[int, ...]     # corpus sizes (chunks) of the query and growth measurements
    queries: int                     # per mode x freshness x size
    recall_queries: int
    tail_events: int                 # L1 events above the indexes (what `latest` scans)
    embedder: str
    sink_per_process: bool           # one `usl sink` process per kind (peak memory per sink)


SCALES = {
    "tiny": Scale(events=400, sink_events=400, whoosh_chunks=30, fresh_rates=(40,), fresh_seconds=4, query_sizes=(500, 1500),
                  queries=10, recall_queries=20, tail_events=50, embedder="hash:256", sink_per_process=False),
    "standard": Scale(events=20_000, sink_events=60_000, whoosh_chunks=1_000, fresh_rates=(100, 500, 1000, 2000), fresh_seconds=30,
                      query_sizes=(10_000, 30_000, 100_000), queries=100, recall_queries=200,
                      tail_events=1_000, embedder="wordllama", sink_per_process=True),
    "large": Scale(events=20_000, sink_events=60_000, whoosh_chunks=1_000, fresh_rates=(100, 500, 1000, 2000), fresh_seconds=30,
                   query_sizes=(10_000, 30_000, 100_000, 300_000, 1_000_000), queries=100, recall_queries=200,
                   tail_events=1_000, embedder="wordllama", sink_per_process=True),
}


def say(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] if ordered else float("nan")


# -- machine and processes -------------------------------------------------------------------


def machine(bootstrap: str, broker_pid: int | None, kafka_version: str) -> dict[str, Any]:
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
        cpu = match.group(1).strip() if match else platform.processor() or "unknown"
    memory = 0
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        match = re.search(r"^MemTotal:\s*(\d+) kB", meminfo.read_text(), re.M)
        memory = int(match.group(1)) * 1024 if match else 0
    version = kafka_version
    if broker_pid:
        cmdline = Path(f"/proc/{broker_pid}/cmdline")
        found = re.search(r"kafka[-_](\d+\.\d+\.\d+)", cmdline.read_text(errors="replace")) if cmdline.exists() else None
        version = found.group(1) if found else version
    return {"cpu": cpu, "cores": os.cpu_count(), "memoryBytes": memory, "python": platform.python_version(),
            "platform": platform.platform(), "kafka": version, "bootstrap": bootstrap,
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "loadStart": os.getloadavg()}


def vm_hwm(pid: int) -> int | None:
    """Peak resident set (VmHWM) of a running process, bytes."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s*(\d+) kB", text, re.M)
    return int(match.group(1)) * 1024 if match else None


def tree_hwm(pid: int) -> int | None:
    """VmHWM of ``pid`` or, if larger, of its biggest child (``usl`` may exec a child)."""
    best = vm_hwm(pid)
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        for child in children.read_text().split():
            value = vm_hwm(int(child))
            if value and (best is None or value > best):
                best = value
    return best


def pid_listening(port: int) -> int | None:
    """The pid of the process listening on TCP ``port`` (same user only), if any."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(proc.name)
        except OSError:
            continue
    return None


# -- topic followers -------------------------------------------------------------------------


class Tail:
    """Follows a topic from its beginning on a thread, handing (partition, key, body, seen)."""

    def __init__(self, bootstrap: str, topic: str, on_record: Callable[[int, bytes | None, dict[str, Any], float], None]) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                      isolation_level="read_committed", client_id="usl-bench-tail")
        parts = None
        deadline = time.monotonic() + 30
        while not parts and time.monotonic() < deadline:
            parts = self.consumer.partitions_for_topic(topic)
            time.sleep(0.1)
        tps = [TopicPartition(topic, p) for p in sorted(parts or [])]
        self.consumer.assign(tps)
        self.consumer.seek_to_beginning(*tps)
        self.on_record = on_record
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self.consumer.poll(timeout_ms=50, max_records=5000)
            seen = time.monotonic()
            for tp, records in batch.items():
                for record in records:
                    if record.value is not None:
                        self.on_record(tp.partition, record.key, orjson.loads(record.value), seen)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.consumer.close()


class Coverage:
    """Per index (and ``chunks``: the worker's progress markers, floor over partitions), every
    (time seen, seq covered) — when each seq became searchable in that index."""

    def __init__(self, stream_partitions: int) -> None:
        self.partitions = stream_partitions
        self.history: dict[str, list[tuple[float, int]]] = {}
        self.markers: dict[int, int] = {}
        self.lock = threading.Lock()

    def _add(self, name: str, seen: float, seq: int) -> None:
        history = self.history.setdefault(name, [])
        if not history or seq > history[-1][1]:
            history.append((seen, seq))

    def on_watermark(self, partition: int, key: bytes | None, body: dict[str, Any], seen: float) -> None:
        if key and key.startswith(f"{LOG}/".encode()):
            with self.lock:
                self._add(key.decode().split("/", 1)[1], seen, int(body["builtThroughSeq"]))

    def on_chunk_record(self, partition: int, key: bytes | None, body: dict[str, Any], seen: float) -> None:
        if body.get("kind") == "progress" and body.get("logId") == LOG:
            with self.lock:
                self.markers[partition] = max(self.markers.get(partition, 0), int(body["seq"]))
                if len(self.markers) == self.partitions:
                    self._add("chunks", seen, min(self.markers.values()))

    def current(self, name: str) -> int:
        with self.lock:
            history = self.history.get(name)
            return history[-1][1] if history else 0

    def covered_at(self, name: str, seq: int) -> float | None:
        with self.lock:
            return next((seen for seen, through in self.history.get(name, []) if through >= seq), None)

    def wait(self, names: Iterable[str], seq: int, timeout: float,
             alive: Callable[[], None] | None = None) -> dict[str, float]:
        """Block until every name covers ``seq``; the monotonic time each one did. ``alive``
        raises if a process the wait depends on has died (no point waiting for the timeout)."""
        deadline = time.monotonic() + timeout
        names = list(names)
        while True:
            if alive is not None:
                alive()
            done = {name: self.covered_at(name, seq) for name in names}
            if all(value is not None for value in done.values()):
                return {name: float(value) for name, value in done.items() if value is not None}
            if time.monotonic() > deadline:
                late = {name: self.current(name) for name, value in done.items() if value is None}
                raise TimeoutError(f"not covered through {seq} after {timeout:.0f}s: {late}")
            time.sleep(0.05)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def append(settings: Settings, events: Iterable[dict[str, Any]]) -> tuple[int, int]:
    from streams.l1 import L1Producer

    producer = L1Producer(settings.bootstrap_servers or "", settings)
    count = 0
    for event in events:
        producer.append(event)
        count += 1
    producer.close()
    return count, committed(settings)


def committed(settings: Settings) -> int:
    # Not L1Producer.flush()'s value: after its internal flush every 10 000 events it can
    # report 0; the log's last stable offset is the head every index must reach.
    from streams.l1 import L1Reader

    reader = L1Reader(settings.bootstrap_servers or "", settings)
    try:
        return reader.committed_seq(LOG)
    finally:
        reader.close()


def raw_read(settings: Settings) -> dict[str, float]:
    """events/s and MB/s of a plain kafka-python read of the whole L1 topic (best of two)."""
    from streams.topics import Topics

    topic = Topics.from_settings(settings).l1
    best: dict[str, float] = {}
    for _ in range(2):
        consumer = KafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False,
                                 isolation_level="read_committed", client_id="usl-bench-raw")
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        began = time.perf_counter()
        consumer.seek_to_beginning(*tps)
        count = size = 0
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for records in consumer.poll(timeout_ms=500, max_records=5000).values():
                count += len(records)
                size += sum(len(r.value or b"") for r in records)
        seconds = time.perf_counter() - began
        consumer.close()
        if count / seconds > best.get("eventsPerSecond", 0):
            best = {"events": count, "bytes": size, "seconds": seconds, "eventsPerSecond": count / seconds,
                    "mbPerSecond": size / seconds / 1e6}
    return best


# -- phases ----------------------------------------------------------------------------------


def stage_rates(settings: Settings, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Redaction MB/s and chunking events/s, CPU time of this (single-threaded) process."""
    from streams.asp import canonical_bytes
    from streams.chunking import Chunker, ChunkerConfig, chunk_stream, default_tokenizer, make_ticks
    from streams.redaction import policy_hash, redact_event

    size = sum(len(canonical_bytes(event)) for event in events)
    redact_event(events[0])
    began = time.process_time()
    redacted = [redact_event(event).event for event in events]
    redaction_cpu = time.process_time() - began
    chunker = Chunker(ChunkerConfig(target_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap_tokens,
                                    idle_gap_seconds=settings.idle_gap_seconds),
                      default_tokenizer(), policy_hash=policy_hash())
    chunker.tokenizer.count("warm up")
    records = make_ticks(list(enumerate(redacted, start=1)), settings.tick_every_seqs)
    began = time.process_time()
    chunks = chunk_stream(records, chunker)
    chunking_cpu = time.process_time() - began
    return {"events": len(events), "bytes": size, "chunks": len(chunks),
            "redactionMbPerCoreSecond": size / redaction_cpu / 1e6,
            "redactionEventsPerCoreSecond": len(events) / redaction_cpu,
            "chunkingEventsPerCoreSecond": len(events) / chunking_cpu,
            "chunkingChunksPerCoreSecond": len(chunks) / chunking_cpu}


def sink_rates(settings: Settings, events: list[dict[str, Any]], whoosh_chunks: int, root: Path) -> dict[str, Any]:
    """Each sink's writer on the chunks of ``events``, as SinkRunner drives it (bench_sinks)."""
    from benchmarks.bench_sinks import bench_writers, replay

    data = replay(settings, events)
    results = bench_writers(settings, data, ["text", "whoosh", "vector", "structured", "analytics", "toolresults"],
                            settings.sink_batch_size, root, min(whoosh_chunks, max(1, len(data["chunk"]) - 1)))
    return {"chunks": len(data["chunk"]), "toolResults": len(data["toolresult"]), "sinks": results}


def ingest_and_freshness(settings: Settings, scale: Scale, events: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """Real worker and sink processes: end-to-end rate, per-index live rates, freshness, memory."""
    from deploy.testing import Stack
    from streams.topics import Topics

    bootstrap = settings.bootstrap_servers or ""
    topics = Topics.from_settings(settings)
    stack = Stack(settings)
    coverage = Coverage(settings.stream_partitions)
    tails: list[Tail] = []
    result: dict[str, Any] = {"sinkProcesses": "one `usl sink` process per kind" if scale.sink_per_process
                              else "one `usl sink` process for all kinds"}
    try:
        say("starting usl worker and sinks ...")
        stack.worker()
        if scale.sink_per_process:
            for kind in KINDS:
                stack.sinks(kind, name=f"sink-{kind}")
        else:
            stack.sinks(",".join(KINDS), name="sinks")
        tails.append(Tail(bootstrap, topics.watermarks, coverage.on_watermark))
        tails.append(Tail(bootstrap, topics.chunks, coverage.on_chunk_record))
        def alive() -> None:
            for name, proc in stack.procs.items():
                if proc.poll() is not None:
                    tail = stack.log_text(name).strip().splitlines()[-3:]
                    raise RuntimeError(f"`usl` process {name} exited ({proc.returncode}): " + " | ".join(tail))

        warm = list(generate(sessions=2, config=WorkloadConfig(seed=seed + 1000, concurrent=2)))
        _, warm_head = append(settings, warm)
        coverage.wait((*KINDS, "chunks"), warm_head, timeout=300, alive=alive)
        say(f"warm; appending {len(events)} events ...")

        worker_pid = stack.procs["worker"].pid
        cpu_began = cpu_seconds(worker_pid)
        began = time.monotonic()
        count, head = append(settings, events)
        appended = time.monotonic()
        done = coverage.wait((*KINDS, "chunks"), head, timeout=3600, alive=alive)
        finished = max(done[kind] for kind in KINDS)
        result.update({
            "events": count, "headSeq": head, "appendEventsPerSecond": count / (appended - began),
            "endToEndSeconds": finished - began, "endToEndEventsPerSecond": count / (finished - began),
            "perIndexEventsPerSecond": {name: count / (done[name] - began) for name in done},
            "workerCpuSeconds": cpu_seconds(worker_pid) - cpu_began,
        })
        say(f"end to end {result['endToEndEventsPerSecond']:.0f} events/s")

        fresh: list[dict[str, Any]] = []
        for number, rate in enumerate(scale.fresh_rates):
            say(f"freshness at {rate} events/s for {scale.fresh_seconds:.0f}s ...")
            fresh.append(steady(settings, coverage, rate, scale.fresh_seconds, seed + 2000 + number))
        result["freshness"] = fresh
        result["memory"] = {name: tree_hwm(proc.pid) for name, proc in stack.procs.items()}

        say("a second worker ...")
        stack.worker("worker-2")
        second_warm = list(generate(sessions=2, config=WorkloadConfig(seed=seed + 3000, concurrent=2)))
        _, second_warm_head = append(settings, second_warm)
        coverage.wait((*KINDS, "chunks"), second_warm_head, timeout=600, alive=alive)  # rebalanced, warm
        second = list(generate(events=len(events), seed=seed + 4000))
        began = time.monotonic()
        second_count, second_head = append(settings, second)
        done = coverage.wait((*KINDS, "chunks"), second_head, timeout=3600, alive=alive)
        result["twoWorkers"] = {
            "events": second_count,
            "endToEndEventsPerSecond": second_count / (max(done[kind] for kind in KINDS) - began),
            "workerOnlyEventsPerSecond": second_count / (done["chunks"] - began),
        }
        say(f"two workers: end to end {result['twoWorkers']['endToEndEventsPerSecond']:.0f} events/s")
        result["totalEvents"] = (count + len(warm) + sum(row["events"] for row in fresh)
                                 + len(second_warm) + second_count)
    finally:
        for tail in tails:
            tail.close()
        stack.close()
    return result


def steady(settings: Settings, coverage: Coverage, rate: float, seconds: float, seed: int) -> dict[str, Any]:
    """Appends at ``rate`` for ``seconds`` (whole sessions, 4 open at a time); per event and per
    index, seconds from its append until that index covers its seq."""
    from streams.l1 import L1Producer

    config = WorkloadConfig(seed=seed, concurrent=4)
    events = list(generate(events=max(1, int(rate * seconds)), config=config))
    producer = L1Producer(settings.bootstrap_servers or "", settings)
    batch = max(1, int(rate / 10))
    sent: list[tuple[float, int]] = []  # (append time, highest seq of the batch)
    previous = committed(settings)
    began = time.monotonic()
    for index in range(0, len(events), batch):
        time.sleep(max(0.0, began + index / rate - time.monotonic()))
        at = time.monotonic()
        for event in events[index:index + batch]:
            producer.append(event)
        producer.flush()
        sent.append((at, 0))
    producer.close()
    # One partition per log: the seqs of the events are previous+1.. in append order (the
    # producer is idempotent and alone on this log during the phase).
    head = committed(settings)
    appended_seconds = time.monotonic() - began
    seqs = iter(range(previous + 1, head + 1))
    per_event: list[tuple[float, int]] = []
    for (at, _), index in zip(sent, range(0, len(events), batch), strict=True):
        for _ in events[index:index + batch]:
            per_event.append((at, next(seqs, head)))
    names = (*KINDS, "chunks")
    coverage.wait(names, head, timeout=max(600.0, len(events) / 20))  # above capacity the backlog drains after
    lags: dict[str, dict[str, float]] = {}
    for name in names:
        values = [covered - at for at, seq in per_event if (covered := coverage.covered_at(name, seq)) is not None]
        lags[name] = {"p50": pct(values, 0.5), "p99": pct(values, 0.99), "mean": statistics.fmean(values)}
    return {"rate": rate, "events": len(events), "achievedRate": len(events) / appended_seconds, "lag": lags}


def rebuild_rate(settings: Settings, events: int) -> dict[str, Any]:
    """Rebuild of ``text`` from offset 0; a failure is reported in BENCHMARKS.md, not raised."""
    from sinks.rebuild import rebuild

    began = time.perf_counter()
    try:
        manifest = rebuild(settings, settings.bootstrap_servers or "", "text")
    except Exception as error:
        say(f"rebuild failed: {error}")
        return {"events": events, "error": f"{type(error).__name__}: {error}", "eventsPerSecond": None,
                "chunksPerSecond": None, "seconds": time.perf_counter() - began}
    seconds = time.perf_counter() - began
    return {"events": events, "chunks": manifest.chunk_count, "seconds": seconds,
            "eventsPerSecond": events / seconds, "chunksPerSecond": manifest.chunk_count / seconds}


# -- queries and growth ----------------------------------------------------------------------


def _planner_probe(settings: Settings, queries: int, out: Any) -> None:
    """In a fresh process: a planner answering every mode x freshness; its peak memory."""
    logging.getLogger("kafka").setLevel(logging.WARNING)
    from benchmarks.bench_query import run_queries
    from planner.acl import parse_principal
    from planner.engine import Planner
    from sinks.watermarks import WatermarkFollower

    follower = WatermarkFollower(settings.bootstrap_servers or "", settings).start()
    planner = Planner(settings, settings.bootstrap_servers or "", follower=follower)
    principal = parse_principal("tenant:acme/user:bench/groups:ops")
    for freshness in ("indexed", "latest"):
        for mode in ("text", "vector", "hybrid"):
            run_queries(planner, principal, mode=mode, freshness=freshness, queries=queries, seed=5)
    planner.close()
    follower.stop()
    out.put(vm_hwm(os.getpid()))


def recall_at_10(gen_dir: Path, embedder: Any, queries: int, seed: int = 17) -> dict[str, float]:
    """Recall@10 of the vector index (the sink's segments) against exact inner-product search
    over the same stored vectors; both timed one query at a time, alternately (same load)."""
    import random

    import numpy as np

    from benchmarks.bench_query import _TOPICS
    from sinks.vector.faiss_index import VectorReader, _SegmentData
    from sinks.vector_writer import segment_names

    rng = random.Random(seed)
    vocabulary = sorted({word for topic in _TOPICS for word in topic})
    matrix = embedder.embed([" ".join(rng.sample(vocabulary, rng.randint(1, 3))) for _ in range(queries)])
    names = segment_names(gen_dir)
    segments = []
    for name in names:
        data = _SegmentData.open(gen_dir, name)
        segments.append((list(data.chunk_ids), np.ascontiguousarray(data.vectors, dtype=np.float32)))
    reader = VectorReader(gen_dir, names)

    def exact(query: Any) -> list[str]:
        best: dict[str, float] = {}
        for ids, vectors in segments:
            scores = vectors @ query
            for row in np.argpartition(-scores, min(10, len(scores) - 1))[:10]:
                best[ids[row]] = max(best.get(ids[row], -1e9), float(scores[row]))
        return sorted(best, key=lambda c: (-best[c], c))[:10]

    index_ms, exact_ms, recalls = [], [], []
    for q in range(queries):
        began = time.perf_counter()
        found = [hit.chunk_id for hit in reader.search(matrix[q], limit=10)]
        index_ms.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        truth = exact(matrix[q])
        exact_ms.append((time.perf_counter() - began) * 1000)
        recalls.append(len(set(found) & set(truth)) / max(1, len(truth)))
    return {"recallAt10": statistics.fmean(recalls), "indexP50Ms": pct(index_ms, 0.5),
            "exactP50Ms": pct(exact_ms, 0.5), "segments": len(names)}


def interleaved_queries(planner: Any, principal: Any, queries: int, seed: int = 11) -> dict[str, dict[str, float]]:
    """p50/p99 ms per mode x freshness; each query text runs through every combination in a
    rotating order, so load changes during the run hit every combination alike."""
    import random

    from benchmarks.bench_query import _TOPICS

    rng = random.Random(seed)
    vocabulary = sorted({word for topic in _TOPICS for word in topic})
    texts = [" ".join(rng.sample(vocabulary, rng.randint(1, 3))) for _ in range(queries + 5)]
    combos = [(mode, freshness) for freshness in ("indexed", "latest") for mode in ("text", "vector", "hybrid")]
    latencies: dict[str, list[float]] = {f"{m}/{f}": [] for m, f in combos}
    hits: dict[str, int] = dict.fromkeys(latencies, 0)
    for number, text in enumerate(texts):
        shift = number % len(combos)
        for mode, freshness in combos[shift:] + combos[:shift]:
            began = time.perf_counter()
            response = planner.search({"query": text, "mode": mode, "freshness": freshness}, principal)
            elapsed = time.perf_counter() - began
            if number >= 5:  # the first texts warm readers, embedder, tokenizer and the tail cache
                latencies[f"{mode}/{freshness}"].append(elapsed * 1000)
                hits[f"{mode}/{freshness}"] += len(response["results"])
    return {key: {"p50": pct(values, 0.5), "p99": pct(values, 0.99), "hits": hits[key] / max(1, len(values))}
            for key, values in latencies.items()}


def query_growth(settings: Settings, scale: Scale, sizes: tuple[int, ...]) -> dict[str, Any]:
    """Build the query corpus of bench_query in steps; measure latency, recall, bytes at each."""
    from benchmarks.bench_query import generate as corpus
    from planner.acl import parse_principal
    from planner.engine import Planner
    from sinks.generations import GenerationStore, Manifest
    from sinks.runner import index_root
    from sinks.service import make_writer
    from sinks.watermarks import WatermarkFollower, WatermarkPublisher
    from streams.asp import ASP_VERSION, validate_event
    from streams.l1 import L1Producer
    from streams.topics import ensure_topics

    bootstrap = settings.bootstrap_servers or ""
    ensure_topics(bootstrap, settings)
    producer = L1Producer(bootstrap, settings)
    writers = {kind: make_writer(kind, settings) for kind in ("text", "vector", "structured")}
    root = index_root(settings)
    principal = parse_principal("tenant:acme/user:bench/groups:ops")
    follower = WatermarkFollower(bootstrap, settings).start()
    publisher = WatermarkPublisher(bootstrap, settings)
    pending: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    build_seconds = {kind: 0.0 for kind in writers}
    targets = iter(sorted(sizes))
    target = next(targets)

    def commit(batch: list[dict[str, Any]]) -> None:
        for kind, writer in writers.items():
            began = time.monotonic()
            store = GenerationStore(root, LOG, kind)
            previous = store.current()
            staging = store.begin()
            try:
                writer.write(staging, store.generation_dir(previous.generation_id) if previous else None, batch)
                describe = writer.describe()
                store.commit(staging, Manifest(
                    kind=kind, log_id=LOG, line=store.line, generation_id=0,
                    built_through_seq=max(c["maxSeq"] for c in batch), schema_version="1",
                    asp_version=ASP_VERSION, chunker={}, embedding=describe.get("embedding"),
                    redaction_policy_hash="bench", chunk_count=len(batch), extra=describe))
            except BaseException:
                store.abort()
                raise
            store.gc(keep_last=2)
            build_seconds[kind] += time.monotonic() - began

    try:
        for number, (events, chunk) in enumerate(corpus(max(sizes)), start=1):
            for event in events:
                producer.append(validate_event(event))
            pending.append(chunk)
            through = 2 * target - scale.tail_events
            # Chunks come in seq order: a full batch wholly below the step's index head is ready.
            if len(pending) >= 10_000 and chunk["maxSeq"] <= through:
                commit(pending)
                pending = []
            if number < target:
                continue
            producer.flush()
            ready = [c for c in pending if c["maxSeq"] <= through]
            if ready:
                commit(ready)
            pending = [c for c in pending if c["maxSeq"] > through]
            for kind in writers:
                manifest = GenerationStore(root, LOG, kind).current()
                assert manifest is not None
                publisher.publish({"logId": LOG, "kind": kind, "line": GenerationStore(root, LOG, kind).line,
                                   "generationId": manifest.generation_id, "builtThroughSeq": through,
                                   "manifest": str(GenerationStore(root, LOG, kind).manifest_path(manifest.generation_id)),
                                   "committedAt": manifest.created_at, "versions": {}})
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                    int(follower.snapshot().get((LOG, kind), {}).get("builtThroughSeq", 0)) < through for kind in writers):
                time.sleep(0.1)
            say(f"queries at {target} chunks ...")
            step: dict[str, Any] = {"chunks": target, "indexBytes": {}, "latency": {}}
            for kind in writers:
                store = GenerationStore(root, LOG, kind)
                manifest = store.current()
                assert manifest is not None
                step["indexBytes"][kind] = sum(s.bytes for s in manifest.segments)
            planner = Planner(settings, bootstrap, follower=follower)
            try:
                step["latency"] = interleaved_queries(planner, principal, scale.queries)
            finally:
                planner.close()
            vector_store = GenerationStore(root, LOG, "vector")
            current = vector_store.current()
            assert current is not None
            step["recall"] = recall_at_10(vector_store.generation_dir(current.generation_id),
                                          writers["vector"].embedder, scale.recall_queries)  # type: ignore[attr-defined]
            steps.append(step)
            target = next(targets, 0)
            if not target:
                break
        producer.close()
        say("planner process probe (peak memory) ...")
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        child = context.Process(target=_planner_probe, args=(settings, max(10, scale.queries // 5), queue))
        child.start()
        planner_hwm = queue.get(timeout=900)
        child.join(timeout=60)
    finally:
        publisher.close()
        follower.stop()
    return {"steps": steps, "buildSeconds": build_seconds, "plannerPeakBytes": planner_hwm,
            "embedder": settings.embedder, "textEngine": settings.text_engine}


def load_large(path: Path) -> dict[str, Any]:
    """A step of the growth table from ``bench_query.py --out`` JSON, or from its printed output."""
    text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict) and "latency" in data:
        return {**data, "source": str(path)}
    chunks = re.search(r"building (\d+) chunks", text)
    rows = re.findall(r"^(text|vector|hybrid)\s+(indexed|latest)\s+([\d.]+)\s+([\d.]+)", text, re.M)
    if not chunks or not rows:
        raise ValueError(f"{path}: neither bench_query JSON nor its printed table")
    return {"chunks": int(chunks.group(1)), "indexBytes": {}, "source": str(path),
            "latency": {f"{mode}/{fresh}": {"p50": float(p50), "p99": float(p99)} for mode, fresh, p50, p99 in rows}}


# -- report ----------------------------------------------------------------------------------


def n(value: float | None, digits: int = 0) -> str:
    if value is None or value != value:
        return "–"
    return f"{value:,.{digits}f}".replace(",", " ")


def ratio(a: float | None, b: float | None, digits: int = 2) -> str:
    if not a or not b:
        return "–"
    return f"{a / b:.{digits}f}x"


def plots(results: dict[str, Any], plot_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(plot_dir / name, dpi=100)
        plt.close(fig)
        written.append(name)

    ingest, stages, raw = results["ingest"], results["stages"], results["rawRead"]
    labels = ["raw L1 read", "end to end", *[f"live {k}" for k in KINDS], "rebuild text",
              "redaction /core", "chunking /core"]
    values = [raw["eventsPerSecond"], ingest["endToEndEventsPerSecond"],
              *[ingest["perIndexEventsPerSecond"][k] for k in KINDS], results["rebuild"]["eventsPerSecond"] or 0,
              stages["redactionEventsPerCoreSecond"], stages["chunkingEventsPerCoreSecond"]]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh(labels[::-1], values[::-1], color=["#4c72b0"] * (len(labels) - 1) + ["#888888"])
    ax.set_xscale("log")
    ax.set_xlabel("events/s (log scale)")
    ax.set_title("Indexing throughput vs the raw L1 read")
    save(fig, "throughput.png")

    fresh = ingest["freshness"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    for ax, key in zip(axes, ("p50", "p99"), strict=True):
        for name in ("chunks", *KINDS):
            ax.plot([row["rate"] for row in fresh], [row["lag"][name][key] for row in fresh], marker="o",
                    label=name, linestyle="--" if name == "chunks" else "-")
        ax.set_xlabel("steady ingest rate, events/s")
        ax.set_title(f"append → searchable, {key}")
    axes[0].set_ylabel("seconds")
    axes[1].legend(fontsize=8)
    save(fig, "freshness.png")

    steps = results["queries"]["steps"] + ([results["large"]] if results.get("large") else [])
    combos = [f"{m}/{f}" for f in ("indexed", "latest") for m in ("text", "vector", "hybrid")]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / max(1, len(steps))
    for i, step in enumerate(steps):
        xs = [j + i * width for j in range(len(combos))]
        ax.bar(xs, [step["latency"][c]["p50"] for c in combos], width, label=f"{step['chunks']:,} chunks p50")
        ax.scatter(xs, [step["latency"][c]["p99"] for c in combos], marker="_", s=200, color="black")
    ax.set_xticks([j + width * (len(steps) - 1) / 2 for j in range(len(combos))], combos, fontsize=8)
    ax.set_ylabel("ms (bars p50, dashes p99)")
    ax.set_title("Query latency")
    ax.legend(fontsize=8)
    save(fig, "query_latency.png")

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for combo in ("text/indexed", "vector/indexed", "hybrid/indexed", "hybrid/latest"):
        axes[0].plot([s["chunks"] for s in steps], [s["latency"][combo]["p50"] for s in steps], marker="o", label=combo)
    axes[0].set_title("query p50 vs corpus size")
    axes[0].set_ylabel("ms")
    for kind in ("text", "vector", "structured"):
        sized = [s for s in steps if s.get("indexBytes", {}).get(kind)]
        axes[1].plot([s["chunks"] for s in sized], [s["indexBytes"][kind] / 1e6 for s in sized], marker="o", label=kind)
    axes[1].set_title("index size vs corpus size")
    axes[1].set_ylabel("MB")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("chunks")
        ax.legend(fontsize=8)
    save(fig, "growth.png")

    memory = results["memory"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [name for name, value in memory.items() if value]
    ax.barh(names[::-1], [memory[name] / 2**20 for name in names][::-1], color="#55a868")
    ax.set_xlabel("peak RSS (VmHWM), MiB")
    ax.set_title("Peak memory per process")
    save(fig, "memory.png")
    return written


def _section1_extra(results: dict[str, Any]) -> list[str]:
    """Worker MB per core, one vs two workers, and `usl ingest` vs kafka-python (older results
    without these figures give no lines)."""
    ingest, stages, lines = results["ingest"], results["stages"], [""]
    e2e = ingest["endToEndEventsPerSecond"]
    if ingest.get("workerCpuSeconds"):
        mb = stages["bytes"] / 1e6
        lines.append(f"Worker CPU over the end-to-end phase: {n(ingest['workerCpuSeconds'], 1)} s for {n(mb, 1)} MB of "
                     f"L1 records = **{n(mb / ingest['workerCpuSeconds'], 2)} MB/s per core** "
                     f"({n(1000 * ingest['workerCpuSeconds'] / ingest['events'], 2)} ms per event); for scale, "
                     "Quickwit quotes about 7.5 MB/s per core for indexing (not measured here).")
    two = ingest.get("twoWorkers")
    if two:
        lines += ["", f"With a second `usl worker` (after §4; {n(two['events'])} more events of another seed): end to end "
                      f"{n(two['endToEndEventsPerSecond'])} events/s = **{ratio(two['endToEndEventsPerSecond'], e2e)}** "
                      f"one worker's; worker only {n(two['workerOnlyEventsPerSecond'])} events/s = "
                      f"{ratio(two['workerOnlyEventsPerSecond'], ingest['perIndexEventsPerSecond']['chunks'])}."]
    append = results.get("append")
    if append:
        lines += ["", f"Appending: `usl ingest` of {n(append['ingest_events'])} of these events from a JSONL file "
                      f"({n(append['ingest_mb'], 1)} MB; the whole command, a fresh process) ran at "
                      f"{n(append['ingest_events_per_second'])} events/s; a plain kafka-python producer of the same "
                      f"records with the L1 producer's settings at {n(append['kafka_python_produce_events_per_second'])} "
                      f"events/s → **{ratio(append['ingest_events_per_second'], append['kafka_python_produce_events_per_second'])}**; "
                      f"without the command's fixed start ({n(append['ingest_start_seconds'], 1)} s: imports, topic "
                      f"checks; the time of a one-event ingest) {ratio(append['ingest_events_per_second_after_start'], append['kafka_python_produce_events_per_second'])}; "
                      f"per CPU second {n(append['ingest_events_per_cpu_second'])} against "
                      f"{n(append['kafka_python_events_per_cpu_second'])} events → {n(append['ingest_vs_kafka_python_cpu'], 2)}x."]
    return lines


def _freshness_summary(fresh: list[dict[str, Any]]) -> list[str]:
    """Per rate, the index with the highest p99 (the bottleneck), and where p99 crosses 1 s."""
    lines = ["", "| rate | slowest index (p99) | its p99 s | its p50 s |", "|---|---|---:|---:|"]
    crossed = None
    for row in fresh:
        slowest = max(KINDS, key=lambda kind: row["lag"][kind]["p99"])
        lag = row["lag"][slowest]
        lines.append(f"| {row['rate']} events/s | {slowest} | {n(lag['p99'], 2)} | {n(lag['p50'], 2)} |")
        if crossed is None and lag["p99"] >= 1.0:
            crossed = row["rate"]
    lines += ["", "Every index's p99 stayed under 1 s at every rate measured." if crossed is None else
              f"p99 of the slowest index first reaches 1 s at {crossed} events/s."]
    return lines


def report(results: dict[str, Any], command: str, plot_prefix: str) -> str:
    m, ingest, stages, raw = results["machine"], results["ingest"], results["stages"], results["rawRead"]
    sinks, rebuild, queries = results["sinks"], results["rebuild"], results["queries"]
    e2e = ingest["endToEndEventsPerSecond"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `benchmarks/harness.py` (SPEC §11). Every figure was measured in this one run, next to its",
        "reference, and the ratio is what to compare across runs and machines: the absolute numbers depend on",
        "the machine and on its load (recorded below). No figure is a pass/fail threshold.",
        "",
        "```",
        command,
        "```",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| date | {m['date']} (run took {n(results['seconds'] / 60, 1)} min) |",
        f"| CPU | {m['cpu']}, {m['cores']} cores |",
        f"| memory | {n(m['memoryBytes'] / 2**30, 1)} GiB |",
        f"| load average (1/5/15 min) | start {' / '.join(f'{x:.2f}' for x in m['loadStart'])}; "
        f"end {' / '.join(f'{x:.2f}' for x in m['loadEnd'])} |",
        f"| Python | {m['python']} ({m['platform']}) |",
        f"| Kafka | {m['kafka']} (single local broker, {m['bootstrap']}) |",
        f"| scale | `{results['scale']}`: workload of {n(ingest['events'])} events, seed {results['seed']}; "
        f"embedder `{queries['embedder']}`, text engine `{queries['textEngine']}` |",
        "",
        "The machine is shared: other jobs ran during the run, so absolute rates are noisy; the ratios are",
        "measured under the same load as their reference.",
        "",
        "## 1. End-to-end indexing vs raw L1 read",
        "",
        f"{n(ingest['events'])} workload events ({n(stages['bytes'] / 1e6, 1)} MB of canonical JSON) appended at "
        f"{n(ingest['appendEventsPerSecond'])} events/s to one log "
        f"({results['settings']['l1Partitions']} L1 partitions, {results['settings']['streamPartitions']} stream "
        f"partitions); one `usl worker` and {ingest['sinkProcesses']}, default settings "
        f"(batch {results['settings']['sinkBatchSize']} chunks / {results['settings']['sinkBatchSeconds']} s). "
        "Rate = events / time from the first append until the index's watermark covers the last seq.",
        "",
        "| measure | events/s | vs raw L1 read |",
        "|---|---:|---:|",
        f"| raw L1 read (kafka-python, read_committed, best of 2) | {n(raw['eventsPerSecond'])} | 1.00x |",
        f"| **end to end (every index at the head)** | **{n(e2e)}** | **{ratio(e2e, raw['eventsPerSecond'], 3)}** |",
        f"| worker only (progress markers at the head) | {n(ingest['perIndexEventsPerSecond']['chunks'])} | "
        f"{ratio(ingest['perIndexEventsPerSecond']['chunks'], raw['eventsPerSecond'], 3)} |",
    ]
    for kind in KINDS:
        rate = ingest["perIndexEventsPerSecond"][kind]
        lines.append(f"| {kind} index at the head | {n(rate)} | {ratio(rate, raw['eventsPerSecond'], 3)} |")
    lines += _section1_extra(results)
    lines += [
        "",
        f"![throughput]({plot_prefix}throughput.png)",
        "",
        "## 2. Redaction and chunking per core",
        "",
        f"Same {n(stages['events'])} events, in this process (one thread), CPU seconds; references: the raw L1 "
        "read of §1 in MB/s and events/s.",
        "",
        "| stage | per core | reference | ratio |",
        "|---|---:|---:|---:|",
        f"| redaction (`redact_event`) | {n(stages['redactionMbPerCoreSecond'], 1)} MB/s "
        f"({n(stages['redactionEventsPerCoreSecond'])} events/s) | raw read {n(raw['mbPerSecond'], 1)} MB/s | "
        f"{ratio(stages['redactionMbPerCoreSecond'], raw['mbPerSecond'])} |",
        f"| chunking (`chunk_stream`, real tokenizer) | {n(stages['chunkingEventsPerCoreSecond'])} events/s "
        f"({n(stages['chunkingChunksPerCoreSecond'])} chunks/s) | raw read {n(raw['eventsPerSecond'])} events/s | "
        f"{ratio(stages['chunkingEventsPerCoreSecond'], raw['eventsPerSecond'])} |",
        "",
        "## 3. Sinks",
        "",
        f"The {n(sinks['chunks'])} chunks and {n(sinks['toolResults'])} tool results of {n(sinks['events'])} workload "
        "events of the same seed (real redaction and chunker), each sink's writer driven as `SinkRunner` does it: batches of "
        f"{results['settings']['sinkBatchSize']} records, one generation each (begin → write → commit → gc). "
        "Reference: the chunker's rate of §2 (chunks/s per core) — what one core feeds the sinks.",
        "",
        "| sink | records | chunks/s | vs chunker | index MB | notes |",
        "|---|---:|---:|---:|---:|---|",
    ]
    feed = stages["chunkingChunksPerCoreSecond"]
    for name, row in sinks["sinks"].items():
        notes = []
        if "embeddingsPerSecond" in row:
            notes.append(f"embeddings alone {n(row['embeddingsPerSecond'])}/s ({row['embedder']}); whole cycle / "
                         f"embedding = {ratio(row['chunksPerSecond'], row['embeddingsPerSecond'])}")
        if "parquetRowsPerSecond" in row:
            notes.append(f"{n(row['parquetRowsPerSecond'])} Parquet rows/s")
        label = {"text": "text (tantivy)", "whoosh": "text (whoosh), first chunks",
                 "tantivy-subset": "text (tantivy), same chunks as whoosh"}.get(name, name)
        lines.append(f"| {label} | {n(row['records'])} | {n(row['chunksPerSecond'])} | {ratio(row['chunksPerSecond'], feed)} | "
                     f"{n(row['indexBytes'] / 1e6, 1)} | {'; '.join(notes)} |")
    if "whoosh" in sinks["sinks"]:
        same = sinks["sinks"].get("tantivy-subset", sinks["sinks"]["text"])
        lines += ["", f"**tantivy / whoosh on the same {n(sinks['sinks']['whoosh']['records'])} chunks: "
                      f"{ratio(same['chunksPerSecond'], sinks['sinks']['whoosh']['chunksPerSecond'], 1)}**"]
    lines += [
        "",
        "## 4. Freshness: append → searchable",
        "",
        f"With the processes of §1 running, workload events (4 sessions open at a time) appended at a steady rate "
        f"for {n(results['freshnessSeconds'])} s each. Per event and per index: time from its append until a "
        "watermark of that index covers its seq. Reference: the same lag of the worker's progress markers "
        "(`chunks`, before any sink). An event of an open turn is searchable only once its turn closes "
        "(SPEC §5), so both include the wall-clock length of turns at that rate.",
        "",
        "| rate (achieved) | index | p50 s | p99 s | p50 vs chunks |",
        "|---|---|---:|---:|---:|",
    ]
    saturated = [row["rate"] for row in ingest["freshness"] if row["rate"] > e2e]
    if saturated:
        lines[-3:-3] = ["", f"Rates above the end-to-end capacity measured in §1 ({n(e2e)} events/s in this run) — "
                            f"{', '.join(str(r) for r in saturated)} events/s, marked † — cannot be sustained: "
                            "their lag is mostly the backlog growing during the phase, not steady-state freshness."]
    for row in ingest["freshness"]:
        ref = row["lag"]["chunks"]
        mark = " †" if row["rate"] > e2e else ""
        lines.append(f"| {row['rate']}{mark} ({n(row['achievedRate'], 1)}) events/s | chunks (worker) | {n(ref['p50'], 2)} | "
                     f"{n(ref['p99'], 2)} | 1.00x |")
        for kind in KINDS:
            lag = row["lag"][kind]
            lines.append(f"| | {kind} | {n(lag['p50'], 2)} | {n(lag['p99'], 2)} | {ratio(lag['p50'], ref['p50'])} |")
    lines += _freshness_summary(ingest["freshness"])
    lines += ["", f"![freshness]({plot_prefix}freshness.png)", "",
              "## 5. Query latency", "",
              f"Corpus of `bench_query.py` (one chunk per turn of a user ask and an assistant reply, 50 turns per "
              f"session, 80 % of sessions tenant-wide, 10 % group, 10 % another user) written with the sinks' "
              f"writers; {results['tailEvents']} L1 events above the indexes, which `latest` scans (cached after "
              f"the first query, as between two commits). {results['queriesPerRow']} random 1–3 word queries, each run "
              "through all six combinations in a rotating order (so load changes hit every row alike), through "
              "`Planner` (in this process) as a principal who may read 90 % of the sessions. ms.", "",
              "| chunks | mode | indexed p50 / p99 | latest p50 / p99 | latest / indexed (p50) | vs text (indexed p50) |",
              "|---:|---|---:|---:|---:|---:|"]
    steps = queries["steps"] + ([results["large"]] if results.get("large") else [])
    for step in steps:
        lat = step["latency"]
        for mode in ("text", "vector", "hybrid"):
            i, lt = lat[f"{mode}/indexed"], lat[f"{mode}/latest"]
            lines.append(f"| {n(step['chunks'])}{' (large run)' if step.get('source') else ''} | {mode} | "
                         f"{n(i['p50'], 1)} / {n(i['p99'], 1)} | {n(lt['p50'], 1)} / {n(lt['p99'], 1)} | "
                         f"{ratio(lt['p50'], i['p50'])} | {ratio(i['p50'], lat['text/indexed']['p50'])} |")
    if results.get("large"):
        lines += ["", f"The large row comes from a separate run (`{results['large']['source']}`), not this one."]
    lines += ["", f"![query latency]({plot_prefix}query_latency.png)", "",
              "## 6. Vector recall@10 against exact search", "",
              "The vector sink's own segments (flat below `USL_VECTOR_EXACT_MAX`, HNSW above, merged as the sink "
              f"merges them), {results['recallQueries']} queries; exact = inner product over every stored vector.",
              "Both searches run one query at a time, alternately; exact is numpy over the segments' vectors.",
              "", "| chunks | segments | recall@10 | index p50 ms | exact p50 ms | exact / index (p50) |",
              "|---:|---:|---:|---:|---:|---:|"]
    for step in queries["steps"]:
        r = step["recall"]
        lines.append(f"| {n(step['chunks'])} | {r['segments']} | {r['recallAt10']:.3f} | {n(r['indexP50Ms'], 2)} | "
                     f"{n(r['exactP50Ms'], 2)} | {ratio(r['exactP50Ms'], r['indexP50Ms'], 1)} |")
    lines += ["", "## 7. Rebuild from offset 0", "",
              f"`sinks.rebuild.rebuild(text)` over the whole log of this run ({n(rebuild['events'])} events: read L1, "
              "redact, chunk, index, verify, switch), after the processes stopped; references: the live text rate "
              "of §1 and the raw L1 read.", "",
              "| measure | events/s | ratio |", "|---|---:|---:|",
              f"| rebuild text | {n(rebuild['eventsPerSecond'])} ({n(rebuild['chunksPerSecond'])} chunks/s) | "
              f"{'failed: ' + rebuild['error'] if rebuild.get('error') else ''} |",
              f"| live text indexing (§1) | {n(ingest['perIndexEventsPerSecond']['text'])} | rebuild / live = "
              f"**{ratio(rebuild['eventsPerSecond'], ingest['perIndexEventsPerSecond']['text'])}** |",
              f"| raw L1 read (§1) | {n(raw['eventsPerSecond'])} | rebuild / raw = "
              f"{ratio(rebuild['eventsPerSecond'], raw['eventsPerSecond'], 3)} |",
              "", "## 8. Peak memory per process", "",
              "VmHWM from `/proc/PID/status` at the end of §4 (worker, sinks), of a planner process that answered "
              "every query kind on the largest corpus of §5, of the broker JVM, and `getrusage` of this harness "
              "process (which held the in-process measurements). Reference: the machine's memory.", "",
              "| process | peak MiB | share of RAM |", "|---|---:|---:|"]
    for name, value in results["memory"].items():
        share = f"{value / m['memoryBytes'] * 100:.1f} %" if value and m["memoryBytes"] else "–"
        lines.append(f"| {name} | {n(value / 2**20) if value else '–'} | {share} |")
    lines += ["", f"![memory]({plot_prefix}memory.png)", "",
              "## 9. Growth with corpus size", "",
              "| chunks | text MB | vector MB | structured MB | bytes/chunk (all) | text p50 | vector p50 | hybrid p50 | "
              "hybrid p50 vs smallest |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    first = steps[0]["latency"]["hybrid/indexed"]["p50"] if steps else None
    for step in steps:
        sizes, lat = step.get("indexBytes", {}), step["latency"]
        total = sum(sizes.values()) if sizes else None
        lines.append(f"| {n(step['chunks'])}{' (large run)' if step.get('source') else ''} | "
                     f"{n(sizes.get('text', 0) / 1e6, 1) if sizes else '–'} | "
                     f"{n(sizes.get('vector', 0) / 1e6, 1) if sizes else '–'} | "
                     f"{n(sizes.get('structured', 0) / 1e6, 1) if sizes else '–'} | "
                     f"{n(total / step['chunks']) if total else '–'} | {n(lat['text/indexed']['p50'], 1)} | "
                     f"{n(lat['vector/indexed']['p50'], 1)} | {n(lat['hybrid/indexed']['p50'], 1)} | "
                     f"{ratio(lat['hybrid/indexed']['p50'], first)} |")
    lines += ["", f"![growth]({plot_prefix}growth.png)", "",
              "Index build of the largest corpus (writers in this process): "
              + ", ".join(f"{k} {n(v, 1)} s" for k, v in queries["buildSeconds"].items()) + ".", "",
              "Details of each area and the older per-script figures: [docs/benchmarks.md](docs/benchmarks.md).", ""]
    return "\n".join(lines)


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
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker_settings = None
    broker_pid = None
    if not bootstrap:
        from deploy.kafka.broker import ensure_broker, local_broker_status

        broker_settings = Settings.from_env({}, home=work / "broker")
        bootstrap = ensure_broker(broker_settings)
        status = local_broker_status(broker_settings)
        broker_pid = status.pid if status else None
    else:
        broker_pid = pid_listening(int(bootstrap.split(",")[0].rsplit(":", 1)[1]))
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
        results["large"] = large
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
