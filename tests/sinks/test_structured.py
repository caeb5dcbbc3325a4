"""The structured sink: Parquet generations of chunk metadata, coverage, ACLs and lineage.

The record factories (``make_event``, ``make_chunk``, ``make_toolresult``, ``commit_batches``)
live in the shipped kit ``sinks.testing``.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import sinks.structured
import sinks.writer
from sinks.exceptions import SinkError
from sinks.structured import StructuredReader, StructuredWriter
from sinks.testing import (
    T0,
    commit_batches,
    file_digests,
    iso,
    make_chunk,
    make_event,
    make_toolresult,
)
from sinks.writer import IndexWriter, record_id

# --------------------------------------------------------------------------- tests


def test_public_surface() -> None:
    assert set(sinks.writer.__all__) == {"RECORD_KINDS", "SOURCE_KINDS", "IndexWriter", "compact_segments", "next_segment_number",
                                         "parquet_segments", "record_id", "scan_sql",
                                         "seed_generation", "write_segment"}
    assert set(sinks.structured.__all__) == {"SCHEMAS", "SCHEMA_VERSION", "StructuredReader",
                                             "StructuredWriter"}
    writer = StructuredWriter()
    assert isinstance(writer, IndexWriter)
    assert writer.sources == ("chunks", "redacted")
    assert set(writer.describe()["tables"]) == {"chunks", "coverage", "sessions", "lineage", "secrets"}


def test_record_id() -> None:
    assert record_id(make_chunk("s", [1, 2], chunk_id="c_x")) == "c_x"
    assert record_id(make_event(7, "s")) == "default:7"
    assert record_id(make_toolresult(9, "s", "out")) == "default:9"


def test_generations_reuse_files_and_never_touch_the_previous(tmp_path: Path) -> None:
    writer = StructuredWriter()
    first = [make_event(1, "s1"), make_event(2, "s1"), make_chunk("s1", [1, 2])]
    second = [make_event(3, "s1"), make_chunk("s1", [3])]
    gen1, = commit_batches(tmp_path, writer, [first])
    before = file_digests(gen1)
    gen2, gen3 = commit_batches(tmp_path, writer, [second, []])
    assert file_digests(gen1) == before
    after = file_digests(gen2)
    for name, (digest, inode) in before.items():
        if name.endswith(".parquet"):
            assert after[name] == (digest, inode), f"{name} must be a hard link of gen 1's file"
    assert sorted(n for n in after if n.startswith("chunks-")) == ["chunks-00000001.parquet",
                                                                  "chunks-00000002.parquet"]
    assert "lineage-00000002.parquet" not in after  # no lineage in the batch: no empty file
    assert file_digests(gen3).keys() >= {n for n in after if n.endswith(".parquet")}
    with StructuredReader(gen3) as reader:
        assert len(reader.chunk_meta({make_chunk("s1", [1, 2])["chunkId"],
                                      make_chunk("s1", [3])["chunkId"]})) == 2


def test_write_returns_new_file_names(tmp_path: Path) -> None:
    staging = tmp_path / "g1"
    names = StructuredWriter().write(staging, None, [make_event(1, "s", parent_session_id="p"),
                                                     make_chunk("s", [1])])
    assert sorted(names) == ["chunks-00000001.parquet", "coverage-00000001.parquet",
                             "lineage-00000001.parquet", "sessions-00000001.parquet"]
    assert StructuredWriter().write(tmp_path / "g2", staging, [make_chunk("s", [2])]) == [
        "chunks-00000002.parquet", "coverage-00000002.parquet"]
    assert StructuredWriter().write(tmp_path / "g3", None, [{"kind": "tick", "seq": 5}]) == []


def test_chunk_meta_round_trip(tmp_path: Path) -> None:
    chunk = make_chunk("s1", [4, 5, 6], run_id="r1", turn_id="t1", roles=("user", "assistant"),
                       tool_names=("Bash",), statuses=("error",),
                       acl={"tenant": "acme", "read": ["user:ann"]})
    gen, = commit_batches(tmp_path, StructuredWriter(), [[chunk]])
    with StructuredReader(gen) as reader:
        meta = reader.chunk_meta([chunk["chunkId"], "c_missing"])
    assert list(meta) == [chunk["chunkId"]]
    row = meta[chunk["chunkId"]]
    assert row["evidence"] == chunk["evidence"]
    assert (row["minSeq"], row["maxSeq"], row["runId"], row["turnId"]) == (4, 6, "r1", "t1")
    assert row["eventTime"] == pytest.approx((T0 + timedelta(seconds=6)).timestamp())
    assert row["roles"] == ["assistant", "user"] and row["toolNames"] == ["Bash"]
    assert (row["tenant"], row["aclRead"], row["provisional"]) == ("acme", ["user:ann"], False)


def test_straddling_chunks_hold_evidence_on_both_sides(tmp_path: Path) -> None:
    below, straddler, above = make_chunk("s1", [1, 5]), make_chunk("s1", [3, 8]), make_chunk("s1", [9, 10])
    other = make_chunk("s2", [4, 6])
    gen, = commit_batches(tmp_path, StructuredWriter(), [[below, straddler, above, other]])
    with StructuredReader(gen) as reader:
        assert {c["chunkId"] for c in reader.straddling(5)} == {straddler["chunkId"], other["chunkId"]}
        only_s1 = reader.straddling(5, session_ids=["s1"])
        assert [c["chunkId"] for c in only_s1] == [straddler["chunkId"]]
        assert [e["seq"] for e in only_s1[0]["evidence"]] == [3, 8]
        assert reader.straddling(5, session_ids=[]) == []
        assert reader.straddling(10) == []
        assert [c["chunkId"] for c in reader.straddling(9)] == [above["chunkId"]]
        assert reader.straddling(8) == []


def test_filter_chunk_ids(tmp_path: Path) -> None:
    a = make_chunk("s1", [1, 2], run_id="r1", turn_id="t1", tool_names=("Bash",), statuses=("ok",))
    b = make_chunk("s1", [3, 4], run_id="r1", turn_id="t2", roles=("assistant",),
                   tool_names=("Read", "Bash"), statuses=("error",))
    c = make_chunk("s2", [5, 9], run_id="r2", turn_id="t3", roles=("tool",))
    gen = commit_batches(tmp_path, StructuredWriter(), [[a, b], [c]])[-1]
    ids = {name: chunk["chunkId"] for name, chunk in (("a", a), ("b", b), ("c", c))}
    with StructuredReader(gen) as reader:
        def names(**filters: Any) -> set[str]:
            found = reader.filter_chunk_ids(**filters)
            return {name for name, cid in ids.items() if cid in found}

        assert names() == {"a", "b", "c"}
        assert names(session_ids=["s1"]) == {"a", "b"}
        assert names(session_ids=[]) == set()
        assert names(run_ids=["r2"]) == {"c"}
        assert names(turn_ids=["t1", "t3"]) == {"a", "c"}
        assert names(tool_names=["Bash"]) == {"a", "b"}
        assert names(tool_names=["Read"], statuses=["error"]) == {"b"}
        assert names(statuses=["ok", "missing"]) == {"a"}
        assert names(roles=["tool", "assistant"]) == {"b", "c"}
        assert names(time_from=iso(3.5)) == {"b", "c"}
        assert names(time_to=T0 + timedelta(seconds=2)) == {"a"}
        assert names(time_from=(T0 + timedelta(seconds=6)).timestamp(), time_to=iso(7)) == {"c"}
        assert names(max_seq=4) == {"a", "b"}
        assert names(max_seq=5, session_ids=["s2"], roles=["tool"]) == {"c"}
        with pytest.raises(SinkError):
            reader.filter_chunk_ids(time_from="yesterday")


def test_session_acls_latest_by_seq_not_by_arrival(tmp_path: Path) -> None:
    open_acl = {"tenant": "acme", "read": ["*"]}
    ann_only = {"tenant": "acme", "read": ["user:ann"]}
    no_read = {"tenant": "acme"}
    gen = commit_batches(tmp_path, StructuredWriter(), [
        [make_event(1, "s1", acl=open_acl), make_event(10, "s1", "session.acl", acl=ann_only),
         make_event(2, "s2", acl=open_acl)],
        # Arrives later but is older: seq decides, not arrival.
        [make_event(5, "s1", acl=open_acl), make_event(6, "s2", "session.acl", acl=no_read)],
        [make_chunk("s3", [7, 8], acl={"tenant": "other", "read": ["group:eng"]})],
    ])[-1]
    with StructuredReader(gen) as reader:
        assert reader.session_acls() == {"s1": ann_only, "s2": no_read,
                                         "s3": {"tenant": "other", "read": ["group:eng"]}}
        assert reader.session_acls(as_of_seq=7) == {"s1": open_acl, "s2": no_read}
        assert reader.session_acls(as_of_seq=1) == {"s1": open_acl}
        assert reader.sessions() == ["s1", "s2", "s3"]


def test_lineage_follows_edges_both_ways_and_stops_on_cycles(tmp_path: Path) -> None:
    batch = [
        make_event(1, "root", "session.started", run_id="run1"),
        make_event(2, "root", "tool.call", event_id="call1", run_id="run1"),
        make_event(3, "root", "tool.result", event_id="res1", parent_event_id="call1", run_id="run1"),
        make_event(4, "child", "session.started", parent_session_id="root", episode_id="ep1"),
        make_event(5, "child", "message", parent_session_id="root", episode_id="ep1"),
        make_event(9, "grandchild", "session.started", parent_session_id="child"),
    ]
    cyclic = [make_event(11, "x", parent_session_id="y"), make_event(12, "y", parent_session_id="x")]
    gen, = commit_batches(tmp_path, StructuredWriter(), [batch + cyclic])
    with StructuredReader(gen) as reader:
        down = reader.lineage("root", "descendants")
        assert [(e["kind"], e["fromId"], e["toId"], e["depth"]) for e in down] == [
            ("run-session", "root", "run1", 1), ("session-parent", "root", "child", 1),
            ("episode-session", "child", "ep1", 2), ("session-parent", "child", "grandchild", 2)]
        assert down[1]["seq"] == 4 and down[1]["sessionId"] == "child"
        assert [e["toId"] for e in reader.lineage("root", "descendants", as_of_seq=8)] == [
            "run1", "child", "ep1"]
        up = reader.lineage("grandchild", "ancestors")
        assert [(e["fromId"], e["depth"]) for e in up] == [("child", 1), ("root", 2)]
        # A session is the parent of its runs and episodes, whichever comes first in the log.
        assert [(e["kind"], e["toId"]) for e in reader.lineage("child", "descendants")] == [
            ("episode-session", "ep1"), ("session-parent", "grandchild")]
        assert [(e["kind"], e["fromId"], e["depth"]) for e in reader.lineage("ep1", "ancestors")] == [
            ("episode-session", "child", 1), ("session-parent", "root", 2)]
        assert reader.lineage("run1", "descendants") == []
        assert [(e["kind"], e["fromId"]) for e in reader.lineage("res1", "ancestors")] == [
            ("event-cause", "call1")]
        assert {e["toId"] for e in reader.lineage("x", "descendants")} == {"x", "y"}
        assert reader.lineage("nobody", "ancestors") == []
        with pytest.raises(SinkError):
            reader.lineage("root", "sideways")  # type: ignore[arg-type]


def test_lineage_reads_run_and_episode_edges_written_child_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Generations written before lineage 2 stored ``runId → sessionId``; the next generation
    reuses those segments beside new ones, and the reader answers the same for both."""
    current = sinks.structured._lineage_rows

    def child_first(record: dict[str, Any]) -> list[dict[str, Any]]:
        return [{**edge, "fromId": edge["toId"], "toId": edge["fromId"]}
                if edge["kind"] in ("run-session", "episode-session") else edge
                for edge in current(record)]

    store = tmp_path / "store"
    monkeypatch.setattr(sinks.structured, "_lineage_rows", child_first)
    commit_batches(store, StructuredWriter(), [[
        make_event(1, "s", "session.started", run_id="r-old", episode_id="ep-old")]])
    monkeypatch.setattr(sinks.structured, "_lineage_rows", current)
    gen, = commit_batches(store, StructuredWriter(), [[
        make_event(2, "s", "message", run_id="r-new", episode_id="ep-new")]])
    with StructuredReader(gen) as reader:
        assert {(e["kind"], e["fromId"], e["toId"]) for e in reader.lineage("s", "descendants")} == {
            ("run-session", "s", "r-new"), ("episode-session", "s", "ep-new"),
            ("run-session", "s", "r-old"), ("episode-session", "s", "ep-old")}
        assert [e["fromId"] for e in reader.lineage("ep-old", "ancestors")] == ["s"]


