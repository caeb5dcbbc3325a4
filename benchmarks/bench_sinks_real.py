"""The sinks on real sessions: CPU per process and per sink thread of a `usl up` stack, and the
sink loop replayed offline (docs/benchmarks.md, "Real-size events", step 10).

``stack``: a fresh USL_HOME, ``usl up --detach`` of TREE (PYTHONPATH), ``usl ingest`` of the
transcript directories, then a wait until every index's manifest holds the log's last seq (read
from the files, not ``usl status``: a status is a GET through the API, whose idle CPU is
measured too). Prints the CPU seconds of the worker, the sinks process (each sink thread by its
name; the consumers' network threads as ``kafka-io``) and the API, and the generation counts.
The stack is left up for searches; stop it with ``usl down``.

``dump``: the derived topics of a stack (chunks, redacted, toolresults) into one file.

``search``: fixed searches (text, vector, hybrid, tool results, a tool filter) against the
stack, each answer's hits hashed without what changes with the generation (``asOfSeq``, the
freshness block): two trees' indexes of the same log must give the same hashes.

``replay``: those records through the real :class:`sinks.runner.SinkRunner` of one kind (no
broker: a stand-in consumer and publisher), a flush every 1/GENS of the records, so both trees
commit the same batches; prints CPU seconds (optionally a cProfile with a CPU timer).

    python benchmarks/bench_sinks_real.py stack --tree /tmp/old --home /tmp/h --port 8793 DIR...
    python benchmarks/bench_sinks_real.py search --tree TREE --home /tmp/h --port 8793
    python benchmarks/bench_sinks_real.py dump --home /tmp/h --out /tmp/topics.pkl
    PYTHONPATH=TREE python benchmarks/bench_sinks_real.py replay structured --dump /tmp/topics.pkl
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pickle
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

KINDS = ("text", "vector", "structured", "analytics", "toolresults")
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _stack_processes(home: str) -> dict[str, int]:
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if f"USL_HOME={home}".encode() not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            cmd = [c.decode() for c in (proc / "cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        if "deploy.cli" in cmd and cmd[cmd.index("deploy.cli") + 1] in ("worker", "sink", "serve"):
            found[cmd[cmd.index("deploy.cli") + 1]] = int(proc.name)
    return found


def _thread_names(pid: int) -> dict[int, str]:
    spy = Path(sys.executable).with_name("py-spy")
    out = subprocess.run([str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True).stdout
    return {int(m.group(1)): m.group(2) for m in re.finditer(r'^Thread (\d+) \(\w+\): "([^"]*)"', out, re.M)}


def _group(name: str) -> str:
    if "kafka-io" in name:
        return "kafka-io"
    return next((kind for kind in ("toolresults", "structured", "analytics", "vector", "text") if kind in name),
                "other")


def _threads(pid: int) -> dict[int, float]:
    cpu = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu[int(task.name)] = _cpu(task / "stat")
        except OSError:
            pass
    return cpu


def _built_through(home: str) -> dict[str, int]:
    seqs = {}
    for kind in KINDS:
        line = Path(home, "indexes", "default", kind, "live")
        try:
            generation = int((line / "CURRENT").read_text())
            seqs[kind] = json.loads((line / f"gen-{generation:08d}" / "manifest.json").read_bytes())["builtThroughSeq"]
        except (OSError, ValueError):
            seqs[kind] = 0
    return seqs


def stack(args: argparse.Namespace) -> dict[str, Any]:
    usl = str(Path(sys.executable).with_name("usl"))
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    env.update(USL_HOME=args.home, USL_API_PORT=str(args.port), PYTHONPATH=args.tree)

    def usl_run(*words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([usl, *words], env=env, cwd="/tmp", capture_output=True, text=True)

    usl_run("down")
    shutil.rmtree(args.home, ignore_errors=True)
    started = usl_run("up", "--detach")
    if started.returncode:
        raise SystemExit(started.stderr)
    time.sleep(3)
    pids = _stack_processes(args.home)
    names = _thread_names(pids["sink"])
    before = {role: _cpu(Path(f"/proc/{pid}/stat")) for role, pid in pids.items()}
    threads_before = _threads(pids["sink"])
    began = time.monotonic()
    ingest = usl_run("ingest", *args.paths, "--json")
    if ingest.returncode:
        raise SystemExit(ingest.stderr)
    head = int(json.loads(ingest.stdout)["l1CommittedSeq"]) if args.seq is None else args.seq
    while not all(seq >= head for seq in _built_through(args.home).values()):
        time.sleep(0.5)
    wall = time.monotonic() - began
    after = {role: _cpu(Path(f"/proc/{pid}/stat")) for role, pid in pids.items()}
    names.update(_thread_names(pids["sink"]))
    groups: dict[str, float] = defaultdict(float)
    for tid, cpu in _threads(pids["sink"]).items():
        groups[_group(names.get(tid, ""))] += cpu - threads_before.get(tid, 0.0)
    groups["exited threads"] = after["sink"] - before["sink"] - sum(groups.values())
    return {"tree": args.tree, "events": head, "wall": round(wall, 1), "eventsPerSec": round(head / wall, 1),
            "cpu": {role: round(after[role] - before[role], 2) for role in before},
            "sinkThreads": {k: round(v, 2) for k, v in sorted(groups.items())},
            "generations": {kind: int(Path(args.home, "indexes", "default", kind, "live", "CURRENT").read_text())
                            for kind in KINDS}}


SEARCHES = (
    ("fix the failing test", "--mode", "hybrid"),
    ("mix compile error", "--mode", "text"),
    ("phoenix liveview socket", "--mode", "vector"),
    ("cancel reservation flight", "--mode", "hybrid"),
    ("git commit message", "--mode", "text", "--tool-results", "--as", "tenant:default/user:qa/scopes:toolresults"),
    ("permission denied", "--mode", "hybrid", "--tool-results", "--as", "tenant:default/user:qa/scopes:toolresults"),
    ("database migration ecto", "--mode", "hybrid", "--tool", "Bash"),
    ("refund the order", "--mode", "text"),
)


def search(args: argparse.Namespace) -> dict[str, Any]:
    import hashlib

    usl = str(Path(sys.executable).with_name("usl"))
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    env.update(USL_HOME=args.home, USL_API_PORT=str(args.port), PYTHONPATH=args.tree)
    hashes = {}
    for query, *options in SEARCHES:
        out = subprocess.run([usl, "search", query, *options, "--json", "-k", "20", "--freshness", "indexed"],
                             env=env, cwd="/tmp", capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"{query!r}: {out.stderr}")
        hits = json.loads(out.stdout)["results"]
        hashes[query] = [len(hits), hashlib.sha256(json.dumps(hits, sort_keys=True).encode()).hexdigest()[:16]]
    return hashes


def dump(args: argparse.Namespace) -> dict[str, Any]:
    from kafka import KafkaConsumer, TopicPartition

    import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)

    bootstrap = json.loads(Path(args.home, "kafka", "broker.json").read_text())["bootstrap"]
    topics: dict[str, list[tuple[int, int, bytes]]] = {}
    for name in ("chunks", "redacted", "toolresults"):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                 isolation_level="read_committed")
        parts = [TopicPartition(f"usl.{name}", p) for p in sorted(consumer.partitions_for_topic(f"usl.{name}"))]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        records: list[tuple[int, int, bytes]] = []
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            for tp, batch in consumer.poll(timeout_ms=1000).items():
                records += [(tp.partition, r.offset, r.value) for r in batch]
        consumer.close()
        topics[name] = records
    with open(args.out, "wb") as out:
        pickle.dump(topics, out)
    return {name: len(records) for name, records in topics.items()}


class _Consumer:
    def __init__(self) -> None:
        self.positions: dict[Any, int] = {}

    def assignment(self) -> list[Any]:
        return list(self.positions)

    def position(self, tp: Any) -> int:
        return self.positions[tp]


class _Publisher:
    def publish(self, record: dict[str, Any]) -> None:
        pass


class _Record:
    def __init__(self, offset: int, value: bytes) -> None:
        self.offset, self.value = offset, value


def replay(args: argparse.Namespace) -> dict[str, Any]:
    os.environ["USL_HOME"] = args.home
    shutil.rmtree(args.home, ignore_errors=True)
    from kafka import TopicPartition

    from sinks.kinds import make_writer
    from sinks.runner import SinkRunner
    from sinks.versions import pipeline_versions
    from streams.settings import Settings

    with open(args.dump, "rb") as handle:
        topics = pickle.load(handle)
    settings = Settings.from_env()
    writer = make_writer(args.kind, settings)
    runner = SinkRunner(settings, "unused:9092", writer, versions=pipeline_versions(settings))
    consumer = _Consumer()
    runner._consumer = consumer  # type: ignore[assignment]
    runner._publisher = _Publisher()  # type: ignore[assignment]
    if args.live and hasattr(writer, "live"):
        writer.live = True
    # Each topic's records in offset order, the topics interleaved by how far through each one is.
    keyed = []
    for source in writer.sources:
        records = sorted(topics[source], key=lambda r: (r[1], r[0]))
        runner._partitions[source] = sorted({r[0] for r in records})
        for index, (partition, offset, value) in enumerate(records):
            keyed.append((index / len(records), source, TopicPartition(runner.sources[source], partition),
                          _Record(offset, value)))
    keyed.sort(key=lambda item: item[0])
    every = max(1, len(keyed) // args.gens)
    first: dict[str, dict[str, int]] = defaultdict(dict)

    def run() -> None:
        for n, (_, source, tp, record) in enumerate(keyed, 1):
            runner._handle(source, tp, record, first)
            consumer.positions[tp] = record.offset + 1
            if n % every == 0:
                runner._note_new_logs(first)
                first.clear()
                runner.flush()
        runner._note_new_logs(first)
        runner.flush(force=True)

    usage = resource.getrusage(resource.RUSAGE_SELF)
    if args.profile:
        profile = cProfile.Profile(time.process_time)
        profile.runcall(run)
        profile.dump_stats(args.profile)
    else:
        run()
    done = resource.getrusage(resource.RUSAGE_SELF)
    if hasattr(writer, "close_live"):
        writer.close_live()
    manifest = runner._store("default").current()
    assert manifest is not None
    return {"kind": args.kind, "records": len(keyed), "generations": manifest.generation_id,
            "user": round(done.ru_utime - usage.ru_utime, 2), "sys": round(done.ru_stime - usage.ru_stime, 2),
            "builtThroughSeq": manifest.built_through_seq, "segments": len(manifest.segments)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("stack", help="a stack of TREE: ingest PATHS, CPU per process and sink")
    run.add_argument("--tree", required=True)
    run.add_argument("--home", required=True)
    run.add_argument("--port", type=int, required=True)
    run.add_argument("--seq", type=int, help="wait for this seq (default: the ingest's l1CommittedSeq)")
    run.add_argument("paths", nargs="+")
    ask = commands.add_parser("search", help="fixed searches against the stack, a hash of each one's hits")
    ask.add_argument("--tree", required=True)
    ask.add_argument("--home", required=True)
    ask.add_argument("--port", type=int, required=True)
    take = commands.add_parser("dump", help="the derived topics of the stack at --home into --out")
    take.add_argument("--home", required=True)
    take.add_argument("--out", required=True)
    again = commands.add_parser("replay", help="one kind's sink loop over a dump, no broker")
    again.add_argument("kind", choices=KINDS)
    again.add_argument("--dump", required=True)
    again.add_argument("--home", default="/tmp/usl-replay")
    again.add_argument("--gens", type=int, default=91, help="about this many generations")
    again.add_argument("--live", action="store_true", help="text: the live index a running sink keeps")
    again.add_argument("--profile", help="a cProfile (CPU timer) of the run here")
    args = parser.parse_args()
    result = {"stack": stack, "search": search, "dump": dump, "replay": replay}[args.command](args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
