"""The yardstick of ``usl ingest``'s append rate, as a whole process (issue #16).

``write FILE --events N`` writes N events of the benchmark workload (``bench_pipeline``'s
``make_events``) as canonical ASP lines, the input ``usl ingest FILE --format asp`` reads.
``send FILE TOPIC`` is a plain kafka-python producer with the L1 producer's settings (acks=all,
idempotent, linger 5 ms, batch 256 KiB) sending each line, keyed by its sessionId, to partition 0
of TOPIC, which must exist (``usl topics create`` with a prefix of its own). Timing the two as
whole processes side by side (``/usr/bin/time``) compares what a user waits for; see
docs/benchmarks.md, "`usl ingest` against kafka-python".
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

_MAX_MESSAGE_BYTES = 2 * 768 * 1024  # the L1 producer's default (Settings.max_message_bytes)


def write_events(path: Path, count: int) -> int:
    """Write ``count`` (or a few more: whole sessions) workload events to ``path``; how many."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.* when run as a script
    from benchmarks.bench_pipeline import make_events
    from streams.asp import canonical_bytes

    events = make_events(count)
    path.write_bytes(b"".join(canonical_bytes(event) + b"\n" for event in events))
    return len(events)


def send(path: Path, topic: str, bootstrap: str) -> int:
    """Send every line of ``path`` to partition 0 of ``topic``; how many were acknowledged."""
    import orjson
    from kafka import KafkaProducer

    # Nothing of the project is imported: the yardstick's start is kafka-python's alone.
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                             batch_size=256 * 1024, max_in_flight_requests_per_connection=5,
                             max_request_size=_MAX_MESSAGE_BYTES, client_id="usl-bench-plain")
    records = path.read_bytes().splitlines()
    for value in records:
        producer.send(topic, key=orjson.loads(value)["sessionId"].encode(), value=value, partition=0)
    producer.flush()
    producer.close()
    return len(records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write", help="write the workload's events as ASP lines")
    write.add_argument("file", type=Path)
    write.add_argument("--events", type=int, default=10_000)
    sender = commands.add_parser("send", help="send FILE's lines to TOPIC with a plain producer")
    sender.add_argument("file", type=Path)
    sender.add_argument("topic")
    args = parser.parse_args(argv)
    if args.command == "write":
        print(f"wrote {write_events(args.file, args.events)} events to {args.file}")
        return 0
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        parser.error("send needs KAFKA_BOOTSTRAP_SERVERS")
    send(args.file, args.topic, bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
