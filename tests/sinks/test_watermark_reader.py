"""``WatermarkReader`` (the API's status reads the watermarks through one kept consumer, reading
on from where the last read ended) gives what ``read_watermarks`` (a read of the compacted topic
from its start) gives after every batch of publications: moves, new logs, shards, tombstones."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from sinks.watermarks import WatermarkPublisher, WatermarkReader, read_watermarks
from streams.settings import Settings
from streams.topics import ensure_topics

pytestmark = pytest.mark.kafka


def test_a_kept_reader_reads_on_to_what_a_read_from_the_start_gives(tmp_path: Path, kafka_bootstrap: str) -> None:
    settings = Settings.from_env({}, home=tmp_path, topic_prefix=f"w{uuid.uuid4().hex[:8]}.",
                                 bootstrap_servers=kafka_bootstrap)
    ensure_topics(kafka_bootstrap, settings)
    rng = random.Random(7)
    reader = WatermarkReader(kafka_bootstrap, settings)
    publisher = WatermarkPublisher(kafka_bootstrap, settings)
    assert reader.read() == {} == read_watermarks(kafka_bootstrap, settings)
    try:
        through = 0
        for _batch in range(6):
            for _ in range(rng.randrange(1, 6)):
                log, kind = rng.choice(["default", "other"]), rng.choice(["text", "vector"])
                if rng.random() < 0.2:
                    publisher.delete(log, kind)
                    continue
                through += rng.randrange(1, 50)
                mark = {"logId": log, "kind": kind, "generationId": through, "builtThroughSeq": through,
                        "line": "live", "committedAt": 1.0}
                if rng.random() < 0.3:  # a shard of two: counts once both have published
                    for shard in ("shard-0-of-2", "shard-1-of-2"):
                        publisher.publish({**mark, "shard": shard})
                else:
                    publisher.publish(mark)
            assert reader.read() == read_watermarks(kafka_bootstrap, settings)
    finally:
        publisher.close()
        reader.close()
    assert WatermarkReader(kafka_bootstrap, settings).read() == read_watermarks(kafka_bootstrap, settings)
