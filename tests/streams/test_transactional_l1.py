"""L1 written by a transactional producer (SPEC §3: seqs have gaps, transaction markers): the
worker indexes what L1 committed and nothing an aborted transaction wrote.

The planner's tail scan, the sinks and a rebuild read L1 ``read_committed``; the worker's faust
consumer read ``read_uncommitted`` (faust's default outside exactly-once), so the events of an
aborted transaction reached the redacted topic and the chunks: the live indexes held them, a
rebuild from L1 did not, and an open transaction's events were searchable before L1 committed
them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from kafka import KafkaProducer

import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
from deploy.testing import Stack
from streams.asp import validate_event
from streams.l1 import L1Producer
from streams.settings import Settings
from streams.testing import l1_seq, session_events, topic_records, wait_for_markers

pytestmark = [pytest.mark.kafka]


def _in_transaction(settings: Settings, producer: KafkaProducer, events: list[dict], *, commit: bool) -> None:
    """Append ``events`` as :class:`L1Producer` does (key, partition, bytes), in one transaction."""
    appender = L1Producer(settings.bootstrap_servers or "", settings)
    appender._registry.assign("default")  # outside the transaction: the registry reads it committed
    appender._producer, own = producer, appender._producer  # the product's producer is not transactional
    try:
        producer.begin_transaction()
        for event in events:
            appender.append(validate_event(event))
        producer.flush()
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    finally:
        appender._producer = own
        appender.close()


def test_the_worker_indexes_committed_transactions_and_nothing_an_aborted_one_wrote(
        make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(l1_partitions=1, stream_partitions=1, tick_every_seqs=8, idle_gap_seconds=60.0)
    start = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
    sessions = {name: session_events(name, turns=2, seed=n, start=start + timedelta(minutes=n))
                for n, name in enumerate(("kept-1", "aborted", "kept-2"))}
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap_servers or "", acks="all",
                             enable_idempotence=True, transactional_id=f"{settings.topic('l1')}-test")
    stack = Stack(settings)
    try:
        stack.worker()
        producer.init_transactions()
        _in_transaction(settings, producer, sessions["kept-1"], commit=True)
        _in_transaction(settings, producer, sessions["aborted"], commit=False)
        _in_transaction(settings, producer, sessions["kept-2"], commit=True)
        began = time.monotonic()
        head = l1_seq(settings)  # the last stable offset: every transaction ended
        wait_for_markers(settings, head, timeout=180)
        caught_up = time.monotonic() - began
    finally:
        producer.close()
        stack.close()
    events = [body["event"] for body in topic_records(settings, "redacted") if body.get("kind") == "event"]
    kept = [e["eventId"] for name in ("kept-1", "kept-2") for e in sessions[name]]
    assert {e["eventId"] for e in events} == set(kept), "every committed event, no aborted one"
    cited = {e["eventId"] for body in topic_records(settings, "chunks") if body.get("kind") == "chunk"
             for e in body["evidence"]}
    assert cited and not cited & {e["eventId"] for e in sessions["aborted"]}
    print(f"markers at the head {caught_up:.1f} s after the last transaction")
