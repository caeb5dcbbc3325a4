"""Pipeline benchmark (SPEC §11): end-to-end indexing throughput against the raw L1 read rate,
and append → searchable freshness lag, measured in one run against a real broker.

One run:

1. appends N ASP events of the benchmark workload (`benchmarks.workload`; default 20 000, 16 sessions
   open at a time) to one log, after a warm-up session that the worker has fully indexed;
2. (a) raw read: events/s at which kafka-python reads the L1 topic from offset 0 to its end
   (read_committed, no decoding; best of two reads) -- the limit for this design;
3. (b) the pure stages in this process over the same events: ``redact_event`` alone, and
   ``chunk_stream`` alone (regular ticks every K seqs, default chunker config, real tokenizer);
4. (c) end to end: one real ``usl worker`` (faust: redaction + chunking agents), events/s from
   the first append until every chunks partition's progress marker reaches the L1 head, and the
   worker process's CPU time per event over that phase (steadier than the rate on a shared box);
5. (d) freshness: with the worker and the text sink running, appends at a steady rate (default
   100 events/s for 40 s) and reports, per event, the time from its append to the first text
   watermark whose ``builtThroughSeq`` covers it (p50/p90/p99/max). An event in an open turn
   is covered only once its turn closes (SPEC §5), so the lag includes the wall-clock length of
   turns at that append rate; the sink commits a moving watermark about
   ``USL_SINK_COMMIT_GAP_SECONDS`` after its last commit (group commit;
   ``benchmarks/bench_freshness.py`` splits the lag per index kind).

Prints every figure and the ratios to the raw read rate; asserts nothing. The broker is
``KAFKA_BOOTSTRAP_SERVERS`` if set, else a local single-node broker started (and stopped) here.

Usage::

    .venv/bin/python benchmarks/bench_pipeline.py [--events 20000] [--rate 100] [--seconds 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.workload when run as a script

from benchmarks.measure import Tail, raw_read
from benchmarks.workload import WorkloadConfig, generate
from deploy.testing import Stack
from streams.chunking import Chunker, ChunkerConfig, chunk_stream, default_tokenizer, make_ticks
from streams.l1 import L1Producer
from streams.redaction import policy_hash, redact_event
from streams.settings import Settings
from streams.testing import append_events
from streams.topics import Topics

__all__ = ["main", "make_events"]

LOG = "default"


def make_events(count: int, *, first_session: int = 0, concurrent: int = 16) -> list[dict[str, Any]]:
    """At least ``count`` validated events of whole sessions (every turn closed, so the markers
    can reach the head) from the benchmark workload, ``concurrent`` sessions open at a time;
    ``first_session`` seeds it, so different values give different sessions."""
    config = WorkloadConfig(seed=first_session, log_id=LOG, concurrent=concurrent)
    return list(generate(events=count, config=config))


class Markers:
    """Per chunks partition, the highest progress marker of the log seen so far."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.seqs: dict[int, int] = {}
        self.changed = threading.Condition()

    def on_record(self, partition: int, key: bytes | None, body: dict[str, Any], seen: float) -> None:
        if body.get("kind") == "progress" and body.get("logId") == LOG:
            with self.changed:
                self.seqs[partition] = max(self.seqs.get(partition, 0), int(body["seq"]))
                self.changed.notify_all()

    def floor(self) -> int:
        return min(self.seqs.values()) if len(self.seqs) == self.partitions else 0

    def wait(self, seq: int, timeout: float) -> float:
        """Block until the floor reaches ``seq``; return the monotonic time it did."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.floor() < seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"progress markers stayed at {self.floor()} < {seq}")
                self.changed.wait(timeout=min(left, 0.2))
        return time.monotonic()


class TextWatermark:
    """Every (time seen, builtThroughSeq) of the text watermark of the log."""

    def __init__(self) -> None:
        self.history: list[tuple[float, int]] = []
        self.lock = threading.Lock()

    def on_record(self, partition: int, key: bytes | None, body: dict[str, Any], seen: float) -> None:
        if key == f"{LOG}/text".encode():
            with self.lock:
                self.history.append((seen, int(body["builtThroughSeq"])))

    def current(self) -> int:
        with self.lock:
            return self.history[-1][1] if self.history else 0

    def covered_at(self, seq: int) -> float | None:
        with self.lock:
            return next((seen for seen, through in self.history if through >= seq), None)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux): on a shared machine, CPU per event
    varies much less than the wall-clock rate."""
    return sum(cpu_split(pid))


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far (Linux). System time is mostly the kernel's
    side of socket writes and reads to the broker."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


