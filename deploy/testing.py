"""Test kit for the running pipeline, shipped with the package so the fault suite (``python -m
reliability``), the benchmarks and the tests use one copy.

:class:`Stack` starts ``usl worker`` / ``usl sink`` as real subprocesses with a test's
settings (:func:`stack_settings`: topics and a home of its own), so crash tests can kill them
with SIGKILL at any point and start them again; :func:`settings_env` is the environment that
hands a child process exactly those settings;
:func:`ingest` runs ``usl ingest`` with them, :func:`free_port` and :func:`wait_for_api` start
a planner API beside the stack, :func:`same_generations` asks several APIs alike;
:func:`as_grafana_sends` turns a dashboard query into the one Grafana sends.
Event factories and topic readers are in ``streams.testing``; index readers in ``sinks.testing``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from deploy.jars import free_port
from streams.settings import Settings
from streams.topics import ensure_topics

__all__ = ["RUN_AND_LIST_MODULES", "Stack", "as_grafana_sends", "free_port", "hooked", "ingest", "same_generations",
           "settings_env", "stack_settings", "wait_for_api"]


def stack_settings(tmp: Path, bootstrap: str, **overrides: object) -> Settings:
    """Settings of one test's stack: unique topics and a home under ``tmp``, on ``bootstrap``."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    values: dict[str, object] = {
        "home": tmp / f"home-{prefix.rstrip('.')}", "topic_prefix": prefix, "bootstrap_servers": bootstrap,
        "l1_partitions": 4, "stream_partitions": 2, "sink_batch_seconds": 0.3,
    }
    values.update(overrides)
    return Settings.from_env({}, **values)


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a child process use exactly these settings."""
    env = {**os.environ}
    for name, value in {
        "KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers, "USL_HOME": str(settings.home),
        "USL_TOPIC_PREFIX": settings.topic_prefix, "USL_L1_PARTITIONS": settings.l1_partitions,
        "USL_STREAM_PARTITIONS": settings.stream_partitions, "USL_TICK_EVERY_SEQS": settings.tick_every_seqs,
        "USL_IDLE_GAP_SECONDS": settings.idle_gap_seconds, "USL_QUIET_LOG_SECONDS": settings.quiet_log_seconds,
        "USL_SINK_BATCH_SECONDS": settings.sink_batch_seconds,
        "USL_SINK_COMMIT_GAP_SECONDS": settings.sink_commit_gap_seconds,
        "USL_SINK_BATCH_SIZE": settings.sink_batch_size, "USL_TEXT_ENGINE": settings.text_engine,
        "USL_EMBEDDER": settings.embedder, "USL_CHUNK_TOKENS": settings.chunk_tokens,
        "USL_CHUNK_OVERLAP_TOKENS": settings.chunk_overlap_tokens,
    }.items():
        if value is not None:
            env[name] = str(value)
    return env


class Stack:
    """Worker and sink subprocesses of one test; everything is killed on close()."""

    #: Every Stack made since the test harness last cleared it, and every one still open (a
    #: module's, shared by its tests): tests/conftest.py adds their processes' logs to the report
    #: of a test that fails, where a timeout says nothing else.
    made: list[Stack] = []

    def __init__(self, settings: Settings) -> None:
        Stack.made.append(self)
        self.closed = False
        self.settings = settings
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs = Path(settings.home) / "test-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        ensure_topics(settings.bootstrap_servers or "", settings)

    def start(self, name: str, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Run ``usl ARGS`` as ``name``; ``env`` adds variables for this process only
        (e.g. its own ``USL_METRICS_PORT``)."""
        log = (self.logs / f"{name}.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "deploy.cli", *args],
                                env={**settings_env(self.settings), **(env or {})},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc

    def worker(self, name: str = "worker", *, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``usl worker`` as ``name``."""
        return self.start(name, "worker", env=env)

    def sinks(self, kinds: str = "text,vector,structured,analytics,toolresults", name: str = "sinks",
              *, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start ``usl sink --kind KINDS`` as ``name``."""
        return self.start(name, "sink", "--kind", kinds, env=env)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to ``name``'s process group and wait for it; nothing if it is gone."""
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)

    def log_text(self, name: str) -> str:
        """What ``name`` wrote to stdout and stderr so far."""
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tails(self, limit: int = 6000) -> dict[str, str]:
        """The last ``limit`` characters of every process log of this Stack, by process name."""
        return {path.stem: path.read_text(errors="replace")[-limit:] for path in sorted(self.logs.glob("*.log"))}

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)
        self.closed = True


