"""Sink benchmark: every index writer on the same synthetic chunks, and the rebuild rate from 0.

The data is made by the pipeline's own code: synthetic ASP sessions (turns with a user message,
tool calls with outputs, an assistant answer) go through the real redaction and chunker
(:class:`sinks.rebuild.ReplayStream`, no Kafka), giving about N chunks (default 20 000) with
their redacted events and tool results. Each sink's writer then indexes its records the way
``SinkRunner`` does: batches of ``--batch`` records (``USL_SINK_BATCH_SIZE``, 512), each batch
one generation (``begin`` → ``write`` → ids file → ``commit`` → ``gc(keep_last=3)``).

Prints, from one run:

- per sink: input records/s and chunks/s over the whole generation cycle; text with tantivy
  and with whoosh (whoosh, ~30x slower, on the first ``--whoosh-chunks``; tantivy again on those
  same chunks for the ratio); vector embeddings/s with wordllama (embedding alone) next to the
  whole cycle; structured and analytics Parquet rows/s; tool results/s;
- against a real broker (``KAFKA_BOOTSTRAP_SERVERS``, else a local one started and stopped
  here): the first ``--rebuild-events`` events of the log appended to L1, then the raw rate at which kafka-python reads it back
  (``L1Reader.read``) and the rebuild rate from offset 0 (``sinks.rebuild.rebuild`` of
  ``text``: read L1, redact, chunk, index, verify, switch) in events/s, with their ratio.

Usage::

    .venv/bin/python benchmarks/bench_sinks.py [--chunks 20000] [--batch 512]
        [--kinds text,whoosh,vector,structured,analytics,toolresults]
        [--whoosh-chunks 5000] [--rebuild-events 30000] [--no-rebuild] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from sinks.generations import GenerationStore, Manifest
from sinks.rebuild import ReplayStream, rebuild
from sinks.service import make_writer
from sinks.writer import IndexWriter, record_id
from streams.asp import ASP_VERSION, validate_event
from streams.settings import Settings

__all__ = ["main", "make_log", "replay"]

_WORDS = ("deploy refund migration pytest rounding kafka broker index tantivy vector faiss chunk session "
          "turn tool result error permission denied timeout retry cache schema parquet duckdb latency "
          "watermark generation manifest cursor planner snapshot redaction consumer offset partition "
          "fixture teardown container volume network query plan deadlock rollback module provider "
          "state lock drift output hook bundle hydration").split()
_TOOLS = ("Bash", "Read", "Edit", "Grep", "run_sql")


def make_log(turns: int, *, seed: int = 5, turns_per_session: int = 8) -> list[dict[str, Any]]:
    """Validated ASP events: sessions of ``turns_per_session`` turns, ``turns`` turns in all."""
    rng = random.Random(seed)
    clock = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
    events: list[dict[str, Any]] = []

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high)))

    def add(session: str, kind: str, role: str | None, turn: str | None, **fields: Any) -> None:
        nonlocal clock
        clock += timedelta(seconds=rng.randint(1, 5))
        events.append(validate_event({
            "eventId": f"{session}-e{len(events)}", "logId": "default", "sessionId": session, "type": kind,
            "role": role, "time": clock.isoformat().replace("+00:00", "Z"), "turnId": turn, "fields": fields,
        }))

    for s in range(-(-turns // turns_per_session)):
        session = f"bench-{s:05d}"
        add(session, "session.started", None, None, title=f"session {s}", model="bench-model")
        for t in range(min(turns_per_session, turns - s * turns_per_session)):
            turn = f"{session}-t{t}"
            add(session, "turn.started", None, turn)
            add(session, "message", "user", turn, text=f"please {text(15, 40)}")
            call = f"{turn}-c0"
            tool = rng.choice(_TOOLS)
            add(session, "tool.call", "assistant", turn, toolName=tool, toolCallId=call,
                input={"command": text(3, 8)})
            add(session, "tool.result", "tool", turn, toolName=tool, toolCallId=call,
                status=rng.choice(("ok", "ok", "error")), output=text(40, 160))
            add(session, "message", "assistant", turn, text=text(30, 120))
            add(session, "turn.ended", None, turn)
        add(session, "session.ended", None, None)
    return events


def replay(settings: Settings, events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The derived records of ``events`` (redacted events, tool results, chunks), by kind."""
    stream = ReplayStream(settings, "default")
    out: dict[str, list[dict[str, Any]]] = {"event": [], "toolresult": [], "chunk": []}
    for seq, event in enumerate(events, start=1):
        for record in stream.feed(seq, event):
            if record["kind"] in out and not record.get("provisional"):
                out[record["kind"]].append(record)
    return out