class Profiler:
    """``py-spy record`` attached to a process until :meth:`stop` (raw collapsed stacks, one
    line per stack with its sample count). py-spy is not a dependency: ``pip install py-spy``."""

    def __init__(self, pid: int, out: Path, rate: int = 100, *, idle: bool = False) -> None:
        py_spy = Path(sys.executable).with_name("py-spy")
        wall = ["--idle", "--threads"] if idle else []  # idle samples too, each stack under its thread
        self.proc = subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                                      *wall, "--nonblocking", "--output", str(out)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def self_time(raw: Path, top: int = 25) -> list[tuple[str, float]]:
    """(frame, share of samples) of the frames where most samples end (self time)."""
    counts: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.rsplit(";", 1)[-1]
        counts[leaf] = counts.get(leaf, 0) + int(count)
        total += int(count)
    return [(frame, n / total) for frame, n in sorted(counts.items(), key=lambda kv: -kv[1])[:top]] if total else []


def ingest_vs_producer(bootstrap: str, events: list[dict[str, Any]], root: Path, *,
                       prefix: str | None = None, pairs: int = 3) -> dict[str, Any]:
    """events/s of ``usl ingest FILE`` (the whole command, a fresh process) against a plain
    kafka-python producer sending the same records (canonical bytes read from the same file) with
    the L1 producer's settings, each into its own fresh topics (named ``prefix``...).

    Then ``pairs`` pairs of whole processes, alternating: ``usl ingest`` of the file (under a
    logId new to L1 each time, into topics that exist) and ``benchmarks/plain_producer.py send``
    of it; ``ingest_vs_plain_process`` is the median of the pairs' rate ratios (issue #16's
    yardstick: both pay their interpreter, imports and first metadata)."""
    from kafka import KafkaProducer

    import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
    from streams.asp import canonical_bytes

    _cache_bytecode()
    root.mkdir(parents=True, exist_ok=True)
    path = root / "events.jsonl"
    path.write_bytes(b"".join(canonical_bytes(event) + b"\n" for event in events))
    prefix = prefix or f"bench{uuid.uuid4().hex[:8]}"
    plain = Settings.from_env({}, home=root / "plain", bootstrap_servers=bootstrap, topic_prefix=f"{prefix}plain.")
    from streams.topics import ensure_topics

    ensure_topics(bootstrap, plain)
    records = path.read_bytes().splitlines()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                             batch_size=256 * 1024, max_in_flight_requests_per_connection=5,
                             max_request_size=plain.max_message_bytes, client_id="usl-bench-plain")
    topic = Topics.from_settings(plain).l1
    producer.partitions_for(topic)  # metadata outside the timing, as usl ingest's registry lookup
    began, cpu_began = time.perf_counter(), time.process_time()
    for event, value in zip(events, records, strict=True):
        producer.send(topic, key=event["sessionId"].encode(), value=value, partition=0)
    producer.flush()
    plain_seconds, plain_cpu = time.perf_counter() - began, time.process_time() - cpu_began
    producer.close()

    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    usl = Path(sys.executable).with_name("usl")

    def ingest(file: Path, home: str) -> tuple[int, float, float]:
        """(events appended, wall seconds, CPU seconds) of one ``usl ingest`` process."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        out = subprocess.run([str(usl), "ingest", str(file), "--format", "asp", "--json"],
                             env={**env, "USL_HOME": str(root / home), "USL_TOPIC_PREFIX": f"{prefix}{home}."},
                             capture_output=True, check=True)
        seconds = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        return int(json.loads(out.stdout)["eventsAppended"]), seconds, cpu

    # The fixed cost of a process (imports, broker metadata, topic checks): one event's ingest.
    one = root / "one.jsonl"
    one.write_bytes(records[0] + b"\n")
    _, start_seconds, start_cpu = ingest(one, "start")
    appended, ingest_seconds, ingest_cpu = ingest(path, "ingest")
    plain_rate, plain_cpu_rate = len(records) / plain_seconds, len(records) / max(plain_cpu, 1e-3)
    work_seconds = max(ingest_seconds - start_seconds, 1e-3)
    ingest_cpu_rate = appended / max(ingest_cpu - start_cpu, 1e-3)
    processes = _process_pairs(root, path, events, env, prefix, plain, pairs) if pairs > 0 else {}
    return {**processes, "ingest_events": appended, "ingest_mb": round(len(b"".join(records)) / 1e6, 2),
            "ingest_events_per_second": appended / ingest_seconds,
            "ingest_start_seconds": round(start_seconds, 2),
            "ingest_events_per_second_after_start": appended / work_seconds,
            "ingest_events_per_cpu_second": ingest_cpu_rate,
            "kafka_python_produce_events_per_second": plain_rate,
            "kafka_python_events_per_cpu_second": plain_cpu_rate,
            "ingest_vs_kafka_python": round(appended / ingest_seconds / plain_rate, 3),
            "ingest_after_start_vs_kafka_python": round(appended / work_seconds / plain_rate, 3),
            "ingest_vs_kafka_python_cpu": round(ingest_cpu_rate / plain_cpu_rate, 3)}


def _cache_bytecode() -> None:
    """Compile the packages ``usl ingest`` imports (the tree this process imports them from), so
    every process below starts as an installed package does: under PYTHONDONTWRITEBYTECODE (as on
    the shared machine) each one compiled every module changed since the cache was last written:
    up to 0.05 s of CPU of a ~1 s command when they are many (issue #16)."""
    import compileall

    import deploy
    import streams

    for package in (streams, deploy):
        compileall.compile_dir(str(Path(str(package.__file__)).parent), quiet=1)


def _process_pairs(root: Path, path: Path, events: list[dict[str, Any]], env: dict[str, str], prefix: str,
                   plain: Settings, pairs: int) -> dict[str, Any]:
    """Whole ``usl ingest`` processes against whole plain producer processes, in turn."""
    from streams.asp import canonical_bytes
    from streams.topics import ensure_topics

    existing = Settings.from_env({}, home=root / "proc", bootstrap_servers=plain.bootstrap_servers,
                                 topic_prefix=f"{prefix}proc.")
    ensure_topics(env["KAFKA_BOOTSTRAP_SERVERS"], existing)
    usl = Path(sys.executable).with_name("usl")
    plain_producer = [sys.executable, str(Path(__file__).with_name("plain_producer.py")), "send", str(path),
                      Topics.from_settings(plain).l1]

    def timed(command: list[str], extra: dict[str, str]) -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        subprocess.run(command, env={**env, **extra}, capture_output=True, check=True)
        seconds = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return seconds, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime

    rows: list[tuple[float, float, float, float]] = []
    for run in range(pairs):
        copy = root / f"run{run}.jsonl"  # a log new to L1: a second ingest of the same log appends nothing
        copy.write_bytes(b"".join(canonical_bytes({**event, "logId": f"run{run}"}) + b"\n" for event in events))
        ingest = timed([str(usl), "ingest", str(copy), "--format", "asp", "--json"],
                       {"USL_HOME": str(root / f"proc{run}"), "USL_TOPIC_PREFIX": existing.topic_prefix})
        rows.append((*ingest, *timed(plain_producer, {})))
        copy.unlink()
    median = statistics.median
    return {"process_pairs": pairs,
            "ingest_process_seconds": round(median(r[0] for r in rows), 3),
            "ingest_process_cpu_seconds": round(median(r[1] for r in rows), 3),
            "plain_process_seconds": round(median(r[2] for r in rows), 3),
            "plain_process_cpu_seconds": round(median(r[3] for r in rows), 3),
            "ingest_vs_plain_process": round(median(r[2] / r[0] for r in rows), 3),
            "ingest_vs_plain_process_cpu": round(median(r[3] / r[1] for r in rows), 3)}


def send_cost(bootstrap: str, count: int, rounds: int = 3) -> dict[str, Any]:
    """CPU microseconds per record of each way the worker can send a record, in this process
    against the broker (the producer settings of ``streams.app``; 2 KB values): faust's
    ``Topic.send`` and ``Collection.send_changelog`` against the app producer's own ``send`` with
    the same bytes. Each way sends ``count`` records and awaits them; the best of ``rounds``."""
    import asyncio

    import faust
    from kafka.admin import KafkaAdminClient, NewTopic

    import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)

    name = f"bench{uuid.uuid4().hex[:8]}.send"
    app = faust.App(name, broker=f"kafka://{bootstrap}", store="memory://", producer_acks=-1, web_enabled=False,
                    producer_max_batch_size=524288, producer_linger=0.005,
                    datadir=tempfile.mkdtemp(prefix="usl-bench-send-"))
    raw: dict[str, Any] = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
    topic = app.topic(name, partitions=2, **raw)
    table: Any = app.Table("state", default=None, partitions=2)
    changelog = table.changelog_topic.get_topic_name()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(name, 2, 1), NewTopic(changelog, 2, 1)])
    admin.close()
    value, state = b"x" * 2000, {"text": "x" * 2000, "seqs": [1, 2, 3]}

    async def ways() -> dict[str, float]:
        producer = await app.maybe_start_producer()
        producer.buffer.max_messages = 10 * count  # send_changelog would stall at faust's default 100

        async def one(way: str, index: int) -> Any:
            if way == "topic_send":
                return await topic.send(key=b"%d" % index, value=value, partition=index % 2, force=True)
            if way == "producer_send":
                return await producer.send(name, b"%d" % index, value, index % 2, None, None)
            if way == "send_changelog":
                return table.send_changelog(index % 2, f"{index}", state)
            key, _ = table.changelog_topic.prepare_key(f"{index}", table.key_serializer)
            body, _ = table.changelog_topic.prepare_value(state, table.value_serializer)
            return await producer.send(changelog, key, body, index % 2, None, None)

        best: dict[str, float] = {}
        for _ in range(rounds):
            for way in ("topic_send", "producer_send", "send_changelog", "changelog_via_producer_send"):
                began = time.thread_time()
                futures = [await one(way, index) for index in range(count)]
                for future in futures:
                    await future
                micros = 1e6 * (time.thread_time() - began) / count
                best[way] = min(best.get(way, micros), micros)
        await producer.stop()
        return best

    return {f"{way}_cpu_us_per_record": round(micros, 1) for way, micros in asyncio.run(ways()).items()}


