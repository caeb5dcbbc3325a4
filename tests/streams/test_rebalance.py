"""Scale-out and fail-over of the workers as one Kafka consumer group (SPEC §9, issue 7.4).

Several real ``usl worker`` processes with the same settings share one faust app id, hence one
consumer group, over 4 L1 partitions (three logs) and 4 stream partitions; the text and
structured sinks run beside them. While events are being indexed, a third worker joins, one
leaves with SIGTERM and one dies with SIGKILL. Proved: after each membership change every
log's watermarks reach the L1 head again (they never go backwards); the chunk set equals the
single-worker reference byte for byte (exactly-once effect); the text index of each log holds
each chunk exactly once; and every progress marker is monotone and true.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.errors import CoordinatorNotAvailableError

from deploy.testing import Stack
from sinks.generations import GenerationStore
from sinks.runner import index_root
from sinks.testing import replay_chunks, wait_for_watermarks
from sinks.text import get_engine
from sinks.watermarks import read_watermarks
from streams.settings import Settings
from streams.testing import (
    append_events,
    check_markers,
    chunk_set,
    interleave,
    l1_seq,
    session_events,
)
from streams.topics import app_id

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LOGS = ("default", "team-a", "team-b")
KINDS = ("text", "structured")


def rebalance_batches(batches: int = 4) -> list[list[dict[str, Any]]]:
    """~300 events over three logs, cut into ``batches`` consecutive slices of the log order.
    Each batch holds whole sessions, so all turns are closed when it has been appended."""
    start = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
    out: list[list[dict[str, Any]]] = []
    for batch in range(batches):
        logs = []
        for n, log_id in enumerate(LOGS):
            sessions = [session_events(f"rb{batch}-{log_id}-s{k}", turns=2, seed=batch * 10 + k, log_id=log_id,
                                       start=start + timedelta(minutes=10 * batch, seconds=30 * k + n))
                        for k in range(2)]
            logs.append(interleave(*sessions, seed=batch))
        out.append(interleave(*logs, seed=batch))
    return out


class WatermarkWatch:
    """Samples every (log, kind) watermark once a second on a thread; remembers the series."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.series: dict[tuple[str, str], list[int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="watermark-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                table = read_watermarks(self.settings.bootstrap_servers or "", self.settings)
            except Exception:  # a slow broker round trip; the next sample will do
                table = {}
            for key, watermark in table.items():
                self.series.setdefault(key, []).append(int(watermark["builtThroughSeq"]))
            self._stop.wait(1.0)

    def __enter__(self) -> WatermarkWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def group_members(settings: Settings) -> list[dict[str, Any]]:
    """The members of the workers' consumer group (the faust app id), as the broker sees them."""
    admin = KafkaAdminClient(bootstrap_servers=settings.bootstrap_servers or "", client_id="usl-test-admin")
    try:
        group = admin.describe_groups([app_id(settings)])[app_id(settings)]
    except CoordinatorNotAvailableError:  # a fresh broker creates __consumer_offsets on first use
        return []
    finally:
        admin.close()
    return list(group["members"]) if group["group_state"] == "Stable" else []


