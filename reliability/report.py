"""``RELIABILITY.md``: the counts of one suite run, per fault kind, with the machine and command."""

from __future__ import annotations

import os
import platform
import statistics
from datetime import UTC, datetime

from reliability.suite import FAULT_KINDS, FaultResult, SuiteResult

__all__ = ["machine", "render"]

EXERCISES = {
    "kill-worker": "SIGKILL of `usl worker` (its whole process group) at a random point, start-up "
                   "and rebalance included; the supervisor restarts it and the transactional "
                   "stream side resumes from committed offsets.",
    "kill-sink": "SIGKILL of one `usl sink --kind K` process (the kinds take turns): a kill may land "
                 "inside a write, between the rename and the CURRENT switch, or inside GC; the "
                 "restarted sink resumes from the offsets in its current manifest.",
    "kill-api": "SIGKILL of `usl serve` while the querier searches; pins left behind expire, the "
                "supervisor restarts the API.",
    "broker-restart": "the broker stopped and started again on the same ports and data; the "
                      "producer's idempotent retries, the consumers' reconnects and the "
                      "supervisor's restarts carry every process over.",
    "disk-full": "the sink's index filesystem full (ENOSPC from a filled tmpfs, or EFBIG from "
                 "RLIMIT_FSIZE where mounting is refused): the commit fails, its staging dir is "
                 "discarded, nothing is published, the sink retries with back-off and catches up "
                 "once space is back; its `/metrics` counts the failure "
                 "(`usl_sink_failures_total{reason=\"write_error\"}`).",
    "corrupt-segment": "one byte flipped in a committed segment file of the current generation: "
                       "the planner refuses every generation holding that file (SHA-256 mismatch) "
                       "and falls back to an older one that verifies, or discloses the index as "
                       "unavailable; the sink refuses to build on it, exits, and on restart "
                       "rebuilds the log from L1 into a new line, counted by its "
                       "`usl_sink_failures_total{reason=\"verification\"}`.",
    "corrupt-manifest": "one byte flipped in the current generation's manifest.json: its "
                        "manifestSha256 (or its JSON) no longer checks out; same refusal, "
                        "fallback and rebuild as for a segment.",
    "slow-sink": "a sink stopped with SIGSTOP for seconds while events arrive: `/v1/status` shows "
                 "its lag growing, a `latest` query still finds a probe appended meanwhile through "
                 "the disclosed tail scan; after SIGCONT it catches up.",
    "foreign-tenant": "abuse: tenant `intruder` writes to tenant `acme`'s session (a `session.acl` "
                      "takeover, an injected message, a new session reusing one of its eventIds) and "
                      "an `x.heartbeat` without `acl` arrives for it: three dead letters with their "
                      "reasons, alice still finds her session, nobody else does, nobody finds the "
                      "injected text (`reliability/abuse.py`).",
    "far-future-time": "abuse: a session whose open turn is dated 2099 while the log's time is "
                       "2026: every index still reaches the log head, the turn is cut and indexed, "
                       "and `/v1/status` no longer names it in `heldBy`.",
    "kill-shard": "SIGKILL of one sink shard process (`usl sink --kind ... --shard I/2`; the shardable "
                  "kinds and the shards take turns) at random points of the ingest, start-up "
                  "included: the supervisor restarts it and it resumes from its shards' manifests "
                  "while the other shard goes on; each kind holds every record exactly once across "
                  "its shards, the minimum over the shards that readers see never goes down, and "
                  "every shard generation an answer read verifies.",
    "store-unavailable": "the object store (the suite's S3Proxy) stopped for seconds under the "
                         "steady ingest, then started again on the same address: the sinks keep "
                         "committing locally and the indexes keep up with L1 meanwhile, each failed "
                         "publish is counted (`usl_objectstore_publish_failures_total`) and retried "
                         "with back-off, and the backlog drains once the store answers.",
    "partial-upload": "SIGKILL of a sink in the middle of a publish (its new remote manifest "
                      "uploaded, its commit record not yet written): that generation is never "
                      "live, and the restarted sink publishes its current generation again.",
}


