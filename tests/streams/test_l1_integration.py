"""L1 against the real broker: topics, the log registry, ingest of real-format transcripts,
dead letters for broken lines, seq semantics and the status report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from deploy.cli import app
from planner.status import collect_status
from streams.asp import validate_event
from streams.l1 import L1Reader, LogRegistry, read_topic_to_end
from streams.topics import COMPACTED_SEGMENT_MS, Topics, ensure_topics, topic_specs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "importers"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sessions"

pytestmark = pytest.mark.kafka


def _env(settings) -> dict[str, str]:
    return {
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers, "USL_HOME": str(settings.home),
        "USL_TOPIC_PREFIX": settings.topic_prefix, "USL_L1_PARTITIONS": str(settings.l1_partitions),
        "USL_STREAM_PARTITIONS": str(settings.stream_partitions),
    }


def _ingest(settings, *args: str) -> dict:
    result = CliRunner().invoke(app, ["ingest", *args, "--json"], env=_env(settings), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_topics_are_created_idempotently_with_their_configs(settings):
    created = ensure_topics(settings.bootstrap_servers, settings)
    assert set(created) == {s.name for s in topic_specs(settings)}
    assert ensure_topics(settings.bootstrap_servers, settings) == []
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    try:
        topics = Topics.from_settings(settings)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topics.l1),
                                            ConfigResource(ConfigResourceType.TOPIC, topics.watermarks)])
        configs = {name: {k: v["value"] for k, v in entries.items()} for name, entries in described["topic"].items()}
        assert configs[topics.l1]["retention.ms"] == "-1"
        assert configs[topics.l1]["cleanup.policy"] == "delete"
        assert configs[topics.watermarks]["cleanup.policy"] == "compact"
        assert configs[topics.watermarks]["segment.ms"] == COMPACTED_SEGMENT_MS  # else never compacted
        partitions = {d["name"]: len(d["partitions"]) for d in admin.describe_topics([topics.l1])}
        assert partitions[topics.l1] == settings.l1_partitions
    finally:
        admin.close()


def test_log_registry_assigns_stable_partitions(settings):
    ensure_topics(settings.bootstrap_servers, settings)
    registry = LogRegistry(settings.bootstrap_servers, settings)
    first = {log: registry.assign(log) for log in ("default", "team-a", "team-b")}
    assert len(set(first.values())) == 3
    again = LogRegistry(settings.bootstrap_servers, settings)
    assert {log: again.assign(log) for log in first} == first
    # More logs than partitions: they share deterministically instead of failing.
    for n in range(settings.l1_partitions + 2):
        again.assign(f"extra-{n}")
    assert LogRegistry(settings.bootstrap_servers, settings).logs == again.logs


def test_topics_the_broker_refuses_are_a_clear_error(make_settings):
    """All missing topics go in one request; one the broker refuses (here: more replicas than
    brokers) is a BrokerError naming it, not a kafka-python exception."""
    from streams.exceptions import BrokerError

    settings = make_settings(replication_factor=3)
    with pytest.raises(BrokerError, match=r"cannot create topic .*l1.*InvalidReplicationFactor"):
        ensure_topics(settings.bootstrap_servers, settings)


def test_an_existing_topic_with_fewer_partitions_than_configured_is_a_clear_error(make_settings):
    from streams.exceptions import BrokerError

    settings = make_settings()
    ensure_topics(settings.bootstrap_servers, settings)
    more = make_settings(topic_prefix=settings.topic_prefix, l1_partitions=settings.l1_partitions + 2)
    with pytest.raises(BrokerError, match=rf"{settings.topic_prefix}l1 has {settings.l1_partitions} partitions but"):
        ensure_topics(more.bootstrap_servers, more)


def test_a_registry_keeping_its_consumer_sees_logs_assigned_since(settings):
    from kafka import KafkaProducer

    ensure_topics(settings.bootstrap_servers, settings)
    kept = LogRegistry(settings.bootstrap_servers, settings, keep_consumer=True)
    try:
        assert kept.partition_of("team-x") is None
        partition = LogRegistry(settings.bootstrap_servers, settings).assign("team-x")
        assert kept.partition_of("team-x") is None  # until it refreshes
        assert kept.refresh() == {"team-x": partition}
        producer = KafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all", enable_idempotence=True)
        try:
            other = kept.assign("team-y", producer=producer)
            assert kept.assign("team-z", producer=producer) not in (partition, other)  # still open
        finally:
            producer.close()
        assert LogRegistry(settings.bootstrap_servers, settings).logs == kept.logs == {
            "team-x": partition, "team-y": other, "team-z": kept.partition_of("team-z")}
    finally:
        kept.close()
    assert kept.refresh()["team-y"] == other  # closed: the next refresh opens another consumer
    kept.close()


def test_ingest_appends_each_event_as_its_canonical_bytes(settings):
    """What lands in L1, byte for byte: one record per accepted event, in import order, keyed by
    its sessionId, valued with its canonical bytes, without headers, on the log's partition; the
    log's registry record is its logId and partition."""
    from streams.asp import canonical_bytes
    from streams.importers import Accepted, iter_records

    transcript = EXAMPLES / "claude-code-session.jsonl"
    summary = _ingest(settings, str(transcript), "--log", "team-b")
    expected = [i.event for i in iter_records(transcript, log_id="team-b") if isinstance(i, Accepted)]
    assert summary["eventsAppended"] == len(expected) > 10
    topics = Topics.from_settings(settings)
    logs = [r for r in read_topic_to_end(settings.bootstrap_servers, topics.logs)]
    assert [(r.key, r.value) for r in logs] == [
        (b"team-b", orjson.dumps({"logId": "team-b", "partition": summary["partition"]}))]
    records = list(read_topic_to_end(settings.bootstrap_servers, topics.l1))
    assert {r.partition for r in records} == {summary["partition"]}
    assert [(r.key, r.value, list(r.headers)) for r in records] == [
        (event["sessionId"].encode(), canonical_bytes(event), []) for event in expected]
    assert summary["l1CommittedSeq"] == records[-1].offset + 1