def _wait_members(settings: Settings, count: int, timeout: float = 90.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    members: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        members = group_members(settings)
        if len(members) == count:
            return members
        time.sleep(0.5)
    raise AssertionError(f"the consumer group did not settle at {count} members: {members}")


def _wait_all_logs(settings: Settings, timeout: float) -> dict[str, int]:
    heads = {log_id: l1_seq(settings, log_id) for log_id in LOGS}
    for log_id, head in heads.items():
        wait_for_watermarks(settings, head, KINDS, log_id=log_id, timeout=timeout)
    return heads


def test_workers_join_leave_and_die_without_losing_or_duplicating(make_settings: Callable[..., Settings],
                                                                  fast_group_failover: None) -> None:
    """Two workers, then a third joins, then one is stopped (SIGTERM) and one killed (SIGKILL),
    each change right after a batch is appended; the survivor finishes the job."""
    settings = make_settings(l1_partitions=4, stream_partitions=4, tick_every_seqs=16, idle_gap_seconds=120.0)
    batches = rebalance_batches()
    stack = Stack(settings)
    heads_after: list[dict[str, int]] = []
    try:
        with WatermarkWatch(settings) as watch:
            stack.worker("w1")
            stack.worker("w2")
            stack.sinks(",".join(KINDS))
            changes: list[tuple[Callable[[], object], int]] = [
                (lambda: None, 2),
                (lambda: stack.worker("w3"), 3),
                (lambda: stack.kill("w1", signal.SIGTERM), 2),
                (lambda: stack.kill("w2", signal.SIGKILL), 1),
            ]
            for batch, (change, members) in zip(batches, changes, strict=True):
                append_events(settings, batch)
                change()  # while the batch is being indexed
                _wait_members(settings, members)
                heads_after.append(_wait_all_logs(settings, timeout=180))
            assert set(stack.procs) == {"w3", "sinks"} and stack.procs["w3"].poll() is None
            time.sleep(1.5)  # one more sample of the final watermarks
    finally:
        stack.close()

    # Progress continued through every change, up to each log's head, and never went back.
    for earlier, later in pairwise(heads_after):
        assert all(later[log_id] > earlier[log_id] for log_id in LOGS)
    for log_id in LOGS:
        for kind in KINDS:
            series = watch.series.get((log_id, kind), [])
            assert series and series[-1] >= heads_after[-1][log_id], (log_id, kind, series[-5:])
            assert series == sorted(series), f"{log_id}/{kind} watermark went backwards: {series}"

    # Exactly-once effect: the chunks equal the single-worker reference, byte for byte.
    downstream = chunk_set(settings)
    reference = replay_chunks(settings, LOGS)
    assert downstream == reference

    # The text index of each log holds every chunk of that log exactly once.
    engine = get_engine("tantivy")
    for log_id in LOGS:
        manifest = GenerationStore(index_root(settings), log_id, "text").current()
        assert manifest is not None
        directory = GenerationStore(index_root(settings), log_id, "text").generation_dir(manifest.generation_id)
        expected = sorted(chunk_id for chunk_id, body in reference.items() if b'"logId":"%s"' % log_id.encode() in body)
        assert engine.count(directory) == len(expected) > 0
        assert engine.all_ids(directory) == expected
        check_markers(settings, log_id)


def test_a_log_that_moves_before_its_flush_tick_still_reaches_the_head(make_settings: Callable[..., Settings],
                                                                       fast_group_failover: None) -> None:
    """The first worker handles a log's last events but never sends their flush tick (its flush
    timer is an hour, and the one flush a batch sends when none went out for that long went
    out for its first events), then stops gracefully, committing its offsets; a second worker
    takes the partition over with nothing left to read. Its flush tick must still release the
    seqs past the last regular tick (the committed offset proves them delivered): before that
    was so, the log's watermark stayed at the regular tick until another event arrived."""
    settings = make_settings(l1_partitions=2, stream_partitions=2, tick_every_seqs=16, idle_gap_seconds=120.0)
    start = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
    events: list[dict[str, Any]] = []
    for k in range(8):
        events += session_events(f"mv-s{k}", turns=1, seed=k, start=start + timedelta(minutes=k))
        if len(events) > 20 and len(events) % 16:
            break
    head = len(events)
    stack = Stack(settings)
    try:
        stack.sinks("text")
        first = len(session_events("mv-s0", turns=1, seed=0, start=start))  # a closed turn
        # Appended before w1 starts, and its batches close when they hold that many records (or
        # after 2 s), so its first batch and its one flush hold them all: appended while it ran,
        # with batches of 0.05 s, a loaded machine let the first batch take only some, and the
        # flush for the rest was an hour away (the watermark stood at 1 for 180 s in one CI run).
        assert append_events(settings, events[:first]) == first
        stack.worker("w1", env={"USL_FLUSH_TICK_SECONDS": "3600", "USL_WORKER_BATCH_SECONDS": "2.0",
                                "USL_WORKER_BATCH_RECORDS": str(first)})
        wait_for_watermarks(settings, first, ["text"], timeout=180)  # w1's one flush, for its first batch
        assert append_events(settings, events[first:]) == head
        last_tick = head - head % 16
        wait_for_watermarks(settings, last_tick, ["text"], timeout=180)
        time.sleep(3.0)  # w1's offsets are committed (every second); it sends no flush tick
        text = wait_for_watermarks(settings, last_tick, ["text"], timeout=30)["text"]
        assert int(text["builtThroughSeq"]) == last_tick, "the first worker flushed: the test proves nothing"
        stack.kill("w1", signal.SIGTERM)
        stack.worker("w2")
        wait_for_watermarks(settings, head, ["text"], timeout=120)
    finally:
        stack.close()
