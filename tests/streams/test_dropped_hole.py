"""A hole whose records faust drops on every read is never accepted: the worker restarts.

faust hands a partition's records on in fetches; after the worker seeks a partition back to read
a hole again, the rest of a fetch still being handed on moves faust's read offset past the hole,
and the hole's records, read again, are dropped below it. Under load that repeated on every read
again, the worker accepted the hole as transaction markers, and its events reached no index (a
fault-suite run under load: "accepting a gap in ('rel.l1', 0) before offset 3704", 38 chunks in
no index, behind progress markers that claimed them).

Here the real ``usl worker`` runs with a hook (a ``sitecustomize`` on its PYTHONPATH, test code
only) that makes its consumer drop every L1 record of one session each time it reads it, first or
again. The worker must find the hole, read it again, ask the broker, hear that the broker holds
records there, and exit for a restart; the restarted worker (without the hook) reads them from
the committed offset, and every event reaches the redacted topic and the chunks' evidence.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from deploy.testing import Stack, hooked
from streams.settings import Settings
from streams.testing import (
    append_events,
    interleave,
    l1_seq,
    session_events,
    topic_records,
    wait_for_markers,
)

pytestmark = [pytest.mark.kafka]

HOOK = '''
import os

from faust.transport.consumer import Consumer

_topic = os.environ["USL_TEST_DROP_TOPIC"]
_trigger = os.environ["USL_TEST_DROP_SESSION"].encode()
_dropped = open(os.environ["USL_TEST_DROP_LOG"], "a", buffering=1)
_getmany = Consumer.getmany


async def getmany(self, timeout):
    async for tp, message in _getmany(self, timeout):
        if tp.topic == _topic and _trigger in (message.value or b""):
            _dropped.write(f"{tp.partition} {message.offset}\\n")
            continue
        yield tp, message


Consumer.getmany = getmany
'''


def test_a_hole_whose_records_are_dropped_on_every_read_restarts_the_worker(
        make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    settings = make_settings(stream_partitions=2, tick_every_seqs=8, idle_gap_seconds=60.0)
    dropped = tmp_path / "dropped.txt"
    start = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
    head = [session_events(f"head-s{i}", turns=2, seed=i, start=start + timedelta(seconds=i)) for i in range(2)]
    hole = session_events("hole-s0", turns=2, seed=5, start=start + timedelta(minutes=5))
    after = [session_events(f"after-s{i}", turns=2, seed=10 + i, start=start + timedelta(minutes=10, seconds=i))
             for i in range(2)]
    env = hooked(tmp_path / "hook", HOOK, USL_TEST_DROP_TOPIC=settings.topic("l1"),
                 USL_TEST_DROP_SESSION='"hole-s0"', USL_TEST_DROP_LOG=str(dropped))
    stack = Stack(settings)
    try:
        dropping = stack.worker(env=env)
        append_events(settings, interleave(*head, seed=1))
        wait_for_markers(settings, l1_seq(settings), timeout=120)
        append_events(settings, hole)
        append_events(settings, interleave(*after, seed=2))  # records past the hole reveal it
        code = dropping.wait(timeout=180)
        log = stack.log_text("worker")
        assert code == 75, log[-3000:]
        assert "were fetched but never handed on" in log and "accepting a gap" not in log, log[-3000:]
        reads = [line.split()[1] for line in dropped.read_text().split("\n") if line]
        assert len(reads) > len(set(reads)), "the hook dropped each record once: nothing was read again"

        stack.worker("restarted")
        head_seq = l1_seq(settings)
        wait_for_markers(settings, head_seq, timeout=180)
    finally:
        stack.close()
    redacted = {body["seq"] for body in topic_records(settings, "redacted") if body.get("kind") == "event"}
    assert redacted == set(range(1, head_seq + 1)), sorted(set(range(1, head_seq + 1)) - redacted)
    events = {body["seq"]: body["event"] for body in topic_records(settings, "redacted") if body.get("kind") == "event"}
    evidence = {e["seq"] for body in topic_records(settings, "chunks") if body.get("kind") == "chunk"
                for e in body["evidence"]}
    # Each kind of event that is evidence of a chunk in the other sessions is so in the hole's.
    chunked = {event["type"] for seq, event in events.items() if seq in evidence and event["sessionId"] != "hole-s0"}
    hole_seqs = {seq for seq, event in events.items() if event["sessionId"] == "hole-s0" and event["type"] in chunked}
    assert hole_seqs and hole_seqs <= evidence, sorted(hole_seqs - evidence)


def test_a_hole_behind_the_committed_offset_is_read_by_the_restarted_worker(
        make_settings: Callable[..., Settings]) -> None:
    """The group's committed offset is past records no stage applied (faust's ``_gap`` bookkeeping
    commits past them: streams.faust_compat, ``rewind``). A restart from that offset never reads
    them: the worker must commit the hole's first offset before it exits, or every restart finds
    the hole again, exits again, and nothing is indexed any more."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    from streams.topics import app_id

    settings = make_settings(stream_partitions=2, tick_every_seqs=8, idle_gap_seconds=60.0)
    start = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
    head = [session_events(f"head-s{i}", turns=2, seed=i, start=start + timedelta(seconds=i)) for i in range(2)]
    hole = session_events("hole-s0", turns=2, seed=5, start=start + timedelta(minutes=5))
    after = [session_events(f"after-s{i}", turns=2, seed=10 + i, start=start + timedelta(minutes=10, seconds=i))
             for i in range(2)]
    stack = Stack(settings)
    try:
        stack.worker("first")
        append_events(settings, interleave(*head, seed=1))
        wait_for_markers(settings, l1_seq(settings), timeout=120)
        stack.kill("first", signal.SIGTERM)
        append_events(settings, hole)
        append_events(settings, interleave(*after, seed=2))
        # The group commits past the hole: at the first record after it.
        bootstrap = settings.bootstrap_servers or ""
        reader = KafkaConsumer(bootstrap_servers=bootstrap, group_id=app_id(settings), enable_auto_commit=False)
        try:
            l1 = settings.topic("l1")
            partitions = [TopicPartition(l1, p) for p in reader.partitions_for_topic(l1) or ()]
            reader.assign(partitions)
            reader.seek_to_beginning()
            records = [r for batch in iter(lambda: reader.poll(timeout_ms=2000), {}) for rs in batch.values() for r in rs]
            in_hole = [r for r in records if b'"hole-s0"' in r.value]
            partition = in_hole[0].partition
            past = min(r.offset for r in records if r.partition == partition and r.offset > in_hole[-1].offset)
            tp = TopicPartition(l1, partition)
            deadline = time.monotonic() + 120
            while True:  # the group accepts a commit from outside once the stopped worker left it
                try:
                    reader.commit({tp: OffsetAndMetadata(past, "", -1)})
                    break
                except Exception:
                    assert time.monotonic() < deadline
                    time.sleep(1)
        finally:
            reader.close()

        second = stack.worker("second")
        assert second.wait(timeout=180) == 75, stack.log_text("second")[-3000:]
        stack.worker("third")
        wait_for_markers(settings, l1_seq(settings), timeout=180)
    finally:
        stack.close()
    redacted = {body["event"]["sessionId"] for body in topic_records(settings, "redacted") if body.get("kind") == "event"}
    assert "hole-s0" in redacted
