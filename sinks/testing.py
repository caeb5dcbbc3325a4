"""Test kit for the sinks, shipped with the package so the fault suite (``python -m
reliability``), the benchmarks and the tests use one copy (as bytewax ships ``testing.py``).

- Record factories: :func:`make_event`, :func:`make_chunk`, :func:`make_toolresult` build the
  records the stream side publishes; :func:`commit_batches` commits them through a real
  :class:`~sinks.generations.GenerationStore`, one generation per batch.
- Reading what a generation holds: :func:`current_generation`, :func:`tantivy_docs`,
  :func:`vector_ids`, :func:`parquet_rows`, and :func:`index_keys` (every kind at once), to be
  checked against :func:`expected_keys` (what the derived topics say each index must hold).
- Watermarks: :func:`wait_for_watermarks`, :func:`watermark_history` and
  :func:`assert_watermarks_monotone`.
- :func:`replay_chunks`: the chunks the in-process rebuild path derives from L1.
"""

from __future__ import annotations

import hashlib
import itertools
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from sinks.generations import GenerationStore, Manifest
from sinks.rebuild import ReplayStream
from sinks.runner import index_root
from sinks.text import get_engine
from sinks.vector_writer import segment_names
from sinks.watermarks import read_watermarks
from sinks.writer import SOURCE_KINDS, IndexWriter, parquet_segments
from streams.l1 import L1Reader, read_topic_to_end
from streams.settings import Settings
from streams.testing import chunk_set, topic_records
from streams.topics import Topics

__all__ = [
    "T0", "assert_no_duplicates", "assert_watermarks_monotone", "commit_batches",
    "current_generation", "expected_keys", "file_digests", "index_keys", "iso", "make_chunk",
    "make_event", "make_toolresult", "parquet_rows", "replay_chunks", "tantivy_docs", "vector_ids",
    "wait_for_a_write", "wait_for_raw_watermarks", "wait_for_watermarks", "watermark_history",
]

#: Event time of seq 0 in the record factories.
T0 = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
_ids = itertools.count(1)


# -- record factories ------------------------------------------------------------------------


def iso(seconds: float) -> str:
    """RFC 3339 time ``seconds`` after :data:`T0`."""
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_event(
    seq: int, session_id: str, event_type: str = "message", *, log_id: str = "default",
    role: str | None = None, run_id: str | None = None, turn_id: str | None = None,
    episode_id: str | None = None, parent_session_id: str | None = None,
    parent_event_id: str | None = None, acl: dict[str, Any] | None = None,
    fields: dict[str, Any] | None = None, event_id: str | None = None,
    visibility: str = "visible", at: float | None = None,
) -> dict[str, Any]:
    """A redacted event record as the redaction agent publishes it."""
    event = {
        "aspVersion": "1.0", "eventId": event_id or f"e-{seq}-{next(_ids)}", "logId": log_id,
        "sessionId": session_id, "runId": run_id, "turnId": turn_id, "episodeId": episode_id,
        "parentSessionId": parent_session_id, "parentEventId": parent_event_id,
        "type": event_type, "role": role, "time": iso(seq if at is None else at),
        "visibility": visibility, "acl": acl or {"tenant": "acme", "read": ["*"]},
        "fields": fields or {},
    }
    return {"kind": "event", "logId": log_id, "seq": seq, "event": event, "policy": "p1"}