def machine() -> str:
    cpus = os.cpu_count() or 0
    try:
        with open("/proc/meminfo") as meminfo:
            kb = int(meminfo.readline().split()[1])
        memory = f"{kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        memory = "RAM unknown"
    return (f"{platform.system()} {platform.release()} {platform.machine()}, {cpus} CPU cores, {memory}, "
            f"Python {platform.python_version()}")


def _seconds(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{statistics.median(values):.1f} / {max(values):.1f}"


def _phase_lines(result: SuiteResult) -> list[str]:
    """One line per stack of a run with more than one (or with sink shards): its layout and its faults."""
    stacks = result.meta.get("phases") or []
    if len(stacks) < 2 and not any(phase.get("sink_shards", 1) > 1 for phase in stacks):
        return []
    lines = ["", "Each stack of the run was started with its own broker, after the previous one was stopped:"
             if len(stacks) > 1 else "The run's stack:"]
    for phase in stacks:
        layout = ("one `usl sink --kind K` per index kind" if phase.get("sink_shards", 1) == 1 else
                  f"{phase['sink_shards']} sink shard processes, shard I of every index kind in process I, "
                  f"as `usl up` runs them with `USL_SINK_SHARDS={phase['sink_shards']}`")
        store = ", publishing to the suite's own S3Proxy" if phase.get("object_store") else ""
        took = f", {phase['seconds'] / 60:.1f} min" if phase.get("seconds") else ""
        lines.append(f"- {phase['name']}: {layout}{store}{took}: "
                     + ", ".join(f"`{kind}`" for kind in phase.get("faults") or ()))
    return lines


def render(result: SuiteResult, command: str) -> str:
    totals = result.totals()
    final = result.final
    lines = [
        "# Reliability",
        "",
        "Figures from one run of the fault suite (`reliability/`) against the real local stack on",
        "this machine: its own single-node Kafka broker, `usl worker`, one `usl sink --kind K` per",
        "index kind (or the sink shards named below) and `usl serve`, all under the `usl up` supervisor, "
        "with a steady ingest of",
        "generated sessions and a querier searching throughout. What happens on each fault and what",
        "an operator sees: [docs/operations.md](docs/operations.md#fault-suite).",
        *_phase_lines(result),
        "",
        f"- Command: `{command}`",
        f"- Machine: {machine()}",
        f"- Run: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}, {result.meta['seconds'] / 60:.1f} min, "
        f"seed {result.meta['seed']}, {result.meta['rounds']} round(s) per fault kind, "
        f"{result.meta['kills_per_round']} kill(s) per kill round, disk faults via "
        f"{result.meta.get('disk_mode', '?')}"
        + (f" -- **partial: stopped after {result.meta['partial']}; the end-of-run checks "
           f"(final exactly-once, chunk determinism) did not run**" if result.meta.get("partial") else ""),
        f"- Workload: {final.get('events', 0)} events appended (L1 head {final.get('l1_head', 0)}), "
        f"{final.get('chunks', 0)} chunks, {final.get('watermarks', 0)} watermarks followed, "
        f"{final.get('answered', 0)}/{final.get('queries', 0)} queries answered (the rest hit a "
        f"killed API or a stopped broker)",
        "",
        f"**Faults injected: {totals['injected']}, survived: {totals['survived']}, events lost: "
        f"{totals['lost']}, duplicated: {totals['duplicated']}, watermark regressions: "
        f"{totals['regressions']}, bad answers: {totals['bad_answers']}.**",
        "",
        "| fault | rounds | injected | survived | lost | duplicated | regressions | bad answers "
        "| recovery p50 / max (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in FAULT_KINDS:
        rows: list[FaultResult] = [f for f in result.faults if f.kind == kind]
        if not rows:
            continue
        recoveries = [f.recovery_seconds for f in rows if f.recovery_seconds is not None]
        lines.append(
            f"| `{kind}` | {len(rows)} | {sum(f.injected for f in rows)} "
            f"| {sum(f.injected for f in rows if f.survived)} | {sum(f.lost for f in rows)} "
            f"| {sum(f.duplicated for f in rows)} | {sum(f.regressions for f in rows)} "
            f"| {sum(f.bad_answers for f in rows)} | {_seconds(recoveries)} |")
    lines += [
        "",
        "Recovery: from the end of the fault (last kill, broker back, disk freed, damaged file "
        "written, SIGCONT) until every index's watermark reached the L1 head read at that moment,",
        "while the ingest kept appending.",
        "",
        "## What is checked after every fault",
        "",
        "The ingest pauses (between whole sessions) once the indexes caught up; then:",
        "",
        "- **lost / duplicated**: every appended event is in L1 exactly once; every index (text, "
        "vector, structured, analytics, tool results) holds each chunk/record the derived topics "
        "carry exactly once, nothing missing and nothing extra;",
        "- **regressions**: the watermark topic is followed live from its beginning; within a "
        "generation line neither the generation id nor builtThroughSeq ever goes down;",
        "- **bad answers**: every answer of the querier (freshness `indexed` and `latest`) has no "
        "evidence past asOfSeq, names only committed generations (id <= CURRENT), each of which "
        "still verifies (every file's size and SHA-256), and never a generation after a file of "
        "it was damaged;",
        "- at the end, the chunks the pipeline emitted equal, byte for byte, those an "
        "uninterrupted in-process replay of the same L1 derives, and every chunk id an `indexed` "
        "answer returned is among them.",
    ]
    if result.meta.get("object_store"):
        lines.append(
            "- **object store** (every sink publishes to the suite's own S3Proxy): every index "
            "kind's (every shard's) live generation on the commit topic is the sink's local current "
            "one (line, generation id, builtThroughSeq, every file's path, SHA-256 and size), each "
            "blob downloads whole, and no publish a kill cut short is ever named by a commit record.")
    if any(phase.get("sink_shards", 1) > 1 for phase in result.meta.get("phases") or ()):
        lines.append(
            "- **sink shards**: a sharded kind is checked as the union of its shards' current "
            "generations (a record two shards hold is a duplicate), the watermark readers see (the "
            "minimum over the shards) never goes down besides each shard's own, and every shard "
            "generation an answer read verifies.")
    lines += [
        "",
        "## What each fault exercises",
        "",
    ]
    lines += [f"- `{kind}`: {EXERCISES[kind]}" for kind in FAULT_KINDS
              if any(f.kind == kind for f in result.faults)]
    lines += ["", "## Rounds", "", "| # | fault | target | injected | survived | recovery (s) | notes |",
              "|---:|---|---|---:|---|---:|---|"]
    for n, fault in enumerate(result.faults, start=1):
        notes = "; ".join(fault.notes).replace("|", "/")
        recovery = "–" if fault.recovery_seconds is None else f"{fault.recovery_seconds:.1f}"
        lines.append(f"| {n} | `{fault.kind}` | {fault.target} | {fault.injected} "
                     f"| {'yes' if fault.survived else '**no**'} | {recovery} | {notes} |")
    if final.get("problems"):
        lines += ["", "## Problems at the end", ""] + [f"- {p}" for p in final["problems"]]
    if final.get("ingest_errors"):
        lines += ["", "Ingest retries (reconciled against L1, never appended twice): "
                  f"{len(final['ingest_errors'])}."]
    lines += ["", "The fast part (one round of each fault kind on a tiny workload) runs in "
              "`make test` as `tests/reliability/test_faults.py`; this run is `make faults`.", ""]
    return "\n".join(lines)