def hooked(directory: Path, hook: str, **variables: str) -> dict[str, str]:
    """The environment of a process (``Stack.start(..., env=...)``) that runs ``hook`` first:
    it is written as a ``sitecustomize`` module in ``directory`` (created), which goes first on
    the process's PYTHONPATH; ``variables`` are added as they are (what the hook reads)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(hook)
    path = os.pathsep.join(p for p in (str(directory), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, **variables}


def ingest(settings: Settings, path: Path, *, timeout: float = 180.0) -> None:
    """``usl ingest PATH --json`` with these settings; AssertionError with its output on failure."""
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "ingest", str(path), "--json"],
                          env=settings_env(settings), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(done.stdout + done.stderr)


def wait_for_api(api: str, server: Stack | subprocess.Popen[bytes], *, name: str = "api",
                 timeout: float = 180.0) -> None:
    """Block until the planner API at ``api`` is ready. ``server`` is its process, or the Stack
    that started it as ``name``; AssertionError (with the Stack's log of it) when the process
    dies or ``timeout`` passes."""
    proc = server.procs[name] if isinstance(server, Stack) else server
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{api}/healthz", timeout=2) as response:
                if json.load(response).get("ready"):
                    return
        except OSError:
            pass
        if proc.poll() is not None:
            raise AssertionError(server.log_text(name)[-4000:] if isinstance(server, Stack)
                                 else f"the planner API exited with {proc.returncode}")
        if time.monotonic() >= deadline:
            raise AssertionError("the planner API did not become ready")
        time.sleep(0.5)


def same_generations(settle: Callable[[str, Mapping[str, Any], int], dict[str, Any]], apis: Sequence[str],
                     body: Mapping[str, Any], head: int, *, timeout: float = 120.0) -> list[dict[str, Any]]:
    """``settle(api, body, head)`` of each API, asked again until the answers all name the same
    generations. A background merge publishes a generation with the same ``builtThroughSeq``
    between two APIs' reads, and a replica mirrors it a moment after the primary reads it: the
    answers are compared at the same generations, not at the same seq alone."""
    deadline = time.monotonic() + timeout
    while True:
        answers = [settle(api, body, head) for api in apis]
        if all(a["freshness"]["watermarks"] == answers[0]["freshness"]["watermarks"] for a in answers):
            return answers
        assert time.monotonic() < deadline, (body, [a["freshness"] for a in answers])
        time.sleep(0.5)


def as_grafana_sends(expr: str, rate_interval: str = "1m") -> str:
    """A panel query as Grafana sends it to Prometheus with every log and index kind selected
    (the variables' "All" is ``.*``) and ``$__rate_interval`` at a 15 s scrape interval."""
    expr = expr.replace("$__rate_interval", rate_interval)
    return re.sub(r"\$\{?(log|kind)\}?", ".*", expr)


#: Runs ``usl ARGS...`` (the script's own arguments) in this process, then lists every module
#: it loaded on stderr.
RUN_AND_LIST_MODULES = """
import json, sys
sys.argv = ["usl", *sys.argv[1:]]
from deploy.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
sys.stderr.write("\\nMODULES " + json.dumps({"code": code, "modules": sorted(sys.modules)}) + "\\n")
"""
