"""Sink shards benchmark: one ``text,vector`` sink against two shards over the same chunks.

A real worker (``usl worker``) chunks ``--sessions`` synthetic sessions
(:func:`streams.testing.session_events`) on a real broker with ``--partitions`` stream
partitions; a structured sink tells when it is done. Then, ``--runs`` times, alternately:
one ``usl sink --kind text,vector`` process, and two ``usl sink --kind text,vector --shard I/2``
processes, each into a fresh ``USL_HOME``, timed from the start of the processes until every
current generation (each shard's) is built through the log's head. Process start (imports,
the embedder) is inside the time, as it is when a shard moves to another machine.

Usage::

    KAFKA_BOOTSTRAP_SERVERS=<broker> .venv/bin/python -W ignore benchmarks/bench_shards.py \
        [--sessions 2000] [--runs 3] [--partitions 4]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

from deploy.testing import Stack
from sinks.generations import GenerationStore
from sinks.shards import Shard
from sinks.testing import wait_for_raw_watermarks
from streams.settings import Settings
from streams.testing import append_events, chunk_set, interleave, session_events

__all__ = ["chunk_the_log", "index_seconds", "main"]

_KINDS = ("text", "vector")


def _built_through(home: Path, shards: int) -> int:
    """The lowest builtThroughSeq over every current generation of text and vector in ``home``."""
    names = [None] if shards == 1 else [Shard(i, shards).name for i in range(shards)]
    lowest = None
    for kind in _KINDS:
        for name in names:
            manifest = GenerationStore(home / "indexes", "default", kind, shard=name).current()
            through = 0 if manifest is None else manifest.built_through_seq
            lowest = through if lowest is None else min(lowest, through)
    return lowest or 0


def index_seconds(stack: Stack, home: Path, shards: int, head: int, timeout: float = 1200.0) -> float:
    """Seconds from starting ``shards`` ``usl sink --kind text,vector`` processes into a fresh
    ``home`` until every current generation (each shard's) is built through ``head``."""
    started = time.monotonic()
    names = []
    for index in range(shards):
        name = f"sink-{index}"
        args = ["sink", "--kind", ",".join(_KINDS)] + (["--shard", f"{index}/{shards}"] if shards > 1 else [])
        stack.start(name, *args, env={"USL_HOME": str(home)})
        names.append(name)
    try:
        while _built_through(home, shards) < head:
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"{shards} shard(s) did not reach seq {head} in {timeout:.0f}s")
            time.sleep(0.2)
        return time.monotonic() - started
    finally:
        for name in names:
            stack.kill(name)


def chunk_the_log(stack: Stack, root: Path, sessions: int) -> tuple[int, int, int]:
    """Append ``sessions`` synthetic sessions, chunk them with the stack's ``usl worker`` and stop
    it once a structured probe sink is at the head: (events, head seq, chunks on usl.chunks)."""
    settings = stack.settings
    stack.worker()
    events = interleave(*[session_events(f"b-{i:04d}", turns=4, seed=i,
                                         long_output_words=300 if i % 3 == 0 else 0)
                          for i in range(sessions)], seed=1)
    head = append_events(settings, events)
    stack.start("probe", "sink", "--kind", "structured", env={"USL_HOME": str(root / "probe")})
    wait_for_raw_watermarks(settings, head, ["default/structured"], timeout=1800)
    stack.kill("probe")
    stack.kill("worker")
    return len(events), head, len(chunk_set(settings))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    if not os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        raise SystemExit("set KAFKA_BOOTSTRAP_SERVERS to a running broker")
    settings = Settings.from_env(dict(os.environ), home=root / "worker", topic_prefix=f"tb{uuid.uuid4().hex[:8]}.",
                                 l1_partitions=4, stream_partitions=args.partitions)
    stack = Stack(settings)
    try:
        events, head, chunks = chunk_the_log(stack, root, args.sessions)
        print(f"{events} events, {chunks} chunks, {args.partitions} partitions of usl.chunks")
        print("| run | sinks | seconds | chunks/s (text+vector, with process start) |")
        print("|---:|---|---:|---:|")
        for run in range(args.runs):
            for shards in (1, 2):
                seconds = index_seconds(stack, root / f"run{run}-{shards}", shards, head)
                label = "one sink" if shards == 1 else f"{shards} shards"
                print(f"| {run + 1} | {label} | {seconds:.1f} | {chunks / seconds:,.0f} |", flush=True)
    except TimeoutError as error:
        raise SystemExit(str(error)) from error
    finally:
        stack.close()


if __name__ == "__main__":
    main()
