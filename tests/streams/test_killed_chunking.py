"""The chunking stage killed in the middle of a batch (SIGKILL of the worker) and restarted from
what reached the changelog: no progress marker ever passes a chunk emitted after it.

A batch's table writes are separate changelog records; a worker killed while they are under way
leaves any subset of them stored, within what the stage/effects contract orders
(:mod:`streams.stages.effects`: summaries only after every write before them is acknowledged).
The restarted stage restores those tables and reads again from the committed offsets. A marker
M on a chunks partition tells every sink that each chunk of its log with ``maxSeq <= M`` on that
partition is already before it: a chunk that arrives after it for the first time is skipped by
all of them for good (sinks.runner). A progress stored ahead of the session states it sums up
let exactly that happen (a reliability round lost 5 chunks after one ``kill-worker``)."""

from __future__ import annotations

import copy
import random
from typing import Any

import orjson
from hypothesis import example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from streams.stages import ChunkingStage, Gaps, Record, TableWrite, keys
from tests.streams.stages_kit import Worker, interleaved, l1_batch

PARTITIONS = 2


def redacted_topic(seed: int, every: int) -> list[Record]:
    """The redacted records of a seeded multi-session log, both partitions merged in a seeded
    order (as one consumer reads them), each partition in offset order."""
    worker = Worker(partitions=PARTITIONS, every=every)
    l1 = l1_batch(interleaved(seed))
    rng = random.Random(seed)
    start = 0
    while start < len(l1):
        end = start + rng.randint(1, 6)
        worker.redact(l1[start:end])
        start = end
    worker.perform(worker.redaction, worker.redaction.flush({}, {}))
    per_partition = [worker.redacted(partition) for partition in range(PARTITIONS)]
    merged: list[Record] = []
    while any(per_partition):
        merged.append(rng.choice([queue for queue in per_partition if queue]).pop(0))
    return merged


def landed(rng: random.Random, writes: list[TableWrite], summaries: list[TableWrite]) -> list[TableWrite]:
    """The writes of a batch a kill left stored: any subset of the writes, or all of them and any
    subset of the summaries (made only once the writes were acknowledged)."""
    if not summaries or rng.random() < 0.5:
        return [write for write in writes if rng.random() < 0.5]
    return [*writes, *(write for write in summaries if rng.random() < 0.5)]


def markers_passed(chunks_topic: dict[int, list[dict[str, Any]]]) -> list[str]:
    """Chunks that arrived, for the first time, after a marker of their partition that covers them."""
    passed = []
    for partition, bodies in chunks_topic.items():
        before: set[str] = set()
        marker = 0
        for body in bodies:
            if body["kind"] == "progress":
                marker = max(marker, body["seq"])
            elif body["kind"] == "chunk":
                if body["chunkId"] not in before and body["maxSeq"] <= marker:
                    passed.append(f"partition {partition}: chunk {body['sessionId']} seqs {body['minSeq']}-"
                                  f"{body['maxSeq']} first sent after marker {marker}")
                before.add(body["chunkId"])
    return passed


def killed_and_restarted(seed: int, every: int, plan: int) -> list[str]:
    """Chunk the redacted topic of a seeded log through 1-3 kills at seeded points (``plan``);
    the chunks that passed a marker."""
    topic = redacted_topic(seed, every)
    rng = random.Random(plan)
    chunker = Worker(partitions=PARTITIONS, every=every).chunking.chunker
    changelog: dict[str, dict[str, Any]] = {keys.CHUNKER_SESSIONS: {}, keys.CHUNKER_PROGRESS: {}}
    chunks_topic: dict[int, list[dict[str, Any]]] = {partition: [] for partition in range(PARTITIONS)}
    committed = dict.fromkeys(range(PARTITIONS), 0)  # per partition, the next offset to read
    kills = rng.randint(1, 3)
    for life in range(kills + 1):
        # A restarted worker: its tables restored from the changelog, nothing announced yet.
        tables = copy.deepcopy(changelog)
        stage = ChunkingStage(chunker, tables=tables, gaps=Gaps(), partitions=PARTITIONS)
        todo = [record for record in topic if record.offset >= committed[record.partition]]
        kill_at = rng.randint(0, max(0, len(todo) - 1)) if life < kills else len(todo)
        acked: dict[int, int] = {}
        position = 0
        while position < len(todo):
            batch = todo[position:position + rng.randint(1, 8)]
            effects = stage.apply(batch)
            for record in effects.records:  # every chunk is acknowledged before any write
                if record.topic == "chunks":
                    chunks_topic[record.partition or 0].append(orjson.loads(record.value))
            if position + len(batch) > kill_at:  # killed while this batch's writes were under way
                for write in landed(rng, effects.writes, effects.summaries):
                    changelog[write.table][write.key] = copy.deepcopy(write.value)
                break
            for write in [*effects.writes, *effects.summaries]:
                tables[write.table][write.key] = write.value
                changelog[write.table][write.key] = copy.deepcopy(write.value)
            stage.commit(effects)
            for marker in effects.markers:
                chunks_topic[marker.partition].append(orjson.loads(marker.record.value))
                stage.sent(marker)
            acked.update({record.partition: record.offset + 1 for record in batch})
            if rng.random() < 0.3:  # the group commits now and then (after the producer's flush)
                committed.update(acked)
            position += len(batch)
        else:
            committed.update(acked)
    return markers_passed(chunks_topic)


@hsettings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), every=st.integers(1, 8), plan=st.integers(0, 2**32 - 1))
@example(seed=942612964, every=2, plan=1583512027)  # each of these lost a chunk when a progress
@example(seed=4043066183, every=8, plan=3290276421)  # could be stored without its session states
@example(seed=4238422698, every=6, plan=765807111)
@example(seed=3625728493, every=3, plan=2456006525)
def test_no_marker_passes_a_chunk_across_kills_at_any_point(seed: int, every: int, plan: int) -> None:
    assert killed_and_restarted(seed, every, plan) == []
