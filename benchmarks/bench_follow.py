"""Follow-mode benchmark: CPU per change of a growing Claude Code transcript, without a stack.

Writes SRC but its last ``--lines`` lines into a temporary directory, lets a follower (against
an in-memory L1) read it and then the file grow by one line per poll, and prints the CPU seconds
of those polls (the last line is written after a restart: a new follower on the same positions,
``restart_ms``): with the import kept open between polls (what ``usl ingest --follow`` does) and
with the whole file imported on every change (``Follower(resume=False)``, the release before),
each in its own fresh follower over its own copy. The two must append the same events (checked).

Usage::

    .venv/bin/python benchmarks/bench_follow.py SRC.jsonl [--lines 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from streams.follow import Follower, PositionStore
from streams.testing import Clock, MemoryL1

__all__ = ["main", "run"]


def run(source: Path, lines: int, *, resume: bool) -> dict[str, Any]:
    """CPU seconds of each poll that read one new line of ``source``'s last ``lines``."""
    data = source.read_bytes().splitlines(keepends=True)
    head, tail = data[:-lines], data[-lines:]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "projects"
        root.mkdir()
        live = root / "live.jsonl"
        live.write_bytes(b"".join(head))
        l1, clock = MemoryL1(), Clock()
        follower = Follower([root], appender=l1, store=PositionStore(Path(tmp) / "home"), clock=clock,
                            resume=resume)
        follower.poll()  # a follower's first look: the whole file, checked against L1
        polls: list[float] = []
        for line in tail[:-1]:
            with live.open("ab") as handle:
                handle.write(line)
            started = time.process_time()
            follower.poll()
            polls.append(time.process_time() - started)
        # A restart (the follower stopped and started again): the file grows once more.
        follower = Follower([root], appender=l1, store=PositionStore(Path(tmp) / "home"), clock=clock,
                            resume=resume)
        follower.poll()
        with live.open("ab") as handle:
            handle.write(tail[-1])
        started = time.process_time()
        follower.poll()
        restart = time.process_time() - started
        clock.now += 60
        follower.poll()  # the file went idle: what its end held back goes out
        return {"polls": polls, "restart": restart, "events": [event["eventId"] for event in l1.log],
                "size_mb": live.stat().st_size / 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a Claude Code transcript (*.jsonl)")
    parser.add_argument("--lines", type=int, default=100, help="lines appended one per poll (at least 2)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = {name: run(args.source, args.lines, resume=name == "resumed") for name in ("resumed", "whole")}
    if results["resumed"]["events"] != results["whole"]["events"]:
        print("the two followers appended different events", file=sys.stderr)
        return 1
    summary = {
        "size_mb": round(results["whole"]["size_mb"], 1), "lines": args.lines,
        **{f"{name}_ms_per_line": {
            "p50": round(statistics.median(r["polls"]) * 1e3, 1),
            # the first change of a file found at start imports it whole and keeps that import
            "first": round(r["polls"][0] * 1e3, 1),
            "max_after_first": round(max(r["polls"][1:] or [0.0]) * 1e3, 1),
            "restart_ms": round(r["restart"] * 1e3, 1),
            "total_s": round(sum(r["polls"]), 2)} for name, r in results.items()},
    }
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