def drive(writer: IndexWriter, records: list[dict[str, Any]], batch: int, root: Path) -> dict[str, Any]:
    """Index ``records`` as the sink runner does; return timings and what the index holds."""
    store = GenerationStore(root, "default", writer.kind)
    manifest: Manifest | None = None
    write_seconds = 0.0
    started = time.perf_counter()
    for start in range(0, len(records), batch):
        chunk = records[start:start + batch]
        staging = store.begin()
        try:
            previous = store.generation_dir(manifest.generation_id) if manifest else None
            t = time.perf_counter()
            writer.write(staging, previous, chunk)
            write_seconds += time.perf_counter() - t
            generation = int(staging.name.rsplit("-", 1)[-1])
            (staging / f"ids-{generation:08d}.txt").write_text("\n".join(record_id(r) for r in chunk) + "\n")
            describe = writer.describe()
            manifest = store.commit(staging, Manifest(
                kind=writer.kind, log_id="default", line="", generation_id=0,
                built_through_seq=max(int(r.get("maxSeq", r.get("seq", 0))) for r in chunk),
                schema_version=str(describe.get("schemaVersion", "1")), asp_version=ASP_VERSION, chunker={},
                embedding=describe.get("embedding"), redaction_policy_hash="bench",
                chunk_count=start + len(chunk), extra=describe,
            ))
        except BaseException:
            store.abort()
            raise
        store.gc(keep_last=3)
    seconds = time.perf_counter() - started
    assert manifest is not None
    gen_dir = store.generation_dir(manifest.generation_id)
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in gen_dir.glob("*.parquet"))
    return {"records": len(records), "seconds": seconds, "writeSeconds": write_seconds,
            "generations": manifest.generation_id, "indexBytes": sum(s.bytes for s in manifest.segments),
            "parquetRows": rows}


def bench_writers(settings: Settings, data: dict[str, list[dict[str, Any]]], kinds: list[str], batch: int,
                  root: Path, whoosh_chunks: int) -> dict[str, dict[str, Any]]:
    chunks = data["chunk"]
    inputs = {
        "text": chunks, "whoosh": chunks[:whoosh_chunks], "tantivy-subset": chunks[:whoosh_chunks], "vector": chunks,
        # The runner hands these writers records in topic order: events and chunks interleaved.
        "structured": sorted(data["event"] + chunks, key=lambda r: int(r.get("maxSeq", r.get("seq", 0)))),
        "analytics": sorted(data["event"] + chunks, key=lambda r: int(r.get("maxSeq", r.get("seq", 0)))),
        "toolresults": data["toolresult"],
    }
    results: dict[str, dict[str, Any]] = {}
    if "whoosh" in kinds and "text" in kinds and whoosh_chunks < len(chunks):
        kinds = [*kinds, "tantivy-subset"]  # tantivy on whoosh's chunks, for the ratio
    for name in kinds:
        kind = "text" if name in ("whoosh", "tantivy-subset") else name
        configured = dataclasses.replace(settings, text_engine="whoosh") if name == "whoosh" else settings
        writer = make_writer(kind, configured)
        print(f"{name}: indexing {len(inputs[name])} records ...", file=sys.stderr)
        result = drive(writer, inputs[name], batch, root / name)
        print(f"{name}: {result['seconds']:.1f}s", file=sys.stderr)
        result["recordsPerSecond"] = result["records"] / result["seconds"]
        indexed_chunks = len(inputs[name]) if kind == "text" else len(chunks)
        result["chunksPerSecond"] = indexed_chunks / result["seconds"]
        if result["parquetRows"]:
            result["parquetRowsPerSecond"] = result["parquetRows"] / result["seconds"]
        if kind == "vector":
            texts = [c["text"] for c in chunks]
            t = time.perf_counter()
            writer.embedder.embed(texts)  # type: ignore[attr-defined]
            result["embeddingsPerSecond"] = len(texts) / (time.perf_counter() - t)
            result["embedder"] = writer.describe()["embedding"]["name"]
        results[name] = result
    return results


