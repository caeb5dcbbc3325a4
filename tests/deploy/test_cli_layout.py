"""The command line's room (``deploy/cli``): each group adds exactly the commands it names, the
app a command runs with holds only its group, ``usl search --json`` through the API loads none
of the heavy libraries, and ``usl ingest`` none but kafka and rich."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import typer

from deploy.cli import GROUPS, app, app_for, build_app
from deploy.testing import RUN_AND_LIST_MODULES

ROOT = Path(__file__).resolve().parents[2]


def command_names(built: typer.Typer) -> set[str]:
    group = typer.main.get_command(built)
    return set(group.commands)  # type: ignore[attr-defined]


def test_each_group_registers_exactly_the_commands_it_names() -> None:
    seen: set[str] = set()
    for group in GROUPS:
        assert command_names(build_app([group])) == set(group.COMMANDS), group.__name__
        assert not seen & set(group.COMMANDS), f"{group.__name__} repeats a command of another group"
        seen |= set(group.COMMANDS)
    assert command_names(app) == seen


@pytest.mark.parametrize("group", GROUPS, ids=lambda group: group.__name__.rpartition(".")[2])
def test_a_command_runs_with_its_group_only(group: Any) -> None:
    for name in group.COMMANDS:
        assert command_names(app_for([name])) == set(group.COMMANDS)


@pytest.mark.parametrize("args", [[], ["--help"], ["--install-completion"], ["sarch"], ["search-x"]])
def test_anything_else_runs_with_the_whole_app(args: list[str]) -> None:
    assert app_for(args) is app


class _FakeAPI(BaseHTTPRequestHandler):
    """Just enough of the planner API for ``usl search --json``: ready, and one empty page.
    It answers in HTTP/1.0 and closes each connection, as a plain proxy might: the client
    opens a new one for the search after the health check."""

    answer = {"asOfSeq": 7, "freshness": {"mode": "indexed", "label": "indexed", "l1CommittedSeq": 7,
                                          "watermarks": {}, "tailScan": None, "uncovered": []},
              "results": [], "cursor": None}

    def _reply(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    status = {"logs": {"refunds": {"l1CommittedSeq": 7, "indexes": {
        kind: {"generationId": 3, "builtThroughSeq": 7, "lagSeqs": 0, "lagSeconds": 0.0, "lastCommit": 1.0,
               "line": "live", "verdict": "ok: caught up", "heldBy": None, "stalled": None,
               "redactionPolicy": "e6a48b952abcb39a"}
        for kind in ("text", "vector", "structured", "analytics", "toolresults")}}}}

    def do_GET(self) -> None:
        self._reply(self.status if self.path.startswith("/v1/status") else {"status": "ok", "ready": True})

    sql = {"columns": ["one"], "types": ["INTEGER"], "rows": [[1]], "rowCount": 1, "truncated": False,
           "asOfSeq": 7, "generations": {"analytics": {"generationId": 3, "builtThroughSeq": 7}}}

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._reply(self.sql if self.path.startswith("/v1/sql") else self.answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


HEAVY = ("faust", "aiokafka", "kafka", "pyarrow", "tantivy", "faiss", "numpy", "duckdb", "rich",
         "pydantic", "httpx", "uvicorn", "starlette", "planner.engine", "sinks", "wordllama")


def test_search_through_the_api_loads_no_heavy_library(fake_api: str, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "USL_API_URL": fake_api, "USL_HOME": str(tmp_path),
           "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    done = subprocess.run([sys.executable, "-c", RUN_AND_LIST_MODULES, "search", "refund", "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.rpartition("MODULES ")[2])
    assert report["code"] == 0, done.stderr
    assert json.loads(done.stdout) == _FakeAPI.answer  # the API's answer, as it came
    loaded = {name for name in report["modules"]
              if any(name == heavy or name.startswith(heavy + ".") for heavy in HEAVY)}
    assert not loaded, f"usl search --json through the API imported {sorted(loaded)}"
    assert "planner.client" in report["modules"]  # it did go through the API client


#: What ``usl search`` printing its hits may load besides what ``--json`` may: the console, and the
#: text index's folds its snippet marks words with (sinks.text.base, by way of the two packages).
SNIPPET_OK = ("rich", "sinks", "sinks.letter_folds")


def test_search_printing_its_hits_loads_the_folds_alone(fake_api: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The snippet's folds came with the generation store (sinks/__init__) and the ASP schema
    validator (streams.asp, for a date parser of the sink's): ~5 ms of the command's ~165 ms of
    CPU, paid on every search."""
    hit = {"chunkId": "c_1", "sessionId": "s-1", "runId": None, "turnId": None, "episodeId": None,
           "text": "[user] 退款 refund please", "evidence": [{"eventId": "e1", "seq": 7, "start": 0, "end": 10}],
           "score": {"rrf": 0.01639, "components": {"text": {"rank": 1, "contribution": 0.01639}}},
           "eventTime": "2026-01-01T00:00:00Z", "kind": "chunk", "origin": "index"}
    monkeypatch.setattr(_FakeAPI, "answer", {**_FakeAPI.answer, "results": [hit]})
    env = {"PATH": "/usr/bin:/bin", "USL_API_URL": fake_api, "USL_HOME": str(tmp_path),
           "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "COLUMNS": "120"}
    done = subprocess.run([sys.executable, "-c", RUN_AND_LIST_MODULES, "search", "refund"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.rpartition("MODULES ")[2])
    assert report["code"] == 0, done.stderr
    assert "sinks.letter_folds" in report["modules"]  # it did mark the words
    # ... without the text sink's analyzer, whose word patterns cost 80-140 ms to load
    assert "sinks.text.base" not in report["modules"]
    loaded = {name for name in report["modules"]
              if any(name == heavy or name.startswith(heavy + ".") for heavy in (*HEAVY, "streams.asp", "fastjsonschema"))
              and name not in SNIPPET_OK and not name.startswith("rich")}
    assert not loaded, f"usl search through the API imported {sorted(loaded)}"


#: What a command that only asks the API may load besides what ``usl search --json`` may: the
#: table it prints (rich).
TABLE_OK = ("rich",)
#: What builds a status report, which the API did: `usl status` imported the coherence checks,
#: the generation store and snapshot choice (through planner.status and deploy.stack) only to
#: render the API's answer, a fifth of the command's time.
STATUS_BUILDERS = ("planner.status", "planner.coherence", "planner.snapshot", "sinks")


@pytest.mark.parametrize("args", [["status", "--json"], ["status"], ["status", "--log", "refunds"],
                                  ["sql", "select 1"], ["sql", "select 1", "--json"]],
                         ids=" ".join)
def test_commands_answered_by_the_api_load_no_kafka(fake_api: str, tmp_path: Path, args: list[str]) -> None:
    """``usl status`` imported kafka (through planner.status and streams.topics) only to render
    what the API answered: a third of the command's time."""
    env = {"PATH": "/usr/bin:/bin", "USL_API_URL": fake_api, "USL_HOME": str(tmp_path),
           "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "COLUMNS": "120"}
    done = subprocess.run([sys.executable, "-c", RUN_AND_LIST_MODULES, *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.rpartition("MODULES ")[2])
    assert report["code"] == 0, done.stderr
    if args[0] == "status" and "--json" not in args:
        assert "ok: caught up" in done.stdout
    allowed = TABLE_OK if "--json" not in args else ()
    loaded = {name for name in report["modules"]
              if any(name == heavy or name.startswith(heavy + ".") for heavy in (*HEAVY, *STATUS_BUILDERS))
              and not any(name == ok or name.startswith(ok + ".") for ok in allowed)}
    assert not loaded, f"usl {' '.join(args)} through the API imported {sorted({n.split('.')[0] for n in loaded})}"


#: What ``usl ingest --json`` needs no more than the plain producer it is measured against does
#: (docs/benchmarks.md, issue #16): it does load kafka; no console (rich) and no metrics for a
#: process that prints JSON and serves no /metrics.
INGEST_HEAVY = (*(name for name in HEAVY if name != "kafka"), "prometheus_client")


@pytest.mark.kafka
def test_ingest_loads_no_heavy_library(make_settings: Any, tmp_path: Path) -> None:
    settings = make_settings()
    transcript = ROOT / "examples" / "sessions" / "claude-code-session.jsonl"
    env = {"PATH": "/usr/bin:/bin", "USL_HOME": str(settings.home), "USL_TOPIC_PREFIX": settings.topic_prefix,
           "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers}
    done = subprocess.run([sys.executable, "-c", RUN_AND_LIST_MODULES, "ingest", str(transcript), "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.rpartition("MODULES ")[2])
    assert report["code"] == 0, done.stderr
    assert json.loads(done.stdout)["eventsAppended"] > 10
    loaded = {name for name in report["modules"]
              if any(name == heavy or name.startswith(heavy + ".") for heavy in INGEST_HEAVY)}
    assert not loaded, f"usl ingest imported {sorted(loaded)}"


#: What ``usl --version`` reads: the chunker's tokenizer identity (numpy and the tokenizer come
#: with it) and the redaction policy; not the sinks' writers.
VERSION_HEAVY = ("faust", "aiokafka", "kafka", "pyarrow", "tantivy", "faiss", "duckdb", "sinks.runner",
                 "sinks.objectstore", "planner.engine")


def test_version_loads_no_writer(tmp_path: Path) -> None:
    """``usl --version`` took half a second importing pyarrow and kafka through sinks.service
    (the sinks' writers) for three lines of versions."""
    env = {"PATH": "/usr/bin:/bin", "USL_HOME": str(tmp_path), "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    done = subprocess.run([sys.executable, "-c", RUN_AND_LIST_MODULES, "--version"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.rpartition("MODULES ")[2])
    assert report["code"] == 0, done.stderr
    assert done.stdout.startswith("usl-search ") and "redaction policy" in done.stdout
    loaded = {name for name in report["modules"]
              if any(name == heavy or name.startswith(heavy + ".") for heavy in VERSION_HEAVY)}
    assert not loaded, f"usl --version imported {sorted(loaded)}"
