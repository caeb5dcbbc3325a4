"""The evaluation sets: public, real agent transcripts, rebuilt from local git snapshots.

Two sets (``SETS``), each searched on a stack of its own:

- ``main`` (``SOURCES``): marot/spotter's Claude Code sessions and tau-bench's airline runs,
  the set the ranking work of the project was measured and tuned on;
- ``heldout`` (``HELDOUT_SOURCES``): 42 Claude Code sessions of two other repositories that
  the ranking was not tuned on, a check that the figures of ``main`` are not its own.

Every file comes from a public repository at a pinned commit: the repository's licence is
recorded next to it and in ``benchmarks/eval_data/NOTICE.md``. The transcripts are not
committed here; ``build`` reads them from snapshots (bare or normal git directories, one per
repository, found as ``<snapshots>/<owner>+<name>/repo`` or ``<snapshots>/<owner>/<name>``)
and writes them, in formats ``usl ingest`` reads, under ``benchmarks/eval_data/<set dir>/``
(``sessions/`` for ``main``, ``sessions-heldout/`` for ``heldout``; both git-ignored)::

    <set dir>/claude-code/...   Claude Code session JSONL (subagent files beside their parent)
    <set dir>/openai-chat/...   OpenAI chat-completions tool-calling runs, one per JSONL line
    <set dir>/manifest.json     per file: where it came from, its session ids, whether it is
                                held back as the not-yet-indexed tail

Usage::

    .venv/bin/python -m benchmarks.eval.dataset [--set main|heldout|all] [--snapshots /work/.mirror] [--out DIR]

A snapshot can be made with ``git clone https://github.com/OWNER/NAME`` and
``git -C NAME checkout COMMIT``; the builder reads each file at its pinned commit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DATA_DIR", "HELDOUT_SOURCES", "SETS", "SOURCES", "EvalSet", "Source", "build", "file_key",
           "find_snapshot", "pick_checkpoints"]

DATA_DIR = Path(__file__).resolve().parent.parent / "eval_data"
SESSIONS = "sessions"
# Entire checkpoints of 60-600 kB: real work, yet quick to ingest (the held-out check of
# session 20 chose them so; the bounds stay, so its figures and these compare).
CHECKPOINT_BYTES = (60_000, 600_000)
# The agents whose checkpoints are Claude Code transcripts: the "Gemini CLI" ones are too.
CHECKPOINT_AGENTS = ("Claude Code", "Gemini CLI")


@dataclass(frozen=True)
class Source:
    """Files of one repository at one commit, and how they become importable sessions."""

    repo: str
    commit: str
    licence: str
    fmt: str  # the `usl ingest --format` of what `build` writes
    paths: tuple[str, ...]  # files, or folders whose *.jsonl files are taken (recursively)
    description: str
    convert: str = "copy"  # copy | tau-bench | entire-checkpoints
    # The last ``held_back`` files picked (in the converter's order) are the set's tail: ingested
    # after the sinks stop, so only ``latest`` can find them.
    held_back: int = 0


SOURCES: tuple[Source, ...] = (
    Source(
        repo="marot/spotter", commit="8cc42b0bd39d04e71e509d7d58e6782ab435329f", licence="MIT",
        fmt="claude-code", paths=("test/fixtures/transcripts",), convert="copy",
        description="Real Claude Code sessions (and their subagent transcripts) from developing "
                    "spotter, an Elixir/Phoenix app; the repository's test fixtures, sanitised by "
                    "its author (user names, e-mails, tokens). Files of 4 MiB and more are absent "
                    "from snapshots and skipped.",
    ),
    Source(
        repo="sierra-research/tau-bench", commit="59a200c6d575d595120f1cb70fea53cef0632f6b",
        licence="MIT", fmt="openai-chat", paths=("historical_trajectories/gpt-4o-airline.json",),
        convert="tau-bench",
        description="gpt-4o tool-calling runs of the tau-bench airline domain (OpenAI "
                    "chat-completions messages with tool_calls and tool results, a simulated "
                    "customer); the first trial of each of the 50 tasks.",
    ),
)


HELDOUT_SOURCES: tuple[Source, ...] = (
    Source(
        repo="entireio/cli", commit="394f81fab87f71aa8938d91ff7a067c524ff344b", licence="MIT",
        fmt="claude-code", paths=(), convert="entire-checkpoints", held_back=5,
        description="Real Claude Code sessions the Entire CLI checkpointed (branch "
                    "`entire/checkpoints/v1`, each checkpoint's `full.jsonl`) while its developers "
                    "built it, a Go command-line tool: per session its largest checkpoint, sessions "
                    "of 60-600 kB, by start time, every other one; the last 5 are held back.",
    ),
    Source(
        repo="DRMacIver/claude-reliability", commit="4e49f16a86de76d9b0dc3ea2b8526677abe89f52",
        licence="MIT", fmt="claude-code", paths=("snapshot-tests/tests",), convert="copy",
        description="Recorded Claude Code runs on small tasks (a script, a Rust port, stop-hook "
                    "cases): the `transcript.jsonl` of each snapshot test.",
    ),
)


@dataclass(frozen=True)
class EvalSet:
    """One evaluation set: its sources, where it is built, the committed queries asked of it."""

    name: str
    sources: tuple[Source, ...]
    directory: str  # under DATA_DIR; git-ignored
    queries: str  # the committed query file under DATA_DIR


SETS: dict[str, EvalSet] = {
    "main": EvalSet("main", SOURCES, SESSIONS, "paraphrases.json"),
    "heldout": EvalSet("heldout", HELDOUT_SOURCES, "sessions-heldout", "heldout.json"),
}


def file_key(repo: str, file: str) -> str:
    """How queries name a built file: ``owner/name:<path under the source's folder, no .jsonl>``."""
    return f"{repo}:{file.removesuffix('.jsonl')}"