def make_chunk(
    session_id: str, seqs: Sequence[int], *, log_id: str = "default", run_id: str | None = None,
    turn_id: str | None = None, roles: Sequence[str] = ("user",), tool_names: Sequence[str] = (),
    statuses: Sequence[str] = (), types: Sequence[str] = ("message",),
    acl: dict[str, Any] | None = None, chunk_id: str | None = None,
) -> dict[str, Any]:
    """A SearchChunkV1 record whose evidence is one event per seq."""
    texts = [f"[user] event {seq} of {session_id}" for seq in seqs]
    evidence, cursor = [], 0
    for seq, text in zip(seqs, texts, strict=True):
        evidence.append({"eventId": f"ev-{session_id}-{seq}", "seq": seq, "start": cursor,
                         "end": cursor + len(text.encode()), "part": [0, len(text.encode())]})
        cursor += len(text.encode()) + 1
    return {
        "kind": "chunk", "schema": "SearchChunkV1",
        "chunkId": chunk_id or f"c_{hashlib.sha256(f'{session_id}{list(seqs)}'.encode()).hexdigest()[:32]}",
        "logId": log_id, "sessionId": session_id, "runId": run_id, "turnId": turn_id,
        "episodeId": None, "unit": "turn", "text": "\n".join(texts),
        "fields": {"roles": sorted(roles), "types": sorted(types), "toolNames": sorted(tool_names),
                   "statuses": sorted(statuses), "paramKeys": []},
        "evidence": evidence, "evidenceEventIds": [e["eventId"] for e in evidence],
        "minSeq": min(seqs), "maxSeq": max(seqs), "startTime": iso(min(seqs)),
        "endTime": iso(max(seqs)), "eventTime": iso(max(seqs)), "tokenCount": 10 * len(seqs),
        "acl": acl or {"tenant": "acme", "read": ["*"]},
        "versions": {"asp": "1.0", "chunker": "1.0", "tokenizer": "t", "redactionPolicy": "p1"},
    }


def make_toolresult(
    seq: int, session_id: str, text: str, *, log_id: str = "default", tool_name: str = "Bash",
    status: str = "ok", tool_call_id: str | None = None,
) -> dict[str, Any]:
    """A full tool-result record as published on the tool-results topic."""
    return {
        "kind": "toolresult", "logId": log_id, "seq": seq, "eventId": f"tr-{seq}",
        "sessionId": session_id, "runId": None, "turnId": f"t-{session_id}",
        "toolCallId": tool_call_id or f"call-{seq}", "toolName": tool_name, "status": status,
        "text": text, "time": iso(seq), "acl": {"tenant": "acme", "read": ["*"]}, "policy": "p1",
    }


def commit_batches(root: Path, writer: IndexWriter, batches: Sequence[Sequence[dict[str, Any]]],
                   log_id: str = "default") -> list[Path]:
    """Commit one generation per batch through the real GenerationStore; their directories."""
    store = GenerationStore(root, log_id, writer.kind)
    dirs = []
    for batch in batches:
        current = store.current_id()
        previous = store.generation_dir(current) if current is not None else None
        staging = store.begin()
        writer.write(staging, previous, list(batch))
        through = max((int(r.get("maxSeq", r.get("seq", 0))) for r in batch), default=0)
        manifest = Manifest(
            kind=writer.kind, log_id=log_id, line="live", generation_id=0,
            built_through_seq=through, schema_version="1", asp_version="1.0", chunker={},
            embedding=None, redaction_policy_hash="p1", extra=writer.describe(),
        )
        committed = store.commit(staging, manifest)
        dirs.append(store.generation_dir(committed.generation_id))
    return dirs


def file_digests(directory: Path) -> dict[str, tuple[str, int]]:
    """name → (sha256, inode) of every file in ``directory``."""
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_ino)
            for p in sorted(directory.iterdir()) if p.is_file()}


# -- reading what a generation holds ---------------------------------------------------------


def current_generation(settings: Settings, kind: str, log_id: str = "default", *,
                       shard: str | None = None) -> Path | None:
    """Directory of the current generation of the ACTIVE line of ``kind`` (of its ``shard``,
    ``shard-I-of-N``, if given; None before any)."""
    store = GenerationStore(index_root(settings), log_id, kind, shard=shard)
    manifest = store.current()
    return None if manifest is None else store.generation_dir(manifest.generation_id)


def tantivy_docs(gen_dir: Path, field: str) -> list[dict[str, Any]]:
    """Every stored document of the tantivy index in ``gen_dir`` (fields flattened)."""
    import tantivy

    index = tantivy.Index.open(str(gen_dir))
    searcher = index.searcher()
    if searcher.num_docs == 0:
        return []
    hits = searcher.search(tantivy.Query.all_query(), limit=searcher.num_docs, count=False).hits
    docs = []
    for _score, address in hits:
        stored = searcher.doc(address).to_dict()
        docs.append({name: values[0] if len(values) == 1 else values for name, values in stored.items()})
    return sorted(docs, key=lambda d: str(d[field]))


