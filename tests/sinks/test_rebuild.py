"""Invariants 4 and 5: ``usl rebuild`` replays L1 into the same indexes the live pipeline built,
even after every index and watermark was deleted, and never touches L1; a live sink follows a
rebuild's line switch; ``--from-seq`` does what it says.

The live side runs as real processes (``usl worker``, ``usl sink``); rebuilds run through the
CLI (``python -m deploy.cli rebuild``) or :func:`sinks.rebuild.rebuild`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from deploy.testing import Stack, settings_env
from sinks.generations import MAX_CHUNK_SEQ, GenerationStore
from sinks.rebuild import ReplayStream, rebuild
from sinks.runner import SinkRunner, index_root
from sinks.service import ALL_KINDS, make_writer, pipeline_versions
from sinks.testing import (
    assert_no_duplicates,
    assert_watermarks_monotone,
    current_generation,
    index_keys,
    parquet_rows,
    tantivy_docs,
    vector_ids,
    wait_for_watermarks,
    watermark_history,
)
from sinks.text import get_engine
from sinks.vector import VectorReader, get_embedder, vectors_for
from sinks.vector_writer import segment_names
from sinks.watermarks import WatermarkPublisher, read_watermarks
from streams.l1 import L1Reader, read_topic_to_end
from streams.settings import Settings
from streams.testing import append_events, chunk_set, interleave, session_events, topic_records
from streams.topics import Topics

QUERIES = ("deploy refund", "kafka broker timeout", '"permission denied"', "parquet schema cursor",
           "vector faiss chunk manifest")
TABLES = {"structured": ("chunks", "coverage", "sessions"),
          "analytics": ("events", "tool_calls", "tool_results", "chunks")}


def _events(prefix: str, sessions: int, *, seed: int = 0) -> list[dict[str, Any]]:
    return interleave(*[session_events(f"{prefix}-{i:02d}", turns=3, seed=seed + i,
                                       long_output_words=400 if i % 4 == 0 else 0)
                        for i in range(sessions)], seed=seed)


def snapshot(settings: Settings, kind: str) -> dict[str, Any]:
    """What a reader gets from the current generation of ``kind``: contents and ranked answers."""
    gen_dir = current_generation(settings, kind)
    assert gen_dir is not None, f"no {kind} generation"
    if kind == "text":
        engine = get_engine("tantivy")
        return {
            "ids": engine.all_ids(gen_dir),
            "docs": [(d["chunkId"], d["text"], d["eventTime"]) for d in tantivy_docs(gen_dir, "chunkId")],
            "search": {q: [(h.chunk_id, round(h.score, 4), h.rank) for h in engine.search(gen_dir, q, limit=10)]
                       for q in QUERIES},
        }
    if kind == "vector":
        ids = vector_ids(gen_dir)
        names = segment_names(gen_dir)
        vectors = vectors_for(gen_dir, names, ids)
        embedder = get_embedder(settings.embedder, cache_root=Path(settings.home).resolve() / "models")
        reader = VectorReader(gen_dir, names)
        return {
            "ids": sorted(ids),
            "vectors": {i: np.round(vectors[i], 5).tolist() for i in sorted(ids)},
            "search": {q: [(h.chunk_id, round(h.score, 4)) for h in reader.search(embedder.embed([q])[0], limit=10)]
                       for q in QUERIES},
        }
    if kind == "toolresults":
        return {"docs": tantivy_docs(gen_dir, "id")}
    tables: dict[str, Any] = {t: parquet_rows(gen_dir, t) for t in TABLES[kind]}
    if kind == "structured":
        # The writer keeps the first edge per batch: compare the edges, not the batching.
        tables["lineage"] = parquet_rows(gen_dir, "lineage", "DISTINCT kind, fromId, toId, sessionId, logId")
    return tables


def l1_records(settings: Settings) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every L1 record."""
    topic = Topics.from_settings(settings).l1
    return sorted((r.partition, r.offset, r.key, r.value)
                  for r in read_topic_to_end(settings.bootstrap_servers or "", topic))