def find_snapshot(snapshots: Path, repo: str) -> Path:
    """The git directory of ``repo`` under ``snapshots``."""
    owner, name = repo.split("/")
    for candidate in (snapshots / f"{owner}+{name}" / "repo", snapshots / f"{owner}+{name}",
                      snapshots / owner / name, snapshots / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"no snapshot of {repo} under {snapshots} (clone it there, see the docstring)")


def _git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(git_dir), *args], check=True, capture_output=True).stdout


def _listed(git_dir: Path, commit: str, path: str) -> list[tuple[str, int | None]]:
    """(path, size) of every blob at or under ``path``; size None when the snapshot lacks it."""
    rows = []
    for line in _git(git_dir, "ls-tree", "-r", "-l", commit, "--", path).decode().splitlines():
        meta, name = line.split("\t", 1)
        _mode, kind, _sha, size = meta.split()
        if kind == "blob":
            rows.append((name, int(size) if size.isdigit() else None))
    return rows


def _present(git_dir: Path, commit: str, path: str) -> bytes | None:
    try:
        return _git(git_dir, "show", f"{commit}:{path}")
    except subprocess.CalledProcessError:
        return None


def _copy(source: Source, git_dir: Path, out: Path) -> list[dict[str, Any]]:
    written = []
    for root in source.paths:
        files = [(p, s) for p, s in _listed(git_dir, source.commit, root) if p.endswith(".jsonl")]
        present = {p for p, s in files if s is not None}
        for path, size in sorted(files):
            if size is None:
                continue
            parent = path.split("/subagents/")[0] + ".jsonl" if "/subagents/" in path else None
            if parent is not None and parent not in present:
                continue  # a subagent of a session the snapshot lacks
            body = _present(git_dir, source.commit, path)
            if body is None:
                continue
            target = out / Path(path).relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)
            written.append({"file": target.relative_to(out).as_posix(), "from": path, "bytes": len(body)})
    return written


def pick_checkpoints(checkpoints: Iterable[tuple[str, int | None, Mapping[str, Any]]]) -> list[str]:
    """The Entire checkpoints taken, in order: (checkpoint folder, bytes of its ``full.jsonl`` or
    None, its ``metadata.json``) in, folders out. Per session the largest checkpoint (the first
    listed of equal ones), of a Claude Code transcript, sizes within ``CHECKPOINT_BYTES``; by
    ``created_at`` (stable), every other one, so neighbouring checkpoints of one day's work do
    not crowd the set."""
    best: dict[Any, tuple[str, int, str]] = {}
    for folder, size, meta in checkpoints:
        if size is None or meta.get("agent") not in CHECKPOINT_AGENTS:
            continue
        session = meta.get("session_id")
        if session not in best or size > best[session][1]:
            best[session] = (folder, size, str(meta.get("created_at") or ""))
    low, high = CHECKPOINT_BYTES
    chosen = sorted((pick for pick in best.values() if low <= pick[1] <= high), key=lambda pick: pick[2])
    return [folder for folder, _, _ in chosen[::2]]


def _blobs(git_dir: Path, specs: list[str]) -> list[bytes]:
    """Many ``git show COMMIT:PATH`` at once (``git cat-file --batch``: one process, not 1 300)."""
    done = subprocess.run(["git", "-C", str(git_dir), "cat-file", "--batch"], input="".join(f"{s}\n" for s in specs).encode(),
                          check=True, capture_output=True).stdout
    bodies, at = [], 0
    for spec in specs:
        header_end = done.index(b"\n", at)
        header = done[at:header_end].split()
        if header[-1] == b"missing":
            raise FileNotFoundError(f"{spec} is missing from the snapshot")
        size = int(header[2])
        bodies.append(done[header_end + 1:header_end + 1 + size])
        at = header_end + 1 + size + 1
    return bodies


