"""The local stack behind ``usl up`` / ``usl down``: worker, sinks and API as child processes.

Each process is started in its own session with its log under ``$USL_HOME/logs`` and a pid file
under ``$USL_HOME/run``, so ``usl down`` (or a later ``usl up``) can find and stop it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from deploy.kafka.broker import pid_alive
from streams.settings import Settings

__all__ = ["running", "start_process", "stop_process", "stop_stack", "supervise"]

STACK = ("worker", "sinks", "api")
_STABLE_SECONDS = 10.0


def _run_dir(settings: Settings) -> Path:
    path = Path(settings.home).resolve() / "run"
    path.mkdir(parents=True, exist_ok=True)
    return path


def running(settings: Settings) -> dict[str, int]:
    """Name → pid of every stack process that is alive."""
    alive: dict[str, int] = {}
    for pid_file in sorted(_run_dir(settings).glob("*.pid")):
        try:
            pid = int(json.loads(pid_file.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            continue
        if pid_alive(pid):
            alive[pid_file.stem] = pid
        else:
            pid_file.unlink(missing_ok=True)
    return alive


def start_process(settings: Settings, name: str, args: list[str], env: dict[str, str] | None = None) -> int:
    """Start ``usl ARGS`` detached; return its pid."""
    logs = Path(settings.home).resolve() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = (logs / f"{name}.log").open("ab")
    cmd = [sys.executable, "-m", "planner", *args]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, **(env or {})})
    (_run_dir(settings) / f"{name}.pid").write_text(json.dumps({"pid": proc.pid, "cmd": cmd}))
    return proc.pid


def stop_process(pid: int, *, grace_seconds: float = 20.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline and pid_alive(pid):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.2)
    if pid_alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def supervise(settings: Settings, children: dict[str, list[str]], env: dict[str, str]) -> None:
    """Run ``children`` (name → usl arguments) and restart any that exits, until SIGTERM/SIGINT.

    Restarts back off (1 s doubling to 60 s) so a process that cannot start does not spin;
    a process that ran for a while before exiting is restarted after 1 s again (the back-off
    is for crash loops, not for the occasional crash). Every step downstream is idempotent,
    so a restarted worker or sink resumes without loss.
    """
    stopping = False

    def on_signal(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    pids = {name: start_process(settings, name, args, env) for name, args in children.items()}
    started = dict.fromkeys(children, time.monotonic())
    backoff = dict.fromkeys(children, 1.0)
    next_start: dict[str, float] = {}
    try:
        while not stopping:
            time.sleep(0.5)
            now = time.monotonic()
            for name, args in children.items():
                if name in next_start:
                    if now >= next_start[name]:
                        del next_start[name]
                        pids[name] = start_process(settings, name, args, env)
                        started[name] = now
                    continue
                try:
                    done, _status = os.waitpid(pids[name], os.WNOHANG)
                except ChildProcessError:
                    done = pids[name]
                if done:
                    if now - started[name] >= _STABLE_SECONDS:
                        backoff[name] = 1.0
                    print(f"{name} exited; restarting in {backoff[name]:.0f}s", flush=True)
                    next_start[name] = now + backoff[name]
                    backoff[name] = min(backoff[name] * 2, 60.0)
    finally:
        for name in children:
            if name in pids and name not in next_start:
                stop_process(pids[name])
            (_run_dir(settings) / f"{name}.pid").unlink(missing_ok=True)


def stop_stack(settings: Settings) -> list[str]:
    """Stop every stack process (the supervisor first, so it restarts nothing); return the
    names stopped."""
    stopped = []
    for name, pid in sorted(running(settings).items(), key=lambda item: item[0] != "supervisor"):
        stop_process(pid)
        (_run_dir(settings) / f"{name}.pid").unlink(missing_ok=True)
        stopped.append(name)
    return stopped
