"""Text merges in the background: the sink loop keeps a tantivy index open and stages each
generation from its committed state (sinks/text_writer.py, LiveIndex), so a merge runs beside
the commits; what every generation holds and answers is what the plain writer's does."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from sinks.generations import GenerationStore
from sinks.testing import commit_batches
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


def _commit(root: Path, writer: TextWriter, records: list[dict[str, Any]]) -> Path:
    """One generation of ``records`` through the real GenerationStore; its directory."""
    return commit_batches(root, writer, [records])[0]


def _answers(directory: Path) -> dict[str, Any]:
    engine = get_engine("tantivy")
    hits = {query: [(h.chunk_id, round(h.score, 5)) for h in engine.search(directory, query, limit=40)]
            for query in QUERIES}
    return {"ids": engine.all_ids(directory), "hits": hits}


def _ids(directory: Path) -> list[str]:
    return get_engine("tantivy").all_ids(directory)


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "live" / "indexes", tmp_path / "plain" / "indexes"


def test_every_live_generation_holds_and_answers_what_the_plain_writer_gives(roots: tuple[Path, Path]) -> None:
    """60 commits, enough for tantivy to merge segments several times: each generation of the
    live line has the plain line's ids and the same hits and scores, verifies against its
    manifest (no file of a merge in flight), and the merges it picked up cut its segments."""
    live_root, plain_root = roots
    live_store = GenerationStore(live_root, "default", "text")
    live, plain = TextWriter("tantivy"), TextWriter("tantivy")
    live.live = True
    try:
        for batch in range(60):
            records = _records(batch)
            a, b = _commit(live_root, live, records), _commit(plain_root, plain, records)
            manifest = live_store.current()
            assert manifest is not None
            live_store.verify(manifest)
            assert _answers(a) == _answers(b), f"batch {batch}"
        assert len(json.loads((a / "meta.json").read_text())["segments"]) < 60, "no merge reached a generation"
    finally:
        live.close_live()
    later = _commit(live_root, live, _records(60))  # after close: the plain way, from the live line
    assert len(_ids(later)) == 61 * 12


def test_a_staged_generation_that_was_never_committed_is_not_built_on(roots: tuple[Path, Path]) -> None:
    root, _ = roots
    writer = TextWriter("tantivy")
    writer.live = True
    try:
        first = _commit(root, writer, _records(1))
        store = GenerationStore(root, "default", "text")
        staging = store.begin()
        writer.write(staging, first, _records(2))
        store.abort()  # as when the commit of a staged generation fails
        last = _commit(root, writer, _records(3))
    finally:
        writer.close_live()
    assert _ids(last) == sorted(r["chunkId"] for r in _records(1) + _records(3))


def test_a_new_process_continues_from_the_current_generation(roots: tuple[Path, Path]) -> None:
    """A crashed process leaves its work directory behind; the next one starts it again from
    the generation the store has."""
    root, _ = roots
    first = TextWriter("tantivy")
    first.live = True
    _commit(root, first, _records(1))
    _commit(root, first, _records(2))  # never closed: as after kill -9
    second = TextWriter("tantivy")
    second.live = True
    try:
        last = _commit(root, second, _records(3))
    finally:
        second.close_live()
    assert _ids(last) == sorted(r["chunkId"] for r in _records(1) + _records(2) + _records(3))
