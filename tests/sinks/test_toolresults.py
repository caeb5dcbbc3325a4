"""The tool-results sink: an ACL-isolated tantivy index of full tool outputs."""

from __future__ import annotations

import itertools
import os
import stat
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sinks.toolresults
from sinks.exceptions import EmptyQueryError, EngineError
from sinks.generations import Manifest
from sinks.testing import commit_batches, file_digests, make_toolresult
from sinks.text.base import analyze_text
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
                                              "ToolResultsWriter", "search_shards"}
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


# -- scripts without spaces (issue 14 item 4): the text index's analyzer -------------------------

CJK_OUTPUTS = {
    "ja": "エラー: ファイル 'config.yaml' が見つかりません。コンパイルに失敗しました (exit 2)",
    "zh": "2026-01-31 12:00:06 ERROR 数据库连接超时，正在重试第3次",
    "mixed": "Traceback: 调用foo_bar函数时抛出ValueError at src/app.py:42行",
    "en": "plain english output with no such characters",
}


@pytest.fixture
def cjk_reader(tmp_path: Path) -> ToolResultsReader:
    records = [make_toolresult(seq, "s1", text) for seq, text in enumerate(CJK_OUTPUTS.values(), 1)]
    return ToolResultsReader(commit_batches(tmp_path, ToolResultsWriter(), [records])[-1])


def _top(reader: ToolResultsReader, query: str, limit: int = 5) -> list[str]:
    names = {f"default:{seq}": name for seq, name in enumerate(CJK_OUTPUTS, 1)}
    return [names[hit["id"]] for hit in reader.search(query, limit=limit)]


def test_cjk_substrings_of_outputs_are_found(cjk_reader: ToolResultsReader) -> None:
    for query, expected in (("見つかりません", "ja"), ("コンパイル", "ja"), ("失敗", "ja"),
                            ("数据库", "zh"), ("连接超时", "zh"), ("重试", "zh"),
                            ("foo_bar函数", "mixed"), ("调用foo", "mixed"), ("ValueError", "mixed"),
                            ("42行", "mixed"), ("config.yaml", "ja"), ("english", "en")):
        assert _top(cjk_reader, query)[:1] == [expected], query
    # A quoted phrase holds exactly the outputs with those terms in a row.
    assert _top(cjk_reader, '"ファイル config yaml が見つかりません"') == ["ja"]
    assert _top(cjk_reader, '"函数时抛出ValueError"') == ["mixed"]
    assert _top(cjk_reader, '"连接重试"') == []
    # Hits return the output as it was, not the spaced form the index holds.
    assert {hit["text"] for hit in cjk_reader.search("数据库 失败 函数 english", limit=10)} == set(
        CJK_OUTPUTS.values())


def test_the_analyzer_is_recorded(tmp_path: Path) -> None:
    from sinks.text.base import ANALYZER, ANALYZER_MARKER

    writer = ToolResultsWriter()
    assert writer.describe()["analyzer"] == ANALYZER
    assert sinks.toolresults.SCHEMA_VERSION == "3"
    gen, = commit_batches(tmp_path, writer, [[make_toolresult(1, "s", "出力")]])
    assert ANALYZER_MARKER in [seg.path for seg in
                               Manifest.from_json((gen / "manifest.json").read_bytes()).segments]


def test_an_index_of_the_old_analyzer_is_refused_with_the_remedy(tmp_path: Path) -> None:
    from sinks.text.base import ANALYZER_MARKER

    writer = ToolResultsWriter()
    writer.write(tmp_path / "g1", None, [make_toolresult(1, "s", "数据库 error")])
    (tmp_path / "g1" / ANALYZER_MARKER).unlink()  # as schema 1 wrote it, before the marker
    with pytest.raises(EngineError, match="usl rebuild toolresults") as refused:
        ToolResultsReader(tmp_path / "g1")
    assert "analyzer words/1" in str(refused.value)
    with pytest.raises(EngineError, match="usl rebuild toolresults"):
        writer.write(tmp_path / "g2", tmp_path / "g1", [make_toolresult(2, "s", "more")])
    assert not (tmp_path / "g2").exists() or not any((tmp_path / "g2").iterdir())


_CJK_CHARS = st.sampled_from("数据库连接超时重试调用函数抛出错误見つかりませんコンパイル失敗ファイルーデータ々〇가나다")
_OTHER = st.sampled_from([" ", "\n", "：", "，", "。", "(", ")", "_", "-", ".", "/", "'", "foo", "Error",
                          "42", "main.c", "x"])


@st.composite
def _output_with_cjk(draw: st.DrawFn) -> tuple[str, str]:
    """A tool output of CJK runs and code between them, and one CJK substring (2+ chars) of it."""
    runs = draw(st.lists(st.text(_CJK_CHARS, min_size=2, max_size=12), min_size=1, max_size=5))
    parts = []
    for run in runs:
        parts += [*draw(st.lists(_OTHER, max_size=3)), run]
    parts += draw(st.lists(_OTHER, max_size=3))
    run = draw(st.sampled_from(runs))
    start = draw(st.integers(0, len(run) - 2))
    end = draw(st.integers(start + 2, len(run)))
    return "".join(parts), run[start:end]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(outputs=st.lists(_output_with_cjk(), min_size=1, max_size=6), quoted=st.booleans())
def test_any_cjk_substring_of_an_output_is_found(tmp_path: Path, outputs: list[tuple[str, str]],
                                                 quoted: bool) -> None:
    staging = tmp_path / uuid.uuid4().hex
    records = [make_toolresult(seq, "s", text) for seq, (text, _) in enumerate(outputs, 1)]
    ToolResultsWriter().write(staging, None, records)
    reader = ToolResultsReader(staging)
    for seq, (text, piece) in enumerate(outputs, 1):
        query = f'"{piece}"' if quoted else piece
        hits = {hit["id"]: hit for hit in reader.search(query, limit=len(outputs))}
        assert f"default:{seq}" in hits, (text, query)
        assert hits[f"default:{seq}"]["text"] == text
        if quoted:  # a phrase matches only outputs holding its terms in a row
            terms = analyze_text(piece)
            for hit in hits.values():
                found = analyze_text(hit["text"])
                assert any(found[i:i + len(terms)] == terms for i in range(len(found))), (query, hit)