def test_ingest_claude_code_appends_valid_events_and_dead_letters_broken_lines(settings):
    transcript = next((FIXTURES / "claude_code").glob("*.jsonl"))
    summary = _ingest(settings, str(transcript), "--format", "claude-code")
    assert summary["eventsAppended"] > 10
    assert summary["rejected"] >= 2  # the fixture has a non-JSON line and a truncated last line
    assert summary["recordsRead"] == summary["eventsAppended"] + summary["rejected"]

    reader = L1Reader(settings.bootstrap_servers, settings)
    try:
        assert reader.committed_seq("default") == summary["l1CommittedSeq"] == summary["eventsAppended"]
        events = list(reader.read("default", 1))
    finally:
        reader.close()
    assert [seq for seq, _ in events] == list(range(1, summary["eventsAppended"] + 1))
    for seq, event in events:
        assert validate_event(event, record=f"seq {seq}") == event

    topics = Topics.from_settings(settings)
    letters = [orjson.loads(r.value) for r in read_topic_to_end(settings.bootstrap_servers, topics.deadletters)]
    assert len(letters) == summary["rejected"]
    assert all(letter["stage"] == "ingest" and letter["reason"] and letter["record"] for letter in letters)


def test_ingest_openai_chat_and_reingest_appends_nothing(settings, tmp_path):
    chat = EXAMPLES / "openai-chat.json"
    first = _ingest(settings, str(chat), "--format", "openai-chat")
    second = _ingest(settings, str(chat))
    assert first["eventsAppended"] > 5 and first["duplicatesSkipped"] == 0
    assert second["eventsAppended"] == 0 and second["duplicatesSkipped"] == first["eventsAppended"]
    # A copy elsewhere, with the follow positions lost too: L1 itself says what it holds.
    copy = tmp_path / "copy.json"
    copy.write_bytes(chat.read_bytes())
    shutil.rmtree(Path(settings.home) / "follow")
    third = _ingest(settings, str(copy))
    assert third["eventsAppended"] == 0 and third["l1CommittedSeq"] == first["l1CommittedSeq"]
    reader = L1Reader(settings.bootstrap_servers, settings)
    try:
        events = [event for _, event in reader.read("default", 1)]
    finally:
        reader.close()
    ids = [e["eventId"] for e in events]
    assert len(ids) == len(set(ids)) == first["eventsAppended"]
    assert {e["type"] for e in events} >= {"message", "tool.call", "tool.result"}


def test_ingest_other_log_and_status_json(settings):
    _ingest(settings, str(EXAMPLES / "claude-code-session.jsonl"), "--log", "team-a")
    report = collect_status(settings, settings.bootstrap_servers)
    assert report["logs"]["team-a"]["l1CommittedSeq"] > 0
    result = CliRunner().invoke(app, ["status", "--json"], env=_env(settings), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    entry = data["logs"]["team-a"]
    assert entry["l1CommittedSeq"] == report["logs"]["team-a"]["l1CommittedSeq"]
    assert set(entry["indexes"]) == {"text", "vector", "structured", "analytics", "toolresults"}
    for index in entry["indexes"].values():
        assert {"generationId", "builtThroughSeq", "lagSeqs", "lagSeconds"} <= set(index)


def test_ingest_reports_clear_errors_without_traceback(settings, tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, **_env(settings)}
    weird = tmp_path / "weird.txt"
    weird.write_text("this is not a transcript\n")
    for args in (["ingest", str(tmp_path / "nope.jsonl")], ["ingest", str(weird)],
                 ["ingest", str(weird), "--format", "jsonl-of-doom"]):
        proc = subprocess.run([sys.executable, "-m", "deploy.cli", *args], env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "error:" in proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout


def test_a_slow_reader_is_not_timed_out_while_records_keep_coming(settings):
    """The read timeout bounds a wait without progress, not the whole read: a rebuild that
    spends longer than ``timeout_seconds`` indexing between records must still finish."""
    import time

    from streams.testing import append_events, session_events

    ensure_topics(settings.bootstrap_servers, settings)
    appended = append_events(settings, session_events("slow-reader", turns=4))
    reader = L1Reader(settings.bootstrap_servers, settings)
    try:
        began, seqs = time.monotonic(), []
        for seq, _event in reader.read("default", timeout_seconds=2.0):
            seqs.append(seq)
            if len(seqs) % 5 == 1:
                time.sleep(1.0)  # the caller's own work, longer in total than the timeout
        assert seqs == list(range(1, appended + 1))
        assert time.monotonic() - began > 2.0
    finally:
        reader.close()
