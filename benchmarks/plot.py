"""The PNG plots of a benchmark run (``benchmarks/plots/``), drawn from the figures that
``benchmarks.measure`` returned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sinks.kinds import ALL_KINDS as KINDS

__all__ = ["plots"]


def plots(results: dict[str, Any], plot_dir: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(plot_dir / name, dpi=100)
        plt.close(fig)
        written.append(name)

    ingest, stages, raw = results["ingest"], results["stages"], results["rawRead"]
    labels = ["raw L1 read", "end to end", *[f"live {k}" for k in KINDS], "rebuild text",
              "redaction /core", "chunking /core"]
    values = [raw["eventsPerSecond"], ingest["endToEndEventsPerSecond"],
              *[ingest["perIndexEventsPerSecond"][k] for k in KINDS], results["rebuild"]["eventsPerSecond"] or 0,
              stages["redactionEventsPerCoreSecond"], stages["chunkingEventsPerCoreSecond"]]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh(labels[::-1], values[::-1], color=["#4c72b0"] * (len(labels) - 1) + ["#888888"])
    ax.set_xscale("log")
    ax.set_xlabel("events/s (log scale)")
    ax.set_title("Indexing throughput vs the raw L1 read")
    save(fig, "throughput.png")

    fresh = ingest["freshness"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    for ax, key in zip(axes, ("p50", "p99"), strict=True):
        for name in ("chunks", *KINDS):
            ax.plot([row["rate"] for row in fresh], [row["lag"][name][key] for row in fresh], marker="o",
                    label=name, linestyle="--" if name == "chunks" else "-")
        ax.set_xlabel("steady ingest rate, events/s")
        ax.set_title(f"append → searchable, {key}")
    axes[0].set_ylabel("seconds")
    axes[1].legend(fontsize=8)
    save(fig, "freshness.png")

    steps = results["queries"]["steps"] + ([results["large"]] if results.get("large") else [])
    combos = [f"{m}/{f}" for f in ("indexed", "latest") for m in ("text", "vector", "hybrid")]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / max(1, len(steps))
    for i, step in enumerate(steps):
        xs = [j + i * width for j in range(len(combos))]
        ax.bar(xs, [step["latency"][c]["p50"] for c in combos], width, label=f"{step['chunks']:,} chunks p50")
        ax.scatter(xs, [step["latency"][c]["p99"] for c in combos], marker="_", s=200, color="black")
    ax.set_xticks([j + width * (len(steps) - 1) / 2 for j in range(len(combos))], combos, fontsize=8)
    ax.set_ylabel("ms (bars p50, dashes p99)")
    ax.set_title("Query latency")
    ax.legend(fontsize=8)
    save(fig, "query_latency.png")

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for combo in ("text/indexed", "vector/indexed", "hybrid/indexed", "hybrid/latest"):
        axes[0].plot([s["chunks"] for s in steps], [s["latency"][combo]["p50"] for s in steps], marker="o", label=combo)
    axes[0].set_title("query p50 vs corpus size")
    axes[0].set_ylabel("ms")
    for kind in ("text", "vector", "structured"):
        sized = [s for s in steps if s.get("indexBytes", {}).get(kind)]
        axes[1].plot([s["chunks"] for s in sized], [s["indexBytes"][kind] / 1e6 for s in sized], marker="o", label=kind)
    axes[1].set_title("index size vs corpus size")
    axes[1].set_ylabel("MB")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("chunks")
        ax.legend(fontsize=8)
    save(fig, "growth.png")

    memory = results["memory"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = [name for name, value in memory.items() if value]
    ax.barh(names[::-1], [memory[name] / 2**20 for name in names][::-1], color="#55a868")
    ax.set_xlabel("peak RSS (VmHWM), MiB")
    ax.set_title("Peak memory per process")
    save(fig, "memory.png")
    return written


