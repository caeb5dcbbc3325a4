"""Helpers for tests that run the real pipeline processes against the session's broker.

``Stack`` starts ``usl worker`` / ``usl sink`` as real subprocesses with a test's settings,
so crash tests can kill them with SIGKILL at any point and start them again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from sinks.watermarks import read_watermarks
from streams.l1 import L1Producer, L1Reader, read_topic_to_end
from streams.settings import Settings
from streams.topics import Topics, ensure_topics


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a child process use exactly these settings."""
    env = {**os.environ}
    for name, value in {
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers, "USL_HOME": str(settings.home),
        "USL_TOPIC_PREFIX": settings.topic_prefix, "USL_L1_PARTITIONS": settings.l1_partitions,
        "USL_STREAM_PARTITIONS": settings.stream_partitions, "USL_TICK_EVERY_SEQS": settings.tick_every_seqs,
        "USL_IDLE_GAP_SECONDS": settings.idle_gap_seconds, "USL_SINK_BATCH_SECONDS": settings.sink_batch_seconds,
        "USL_SINK_BATCH_SIZE": settings.sink_batch_size, "USL_TEXT_ENGINE": settings.text_engine,
        "USL_EMBEDDER": settings.embedder, "USL_CHUNK_TOKENS": settings.chunk_tokens,
        "USL_CHUNK_OVERLAP_TOKENS": settings.chunk_overlap_tokens,
    }.items():
        if value is not None:
            env[name] = str(value)
    return env


class Stack:
    """Worker and sink subprocesses of one test; everything is killed on close()."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs = Path(settings.home) / "test-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        ensure_topics(settings.bootstrap_servers or "", settings)

    def start(self, name: str, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Run ``usl ARGS`` as ``name``; ``env`` adds variables for this process only
        (e.g. its own ``USL_METRICS_PORT``)."""
        log = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "deploy.cli", *args],
                                env={**settings_env(self.settings), **(env or {})},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc

    def worker(self, name: str = "worker", *, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self.start(name, "worker", env=env)

    def sinks(self, kinds: str = "text,vector,structured,analytics,toolresults", name: str = "sinks",
              *, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self.start(name, "sink", "--kind", kinds, env=env)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)

    def log_text(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)


def append_events(settings: Settings, events: Iterable[dict[str, Any]]) -> int:
    """Append validated events to L1; return the highest seq."""
    producer = L1Producer(settings.bootstrap_servers or "", settings)
    for event in events:
        producer.append(event)
    highest = producer.flush()
    producer.close()
    return highest


def l1_seq(settings: Settings, log_id: str = "default") -> int:
    reader = L1Reader(settings.bootstrap_servers or "", settings)
    try:
        return reader.committed_seq(log_id)
    finally:
        reader.close()


def wait_for_watermarks(settings: Settings, seq: int, kinds: Iterable[str], *, log_id: str = "default",
                        timeout: float = 180.0) -> dict[str, dict[str, Any]]:
    """Block until every kind's watermark reaches ``seq``; return the watermarks."""
    deadline = time.monotonic() + timeout
    kinds = list(kinds)
    seen: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        table = read_watermarks(settings.bootstrap_servers or "", settings)
        seen = {kind: table[(log_id, kind)] for kind in kinds if (log_id, kind) in table}
        if len(seen) == len(kinds) and all(int(w["builtThroughSeq"]) >= seq for w in seen.values()):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"watermarks did not reach {seq} in {timeout}s: {seen}")


def topic_records(settings: Settings, name: str) -> list[dict[str, Any]]:
    """Every record of a derived topic (``chunks``, ``redacted``, ...), decoded."""
    topic = getattr(Topics.from_settings(settings), name)
    return [orjson.loads(r.value) for r in read_topic_to_end(settings.bootstrap_servers or "", topic)
            if r.value is not None]


def chunk_set(settings: Settings) -> dict[str, bytes]:
    """chunkId → canonical bytes of every (non-provisional) chunk on the chunks topic."""
    chunks: dict[str, bytes] = {}
    for record in topic_records(settings, "chunks"):
        if record.get("kind") == "chunk":
            body = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
            previous = chunks.setdefault(record["chunkId"], body)
            assert previous == body, f"chunk {record['chunkId']} emitted twice with different bytes"
    return chunks
