"""Topic configurations that keep a long-running stack's topics bounded."""

from __future__ import annotations

from streams.settings import Settings
from streams.topics import COMPACTED_SEGMENT_MS, Topics, topic_specs


def test_every_compacted_topic_closes_its_segments_so_kafka_compacts_them() -> None:
    # Kafka compacts closed segments only; with the defaults (128 MB or 7 days) the watermarks
    # topic and the table changelogs were never compacted during a soak: each start read every
    # record ever written (6 851 watermark records for 5 keys after half an hour).
    settings = Settings.from_env({})
    compacted = [spec for spec in topic_specs(settings) if spec.config.get("cleanup.policy") == "compact"]
    assert {Topics.from_settings(settings).watermarks, Topics.from_settings(settings).logs} <= {s.name for s in compacted}
    assert any("changelog" in spec.name for spec in compacted)
    for spec in compacted:
        assert 0 < int(spec.config["segment.ms"]) <= 3600 * 1000, spec.name
    assert int(COMPACTED_SEGMENT_MS) == 10 * 60 * 1000


def test_the_source_of_truth_keeps_its_defaults() -> None:
    settings = Settings.from_env({})
    l1 = next(spec for spec in topic_specs(settings) if spec.name == Topics.from_settings(settings).l1)
    assert "segment.ms" not in l1.config and l1.config["retention.ms"] == "-1"
