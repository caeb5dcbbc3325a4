"""What the broker says of a hole the worker's reads did not fill (streams.stages.gaps): a real
broker, records from a plain and a transactional producer on one partition of L1. Transaction
markers take offsets and hold no record, nor does an aborted transaction for a reader of
committed records, as the worker is: a hole of those alone is found empty and accepted; a hole
that holds records (faust dropped them) is not."""

from __future__ import annotations

import asyncio
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
from streams.settings import Settings
from streams.topics import Topics, ensure_topics, records_between

pytestmark = pytest.mark.kafka


def _end(bootstrap: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        partition = TopicPartition(topic, 0)
        return int(consumer.end_offsets([partition])[partition])
    finally:
        consumer.close()


def _send(producer: KafkaProducer, topic: str, *values: bytes) -> list[int]:
    return [producer.send(topic, value, partition=0).get(timeout=30).offset for value in values]


def test_the_broker_finds_records_in_a_hole_and_none_among_transaction_markers(settings: Settings) -> None:
    bootstrap = settings.bootstrap_servers or ""
    ensure_topics(bootstrap, settings)
    topic = Topics.from_settings(settings).l1
    plain = KafkaProducer(bootstrap_servers=bootstrap)
    transactional = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-judge")
    try:
        transactional.init_transactions()
        before = _send(plain, topic, b"a", b"b")
        transactional.begin_transaction()
        committed = [transactional.send(topic, value, partition=0) for value in (b"c", b"d")]
        transactional.commit_transaction()
        between = _send(plain, topic, b"e")
        transactional.begin_transaction()
        aborted = [transactional.send(topic, b"f", partition=0)]
        transactional.flush()  # written, then aborted: it stays in the log, under an abort marker
        transactional.abort_transaction()
        after = _send(plain, topic, b"g")
    finally:
        transactional.close()
        plain.close()
    written = sorted([*before, *(f.get(timeout=30).offset for f in committed), *between,
                      *(f.get(timeout=30).offset for f in aborted), *after])
    # The coordinator writes a transaction's marker after it answers the commit or abort, so a
    # marker may land after a later plain record: wait for both.
    end = _end(bootstrap, topic)
    deadline = time.monotonic() + 30
    while end < written[-1] + 1 or end - written[0] < len(written) + 2:
        assert time.monotonic() < deadline, (written, end)
        time.sleep(0.2)
        end = _end(bootstrap, topic)
    markers = sorted(set(range(written[0], end)) - set(written))
    assert len(markers) == 2, (written, end, "a commit and an abort marker each take an offset")

    def judge(start: int, end: int) -> list[int] | None:
        return asyncio.run(records_between(bootstrap, topic, 0, start, end))

    # Read as the worker reads, committed: an aborted transaction's record is no record either.
    kept = [offset for offset in written if offset not in {f.get(timeout=30).offset for f in aborted}]
    assert judge(written[0], end) == kept
    for marker in markers:
        assert judge(marker, marker + 1) == [], marker
    around = range(markers[0] - 1, markers[0] + 2)
    assert judge(around.start, around.stop) == [offset for offset in around if offset in kept]
    aborted_offset = aborted[0].get(timeout=30).offset
    assert judge(aborted_offset, aborted_offset + 1) == []


def test_a_broker_that_does_not_answer_gives_no_verdict() -> None:
    assert asyncio.run(records_between("127.0.0.1:1", "nothing", 0, 0, 5, timeout=2.0)) is None
