"""Seeded, deterministic generator of realistic agent sessions as ASP v1 events.

A session is what a coding agent leaves behind: ``session.started`` (title, model, cwd), one or
two runs, turns of a user ask, assistant text (prose, often with a code block), tool calls with
parameters (paths, shell commands, URLs, SQL) and their results (code with line numbers, test
logs, stack traces, file listings, grep hits, HTTP bodies), and ``session.ended``. About one
session in five groups its turns into a task episode (``episode.started`` … ``episode.ended``,
events carrying ``episodeId``: the chunker's unit is then the episode). Access lists are mixed
across a few principals (most sessions readable by the whole tenant, some by a group, some by
one user, a few in a second tenant). A configurable share of tool results and user asks carries
one of the redaction policy's seeded fake secrets (``streams.redaction.samples``) in a shape
the redactor knows (an ``export``, a config file line, a URL with a password, a header).

Sizes follow real Claude Code transcripts (``sizes="real"``, the default). Measured on the
3 146 non-progress events of the public transcripts ``make eval`` searches
(``benchmarks/eval_data/sessions/claude-code``, marot/spotter, imported with
``streams.importers``; canonical JSON bytes per event, text = the output or message text):

==================  =======  ==========  ==========  ==========  ========
event               share    event p50   event p90   event p99   max
==================  =======  ==========  ==========  ==========  ========
tool.result         35 %     2.9 KB      13.3 KB     33.6 KB     81 KB
tool.call           35 %     1.7 KB      3.9 KB      15.4 KB     31 KB
assistant message   21 %     1.5 KB      1.9 KB      16.9 KB     32 KB
user message        2 %      1.6 KB      18.3 KB     30.5 KB     31 KB
==================  =======  ==========  ==========  ==========  ========

Mean 3.4 KB per event (the issue #16 set: 2.7 KB with Claude Code's progress lines). Texts are
heavy-tailed: tool output p50 224 B, p90 5.3 KB, p99 32 KB (6 % over 10 KB); assistant text
p50 85 B, p99 14 KB; user text p90 8.7 KB (pasted logs). About half of an event's bytes is
the importer's ``payload`` (the raw record: Claude Code echoes a tool's input and output in
``toolUseResult``), which redaction drops. Here text sizes are drawn from log-normal
distributions with those p50/p90 and capped near the real maximum, and tool calls, results and
assistant messages carry a ``payload`` echo of the record, capped at the importer's 16 KiB.
``sizes="compact"`` gives the earlier, smaller events (no payload, mean 0.8 KB).

Concurrent sessions are merged by event time, so the log interleaves them as a real shared log
does. The same arguments always give the same events, byte for byte (no wall clock, no global
random state, no set iteration).

Usage::

    python -m benchmarks.workload --events 10000 --seed 1 --out sessions.jsonl
    python -m benchmarks.workload --sessions 50 --seed 1 --l1      # append into L1

``--l1`` appends with :class:`streams.l1.L1Producer` to ``KAFKA_BOOTSTRAP_SERVERS`` (the local
broker of ``USL_HOME`` when unset) and prints the log's highest seq.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from streams.asp import canonical_bytes, validate_event
from streams.redaction.samples import SEEDED_SECRETS

__all__ = ["WorkloadConfig", "generate", "main", "session_events", "write_jsonl"]

EPOCH = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)

_PROJECTS = ("billing-api", "search-indexer", "web-frontend", "infra-terraform", "data-pipeline",
             "auth-service", "mobile-app", "ml-training")
_TOPICS = (
    ("kafka", ("consumer group rebalance", "partition offset", "broker timeout", "producer acks")),
    ("pytest", ("fixture teardown", "flaky test", "assertion error", "conftest plugin")),
    ("docker", ("image build cache", "container exit code", "volume mount", "compose network")),
    ("postgres", ("slow query plan", "index scan", "deadlock detected", "migration rollback")),
    ("react", ("state update loop", "hook dependency", "hydration mismatch", "bundle size")),
    ("terraform", ("state lock", "provider version", "plan drift", "module output")),
    ("rust", ("borrow checker", "lifetime parameter", "trait bound", "cargo feature")),
    ("auth", ("token refresh", "session cookie", "oauth redirect", "permission denied")),
)
_MODULES = ("client", "server", "config", "worker", "models", "views", "utils", "handlers", "schema",
            "retry", "cache", "rounding", "refunds", "invoices", "session", "router")
_EXTS = (".py", ".py", ".py", ".ts", ".tsx", ".rs", ".go", ".sql", ".yaml", ".tf")
_VERBS = ("fix", "add", "refactor", "debug", "speed up", "document", "test", "remove", "migrate")
_FILLER = ("I looked at the code and the logs and the problem seems to come from the way the "
           "configuration is loaded before the service starts so let me check the surrounding "
           "module and confirm the hypothesis with a smaller reproduction before changing anything "
           "the retry loop swallows the error and the cache keeps a stale value after the rollback").split()
_HOSTS = ("api.example.com", "docs.python.org", "github.com", "registry.npmjs.org", "grafana.internal",
          "jira.example.com", "pypi.org", "kafka.apache.org")
_MODELS = ("claude-sonnet-4", "gpt-4.1", "claude-opus-4", "o3")
_SOURCES = ("claude-code", "codex-cli", "cursor", "aider")
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
# (tenant, read list, weight): who may read a session.
_ACLS = (
    ("acme", ["*"], 60), ("acme", ["group:eng"], 12), ("acme", ["group:ops"], 8),
    ("acme", ["user:alice"], 6), ("acme", ["user:bob", "group:sre"], 6), ("globex", ["*"], 8),
)
# Shapes the redactor knows for a seeded secret (it is always caught by a policy-v1 rule).
_SECRET_SHAPES = (
    "export API_TOKEN={secret}",
    "token = \"{secret}\"",
    "SECRET_KEY={secret}",
    "Authorization: Bearer {secret}",
    "[default]\napi_key = {secret}",
)


@dataclass(frozen=True)
class WorkloadConfig:
    """Shape of the generated log. ``concurrent`` sessions are open at a time."""

    seed: int = 0
    log_id: str = "default"
    concurrent: int = 8
    secret_share: float = 0.02
    min_turns: int = 2
    max_turns: int = 8
    episode_share: float = 0.2
    long_output_share: float = 0.05
    start: datetime = EPOCH
    sizes: str = "real"  # "real": sizes of real transcripts (module docstring); "compact": small events


# Text sizes (bytes) of real transcripts, as (p50, p90, cap) of a log-normal draw (module docstring).
_TOOL_OUTPUT_BYTES = (220, 4500, 36_000)
_ASSISTANT_TEXT_BYTES = (120, 900, 24_000)
_USER_TEXT_BYTES = (380, 8700, 30_000)
_EDIT_INPUT_BYTES = (600, 3500, 28_000)
_PAYLOAD_MAX_BYTES = 16 * 1024  # streams.importers.base.PAYLOAD_MAX_BYTES
_Z90 = 1.2816  # the standard normal's 90th percentile


def _heavy_size(rng: random.Random, p50: int, p90: int, cap: int) -> int:
    """A log-normal size with the given median and 90th percentile, capped."""
    sigma = math.log(p90 / p50) / _Z90
    return max(16, min(cap, int(p50 * math.exp(sigma * rng.gauss(0.0, 1.0)))))


class _Session:
    """Builds one session's events; its own RNG, so sessions do not depend on each other's order."""

    def __init__(self, config: WorkloadConfig, number: int, start: datetime) -> None:
        self.config = config
        self.rng = random.Random(f"{config.seed}:{number}")
        rng = self.rng
        self.session_id = f"{rng.getrandbits(128):032x}"
        self.clock = start
        self.events: list[dict[str, Any]] = []
        self.project = rng.choice(_PROJECTS)
        self.topic, self.issues = rng.choice(_TOPICS)
        self.user = rng.choice(("alice", "bob", "carol", "dave", "erin"))
        tenant, read, _ = rng.choices(_ACLS, weights=[w for _, _, w in _ACLS])[0]
        self.acl = {"tenant": tenant, "read": list(read)}
        self.model = rng.choice(_MODELS)
        self.run_id: str | None = None
        self.turn_id: str | None = None
        self.episode_id: str | None = None

    # -- small pieces of realistic text ------------------------------------------------------

    def path(self) -> str:
        rng = self.rng
        top = rng.choice(("src", "src", "tests", "lib", "app", "deploy"))
        return f"{top}/{self.project.replace('-', '_')}/{rng.choice(_MODULES)}{rng.choice(_EXTS)}"

    def url(self) -> str:
        rng = self.rng
        return f"https://{rng.choice(_HOSTS)}/{self.topic}/{rng.choice(_MODULES)}?page={rng.randint(1, 9)}"

    def prose(self, low: int, high: int) -> str:
        rng = self.rng
        words = [rng.choice(self.rng.choice(self.issues).split()) if rng.random() < 0.15 else rng.choice(_FILLER)
                 for _ in range(rng.randint(low, high))]
        return " ".join(words).capitalize() + "."

    def code(self, lines: int) -> str:
        rng = self.rng
        name = rng.choice(_MODULES)
        body = [f"def {name}_{rng.choice(('load', 'apply', 'retry', 'round', 'parse'))}(value, *, timeout=30):",
                f"    \"\"\"{self.prose(4, 10)}\"\"\""]
        for n in range(lines):
            body.append(rng.choice((
                f"    result = {name}.{rng.choice(('get', 'fetch', 'compute'))}(value, attempt={n})",
                f"    if result is None:\n        raise ValueError(\"{self.topic} {rng.choice(self.issues)}\")",
                f"    logger.info(\"{rng.choice(self.issues)} %s\", result)",
                "    total += Decimal(result).quantize(Decimal(\"0.01\"), rounding=ROUND_HALF_EVEN)",
                "    for item in items:\n        yield item",
            )))
        body.append("    return result")
        return "\n".join(body)

    def log_lines(self, lines: int) -> str:
        rng = self.rng
        out = []
        for n in range(lines):
            level = rng.choice(_LEVELS)
            out.append(f"2026-11-02T{8 + n // 3600 % 12:02d}:{n // 60 % 60:02d}:{n % 60:02d}.{rng.randint(0, 999):03d}Z "
                       f"{level} [{self.project}.{rng.choice(_MODULES)}] {rng.choice(self.issues)}: "
                       f"{self.prose(3, 12)} id={rng.getrandbits(32):08x}")
        return "\n".join(out)

    def stack_trace(self) -> str:
        rng = self.rng
        frames = [f"  File \"/srv/{self.project}/{self.path()}\", line {rng.randint(10, 900)}, in "
                  f"{rng.choice(_MODULES)}_{rng.choice(('load', 'apply', 'handle'))}\n    {self.code(0).splitlines()[0]}"
                  for _ in range(rng.randint(2, 6))]
        error = rng.choice(("ValueError", "KeyError", "TimeoutError", "AssertionError", "ConnectionResetError"))
        return "Traceback (most recent call last):\n" + "\n".join(frames) + f"\n{error}: {rng.choice(self.issues)}"

    def listing(self) -> str:
        rng = self.rng
        return "\n".join(f"-rw-r--r--  1 {self.user} staff {rng.randint(100, 90000):>6} Nov  2 0{rng.randint(0, 9)}:"
                         f"{rng.randint(10, 59)} {self.path().rsplit('/', 1)[-1]}" for _ in range(rng.randint(3, 15)))

    def grown(self, text: str, size: int, more: Any) -> str:
        """``text`` extended with ``more()`` pieces until it is about ``size`` bytes long."""
        parts, length = [text], len(text)
        while length < size:
            piece = more()
            parts.append(piece)
            length += len(piece) + 1
        return "\n".join(parts)[:max(size, len(text))]

    def payload(self, kind: str, echo: Any) -> dict[str, Any]:
        """The raw record an importer keeps beside the event (Claude Code's line: ids, cwd,
        version, branch, the message, and for tools ``toolUseResult``), at most 16 KiB of it."""
        rng = self.rng
        record: dict[str, Any] = {
            "parentUuid": f"{rng.getrandbits(128):032x}", "isSidechain": False, "userType": "external",
            "cwd": f"/home/{self.user}/src/{self.project}", "sessionId": self.session_id, "version": "2.1.39",
            "gitBranch": f"{self.topic}-{rng.randint(1, 999)}", "type": kind, "uuid": f"{rng.getrandbits(128):032x}",
            "requestId": f"req_{rng.getrandbits(96):024x}",
        }
        record["message"] = {"role": "assistant" if kind == "assistant" else "user", "model": self.model,
                             "content": [{"type": "text", "text": ""}],
                             "usage": {"input_tokens": rng.randint(3, 90), "cache_read_input_tokens": rng.randint(0, 90000),
                                       "output_tokens": rng.randint(1, 4000)}}
        budget = _PAYLOAD_MAX_BYTES - 1200
        if isinstance(echo, str):
            record["message"]["content"][0]["text"] = echo[:budget // 2]
            if kind == "user":
                record["toolUseResult"] = {"stdout": echo[:budget // 2], "stderr": "", "interrupted": False}
        else:
            record["message"]["content"][0] = {"type": "tool_use", "input": echo}
        return record

    def secret_line(self) -> str:
        rng = self.rng
        return rng.choice(_SECRET_SHAPES).format(secret=rng.choice(SEEDED_SECRETS))

    # -- events ------------------------------------------------------------------------------

    def add(self, kind: str, *, role: str | None = None, parent: str | None = None, payload: Any = None,
            **fields: Any) -> str:
        self.clock += timedelta(milliseconds=self.rng.randint(300, 15000))
        event_id = f"{self.session_id[:12]}-e{len(self.events)}"
        event: dict[str, Any] = {
            "eventId": event_id, "logId": self.config.log_id, "sessionId": self.session_id,
            "runId": self.run_id, "turnId": self.turn_id, "episodeId": self.episode_id,
            "parentEventId": parent, "type": kind, "role": role,
            "time": self.clock.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.clock.microsecond // 1000:03d}Z",
            "acl": self.acl, "fields": fields,
        }
        if payload is not None:
            event["payload"] = payload
        self.events.append(validate_event(event))
        return event_id

    def tool_call(self) -> None:
        rng = self.rng
        tool = rng.choice(("Bash", "Bash", "Read", "Read", "Edit", "Grep", "WebFetch", "run_sql", "ls"))
        call_id = f"toolu_{rng.getrandbits(64):016x}"
        status = "error" if rng.random() < 0.15 else "ok"
        long = rng.random() < self.config.long_output_share
        if tool == "Bash":
            command = rng.choice((f"pytest {self.path()} -k {rng.choice(_MODULES)} -x -q",
                                  f"docker compose logs --tail {rng.randint(20, 500)} {rng.choice(_MODULES)}",
                                  f"curl -s {self.url()}", f"git log --oneline -n {rng.randint(3, 20)}",
                                  f"make -C {self.project} test"))
            params: dict[str, Any] = {"command": command, "timeout": rng.choice((60, 120, 600))}
            output = self.log_lines(rng.randint(60, 200) if long else rng.randint(3, 25))
            if status == "error":
                output += "\n" + self.stack_trace()
        elif tool == "Read":
            params = {"path": self.path(), "offset": rng.randint(0, 200), "limit": rng.choice((50, 200, 2000))}
            output = "\n".join(f"{n + 1:>5}\t{line}" for n, line in
                               enumerate(self.code(rng.randint(60, 150) if long else rng.randint(4, 30)).splitlines()))
        elif tool == "Edit":
            params = {"path": self.path(), "old_string": self.code(1), "new_string": self.code(2)}
            output = f"Applied 1 edit to {params['path']}"
        elif tool == "Grep":
            params = {"pattern": rng.choice(self.issues).split()[0], "path": f"src/{self.project}", "-n": True}
            output = "\n".join(f"{self.path()}:{rng.randint(1, 900)}: {self.code(0).splitlines()[0]}"
                               for _ in range(rng.randint(1, 20)))
        elif tool == "WebFetch":
            params = {"url": self.url(), "prompt": f"summarize the {rng.choice(self.issues)} section"}
            output = f"# {self.topic} {rng.choice(self.issues)}\n\n{self.prose(40, 160)}\n\nSee {self.url()}"
        elif tool == "run_sql":
            params = {"query": f"SELECT id, status, amount FROM {rng.choice(_MODULES)} WHERE created_at > now() - "
                               f"interval '{rng.randint(1, 30)} days' ORDER BY amount DESC LIMIT {rng.randint(5, 50)}"}
            output = "id | status | amount\n" + "\n".join(
                f"{rng.randint(1000, 99999)} | {rng.choice(('paid', 'refunded', 'open'))} | {rng.randint(1, 9999)}.{rng.randint(0, 99):02d}"
                for _ in range(rng.randint(2, 20)))
        else:
            params = {"path": f"src/{self.project}", "all": rng.random() < 0.5}
            output = self.listing()
        real = self.config.sizes == "real"
        if real:
            if tool == "Edit":
                size = _heavy_size(rng, *_EDIT_INPUT_BYTES) // 2
                params["old_string"] = self.grown(params["old_string"], size, lambda: self.code(2))
                params["new_string"] = self.grown(params["new_string"], size, lambda: self.code(2))
            else:
                more = {"Bash": lambda: self.log_lines(4), "Read": lambda: self.code(6), "WebFetch": lambda: self.prose(40, 80),
                        "Grep": lambda: f"{self.path()}:{rng.randint(1, 900)}: {self.code(0).splitlines()[0]}"}
                output = self.grown(output, _heavy_size(rng, *_TOOL_OUTPUT_BYTES), more.get(tool, self.listing))
        if rng.random() < self.config.secret_share:
            lines = output.split("\n")
            lines.insert(rng.randint(0, len(lines)), self.secret_line())
            output = "\n".join(lines)
        call = self.add("tool.call", role="assistant", toolName=tool, toolCallId=call_id, input=params,
                        payload=self.payload("assistant", params) if real else None)
        self.add("tool.result", role="tool", parent=call, toolName=tool, toolCallId=call_id, status=status,
                 output=output, payload=self.payload("user", output) if real else None)

    def turn(self, number: int) -> None:
        rng = self.rng
        self.turn_id = f"{self.session_id[:12]}-t{number}"
        self.add("turn.started")
        ask = (f"Can you {rng.choice(_VERBS)} the {rng.choice(self.issues)} in {self.path()}? "
               f"{self.prose(5, 30)}")
        if rng.random() < 0.3:
            ask += "\n\n" + self.log_lines(rng.randint(2, 6))
        real = self.config.sizes == "real"
        if real:
            ask = self.grown(ask, _heavy_size(rng, *_USER_TEXT_BYTES), lambda: self.log_lines(3))
        if rng.random() < self.config.secret_share / 2:
            ask += "\n" + self.secret_line()
        self.add("message", role="user", text=ask)
        for _ in range(rng.randint(1, 4)):
            if rng.random() < 0.4:
                text = self.prose(8, 40)
                if real:
                    text = self.grown(text, _heavy_size(rng, *_ASSISTANT_TEXT_BYTES), lambda: self.prose(20, 60))
                self.add("message", role="assistant", text=text, payload=self.payload("assistant", text) if real else None)
            self.tool_call()
        answer = self.prose(20, 120)
        if rng.random() < 0.5:
            answer += f"\n\n```python\n{self.code(rng.randint(3, 15))}\n```\n\n{self.prose(5, 30)}"
        if real:
            answer = self.grown(answer, _heavy_size(rng, *_ASSISTANT_TEXT_BYTES), lambda: self.prose(20, 60))
        self.add("message", role="assistant", text=answer, model=self.model,
                 usage={"inputTokens": rng.randint(500, 90000), "outputTokens": rng.randint(50, 4000)},
                 payload=self.payload("assistant", answer) if real else None)
        self.add("turn.ended")
        self.turn_id = None

    def build(self) -> list[dict[str, Any]]:
        rng, config = self.rng, self.config
        self.add("session.started", title=f"{rng.choice(_VERBS)} {self.topic} {rng.choice(self.issues)}",
                 model=self.model, cwd=f"/home/{self.user}/src/{self.project}", source=rng.choice(_SOURCES))
        turns = rng.randint(config.min_turns, config.max_turns)
        runs = 2 if turns >= 4 and rng.random() < 0.3 else 1
        number = 0
        for run in range(runs):
            self.run_id = f"{self.session_id[:12]}-r{run}"
            self.add("run.started")
            episode = rng.random() < config.episode_share
            if episode:
                self.episode_id = f"{self.session_id[:12]}-ep{run}"
                self.add("episode.started", title=f"{rng.choice(_VERBS)} {rng.choice(self.issues)}")
            for _ in range(turns // runs + (turns % runs if run == runs - 1 else 0)):
                self.turn(number)
                number += 1
            if episode:
                self.add("episode.ended")
                self.episode_id = None
            self.add("run.ended")
        self.run_id = None
        self.add("session.ended")
        return self.events


def session_events(config: WorkloadConfig, number: int, start: datetime | None = None) -> list[dict[str, Any]]:
    """The validated events of session ``number`` of the workload ``config``."""
    return _Session(config, number, start or config.start).build()


def generate(*, events: int | None = None, sessions: int | None = None, seed: int = 0,
             config: WorkloadConfig | None = None, exact: bool = False) -> Iterator[dict[str, Any]]:
    """Validated ASP events of whole sessions, ``concurrent`` open at a time, in time order.

    With ``events``, sessions are started until that many events are planned, so the total is
    at least ``events`` (whole sessions, every turn closed) and at most one session more;
    ``exact=True`` stops at exactly ``events`` (the last sessions are then left open).
    """
    if (events is None) == (sessions is None):
        raise ValueError("give exactly one of events= or sessions=")
    if (events is not None and events < 0) or (sessions is not None and sessions < 0):
        raise ValueError("events and sessions must be >= 0")
    config = config or WorkloadConfig(seed=seed)
    if config.concurrent < 1:
        raise ValueError("concurrent must be >= 1")
    started = planned = emitted = 0
    # (time of next event, session number, position, events): ties break on session number.
    heap: list[tuple[str, int, int, list[dict[str, Any]]]] = []
    gap = random.Random(f"{config.seed}:gaps")

    def more() -> bool:
        return started < sessions if sessions is not None else planned < (events or 0)

    def start(at: datetime) -> None:
        nonlocal started, planned
        built = session_events(config, started, at)
        heapq.heappush(heap, (built[0]["time"], started, 0, built))
        started += 1
        planned += len(built)

    for slot in range(config.concurrent):
        if more():
            start(config.start + timedelta(seconds=slot * 37))
    while heap:
        _, number, position, built = heapq.heappop(heap)
        yield built[position]
        emitted += 1
        if exact and events is not None and emitted >= events:
            return
        if position + 1 < len(built):
            heapq.heappush(heap, (built[position + 1]["time"], number, position + 1, built))
        elif more():
            last = datetime.fromisoformat(built[-1]["time"].replace("Z", "+00:00"))
            start(last + timedelta(seconds=gap.randint(5, 600)))


def write_jsonl(path: Path, events: Iterator[dict[str, Any]]) -> int:
    """Write canonical JSON lines; return how many."""
    count = 0
    with path.open("wb") as out:
        for event in events:
            out.write(canonical_bytes(event) + b"\n")
            count += 1
    return count


def _append_l1(events: Iterator[dict[str, Any]]) -> tuple[int, int]:
    from streams.l1 import L1Producer
    from streams.settings import Settings
    from streams.topics import ensure_topics

    settings = Settings.from_env()
    bootstrap = settings.bootstrap_servers
    if not bootstrap:
        from deploy.kafka.broker import ensure_broker

        bootstrap = ensure_broker(settings)
    ensure_topics(bootstrap, settings)
    producer = L1Producer(bootstrap, settings)
    count = 0
    try:
        for event in events:
            producer.append(event)
            count += 1
        head = producer.flush()
    finally:
        producer.close()
    return count, head


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.workload",
                                     description="Generate realistic, seeded agent sessions as ASP v1 events.")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--events", type=int, help="at least this many events (whole sessions)")
    size.add_argument("--sessions", type=int, help="exactly this many sessions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrent", type=int, default=8, help="sessions open at a time (interleaved)")
    parser.add_argument("--secret-share", type=float, default=0.02,
                        help="share of tool results carrying a seeded fake secret")
    parser.add_argument("--log-id", default="default")
    parser.add_argument("--sizes", choices=("real", "compact"), default="real",
                        help="event sizes: of real transcripts (default) or the earlier small events")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", type=Path, help="write canonical JSONL here ('-' for stdout)")
    target.add_argument("--l1", action="store_true", help="append into L1 with streams.l1.L1Producer")
    args = parser.parse_args(argv)
    if (args.events is not None and args.events < 0) or (args.sessions is not None and args.sessions < 0):
        parser.error("--events/--sessions must be >= 0")
    if args.concurrent < 1:
        parser.error("--concurrent must be >= 1")
    if not 0 <= args.secret_share <= 1:
        parser.error("--secret-share must be between 0 and 1")
    config = WorkloadConfig(seed=args.seed, log_id=args.log_id, concurrent=args.concurrent,
                            secret_share=args.secret_share, sizes=args.sizes)
    events = generate(events=args.events, sessions=args.sessions, config=config)
    try:
        if args.l1:
            count, head = _append_l1(events)
            print(f"appended {count} events to log {args.log_id}; highest seq {head}")
        elif str(args.out) == "-":
            for event in events:
                sys.stdout.buffer.write(canonical_bytes(event) + b"\n")
        else:
            count = write_jsonl(args.out, events)
            print(f"wrote {count} events to {args.out}", file=sys.stderr)
    except Exception as error:  # a clear message, not a traceback
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