def test_reader_on_an_empty_generation(tmp_path: Path) -> None:
    gen, = commit_batches(tmp_path, StructuredWriter(), [[]])
    with StructuredReader(gen) as reader:
        assert reader.session_acls() == {} and reader.sessions() == []
        assert reader.filter_chunk_ids(tool_names=["Bash"]) == set()
        assert reader.straddling(3) == [] and reader.lineage("s", "ancestors") == []
    with pytest.raises(SinkError):
        StructuredReader(tmp_path / "missing")


def test_reader_answers_at_100k_chunks(tmp_path: Path) -> None:
    """The reader's filters over a 100k-chunk generation give the exact sets; the time is printed
    for a reader of the log, never asserted (bench_query measures it, in ratios)."""
    plain, bash = make_chunk("s", [1, 3]), make_chunk("s", [1, 3], tool_names=("Bash",))

    def chunk(i: int) -> dict[str, Any]:
        seqs = [i * 3 + 1, i * 3 + 3]
        evidence = [{"eventId": f"ev-{i}-{seq}", "seq": seq, "start": 0, "end": 5, "part": [0, 5]}
                    for seq in seqs]
        return {**(bash if i % 7 == 0 else plain), "chunkId": f"c_{i:032x}", "sessionId": f"s{i % 500}",
                "minSeq": seqs[0], "maxSeq": seqs[1], "evidence": evidence,
                "startTime": iso(seqs[0]), "endTime": iso(seqs[1]), "eventTime": iso(seqs[1])}

    batches = [[chunk(i) for i in range(start, start + 25_000)] for start in range(0, 100_000, 25_000)]
    gen = commit_batches(tmp_path, StructuredWriter(), batches)[-1]
    with StructuredReader(gen) as reader:
        started = time.perf_counter()
        ids = reader.filter_chunk_ids(session_ids=[f"s{i}" for i in range(0, 500, 2)],
                                      tool_names=["Bash"], max_seq=150_000)
        straddlers = reader.straddling(150_001)
        meta = reader.chunk_meta(sorted(ids)[:1000])
        elapsed = time.perf_counter() - started
    assert len(straddlers) == 1 and len(meta) == 1000
    assert len(ids) == len([i for i in range(50_000) if i % 7 == 0 and i % 2 == 0])
    print(f"100k chunks: filter + straddling + 1000 chunk_meta in {elapsed * 1000:.0f} ms")
    assert os.access(gen, os.R_OK)


def test_a_merge_writes_its_rows_in_order_as_few_row_groups(tmp_path: Path) -> None:
    """Merged segments keep every row in order, and merges of merges do not pile up a row group
    per input batch (they did: a dozen tiny row groups per file, most of a small commit's cost)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sinks.writer import compact_segments, parquet_segments, write_segment

    schema = pa.schema([("n", pa.int64()), ("text", pa.string())])
    written: list[int] = []
    number = 0
    for _ in range(3):
        for _ in range(8):
            number += 1
            rows = list(range(len(written), len(written) + 5))
            written += rows
            write_segment(tmp_path, "t", number, pa.table({"n": rows, "text": [f"row {n}" for n in rows]}, schema=schema))
            if compact_segments(tmp_path, "t", schema, number + 1, base_bytes=1 << 20) is not None:
                number += 1
    files = parquet_segments(tmp_path, "t")
    assert [n for path in files for n in pq.read_table(path)["n"].to_pylist()] == written
    assert all(pq.ParquetFile(path).num_row_groups == 1 for path in files)
    assert len(files) < 8
