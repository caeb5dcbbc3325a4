"""The object-store judges of the fault suite (:mod:`reliability.objectstore`), driven
directly: a live published generation equals the local current one only when line, generation,
builtThroughSeq and every file agree; a publish cut short must never be named by a commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from reliability.objectstore import compare_published, local_files, never_live
from sinks.generations import Manifest
from sinks.objectstore.store import FileEntry, RemoteGeneration


def _manifest(generation_id: int = 4, built_through_seq: int = 90, line: str = "live") -> Manifest:
    return Manifest(kind="text", log_id="default", line=line, generation_id=generation_id,
                    built_through_seq=built_through_seq, schema_version="1", asp_version="1", chunker={},
                    embedding=None, redaction_policy_hash="h")


FILES = {"manifest.json": ("a" * 64, 10), "seg-1.bin": ("b" * 64, 7)}


def _published(files: dict[str, tuple[str, int]] = FILES, generation_id: int = 4, built_through_seq: int = 90,
               line: str = "live") -> tuple[dict[str, Any], RemoteGeneration]:
    key = f"rel/manifests/default/text/shard-0-of-1/gen-{generation_id:08d}-abc.json"
    remote = RemoteGeneration(key, "default/text/shard-0-of-1", generation_id, built_through_seq, line,
                              tuple(FileEntry(p, sha, size) for p, (sha, size) in sorted(files.items())))
    record = {"manifestKey": key, "line": line, "generationId": generation_id, "builtThroughSeq": built_through_seq}
    return record, remote


def test_the_same_generation_file_for_file_is_no_problem() -> None:
    record, remote = _published()
    assert compare_published("text", _manifest(), FILES, record, remote) == []


def test_nothing_local_and_nothing_published_is_no_problem() -> None:
    assert compare_published("text", None, {}, None, None) == []


def test_a_local_generation_never_published_is_a_problem() -> None:
    assert compare_published("text", _manifest(), FILES, None, None)


def test_an_older_live_generation_is_a_problem() -> None:
    record, remote = _published(generation_id=3, built_through_seq=80)
    problems = compare_published("text", _manifest(), FILES, record, remote)
    assert any("(line, generation, builtThroughSeq)" in p for p in problems)


def test_another_line_is_a_problem() -> None:
    record, remote = _published(line="rebuild-1")
    assert compare_published("text", _manifest(), FILES, record, remote)


@given(st.sampled_from(["drop", "add", "change-hash", "change-size"]), st.sampled_from(sorted(FILES)))
def test_any_file_difference_is_a_problem(change: str, path: str) -> None:
    files = dict(FILES)
    if change == "drop":
        del files[path]
    elif change == "add":
        files[path + ".extra"] = ("c" * 64, 1)
    elif change == "change-hash":
        files[path] = ("d" * 64, files[path][1])
    else:
        files[path] = (files[path][0], files[path][1] + 1)
    record, remote = _published(files)
    problems = compare_published("text", _manifest(), FILES, record, remote)
    assert any("published files differ" in p for p in problems)


def test_a_commit_record_naming_another_manifest_is_a_problem() -> None:
    record, remote = _published()
    record["manifestKey"] = remote.manifest_key.replace("abc", "xyz")
    assert compare_published("text", _manifest(), FILES, record, remote)


@given(st.sets(st.sampled_from([f"m{i}" for i in range(6)])), st.lists(st.sampled_from([f"m{i}" for i in range(6)])))
def test_a_cut_short_publish_is_a_problem_exactly_when_a_commit_names_it(cut: set[str], named: list[str]) -> None:
    problems = never_live(cut, [{"manifestKey": key} for key in named])
    assert len(problems) == len(cut & set(named))


def test_tantivy_lock_files_a_reader_created_after_the_publish_are_no_difference() -> None:
    record, remote = _published()
    local = {**FILES, ".tantivy-meta.lock": ("e" * 64, 0)}
    assert compare_published("text", _manifest(), local, record, remote) == []


def test_local_files_are_what_a_publish_uploads(tmp_path: Path) -> None:
    (tmp_path / ".tantivy-meta.lock").write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "manifest.json").write_bytes(b"{}")
    (tmp_path / "sub" / "seg.bin").write_bytes(b"xyz")
    table = local_files(tmp_path)
    assert set(table) == {"manifest.json", "sub/seg.bin"}
    assert table["sub/seg.bin"][1] == 3
    assert table["manifest.json"][0] == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
