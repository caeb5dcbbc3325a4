"""The tool-results sink: an ACL-isolated tantivy index of full tool outputs."""

from __future__ import annotations

import itertools
import os
import stat
from pathlib import Path

import pytest

import sinks.toolresults
from sinks.exceptions import EmptyQueryError
from sinks.generations import Manifest
from sinks.testing import commit_batches, file_digests, make_toolresult
from sinks.toolresults import ToolResultsReader, ToolResultsWriter
from sinks.writer import IndexWriter

NASTY = [
    '"', "(", ")))", "AND", "a OR", "-", "\\", "*", "~", "hello^", "foo:bar", "text:",
    "seq:[0 TO", "sessionId:s2", "id:default:1", "NOT error", "+error -timeout", "error~2",
    "'; DROP TABLE x; --", "/etc/passwd", "{}[]<>", "a" * 5000, "ünïcödé 漢字 🙂", "\x00\x01",
    '"unterminated phrase', 'error" AND "', "^^^", "field:(a OR b)",
]


@pytest.fixture
def batches() -> list[list[dict]]:
    return [
        [make_toolresult(1, "s1", "build failed: error in main.c line 3"),
         make_toolresult(2, "s1", "all tests passed", tool_name="Test"),
         make_toolresult(3, "s2", "error: permission denied /etc/shadow", status="error")],
        [make_toolresult(5, "s2", "timeout error after 30s", status="error"),
         make_toolresult(6, "s3", "error error error repeated", tool_name="Read")],
        [make_toolresult(8, "s1", "second error in parser.c")],
    ]


def test_public_surface() -> None:
    assert set(sinks.toolresults.__all__) == {"COPY_NAMES", "SCHEMA_VERSION", "ToolResultsReader",
                                              "ToolResultsWriter"}
    writer = ToolResultsWriter()
    assert isinstance(writer, IndexWriter)
    assert (writer.kind, writer.sources) == ("toolresults", ("toolresults",))
    assert writer.describe()["embedded"] is False


def test_generations_leave_the_previous_one_unchanged(tmp_path: Path, batches: list[list[dict]]) -> None:
    writer = ToolResultsWriter()
    gen1, = commit_batches(tmp_path, writer, batches[:1])
    before = file_digests(gen1)
    assert ToolResultsReader(gen1).count() == 3
    gen2, gen3 = commit_batches(tmp_path, writer, batches[1:])
    after = file_digests(gen1)
    assert {n: after[n] for n in before} == before, "a later commit changed a file of generation 1"
    # Opening an index for reading leaves tantivy's empty meta lock file; it is no segment.
    assert set(after) - set(before) <= {".tantivy-meta.lock"}
    assert ToolResultsReader(gen1).count() == 3
    assert ToolResultsReader(gen3).count() == 6
    gen3_files = file_digests(gen3)
    for name in ("meta.json", ".managed.json"):
        assert gen3_files[name][1] != before[name][1], f"{name} must be copied, not linked"
    shared = [n for n in before if n not in ("meta.json", ".managed.json", "manifest.json")]
    assert shared and all(gen3_files[n] == before[n] for n in shared if n in gen3_files)
    listed = [seg.path for seg in Manifest.from_json((gen3 / "manifest.json").read_bytes()).segments]
    assert listed and not any(n.endswith(".lock") for n in listed)
    for name in before:  # committed files are read-only, and tantivy still reads them
        if name != "manifest.json":
            assert not (gen1 / name).stat().st_mode & stat.S_IWUSR
    assert gen2.is_dir()


def test_write_returns_the_new_and_rewritten_files(tmp_path: Path, batches: list[list[dict]]) -> None:
    writer = ToolResultsWriter()
    first = writer.write(tmp_path / "g1", None, batches[0])
    assert "meta.json" in first and any(n.endswith(".store") for n in first)
    second = writer.write(tmp_path / "g2", tmp_path / "g1", batches[1])
    assert "meta.json" in second and not set(second) & (set(first) - {"meta.json", ".managed.json"})
    assert writer.write(tmp_path / "g3", tmp_path / "g2", [{"kind": "tick", "seq": 9}]) == []


def test_search_returns_stored_fields_ranked(tmp_path: Path, batches: list[list[dict]]) -> None:
    gen = commit_batches(tmp_path, ToolResultsWriter(), batches)[-1]
    hits = ToolResultsReader(gen).search("error", limit=10)
    assert hits[0]["id"] == "default:6"  # three "error"s rank first
    assert {h["id"] for h in hits} == {"default:1", "default:3", "default:5", "default:6", "default:8"}
    top = hits[0]
    assert {k: top[k] for k in ("sessionId", "seq", "eventId", "toolName", "status", "text", "time")} == {
        "sessionId": "s3", "seq": 6, "eventId": "tr-6", "toolName": "Read", "status": "ok",
        "text": "error error error repeated", "time": "2026-01-31T12:00:06.000000Z"}
    assert [h["rank"] for h in hits] == [1, 2, 3, 4, 5]
    assert all(a["score"] >= b["score"] for a, b in itertools.pairwise(hits))
    phrase = ToolResultsReader(gen).search('"permission denied"', limit=5)
    assert [h["id"] for h in phrase] == ["default:3"]


def test_filters_are_inside_the_query_so_windows_count_visible_docs(
        tmp_path: Path, batches: list[list[dict]]) -> None:
    gen = commit_batches(tmp_path, ToolResultsWriter(), batches)[-1]
    reader = ToolResultsReader(gen)
    assert [h["id"] for h in reader.search("error", limit=1, session_ids=["s1"])] in (
        [["default:1"], ["default:8"]])
    assert {h["id"] for h in reader.search("error", limit=2, session_ids=["s1"])} == {"default:1", "default:8"}
    assert {h["id"] for h in reader.search("error", limit=10, max_seq=5)} == {"default:1", "default:3", "default:5"}
    assert {h["id"] for h in reader.search("error", limit=10, max_seq=5, session_ids=["s2", "s3"])} == {
        "default:3", "default:5"}
    assert reader.search("error", limit=10, session_ids=[]) == []
    assert reader.search("error", limit=10, max_seq=0) == []
    assert [h["id"] for h in reader.search("error", limit=10, tool_names=["Read"])] == ["default:6"]
    assert reader.search("error", limit=0) == []


def test_nasty_queries_never_raise_engine_errors(tmp_path: Path, batches: list[list[dict]]) -> None:
    gen = commit_batches(tmp_path, ToolResultsWriter(), batches)[-1]
    reader = ToolResultsReader(gen)
    for query in NASTY:
        hits = reader.search(query, limit=5, session_ids=["s1"], max_seq=3)
        assert all(h["sessionId"] == "s1" and h["seq"] <= 3 for h in hits), query
    assert [h["id"] for h in reader.search("sessionId:s2", limit=5, session_ids=["s1"])] == []
    for empty in ("", "   ", "\n"):
        with pytest.raises(EmptyQueryError):
            reader.search(empty, limit=5)


def test_upsert_by_id_and_missing_index(tmp_path: Path) -> None:
    writer = ToolResultsWriter()
    gen = commit_batches(tmp_path, writer, [
        [make_toolresult(1, "s", "old text"), make_toolresult(1, "s", "older text")],
        [make_toolresult(1, "s", "new text")],
    ])[-1]
    reader = ToolResultsReader(gen)
    assert reader.count() == 1
    assert [h["text"] for h in reader.search("text", limit=5)] == ["new text"]
    empty = tmp_path / "empty"
    os.mkdir(empty)
    with pytest.raises(Exception, match="no tool-results index"):
        ToolResultsReader(empty)
