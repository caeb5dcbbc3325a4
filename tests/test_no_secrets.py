"""Invariant 7: no secret reaches any index file, downstream topic, log line or metric label.

The whole redaction battery (``tests/fixtures/secrets/battery.jsonl``: every format in every
context, the ~4 300 cases redaction handles alone) rides along in six sessions of messages and tool results; the
distinctive parts of its secrets are needles like the seeded secrets'.

Sessions carrying the redaction policy's seeded fake secrets (``SEEDED_SECRETS``) plus a
private key block, an environment dump and a password URL — planted in titles, user and
assistant messages, nested tool inputs, field names, tool outputs and opaque payloads — go
through the whole pipeline (``usl worker`` and every sink as real processes). Then everything
downstream of L1 is scanned: the raw bytes of every file under ``$USL_HOME``, the decompressed
content of every index (tantivy stored documents and term dictionaries, Parquet rows), every
record of every topic of the deployment except L1 itself (which legitimately holds the raw
events: it is the positive control that the secrets were planted and the scan finds them), the
process logs and the ``/metrics`` text of every process, the planner API (``usl serve`` with an
API key) included, and the API's answers to searches over those sessions. Bad input ingested
through the CLI becomes a dead letter whose raw text is redacted. The API key itself appears in
no log, metric or file (the keys file holds only its hash).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
import tantivy
from kafka import KafkaConsumer

from deploy.testing import Stack, settings_env
from planner.auth import create_key, keys_path
from sinks.service import ALL_KINDS
from sinks.testing import current_generation, tantivy_docs, wait_for_watermarks
from sinks.text import get_engine
from sinks.text.tantivy_engine import TantivyEngine
from streams.asp import validate_event
from streams.l1 import read_topic_to_end
from streams.redaction.samples import SEEDED_SECRETS
from streams.settings import Settings
from streams.testing import append_events, chunk_set, interleave, session_events, topic_records
from streams.topics import Topics
from tests.fixtures.secrets import battery
from tests.fixtures.secrets.needles import (
    BATTERY_CASES,
    ENV_DUMP,
    NEEDLES,
    PASSWORD_URL,
    PRINTED_KEY,
    PRIVATE_KEY,
    REPEATED_PASSWORD,
    find_needles,
)


def _secret_session(number: int, secret: str, *, session_id: str | None = None) -> list[dict[str, Any]]:
    """One session with ``secret`` in every place a user or tool could put it (with
    ``session_id`` holding a secret, also in every id: session, turn and event ids)."""
    session_id = session_id or f"sec-{number:02d}"
    turn = f"{session_id}-t0"
    clock = datetime(2026, 11, 2, 10, 0, tzinfo=UTC) + timedelta(minutes=number)
    events: list[dict[str, Any]] = []

    def add(kind: str, role: str | None, fields: dict[str, Any], **extra: Any) -> None:
        nonlocal clock
        clock += timedelta(seconds=3)
        events.append(validate_event({
            "eventId": f"{session_id}-e{len(events) + 1}", "logId": "default", "sessionId": session_id,
            "type": kind, "role": role, "time": clock.isoformat().replace("+00:00", "Z"),
            "turnId": None if kind == "session.started" else turn, "fields": fields, **extra,
        }))

    add("session.started", None, {"title": f"debug login with {secret}", "model": "test-model"},
        payload={"raw": secret, "env": ENV_DUMP})
    add("turn.started", None, {})
    add("message", "user", {"text": f"deploy failed, the token is {secret} and the key:\n{PRIVATE_KEY}"})
    add("tool.call", "assistant", {
        "toolName": "Bash", "toolCallId": f"{turn}-c0",
        "input": {"command": f"curl -H 'Authorization: Bearer {secret}' {PASSWORD_URL}",
                  "env": {"nested": {"deeper": [f"API_TOKEN={secret}", {"password": secret}]}},
                  f"header {secret}": "x"},
    })
    add("tool.result", "tool", {"toolName": "Bash", "toolCallId": f"{turn}-c0", "status": "error",
                                "output": f"$ env\n{ENV_DUMP}\nusing {secret}\n{PRIVATE_KEY}\nexit 1"})
    add("message", "assistant", {"text": f"Rotate {secret}; clone via {PASSWORD_URL} and check the refund deploy"})
    add("turn.ended", None, {})
    return events


def _repeat_session() -> list[dict[str, Any]]:
    """A password named once, in a tool's env dump, then repeated bare where nothing names it:
    the assistant's prose, a later command, another tool's output, a later turn's user message;
    and the output of `openssl rand -hex 16`, whose command is another event, then repeated
    (the session's memory, policy 2.18)."""
    session_id = "repeats"
    clock = datetime(2026, 11, 5, 9, 0, tzinfo=UTC)
    bodies: list[tuple[str, str | None, str, dict[str, Any]]] = [("session.started", None, "", {"title": "db debugging"})]
    for turn in ("t0", "t1"):
        bodies.append(("turn.started", None, turn, {}))
        if turn == "t0":
            bodies += [
                ("message", "user", turn, {"text": "why can the app not log in to postgres?"}),
                ("tool.call", "assistant", turn, {"toolName": "Bash", "toolCallId": "r-c0", "input": {"command": "env"}}),
                ("tool.result", "tool", turn, {"toolName": "Bash", "toolCallId": "r-c0", "status": "ok",
                                               "output": f"HOME=/home/bob\nPATH=/usr/bin\nDB_PASSWORD={REPEATED_PASSWORD}\n"
                                                         "LANG=C.UTF-8\n"}),
                ("message", "assistant", turn, {"text": f"The app logs in with {REPEATED_PASSWORD}; let me try it by hand."}),
                ("tool.call", "assistant", turn, {"toolName": "Bash", "toolCallId": "r-k0",
                                                  "input": {"command": "openssl rand -hex 16"}}),
                ("tool.result", "tool", turn, {"toolName": "Bash", "toolCallId": "r-k0", "status": "ok",
                                               "output": f"{PRINTED_KEY}\n"}),
                ("message", "assistant", turn, {"text": f"Use {PRINTED_KEY} as the new app secret."}),
            ]
        else:
            bodies += [
                ("message", "user", turn, {"text": f"try psql with {REPEATED_PASSWORD} again"}),
                ("tool.call", "assistant", turn, {"toolName": "Bash", "toolCallId": "r-c1",
                                                  "input": {"command": f"echo {REPEATED_PASSWORD} | psql -h db -W app"}}),
                ("tool.result", "tool", turn, {"toolName": "Bash", "toolCallId": "r-c1", "status": "error",
                                               "output": f"psql: FATAL: password '{REPEATED_PASSWORD}' rejected for app"}),
            ]
        bodies.append(("turn.ended", None, turn, {}))
    return [validate_event({
        "eventId": f"{session_id}-e{index}", "logId": "default", "sessionId": session_id, "type": kind, "role": role,
        "time": (clock + timedelta(seconds=5 * index)).isoformat().replace("+00:00", "Z"),
        "turnId": f"{session_id}-{turn}" if turn else None, "fields": fields,
    }) for index, (kind, role, turn, fields) in enumerate(bodies)]


def _battery_sessions(sessions: int = 6, per_event: int = 40) -> list[list[dict[str, Any]]]:
    """The whole battery (every format in every context) in a few sessions: user and assistant
    messages and tool results of ``per_event`` cases each."""
    return [_battery_session(number, BATTERY_CASES[number::sessions], per_event) for number in range(sessions)]


def _battery_session(number: int, cases: list[battery.Case], per_event: int) -> list[dict[str, Any]]:
    session_id = f"battery-{number}"
    turn = f"{session_id}-t0"
    start_time = datetime(2026, 11, 4, 10, 0, tzinfo=UTC) + timedelta(minutes=number)
    bodies: list[tuple[str, str | None, dict[str, Any]]] = [
        ("session.started", None, {"title": "battery", "model": "test-model"}), ("turn.started", None, {})]
    for start in range(0, len(cases), per_event):
        block = "\n\n".join(case.text for case in cases[start: start + per_event])
        kind = (start // per_event) % 3
        if kind == 0:
            bodies.append(("message", "user", {"text": block}))
        elif kind == 1:
            call = f"{turn}-c{start}"
            bodies.append(("tool.call", "assistant", {"toolName": "Bash", "toolCallId": call, "input": {"command": block}}))
            bodies.append(("tool.result", "tool", {"toolName": "Bash", "toolCallId": call, "status": "ok", "output": block}))
        else:
            bodies.append(("message", "assistant", {"text": block}))
    bodies.append(("turn.ended", None, {}))
    return [validate_event({
        "eventId": f"{session_id}-e{index + 1}", "logId": "default", "sessionId": session_id, "type": kind,
        "role": role, "time": (start_time + timedelta(seconds=2 * index)).isoformat().replace("+00:00", "Z"),
        "turnId": None if kind == "session.started" else turn, "fields": fields,
    }) for index, (kind, role, fields) in enumerate(bodies)]


def _scan_files(root: Path) -> tuple[list[str], int]:
    leaks: list[str] = []
    count = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        count += 1
        leaks += find_needles(path.read_bytes(), str(path.relative_to(root)))
    return leaks, count


def _scan_indexes(settings: Settings) -> tuple[list[str], dict[str, int]]:
    """Decompressed contents of every index: stored docs, term dictionaries, Parquet rows."""
    leaks: list[str] = []
    seen: dict[str, int] = {}
    analyzer = TantivyEngine()  # the text index's analyzer: needles as they would be indexed
    terms = sorted({t for needle in NEEDLES for t in analyzer.analyze(needle) if len(t) >= 12})
    for kind, key in (("text", "chunkId"), ("toolresults", "id")):
        gen_dir = current_generation(settings, kind)
        assert gen_dir is not None
        docs = tantivy_docs(gen_dir, key)
        seen[kind] = len(docs)
        leaks += [leak for doc in docs for leak in find_needles(json.dumps(doc), f"{kind} doc {doc[key]}")]
        index = tantivy.Index.open(str(gen_dir))
        searcher = index.searcher()
        for term in terms:
            if searcher.search(tantivy.Query.term_query(index.schema, "text", term), limit=1).hits:
                leaks.append(f"{kind} term dictionary holds {term[:10]}…")
    for kind in ("structured", "analytics"):
        gen_dir = current_generation(settings, kind)
        assert gen_dir is not None
        rows = 0
        for path in sorted(gen_dir.glob("*.parquet")):
            table = pq.read_table(path).to_pylist()
            rows += len(table)
            leaks += find_needles(json.dumps(table, default=str), f"{kind}/{path.name}")
        seen[kind] = rows
    return leaks, seen


def _scan_topics(settings: Settings) -> tuple[list[str], dict[str, int], list[str]]:
    """Every record (key and value) of every topic of this deployment; L1 separately."""
    bootstrap = settings.bootstrap_servers or ""
    topics = Topics.from_settings(settings)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        names = sorted(t for t in consumer.topics() if t.startswith(settings.topic_prefix))
    finally:
        consumer.close()
    leaks: list[str] = []
    counts: dict[str, int] = {}
    l1_hits: list[str] = []
    for name in names:
        records = list(read_topic_to_end(bootstrap, name))
        counts[name[len(settings.topic_prefix):]] = len(records)
        for record in records:
            blob = (record.key or b"") + b"\x00" + (record.value or b"")
            found = find_needles(blob, f"{name}@{record.partition}:{record.offset}", lowercase=False)
            if name == topics.l1:
                l1_hits += found
            else:
                leaks += found
    return leaks, counts, l1_hits


def _metrics_text(stack: Stack) -> dict[str, str]:
    texts = {}
    for name in ("worker", "sinks"):
        match = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", stack.log_text(name))
        assert match, f"no metrics address in the {name} log"
        with urllib.request.urlopen(match.group(1), timeout=30) as response:
            texts[name] = response.read().decode()
    return texts


def _query_the_api(stack: Stack, key: str) -> tuple[list[str], str]:
    """Run ``usl serve`` with ``key``, search the secret sessions (as the key's principal, with
    explain, indexed and latest), send a secret as a query and a wrong key, then scrape its
    /metrics. Returns the answers (which must hold no secret) and the /metrics text."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    stack.start("api", "serve", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).json().get("ready"):
                break
        except httpx.HTTPError:
            pass
        assert stack.procs["api"].poll() is None, stack.log_text("api")[-3000:]
        assert time.monotonic() < deadline, "the planner API did not become ready"
        time.sleep(0.3)
    auth = {"Authorization": f"Bearer {key}"}
    answers = []
    for body in ({"query": "debug login token deploy", "k": 50, "explain": True},
                 {"query": "refund deploy rotate clone", "k": 50, "freshness": "latest", "explain": True},
                 {"query": "curl authorization bearer env", "k": 50, "toolResults": True},
                 {"query": "psql password rejected app logs in", "k": 50, "freshness": "latest", "toolResults": True}):
        response = httpx.post(f"{base}/v1/search", json=body, headers=auth, timeout=120)
        assert response.status_code == 200 and response.json()["results"], response.text[:2000]
        answers.append(response.text)
    # The export reads the sessions from L1 and redacts them again, the memory with them.
    export = httpx.get(f"{base}/v1/export", params={"what": "sessions", "sessionId": "repeats"}, headers=auth,
                       timeout=120)
    assert export.status_code == 200 and export.text.count("\n") >= 10, export.text[:2000]
    answers.append(export.text)
    sql = httpx.post(f"{base}/v1/sql", json={"query": "SELECT title FROM sessions"}, headers=auth, timeout=120)
    assert sql.status_code == 200, sql.text[:2000]
    answers.append(sql.text)
    # A secret typed as a query, and a wrong key: neither may reach the log or the metrics.
    httpx.post(f"{base}/v1/search", json={"query": SEEDED_SECRETS[0]}, headers=auth, timeout=120)
    wrong = httpx.get(f"{base}/v1/status", headers={"Authorization": f"Bearer {key[:-4]}XXXX"}, timeout=30)
    assert wrong.status_code == 401
    metrics = httpx.get(f"{base}/metrics", timeout=30).text
    assert "usl_queries_total" in metrics
    return answers, metrics


def _oversized_output() -> str:
    """~2 MB of tool output with a seeded secret every 40 lines and key blocks and environment
    dumps along the way: ingest cuts it to USL_MAX_EVENT_BYTES, the cut must leave no secret
    half-visible, and the event, a whole event again after redaction, must fit every topic."""
    lines = []
    for n in range(40_000):
        if n % 40 == 0:
            lines.append(f"retry {n}: using {SEEDED_SECRETS[n // 40 % len(SEEDED_SECRETS)]}")
        elif n % 997 == 0:
            lines.append(f"{PRIVATE_KEY}\n{ENV_DUMP}")
        else:
            lines.append(f"INFO worker {n % 8} flushed batch {n} in {n % 89} ms")
    return "\n".join(lines)


def _ingest_bad_lines(settings: Settings, directory: Path) -> subprocess.CompletedProcess[str]:
    """``usl ingest`` of a file whose bad lines carry secrets (bad JSON, bad schema, a long
    line with the secret near the dead letter's 4 KiB raw-text limit) and whose one oversized
    event does too."""
    aws, github, jwt = SEEDED_SECRETS[0], SEEDED_SECRETS[2], SEEDED_SECRETS[15]
    good = [validate_event({"eventId": f"ing-ok-{n}", "logId": "default", "sessionId": "ing", "type": kind,
                            "role": role, "turnId": "ing-t0", "time": f"2026-11-03T10:00:0{n}Z", "fields": fields})
            for n, (kind, role, fields) in enumerate([
                ("turn.started", None, {}),
                ("message", "user", {"text": "a fine line"}),
                ("tool.result", "tool", {"toolName": "Bash", "toolCallId": "ing-c0", "status": "ok",
                                         "output": _oversized_output()}),
                ("turn.ended", None, {})])]
    lines = [
        *(json.dumps(event) for event in good),
        '{"eventId": "ing-bad-1", "type": "message", "fields": {"text": "my key ' + aws + ' and ' + github,
        json.dumps({"eventId": "ing-bad-2", "sessionId": "ing", "type": "message", "time": f"at {jwt}",
                    "fields": {"text": f"token {github}"}}),
        '{"eventId": "ing-bad-3", "pad": "' + "x" * 4000 + " " + aws + " " + "y" * 200 + '", "broken": ',
    ]
    return _ingest(settings, directory, lines)


def _ingest(settings: Settings, directory: Path, lines: list[str]) -> subprocess.CompletedProcess[str]:
    path = directory / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return subprocess.run([sys.executable, "-m", "deploy.cli", "ingest", str(path), "--format", "asp", "--json"],
                          env=settings_env(settings), capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.slow
def test_no_seeded_secret_reaches_any_index_topic_log_or_metric(
        make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    """After the whole pipeline indexed sessions full of seeded secrets, no secret nor any of
    its distinctive parts is in any file under USL_HOME, any index's decompressed content,
    any topic record except L1's, any process log or any /metrics text; L1 (the positive
    control) holds every one of them; dead letters of bad CLI input carry redacted raw text."""
    settings = make_settings(embedder="hash:64")
    secrets = [*SEEDED_SECRETS, PASSWORD_URL]
    sessions = [_secret_session(i, secret) for i, secret in enumerate(secrets)]
    # Ids are raw producer values too: the redacted topics' keys and the worker's table keys
    # (changelog topics) must not carry a secret placed in one.
    sessions.append(_secret_session(len(secrets), SEEDED_SECRETS[2], session_id=f"run-{SEEDED_SECRETS[2]}"))
    sessions += [session_events(f"plain-{i}", turns=2, seed=i, secret=SEEDED_SECRETS[i]) for i in range(3)]
    sessions += _battery_sessions()
    sessions.append(_repeat_session())
    events = interleave(*sessions, seed=7)
    stack = Stack(settings)
    # Every secret session is readable by this key's principal, so the answers cover them all.
    api_key, _ = create_key(keys_path(settings), "tenant:default/user:local/scopes:toolresults")
    try:
        stack.worker()
        stack.sinks()
        head = append_events(settings, events)
        ingest = _ingest_bad_lines(settings, tmp_path)
        assert ingest.returncode == 0, ingest.stderr[-2000:]
        summary = json.loads(ingest.stdout)
        assert (summary["eventsAppended"], summary["eventsCut"], summary["rejected"]) == (4, 1, 3)
        head = max(head, int(summary["l1CommittedSeq"]))
        wait_for_watermarks(settings, head, ALL_KINDS, timeout=240)
        metrics = _metrics_text(stack)
        answers, metrics["api"] = _query_the_api(stack, api_key)
    finally:
        stack.close()

    leaks: list[str] = []
    file_leaks, files = _scan_files(Path(settings.home))
    leaks += file_leaks
    index_leaks, indexed = _scan_indexes(settings)
    leaks += index_leaks
    topic_leaks, records, l1_hits = _scan_topics(settings)
    leaks += topic_leaks
    for name, text in metrics.items():
        leaks += find_needles(text, f"/metrics of {name}")
    leaks += find_needles(ingest.stdout + ingest.stderr, "usl ingest output")
    for number, answer in enumerate(answers):
        leaks += find_needles(answer, f"API answer {number}")
    assert "planner API on" in stack.log_text("api"), "the API log was not captured"
    key_parts = [api_key, api_key[4:20], api_key[-16:]]
    leaks += [f"API key in {path.name}" for path in Path(settings.home).rglob("*")
              if path.is_file() and any(part.encode() in path.read_bytes() for part in key_parts)]
    leaks += [f"API key in /metrics of {name}" for name, text in metrics.items()
              if any(part in text for part in key_parts)]
    assert not leaks, f"{len(leaks)} leaks, e.g. {leaks[:10]}"

    # Positive controls: the secrets were really planted, and the pipeline really indexed them.
    assert {hit.split(": ", 1)[1] for hit in l1_hits} >= {n[:10] + "…" for n in NEEDLES}
    chunks = chunk_set(settings)
    assert chunks and any(b"[REDACTED:" in body for body in chunks.values())
    assert indexed["text"] == len(chunks) and indexed["toolresults"] >= len(secrets)
    text_dir = current_generation(settings, "text")
    assert text_dir is not None and get_engine("tantivy").search(text_dir, "refund deploy", limit=5)
    tool_docs = tantivy_docs(current_generation(settings, "toolresults") or Path(), "id")
    assert any("REDACTED" in d["text"] for d in tool_docs)
    assert any("flushed batch" in d["text"] for d in tool_docs), "the cut oversized event was not indexed"
    letters = topic_records(settings, "deadletters")
    ingest_letters = [d for d in letters if d["stage"] == "ingest"]
    assert len(ingest_letters) == 3 and all(d["raw"] for d in ingest_letters)
    assert all("[REDACTED:" in d["raw"] for d in ingest_letters[:2])
    assert files > 20 and all(records.get(name, 0) > 0 for name in ("redacted", "toolresults", "chunks",
                                                                     "watermarks", "deadletters"))
    print(f"\nscanned {files} files, {sum(records.values())} topic records in {len(records)} topics, "
          f"{len(metrics)} /metrics texts; indexed {indexed}; {len(NEEDLES)} needles; L1 hits {len(l1_hits)}")


def test_dead_letter_of_a_secret_cut_at_the_raw_text_limit_leaks_nothing(
        make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    """A bad input line whose secret straddles the 4096-character raw-text limit: the dead
    letter must not carry the part of the secret before the cut."""
    settings = make_settings()
    Stack(settings)  # creates the topics
    aws = SEEDED_SECRETS[0]
    prefix = '{"eventId": "ing-cut", "pad": "'
    # The secret starts 14 characters before the cut.
    line = prefix + "x" * (4096 - 14 - len(prefix) - 1) + " " + aws + '", "broken": '
    ingest = _ingest(settings, tmp_path, [line])
    assert ingest.returncode == 0, ingest.stderr[-2000:]
    (letter,) = topic_records(settings, "deadletters")
    assert letter["raw"], "the dead letter has no raw text"
    assert not find_needles(json.dumps(letter), "dead letter")
