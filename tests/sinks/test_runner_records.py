"""The sink loop's per-record path: what it keeps of each record, and what it does not redo."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from kafka import TopicPartition

from sinks.runner import SinkRunner, _load_ids
from streams import metrics
from streams.settings import Settings
from tests.sinks.fakes import EmptyConsumer, NullWriter, RecordingPublisher


class _Record:
    def __init__(self, offset: int, body: dict[str, Any]) -> None:
        self.offset = offset
        self.value = orjson.dumps(body)


def _chunk(n: int) -> dict[str, Any]:
    return {"kind": "chunk", "logId": "default", "chunkId": f"chunk-{n:03d}", "minSeq": n, "maxSeq": n,
            "sessionId": "s", "text": f"text {n}"}


def _runner(tmp_path: Path) -> SinkRunner:
    runner = SinkRunner(Settings(home=str(tmp_path)), "unused:9092", NullWriter())
    runner._consumer = EmptyConsumer()
    runner._publisher = RecordingPublisher()
    runner._partitions["chunks"] = [0]
    return runner


def _counted(stage: str) -> tuple[float, float]:
    return (metrics.usl_records_total.labels(stage=stage)._value.get(),
            metrics.usl_duplicate_events_total.labels(stage=stage)._value.get())


def test_each_record_is_counted_without_a_label_lookup_and_its_id_kept_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = _runner(tmp_path)
    stage = f"sink_{runner.kind}"
    records_before, duplicates_before = _counted(stage)

    def no_lookup(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("labels() looked up for one record (the runner labels its counters once)")

    # Before: labels() per record, a tenth of the structured and analytics sinks' per-record time.
    monkeypatch.setattr(metrics.usl_records_total, "labels", no_lookup)
    monkeypatch.setattr(metrics.usl_duplicate_events_total, "labels", no_lookup)
    tp = TopicPartition(runner.sources["chunks"], 0)
    order = [5, 3, 9, 3, 1, 7, 5]  # two duplicates
    first: dict[str, dict[str, int]] = defaultdict(dict)
    for offset, n in enumerate(order):
        runner._handle("chunks", tp, _Record(offset, _chunk(n)), first)
    monkeypatch.undo()
    assert _counted(stage) == (records_before + 5, duplicates_before + 2)

    runner._note_new_logs(first)
    assert runner.flush()
    state = runner.logs["default"]
    assert state.pending == [] and state.pending_ids == set() and state.pending_order == []
    gen_dir = runner._store("default").generation_dir(state.manifest.generation_id)
    (ids_file,) = gen_dir.glob("ids-*.txt")
    # The ids file lists the batch's ids in arrival order, each once, as before.
    assert ids_file.read_text().splitlines() == [f"chunk-{n:03d}" for n in (5, 3, 9, 1, 7)]
    assert _load_ids(gen_dir) == state.ids
