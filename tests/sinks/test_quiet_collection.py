"""A sink collects the line of a log that gets no new event: expired pins and the generations
they held go without waiting for a commit (:meth:`sinks.runner.SinkRunner.collect_quiet_logs`).

Before, only a commit (or a merge) collected a log's line: on a quiet log every cursor pin kept
its generation past ``USL_CURSOR_TTL_SECONDS`` until the next event came, and an hour-long soak
left 1 705 pins and 515 generations of 85 540 files in the structured index. The sink runs here
against a stand-in consumer and publisher (no broker), as in ``test_watermark_gauges.py``: what
is under test is what the loop collects while nothing arrives."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

import sinks.runner as runner_module
from sinks.generations import GenerationStore, Manifest
from sinks.runner import SinkRunner, index_root
from streams.settings import Settings
from tests.sinks.fakes import KIND, EmptyConsumer, NullWriter, RecordingPublisher

VERSIONS = {"redactionPolicy": "p1", "chunker": {}}


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setattr(runner_module, "KafkaConsumer", EmptyConsumer)
    monkeypatch.setattr(runner_module, "WatermarkPublisher", RecordingPublisher)
    return Settings.from_env({}, home=tmp_path / "home", topic_prefix="t.", bootstrap_servers="127.0.0.1:1",
                             sink_gc_interval_seconds=1.0)


def _line(settings: Settings, generations: int) -> tuple[str, GenerationStore]:
    """A log whose line has ``generations`` committed generations and none collected yet."""
    log_id = f"q{uuid.uuid4().hex[:10]}"
    store = GenerationStore(index_root(settings), log_id, KIND)
    for through in range(1, generations + 1):
        staging = store.begin()
        (staging / f"segment-{through}.bin").write_bytes(b"x" * through)
        store.commit(staging, Manifest(
            kind=KIND, log_id=log_id, line=store.line, generation_id=0, built_through_seq=through,
            schema_version="1", asp_version="1.0", chunker={}, embedding=None, redaction_policy_hash="p1"))
    return log_id, store


def _pin_files(store: GenerationStore) -> list[str]:
    return sorted(path.name for path in (store.line_dir / "pins").glob("*.pin"))


def _loaded(settings: Settings, *log_ids: str) -> SinkRunner:
    runner = SinkRunner(settings, "127.0.0.1:1", NullWriter(), versions=VERSIONS)
    for log_id in log_ids:
        runner.logs[log_id] = runner._load_log(log_id)
    return runner


def test_a_quiet_log_loses_its_expired_pins_and_the_generations_they_held(settings: Settings) -> None:
    _log_id, store = _line(settings, 8)
    for generation_id in (1, 2, 3, 4):  # cursors that stopped paging: their pins run out
        store.pin(generation_id, ttl_seconds=1.5, holder="cursor")
    paging = store.pin(5, ttl_seconds=3600, holder="cursor")  # a cursor still paging
    runner = SinkRunner(settings, "127.0.0.1:1", NullWriter(), versions=VERSIONS)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while store.generation_ids() != [5, 6, 7, 8] and time.monotonic() < deadline:
            assert thread.is_alive()
            time.sleep(0.1)
        assert store.generation_ids() == [5, 6, 7, 8]  # the newest three, and the one still pinned
        assert _pin_files(store) == [paging.path.name]
        assert store.current_id() == 8  # no commit did it
    finally:
        runner.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_quiet_log_is_collected_once_per_interval_and_a_commit_counts(settings: Settings) -> None:
    quiet, quiet_store = _line(settings, 5)
    busy, busy_store = _line(settings, 5)
    runner = _loaded(settings, quiet, busy)
    assert runner.collect_quiet_logs() == sorted([quiet, busy])
    assert quiet_store.generation_ids() == busy_store.generation_ids() == [3, 4, 5]
    assert runner.collect_quiet_logs() == []  # within the interval
    time.sleep(1.1)
    runner._collect(busy, busy_store)  # what a commit of busy runs
    assert runner.collect_quiet_logs() == [quiet]


def test_a_quiet_collection_keeps_what_a_commit_in_progress_builds_on(settings: Settings) -> None:
    log_id, store = _line(settings, 6)
    runner = _loaded(settings, log_id)
    writer = GenerationStore(index_root(settings), log_id, KIND)  # another process's commit, begun
    staging = writer.begin()
    (staging / "segment-7.bin").write_bytes(b"y")
    assert runner.collect_quiet_logs() == [log_id]
    assert store.generation_ids() == [4, 5, 6] and staging.is_dir()
    committed = writer.commit(staging, Manifest(
        kind=KIND, log_id=log_id, line=store.line, generation_id=0, built_through_seq=7, schema_version="1",
        asp_version="1.0", chunker={}, embedding=None, redaction_policy_hash="p1"))
    assert (committed.generation_id, committed.parent_generation_id) == (7, 6)
    store.verify(committed)


def test_a_file_system_error_is_logged_and_retried_never_stops_the_sink(
        settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    log_id, store = _line(settings, 5)
    runner = _loaded(settings, log_id)

    def failing(self: GenerationStore, *, keep_last: int = 2) -> list[int]:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr(GenerationStore, "gc", failing)
        assert runner.collect_quiet_logs() == []
    assert f"collecting log {log_id} failed" in caplog.text
    assert store.generation_ids() == [1, 2, 3, 4, 5]
    time.sleep(1.1)
    assert runner.collect_quiet_logs() == [log_id]
    assert store.generation_ids() == [3, 4, 5]
