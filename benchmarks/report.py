"""BENCHMARKS.md from the figures of one benchmark run: every figure next to its reference
as a ratio, with the machine, the command and the plots."""

from __future__ import annotations

import math
from typing import Any

from sinks.kinds import ALL_KINDS as KINDS

__all__ = ["cache_section", "growth_section", "n", "project", "ratio", "report", "shard_section"]


def n(value: float | None, digits: int = 0) -> str:
    if value is None or value != value:
        return "–"
    return f"{value:,.{digits}f}".replace(",", " ")


def ratio(a: float | None, b: float | None, digits: int = 2) -> str:
    if not a or not b:
        return "–"
    return f"{a / b:.{digits}f}x"


def _section1_extra(results: dict[str, Any]) -> list[str]:
    """Worker MB per core, one vs two workers, and `usl ingest` vs kafka-python (older results
    without these figures give no lines)."""
    ingest, stages, lines = results["ingest"], results["stages"], [""]
    e2e = ingest["endToEndEventsPerSecond"]
    if ingest.get("workerCpuSeconds"):
        mb = stages["bytes"] / 1e6
        lines.append(f"Worker CPU over the end-to-end phase: {n(ingest['workerCpuSeconds'], 1)} s for {n(mb, 1)} MB of "
                     f"L1 records = **{n(mb / ingest['workerCpuSeconds'], 2)} MB/s per core** "
                     f"({n(1000 * ingest['workerCpuSeconds'] / ingest['events'], 2)} ms per event); for scale, "
                     "Quickwit quotes about 7.5 MB/s per core for indexing (not measured here).")
    two = ingest.get("twoWorkers")
    if two:
        lines += ["", f"With a second `usl worker` (after §4; {n(two['events'])} more events of another seed): end to end "
                      f"{n(two['endToEndEventsPerSecond'])} events/s = **{ratio(two['endToEndEventsPerSecond'], e2e)}** "
                      f"one worker's; worker only {n(two['workerOnlyEventsPerSecond'])} events/s = "
                      f"{ratio(two['workerOnlyEventsPerSecond'], ingest['perIndexEventsPerSecond']['chunks'])}."]
    append = results.get("append")
    if append:
        lines += ["", f"Appending: `usl ingest` of {n(append['ingest_events'])} of these events from a JSONL file "
                      f"({n(append['ingest_mb'], 1)} MB; the whole command, a fresh process) ran at "
                      f"{n(append['ingest_events_per_second'])} events/s; a plain kafka-python producer of the same "
                      f"records with the L1 producer's settings at {n(append['kafka_python_produce_events_per_second'])} "
                      f"events/s → **{ratio(append['ingest_events_per_second'], append['kafka_python_produce_events_per_second'])}**; "
                      f"without the command's fixed start ({n(append['ingest_start_seconds'], 1)} s: imports, topic "
                      f"checks; the time of a one-event ingest) {ratio(append['ingest_events_per_second_after_start'], append['kafka_python_produce_events_per_second'])}; "
                      f"per CPU second {n(append['ingest_events_per_cpu_second'])} against "
                      f"{n(append['kafka_python_events_per_cpu_second'])} events → {n(append['ingest_vs_kafka_python_cpu'], 2)}x."]
    return lines


def _freshness_summary(fresh: list[dict[str, Any]]) -> list[str]:
    """Per rate, the index with the highest p99 (the bottleneck), and where p99 crosses 1 s."""
    lines = ["", "| rate | slowest index (p99) | its p99 s | its p50 s |", "|---|---|---:|---:|"]
    crossed = None
    for row in fresh:
        slowest = max(KINDS, key=lambda kind: row["lag"][kind]["p99"])
        lag = row["lag"][slowest]
        lines.append(f"| {row['rate']} events/s | {slowest} | {n(lag['p99'], 2)} | {n(lag['p50'], 2)} |")
        if crossed is None and lag["p99"] >= 1.0:
            crossed = row["rate"]
    lines += ["", "Every index's p99 stayed under 1 s at every rate measured." if crossed is None else
              f"p99 of the slowest index first reaches 1 s at {crossed} events/s."]
    return lines


