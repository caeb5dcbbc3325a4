"""Freshness on a live stack: lag from an L1 append of one whole turn to ``indexed`` search
finding it, and where that time went, against a running ``usl up`` (docs/benchmarks.md,
"Freshness on a live stack").

Each probe posts one turn (``turn.started``, a user message holding a word nothing else
holds, an assistant reply, ``turn.ended``) through ``POST /v1/events`` and, from the moment
the API answered (L1 committed it), polls ``POST /v1/search`` (``indexed``, the default mode,
as ``usl search --freshness indexed`` asks) until the word is found. A sampler beside it
scrapes the worker's and the sinks' ``/metrics`` (ports from ``USL_HOME/run/metrics-ports.json``)
and notes, per probe, when the worker's progress markers (the floor over its chunk
partitions) and each sink's ``usl_watermark_seq`` first covered the probe's seq, and when a
search answer's ``indexThroughSeq`` first did (the planner saw the watermarks). ``--rate``
adds background turns (whole turns of real-size prose, several sessions) at that many events
per second while the probes run. Asserts nothing; prints one JSON line per probe to
``--out`` and a table of p50/p90/max per step.

    PYTHONPATH=. USL_HOME=... python -m benchmarks.bench_live_freshness --api http://127.0.0.1:8773 \\
        --samples 30 --rate 0          # a trickle: one probe every 2-5 s
    ... --samples 30 --rate 20 --gap 1 # probes among 20 events/s of other turns
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from benchmarks.measure import pct

__all__ = ["main"]

_WORDS = ("retry", "socket", "handler", "timeout", "config", "deploy", "parser", "window", "index",
          "cache", "buffer", "commit", "stream", "client", "router", "schema", "token", "vector",
          "shard", "queue", "latency", "worker", "module", "import", "branch", "review", "merge")
_MARKER = re.compile(r'usl_progress_marker_seq\{log="([^"]+)",partition="(\d+)"\} (\S+)')
_WATERMARK = re.compile(r'usl_watermark_seq\{kind="(\w+)",log="([^"]+)"\} (\S+)')


def _post(api: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(api + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def _turn(session: str, number: int, text: str, reply: str) -> list[dict[str, Any]]:
    now = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime()) + f"{int(time.time() * 1000) % 1000:03d}Z"
    turn = f"{session}-t{number}"

    def event(n: int, kind: str, role: str | None = None, **fields: Any) -> dict[str, Any]:
        return {"eventId": f"{turn}-e{n}", "sessionId": session, "turnId": turn, "type": kind,
                "role": role, "time": now, "fields": fields}

    return [event(0, "turn.started"), event(1, "message", "user", text=text),
            event(2, "message", "assistant", text=reply), event(3, "turn.ended")]


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


class Sampler:
    """Scrapes the worker's and sinks' metrics every ``every`` seconds; ``first(seq)`` gives,
    per step, the first time a scrape showed it at or past ``seq``."""

    def __init__(self, ports: dict[str, int], log_id: str, every: float) -> None:
        self.ports, self.log_id, self.every = ports, log_id, every
        self.watched: dict[int, dict[str, float]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def watch(self, seq: int) -> dict[str, float]:
        with self.lock:
            return self.watched.setdefault(seq, {})

    def _scrape(self) -> dict[str, float]:
        seen: dict[str, float] = {}
        markers: list[float] = []
        for port in self.ports.values():
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            for line in text.splitlines():
                if line.startswith("usl_progress_marker_seq{"):
                    match = _MARKER.match(line)
                    if match and match.group(1) == self.log_id:
                        markers.append(float(match.group(3)))
                elif line.startswith("usl_watermark_seq{"):
                    match = _WATERMARK.match(line)
                    if match and match.group(2) == self.log_id:
                        seen[match.group(1)] = float(match.group(3))
        if markers:
            seen["worker"] = min(markers)
        return seen

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                seen = self._scrape()
            except OSError:
                continue
            now = time.time()
            with self.lock:
                for seq, firsts in self.watched.items():
                    for step, value in seen.items():
                        if value >= seq and step not in firsts:
                            firsts[step] = now


def _load(api: str, rate: float, stop: threading.Event, sessions: int = 8) -> None:
    """Whole turns at ``rate`` events/s over ``sessions`` sessions, posted every 0.25 s."""
    rng = random.Random(7)
    names = [f"lagload-{uuid.uuid4().hex[:8]}" for _ in range(sessions)]
    turns = 0
    started = time.monotonic()
    while not stop.is_set():
        due = int(rate * (time.monotonic() - started) / 4) - turns
        events: list[dict[str, Any]] = []
        for _ in range(max(due, 0)):
            events += _turn(names[turns % sessions], turns, _prose(rng, rng.randint(40, 250)),
                            _prose(rng, rng.randint(60, 400)))
            turns += 1
        if events:
            _post(api, "/v1/events", {"events": events})
        stop.wait(0.25)


def probe(api: str, sampler: Sampler, poll: float, timeout: float, mode: str | None,
          search: bool = True) -> dict[str, Any]:
    word = "zq" + uuid.uuid4().hex[:10]
    session = f"lagprobe-{uuid.uuid4().hex[:8]}"
    events = _turn(session, 0, f"please look at {word} in the parser", "looked at it, the parser is fine")
    posted = time.time()
    answer = _post(api, "/v1/events", {"events": events})
    appended = time.time()
    seq = int(answer["l1CommittedSeq"])
    firsts = sampler.watch(seq)
    planner_saw = found = None
    slowest = 0.0
    body: dict[str, Any] = {"query": word, "freshness": "indexed", "k": 3}
    if mode:
        body["mode"] = mode
    while not search and time.time() - appended < timeout and len(firsts) < 6:  # the worker and 5 kinds
        time.sleep(poll)
    while search and time.time() - appended < timeout:
        started = time.time()
        result = _post(api, "/v1/search", body)
        done = time.time()
        slowest = max(slowest, done - started)
        if planner_saw is None and int(result["freshness"]["indexThroughSeq"]) >= seq:
            planner_saw = started
        if any(hit.get("sessionId") == session for hit in result.get("results", [])):
            found = done
            break
        time.sleep(max(0.0, poll - (done - started)))
    time.sleep(2 * sampler.every)
    with sampler.lock:
        steps = {step: round(at - appended, 3) for step, at in sampler.watched.pop(seq, firsts).items()}
    return {"seq": seq, "postSeconds": round(appended - posted, 3), **steps,
            "planner": None if planner_saw is None else round(planner_saw - appended, 3),
            "found": None if found is None else round(found - appended, 3), "slowestSearch": round(slowest, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", default=f"http://127.0.0.1:{os.environ.get('USL_API_PORT', '8765')}")
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("USL_HOME", ".usl")))
    parser.add_argument("--log", default="default")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--rate", type=float, default=0.0, help="background events/s (whole turns)")
    parser.add_argument("--gap", default="2-5", help="seconds between probes: N or LOW-HIGH")
    parser.add_argument("--poll", type=float, default=0.02, help="seconds between searches of one probe")
    parser.add_argument("--mode", default=None, help="search mode (default: the API's)")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=None, help="append one JSON line per probe")
    parser.add_argument("--label", default="")
    parser.add_argument("--warmup", type=int, default=2, help="probes run first and not counted")
    parser.add_argument("--no-search", action="store_true",
                        help="only the worker's and sinks' steps: no searches loading the machine")
    args = parser.parse_args(argv)
    ports = json.loads((args.home / "run" / "metrics-ports.json").read_text())
    sampler = Sampler(ports, args.log, 0.02)
    sampler.thread.start()
    stop = threading.Event()
    loader = None
    if args.rate > 0:
        loader = threading.Thread(target=_load, args=(args.api, args.rate, stop), daemon=True)
        loader.start()
        time.sleep(5)  # into the steady state
    low, _, high = args.gap.partition("-")
    rng = random.Random(11)
    for _ in range(args.warmup):  # the first answers of a fresh stack load the embedder and readers
        probe(args.api, sampler, args.poll, args.timeout, args.mode, not args.no_search)
    rows = []
    try:
        for _ in range(args.samples):
            row = {"label": args.label, "rate": args.rate, **probe(args.api, sampler, args.poll, args.timeout, args.mode,
                                                                 not args.no_search)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.out is not None:
                with args.out.open("a") as out:
                    out.write(json.dumps(row) + "\n")
            time.sleep(rng.uniform(float(low), float(high or low)))
    finally:
        stop.set()
        sampler.stop.set()
        if loader is not None:
            loader.join(timeout=10)
    steps = ["postSeconds", "worker", "structured", "analytics", "toolresults", "text", "vector", "planner", "found",
             "slowestSearch"]
    print(f"{'step':<12} {'n':>3} {'p50':>6} {'p90':>6} {'max':>6}")
    for step in steps:
        values = [row[step] for row in rows if row.get(step) is not None]
        if values:
            print(f"{step:<12} {len(values):>3} {pct(values, 0.5):>6.2f} {pct(values, 0.9):>6.2f} {max(values):>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
