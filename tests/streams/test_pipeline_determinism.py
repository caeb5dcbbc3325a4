"""Determinism of the stream side (SPEC §5, §10.4): the chunks the real faust worker writes are
a function of L1 alone.

One module fixture appends the same events (two logs, staggered sessions whose open turns get
cut by log-clock ticks, events long enough to be split) to four independent pipelines --
separate topic prefixes, consumer groups and state -- and runs a real ``usl worker`` on each,
concurrently, until every log's progress markers reach its L1 head:

- ``ref``  and ``twin``: 3 stream partitions (same settings, different groups);
- ``single``: 1 stream partition;
- ``dup``: 3 stream partitions, every event appended a second time (same eventIds, new seqs).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from deploy.testing import Stack
from sinks.testing import replay_chunks
from streams.settings import Settings
from streams.testing import (
    append_events,
    chunk_set,
    interleave,
    l1_seq,
    session_events,
    wait_for_markers,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LOGS = ("default", "team-a")
KNOBS = {"tick_every_seqs": 8, "idle_gap_seconds": 60.0, "chunk_tokens": 128, "chunk_overlap_tokens": 24,
         "l1_partitions": 4, "sink_batch_seconds": 0.3}


def pipeline_events(seed: int = 7) -> list[dict[str, Any]]:
    """~300 events: per log, sessions starting up to 3 minutes apart (so a lagging session's open
    turn is more than G=60 s of log time behind and gets cut by a tick), one with tool outputs
    longer than a 128-token chunk (split into overlapping parts)."""
    rng = random.Random(seed)
    start = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
    events: list[dict[str, Any]] = []
    for log_id in LOGS:
        sessions = [
            session_events(f"{log_id}-s{n}", turns=rng.randint(2, 4), seed=seed, log_id=log_id,
                           start=start + timedelta(seconds=rng.randint(0, 180)),
                           long_output_words=160 if n == 0 else 0)
            for n in range(5)
        ]
        events += interleave(*sessions, seed=seed)
    return events


@pytest.fixture(scope="module")
def runs(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Settings]]:
    """Four independent pipelines over the same events, each run to its L1 head."""
    events = pipeline_events()
    variants = {"ref": 3, "twin": 3, "single": 1, "dup": 3}
    runs: dict[str, Settings] = {}
    stacks: list[Stack] = []
    try:
        for name, partitions in variants.items():
            prefix = f"t{uuid.uuid4().hex[:10]}."
            home: Path = tmp_path_factory.mktemp(f"determinism-{name}")
            settings = Settings.from_env({}, home=home, topic_prefix=prefix, bootstrap_servers=kafka_bootstrap,
                                         stream_partitions=partitions, **KNOBS)
            runs[name] = settings
            stack = Stack(settings)
            stacks.append(stack)
            append_events(settings, events)
            if name == "dup":
                append_events(settings, events)  # the same eventIds again, at new seqs
            stack.worker()
        for settings in runs.values():
            for log_id in LOGS:
                wait_for_markers(settings, l1_seq(settings, log_id), log_ids=(log_id,), timeout=240)
        yield runs
    finally:
        for stack in stacks:
            stack.close()


def test_two_runs_of_the_same_log_give_byte_identical_chunks(runs: dict[str, Settings]) -> None:
    """(a) Two independent runs (own topics, consumer group, state) over the same L1 emit the
    same chunk ids with byte-identical records."""
    ref = chunk_set(runs["ref"])
    assert len(ref) > 40
    assert {orjson.loads(body)["logId"] for body in ref.values()} == set(LOGS)
    assert chunk_set(runs["twin"]) == ref


def test_stream_partition_count_does_not_change_the_chunks(runs: dict[str, Settings]) -> None:
    """(b) The same log through 1 stream partition and through 3 gives the same chunk set:
    ticks are broadcast to every partition, so idle cuts do not depend on routing."""
    assert chunk_set(runs["single"]) == chunk_set(runs["ref"])


def test_stream_path_equals_rebuild_path(runs: dict[str, Settings]) -> None:
    """(c) What the faust worker wrote equals what ``ReplayStream`` (the rebuild path, in
    process) derives from the same L1, byte for byte."""
    ref = chunk_set(runs["ref"])
    assert replay_chunks(runs["ref"], LOGS) == ref


def test_reingested_events_change_nothing(runs: dict[str, Settings]) -> None:
    """(d) Appending every event a second time (same eventIds, higher seqs) adds no chunk and
    changes none: the redaction stage keeps the first seq of each eventId."""
    assert l1_seq(runs["dup"], "default") > l1_seq(runs["ref"], "default")
    assert chunk_set(runs["dup"]) == chunk_set(runs["ref"])


def test_the_data_exercises_idle_cuts_and_splits(runs: dict[str, Settings]) -> None:
    """Guard for the tests above: with a huge idle gap the same log chunks differently (so tick
    cuts decided some boundaries), and some events were split into parts."""
    ref = chunk_set(runs["ref"])
    no_idle_cuts = replay_chunks(replace(runs["ref"], idle_gap_seconds=1e9), LOGS)
    assert set(no_idle_cuts) != set(ref)
    parts = [e for body in ref.values() for e in orjson.loads(body)["evidence"] if e["part"][0] > 0]
    assert parts, "no event was split into overlapping parts"