def shard_section(shards: dict[str, Any]) -> list[str]:
    """§10: text+vector chunks/s of one sink process against two shard processes."""
    lines = ["## 10. Sink shards: one sink vs two", "",
             f"The {n(shards['chunks'])} chunks of {n(shards['events'])} synthetic events "
             f"({shards['streamPartitions']} partitions of `usl.chunks`, chunked once by a `usl worker`) indexed into "
             "text and vector by one `usl sink --kind text,vector` process, then by two `--shard I/2` processes, each "
             "into a fresh home; time from starting the processes (imports and embedder included, as when a shard "
             "moves) until every current generation, each shard's, reaches the head. Ratio of the best run of each.",
             "", "| run | sinks | seconds | chunks/s | vs one sink (best runs) |", "|---:|---|---:|---:|---:|"]
    for row in shards["runs"]:
        label = "one sink" if row["shards"] == 1 else f"{row['shards']} shards"
        lines.append(f"| {row['run']} | {label} | {n(row['seconds'], 1)} | {n(row['chunksPerSecond'])} | |")
    lines.append(f"| best | 2 shards / one sink | | | **{ratio(shards['twoShardsChunksPerSecond'], shards['oneSinkChunksPerSecond'])}** |")
    return [*lines, ""]


def cache_section(cache: dict[str, Any]) -> list[str]:
    """§11: a planner replica over the object store, a cold segment cache against a warm one."""
    lines = ["## 11. Planner replica over the object store: cold vs warm segment cache", ""]
    if cache.get("error"):
        return [*lines, f"Not measured in this run: {cache['error']}.", ""]
    lines += [f"The §5 corpus at {n(cache['chunks'])} chunks, its {cache['generations']} generations (text, vector, "
              "structured) published to a local S3Proxy; a planner replica (`USL_PLANNER_SOURCE=object-store`) with "
              f"an empty home fetched {n(cache['fetchedBytes'] / 1e6, 1)} MB in {n(cache['fetchSeconds'], 1)} s "
              f"before its first answer, then answered {cache['queries']} `indexed` queries per mode twice: cold "
              "(a fresh cache directory, every query counted, the first ones opening the fetched segments) and warm "
              f"(same replica, same queries; {n(cache['fetchedBytesWarm'] / 1e6, 1)} MB fetched). ms.", "",
              "| mode | cold p50 / p99 | cold first query | warm p50 / p99 | cold / warm (p50) | cold / warm (p99) |",
              "|---|---:|---:|---:|---:|---:|"]
    for mode in ("text", "vector", "hybrid"):
        cold, warm = cache["cold"][mode], cache["warm"][mode]
        lines.append(f"| {mode} | {n(cold['p50'], 1)} / {n(cold['p99'], 1)} | {n(cold['first'], 1)} | "
                     f"{n(warm['p50'], 1)} / {n(warm['p99'], 1)} | {ratio(cold['p50'], warm['p50'])} | "
                     f"{ratio(cold['p99'], warm['p99'])} |")
    return [*lines, ""]


PROJECT_TO = 10_000_000
DAY = 86_400.0


def _power_law(points: list[tuple[float, float]]) -> tuple[float, float, float] | None:
    """(x, y, b) of the last point and the exponent of y ~ x^b through the last two points."""
    points = [(x, y) for x, y in points if x and y and y > 0]
    if len(points) < 2:
        return None
    (x1, y1), (x2, y2) = points[-2], points[-1]
    if x2 <= x1:
        return None
    return x2, y2, math.log(y2 / y1) / math.log(x2 / x1)


