"""Throughput of redaction policy v1 on realistic agent-session text (SPEC §4, §11).

Generates about 20 MB of session text (code, logs, prose, JSON tool output, shell sessions,
home paths and e-mail addresses, and a few secrets) from a fixed seed, then measures on one
core:

- ``redact_text``: MB/s over the documents (CPU time of this process, so "per core");
- ``redact_event``: events/s over message, tool.call and tool.result events built from them,
  and over one-line messages and tool calls (most of a real session);
- a naive baseline: every rule's pattern in one big alternation, applied with no literal
  prefilters and no checks (the shape of a pure-regex scanner), and the speed-up ratio.

With ``--real``: ``redact_event`` MB/s per core on the events the importers make of the
repository's real transcripts (tests/fixtures/importers, examples/sessions,
benchmarks/eval_data/sessions), and the secret replacements their text gets (false positives).

With ``--workload N``: the same on N events of the benchmark workload (``benchmarks.workload``,
the events the harness measures, seed ``--seed``).

With ``--real`` or ``--workload N`` and ``--against TREE``: the same events through ``redact_event`` of this tree and of
``TREE`` (another version's source, e.g. ``git archive e924674 | tar -x -C TREE``), each in a
fresh process (empty memories) with ``PYTHONPATH`` at its tree, alternately ``--repeat`` times,
and the ratio of each pair: a speed target set on another machine is checked as a ratio
measured in one run.

Run: ``python benchmarks/bench_redaction.py [--mb 20] [--seed 7] [--json] [--real | --workload N] [--against TREE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from streams.redaction import DEFAULT_POLICY, redact_event, redact_text, rule_names
from streams.redaction.assignments import AssignmentRule
from streams.redaction.base import RegexRule
from streams.redaction.context import EnvDumpRule
from streams.redaction.rules import build_rules
from streams.redaction.samples import SEEDED_SECRETS

__all__ = ["false_positive_report", "generate_documents", "main", "naive_pattern", "real_events"]

_WORDS = (
    "the search index chunk session event tool result query planner stream kafka partition "
    "offset watermark generation manifest token budget redaction policy field value commit "
    "retry timeout worker consumer producer schema version rebuild replay cursor snapshot "
    "latency throughput metric dashboard test failing passing fix bug feature refactor update "
    "function class method module import return error warning info debug config setting file"
).split()
_IDENTS = ["user_id", "session", "chunk_text", "offsets", "batch", "records", "payload", "result", "items", "config"]


def _prose(rng: random.Random, words: int) -> str:
    sentences = []
    while words > 0:
        n = rng.randint(6, 18)
        words -= n
        sentence = " ".join(rng.choice(_WORDS) for _ in range(n))
        sentences.append(sentence.capitalize() + rng.choice([".", ".", ".", "?", ":"]))
    return " ".join(sentences)


def _python(rng: random.Random) -> str:
    name = rng.choice(_IDENTS)
    lines = [f"def process_{name}({name}: list[dict], *, limit: int = {rng.randint(1, 500)}) -> dict:"]
    lines.append(f'    """Process {name} and return a summary."""')
    for _ in range(rng.randint(4, 20)):
        var = rng.choice(_IDENTS)
        lines.append(rng.choice([
            f"    {var} = [item for item in {name} if item.get('{rng.choice(_WORDS)}')]",
            f"    if len({var}) > limit:\n        raise ValueError(f'too many {var}: {{len({var})}}')",
            f"    logger.info('processed %d {var} in %.2fs', len({var}), time.monotonic() - start)",
            f"    key = ('{var}', {rng.randint(0, 99)})",
            f"    for key, value in sorted({var}.items()):\n        out[key] = value",
            f"    token_count = tokenizer.count({var})",
        ]))
    lines.append(f"    return {{'count': len({name}), 'ok': True}}")
    return "\n".join(lines)


def _logs(rng: random.Random) -> str:
    out = []
    for i in range(rng.randint(5, 60)):
        level = rng.choice(["INFO", "DEBUG", "WARN", "ERROR"])
        out.append(
            f"2026-01-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{i % 60:02d}.{rng.randint(0, 999):03d}Z "
            f"{level} [{rng.choice(_WORDS)}] {_prose(rng, rng.randint(4, 12))} "
            f"request_id={rng.getrandbits(128):032x} duration_ms={rng.randint(1, 900)}"
        )
    return "\n".join(out)


def _tool_output(rng: random.Random) -> str:
    kind = rng.randrange(5)
    if kind == 0:
        return "\n".join(f"{rng.getrandbits(160):040x} {_prose(rng, 6)}" for _ in range(rng.randint(5, 40)))
    if kind == 1:
        files = [f"/home/dev{rng.randint(1, 9)}/src/usl/{rng.choice(_IDENTS)}_{i}.py" for i in range(rng.randint(3, 30))]
        return "\n".join(f"-rw-r--r-- 1 dev dev {rng.randint(100, 90000)} Jan 12 10:0{i % 10} {path}" for i, path in enumerate(files))
    if kind == 2:
        rows = [{"id": f"{rng.getrandbits(64):016x}", "score": rng.random(), "text": _prose(rng, 12), "email": f"user{rng.randint(1, 99)}@example.com"} for _ in range(rng.randint(2, 20))]
        return json.dumps({"results": rows}, indent=2)
    if kind == 3:
        return "\n".join(f"tests/test_{rng.choice(_IDENTS)}.py::test_{rng.choice(_WORDS)} {'PASSED' if rng.random() > 0.1 else 'FAILED'}" for _ in range(rng.randint(5, 50)))
    return f"$ cat README.md\n# USL\n\n{_prose(rng, rng.randint(50, 400))}\n\n```bash\nexport USL_HOME=./.usl\nusl ingest sessions.jsonl --format asp\n```"


def _secret(rng: random.Random) -> str:
    secret = rng.choice(SEEDED_SECRETS)
    return rng.choice([f"export API_TOKEN={secret}", f'client = Client(api_key="{secret}")', f"Using {secret} for auth", f"DATABASE_URL={secret}"])


def generate_documents(megabytes: float, seed: int) -> list[str]:
    """Deterministic agent-session texts totalling about ``megabytes`` MB (UTF-8)."""
    rng = random.Random(seed)
    makers = [_python, _logs, _tool_output, lambda r: _prose(r, r.randint(20, 400))]
    documents: list[str] = []
    total = 0
    target = int(megabytes * 1_000_000)
    while total < target:
        parts = [rng.choice(makers)(rng) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.03:
            parts.insert(rng.randrange(len(parts) + 1), _secret(rng))
        document = "\n\n".join(parts)
        documents.append(document)
        total += len(document.encode("utf-8"))
    return documents


def _events(documents: list[str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    base = {"aspVersion": "1.0", "logId": "default", "sessionId": "s1", "time": "2026-01-31T12:00:00Z",
            "visibility": "visible", "acl": {"tenant": "default", "read": ["*"]}}
    for i, document in enumerate(documents):
        kind = i % 3
        if kind == 0:
            fields: dict[str, Any] = {"text": document}
            events.append({**base, "eventId": f"e{i}", "type": "message", "role": "assistant", "fields": fields})
        elif kind == 1:
            fields = {"toolName": "Bash", "toolCallId": f"call_{i}", "input": {"command": document[:400], "description": "run", "timeout": 120}}
            events.append({**base, "eventId": f"e{i}", "type": "tool.call", "role": "assistant", "fields": fields, "payload": {"raw": document[:100]}})
        else:
            fields = {"toolName": "Bash", "toolCallId": f"call_{i - 1}", "status": "ok", "output": document}
            events.append({**base, "eventId": f"e{i}", "type": "tool.result", "role": "tool", "fields": fields})
    return events


def _small_events(count: int, seed: int) -> list[dict[str, Any]]:
    """One-line messages and tool calls (~150 bytes): the bulk of a real session's events."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    for i in range(count):
        events.append(_events([_prose(rng, rng.randint(8, 30))])[0] if i % 2 else {
            "aspVersion": "1.0", "eventId": f"s{i}", "logId": "default", "sessionId": "s1", "type": "tool.call",
            "role": "assistant", "time": "2026-01-31T12:00:00Z", "visibility": "visible",
            "acl": {"tenant": "default", "read": ["*"]},
            "fields": {"toolName": "Bash", "toolCallId": f"toolu_01{rng.getrandbits(40):010x}",
                       "input": {"command": f"pytest -q tests/test_{rng.choice(_IDENTS)}.py", "description": "Run the tests"}},
        })
    return events


