"""The evaluation's metric functions on tiny inputs (the whole run is `make eval`)."""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.eval.metrics import (
    contains_phrase,
    first_hit_rank,
    hit_at,
    mrr,
    normalise,
    page_split,
    sample_phrases,
)


def test_hit_at_and_mrr_known_answers() -> None:
    ranks = [1, 2, None, 10, 11]
    assert hit_at(ranks, 10) == pytest.approx(3 / 5)
    assert hit_at(ranks, 1) == pytest.approx(1 / 5)
    assert mrr(ranks) == pytest.approx((1 + 1 / 2 + 0 + 1 / 10 + 1 / 11) / 5)
    assert hit_at([], 10) == 0.0 and mrr([]) == 0.0


def test_first_hit_rank_looks_only_at_the_top_k() -> None:
    results = [{"sessionId": s} for s in "abcdefghijkl"]
    assert first_hit_rank(results, lambda r: r["sessionId"] == "c", 10) == 3
    assert first_hit_rank(results, lambda r: r["sessionId"] == "k", 10) is None
    assert first_hit_rank(results, lambda r: r["sessionId"] == "k", 11) == 11


def test_contains_phrase_needs_the_words_in_order_and_whole() -> None:
    text = "It  failed\non the refunds\ttable migration again"
    assert contains_phrase(text, "failed on the refunds table")
    assert not contains_phrase(text, "on the failed refunds table")
    assert not contains_phrase(text, "ailed on the")
    assert normalise(" a \n b\t") == "a b"


MESSAGES = [(f"m{i}", " ".join(f"word{i}x{j}" for j in range(30))) for i in range(40)]


def test_phrase_sampling_is_deterministic_and_order_free() -> None:
    first = sample_phrases(MESSAGES, 10, seed=7)
    assert first == sample_phrases(list(reversed(MESSAGES)), 10, seed=7)
    assert first != sample_phrases(MESSAGES, 10, seed=8)
    assert len(first) == 10
    for key, phrase in first:
        assert len(phrase.split(" ")) == 8
        assert contains_phrase(dict(MESSAGES)[key], phrase)


def test_phrase_sampling_honours_accept_and_skips_short_messages() -> None:
    messages = [("short", "only five words in here"), *MESSAGES[:3]]
    picked = sample_phrases(messages, 10, seed=1, accept=lambda phrase: "word1x" not in phrase)
    assert {key for key, _ in picked} == {"m0", "m2"}


@given(st.integers(1, 60), st.integers(0, 10_000))
def test_page_split_sums_to_the_total(total: int, seed: int) -> None:
    sizes = page_split(total, random.Random(seed))
    assert sum(sizes) == total and all(size >= 1 for size in sizes)
    assert sizes == page_split(total, random.Random(seed))


def test_an_error_fragment_also_printed_outside_any_turn_is_not_asked() -> None:
    from benchmarks.eval.run import Corpus, error_task

    def result(event_id: str, turn: str | None, output: str) -> dict[str, object]:
        return {"type": "tool.result", "eventId": event_id, "sessionId": "s-1", "turnId": turn,
                "fields": {"status": "error", "output": output, "toolName": "Bash"}}

    corpus = Corpus(events=[
        result("e-1", "t-1", "<tool_use_error>Sibling tool call errored</tool_use_error>"),
        result("e-2", None, "<tool_use_error>Sibling tool call errored</tool_use_error>"),  # no turn
        result("e-3", "t-2", "fatal: not a git repository (or any parent)"),
    ])
    asked = error_task(corpus, count=10, seed=1)
    assert [task["query"] for task in asked] == ["fatal: not a git repository (or any parent)"]
    assert asked[0]["turnId"] == "t-2"


def test_an_error_ending_is_the_last_telling_line_of_a_long_output_past_its_beginning() -> None:
    from benchmarks.eval.run import Corpus, error_task

    frames = "".join(f'  File "/srv/app/m{n}.py", line {n}, in f{n}\n    g{n}()\n' for n in range(12))
    long_output = f"Exit code 1\nTraceback (most recent call last):\n{frames}KeyError: 'refund_total' missing from order payload\n\n"
    corpus = Corpus(events=[
        {"type": "tool.result", "eventId": "e-1", "sessionId": "s-1", "turnId": "t-1",
         "fields": {"status": "error", "output": long_output, "toolName": "Bash"}},
        {"type": "tool.result", "eventId": "e-2", "sessionId": "s-1", "turnId": "t-2",  # short: its summary holds it all
         "fields": {"status": "error", "output": "Traceback (most recent call last):\nValueError: bad literal x", "toolName": "Bash"}},
    ])
    asked = error_task(corpus, count=10, seed=1, ending=True)
    assert [(task["query"], task["turnId"]) for task in asked] == [("KeyError: 'refund_total' missing from order payload", "t-1")]


# -- the held-out set: selection, staging and committed queries ------------------------------------


def _meta(session: str, created: str, agent: str = "Claude Code") -> dict[str, str]:
    return {"session_id": session, "created_at": created, "agent": agent}


