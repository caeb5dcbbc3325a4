"""The evaluation set: public, real agent transcripts, rebuilt from local git snapshots.

Every file comes from a public repository at a pinned commit (``SOURCES``): the repository's
licence is recorded next to it and in ``benchmarks/eval_data/NOTICE.md``. The transcripts are
not committed here; ``build`` reads them from snapshots (bare or normal git directories, one
per repository, found as ``<snapshots>/<owner>+<name>/repo`` or ``<snapshots>/<owner>/<name>``)
and writes them, in formats ``usl ingest`` reads, under ``benchmarks/eval_data/sessions/``::

    sessions/claude-code/...   Claude Code session JSONL (subagent files beside their parent)
    sessions/openai-chat/...   OpenAI chat-completions tool-calling runs, one per JSONL line

Usage::

    .venv/bin/python -m benchmarks.eval.dataset [--snapshots /work/.mirror] [--out DIR]

A snapshot can be made with ``git clone https://github.com/OWNER/NAME`` and
``git -C NAME checkout COMMIT``; the builder reads each file at its pinned commit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DATA_DIR", "SOURCES", "Source", "build", "find_snapshot"]

DATA_DIR = Path(__file__).resolve().parent.parent / "eval_data"
SESSIONS = "sessions"


@dataclass(frozen=True)
class Source:
    """Files of one repository at one commit, and how they become importable sessions."""

    repo: str
    commit: str
    licence: str
    fmt: str  # the `usl ingest --format` of what `build` writes
    paths: tuple[str, ...]  # files, or folders whose *.jsonl files are taken (recursively)
    description: str
    convert: str = "copy"  # copy | tau-bench


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


def build(snapshots: Path, out: Path = DATA_DIR) -> dict[str, Any]:
    """Write every source's sessions under ``out/sessions/<format>/``; the manifest written."""
    manifest: dict[str, Any] = {"sources": []}
    for source in SOURCES:
        git_dir = find_snapshot(snapshots, source.repo)
        target = out / SESSIONS / source.fmt / source.repo.replace("/", "+")
        convert = _tau if source.convert == "tau-bench" else _copy
        files = convert(source, git_dir, target)
        manifest["sources"].append({"repo": source.repo, "commit": source.commit, "licence": source.licence,
                                    "format": source.fmt, "description": source.description, "files": files})
    (out / SESSIONS / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eval.dataset", description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=Path, default=Path("/work/.mirror"),
                        help="directory holding one git snapshot per source repository")
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    try:
        manifest = build(args.snapshots, args.out)
    except (FileNotFoundError, subprocess.CalledProcessError) as error:
        print(f"cannot build the evaluation set: {error}", file=sys.stderr)
        return 1
    for source in manifest["sources"]:
        print(f"{source['repo']}: {len(source['files'])} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