def naive_pattern() -> re.Pattern[str]:
    """Every v1 rule's regex in one alternation: the no-prefilter baseline."""
    parts = []
    for rule in build_rules(DEFAULT_POLICY):
        patterns = []
        if isinstance(rule, RegexRule):
            patterns.append(rule.pattern)
        elif isinstance(rule, AssignmentRule):
            patterns += [rule._pattern, rule._flag, rule._xml]
        elif isinstance(rule, EnvDumpRule):
            patterns.append(rule.pattern)  # type: ignore[attr-defined]
        for pattern in patterns:
            source = re.sub(r"\(\?P<\w+>", "(?:", pattern.pattern)
            flags = "i" if pattern.flags & re.IGNORECASE else ""
            flags += "m" if pattern.flags & re.MULTILINE else ""
            flags += "s" if pattern.flags & re.DOTALL else ""
            parts.append(f"(?{flags}:{source})" if flags else f"(?:{source})")
    parts.append(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
    parts.append(r"[MNO][A-Za-z0-9_-]{20,27}\.[A-Za-z0-9_-]{6,7}\.[A-Za-z0-9_-]{27,40}")
    return re.compile("|".join(parts), re.ASCII)


REAL_TRANSCRIPTS = ("tests/fixtures/importers", "examples/sessions", "benchmarks/eval_data/sessions")
"""Real agent transcripts in the repository (Claude Code, OpenAI chat, ASP)."""


def real_events(root: Path) -> list[dict[str, Any]]:
    """Every event the repository's importers make of its real transcripts."""
    from streams.exceptions import ImportFormatError
    from streams.importers import Accepted, iter_records

    events: list[dict[str, Any]] = []
    for folder in REAL_TRANSCRIPTS:
        for path in sorted((root / folder).rglob("*.json*")):
            try:
                events += [item.event for item in iter_records(path) if isinstance(item, Accepted)]
            except ImportFormatError:
                continue  # a manifest or notes file, not a transcript
    return events


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def false_positive_report(events: list[dict[str, Any]], secret_rules: set[str]) -> dict[str, Any]:
    """Replacements by secret rules in real transcripts' text (which holds no secrets: every
    such replacement is a false positive, or a fake key in a test fixture), per MB."""
    texts = [text for event in events for text in _strings(event.get("fields", {}))]
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    hits: dict[str, int] = {}
    examples: dict[str, str] = {}
    for text in texts:
        redacted, found = redact_text(text)
        for rule, count in found.items():
            if rule in secret_rules:
                hits[rule] = hits.get(rule, 0) + count
                if rule not in examples:
                    at = redacted.find(f"[REDACTED:{rule}]")
                    examples[rule] = redacted[max(0, at - 80): at + 40]
    total = sum(hits.values())
    return {"texts": len(texts), "megabytes": round(megabytes, 2), "secret_replacements": total,
            "per_mb": round(total / megabytes, 2) if megabytes else 0.0, "by_rule": dict(sorted(hits.items())),
            "examples": examples}


def _forget() -> None:
    """Empty redaction's memory of short texts and keys, so every timed run starts cold (a
    repeat would otherwise be answered from what the run before it remembered)."""
    from streams.redaction import events, text

    text._redact_short.cache_clear()
    text._LONG_MEMORY.clear()
    events._redact_key.cache_clear()
    events._key.cache_clear()
    events._identifier.cache_clear()


def _measure(function: Any, items: list[Any], repeat: int) -> float:
    # CPU seconds of this (single-threaded) process: "per core" figures that other processes
    # on a shared machine do not distort; the best of ``repeat`` runs, each starting cold.
    best = float("inf")
    for _ in range(repeat):
        _forget()
        started = time.process_time()
        for item in items:
            function(item)
        best = min(best, time.process_time() - started)
    return best


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20.0, help="megabytes of text to generate (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the best is reported")
    parser.add_argument("--baseline-mb", type=float, default=2.0, help="megabytes the slow baseline runs over")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--real", action="store_true",
                        help="measure on the repository's real transcripts instead: redact_event MB/s per core "
                             "on their events and the secret replacements their text gets (false positives)")
    parser.add_argument("--workload", type=int, metavar="N",
                        help="measure redact_event on N events of the benchmark workload (seed --seed) instead")
    parser.add_argument("--against", type=Path, metavar="TREE",
                        help="with --real or --workload: also time another version's source tree, alternately, "
                             "and report the ratio of each pair")
    args = parser.parse_args(argv)
    if args.real and args.workload:
        parser.error("--real and --workload choose the events: give one")
    if args.against is not None:
        if not (args.real or args.workload):
            parser.error("--against needs --real or --workload")
        return _against(args)
    if args.real or args.workload:
        return _real(args)

    documents = generate_documents(args.mb, args.seed)
    megabytes = sum(len(d.encode("utf-8")) for d in documents) / 1e6
    redact_text(documents[0])  # build and cache the rule set outside the timing

    text_seconds = _measure(redact_text, documents, args.repeat)
    events = _events(documents)
    event_seconds = _measure(redact_event, events, args.repeat)
    small = _small_events(20000, args.seed)
    small_seconds = _measure(redact_event, small, args.repeat)

    sample: list[str] = []
    sample_mb = 0.0
    for document in documents:
        if sample_mb >= args.baseline_mb:
            break
        sample.append(document)
        sample_mb += len(document.encode("utf-8")) / 1e6
    naive = naive_pattern()
    naive_seconds = _measure(lambda text: naive.sub("[REDACTED]", text), sample, 1)
    ours_on_sample = _measure(redact_text, sample, args.repeat)

    hits: dict[str, int] = {}
    for document in documents:
        for rule, count in redact_text(document)[1].items():
            hits[rule] = hits.get(rule, 0) + count
    result = {
        "megabytes": round(megabytes, 2),
        "documents": len(documents),
        "redact_text_mb_per_s": round(megabytes / text_seconds, 1),
        "events": len(events),
        "redact_event_events_per_s": round(len(events) / event_seconds),
        "redact_event_mb_per_s": round(megabytes / event_seconds, 1),
        "small_events_per_s": round(len(small) / small_seconds),
        "baseline_sample_mb": round(sample_mb, 2),
        "naive_alternation_mb_per_s": round(sample_mb / naive_seconds, 2),
        "redact_text_on_sample_mb_per_s": round(sample_mb / ours_on_sample, 1),
        "speedup_vs_naive": round(naive_seconds / ours_on_sample, 1),
        "hits": dict(sorted(hits.items())),
        "python": sys.version.split()[0],
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"text: {result['megabytes']} MB in {result['documents']} documents (seed {args.seed})")
        print(f"redact_text:  {result['redact_text_mb_per_s']} MB/s per core")
        print(f"redact_event: {result['redact_event_events_per_s']} events/s per core ({result['redact_event_mb_per_s']} MB/s) "
              f"on these documents; {result['small_events_per_s']} events/s on one-line events")
        print(f"naive one-alternation baseline on {result['baseline_sample_mb']} MB: "
              f"{result['naive_alternation_mb_per_s']} MB/s vs {result['redact_text_on_sample_mb_per_s']} MB/s "
              f"-> {result['speedup_vs_naive']}x faster")
        print(f"replacements by rule: {result['hits']}")
    return result


