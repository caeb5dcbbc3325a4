"""Benchmark measurements (SPEC §11): the workload scales, the machine and its processes, the
topic followers, and each phase of ``benchmarks.harness`` -- ingest and freshness, stage and
sink rates, rebuild, queries and index growth. Each function returns plain figures (dicts);
``benchmarks.plot`` draws them and ``benchmarks.report`` writes BENCHMARKS.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import platform
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from kafka import KafkaConsumer, TopicPartition

import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
from benchmarks.workload import WorkloadConfig, generate
from sinks.kinds import ALL_KINDS
from streams.settings import Settings

__all__ = [
    "KINDS", "LOG", "ROOT", "SCALES", "Coverage", "Scale", "Tail", "append", "bench_broker", "committed", "cpu_seconds",
    "ingest_and_freshness", "interleaved_queries", "load_large", "machine", "pct", "pid_listening",
    "query_growth", "raw_read", "rebuild_rate", "recall_at_10", "say", "sink_rates", "stage_rates",
    "steady", "tree_hwm", "vm_hwm",
]

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
    build_batch: int = 10_000        # chunks per generation of the query corpus (tiny: small, so merges happen)


SCALES = {
    "tiny": Scale(events=400, sink_events=400, whoosh_chunks=30, fresh_rates=(40,), fresh_seconds=4, query_sizes=(500, 1500),
                  queries=10, recall_queries=20, tail_events=50, embedder="hash:256", sink_per_process=False,
                  build_batch=100),
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


def bench_broker(work: Path) -> tuple[str, Settings | None, int | None]:
    """(bootstrap servers, settings of the broker started here or None, its pid) of a benchmark:
    ``KAFKA_BOOTSTRAP_SERVERS`` when set, else a local broker of its own under ``work``."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap:
        return bootstrap, None, pid_listening(int(bootstrap.split(",")[0].rsplit(":", 1)[1]))
    from deploy.kafka.broker import ensure_broker, local_broker_status

    settings = Settings.from_env({}, home=work / "broker")
    bootstrap = ensure_broker(settings)
    status = local_broker_status(settings)
    return bootstrap, settings, status.pid if status else None


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
    """Build the query corpus of bench_query in steps (``bench_query.build_steps``: the log
    appended, the indexes written as the sinks write them, vector merges in the background);
    at each step latency, recall and bytes; a planner process's peak memory at the last two."""
    from benchmarks.bench_query import CorpusBuilder, build_steps
    from planner.acl import parse_principal
    from planner.engine import Planner
    from sinks.generations import GenerationStore
    from sinks.runner import index_root
    from sinks.watermarks import WatermarkFollower

    bootstrap = settings.bootstrap_servers or ""
    root = index_root(settings)
    principal = parse_principal("tenant:acme/user:bench/groups:ops")
    follower = WatermarkFollower(bootstrap, settings).start()
    builder = CorpusBuilder(settings)
    embedder = builder.writers["vector"].embedder  # type: ignore[attr-defined]
    steps: list[dict[str, Any]] = []
    build: dict[str, Any] = {}
    try:
        for number, build in enumerate(build_steps(settings, bootstrap, sizes, scale.tail_events, builder,
                                                                scale.build_batch), start=1):
            target, through = build["chunks"], build["builtThroughSeq"]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                    int(follower.snapshot().get((LOG, kind), {}).get("builtThroughSeq", 0)) < through
                    for kind in builder.writers):
                time.sleep(0.1)
            say(f"queries at {target} chunks (built in {build['totalSeconds']:.0f} s so far) ...")
            step: dict[str, Any] = {"chunks": target, "indexBytes": {}, "latency": {}, "build": build}
            for kind in builder.writers:
                manifest = GenerationStore(root, LOG, kind).current()
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
            step["recall"] = recall_at_10(vector_store.generation_dir(current.generation_id), embedder,
                                          scale.recall_queries)
            if number >= len(sizes) - 1:  # two points of the planner's memory growth
                say(f"planner process probe at {target} chunks (peak memory) ...")
                step["plannerPeakBytes"] = _probe(settings, max(10, scale.queries // 5))
            steps.append(step)
    finally:
        follower.stop()
    return {"steps": steps, "buildSeconds": build.get("writeSeconds", {}), "build": build,
            "plannerPeakBytes": steps[-1]["plannerPeakBytes"], "embedder": settings.embedder,
            "textEngine": settings.text_engine}


def _probe(settings: Settings, queries: int) -> int:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_planner_probe, args=(settings, queries, queue))
    child.start()
    peak = int(queue.get(timeout=900))
    child.join(timeout=60)
    return peak


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


