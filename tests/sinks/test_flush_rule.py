"""The sink loop's flush rule (:func:`sinks.runner.flush_due`): group commit of a moving
watermark after a short gap, spaced out as commits get slower, the batch-size bound, the
periodic flush, and polls that end when the rule is due."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from kafka import TopicPartition

from sinks.runner import _POLL_SECONDS, SinkRunner, flush_due
from streams.settings import Settings


def settings(**overrides: object) -> Settings:
    values: dict[str, object] = {"sink_batch_size": 512, "sink_batch_seconds": 1.0, "sink_commit_gap_seconds": 0.25}
    return Settings.from_env({}, **{**values, **overrides})


def due(rule: Settings, *, pending: int = 0, moves: bool = False, backlog: bool = False, began: float,
        ended: float, last: float = 0.05) -> bool:
    return flush_due(rule, pending=pending, watermark_moves=moves, backlog=backlog, since_flush_began=began,
                     since_flush_ended=ended, last_flush_seconds=last)


def test_a_moving_watermark_is_committed_once_the_gap_after_the_last_flush_has_passed() -> None:
    rule = settings()
    assert due(rule, pending=3, moves=True, began=0.4, ended=0.3)
    assert due(rule, moves=True, began=0.4, ended=0.3)  # progress alone: the watermark moves
    assert not due(rule, pending=3, moves=True, began=0.4, ended=0.1)


def test_the_gap_counts_from_the_end_of_the_last_flush_not_its_start() -> None:
    # A flush that took longer than the gap is not followed by another one at once.
    assert not due(settings(), pending=200, moves=True, began=0.6, ended=0.02)


def test_slower_flushes_space_early_commits_out() -> None:
    rule = settings()
    assert due(rule, moves=True, began=0.35, ended=0.3, last=0.05)
    assert not due(rule, moves=True, began=0.5, ended=0.4, last=0.15)  # waits 4 x 0.15 s
    assert due(rule, moves=True, began=0.75, ended=0.6, last=0.15)
    # flushes slower than a quarter of the batch window: the window alone decides, as before
    assert not due(rule, moves=True, began=0.99, ended=0.7, last=0.3)
    assert due(rule, moves=True, began=1.0, ended=0.7, last=0.3)


def test_a_sink_with_a_backlog_batches_as_before() -> None:
    rule = settings()
    assert not due(rule, pending=300, moves=True, backlog=True, began=0.9, ended=0.8)
    assert due(rule, pending=300, moves=True, backlog=True, began=1.0, ended=0.9)
    assert due(rule, pending=512, moves=True, backlog=True, began=0.1, ended=0.05)


def test_records_no_watermark_covers_yet_wait_for_the_batch_window() -> None:
    rule = settings()
    assert not due(rule, pending=200, began=0.9, ended=0.8)
    assert due(rule, pending=200, began=1.0, ended=0.9)


def test_a_full_batch_is_committed_at_once() -> None:
    assert due(settings(), pending=512, began=0.0, ended=0.0)


def test_nothing_new_still_flushes_every_batch_window() -> None:
    rule = settings()
    assert not due(rule, began=0.9, ended=0.8)
    assert due(rule, began=1.0, ended=0.9)


def test_a_gap_above_the_batch_window_leaves_the_window_in_charge() -> None:
    rule = settings(sink_batch_seconds=0.2, sink_commit_gap_seconds=0.5)
    assert due(rule, pending=1, moves=True, began=0.2, ended=0.15)


def test_the_default_gap_is_shorter_than_the_default_batch_window() -> None:
    defaults = Settings.from_env({})
    gap = defaults.sink_commit_gap_seconds
    assert gap < defaults.sink_batch_seconds
    assert due(defaults, pending=1, moves=True, began=gap, ended=gap)


class _ChunksWriter:
    kind = "text"
    sources = ("chunks",)

    def describe(self) -> dict[str, Any]:
        return {}

    def write(self, staging: Path, previous: Path | None, records: Sequence[dict[str, Any]]) -> list[str]:
        return []


def _progress(runner: SinkRunner, partition: int, seq: int) -> None:
    record = SimpleNamespace(value=orjson.dumps({"logId": "a", "kind": "progress", "seq": seq}), offset=0)
    runner._handle("chunks", TopicPartition(runner.sources["chunks"], partition), record, defaultdict(dict))


def test_the_loop_sees_a_moving_watermark_only_once_every_partition_has_reported(tmp_path: Path) -> None:
    runner = SinkRunner(settings(home=tmp_path), "unused:9092", _ChunksWriter())
    runner._partitions = {"chunks": [0, 1]}
    _progress(runner, 0, seq=7)
    assert not runner._watermark_moves()  # partition 1 has not reported: builtThroughSeq stays 0
    _progress(runner, 1, seq=5)
    assert runner._watermark_moves()  # min(7, 5) = 5 > 0


def test_a_poll_waits_no_longer_than_until_the_gap_lets_a_moving_watermark_commit(tmp_path: Path) -> None:
    runner = SinkRunner(settings(home=tmp_path), "unused:9092", _ChunksWriter())
    runner._partitions = {"chunks": [0]}
    now = time.monotonic()
    runner._last_flush = runner._flush_ended = now - 0.2  # the 0.25 s gap ends in 0.05 s
    assert runner._poll_seconds() == pytest.approx(_POLL_SECONDS, abs=0.02)  # nothing waits for the gap
    _progress(runner, 0, seq=3)
    assert runner._poll_seconds() <= 0.05
    runner._backlog = True  # catching up: the window decides, the poll is not cut short
    assert runner._poll_seconds() == pytest.approx(_POLL_SECONDS, abs=0.02)


def test_a_poll_waits_no_longer_than_until_the_batch_window_ends(tmp_path: Path) -> None:
    runner = SinkRunner(settings(home=tmp_path), "unused:9092", _ChunksWriter())
    runner._last_flush = time.monotonic() - 0.95  # the 1.0 s window ends in 0.05 s
    assert runner._poll_seconds() <= 0.05
    runner._last_flush = time.monotonic() - 5.0
    assert runner._poll_seconds() == 0.0