def test_checkpoints_picked_largest_per_session_in_bounds_by_start_every_other() -> None:
    from benchmarks.eval.dataset import pick_checkpoints

    kb = 1000
    picked = pick_checkpoints([
        ("aa/s1/0", 80 * kb, _meta("s1", "2026-01-05")),
        ("aa/s1/1", 90 * kb, _meta("s1", "2026-01-05")),    # s1's largest
        ("aa/s1/2", 90 * kb, _meta("s1", "2026-01-05")),    # as large: the first listed stays
        ("bb/s2/0", 70 * kb, _meta("s2", "2026-01-01", agent="Agent")),  # not a Claude Code transcript
        ("cc/s3/0", 59 * kb, _meta("s3", "2026-01-02")),    # too small
        ("dd/s4/0", 601 * kb, _meta("s4", "2026-01-03")),   # too large
        ("ee/s5/0", None, _meta("s5", "2026-01-04")),       # full.jsonl absent from the snapshot
        ("ff/s6/0", 100 * kb, _meta("s6", "2026-01-01", agent="Gemini CLI")),
        ("gg/s7/0", 60 * kb, _meta("s7", "2026-01-03")),
        ("hh/s8/0", 600 * kb, _meta("s8", "2026-01-09")),
        ("ii/s9/0", 65 * kb, _meta("s9", "2026-01-07")),
    ])
    # by start: s6 (01-01), s7 (01-03), s1 (01-05), s9 (01-07), s8 (01-09); every other one
    assert picked == ["ff/s6/0", "aa/s1/1", "hh/s8/0"]


def _git_repo(root: Path, files: dict[str, bytes]) -> str:
    root.mkdir(parents=True)
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(body)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x",
           "PATH": os.environ["PATH"], "HOME": str(root)}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)
    return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def _transcript(session: str, words: int) -> bytes:
    line = {"type": "user", "sessionId": session, "uuid": f"u-{session}", "parentUuid": None,
            "timestamp": "2026-01-01T00:00:00Z", "cwd": "/w",
            "message": {"role": "user", "content": " ".join(["checkpoint"] * words)}}
    return (json.dumps(line) + "\n").encode()


def test_the_heldout_build_marks_the_last_picked_files_held_back(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.eval import dataset

    monkeypatch.setattr(dataset, "CHECKPOINT_BYTES", (100, 10_000))
    files: dict[str, bytes] = {"README.md": b"not a checkpoint\n"}
    for number in range(6):
        folder = f"0{number}/abcdef012{number}/0"
        files[f"{folder}/metadata.json"] = json.dumps(_meta(f"sess-{number}", f"2026-01-0{number + 1}")).encode()
        files[f"{folder}/full.jsonl"] = _transcript(f"sess-{number}", 40)
    files["tests/run-a/transcript.jsonl"] = _transcript("run-a", 5)
    commit = _git_repo(tmp_path / "snap" / "acme+cli", files)
    eval_set = dataset.EvalSet("tiny", (
        dataset.Source(repo="acme/cli", commit=commit, licence="MIT", fmt="claude-code", paths=(),
                       description="", convert="entire-checkpoints", held_back=1),
        dataset.Source(repo="acme/cli", commit=commit, licence="MIT", fmt="claude-code", paths=("tests",),
                       description=""),
    ), "built", "tiny.json")
    manifest = dataset.build(tmp_path / "snap", tmp_path / "out", eval_set)
    entries = [entry for source in manifest["sources"] for entry in source["files"]]
    assert [(e["key"], e["sessions"], e["heldBack"]) for e in entries] == [
        ("acme/cli:00-abcdef0120-0", ["sess-0"], False),
        ("acme/cli:02-abcdef0122-0", ["sess-2"], False),
        ("acme/cli:04-abcdef0124-0", ["sess-4"], True),
        ("acme/cli:run-a/transcript", ["run-a"], False),
    ]
    for entry in entries:
        assert (tmp_path / "out" / "built" / entry["file"]).is_file()
    assert json.loads((tmp_path / "out" / "built" / "manifest.json").read_text()) == manifest


def test_staging_moves_the_held_back_files_to_the_tail(tmp_path: Path) -> None:
    from benchmarks.eval.run import stage

    sessions = tmp_path / "sessions"
    for name in ("claude-code/acme+cli/a.jsonl", "claude-code/acme+cli/b.jsonl"):
        (sessions / name).parent.mkdir(parents=True, exist_ok=True)
        (sessions / name).write_text(f"{name}\n")
    dirs, tail_dirs, held = stage(sessions, tmp_path / "work", 0, 1, {"claude-code/acme+cli/b.jsonl": ["s-b"]})
    assert [fmt for _, fmt in dirs] == ["claude-code"] and [fmt for _, fmt in tail_dirs] == ["claude-code"]
    assert [p.name for p in dirs[0][0].rglob("*.jsonl")] == ["a.jsonl"]
    assert [p.name for p in tail_dirs[0][0].rglob("*.jsonl")] == ["b.jsonl"]
    assert held == {"s-b"}
    assert (sessions / "claude-code/acme+cli/b.jsonl").exists()  # the built set is left whole


MANIFEST = {"sources": [{"repo": "acme/cli", "files": [
    {"key": "acme/cli:a", "file": "claude-code/acme+cli/a.jsonl", "sessions": ["s-a", "s-a2"], "heldBack": False},
    {"key": "acme/cli:b", "file": "claude-code/acme+cli/b.jsonl", "sessions": ["s-b"], "heldBack": True},
    {"key": "acme/cli:empty", "file": "claude-code/acme+cli/empty.jsonl", "sessions": [], "heldBack": False},
]}]}


def _queries(tmp_path: Path, body: Mapping[str, object]) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(body))
    return path