def bench_rebuild(settings: Settings, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Append ``events`` to L1 of a fresh topic set; raw L1 read rate vs rebuild-from-0 rate."""
    from kafka.admin import KafkaAdminClient

    import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)
    from streams.l1 import L1Producer, L1Reader
    from streams.topics import ensure_topics, topic_specs

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker_settings = None
    if not bootstrap:
        from deploy.kafka.broker import ensure_broker

        broker_settings = Settings.from_env({}, home=Path(settings.home) / "broker")
        bootstrap = ensure_broker(broker_settings)
    settings = dataclasses.replace(settings, bootstrap_servers=bootstrap, l1_partitions=1, stream_partitions=1,
                                   topic_prefix=f"bench{uuid.uuid4().hex[:8]}.")
    try:
        ensure_topics(bootstrap, settings)
        print(f"rebuild: appending {len(events)} events to L1 ...", file=sys.stderr)
        producer = L1Producer(bootstrap, settings)
        t = time.perf_counter()
        for event in events:
            producer.append(event)
        producer.flush()
        append_seconds = time.perf_counter() - t
        producer.close()
        reader = L1Reader(bootstrap, settings)
        # Not producer.flush()'s value: it returns 0 when a multiple of 10 000 events was
        # appended (its internal flushes forget the highest seq; reported).
        head = reader.committed_seq("default")
        t = time.perf_counter()
        read = sum(1 for _ in reader.read("default", 1, head))
        read_seconds = time.perf_counter() - t
        reader.close()
        print("rebuild: text from offset 0 ...", file=sys.stderr)
        t = time.perf_counter()
        manifest = rebuild(settings, bootstrap, "text")
        rebuild_seconds = time.perf_counter() - t
        # Seqs have gaps (transaction markers): count events, not seqs.
        count = len(events)
        assert read == count, f"read {read} of {count} events back from L1"
        assert manifest.built_through_seq == head, f"rebuilt through {manifest.built_through_seq}, head {head}"
        return {
            "events": count, "headSeq": head, "chunks": manifest.chunk_count,
            "appendEventsPerSecond": count / append_seconds, "rawReadEventsPerSecond": read / read_seconds,
            "rebuildEventsPerSecond": count / rebuild_seconds,
            "rebuildChunksPerSecond": manifest.chunk_count / rebuild_seconds, "rebuildSeconds": rebuild_seconds,
            "rebuildVsRawRead": (count / rebuild_seconds) / (read / read_seconds),
        }
    finally:
        if broker_settings is not None:
            from deploy.kafka.broker import stop_broker

            stop_broker(broker_settings)
        else:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            try:
                admin.delete_topics([spec.name for spec in topic_specs(settings)])
            finally:
                admin.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20000, help="about this many chunks (one per turn)")
    parser.add_argument("--batch", type=int, default=512, help="records per generation (USL_SINK_BATCH_SIZE)")
    parser.add_argument("--kinds", default="text,whoosh,vector,structured,analytics,toolresults")
    parser.add_argument("--whoosh-chunks", type=int, default=5000,
                        help="whoosh indexes only the first N chunks (tantivy too, for the ratio)")
    parser.add_argument("--rebuild-events", type=int, default=30000,
                        help="events of the log (its first ones) appended to L1 for the rebuild rate")
    parser.add_argument("--no-rebuild", action="store_true", help="skip the broker part")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="usl-bench-sinks-"))
    try:
        settings = Settings.from_env({}, home=tmp)
        print(f"making a log of about {args.chunks} turns ...", file=sys.stderr)
        events = make_log(args.chunks)
        t = time.perf_counter()
        data = replay(settings, events)
        replay_seconds = time.perf_counter() - t
        print(f"replay: {len(events)} events in {replay_seconds:.1f}s", file=sys.stderr)
        results: dict[str, Any] = {
            "log": {"events": len(events), "chunks": len(data["chunk"]), "toolResults": len(data["toolresult"]),
                    "replayEventsPerSecond": len(events) / replay_seconds, "batch": args.batch},
            "sinks": bench_writers(settings, data, args.kinds.split(","), args.batch, tmp / "indexes",
                                   args.whoosh_chunks),
        }
        if not args.no_rebuild:
            # Whole sessions only, so no open turn holds the rebuilt watermark back.
            ends = [i for i, e in enumerate(events[:args.rebuild_events]) if e["type"] == "session.ended"]
            results["rebuild"] = bench_rebuild(settings, events[:ends[-1] + 1] if ends else events)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    log = results["log"]
    print(f"log: {log['events']} events -> {log['chunks']} chunks, {log['toolResults']} tool results "
          f"(redaction + chunking in-process: {log['replayEventsPerSecond']:.0f} events/s); "
          f"batches of {log['batch']} records, one generation each")
    print(f"{'sink':<14} {'records':>8} {'records/s':>10} {'chunks/s':>9} {'gens':>5} {'MB':>7}  notes")
    for name, r in results["sinks"].items():
        notes = []
        if "parquetRowsPerSecond" in r:
            notes.append(f"{r['parquetRows']} Parquet rows, {r['parquetRowsPerSecond']:.0f} rows/s")
        if "embeddingsPerSecond" in r:
            notes.append(f"{r['embedder']} embedding alone {r['embeddingsPerSecond']:.0f} chunks/s")
        print(f"{name:<14} {r['records']:>8} {r['recordsPerSecond']:>10.0f} {r['chunksPerSecond']:>9.0f} "
              f"{r['generations']:>5} {r['indexBytes'] / 1e6:>7.1f}  {'; '.join(notes)}")
    sinks = results["sinks"]
    if "whoosh" in sinks:
        same = sinks.get("tantivy-subset", sinks.get("text"))
        if same is not None:
            print(f"text on the same {sinks['whoosh']['records']} chunks: tantivy / whoosh = "
                  f"{same['chunksPerSecond'] / sinks['whoosh']['chunksPerSecond']:.1f}x")
    if "rebuild" in results:
        r = results["rebuild"]
        print(f"rebuild text from offset 0: {r['events']} events -> {r['chunks']} chunks in {r['rebuildSeconds']:.1f}s = "
              f"{r['rebuildEventsPerSecond']:.0f} events/s ({r['rebuildChunksPerSecond']:.0f} chunks/s); "
              f"raw L1 read {r['rawReadEventsPerSecond']:.0f} events/s; rebuild/raw read = {r['rebuildVsRawRead']:.3f}; "
              f"append {r['appendEventsPerSecond']:.0f} events/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