def raw_read_rate(settings: Settings, expected: int) -> float:
    """events/s of a plain kafka-python read of the L1 topic, start to end (best of two)."""
    best = raw_read(settings)
    if best.get("events", 0) < expected:
        raise RuntimeError(f"the raw read saw {best.get('events', 0)} of {expected} events")
    return best["eventsPerSecond"]


def pure_rates(settings: Settings, events: list[dict[str, Any]], first_seq: int) -> dict[str, Any]:
    """events/s of redact_event alone and of chunk_stream alone over the same events."""
    redact_event(events[0])  # warm caches outside the timing
    started = time.perf_counter()
    redacted = [redact_event(event).event for event in events]
    redaction_seconds = time.perf_counter() - started

    chunker = Chunker(ChunkerConfig(target_tokens=settings.chunk_tokens, overlap_tokens=settings.chunk_overlap_tokens,
                                    idle_gap_seconds=settings.idle_gap_seconds),
                      default_tokenizer(), policy_hash=policy_hash())
    chunker.tokenizer.count("warm up")
    records = make_ticks(list(enumerate(redacted, start=first_seq)), settings.tick_every_seqs)
    started = time.perf_counter()
    chunks = chunk_stream(records, chunker)
    chunking_seconds = time.perf_counter() - started
    return {"redaction_events_per_second": len(events) / redaction_seconds,
            "chunking_events_per_second": len(events) / chunking_seconds, "chunks": len(chunks)}


