"""Exactly-once effect of the stream side under crashes (SPEC §10.6): SIGKILL the real
``usl worker`` at random points while events are still being appended, restart it, and the
chunks topic ends up holding exactly the chunks of an uninterrupted run -- nothing lost, no id
with two contents -- with progress markers that never go backwards and never claim a seq
before the chunk holding it was written.

The uninterrupted reference is ``ReplayStream`` over the same L1 (the in-process rebuild path);
``test_pipeline_determinism`` proves it equals what an uninterrupted faust worker writes.
The random schedule comes from ``USL_CRASH_SEED`` (default: a fresh seed, printed on failure).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deploy.testing import Stack
from sinks.testing import replay_chunks
from streams.settings import Settings
from streams.testing import (
    append_events,
    check_markers,
    chunk_set,
    chunks_topic,
    interleave,
    l1_seq,
    session_events,
    wait_for_markers,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LOGS = ("default", "team-a")


def crash_events(seed: int) -> list[dict[str, Any]]:
    """~400 events over two logs: 7 sessions per log with staggered starts (idle cuts by ticks)
    and one session with outputs longer than a chunk (split events)."""
    rng = random.Random(seed)
    start = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    logs: list[list[dict[str, Any]]] = []
    for log_id in LOGS:
        sessions = [
            session_events(f"crash-{log_id}-s{n}", turns=rng.randint(2, 4), seed=seed, log_id=log_id,
                           start=start + timedelta(seconds=rng.randint(0, 240)),
                           long_output_words=160 if n == 0 else 0)
            for n in range(7)
        ]
        logs.append(interleave(*sessions, seed=seed))
    return interleave(*logs, seed=seed)  # the logs' appends mixed, each log in its own order


def test_sigkilled_worker_loses_and_duplicates_nothing(make_settings: Callable[..., Settings],
                                                        fast_group_failover: None) -> None:
    """Four SIGKILLs at random delays (during start-up, rebalance, processing) while a producer
    appends ~400 events in small batches; after the last restart catches up, the chunks topic
    deduplicated by id equals the uninterrupted reference, byte for byte."""
    seed = int(os.environ.get("USL_CRASH_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    settings = make_settings(stream_partitions=3, tick_every_seqs=8, idle_gap_seconds=60.0,
                             chunk_tokens=128, chunk_overlap_tokens=24)
    events = crash_events(seed)
    batches = [events[i:i + 25] for i in range(0, len(events), 25)]
    pauses = [rng.uniform(0.3, 2.0) for _ in batches]
    appended = threading.Event()
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            for batch, pause in zip(batches, pauses, strict=True):
                append_events(settings, batch)
                time.sleep(pause)
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)
        finally:
            appended.set()

    stack = Stack(settings)
    kills: list[float] = []
    try:
        stack.worker()
        thread = threading.Thread(target=appender, name="appender", daemon=True)
        thread.start()
        started = time.monotonic()
        for _ in range(4):
            time.sleep(rng.uniform(2.0, 9.0))
            stack.kill("worker")  # SIGKILL of the whole process group
            kills.append(round(time.monotonic() - started, 1))
            time.sleep(rng.uniform(0.0, 1.5))
            stack.worker()
        thread.join(timeout=180)
        assert not errors, errors
        assert appended.is_set()
        context = f"seed={seed} kills at {kills}s"
        for log_id in LOGS:
            wait_for_markers(settings, l1_seq(settings, log_id), log_ids=(log_id,), timeout=240)
    finally:
        stack.close()

    assert sum(l1_seq(settings, log_id) for log_id in LOGS) >= len(events)
    downstream = chunk_set(settings)  # asserts that no chunk id appears with two contents
    reference = replay_chunks(settings, LOGS)
    assert set(downstream) - set(reference) == set(), f"chunks no uninterrupted run emits ({context})"
    assert set(reference) - set(downstream) == set(), f"chunks lost ({context})"
    assert downstream == reference, context
    copies = Counter(body["chunkId"] for _, _, body in chunks_topic(settings) if body.get("kind") == "chunk")
    print(f"{context}: {len(reference)} chunks, {sum(copies.values()) - len(copies)} duplicate records")
    for log_id in LOGS:
        check_markers(settings, log_id)