def replayed_chunks(settings: Settings, from_seq: int = 1) -> dict[str, bytes]:
    """chunkId → canonical bytes of the chunks an in-process replay of L1 from ``from_seq`` emits."""
    reader = L1Reader(settings.bootstrap_servers or "", settings)
    replay = ReplayStream(settings, "default")
    chunks: dict[str, bytes] = {}
    try:
        for seq, event in reader.read("default", 1, from_seq - 1) if from_seq > 1 else ():
            replay.remember(seq, event)  # what the sessions removed below from_seq (redaction 2.18)
        for seq, event in reader.read("default", from_seq, reader.committed_seq("default")):
            for record in replay.feed(seq, event):
                if record["kind"] == "chunk":
                    chunks[record["chunkId"]] = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
    finally:
        reader.close()
    return chunks


def _chunk_seq_bound(settings: Settings, kind: str) -> Any:
    manifest = GenerationStore(index_root(settings), "default", kind).current()
    assert manifest is not None
    return manifest.extra.get(MAX_CHUNK_SEQ)


def cli_rebuild(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", "rebuild", *args], env=settings_env(settings),
                          capture_output=True, text=True, timeout=400, check=False)


def _wait_for_line(settings: Settings, kinds: tuple[str, ...], line: str, seq: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    table: dict[tuple[str, str], dict[str, Any]] = {}
    while time.monotonic() < deadline:
        table = read_watermarks(settings.bootstrap_servers or "", settings)
        if all(table.get(("default", k), {}).get("line") == line
               and int(table[("default", k)]["builtThroughSeq"]) >= seq for k in kinds):
            return
        time.sleep(0.5)
    raise AssertionError(f"watermarks of {kinds} did not reach {seq} on line {line}: {table}")


@pytest.mark.slow
def test_rebuild_from_offset_zero_reproduces_the_live_indexes_even_after_deleting_them_all(
        make_settings: Callable[..., Settings]) -> None:
    """(a) After the live pipeline indexed a log, replaying L1 gives byte-identical chunks, and
    rebuilt text, vector and structured lines hold the same ids, texts, offsets, vectors and
    ranked answers as the live line. (b) Deleting every index and tombstoning every watermark,
    then ``usl rebuild all``, restores identical results for every kind and fresh watermarks;
    L1 stays byte-identical throughout."""
    settings = make_settings()
    bootstrap = settings.bootstrap_servers or ""
    stack = Stack(settings)
    try:
        stack.worker()
        stack.sinks()
        head = append_events(settings, _events("rb", 12))
        wait_for_watermarks(settings, head, ALL_KINDS, timeout=240)
        stack.kill("sinks")
        stack.kill("worker")
    finally:
        stack.close()
    l1_before = l1_records(settings)
    live = {kind: snapshot(settings, kind) for kind in ALL_KINDS}
    live_chunks = chunk_set(settings)
    assert live["text"]["ids"] == sorted(live_chunks) and any(live["text"]["search"].values())

    # Invariant 4 at the source: replaying L1 yields the live chunks, byte for byte.
    assert replayed_chunks(settings) == live_chunks
    # Every text generation bounds its chunks' maxSeq (the planner skips its seq filter at or above it).
    highest = max(orjson.loads(chunk)["maxSeq"] for chunk in live_chunks.values())
    assert _chunk_seq_bound(settings, "text") == highest

    # (a) rebuild text through the CLI, vector and structured through the function.
    started = time.monotonic()
    proc = cli_rebuild(settings, "text", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (manifest,) = json.loads(proc.stdout)["rebuilt"]
    assert (manifest["line"], manifest["builtThroughSeq"], manifest["chunkCount"]) == ("rebuild-1", head, len(live_chunks))
    for kind in ("vector", "structured"):
        rebuilt = rebuild(settings, bootstrap, kind)
        assert (rebuilt.line, rebuilt.built_through_seq) == ("rebuild-1", head)
    assert _chunk_seq_bound(settings, "text") == highest
    for kind in ("text", "vector", "structured"):
        assert GenerationStore(index_root(settings), "default", kind).line == "rebuild-1"
        assert snapshot(settings, kind) == live[kind], f"rebuilt {kind} differs from the live line"
        assert (index_root(settings) / "default" / kind / "live" / "RETIRED").exists()
    rebuild_seconds = time.monotonic() - started

    # (b) delete every index and every watermark; L1 must not notice.
    shutil.rmtree(index_root(settings))
    publisher = WatermarkPublisher(bootstrap, settings)
    try:
        for kind in ALL_KINDS:
            publisher.delete("default", kind)
    finally:
        publisher.close()
    assert not [key for key in read_watermarks(bootstrap, settings) if key[0] == "default"]
    assert l1_records(settings) == l1_before
    proc = cli_rebuild(settings, "all", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [m["kind"] for m in json.loads(proc.stdout)["rebuilt"]] == list(ALL_KINDS)
    for kind in ALL_KINDS:
        assert snapshot(settings, kind) == live[kind], f"{kind} differs after delete-everything + rebuild"
    watermarks = read_watermarks(bootstrap, settings)
    for kind in ALL_KINDS:
        watermark = watermarks[("default", kind)]
        assert (watermark["line"], watermark["builtThroughSeq"]) == ("rebuild-1", head)
        assert Path(watermark["manifest"]).exists()
    assert l1_records(settings) == l1_before
    print(f"\nevents={head} chunks={len(live_chunks)} rebuild text(CLI)+vector+structured: {rebuild_seconds:.1f}s")


@pytest.mark.slow
def test_live_sink_continues_on_the_line_a_rebuild_switched_to(make_settings: Callable[..., Settings]) -> None:
    """(c) While the sinks run, rebuilds of text and structured switch their ACTIVE line; events
    appended afterwards reach the new line exactly once (the runner follows the switch and
    resumes from the rebuild's offsets), and the watermarks move on along the new line."""
    settings = make_settings(embedder="hash:64", sink_batch_size=16)
    bootstrap = settings.bootstrap_servers or ""
    kinds = ("text", "structured")
    stack = Stack(settings)
    try:
        stack.worker()
        stack.sinks(kinds=",".join(kinds))
        first = append_events(settings, _events("sw-a", 6))
        wait_for_watermarks(settings, first, kinds, timeout=180)
        for kind in kinds:
            rebuilt = rebuild(settings, bootstrap, kind)
            assert rebuilt.line == "rebuild-1"
        switched_at = {k: GenerationStore(index_root(settings), "default", k).current_id() for k in kinds}
        head = append_events(settings, _events("sw-b", 6, seed=100))
        _wait_for_line(settings, kinds, "rebuild-1", head)
        # One more round after the switch settled, so a commit racing the switch shows up too.
        head = append_events(settings, _events("sw-c", 3, seed=200))
        _wait_for_line(settings, kinds, "rebuild-1", head)
        stack.kill("sinks")
    finally:
        stack.close()
    keys = index_keys(settings)
    assert_no_duplicates(keys)
    chunks = set(chunk_set(settings))
    assert set(keys["text"]["chunks"]) == chunks
    assert set(keys["structured"]["chunks"]) == chunks
    for kind in kinds:
        store = GenerationStore(index_root(settings), "default", kind)
        assert store.line == "rebuild-1"
        current, at_switch = store.current_id(), switched_at[kind]
        assert current is not None and at_switch is not None and current > at_switch, \
            f"the live sink never committed onto {kind}'s new line"
    assert_watermarks_monotone(watermark_history(settings))
    table = read_watermarks(bootstrap, settings)
    assert all(table[("default", k)]["line"] == "rebuild-1" for k in kinds)
    assert stack.log_text("sinks").count("switched to line rebuild-1") == len(kinds)


def _wait_for_chunker(settings: Settings, log_id: str, seq: int, timeout: float = 120.0) -> None:
    """Until every chunks partition carries a progress marker of ``log_id`` at ``seq`` or more."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        marks: dict[int, int] = {}
        for record in topic_records(settings, "chunks"):
            if record.get("kind") == "progress" and record["logId"] == log_id:
                marks[record["partition"]] = max(marks.get(record["partition"], 0), int(record["seq"]))
        if len(marks) == settings.stream_partitions and min(marks.values()) >= seq:
            return
        time.sleep(0.5)
    raise AssertionError(f"the chunker did not reach seq {seq} of log {log_id}")


@pytest.mark.slow
def test_a_line_switch_in_the_middle_of_a_flush_loses_nothing(make_settings: Callable[..., Settings]) -> None:
    """A rebuild may switch a log's ACTIVE line while the sink is inside a flush (here: right
    after it committed another log). The runner must not commit that log's pending records
    onto the new line on top of the old line's state: it finishes on the old line, follows the
    switch at the next flush, republishes the watermark of the new line, and the new line ends
    with every chunk of the log exactly once."""
    settings = make_settings(embedder="hash:64")
    bootstrap = settings.bootstrap_servers or ""
    root = index_root(settings)
    stack = Stack(settings)
    try:
        stack.worker()
        stack.sinks(kinds="text")
        heads = {log: append_events(settings, _events(f"{log}-a", 4) if log == "default"
                                    else [{**e, "logId": log} for e in _events(f"{log}-a", 4)])
                 for log in ("default", "other")}
        for log, seq in heads.items():
            wait_for_watermarks(settings, seq, ["text"], log_id=log)
        stack.kill("sinks")
        rebuild(settings, bootstrap, "text", log_id="other")
        other = GenerationStore(root, "other", "text")
        other.set_active_line("live")  # as if the rebuild had not switched yet
        heads = {log: append_events(settings, [{**e, "logId": log} for e in _events(f"{log}-b", 4, seed=50)])
                 for log in ("default", "other")}
        for log, seq in heads.items():
            _wait_for_chunker(settings, log, seq)
    finally:
        stack.close()
    switched: list[int] = []
    runner: SinkRunner | None = None

    def switch_other_mid_flush(manifest: Any) -> None:
        assert runner is not None
        if manifest.log_id == "default" and runner.logs["other"].pending and not switched:
            switched.append(manifest.generation_id)
            other.set_active_line("rebuild-1")

    runner = SinkRunner(settings, bootstrap, make_writer("text", settings), versions=pipeline_versions(settings),
                        on_commit=switch_other_mid_flush)
    runner.run(idle_exit_seconds=4.0)
    assert switched, "the switch never happened in the middle of a flush"
    store = GenerationStore(root, "other", "text")
    assert store.line == "rebuild-1"
    gen_dir = current_generation(settings, "text", "other")
    assert gen_dir is not None
    engine = get_engine("tantivy")
    ids = engine.all_ids(gen_dir)
    want = {c for c, body in chunk_set(settings).items() if orjson.loads(body)["logId"] == "other"}
    assert engine.count(gen_dir) == len(ids) == len(want) and set(ids) == want
    watermark = read_watermarks(bootstrap, settings)[("other", "text")]
    assert (watermark["line"], watermark["builtThroughSeq"]) == ("rebuild-1", heads["other"])


@pytest.mark.slow
def test_rebuild_from_seq_indexes_exactly_what_a_replay_from_that_seq_produces(
        make_settings: Callable[..., Settings]) -> None:
    """(d) ``usl rebuild text --from-seq N`` replays L1 from seq N only: the new line holds
    exactly the chunks a replay starting at N emits (no evidence below N), records ``fromSeq``
    in its manifest, and is smaller than a full rebuild. ``--from-seq 0`` is refused with a
    clear error."""
    settings = make_settings(embedder="hash:64")
    Stack(settings)  # creates the topics; no process needed, a rebuild reads L1 itself
    head = append_events(settings, _events("fs", 8))
    from_seq = head // 2
    full = cli_rebuild(settings, "text", "--json")
    assert full.returncode == 0, full.stderr[-2000:]
    full_count = json.loads(full.stdout)["rebuilt"][0]["chunkCount"]
    proc = cli_rebuild(settings, "text", "--from-seq", str(from_seq), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (manifest,) = json.loads(proc.stdout)["rebuilt"]
    assert manifest["line"] == "rebuild-2"
    assert manifest["extra"]["rebuild"] == {"fromSeq": from_seq, "replayedThroughSeq": head}
    expected = replayed_chunks(settings, from_seq)
    assert all(min(e["seq"] for e in orjson.loads(body)["evidence"]) >= from_seq for body in expected.values())
    gen_dir = current_generation(settings, "text")
    assert gen_dir is not None
    held = get_engine("tantivy").all_ids(gen_dir)
    assert held == sorted(expected), (gen_dir, manifest, sorted(set(held) ^ set(expected)))
    assert 0 < manifest["chunkCount"] == len(expected) < full_count
    refused = cli_rebuild(settings, "text", "--from-seq", "0")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr


def test_a_rebuild_from_seq_removes_what_a_session_named_below_it(make_settings: Callable[..., Settings]) -> None:
    """Redaction 2.18's session memory in a line from ``--from-seq N``: a password an env dump
    named below N and a later event repeats above it is removed there as the live stream removed
    it, though the line holds nothing below N."""
    from streams.asp import validate_event

    password = "Larch5Otter-91qz"
    settings = make_settings(embedder="hash:64")
    Stack(settings)

    def event(n: int, kind: str, role: str | None, **fields: Any) -> dict[str, Any]:
        return validate_event({"eventId": f"mem-e{n}", "logId": "default", "sessionId": "mem", "type": kind,
                               "role": role, "turnId": None if kind == "session.started" else f"mem-t{n // 10}",
                               "time": f"2026-11-01T09:{n:02d}:00Z", "fields": fields})

    below = [event(0, "session.started", None, title="db"), event(1, "turn.started", None),
             event(2, "tool.result", "tool", toolName="Bash", toolCallId="c", status="ok",
                   output=f"HOME=/root\nDB_PASSWORD={password}\nPATH=/bin\n"),
             event(3, "turn.ended", None)]
    above = [event(10, "turn.started", None), event(11, "message", "user", text=f"log in again with {password} please"),
             event(12, "turn.ended", None)]
    append_events(settings, below)
    head = append_events(settings, above)
    from_seq = head - len(above) + 1
    rebuild(settings, settings.bootstrap_servers or "", "text", from_seq=from_seq)
    gen_dir = current_generation(settings, "text")
    assert gen_dir is not None
    texts = [doc["text"] for doc in tantivy_docs(gen_dir, "chunkId")]
    assert texts and any("log in again with [REDACTED:env-dump]" in text for text in texts), texts
    assert not any(password in text for text in texts)


def test_rebuild_from_seq_is_disclosed_as_uncovered_by_the_planner(make_settings: Callable[..., Settings]) -> None:
    """Honesty of ``--from-seq N``: the line holds nothing below N, so a query that reads it
    lists seqs 1..N-1 as uncovered and is labelled partial, never complete."""
    from planner.acl import parse_principal
    from planner.engine import Planner

    settings = make_settings(embedder="hash:64")
    Stack(settings)
    head = append_events(settings, _events("fh", 4))
    from_seq = head // 2
    for kind in ("text", "structured"):
        manifest = rebuild(settings, settings.bootstrap_servers or "", kind, from_seq=from_seq)
        assert manifest.extra["rebuild"]["fromSeq"] == from_seq
    planner = Planner(settings, settings.bootstrap_servers or "")
    try:
        response = planner.search({"query": "deploy refund", "freshness": "indexed", "mode": "text"},
                                  parse_principal(settings.acl_default))
    finally:
        planner.close()
    freshness = response["freshness"]
    assert freshness["label"].endswith("-partial")
    assert {"fromSeq": 1, "toSeq": from_seq - 1} in freshness["uncovered"]
    assert all(piece["seq"] >= from_seq for hit in response["results"] for piece in hit["evidence"])


def test_a_rebuild_that_would_replay_nothing_is_refused_and_changes_nothing(
        make_settings: Callable[..., Settings]) -> None:
    """``--from-seq`` past the log's head switched an empty line live (exit 0), and ``--log`` of
    no log made one appear in ``usl status``: both are one clear error line with exit code 2, and
    the index, its watermarks and the list of logs stay as they were."""
    from planner.status import collect_status

    settings = make_settings(embedder="hash:64")
    Stack(settings)
    head = append_events(settings, _events("nr", 2))
    built = cli_rebuild(settings, "text", "--json")
    assert built.returncode == 0, built.stderr[-2000:]
    before = current_generation(settings, "text")
    bootstrap = settings.bootstrap_servers or ""
    marks = read_watermarks(bootstrap, settings)
    for args, said in (((f"--from-seq={head + 1}",), f"past the end of log 'default' (L1 seq {head})"),
                       (("--log", "nosuch"), "no log named 'nosuch'")):
        refused = cli_rebuild(settings, "text", *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr[-2000:])
        assert said in refused.stderr and "Traceback" not in refused.stderr
        assert refused.stderr.strip().count("\n") == 0, refused.stderr  # one line
    assert current_generation(settings, "text") == before
    assert read_watermarks(bootstrap, settings) == marks
    assert not [path for path in index_root(settings).rglob("*") if path.name == "nosuch"]
    assert "nosuch" not in json.dumps(collect_status(settings, bootstrap))


def test_rebuild_all_switches_no_index_before_every_index_is_built(
        make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch) -> None:
    """Switched one by one, a rebuild after a redaction policy change left text under the new
    policy and structured under the old for as long as the vector index took, and the planner
    refuses to join such indexes: searches failed for the whole rebuild. ``usl rebuild all``
    (``rebuild_together``) builds and verifies every kind first; each stays on its live line
    until then."""
    import sinks.rebuild as rebuild_module

    settings = make_settings(embedder="hash:64")
    Stack(settings)
    head = append_events(settings, _events("tg", 3))
    kinds = ("text", "vector", "structured")
    for kind in kinds:
        rebuild(settings, settings.bootstrap_servers or "", kind)  # a live line of each to replace
    calls: list[tuple[str, str, dict[str, str]]] = []
    build, switch = rebuild_module.build_line, rebuild_module.switch_to

    def active() -> dict[str, str]:
        return {kind: GenerationStore(index_root(settings), "default", kind).line for kind in kinds}

    def building(*args: Any, **kwargs: Any) -> Any:
        built = build(*args, **kwargs)
        calls.append(("built", built.kind, active()))
        return built

    def switching(settings_: Settings, bootstrap: str, built: Any) -> None:
        switch(settings_, bootstrap, built)
        calls.append(("switched", built.kind, active()))

    monkeypatch.setattr(rebuild_module, "build_line", building)
    monkeypatch.setattr(rebuild_module, "switch_to", switching)
    manifests = rebuild_module.rebuild_together(settings, settings.bootstrap_servers or "", kinds)
    assert [(step, kind) for step, kind, _ in calls] == [("built", k) for k in kinds] + [("switched", k) for k in kinds]
    for step, _, lines in calls:
        if step == "built":
            assert lines == dict.fromkeys(kinds, "rebuild-1"), lines  # every index still on the line it had
    assert calls[-1][2] == dict.fromkeys(kinds, "rebuild-2")
    assert [(m.kind, m.line, m.built_through_seq) for m in manifests] == [(k, "rebuild-2", head) for k in kinds]