def test_committed_queries_get_their_files_sessions(tmp_path: Path) -> None:
    from benchmarks.eval.run import load_queries

    phrases, paraphrases, pages = load_queries(_queries(tmp_path, {
        "phrases": [{"file": "acme/cli:b", "query": "one two three four five six seven eight"}],
        "paraphrases": [{"file": "acme/cli:a", "query": "the session about a"}],
        "pagination": ["a query"]}), MANIFEST)
    assert phrases == [{"file": "acme/cli:b", "query": "one two three four five six seven eight",
                        "sessionId": "s-b", "sessions": ["s-b"]}]
    assert paraphrases[0]["sessionId"] == "s-a" and paraphrases[0]["sessions"] == ["s-a", "s-a2"]
    assert pages == ["a query"]


@pytest.mark.parametrize("file", ["acme/cli:missing", "acme/cli:empty"])
def test_committed_queries_naming_no_session_are_refused(tmp_path: Path, file: str) -> None:
    from benchmarks.eval.run import load_queries

    body = {"phrases": [], "paraphrases": [{"file": file, "query": "q"}], "pagination": []}
    with pytest.raises(ValueError, match=file):
        load_queries(_queries(tmp_path, body), MANIFEST)


def test_the_committed_heldout_queries_name_files_of_its_sources() -> None:
    from benchmarks.eval.dataset import DATA_DIR, SETS

    data = json.loads((DATA_DIR / SETS["heldout"].queries).read_text())
    repos = {source.repo for source in SETS["heldout"].sources}
    rows = data["phrases"] + data["paraphrases"]
    assert (len(data["phrases"]), len(data["paraphrases"]), len(data["pagination"])) == (32, 40, 6)
    assert all(row["file"].split(":", 1)[0] in repos for row in rows)
    assert all(len(row["query"].split(" ")) == 8 for row in data["phrases"])
    assert len({row["query"] for row in rows}) == len(rows)


def _row(mode: str, freshness: str, errors: int) -> dict[str, object]:
    return {"mode": mode, "freshness": freshness, "phraseRecall": 1.0, "phraseQueries": 3, "paraphraseHit": 0.5,
            "paraphraseMrr": 0.25, "paraphraseQueries": 4, "errorHit": 1.0, "errorMrr": 1.0, "errorQueries": errors,
            "errorEndHit": 0.0, "errorEndMrr": 0.0, "errorEndQueries": errors, "pagesEqual": 1.0, "pageQueries": 2,
            "latencyP50Ms": 12.0}


def _result(eval_set: str, label: str, errors: int) -> dict[str, object]:
    source = {"repo": "acme/cli", "commit": "0" * 40, "licence": "MIT", "format": "claude-code", "files": 2,
              "description": "tiny"}
    return {"label": label, "evalSet": eval_set, "command": "make eval", "seed": 1, "when": f"2026-12-06T0{errors}:00:00",
            "commit": "abc", "embedder": "hashing", "textEngine": "tantivy", "seconds": 60.0,
            "set": {"sources": [source], "sessions": 2, "events": 9, "chunks": 4, "heldBackSessions": ["s-b"]},
            "tasks": {"phrases": [{}] * 3, "paraphrases": 4, "paginationQueries": ["q", "r"]},
            "table": {"text/indexed": _row("text", "indexed", errors)}}


def test_each_set_is_stored_apart_and_reported_with_its_own_columns(tmp_path: Path) -> None:
    from benchmarks.eval.run import write

    write(_result("heldout", "first", 0), tmp_path)
    alone = (tmp_path / "EVAL.md").read_text()  # no run of the first set yet
    assert "## Held-out run `first`" in alone and "error hit@10" not in alone
    write(_result("main", "first", 5), tmp_path)
    results = tmp_path / "benchmarks" / "results"
    assert sorted(p.name for p in results.iterdir()) == ["eval-first.json", "eval.json", "heldout-first.json",
                                                          "heldout.json"]
    both = (tmp_path / "EVAL.md").read_text()
    main_part, heldout_part = both.split("# The held-out set")
    assert "## Run `first`" in main_part and "| error hit@10 |" in main_part
    assert "## Held-out run `first`" in heldout_part and "error hit@10" not in heldout_part
    assert "| text | indexed | 1.00 (3) | 0.50 (4) | 0.250 | 1.00 (2) | 12 |" in heldout_part