def freshness(settings: Settings, watermark: TextWatermark, rate: float, seconds: float, first_session: int) -> dict[str, Any]:
    """Steady appends; per event, seconds from its append to a text watermark covering it."""
    events = make_events(int(rate * seconds), first_session=first_session)
    producer = L1Producer(settings.bootstrap_servers or "", settings)
    batch_size = max(1, int(rate / 10))
    sent: list[tuple[float, int, int]] = []  # (append time, first seq, last seq)
    started = time.monotonic()
    for index in range(0, len(events), batch_size):
        due = started + index / rate
        time.sleep(max(0.0, due - time.monotonic()))
        batch = events[index:index + batch_size]
        appended = time.monotonic()
        for event in batch:
            producer.append(event)
        last = producer.flush()
        sent.append((appended, last - len(batch) + 1, last))
    producer.close()
    head = sent[-1][2]
    deadline = time.monotonic() + 180
    while watermark.current() < head and time.monotonic() < deadline:
        time.sleep(0.2)
    lags = []
    for appended, first, last in sent:
        for seq in range(first, last + 1):
            covered = watermark.covered_at(seq)
            if covered is not None:
                lags.append(covered - appended)
    lags.sort()

    def pct(p: float) -> float:
        return lags[min(len(lags) - 1, int(p / 100 * len(lags)))]

    return {"freshness_events": len(events), "freshness_covered": len(lags),
            "freshness_rate_events_per_second": round(len(events) / (sent[-1][0] - started), 1),
            "freshness_lag_p50_seconds": round(pct(50), 2), "freshness_lag_p90_seconds": round(pct(90), 2),
            "freshness_lag_p99_seconds": round(pct(99), 2), "freshness_lag_max_seconds": round(lags[-1], 2),
            "freshness_lag_mean_seconds": round(statistics.mean(lags), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=100.0, help="steady append rate of the freshness phase")
    parser.add_argument("--seconds", type=float, default=40.0, help="length of the freshness phase")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", type=Path, help="py-spy the worker during the end-to-end phase; raw stacks here")
    parser.add_argument("--no-freshness", action="store_true", help="stop after the end-to-end and raw-read phases")
    parser.add_argument("--ingest-only", action="store_true",
                        help="only `usl ingest` of --events workload events against a plain kafka-python producer")
    parser.add_argument("--pairs", type=int, default=5,
                        help="with --ingest-only: pairs of whole processes (usl ingest, plain_producer.py send) in turn")
    parser.add_argument("--send-cost", type=int, metavar="N",
                        help="only the CPU per record of faust's Topic.send and send_changelog against the producer's send, N records each")
    args = parser.parse_args(argv)

    if args.send_cost:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            parser.error("--send-cost needs KAFKA_BOOTSTRAP_SERVERS")
        for key, value in send_cost(bootstrap, args.send_cost).items():
            print(f"{key:>40}: {value}")
        return 0

    if args.ingest_only:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            parser.error("--ingest-only needs KAFKA_BOOTSTRAP_SERVERS")
        result = ingest_vs_producer(bootstrap, make_events(args.events),
                                    Path(tempfile.mkdtemp(prefix="usl-bench-ingest-")), pairs=args.pairs)
        for key, value in result.items():
            print(f"{key:>40}: {round(value) if isinstance(value, float) and value >= 100 else value}")
        return 0

    home = Path(tempfile.mkdtemp(prefix="usl-bench-pipeline-"))
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker_settings = None
    if not bootstrap:
        from deploy.kafka.broker import ensure_broker

        broker_settings = Settings.from_env({}, home=home / "broker")
        bootstrap = ensure_broker(broker_settings)
    settings = Settings.from_env({}, home=home, bootstrap_servers=bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:8]}.",
                                 l1_partitions=2, stream_partitions=2)
    report: dict[str, Any] = {"events": args.events, "stream_partitions": settings.stream_partitions,
                              "tick_every_seqs": settings.tick_every_seqs}
    stack = Stack(settings)
    markers = Markers(settings.stream_partitions)
    watermark = TextWatermark()
    tails: list[Tail] = []
    try:
        worker = stack.worker()
        tails.append(Tail(bootstrap, Topics.from_settings(settings).chunks, markers.on_record))
        warm_head = append_events(settings, make_events(1, first_session=10_000_000, concurrent=2))
        markers.wait(warm_head, timeout=180)  # the worker has joined and indexed a session

        events = make_events(args.events)
        report["events"] = len(events)
        report["l1_mb"] = round(sum(len(orjson.dumps(event)) for event in events) / 1e6, 2)
        profiler = Profiler(worker.pid, args.profile) if args.profile else None
        user_started, system_started = cpu_split(worker.pid)
        started = time.monotonic()
        head = append_events(settings, events)
        appended = time.monotonic()
        done = markers.wait(head, timeout=1800)
        user, system = cpu_split(worker.pid)
        worker_user, worker_system = user - user_started, system - system_started
        worker_cpu = worker_user + worker_system
        if profiler is not None:
            profiler.stop()
        report["append_events_per_second"] = len(events) / (appended - started)
        report["end_to_end_events_per_second"] = len(events) / (done - started)
        report["end_to_end_seconds"] = round(done - started, 2)
        report["worker_cpu_ms_per_event"] = round(1000 * worker_cpu / len(events), 3)
        report["worker_system_cpu_share"] = round(worker_system / max(worker_cpu, 1e-9), 3)
        report["worker_mb_per_core_second"] = round(report["l1_mb"] / worker_cpu, 2)

        report["raw_read_events_per_second"] = raw_read_rate(settings, head)
        if args.no_freshness:
            return _print(report, args.json, args.profile)
        report.update(pure_rates(settings, events, warm_head + 1))

        stack.sinks("text")
        tails.append(Tail(bootstrap, Topics.from_settings(settings).watermarks, watermark.on_record))
        deadline = time.monotonic() + 300
        while watermark.current() < head and time.monotonic() < deadline:
            time.sleep(0.5)
        report["text_sink_caught_up"] = watermark.current() >= head
        report.update(freshness(settings, watermark, args.rate, args.seconds, first_session=1_000_000))
    finally:
        for tail in tails:
            tail.close()
        stack.close()
        if broker_settings is not None:
            from deploy.kafka.broker import stop_broker

            stop_broker(broker_settings)

    return _print(report, args.json, args.profile)


def _print(report: dict[str, Any], as_json: bool, profile: Path | None) -> int:
    raw = report["raw_read_events_per_second"]
    for key in ("end_to_end", "redaction", "chunking"):
        if f"{key}_events_per_second" in report:
            report[f"{key}_vs_raw_read"] = round(report[f"{key}_events_per_second"] / raw, 4)
    for key, value in list(report.items()):
        if key.endswith("_per_second") and isinstance(value, float):
            report[key] = round(value)
    if as_json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:>36}: {value}")
        if profile is not None and profile.exists():
            print("worker self time (py-spy):")
            for frame, share in self_time(profile):
                print(f"  {100 * share:5.1f} %  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
