"""The CLI of a ``USL_HOME`` where nothing runs (no ``usl up``, no ``KAFKA_BOOTSTRAP_SERVERS``).

A read-only command started the local broker, left it running after it exited, and then said
that no log existed. It now starts nothing and says, in one line, what to start. ``usl ingest``
needs a broker and starts one, says that nothing indexes until ``usl up``, and stops the broker
it started when it ends; so do the other commands that need a broker and end (``deadletters``,
``topics create``, ``rebuild``), which left theirs running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.kafka.broker import local_broker_status, stop_broker
from deploy.process import pid_alive
from deploy.testing import RUN_AND_LIST_MODULES
from streams.settings import Settings

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "importers" / "claude_code"
#: What a command that finds no stack has no use for (the planner and the indexes' libraries).
HEAVY = ("faust", "aiokafka", "pyarrow", "tantivy", "faiss", "numpy", "duckdb", "pydantic", "uvicorn",
         "starlette", "planner.engine", "sinks", "wordllama")
READ_ONLY = [("search", "permission denied"), ("search", "x", "--json"), ("status",), ("status", "--json"),
             ("sql", "SELECT 1"), ("sessionql", "FROM sessions"), ("export", "sessions", "-o", "out.jsonl")]


def usl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items()
           if name not in ("KAFKA_BOOTSTRAP_SERVERS", "USL_API_URL", "USL_API_KEY")}
    env.update(USL_HOME=str(home), COLUMNS="80")
    return subprocess.run([sys.executable, "-m", "deploy.cli", *args], env=env, cwd=home.parent,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", READ_ONLY, ids=[" ".join(a[:2]) for a in READ_ONLY])
def test_a_read_only_command_starts_nothing_and_says_what_to(tmp_path: Path, args: tuple[str, ...]) -> None:
    home = tmp_path / "home"
    done = usl(home, *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    said = json.loads(done.stdout)["error"]["message"] if "--json" in args else done.stderr
    assert f"no USL stack is running under USL_HOME={home}: start it with `usl up --detach`" in said
    if "--json" not in args:
        assert done.stderr.count("\n") == 1, done.stderr  # one line, however long the path
    assert not (home / "kafka").exists()  # no broker was started (or even prepared)


@pytest.mark.parametrize("args", READ_ONLY, ids=[" ".join(a[:2]) for a in READ_ONLY])
def test_a_read_only_command_says_so_before_loading_the_planner(tmp_path: Path, args: tuple[str, ...]) -> None:
    """`usl search`, `sql`, `sessionql` and `export` imported the planner (the indexes'
    libraries, the embedder) before they looked for a stack: 2-4 s to say that none runs."""
    home = tmp_path / "home"
    env = {name: value for name, value in os.environ.items()
           if name not in ("KAFKA_BOOTSTRAP_SERVERS", "USL_API_URL", "USL_API_KEY")}
    env.update(USL_HOME=str(home), COLUMNS="80")
    done = subprocess.run([sys.executable, "-c", RUN_AND_LIST_MODULES, *args], env=env, cwd=home.parent,
                          capture_output=True, text=True, timeout=300)
    report = json.loads(done.stderr.rpartition("MODULES ")[2])
    assert report["code"] == 2, done.stderr
    loaded = {name for name in report["modules"]
              if any(name == heavy or name.startswith(heavy + ".") for heavy in HEAVY)}
    assert not loaded, f"usl {' '.join(args)} without a stack imported {sorted(loaded)}"


@pytest.mark.kafka
def test_ingest_without_a_stack_says_nothing_indexes_and_leaves_no_broker(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings = Settings.from_env({}, home=home)
    try:
        done = usl(home, "ingest", str(TRANSCRIPTS))
        assert done.returncode == 0 and "appended" in done.stdout, done.stderr
        assert "nothing indexes them until `usl up --detach`" in done.stderr, done.stderr
        state = json.loads((home / "kafka" / "broker.json").read_text())
        assert local_broker_status(settings) is None and not pid_alive(int(state["pid"]))
        assert usl(home, "search", "permission").returncode == 2
    finally:
        stop_broker(settings)


#: Commands that need the broker and end, with what they answer without a stack.
BROKER_COMMANDS = [(("deadletters",), 0, "no dead letters"), (("topics", "create"), 0, "usl.l1"),
                   (("rebuild", "text"), 2, "no log named 'default'")]


@pytest.mark.kafka
@pytest.mark.parametrize(("args", "code", "said"), BROKER_COMMANDS, ids=[" ".join(c[0]) for c in BROKER_COMMANDS])
def test_a_command_that_starts_the_broker_stops_it(tmp_path: Path, args: tuple[str, ...], code: int,
                                                   said: str) -> None:
    home = tmp_path / "home"
    settings = Settings.from_env({}, home=home)
    try:
        done = usl(home, *args)
        assert done.returncode == code and said in done.stdout + done.stderr, (done.stdout, done.stderr)
        state = json.loads((home / "kafka" / "broker.json").read_text())
        assert local_broker_status(settings) is None and not pid_alive(int(state["pid"]))
    finally:
        stop_broker(settings)