def vector_ids(gen_dir: Path) -> list[str]:
    """chunkIds of every vector segment of a generation, segment by segment (duplicates kept)."""
    ids: list[str] = []
    for name in segment_names(gen_dir):
        ids += orjson.loads((gen_dir / f"{name}.ids.json").read_bytes())["chunkIds"]
    return ids


def parquet_rows(gen_dir: Path, table: str, columns: str = "*") -> list[tuple[Any, ...]]:
    """Rows of a Parquet table of a structured/analytics generation, sorted (duplicates kept)."""
    import duckdb

    files = parquet_segments(gen_dir, table)
    if not files:
        return []
    listed = ", ".join("'" + str(p).replace("'", "''") + "'" for p in files)
    with duckdb.connect() as con:
        rows = con.execute(f"SELECT {columns} FROM read_parquet([{listed}], union_by_name = true)").fetchall()
    return sorted(rows, key=repr)


def index_keys(settings: Settings, *, shard: str | None = None) -> dict[str, dict[str, list[Any]]]:
    """Per kind, the key of every row/document its current generation (of ``shard``, if
    given) holds (duplicates kept)."""
    keys: dict[str, dict[str, list[Any]]] = {}
    text = current_generation(settings, "text", shard=shard)
    if text is not None:
        engine = get_engine("tantivy")
        ids = engine.all_ids(text)
        if engine.count(text) != len(ids):
            raise AssertionError(f"text index counts {engine.count(text)} documents but lists {len(ids)}")
        keys["text"] = {"chunks": ids}
    vector = current_generation(settings, "vector", shard=shard)
    if vector is not None:
        keys["vector"] = {"chunks": vector_ids(vector)}
    structured = current_generation(settings, "structured", shard=shard)
    if structured is not None:
        keys["structured"] = {
            "chunks": [r[0] for r in parquet_rows(structured, "chunks", "chunkId")],
            "coverage": parquet_rows(structured, "coverage", "chunkId, eventId, partFrom"),
            "sessions": [r[0] for r in parquet_rows(structured, "sessions", "seq")],
        }
    analytics = current_generation(settings, "analytics", shard=shard)
    if analytics is not None:
        keys["analytics"] = {
            "chunks": [r[0] for r in parquet_rows(analytics, "chunks", "chunkId")],
            **{table: [r[0] for r in parquet_rows(analytics, table, "seq")]
               for table in ("events", "tool_calls", "tool_results")},
        }
    toolresults = current_generation(settings, "toolresults", shard=shard)
    if toolresults is not None:
        keys["toolresults"] = {"results": [d["id"] for d in tantivy_docs(toolresults, "id")]}
    return keys


def assert_no_duplicates(keys: dict[str, dict[str, list[Any]]]) -> None:
    """Raise AssertionError naming the first table of :func:`index_keys` that holds a key twice."""
    for kind, tables in keys.items():
        for table, values in tables.items():
            seen: set[Any] = set()
            dups = [v for v in values if v in seen or seen.add(v)]  # type: ignore[func-returns-value]
            if dups:
                raise AssertionError(f"{kind}.{table} holds duplicates: {dups[:5]}")


def expected_keys(settings: Settings) -> dict[str, set[Any]]:
    """What the derived topics say each index must hold."""
    chunks = set(chunk_set(settings))
    events = [r for r in topic_records(settings, "redacted") if r.get("kind") == "event"]
    results = {f"{r['logId']}:{r['seq']}" for r in topic_records(settings, "toolresults")
               if r.get("kind") in SOURCE_KINDS["toolresults"]}
    return {
        "chunks": chunks,
        "events": {int(r["seq"]) for r in events},
        "tool_calls": {int(r["seq"]) for r in events if r["event"]["type"] == "tool.call"},
        "tool_results": {int(r["seq"]) for r in events if r["event"]["type"] == "tool.result"},
        "toolresults": results,
    }


