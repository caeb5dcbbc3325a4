"""Text merges in the background: the sink loop keeps a tantivy index open and stages each
generation from its committed state (sinks/text_writer.py, LiveIndex), so a merge runs beside
the commits; what every generation holds and answers is what the plain writer's does."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from sinks.generations import GenerationStore, Manifest
from sinks.text import get_engine
from sinks.text_writer import TextWriter

WORDS = ("refund deploy kafka broker timeout parquet schema cursor vector faiss chunk manifest "
         "permission denied migration table rounding invoice retry backoff latency 退款 外键").split()
QUERIES = ("refund deploy", "kafka broker timeout", "migration table", "退款", "retry backoff latency")


def _records(batch: int, size: int = 12) -> list[dict[str, Any]]:
    rng = random.Random(batch)
    return [{"chunkId": f"c-{batch:03d}-{i:02d}", "sessionId": f"s-{batch % 5}", "logId": "default",
             "text": " ".join(rng.choice(WORDS) for _ in range(9)), "minSeq": batch * 100 + i,
             "maxSeq": batch * 100 + i, "eventTime": "2026-12-04T10:00:00Z"} for i in range(size)]


def _commit(store: GenerationStore, writer: TextWriter, seq: int, records: list[dict[str, Any]], *,
            abort: bool = False) -> Manifest | None:
    current = store.current()
    previous = store.generation_dir(current.generation_id) if current else None
    staging = store.begin()
    try:
        writer.write(staging, previous, records)
        if abort:
            store.abort()
            return None
        return store.commit(staging, Manifest(
            kind="text", log_id="default", line=store.line, generation_id=0, built_through_seq=seq,
            schema_version="1", asp_version="1", chunker={}, embedding=None, redaction_policy_hash="p",
            chunk_count=(current.chunk_count if current else 0) + len(records)))
    except BaseException:
        store.abort()
        raise


def _answers(store: GenerationStore, manifest: Manifest) -> dict[str, Any]:
    engine = get_engine("tantivy")
    directory = store.generation_dir(manifest.generation_id)
    hits = {query: [(h.chunk_id, round(h.score, 5)) for h in engine.search(directory, query, limit=40)]
            for query in QUERIES}
    return {"ids": engine.all_ids(directory), "hits": hits}


def _segments(store: GenerationStore, manifest: Manifest) -> int:
    return len(json.loads((store.generation_dir(manifest.generation_id) / "meta.json").read_text())["segments"])


@pytest.fixture
def stores(tmp_path: Path) -> tuple[GenerationStore, GenerationStore]:
    return (GenerationStore(tmp_path / "live" / "indexes", "default", "text"),
            GenerationStore(tmp_path / "plain" / "indexes", "default", "text"))


def test_every_live_generation_holds_and_answers_what_the_plain_writer_gives(
        stores: tuple[GenerationStore, GenerationStore], tmp_path: Path) -> None:
    """60 commits, enough for tantivy to merge segments several times: each generation of the
    live line has the plain line's ids and the same hits and scores, verifies against its
    manifest (no file of a merge in flight), and the merges it picked up cut its segments."""
    live_store, plain_store = stores
    live, plain = TextWriter("tantivy"), TextWriter("tantivy")
    live.live = True
    try:
        for batch in range(60):
            records = _records(batch)
            a = _commit(live_store, live, batch, records)
            b = _commit(plain_store, plain, batch, records)
            assert a is not None and b is not None
            live_store.verify(a)
            assert _answers(live_store, a) == _answers(plain_store, b), f"batch {batch}"
        assert _segments(live_store, a) < 60, "no merge reached a generation"
    finally:
        live.close_live()
    later = _commit(live_store, live, 60, _records(60))  # after close: the plain way, from the live line
    assert later is not None and len(get_engine("tantivy").all_ids(live_store.generation_dir(later.generation_id))) == 61 * 12


def test_a_staged_generation_that_was_never_committed_is_not_built_on(
        stores: tuple[GenerationStore, GenerationStore], tmp_path: Path) -> None:
    store, _ = stores
    writer = TextWriter("tantivy")
    writer.live = True
    try:
        _commit(store, writer, 1, _records(1))
        assert _commit(store, writer, 2, _records(2), abort=True) is None
        last = _commit(store, writer, 3, _records(3))
    finally:
        writer.close_live()
    assert last is not None
    ids = get_engine("tantivy").all_ids(store.generation_dir(last.generation_id))
    assert ids == sorted(r["chunkId"] for r in _records(1) + _records(3))


def test_a_new_process_continues_from_the_current_generation(
        stores: tuple[GenerationStore, GenerationStore], tmp_path: Path) -> None:
    """A crashed process leaves its work directory behind; the next one starts it again from
    the generation the store has."""
    store, _ = stores
    first = TextWriter("tantivy")
    first.live = True
    _commit(store, first, 1, _records(1))
    _commit(store, first, 2, _records(2))  # never closed: as after kill -9
    second = TextWriter("tantivy")
    second.live = True
    try:
        last = _commit(store, second, 3, _records(3))
    finally:
        second.close_live()
    assert last is not None
    ids = get_engine("tantivy").all_ids(store.generation_dir(last.generation_id))
    assert ids == sorted(r["chunkId"] for r in _records(1) + _records(2) + _records(3))
