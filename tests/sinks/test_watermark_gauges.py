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
from typing import Any, cast

import pytest
from kafka import TopicPartition
from prometheus_client import REGISTRY

import sinks.runner as runner_module
from sinks.generations import GenerationStore, Manifest
from sinks.runner import SinkRunner, index_root
from sinks.watermarks import WatermarkPublisher
from streams.settings import Settings

KIND = "structured"
VERSIONS = {"redactionPolicy": "p1", "chunker": {}}


class _Writer:
    """Writes generations without files: enough for the runner's publish paths."""

    kind = KIND
    sources: tuple[str, ...] = ("chunks",)

    def describe(self) -> dict[str, Any]:
        return {"schemaVersion": "1"}

    def write(self, staging: Path, previous: Path | None, records: Any) -> list[str]:
        return []


class _Consumer:
    """A consumer of one empty partition per topic."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.positions: dict[TopicPartition, int] = {}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.positions = dict.fromkeys(partitions, 0)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(partitions, 0)

    def position(self, tp: TopicPartition) -> int:
        return self.positions.get(tp, 0)

    def poll(self, **kwargs: Any) -> dict[TopicPartition, list[Any]]:
        return {}

    def assignment(self) -> set[TopicPartition]:
        return set(self.positions)

    def close(self) -> None:
        pass


class _Publisher:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.published: list[dict[str, Any]] = []

    def publish(self, watermark: dict[str, Any]) -> None:
        self.published.append(watermark)

    def close(self) -> None:
        pass


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setattr(runner_module, "KafkaConsumer", _Consumer)
    monkeypatch.setattr(runner_module, "WatermarkPublisher", _Publisher)
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
    runner = SinkRunner(settings, "127.0.0.1:1", _Writer(), versions=VERSIONS)
    runner.run(until_caught_up=True)
    assert _gauges(log_id) == (2, 64)


def test_a_stalled_line_exports_the_watermark_it_republishes(settings: Settings) -> None:
    log_id = _log()
    _commit(settings, log_id, 30, policy="p0")  # built by an earlier release's policy
    runner = SinkRunner(settings, "127.0.0.1:1", _Writer(), versions=VERSIONS)
    runner.run(until_caught_up=True)
    assert runner.logs[log_id].stalled is not None
    assert _gauges(log_id) == (1, 30)


def test_a_line_switch_exports_the_new_lines_generation(settings: Settings) -> None:
    log_id = _log()
    for through in (10, 20, 30):
        _commit(settings, log_id, through)
    runner = SinkRunner(settings, "127.0.0.1:1", _Writer(), versions=VERSIONS)
    runner._consumer = _Consumer()  # what run() sets up, without the loop
    publisher = _Publisher()
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