def project(steps: list[dict[str, Any]], machine: dict[str, Any], to: int = PROJECT_TO) -> dict[str, Any]:
    """Each measure of the growth table carried to ``to`` chunks along the power law through its
    last two measured steps, and, for those one node bounds, the corpus size where the bound is
    reached: index bytes against the disk, the planner's peak memory against RAM, the build
    (the writers' cumulative seconds, vector merges included) against a day."""
    def series(value: Any) -> list[tuple[float, float]]:
        out = []
        for step in steps:
            try:
                y = value(step)
            except (KeyError, TypeError):
                continue
            if y is not None:
                out.append((float(step["chunks"]), float(y)))
        return out

    measures: dict[str, tuple[Any, str, float | None, str]] = {}
    for kind in ("text", "vector", "structured"):
        measures[f"{kind} index bytes"] = (lambda s, k=kind: s["indexBytes"][k], "bytes", None, "")
    disk = machine.get("diskBytes")
    measures["all index bytes"] = (lambda s: sum(s["indexBytes"].values()), "bytes", disk, "the index disk")
    measures["planner peak memory"] = (lambda s: s.get("plannerPeakBytes"), "bytes", machine.get("memoryBytes"),
                                       "RAM")
    for kind in ("text", "vector", "structured"):
        measures[f"{kind} build seconds"] = (
            lambda s, k=kind: s["build"]["writeSeconds"][k] + (s["build"]["mergeSeconds"] if k == "vector" else 0),
            "seconds", None, "")
    measures["whole build seconds"] = (lambda s: s["build"]["totalSeconds"], "seconds", DAY, "a day")
    for mode in ("text", "vector", "hybrid"):
        measures[f"{mode} p50 ms (indexed)"] = (lambda s, md=mode: s["latency"][f"{md}/indexed"]["p50"], "ms", None, "")
    rows = []
    for name, (value, unit, limit, bound) in measures.items():
        fit = _power_law(series(value))
        if fit is None:
            continue
        x, y, b = fit
        row: dict[str, Any] = {"measure": name, "unit": unit, "chunks": x, "value": y, "exponent": b,
                               "projected": y * (to / x) ** b, "limit": limit, "bound": bound, "reachedAt": None}
        if limit and y >= limit:
            row["reachedAt"] = x
        elif limit and b > 0 and math.log(limit / y) / b <= math.log(1000 * to / x):
            # Compared in logs first: a nearly flat curve puts the bound past any float.
            row["reachedAt"] = x * (limit / y) ** (1 / b)  # flatter curves never get there (None)
        rows.append(row)
    bounded = [row for row in rows if row["reachedAt"]]
    first = min(bounded, key=lambda row: row["reachedAt"], default=None)
    return {"to": to, "rows": rows, "firstBound": first}


