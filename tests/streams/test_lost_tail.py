"""A partition's last records that faust read but never handed to a stage are read again.

faust drops records it already fetched without acking them: below its read offset after a seek
back to the committed offset, or the rest of a fetch when a rebalance begins. Each stage finds a
hole only when a record past it arrives, so when the dropped records were a partition's last ones
nothing revealed them: a fault-suite round after a SIGKILL of the worker had the chunking stage
stop at offset 687 of a redacted partition holding 817 records (the indexes 147 seqs short of the
paused head for the round's 180 s), until the next round's appends led to a seek back.

Here the real ``usl worker`` runs with a hook (a ``sitecustomize`` on its PYTHONPATH, test code
only) that makes its consumer drop, from the first redacted record of the last session on, every
record of that partition it reads for the first time -- what faust's read offset does to them --
while records it reads again after a seek back pass, as they do in faust. Nothing is appended
afterwards, so only the stage's own check of the partition's end can bring the markers to the head.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from deploy.testing import Stack, hooked
from streams.settings import Settings
from streams.testing import append_events, interleave, l1_seq, session_events, wait_for_markers

pytestmark = [pytest.mark.kafka]

HOOK = '''
import os

from faust.transport.consumer import Consumer

_topic = os.environ["USL_TEST_DROP_TOPIC"]
_trigger = os.environ["USL_TEST_DROP_FROM"].encode()
_dropped = open(os.environ["USL_TEST_DROP_LOG"], "a", buffering=1)
_read = {}  # partition -> highest offset read
_dropping = set()
_getmany = Consumer.getmany


async def getmany(self, timeout):
    async for tp, message in _getmany(self, timeout):
        if tp.topic == _topic:
            first = message.offset > _read.get(tp.partition, -1)
            _read[tp.partition] = max(_read.get(tp.partition, -1), message.offset)
            if first and (tp.partition in _dropping or _trigger in (message.value or b"")):
                _dropping.add(tp.partition)
                _dropped.write(f"{tp.partition} {message.offset}\\n")
                continue
        yield tp, message


Consumer.getmany = getmany
'''


def test_a_tail_faust_read_but_never_handed_on_is_read_again(make_settings: Callable[..., Settings],
                                                             tmp_path: Path) -> None:
    settings = make_settings(stream_partitions=2, tick_every_seqs=8, idle_gap_seconds=60.0,
                             chunk_tokens=128, chunk_overlap_tokens=24)
    dropped = tmp_path / "dropped.txt"
    start = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
    head = [session_events(f"head-s{i}", turns=2, seed=i, start=start + timedelta(seconds=i)) for i in range(3)]
    tail = session_events("tail-s0", turns=2, seed=7, start=start + timedelta(minutes=10))
    env = hooked(tmp_path / "hook", HOOK, USL_TEST_DROP_TOPIC=settings.topic("redacted"),
                 USL_TEST_DROP_FROM='"tail-s0"', USL_TEST_DROP_LOG=str(dropped))
    stack = Stack(settings)
    try:
        stack.worker(env=env)
        append_events(settings, interleave(*head, seed=1))
        wait_for_markers(settings, l1_seq(settings), timeout=120)
        append_events(settings, tail)  # the log's last events: nothing is appended after them
        wait_for_markers(settings, l1_seq(settings), timeout=90)
    finally:
        stack.close()
    assert dropped.exists() and dropped.read_text().split(), "the hook dropped nothing: the test tested nothing"
