"""Where the machine's CPU and the wall time go during the end-to-end phase of BENCHMARKS.md §1
(issue #16): the same stack (one ``usl worker``, one ``usl sink`` process per kind, 2 L1 and 2
stream partitions, the workload of ``--seed``), and per process the CPU seconds it used from the
first append until every index covered the head: the broker, the worker (its main thread apart
from its other threads), each sink, this process (the appender, then the followers), and the
rest of the machine (``/proc/stat`` minus all of those: other jobs on a shared machine).

Also each thread's time runnable but waiting for a CPU (``/proc/PID/task/TID/schedstat``): on a
shared machine, how much of the phase a process was starved rather than busy or waiting for I/O.

Usage::

    .venv/bin/python -W ignore benchmarks/bench_e2e_split.py [--events 20000] [--profile OUT [--idle]] [--json]

Without ``KAFKA_BOOTSTRAP_SERVERS`` it starts (and stops) a broker of its own. ``--worker-path
DIR`` puts DIR first on the worker's PYTHONPATH; with ``--worker-path-b`` and ``--rounds N`` the
rounds alternate two trees (A, B, A, B ...), a fresh stack and topics each, on one broker. Run it
from outside a checkout: ``python -m deploy.cli`` puts the working directory before PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_pipeline import Profiler, cpu_split, self_time
from benchmarks.measure import KINDS, Coverage, Tail, append
from benchmarks.workload import WorkloadConfig, generate
from deploy.testing import Stack
from streams.settings import Settings
from streams.topics import Topics

__all__ = ["main"]


def machine_busy() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far (every core)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    total = sum(fields[:8])
    return (total - idle) / tick, total / tick


def threads(pid: int) -> dict[str, float]:
    """CPU seconds per thread of ``pid``: ``main`` (the process's first thread) and the others
    summed by their name (``comm``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = "main" if task.name == str(pid) else stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def schedstat(pid: int) -> dict[str, tuple[float, float]]:
    """Per thread of ``pid`` (``main`` and the others summed as ``other``): (seconds on a CPU,
    seconds runnable but waiting for a CPU), from ``/proc/PID/task/TID/schedstat``."""
    out: dict[str, tuple[float, float]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            run, wait, _ = (int(x) for x in (task / "schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        name = "main" if task.name == str(pid) else "other"
        before = out.get(name, (0.0, 0.0))
        out[name] = (before[0] + run / 1e9, before[1] + wait / 1e9)
    return out


def snapshot(pids: dict[str, int]) -> dict[str, Any]:
    sched = {}
    for name, pid in pids.items():
        try:
            sched[name] = schedstat(pid)
        except OSError:
            sched[name] = {}
    cpu = {}
    for name, pid in pids.items():
        try:
            cpu[name] = sum(cpu_split(pid))
        except OSError:
            cpu[name] = float("nan")
    worker_threads = threads(pids["worker"])
    busy, total = machine_busy()
    return {"cpu": cpu, "worker_threads": worker_threads, "busy": busy, "total": total, "at": time.monotonic(),
            "sched": sched}


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    cpu = {name: round(b["cpu"][name] - a["cpu"][name], 2) for name in a["cpu"]}
    names = set(a["worker_threads"]) | set(b["worker_threads"])
    wt = {name: round(b["worker_threads"].get(name, 0.0) - a["worker_threads"].get(name, 0.0), 2) for name in names}
    busy = b["busy"] - a["busy"]
    wall = b["at"] - a["at"]
    waits = {}
    for name in a["sched"]:
        for thread, (run, wait) in b["sched"][name].items():
            run0, wait0 = a["sched"][name].get(thread, (0.0, 0.0))
            waits[f"{name}/{thread}"] = (round(run - run0, 2), round(wait - wait0, 2))
    return {"wall": round(wall, 2), "runqueue_wait": waits, "machine_busy": round(busy, 2), "machine_capacity": round(b["total"] - a["total"], 2),
            "others": round(busy - sum(cpu.values()), 2), "cpu": cpu,
            "worker_threads": {k: v for k, v in sorted(wt.items(), key=lambda kv: -kv[1]) if v > 0}}


def read_trace(path: Path | None) -> dict[str, dict[str, float]]:
    try:
        return json.loads(path.read_text()) if path else {}
    except (OSError, ValueError):
        return {}


def one_round(settings: Settings, stack: Stack, coverage: Coverage, pids: dict[str, int], seed: int, events_n: int,
              profile: Path | None, trace: Path | None = None, idle: bool = False) -> dict[str, Any]:
    events = list(generate(events=events_n, seed=seed))
    trace_before = read_trace(trace)
    profiler = Profiler(pids["worker"], profile, idle=idle) if profile else None
    first = snapshot(pids)
    count, head = append(settings, events)
    appended = snapshot(pids)
    done = coverage.wait(("chunks", *KINDS), head, timeout=3600)
    worker_done = done["chunks"]
    last = snapshot(pids)
    time.sleep(0.2)
    trace_after = read_trace(trace)
    traced = {stage: {k: round(v - trace_before.get(stage, {}).get(k, 0.0), 3) for k, v in values.items()}
              for stage, values in trace_after.items()}
    if profiler is not None:
        profiler.stop()
    wall = last["at"] - first["at"]
    return {"events": count, "head": head, "end_to_end_events_per_second": round(count / wall, 1),
            "worker_only_events_per_second": round(count / (worker_done - first["at"]), 1),
            "per_index_seconds": {name: round(at - first["at"], 2) for name, at in done.items()},
            "trace": traced, "append": diff(first, appended), "after_append": diff(appended, last), "phase": diff(first, last)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", type=Path, help="py-spy the worker during the phase (raw stacks here)")
    parser.add_argument("--idle", action="store_true",
                        help="with --profile: idle samples too, per thread (where the wall time goes)")
    parser.add_argument("--worker-path", help="put this tree first on the worker's PYTHONPATH")
    parser.add_argument("--worker-path-b", help="a second tree: rounds alternate A, B, A, B ... (a fresh stack each)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--worker-env", action="append", default=[], help="NAME=VALUE for the worker (A and B)")
    parser.add_argument("--trace", action="store_true",
                        help="give the worker USL_TRACE_FILE and print the per-step sums an instrumented worker tree "
                             "writes there (a JSON object per agent), over the phase")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="usl-bench-split-"))
    from benchmarks.measure import bench_broker
    from deploy.kafka.broker import stop_broker

    bootstrap, broker_settings, broker_pid = bench_broker(work)
    trees = [args.worker_path, args.worker_path_b] if args.worker_path_b else [args.worker_path]
    results = []
    try:
        for number in range(args.rounds * len(trees)):
            tree = trees[number % len(trees)]
            label = "AB"[number % len(trees)]
            settings = Settings.from_env({}, home=work / f"r{number}", bootstrap_servers=bootstrap,
                                         topic_prefix=f"bench{uuid.uuid4().hex[:8]}.", l1_partitions=2,
                                         stream_partitions=2, embedder="wordllama")
            stack = Stack(settings)
            coverage = Coverage(settings.stream_partitions)
            tails = []
            try:
                env = dict(item.split("=", 1) for item in args.worker_env)
                trace = work / f"trace{number}.json" if args.trace else None
                if trace:
                    env["USL_TRACE_FILE"] = str(trace)
                if tree:
                    env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p)
                worker = stack.worker(env=env)
                for kind in KINDS:
                    stack.sinks(kind, name=f"sink-{kind}")
                topics = Topics.from_settings(settings)
                tails.append(Tail(bootstrap, topics.watermarks, coverage.on_watermark))
                tails.append(Tail(bootstrap, topics.chunks, coverage.on_chunk_record))
                warm = list(generate(sessions=2, config=WorkloadConfig(seed=args.seed + 1000, concurrent=2)))
                _, warm_head = append(settings, warm)
                coverage.wait(("chunks", *KINDS), warm_head, timeout=600)
                pids = {"worker": worker.pid, **{f"sink-{k}": stack.procs[f"sink-{k}"].pid for k in KINDS},
                        "bench (appender, followers)": os.getpid()}
                if broker_pid:
                    pids["broker"] = broker_pid
                profile = args.profile.with_suffix(f".{number}{label}.txt") if args.profile else None
                result = {"round": number, "tree": label, "path": tree or "(this tree)",
                          **one_round(settings, stack, coverage, pids, args.seed, args.events, profile, trace, args.idle)}
                results.append(result)
                print(json.dumps(result) if args.json else _describe(result, profile), flush=True)
            finally:
                for tail in tails:
                    tail.close()
                stack.close()
    finally:
        if broker_settings is not None:
            stop_broker(broker_settings)
    return 0


def _describe(result: dict[str, Any], profile: Path | None) -> str:
    lines = [f"round {result['round']} tree {result['tree']} ({result['path']}): {result['events']} events, "
             f"end to end {result['end_to_end_events_per_second']} events/s, worker only "
             f"{result['worker_only_events_per_second']} events/s; covered at {result['per_index_seconds']}"]
    for part in ("append", "after_append", "phase"):
        d = result[part]
        lines.append(f"  {part}: wall {d['wall']} s, machine busy {d['machine_busy']} of {d['machine_capacity']} CPU s, "
                     f"other jobs {d['others']}")
        lines.append("    " + ", ".join(f"{name} {value}" for name, value in sorted(d["cpu"].items(), key=lambda kv: -kv[1])))
        lines.append("    worker threads: " + ", ".join(f"{name} {value}" for name, value in d["worker_threads"].items()))
        lines.append("    (on CPU, waiting for a CPU) s: " + ", ".join(
            f"{name} {run}/{wait}" for name, (run, wait) in sorted(d["runqueue_wait"].items(), key=lambda kv: -kv[1][0])
            if run > 0.05))
    for stage, values in result.get("trace", {}).items():
        lines.append(f"  trace {stage}: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    if profile is not None and profile.exists():
        lines.append("  worker self time (py-spy):")
        lines.extend(f"    {100 * share:5.1f} %  {frame}" for frame, share in self_time(profile, top=30))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
