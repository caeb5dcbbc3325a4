"""What the CJK-aware analyzer costs the tool-results index: write rate, index size, query latency.

Synthetic tool outputs of about 600 characters, all ASCII or half CJK (Chinese and Japanese
runs of 2-12 characters between code words), written by ``sinks.toolresults.ToolResultsWriter``
with the analyzer of schema 2 and with the plain one of schema 1 (``cjk_spaced`` replaced by the
identity, which is what schema 1 indexed). The two alternate within each round, so load on a
shared machine hits both alike; the best of the rounds is printed. Then the query latency of an
ASCII word and of a 4-character CJK substring of a stored output on the half-CJK index.

    .venv/bin/python -m benchmarks.bench_toolresults_cjk --outputs 10000 --rounds 3

No broker needed.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import sinks.toolresults as toolresults
from sinks.testing import make_toolresult

_ASCII = ("error warning build failed src main test passed retry timeout connection refused "
          "file not found line").split()
_CJK = "数据库连接超时正在重试第次エラーファイルが見つかりませんコンパイルに失敗しました"


def outputs(count: int, cjk_share: float, seed: int) -> list[str]:
    """``count`` tool outputs; about ``cjk_share`` of their pieces are CJK runs."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        parts: list[str] = []
        while sum(len(part) for part in parts) < 600:
            if rng.random() < cjk_share:
                parts.append("".join(rng.choice(_CJK) for _ in range(rng.randint(2, 12))))
            else:
                parts.append(rng.choice(_ASCII) + rng.choice(["", ":", "/", ".c", " 42"]))
        texts.append(" ".join(parts))
    return texts


def write_rates(texts: list[str], rounds: int) -> dict[str, tuple[float, int]]:
    """label -> (best seconds to write ``texts`` as one generation, index bytes)."""
    records = [make_toolresult(i + 1, f"s{i % 50}", text) for i, text in enumerate(texts)]
    real = toolresults.cjk_spaced
    analyzers: dict[str, Callable[[str], str]] = {"schema 1 (plain)": lambda text: text,
                                                  "schema 2 (cjk)": real}
    best: dict[str, tuple[float, int]] = {}
    try:
        for _ in range(rounds):
            for label, spaced in analyzers.items():
                setattr(toolresults, "cjk_spaced", spaced)  # noqa: B010  (a module attribute, swapped for the run)
                root = Path(tempfile.mkdtemp())
                try:
                    started = time.perf_counter()
                    toolresults.ToolResultsWriter().write(root / "g", None, records)
                    took = time.perf_counter() - started
                    size = sum(path.stat().st_size for path in (root / "g").iterdir())
                finally:
                    shutil.rmtree(root)
                if label not in best or took < best[label][0]:
                    best[label] = (took, size)
    finally:
        setattr(toolresults, "cjk_spaced", real)  # noqa: B010
    return best


def query_latency(texts: list[str], queries: int) -> dict[str, tuple[float, float]]:
    """kind of query -> (p50, p99) seconds over ``queries`` searches of the index of ``texts``."""
    root = Path(tempfile.mkdtemp())
    try:
        toolresults.ToolResultsWriter().write(
            root / "g", None, [make_toolresult(i + 1, f"s{i % 50}", text) for i, text in enumerate(texts)])
        reader = toolresults.ToolResultsReader(root / "g")
        rng = random.Random(1)
        readable = [f"s{i}" for i in range(25)]

        def cjk_substring() -> str:
            runs = [run for run in rng.choice(texts).split() if not run.isascii() and len(run) >= 4]
            run = rng.choice(runs)
            start = rng.randrange(len(run) - 3)
            return run[start:start + 4]

        makers: dict[str, Callable[[], str]] = {
            "ascii word": lambda: rng.choice(["timeout", "connection refused", "error"]),
            "cjk 4 chars": cjk_substring,
        }
        out = {}
        for name, make in makers.items():
            times = []
            for _ in range(queries):
                query = make()
                started = time.perf_counter()
                reader.search(query, limit=50, session_ids=readable)
                times.append(time.perf_counter() - started)
            times.sort()
            out[name] = (times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))])
        return out
    finally:
        shutil.rmtree(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args(argv)
    mixed: list[str] = []
    for name, share in (("ascii", 0.0), ("half cjk", 0.5)):
        texts = outputs(args.outputs, share, seed=6)
        megabytes = sum(len(text.encode("utf-8")) for text in texts) / 1e6
        for label, (seconds, size) in write_rates(texts, args.rounds).items():
            print(f"{name:8s} {label:16s} {args.outputs} outputs, {megabytes:.1f} MB: "
                  f"{seconds:.2f} s = {megabytes / seconds:.1f} MB/s, index {size / 1e6:.1f} MB")
        mixed = texts
    for name, (p50, p99) in query_latency(mixed, args.queries).items():
        print(f"query {name:11s} on half cjk: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
