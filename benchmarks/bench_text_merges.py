"""Text commit time with tantivy's merges inside the commit (the plain writer) and beside it
(the sink loop's live index, ``sinks.text.tantivy_engine.LiveIndex``), in one run.

The same corpus (``bench_query.generate``: one short chunk per turn) is written in batches of
``--batch`` chunks, each batch a committed generation (``sinks.testing.commit_batches``, then
gc), once each way and alternating for ``--pairs`` pairs. A commit that waits for a merge holds the text
watermark for that long, so the figures are the commit times' median, p99 and maximum (the
longest wait) and the maximum against the median, per way, and the live/plain ratios.

Usage::

    .venv/bin/python -m benchmarks.bench_text_merges [--chunks 200000] [--batch 512] [--pairs 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_query import generate
from sinks.generations import GenerationStore
from sinks.testing import commit_batches
from sinks.text_writer import TextWriter


def commit_times(chunks: int, batch: int, *, live: bool) -> list[float]:
    """Seconds of each generation's write + commit, the way the sink does it."""
    with tempfile.TemporaryDirectory(prefix="usl-text-merges-") as tmp:
        root = Path(tmp) / "indexes"
        store = GenerationStore(root, "default", "text")
        writer = TextWriter("tantivy")
        writer.live = live
        times: list[float] = []
        pending: list[dict[str, Any]] = []
        try:
            for _, chunk in generate(chunks):
                pending.append(chunk)
                if len(pending) < batch:
                    continue
                began = time.perf_counter()
                commit_batches(root, writer, [pending])
                times.append(time.perf_counter() - began)
                store.gc(keep_last=2)
                pending = []
        finally:
            writer.close_live()
        return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    median = statistics.median(ordered)
    return {"commits": len(ordered), "median": median, "p99": ordered[int(0.99 * (len(ordered) - 1))],
            "max": ordered[-1], "maxOverMedian": ordered[-1] / median, "total": sum(ordered)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "live": []}
    for _ in range(args.pairs):
        for way in ("plain", "live"):
            runs[way].append(summary(commit_times(args.chunks, args.batch, live=way == "live")))
    ratios = [{key: live[key] / plain[key] for key in ("median", "p99", "max", "total")}
              for plain, live in zip(runs["plain"], runs["live"], strict=True)]
    if args.json:
        print(json.dumps({"chunks": args.chunks, "batch": args.batch, "runs": runs, "liveOverPlain": ratios}, indent=1))
        return
    print(f"{args.chunks} chunks in batches of {args.batch}, commit seconds (write + commit of a generation):")
    for way, summaries in runs.items():
        for pair, figures in enumerate(summaries, start=1):
            print(f"  {way:>5} #{pair}: median {figures['median']:.3f}  p99 {figures['p99']:.2f}  "
                  f"max {figures['max']:.2f} ({figures['maxOverMedian']:.0f}x median)  total {figures['total']:.1f}")
    for pair, ratio in enumerate(ratios, start=1):
        print(f"  live / plain #{pair}: median {ratio['median']:.2f}x  p99 {ratio['p99']:.2f}x  "
              f"max {ratio['max']:.2f}x  total {ratio['total']:.2f}x")


if __name__ == "__main__":
    main()