_TIMER = """
import json, pickle, sys, time
events = pickle.load(open(sys.argv[1], "rb"))
from streams.redaction import redact_event
redact_event(events[0])
started = time.process_time()
for event in events:
    redact_event(event)
print(json.dumps(time.process_time() - started))
"""


def _corpus(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    if args.workload:
        from benchmarks.workload import generate

        return list(generate(events=args.workload, seed=args.seed))
    return real_events(root)


def _against(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(__file__).resolve().parents[1]
    events = _corpus(args, root)
    megabytes = sum(len(json.dumps(event, ensure_ascii=False).encode("utf-8")) for event in events) / 1e6
    pairs = []
    with tempfile.TemporaryDirectory() as work:
        dump = Path(work) / "events.pickle"
        dump.write_bytes(pickle.dumps(events))

        def rate(tree: Path) -> float:
            # cwd at the tree too: ``python -c`` puts the working directory first on sys.path.
            done = subprocess.run([sys.executable, "-c", _TIMER, str(dump)], check=True, text=True, cwd=tree,
                                  capture_output=True, env={**os.environ, "PYTHONPATH": str(tree)})
            return megabytes / float(done.stdout.strip().splitlines()[-1])

        for _ in range(args.repeat):
            baseline, this = rate(args.against.resolve()), rate(root)
            pairs.append({"baseline_mb_per_s": round(baseline, 1), "this_mb_per_s": round(this, 1),
                          "ratio": round(this / baseline, 2)})
            if not args.json:
                print(f"{args.against}: {baseline:.1f} MB/s   this tree: {this:.1f} MB/s   "
                      f"ratio {this / baseline:.2f}x", flush=True)
    result = {"events": len(events), "event_megabytes": round(megabytes, 2), "pairs": pairs}
    if args.json:
        print(json.dumps(result))
    return result


def _real(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(__file__).resolve().parents[1]
    events = _corpus(args, root)
    megabytes = sum(len(json.dumps(event, ensure_ascii=False).encode("utf-8")) for event in events) / 1e6
    redact_event(events[0])
    seconds = _measure(redact_event, events, args.repeat)
    personal = {"email", "home-username", "domain", "payment-card"}
    secret_rules = set(rule_names()) - personal
    result: dict[str, Any] = {
        "events": len(events),
        "event_megabytes": round(megabytes, 2),
        "mean_event_bytes": round(megabytes * 1e6 / len(events)),
        "redact_event_mb_per_s": round(megabytes / seconds, 1),
        "redact_event_events_per_s": round(len(events) / seconds),
        "false_positives": false_positive_report(events, secret_rules),
        "python": sys.version.split()[0],
    }
    if args.json:
        print(json.dumps(result))
    else:
        fp = result["false_positives"]
        source = f"workload (seed {args.seed})" if args.workload else "real transcripts"
        print(f"{source}: {result['events']} events, {result['event_megabytes']} MB "
              f"(mean {result['mean_event_bytes']} bytes)")
        print(f"redact_event: {result['redact_event_mb_per_s']} MB/s per core ({result['redact_event_events_per_s']} events/s)")
        print(f"secret replacements in their text: {fp['secret_replacements']} in {fp['megabytes']} MB "
              f"({fp['per_mb']}/MB): {fp['by_rule']}")
        for rule, example in fp["examples"].items():
            print(f"  {rule}: {example!r}")
    return result


if __name__ == "__main__":
    main()