def _amount(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "bytes":
        return f"{n(value / 2**30, 2)} GiB" if value >= 2**30 else f"{n(value / 2**20, 1)} MiB"
    if unit == "seconds":
        return f"{n(value / 3600, 1)} h" if value >= 3600 else f"{n(value, 0)} s"
    return f"{n(value, 1)} ms"


def _sink_merge_lines(sink: dict[str, Any], build: dict[str, Any]) -> list[str]:
    """The live sink's vector watermark during a merge as large as the build's largest
    (``bench_query.merge_window``) against the same feed with no merge: the issue's goal."""
    base = sink["baseline"]
    verdict = "under" if sink["lagSeconds"] < 5 else "over"
    if sink.get("graphRows"):
        shape = (f"holds the corpus's largest segment ({n(sink['graphRows'])} chunks, its files linked) and "
                 f"{n(sink['inserted'])} more chunks as one segment: the shape of the build's longest merge, which "
                 "inserted rows into the large segment's graph (the largest merge of the build held "
                 f"{n(build.get('largestMergeVectors'))} vectors)")
    else:
        shape = (f"holds the first {n(sink['vectors'])} chunks of the corpus as the inputs of one merge whose graph "
                 f"is built from scratch (the largest of the build merged {n(build.get('largestMergeVectors'))} vectors)")
    return ["Vector watermark during the longest merge, at the live sink's commit size (issue 21: its lag stays under "
            f"5 s). After the build, a fresh vector index {shape}, a `BackgroundMerger` merges them while a `SinkRunner` is "
            f"fed {n(sink['rate'])} new chunks a second and commits as the live sink does (its own rule: "
            f"{n(sink['batchSize'])} chunks or {n(sink['batchSeconds'], 1)} s, group commit); the same feed without "
            f"a merge ({n(base['windowSeconds'], 0)} s) is the reference. The merge took {n(sink['mergeSeconds'], 1)} s; "
            f"the sink committed {n(sink['commitsDuring'])} batches from its start until it was published "
            f"({n(sink['windowSeconds'], 1)} s).", "",
            "| measure | during the merge | no merge |", "|---|---:|---:|",
            f"| longest an appended event waited for the vector watermark | **{n(sink['lagSeconds'], 2)}** s | "
            f"{n(base['lagSeconds'], 2)} s |",
            f"| longest the vector watermark stood still across the merge | {n(sink['stallSeconds'], 2)} s | "
            f"{n(base['stallSeconds'], 2)} s |",
            f"| gap between commits (median) | {n(sink['medianCommitGapSeconds'], 2)} s | "
            f"{n(base['medianCommitGapSeconds'], 2)} s |",
            f"| a flush (median / longest) | {n(sink['flushMedianSeconds'], 2)} / {n(sink['flushMaxSeconds'], 2)} s | "
            f"{n(base['flushMedianSeconds'], 2)} / {n(base['flushMaxSeconds'], 2)} s |",
            f"| events above the watermark (most) | {n(sink['lagSeqs'])} | {n(base['lagSeqs'])} |",
            f"| publishing the merge in the sink loop | {n(sink['publishMaxSeconds'], 2)} s | |", "",
            f"The lag is **{verdict}** the issue's 5 s.", ""]


def growth_section(steps: list[dict[str, Any]], projection: dict[str, Any]) -> list[str]:
    """The build of each step, the latency growth ratios, the merge-time vector lag and the
    10M projection (§9)."""
    lines: list[str] = []
    built = [step for step in steps if step.get("build")]
    if built:
        lines += ["Building the corpus (`bench_query.build_steps`, this process): seconds up to each step, cumulative. "
                  "The L1 append is the product's producer after `validate_event`; each kind's writer commits one "
                  f"generation per batch of {n(built[-1]['build']['batch'])} chunks; vector merges run in a `BackgroundMerger` thread and are "
                  "published as generations of their own, as in the sink loop (their seconds overlap the others'); "
                  "settle = waiting for the last merges before a step's queries.", "",
                  "| chunks | generate | validate + L1 append | text | vector (writes) | vector merges (background) "
                  "| structured | settle | whole build |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for step in built:
            b = step["build"]
            w = b["writeSeconds"]
            lines.append(f"| {n(step['chunks'])} | {n(b['generateSeconds'], 1)} | {n(b['appendSeconds'], 1)} | "
                         f"{n(w['text'], 1)} | {n(w['vector'], 1)} | {n(b['mergeSeconds'], 1)} ({b['merges']}) | "
                         f"{n(w['structured'], 1)} | {n(b['settleSeconds'], 1)} | **{n(b['totalSeconds'], 1)}** |")
        lines.append("")
    if len(steps) >= 2:
        low, high = steps[0], steps[-1]
        lines += [f"Growth ratios, {n(high['chunks'])} chunks against {n(low['chunks'])} "
                  f"({n(high['chunks'] / low['chunks'])}x the data); the issue's goal is p50 ≤ 2x and p99 ≤ 3x.", "",
                  "| mode | freshness | p50 | p99 |", "|---|---|---:|---:|"]
        for freshness in ("indexed", "latest"):
            for mode in ("text", "vector", "hybrid"):
                a, z = low["latency"][f"{mode}/{freshness}"], high["latency"][f"{mode}/{freshness}"]
                lines.append(f"| {mode} | {freshness} | {ratio(z['p50'], a['p50'])} | {ratio(z['p99'], a['p99'])} |")
        lines.append("")
    sink = built[-1]["build"].get("sinkMerge") if built else None
    lag = built[-1]["build"].get("largestMerge") if built else None
    if sink:
        lines += _sink_merge_lines(sink, built[-1]["build"])
    elif lag:
        lines += ["Vector watermark during the largest merge of the build that ran while batches were still being "
                  "committed (the issue: its lag stays under 5 s; merges finished while a step settles have no batch "
                  f"left to hold; the largest merge of all built {n(built[-1]['build'].get('largestMergeVectors'))} "
                  f"vectors). The merge built {n(lag['vectors'])} vectors in {n(lag['mergeSeconds'], 1)} s in the background; "
                  f"from its start until it was published ({n(lag['windowSeconds'], 1)} s) the vector sink committed "
                  f"{n(lag['commitsDuring'])} batches.", "",
                  "| measure | seconds |", "|---|---:|",
                  f"| longest the vector watermark stood still across the merge | **{n(lag['stallSeconds'], 1)}** |",
                  f"| gap between vector commits over the whole build (median; the batching, merge or not) | "
                  f"{n(lag['medianCommitGapSeconds'], 1)} |",
                  f"| longest an appended event waited for the vector watermark during the merge | "
                  f"{n(lag['lagSeconds'], 1)} ({n(lag['lagSeqs'])} events above it at most) |", "",
                  f"The bench commits a batch of {n(built[-1]['build']['batch'])} chunks per generation, so an event waits for the rest of its "
                  "batch whatever the merges do; what a merge would add is a stall longer than the commit gap.", ""]
    rows = projection.get("rows") or []
    if rows:
        to = projection["to"]
        lines += [f"Projection to {n(to)} chunks: each measure along the power law through its last two measured "
                  "steps (exponent b: the measure grows as chunks^b), and where one node's bound is reached.", "",
                  f"| measure | at {n(rows[0]['chunks'])} | b | at {n(to)} | bound | reached at (chunks) |",
                  "|---|---:|---:|---:|---|---:|"]
        for row in rows:
            reached = n(row["reachedAt"]) if row["reachedAt"] else (f"beyond {n(1000 * to)}" if row["limit"] else "")
            bound = f"{_amount(row['limit'], row['unit'])} ({row['bound']})" if row["limit"] else ""
            lines.append(f"| {row['measure']} | {_amount(row['value'], row['unit'])} | {row['exponent']:.2f} | "
                         f"{_amount(row['projected'], row['unit'])} | {bound} | {reached} |")
        first = projection.get("firstBound")
        lines += ["", (f"One node stops being enough at about **{n(first['reachedAt'])} chunks**: "
                       f"{first['measure']} reaches {first['bound']} ({_amount(first['limit'], first['unit'])}) first."
                       if first else "No bound of one node is reached on these curves."), ""]
    return lines


def report(results: dict[str, Any], command: str, plot_prefix: str) -> str:
    m, ingest, stages, raw = results["machine"], results["ingest"], results["stages"], results["rawRead"]
    sinks, rebuild, queries = results["sinks"], results["rebuild"], results["queries"]
    e2e = ingest["endToEndEventsPerSecond"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `benchmarks/harness.py` (SPEC §11). Every figure was measured in this one run, next to its",
        "reference, and the ratio is what to compare across runs and machines: the absolute numbers depend on",
        "the machine and on its load (recorded below). No figure is a pass/fail threshold.",
        "",
        "```",
        command,
        "```",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| date | {m['date']} (run took {n(results['seconds'] / 60, 1)} min) |",
        f"| CPU | {m['cpu']}, {m['cores']} cores |",
        f"| memory | {n(m['memoryBytes'] / 2**30, 1)} GiB |",
        f"| load average (1/5/15 min) | start {' / '.join(f'{x:.2f}' for x in m['loadStart'])}; "
        f"end {' / '.join(f'{x:.2f}' for x in m['loadEnd'])} |",
        f"| Python | {m['python']} ({m['platform']}) |",
        f"| Kafka | {m['kafka']} (single local broker, {m['bootstrap']}) |",
        f"| scale | `{results['scale']}`: workload of {n(ingest['events'])} events, seed {results['seed']}; "
        f"embedder `{queries['embedder']}`, text engine `{queries['textEngine']}` |",
        "",
        "The machine is shared: other jobs ran during the run, so absolute rates are noisy; the ratios are",
        "measured under the same load as their reference.",
        "",
        "## 1. End-to-end indexing vs raw L1 read",
        "",
        f"{n(ingest['events'])} workload events ({n(stages['bytes'] / 1e6, 1)} MB of canonical JSON) appended at "
        f"{n(ingest['appendEventsPerSecond'])} events/s to one log "
        f"({results['settings']['l1Partitions']} L1 partitions, {results['settings']['streamPartitions']} stream "
        f"partitions); one `usl worker` and {ingest['sinkProcesses']}, default settings "
        f"(batch {results['settings']['sinkBatchSize']} chunks / {results['settings']['sinkBatchSeconds']} s). "
        "Rate = events / time from the first append until the index's watermark covers the last seq.",
        "",
        "| measure | events/s | vs raw L1 read |",
        "|---|---:|---:|",
        f"| raw L1 read (kafka-python, read_committed, best of 2) | {n(raw['eventsPerSecond'])} | 1.00x |",
        f"| **end to end (every index at the head)** | **{n(e2e)}** | **{ratio(e2e, raw['eventsPerSecond'], 3)}** |",
        f"| worker only (progress markers at the head) | {n(ingest['perIndexEventsPerSecond']['chunks'])} | "
        f"{ratio(ingest['perIndexEventsPerSecond']['chunks'], raw['eventsPerSecond'], 3)} |",
    ]
    for kind in KINDS:
        rate = ingest["perIndexEventsPerSecond"][kind]
        lines.append(f"| {kind} index at the head | {n(rate)} | {ratio(rate, raw['eventsPerSecond'], 3)} |")
    lines += _section1_extra(results)
    lines += [
        "",
        f"![throughput]({plot_prefix}throughput.png)",
        "",
        "## 2. Redaction and chunking per core",
        "",
        f"Same {n(stages['events'])} events, in this process (one thread), CPU seconds; references: the raw L1 "
        "read of §1 in MB/s and events/s.",
        "",
        "| stage | per core | reference | ratio |",
        "|---|---:|---:|---:|",
        f"| redaction (`redact_event`) | {n(stages['redactionMbPerCoreSecond'], 1)} MB/s "
        f"({n(stages['redactionEventsPerCoreSecond'])} events/s) | raw read {n(raw['mbPerSecond'], 1)} MB/s | "
        f"{ratio(stages['redactionMbPerCoreSecond'], raw['mbPerSecond'])} |",
        f"| chunking (`chunk_stream`, real tokenizer) | {n(stages['chunkingEventsPerCoreSecond'])} events/s "
        f"({n(stages['chunkingChunksPerCoreSecond'])} chunks/s) | raw read {n(raw['eventsPerSecond'])} events/s | "
        f"{ratio(stages['chunkingEventsPerCoreSecond'], raw['eventsPerSecond'])} |",
        "",
        "## 3. Sinks",
        "",
        f"The {n(sinks['chunks'])} chunks and {n(sinks['toolResults'])} tool results of {n(sinks['events'])} workload "
        "events of the same seed (real redaction and chunker), each sink's writer driven as `SinkRunner` does it: batches of "
        f"{results['settings']['sinkBatchSize']} records, one generation each (begin → write → commit → gc). "
        "Reference: the chunker's rate of §2 (chunks/s per core) — what one core feeds the sinks.",
        "",
        "| sink | records | chunks/s | vs chunker | index MB | notes |",
        "|---|---:|---:|---:|---:|---|",
    ]
    feed = stages["chunkingChunksPerCoreSecond"]
    for name, row in sinks["sinks"].items():
        notes = []
        if "embeddingsPerSecond" in row:
            notes.append(f"embeddings alone {n(row['embeddingsPerSecond'])}/s ({row['embedder']}); whole cycle / "
                         f"embedding = {ratio(row['chunksPerSecond'], row['embeddingsPerSecond'])}")
        if "parquetRowsPerSecond" in row:
            notes.append(f"{n(row['parquetRowsPerSecond'])} Parquet rows/s")
        label = {"text": "text (tantivy)", "whoosh": "text (whoosh), first chunks",
                 "tantivy-subset": "text (tantivy), same chunks as whoosh"}.get(name, name)
        lines.append(f"| {label} | {n(row['records'])} | {n(row['chunksPerSecond'])} | {ratio(row['chunksPerSecond'], feed)} | "
                     f"{n(row['indexBytes'] / 1e6, 1)} | {'; '.join(notes)} |")
    if "whoosh" in sinks["sinks"]:
        same = sinks["sinks"].get("tantivy-subset", sinks["sinks"]["text"])
        lines += ["", f"**tantivy / whoosh on the same {n(sinks['sinks']['whoosh']['records'])} chunks: "
                      f"{ratio(same['chunksPerSecond'], sinks['sinks']['whoosh']['chunksPerSecond'], 1)}**"]
    lines += [
        "",
        "## 4. Freshness: append → searchable",
        "",
        f"With the processes of §1 running, workload events (4 sessions open at a time) appended at a steady rate "
        f"for {n(results['freshnessSeconds'])} s each. Per event and per index: time from its append until a "
        "watermark of that index covers its seq. Reference: the same lag of the worker's progress markers "
        "(`chunks`, before any sink). An event of an open turn is searchable only once its turn closes "
        "(SPEC §5), so both include the wall-clock length of turns at that rate.",
        "",
        "| rate (achieved) | index | p50 s | p99 s | p50 vs chunks |",
        "|---|---|---:|---:|---:|",
    ]
    saturated = [row["rate"] for row in ingest["freshness"] if row["rate"] > e2e]
    if saturated:
        lines[-3:-3] = ["", f"Rates above the end-to-end capacity measured in §1 ({n(e2e)} events/s in this run) — "
                            f"{', '.join(str(r) for r in saturated)} events/s, marked † — cannot be sustained: "
                            "their lag is mostly the backlog growing during the phase, not steady-state freshness."]
    for row in ingest["freshness"]:
        ref = row["lag"]["chunks"]
        mark = " †" if row["rate"] > e2e else ""
        lines.append(f"| {row['rate']}{mark} ({n(row['achievedRate'], 1)}) events/s | chunks (worker) | {n(ref['p50'], 2)} | "
                     f"{n(ref['p99'], 2)} | 1.00x |")
        for kind in KINDS:
            lag = row["lag"][kind]
            lines.append(f"| | {kind} | {n(lag['p50'], 2)} | {n(lag['p99'], 2)} | {ratio(lag['p50'], ref['p50'])} |")
    lines += _freshness_summary(ingest["freshness"])
    lines += ["", f"![freshness]({plot_prefix}freshness.png)", "",
              "## 5. Query latency", "",
              f"Corpus of `bench_query.py` (one chunk per turn of a user ask and an assistant reply, 50 turns per "
              f"session, 80 % of sessions tenant-wide, 10 % group, 10 % another user) written with the sinks' "
              f"writers; {results['tailEvents']} L1 events above the indexes, which `latest` scans (cached after "
              f"the first query, as between two commits). {results['queriesPerRow']} random 1–3 word queries, each run "
              "through all six combinations in a rotating order (so load changes hit every row alike), through "
              "`Planner` (in this process) as a principal who may read 90 % of the sessions. ms.", "",
              "| chunks | mode | indexed p50 / p99 | latest p50 / p99 | latest / indexed (p50) | vs text (indexed p50) |",
              "|---:|---|---:|---:|---:|---:|"]
    steps = queries["steps"] + ([results["large"]] if results.get("large") else [])
    for step in steps:
        lat = step["latency"]
        for mode in ("text", "vector", "hybrid"):
            i, lt = lat[f"{mode}/indexed"], lat[f"{mode}/latest"]
            lines.append(f"| {n(step['chunks'])}{' (large run)' if step.get('source') else ''} | {mode} | "
                         f"{n(i['p50'], 1)} / {n(i['p99'], 1)} | {n(lt['p50'], 1)} / {n(lt['p99'], 1)} | "
                         f"{ratio(lt['p50'], i['p50'])} | {ratio(i['p50'], lat['text/indexed']['p50'])} |")
    if results.get("large"):
        lines += ["", f"The large row comes from a separate run (`{results['large']['source']}`), not this one."]
    lines += ["", f"![query latency]({plot_prefix}query_latency.png)", "",
              "## 6. Vector recall@10 against exact search", "",
              "The vector sink's own segments (flat below `USL_VECTOR_EXACT_MAX`, HNSW above, merged as the sink "
              f"merges them), {results['recallQueries']} queries; exact = inner product over every stored vector.",
              "Both searches run one query at a time, alternately; exact is numpy over the segments' vectors.",
              "", "| chunks | segments | recall@10 | index p50 ms | exact p50 ms | exact / index (p50) |",
              "|---:|---:|---:|---:|---:|---:|"]
    for step in queries["steps"]:
        r = step["recall"]
        lines.append(f"| {n(step['chunks'])} | {r['segments']} | {r['recallAt10']:.3f} | {n(r['indexP50Ms'], 2)} | "
                     f"{n(r['exactP50Ms'], 2)} | {ratio(r['exactP50Ms'], r['indexP50Ms'], 1)} |")
    lines += ["", "## 7. Rebuild from offset 0", "",
              f"`sinks.rebuild.rebuild(text)` over the whole log of this run ({n(rebuild['events'])} events: read L1, "
              "redact, chunk, index, verify, switch), after the processes stopped; references: the live text rate "
              "of §1 and the raw L1 read.", "",
              "| measure | events/s | ratio |", "|---|---:|---:|",
              f"| rebuild text | {n(rebuild['eventsPerSecond'])} ({n(rebuild['chunksPerSecond'])} chunks/s) | "
              f"{'failed: ' + rebuild['error'] if rebuild.get('error') else ''} |",
              f"| live text indexing (§1) | {n(ingest['perIndexEventsPerSecond']['text'])} | rebuild / live = "
              f"**{ratio(rebuild['eventsPerSecond'], ingest['perIndexEventsPerSecond']['text'])}** |",
              f"| raw L1 read (§1) | {n(raw['eventsPerSecond'])} | rebuild / raw = "
              f"{ratio(rebuild['eventsPerSecond'], raw['eventsPerSecond'], 3)} |",
              "", "## 8. Peak memory per process", "",
              "VmHWM from `/proc/PID/status` at the end of §4 (worker, sinks), of a planner process that answered "
              "every query kind on the largest corpus of §5, of the broker JVM, and `getrusage` of this harness "
              "process (which held the in-process measurements). Reference: the machine's memory.", "",
              "| process | peak MiB | share of RAM |", "|---|---:|---:|"]
    for name, value in results["memory"].items():
        share = f"{value / m['memoryBytes'] * 100:.1f} %" if value and m["memoryBytes"] else "–"
        lines.append(f"| {name} | {n(value / 2**20) if value else '–'} | {share} |")
    lines += ["", f"![memory]({plot_prefix}memory.png)", "",
              "## 9. Growth with corpus size", "",
              "| chunks | text MB | vector MB | structured MB | bytes/chunk (all) | text p50 | vector p50 | hybrid p50 | "
              "hybrid p50 vs smallest |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    first = steps[0]["latency"]["hybrid/indexed"]["p50"] if steps else None
    for step in steps:
        sizes, lat = step.get("indexBytes", {}), step["latency"]
        total = sum(sizes.values()) if sizes else None
        lines.append(f"| {n(step['chunks'])}{' (large run)' if step.get('source') else ''} | "
                     f"{n(sizes.get('text', 0) / 1e6, 1) if sizes else '–'} | "
                     f"{n(sizes.get('vector', 0) / 1e6, 1) if sizes else '–'} | "
                     f"{n(sizes.get('structured', 0) / 1e6, 1) if sizes else '–'} | "
                     f"{n(total / step['chunks']) if total else '–'} | {n(lat['text/indexed']['p50'], 1)} | "
                     f"{n(lat['vector/indexed']['p50'], 1)} | {n(lat['hybrid/indexed']['p50'], 1)} | "
                     f"{ratio(lat['hybrid/indexed']['p50'], first)} |")
    lines += ["", f"![growth]({plot_prefix}growth.png)", ""]
    lines += growth_section(queries["steps"], results.get("projection") or project(queries["steps"], m))
    if results.get("shards"):
        lines += shard_section(results["shards"])
    if results.get("segmentCache"):
        lines += cache_section(results["segmentCache"])
    lines += ["Details of each area and the older per-script figures: [docs/benchmarks.md](docs/benchmarks.md).", ""]
    return "\n".join(lines)