# -- watermarks and the rebuild path ---------------------------------------------------------


def wait_for_watermarks(settings: Settings, seq: int, kinds: Iterable[str], *, log_id: str = "default",
                        timeout: float = 180.0) -> dict[str, dict[str, Any]]:
    """Block until every kind's watermark reaches ``seq``; return the watermarks."""
    deadline = time.monotonic() + timeout
    kinds = list(kinds)
    seen: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        table = read_watermarks(settings.bootstrap_servers or "", settings)
        seen = {kind: table[(log_id, kind)] for kind in kinds if (log_id, kind) in table}
        if len(seen) == len(kinds) and all(int(w["builtThroughSeq"]) >= seq for w in seen.values()):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"watermarks did not reach {seq} in {timeout}s: {seen}")


def wait_for_raw_watermarks(settings: Settings, seq: int, keys: Iterable[str], *,
                            timeout: float = 240.0) -> dict[str, dict[str, Any]]:
    """Block until the last record under every one of ``keys`` (``LOG/KIND`` or a shard's
    ``LOG/KIND/shard-I-of-N``, as published, not folded) reaches ``seq``; return them."""
    deadline = time.monotonic() + timeout
    keys = list(keys)
    behind: dict[str, int] = {}
    while time.monotonic() < deadline:
        history = watermark_history(settings)
        last = {key: history[key][-1] for key in keys if history.get(key)}
        behind = {key: int(last[key]["builtThroughSeq"]) if key in last else -1 for key in keys}
        behind = {key: through for key, through in behind.items() if through < seq}
        if not behind:
            return last
        time.sleep(0.5)
    raise AssertionError(f"watermarks still below {seq} after {timeout}s: {behind}")


def watermark_history(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """Every watermark record of the compacted topic, in topic order, per key."""
    history: dict[str, list[dict[str, Any]]] = defaultdict(list)
    topic = Topics.from_settings(settings).watermarks
    for record in read_topic_to_end(settings.bootstrap_servers or "", topic):
        if record.value is not None:
            history[record.key.decode()].append(orjson.loads(record.value))
    return history


def assert_watermarks_monotone(history: dict[str, list[dict[str, Any]]]) -> None:
    """Raise AssertionError when a line's watermark ever goes backwards."""
    for key, records in history.items():
        last: dict[str, tuple[int, int]] = {}
        for watermark in records:
            line = watermark["line"]
            position = (int(watermark["generationId"]), int(watermark["builtThroughSeq"]))
            before = last.get(line)
            if before is not None and (position[0] < before[0] or position[1] < before[1]):
                raise AssertionError(f"{key} watermark went backwards on line {line}: {before} -> {position}")
            last[line] = position


def replay_chunks(settings: Settings, log_ids: Sequence[str] = ("default",)) -> dict[str, bytes]:
    """chunkId → canonical bytes of the chunks the in-process rebuild path (``ReplayStream``:
    the same pure redaction + chunking code) derives from the pipeline's L1."""
    chunks: dict[str, bytes] = {}
    reader = L1Reader(settings.bootstrap_servers or "", settings)
    try:
        for log_id in log_ids:
            replay = ReplayStream(settings, log_id)
            for seq, event in reader.read(log_id, clocks=True):
                for record in replay.feed(seq, event):
                    if record["kind"] == "chunk":
                        body = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
                        if chunks.setdefault(record["chunkId"], body) != body:
                            raise AssertionError(f"replay derived chunk {record['chunkId']} twice "
                                                 "with different bytes")
    finally:
        reader.close()
    return chunks


def wait_for_a_write(lines: Sequence[Path], timeout: float) -> None:
    """Return as soon as a writer of one of the generation ``lines`` is inside a write (its
    staging dir exists), or at the timeout: a crash test aims its kill -9 at the middle of a
    write instead of a random moment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in lines:
            if line.is_dir() and any(p.name.startswith(".staging-gen-") for p in line.iterdir()):
                return
        time.sleep(0.001)