def _entire(source: Source, git_dir: Path, out: Path) -> list[dict[str, Any]]:
    sizes = dict(_listed(git_dir, source.commit, "."))
    # A session's checkpoint folder is <2 hex>/<10 hex>/<n>/: its metadata.json is 3 levels down.
    metas = [path for path in sizes if path.count("/") == 3 and path.endswith("/metadata.json")]
    bodies = _blobs(git_dir, [f"{source.commit}:{path}" for path in metas])
    folders = pick_checkpoints((path.rsplit("/", 1)[0], sizes.get(path.rsplit("/", 1)[0] + "/full.jsonl"), json.loads(body))
                               for path, body in zip(metas, bodies, strict=True))
    written = []
    for number, folder in enumerate(folders):
        path = f"{folder}/full.jsonl"
        body = _git(git_dir, "show", f"{source.commit}:{path}")
        target = out / f"{folder.replace('/', '-')}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
        written.append({"file": target.name, "from": path, "bytes": len(body),
                        "heldBack": number >= len(folders) - source.held_back})
    return written


def tau_conversations(runs: list[dict[str, Any]], domain: str) -> list[dict[str, Any]]:
    """The first trial of each task as an OpenAI chat conversation with a stable id."""
    chosen: dict[int, dict[str, Any]] = {}
    for run in runs:
        task = int(run["task_id"])
        if task not in chosen or int(run.get("trial", 0)) < int(chosen[task].get("trial", 0)):
            chosen[task] = run
    return [{"id": f"tau-{domain}-task{task:03d}", "model": "gpt-4o", "created": 1_717_200_000 + task * 3600,
             "title": f"tau-bench {domain} task {task}", "messages": chosen[task]["traj"]}
            for task in sorted(chosen)]


def _tau(source: Source, git_dir: Path, out: Path) -> list[dict[str, Any]]:
    written = []
    for path in source.paths:
        body = _present(git_dir, source.commit, path)
        if body is None:
            raise FileNotFoundError(f"{source.repo}:{path} is missing from the snapshot")
        domain = Path(path).stem.split("-")[-1]
        conversations = tau_conversations(json.loads(body), domain)
        target = out / f"tau-bench-{Path(path).stem}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(json.dumps(c, ensure_ascii=False) + "\n" for c in conversations))
        written.append({"file": target.name, "from": path, "bytes": target.stat().st_size,
                        "conversations": len(conversations)})
    return written


_CONVERTERS = {"copy": _copy, "tau-bench": _tau, "entire-checkpoints": _entire}


def _session_ids(path: Path, fmt: str) -> list[str]:
    from streams.importers import Accepted, iter_records

    return sorted({item.event["sessionId"] for item in iter_records(path, fmt) if isinstance(item, Accepted)})


def build(snapshots: Path, out: Path = DATA_DIR, eval_set: EvalSet = SETS["main"]) -> dict[str, Any]:
    """Write every source's sessions of ``eval_set`` under ``out/<its directory>/<format>/``;
    the manifest written. Each file's entry names its session ids as ``usl ingest`` assigns
    them, which is how a query about a file knows its answer."""
    root = out / eval_set.directory
    manifest: dict[str, Any] = {"set": eval_set.name, "sources": []}
    for source in eval_set.sources:
        git_dir = find_snapshot(snapshots, source.repo)
        target = root / source.fmt / source.repo.replace("/", "+")
        files = _CONVERTERS[source.convert](source, git_dir, target)
        for entry in files:
            entry["key"] = file_key(source.repo, entry["file"])
            entry["sessions"] = _session_ids(target / entry["file"], source.fmt)
            entry["file"] = (target / entry["file"]).relative_to(root).as_posix()
            entry.setdefault("heldBack", False)
        manifest["sources"].append({"repo": source.repo, "commit": source.commit, "licence": source.licence,
                                    "format": source.fmt, "description": source.description, "files": files})
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eval.dataset", description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=Path, default=Path("/work/.mirror"),
                        help="directory holding one git snapshot per source repository")
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    parser.add_argument("--set", choices=(*SETS, "all"), default="all", help="which evaluation set to build")
    args = parser.parse_args(argv)
    for eval_set in SETS.values() if args.set == "all" else (SETS[args.set],):
        try:
            manifest = build(args.snapshots, args.out, eval_set)
        except (FileNotFoundError, subprocess.CalledProcessError) as error:
            print(f"cannot build the evaluation set {eval_set.name}: {error}", file=sys.stderr)
            return 1
        for source in manifest["sources"]:
            held = sum(1 for entry in source["files"] if entry["heldBack"])
            print(f"{eval_set.name}: {source['repo']}: {len(source['files'])} files, {held} held back", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
