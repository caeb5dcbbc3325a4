"""Chunker benchmark: events/s through ``chunk_stream`` on realistic synthetic sessions.

Builds N redacted ASP events (default 50 000) from generated agent sessions -- a user prompt,
then tool calls (Bash, Read, Edit, Grep) with results, then an assistant answer, per turn;
a few long outputs and messages that must be split -- interleaves 16 sessions at a time as a
busy log would, inserts regular ticks every K seqs (``make_ticks``), and chunks it with the
real wordllama tokenizer at the default config (768/96 tokens, G = 300 s). Prints, from one
run: events/s of the batch path (``chunk_stream``) and of the agent path (``Chunker.on_event``
one record at a time), the same for rendering plus one batched token count per event (the
floor set by the tokenizer) and the ratio, chunks produced, mean tokens per chunk, and the
size of the per-session state as JSON.

With ``--transcripts PATH``: the events the importers make of the transcripts under PATH (a
file or a directory), redacted, in the order they are imported, instead of generated sessions.
``chunks_sha256`` hashes every chunk's bytes in order: two trees that chunk alike print the same.

Usage::

    .venv/bin/python benchmarks/bench_chunking.py [--events 50000 | --transcripts PATH] [--every 64] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from streams.chunking import (
    Chunker,
    ChunkerConfig,
    chunk_stream,
    default_tokenizer,
    make_ticks,
    render_event,
)

__all__ = ["main", "make_log"]

_T0 = datetime(2026, 1, 1, tzinfo=UTC)
_WORDS = (
    "the a to of and in is it that for test file function error import return value config "
    "module class def self path build run install package version update fix bug check output "
    "request response server client query index search chunk token kafka partition offset seq "
    "session turn event tool call result status pytest assert failed passed warning line"
).split()
_TOOLS = ("Bash", "Read", "Edit", "Grep")


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(_WORDS, k=rng.randint(low, high))).capitalize() + "."


def _session(rng: random.Random, number: int, start: float) -> list[dict[str, Any]]:
    """One agent session as a list of ASP events (times relative to ``start``)."""
    session_id = f"sess-{number:05d}"
    clock = start
    events: list[dict[str, Any]] = []

    def add(type_: str, *, turn: str | None = None, role: str | None = None, **fields: Any) -> None:
        nonlocal clock
        clock += rng.expovariate(1 / 4.0)
        events.append({
            "aspVersion": "1.0", "eventId": f"{session_id}-{len(events)}", "logId": "default",
            "sessionId": session_id, "runId": f"run-{number}", "turnId": turn, "type": type_,
            "role": role, "time": (_T0 + timedelta(seconds=clock)).isoformat().replace("+00:00", "Z"),
            "visibility": "visible", "acl": {"tenant": "acme", "read": [f"user:u{number % 50}"]},
            "fields": fields,
        })

    add("session.started", title=_sentence(rng, 3, 8), cwd=f"/home/[user]/proj{number}", model="m-1")
    for turn_number in range(rng.randint(2, 8)):
        turn = f"{session_id}-t{turn_number}"
        add("turn.started", turn=turn)
        add("message", turn=turn, role="user", text=" ".join(_sentence(rng, 5, 25) for _ in range(rng.randint(1, 4))))
        for call in range(rng.randint(0, 6)):
            tool = rng.choice(_TOOLS)
            call_id = f"{turn}-c{call}"
            arguments = {"command": f"pytest tests/test_{rng.choice(_WORDS)}.py -q"} if tool == "Bash" else {
                "path": f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}.py", "limit": rng.randint(10, 400)}
            add("tool.call", turn=turn, role="assistant", toolName=tool, toolCallId=call_id, input=arguments)
            output = "\n".join(_sentence(rng, 4, 14) for _ in range(rng.randint(1, 60)))
            add("tool.result", turn=turn, role="tool", toolName=tool, toolCallId=call_id,
                status=rng.choice(("ok", "ok", "ok", "error")), output=output)
        paragraphs = rng.randint(1, 12) if rng.random() > 0.03 else 150  # now and then a huge answer
        add("message", turn=turn, role="assistant", text="\n\n".join(_sentence(rng, 8, 40) for _ in range(paragraphs)))
        add("turn.ended", turn=turn)
    add("session.ended")
    return events


def make_log(count: int, *, seed: int = 11, concurrent: int = 16) -> list[tuple[int, dict[str, Any]]]:
    """About ``count`` events of interleaved sessions, as (seq, event) in log order."""
    rng = random.Random(seed)
    active: list[list[dict[str, Any]]] = []
    log: list[tuple[int, dict[str, Any]]] = []
    seq, number = 0, 0
    while len(log) < count:
        while len(active) < concurrent:
            active.append(_session(rng, number, start=len(log) * 0.5))
            number += 1
        pick = rng.randrange(len(active))
        seq += 1 if rng.random() > 0.05 else 2  # the odd gap (transaction markers)
        log.append((seq, active[pick].pop(0)))
        if not active[pick]:
            active.pop(pick)
    return log


def transcript_log(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The redacted events of the transcripts under ``path``, file by file in name order, as
    (seq, event); files that are no transcript (a manifest) are left out."""
    from streams.exceptions import ImportFormatError
    from streams.importers import Accepted, iter_records
    from streams.redaction import redact_event

    events: list[dict[str, Any]] = []
    for file in sorted(path.rglob("*.json*")) if path.is_dir() else [path]:
        try:
            events += [item.event for item in iter_records(file) if isinstance(item, Accepted)]
        except ImportFormatError:
            continue
    return [(seq, redact_event(event).event) for seq, event in enumerate(events, start=1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--every", type=int, default=64, help="K: a tick every K seqs")
    parser.add_argument("--transcripts", type=Path, help="chunk the transcripts under this path instead")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    log = transcript_log(args.transcripts) if args.transcripts else make_log(args.events)
    records = make_ticks(log, args.every, policy="bench")
    events = sum(1 for record in records if record["kind"] == "event")
    chunker = Chunker(ChunkerConfig(), default_tokenizer(), policy_hash="bench")

    # The floor: rendering plus one batched token count per event, nothing else.
    started = time.perf_counter()
    texts = [render_event(record["event"]) for record in records if record["kind"] == "event"]
    chunker.tokenizer.count_many([text for text in texts if text is not None])
    floor_seconds = time.perf_counter() - started

    started = time.perf_counter()
    chunks = chunk_stream(records, chunker, finalize=True)
    batch_seconds = time.perf_counter() - started

    started = time.perf_counter()
    states: dict[str, dict[str, Any]] = {}
    incremental = 0
    for record in records:
        if record["kind"] == "event":
            session_id = record["event"]["sessionId"]
            state = states.setdefault(session_id, chunker.new_state(session_id))
            incremental += len(chunker.on_event(state, record["logId"], record["seq"], record["event"]))
        else:
            for state in states.values():
                if state["unit"] is not None:
                    incremental += len(chunker.on_tick(state, record))
    for state in states.values():
        incremental += len(chunker.close(state, provisional=True))
    agent_seconds = time.perf_counter() - started

    state_bytes = [len(json.dumps(state)) for state in states.values()]
    report = {
        "events": events,
        "chunks": len(chunks),
        "batch_events_per_second": round(events / batch_seconds),
        "agent_events_per_second": round(events / agent_seconds),
        "render_and_count_events_per_second": round(events / floor_seconds),
        "batch_vs_render_and_count": round(floor_seconds / batch_seconds, 2),
        "rendered_mb_per_second": round(sum(len(t.encode()) for t in texts if t) / batch_seconds / 1e6, 2),
        "mean_tokens_per_chunk": round(statistics.mean(chunk["tokenCount"] for chunk in chunks), 1),
        "split_events": len({e["eventId"] for c in chunks for e in c["evidence"] if e["part"][0] > 0}),
        "state_bytes_p50": int(statistics.median(state_bytes)),
        "state_bytes_max": max(state_bytes),
        "tokenizer": chunker.tokenizer.identity,
        "chunks_sha256": hashlib.sha256(b"\n".join(json.dumps(chunk).encode() for chunk in chunks)).hexdigest(),
    }
    assert incremental == len(chunks), "the agent path and the batch path disagree"
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:>36}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
