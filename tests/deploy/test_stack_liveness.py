"""The supervisor of ``usl up`` kills and restarts a process that hangs, not only one that exits.

Before, it only waited for exits: an API stopped with SIGSTOP (or deadlocked) kept its pid and
stayed hung, and every request to the stack timed out until someone restarted it by hand. Here
the supervisor runs stand-in processes that serve HTTP on their ports, as in
``test_stack_metrics_ports.py``; ``test_a_hung_api_of_a_real_stack_is_replaced`` stops the API
of a real ``usl up`` stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy import stack
from deploy.jars import free_port
from deploy.liveness import answers
from deploy.process import pid_alive
from streams.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

_UP = """
import json, subprocess, sys
from pathlib import Path
from deploy import stack
from deploy.process import process_record
from streams.settings import Settings

home, api_port = Path(sys.argv[1]), sys.argv[2]
settings = Settings.from_env({}, home=home, liveness_probe_seconds=0.5, liveness_failures=3,
                             liveness_grace_seconds=2.0)

def start(settings, name, args, env=None):  # a stand-in that answers HTTP on its port
    port = (env or {}).get("USL_METRICS_PORT") or api_port
    cmd = [sys.executable, "-m", "http.server", port, "--bind", "127.0.0.1", "--directory", str(home)]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (stack._run_dir(settings) / f"{name}.pid").write_text(json.dumps(process_record(proc.pid, cmd)))
    with open(home / "starts.jsonl", "a") as starts:
        starts.write(json.dumps({"name": name, "pid": proc.pid, "port": port}) + "\\n")
    return proc.pid

stack.start_process = start
stack.supervise(settings, {"worker-1": ["worker"], "sinks": ["sink"], "api": ["serve"]}, {},
                health={"api": f"http://127.0.0.1:{api_port}/healthz"})
"""


def _starts(home: Path) -> list[dict[str, str]]:
    path = home / "starts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _url(start: dict[str, str]) -> str:
    return f"http://127.0.0.1:{start['port']}/"


def test_a_hung_process_is_killed_and_restarted_and_a_live_one_is_left_alone(tmp_path: Path) -> None:
    settings = Settings.from_env({}, home=tmp_path)
    api_port = free_port()
    script = tmp_path / "up.py"
    script.write_text(_UP)
    log_path = tmp_path / "supervisor.log"
    with log_path.open("w") as log:
        supervisor = subprocess.Popen([sys.executable, str(script), str(tmp_path), str(api_port)], stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
    try:
        _wait(lambda: len(_starts(tmp_path)) == 3, "the first starts")
        first = {start["name"]: start for start in _starts(tmp_path)}
        _wait(lambda: all(answers(_url(start), 1.0) for start in first.values()), "every process to answer")
        time.sleep(4)  # twice the grace: processes that answer are never taken for hung
        assert len(_starts(tmp_path)) == 3
        for name in ("worker-1", "api"):  # hung: the port is still bound, nothing answers
            os.kill(int(first[name]["pid"]), signal.SIGSTOP)
        _wait(lambda: len(_starts(tmp_path)) == 5, "the hung processes to be restarted")
        restarted = {start["name"]: start for start in _starts(tmp_path)[3:]}
        assert set(restarted) == {"worker-1", "api"}
        for name, start in restarted.items():
            assert start["port"] == first[name]["port"]
            assert not pid_alive(int(first[name]["pid"]))
        _wait(lambda: all(answers(_url(start), 1.0) for start in restarted.values()), "the new processes")
        assert pid_alive(int(first["sinks"]["pid"]))  # never hung, never touched
        said = log_path.read_text()
        assert (f"worker-1 (pid {first['worker-1']['pid']}) is hung: no answer from "
                f"http://127.0.0.1:{first['worker-1']['port']}/metrics for ") in said
        assert f"api (pid {first['api']['pid']}) is hung: no answer from http://127.0.0.1:{api_port}/healthz" in said
        assert "worker-1 was killed; restarting in 1s" in said and "api was killed; restarting in 1s" in said
        assert "sinks" not in said.replace("sinks: metrics on", "")
    finally:
        stack.stop_stack(settings)
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
        supervisor.wait()


@pytest.mark.kafka
def test_a_hung_api_of_a_real_stack_is_replaced(tmp_path: Path, kafka_bootstrap: str) -> None:
    """`usl up --detach`, then SIGSTOP the API and the sinks: both are killed and replaced, and
    the stack answers again."""
    home, port = tmp_path / "home", free_port()
    env = {**os.environ, "USL_HOME": str(home), "USL_API_PORT": str(port), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "USL_TOPIC_PREFIX": f"t{os.getpid()}x{port}.", "USL_EMBEDDER": "hash:64",
           "USL_LIVENESS_PROBE_SECONDS": "1", "USL_LIVENESS_FAILURES": "3", "USL_LIVENESS_GRACE_SECONDS": "10"}
    settings = Settings.from_env(env)

    def usl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "deploy.cli", *args], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=300)

    up = usl("up", "--detach")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        _wait(lambda: answers(f"http://127.0.0.1:{stack.metrics_ports(settings)['sinks']}/metrics", 1.0)
              and answers(f"http://127.0.0.1:{port}/healthz", 1.0), "the sinks' metrics and the API", timeout=120)
        # Read once both answer: on a loaded machine a slow start may have been taken for a hang
        # and replaced already, and the processes to stop are the ones serving now.
        before = stack.running(settings)
        assert {"api", "sinks", "worker-1", "supervisor"} <= set(before)
        for name in ("api", "sinks"):
            os.kill(before[name], signal.SIGSTOP)

        def replaced() -> bool:
            now = stack.running(settings)
            return all(now.get(name) not in (None, before[name]) for name in ("api", "sinks"))

        _wait(replaced, "the API and the sinks to be replaced", timeout=120)
        assert not pid_alive(before["api"]) and not pid_alive(before["sinks"])
        assert stack.running(settings)["worker-1"] == before["worker-1"]
        _wait(lambda: answers(f"http://127.0.0.1:{port}/healthz", 1.0), "the new API", timeout=120)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/status", timeout=30) as response:
            assert response.status == 200 and "logs" in json.loads(response.read())
        said = (home / "logs" / "supervisor.log").read_text()
        assert f"api (pid {before['api']}) is hung: no answer from http://127.0.0.1:{port}/healthz" in said
        assert f"sinks (pid {before['sinks']}) is hung" in said
    finally:
        down = usl("down")
        assert down.returncode == 0, down.stdout + down.stderr
