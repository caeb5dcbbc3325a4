"""The supervisor of ``usl up`` keeps each worker's and sink's ``/metrics`` port across restarts.

Before, every start passed ``USL_METRICS_PORT=0`` on, so each restarted process picked a new free
port (worker 55841 -> 53673 -> 51261 across crashes): the ports an operator had put into the
scrape configuration answered nothing and USLTargetDown fired for good."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from deploy import stack
from streams.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

_UP = """
import json, os, subprocess, sys
from pathlib import Path
from deploy import stack
from deploy.process import process_record
from streams.settings import Settings

home = Path(sys.argv[1])
settings = Settings.from_env({}, home=home)
listener = ("import socket, sys, time; s = socket.socket(); "
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); time.sleep(120)")

def start(settings, name, args, env=None):  # a stand-in process that serves on its metrics port
    port = (env or {}).get("USL_METRICS_PORT", "0")
    cmd = [sys.executable, "-c", listener, port]
    proc = subprocess.Popen(cmd, start_new_session=True)
    (stack._run_dir(settings) / f"{name}.pid").write_text(json.dumps(process_record(proc.pid, cmd)))
    with open(home / "starts.jsonl", "a") as starts:
        starts.write(json.dumps({"name": name, "pid": proc.pid, "port": port}) + "\\n")
    return proc.pid

stack.start_process = start
stack.supervise(settings, {"worker-1": ["worker"], "sinks": ["sink"], "api": ["serve"]}, {})
"""


def _starts(home: Path) -> list[dict[str, str]]:
    path = home / "starts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_restarted_process_keeps_its_metrics_port(tmp_path: Path) -> None:
    settings = Settings.from_env({}, home=tmp_path)
    script = tmp_path / "up.py"
    script.write_text(_UP)
    log = (tmp_path / "supervisor.log").open("w")
    supervisor = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True, cwd=ROOT)
    blocker = socket.socket()
    try:
        _wait(lambda: len(_starts(tmp_path)) == 3, "the first starts")
        first = {start["name"]: start for start in _starts(tmp_path)}
        assert first["api"]["port"] == "0"  # the API serves /metrics on its own port
        ports = {name: int(first[name]["port"]) for name in ("worker-1", "sinks")}
        assert all(ports.values()) and len(set(ports.values())) == 2
        assert stack.metrics_ports(settings) == ports  # recorded for `usl up` and `usl status`
        os.kill(int(first["worker-1"]["pid"]), signal.SIGKILL)
        _wait(lambda: len(_starts(tmp_path)) == 4, "the worker's restart")
        assert _starts(tmp_path)[-1] == {**_starts(tmp_path)[-1], "name": "worker-1",
                                         "port": str(ports["worker-1"])}
        # Something else takes the sinks' port while they are down: another port, said so.
        blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        os.kill(int(first["sinks"]["pid"]), signal.SIGKILL)
        _wait(lambda: _bound(blocker, ports["sinks"]), "the sinks' port to come free")
        blocker.listen()
        _wait(lambda: len(_starts(tmp_path)) == 5, "the sinks' restart")
        moved = int(_starts(tmp_path)[-1]["port"])
        assert moved not in (0, ports["sinks"], ports["worker-1"])
        assert stack.metrics_ports(settings) == {**ports, "sinks": moved}
        _wait(lambda: "is taken" in (tmp_path / "supervisor.log").read_text(), "the supervisor's note")
        assert f"sinks: metrics port {ports['sinks']} is taken" in (tmp_path / "supervisor.log").read_text()
    finally:
        blocker.close()
        stack.stop_stack(settings)
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
        supervisor.wait()
        log.close()


def _bound(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def test_ports_are_kept_across_usl_up_and_usl_metrics_port_pins_them(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        base = int(probe.getsockname()[1])
    children = {"worker-1": ["worker"], "worker-2": ["worker"], "api": ["serve"], "follow": ["ingest"]}
    pinned = stack._choose_metrics_ports(Settings.from_env({}, home=tmp_path, metrics_port=base), children)
    assert set(pinned) == {"worker-1", "worker-2", "follow"} and pinned["worker-1"] == base
    assert len(set(pinned.values())) == 3  # one USL_METRICS_PORT no longer gives every process the same port
    # The next `usl up` (USL_METRICS_PORT unset) finds the ports recorded by the last one.
    assert stack._choose_metrics_ports(Settings.from_env({}, home=tmp_path), children) == pinned


def test_ports_chosen_for_a_stack_are_below_the_ephemeral_range(tmp_path: Path) -> None:
    """A port of the ephemeral range may be a client connection's source port by the time the
    child binds it, or when a restarted stack wants its recorded port back (deploy/jars.py)."""
    from deploy.jars import _ephemeral_low

    children = {"worker-1": ["worker"], "worker-2": ["worker"], "sinks": ["sink"]}
    ports = stack._choose_metrics_ports(Settings.from_env({}, home=tmp_path), children)
    assert ports and all(port < _ephemeral_low() for port in ports.values()), ports
