"""The worker on L1 written by a transactional producer, against the same events appended plainly.

SPEC §3 lets another producer write L1 in transactions: each commit takes an offset (its marker)
that holds no event. One ``usl worker`` (1 L1 and 1 stream partition); first ``--sessions``
sessions appended as ``usl ingest`` appends them, then as many more by a transactional producer,
``--per-transaction`` events per transaction; for each, the time from the first append until the
worker's progress markers reach L1's committed seq (the last stable offset). ::

    .venv/bin/python -W ignore -m benchmarks.bench_transactional [--sessions 40] [--per-transaction 10]

Without KAFKA_BOOTSTRAP_SERVERS it starts (and stops) a local broker of its own.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
from benchmarks.measure import bench_broker
from deploy.kafka.broker import stop_broker
from deploy.testing import Stack, stack_settings
from streams.asp import validate_event
from streams.l1 import L1Producer
from streams.testing import append_events, interleave, l1_seq, session_events, wait_for_markers


def _sessions(prefix: str, count: int) -> list[dict[str, Any]]:
    start = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
    return interleave(*[session_events(f"{prefix}-{n}", turns=3, seed=n, start=start + timedelta(minutes=n))
                        for n in range(count)], seed=1)


def _transactional(settings: Any, bootstrap: str, events: list[dict[str, Any]], per_transaction: int) -> int:
    """Append ``events`` as L1Producer does (key, partition, bytes), ``per_transaction`` a
    transaction; the number of transactions."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             transactional_id=f"{settings.topic('l1')}-bench")
    appender = L1Producer(bootstrap, settings)
    appender._registry.assign("default")  # outside any transaction: the registry is read committed
    own, appender._producer = appender._producer, producer  # the product's producer is not transactional
    try:
        producer.init_transactions()
        for first in range(0, len(events), per_transaction):
            producer.begin_transaction()
            for event in events[first:first + per_transaction]:
                appender.append(validate_event(event))
            producer.commit_transaction()
    finally:
        appender._producer = own
        appender.close()
        producer.close()
    return -(-len(events) // per_transaction)


def run(sessions: int, per_transaction: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="usl-bench-tx-"))
    bootstrap, broker_settings, _ = bench_broker(work)
    settings = stack_settings(work, bootstrap, l1_partitions=1, stream_partitions=1)
    stack = Stack(settings)
    figures: dict[str, Any] = {}
    try:
        stack.worker()
        append_events(settings, _sessions("warm", 2))
        wait_for_markers(settings, l1_seq(settings), timeout=300)
        for kind in ("plain", "transactional"):
            events = _sessions(kind, sessions)
            began = time.monotonic()
            if kind == "plain":
                append_events(settings, events)
            else:
                figures["transactions"] = _transactional(settings, bootstrap, events, per_transaction)
            appended = time.monotonic() - began
            wait_for_markers(settings, l1_seq(settings), timeout=1800)
            figures[kind] = {"events": len(events), "appendSeconds": round(appended, 1),
                             "toHeadSeconds": round(time.monotonic() - began, 1)}
    finally:
        stack.close()
        if broker_settings is not None:
            stop_broker(broker_settings)
        shutil.rmtree(work, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40, help="sessions of each kind (about 26 events each)")
    parser.add_argument("--per-transaction", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(run(args.sessions, args.per_transaction), indent=1))


if __name__ == "__main__":
    main()
