"""Stand-ins for a sink runner's Kafka clients and writer, for tests of its loop without a broker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kafka import TopicPartition

KIND = "structured"


class NullWriter:
    """Writes generations without files: enough for the runner's commit and publish paths."""

    kind = KIND
    sources: tuple[str, ...] = ("chunks",)

    def describe(self) -> dict[str, Any]:
        return {"schemaVersion": "1"}

    def write(self, staging: Path, previous: Path | None, records: Any) -> list[str]:
        return []


class EmptyConsumer:
    """A consumer of one partition per topic on which nothing ever arrives; a poll waits its
    timeout, as a real one on an empty partition does."""

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

    def poll(self, *, timeout_ms: int = 0, **kwargs: Any) -> dict[TopicPartition, list[Any]]:
        time.sleep(timeout_ms / 1000)
        return {}

    def assignment(self) -> set[TopicPartition]:
        return set(self.positions)

    def close(self) -> None:
        pass


class RecordingPublisher:
    """A watermark publisher that keeps what it was given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.published: list[dict[str, Any]] = []

    def publish(self, watermark: dict[str, Any]) -> None:
        self.published.append(watermark)

    def close(self) -> None:
        pass
