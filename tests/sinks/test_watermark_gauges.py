"""``usl_watermark_seq`` and ``usl_generation_id`` follow every watermark the sink publishes,
not only its own commits: the republish at start-up (a restarted sink that commits nothing must
still show its watermark, or USLWatermarkStalled can never fire for it), the republish after a
rebuild switched the line (the gauge showed the old line's generation id) and the republish of
a stalled line.

Before, only a commit or a background merge in the running process set them. The sink runs
here against a stand-in consumer and publisher (no broker): what is under test is which
publications set the gauges."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import cast

import pytest
from prometheus_client import REGISTRY

import sinks.runner as runner_module
from sinks.generations import GenerationStore, Manifest
from sinks.runner import SinkRunner, index_root
from sinks.watermarks import WatermarkPublisher
from streams.settings import Settings
from tests.sinks.fakes import KIND, EmptyConsumer, NullWriter, RecordingPublisher

VERSIONS = {"redactionPolicy": "p1", "chunker": {}}


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setattr(runner_module, "KafkaConsumer", EmptyConsumer)
    monkeypatch.setattr(runner_module, "WatermarkPublisher", RecordingPublisher)
    return Settings.from_env({}, home=tmp_path / "home", topic_prefix="t.", bootstrap_servers="127.0.0.1:1")


def _commit(settings: Settings, log_id: str, through: int, *, line: str | None = None,
            policy: str = "p1") -> Manifest:
    store = GenerationStore(index_root(settings), log_id, KIND, line)
    staging = store.begin()
    return store.commit(staging, Manifest(
        kind=KIND, log_id=log_id, line=store.line, generation_id=0, built_through_seq=through,
        schema_version="1", asp_version="1.0", chunker={}, embedding=None, redaction_policy_hash=policy))


def _gauges(log_id: str) -> tuple[float | None, float | None]:
    labels = {"log": log_id, "kind": KIND}
    return (REGISTRY.get_sample_value("usl_generation_id", labels),
            REGISTRY.get_sample_value("usl_watermark_seq", labels))


def _log() -> str:
    return f"g{uuid.uuid4().hex[:10]}"


def test_a_restarted_sink_that_commits_nothing_exports_its_watermark(settings: Settings) -> None:
    log_id = _log()
    _commit(settings, log_id, 50)
    _commit(settings, log_id, 64)
    runner = SinkRunner(settings, "127.0.0.1:1", NullWriter(), versions=VERSIONS)
    runner.run(until_caught_up=True)
    assert _gauges(log_id) == (2, 64)


def test_a_stalled_line_exports_the_watermark_it_republishes(settings: Settings) -> None:
    log_id = _log()
    _commit(settings, log_id, 30, policy="p0")  # built by an earlier release's policy
    runner = SinkRunner(settings, "127.0.0.1:1", NullWriter(), versions=VERSIONS)
    runner.run(until_caught_up=True)
    assert runner.logs[log_id].stalled is not None
    assert _gauges(log_id) == (1, 30)


def test_a_line_switch_exports_the_new_lines_generation(settings: Settings) -> None:
    log_id = _log()
    for through in (10, 20, 30):
        _commit(settings, log_id, through)
    runner = SinkRunner(settings, "127.0.0.1:1", NullWriter(), versions=VERSIONS)
    runner._consumer = EmptyConsumer()  # what run() sets up, without the loop
    publisher = RecordingPublisher()
    runner._publisher = cast(WatermarkPublisher, publisher)
    runner.logs[log_id] = runner._load_log(log_id)
    runner._publish(log_id, _commit(settings, log_id, 40), GenerationStore(index_root(settings), log_id, KIND))
    assert _gauges(log_id) == (4, 40)
    # `usl rebuild all` builds a new line (its generation ids start at 1) and switches to it.
    store = GenerationStore(index_root(settings), log_id, KIND)
    line = store.new_rebuild_line()
    _commit(settings, log_id, 45, line=line)
    store.set_active_line(line)
    runner.flush()
    assert publisher.published[-1]["line"] == line
    assert _gauges(log_id) == (1, 45)
