"""The local stack behind ``usl up`` / ``usl down``: worker, sinks and API as child processes.

Each process is started in its own session with its log under ``$USL_HOME/logs`` and a pid file
under ``$USL_HOME/run``, so ``usl down`` (or a later ``usl up``) can find and stop it. The pid
file records the process's command line and identity (boot id, start time): a pid that no longer
runs that process is a stale entry, removed and never signalled (:mod:`deploy.process`).

Every process starts with umask 077 and ``$USL_HOME`` is created 0700, so index files, logs and
pid files are readable by their owner only.

Each worker and sink the supervisor runs keeps its ``/metrics`` port across restarts: the ports
are chosen once and recorded in ``$USL_HOME/run/metrics-ports.json`` (kept by ``usl down``, so
the next ``usl up`` reuses them too), and every start passes its own as ``USL_METRICS_PORT``.
Chosen per start (``USL_METRICS_PORT=0``), a restarted process answered on a new port that no
scrape configuration named.

A process that hangs instead of exiting is found by probing those ports (and the API's
``/healthz``), killed and restarted like one that exited (:mod:`deploy.liveness`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from deploy.jars import free_port
from deploy.liveness import Watchdog
from deploy.process import (
    PRIVATE_UMASK,
    is_same_process,
    private_dir,
    process_record,
    stop_signals,
    terminate,
)
from streams.settings import Settings

__all__ = ["follow_paths", "followed_paths", "metrics_ports", "running", "sink_children", "start_process", "stop_process", "stop_stack", "supervise"]

STACK = ("worker", "sinks", "api")
_STABLE_SECONDS = 10.0


def _home_dir(settings: Settings, name: str) -> Path:
    home = private_dir(Path(settings.home).resolve())
    return private_dir(home / name)


def _run_dir(settings: Settings) -> Path:
    return _home_dir(settings, "run")


def running(settings: Settings) -> dict[str, int]:
    """Name → pid of every stack process that is alive and still the process its pid file
    recorded; a stale pid file (the process is gone, or its pid now runs something else) is
    removed."""
    alive: dict[str, int] = {}
    for pid_file in sorted(_run_dir(settings).glob("*.pid")):
        try:
            record = json.loads(pid_file.read_text())
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(record, dict) and is_same_process(pid, record):
            alive[pid_file.stem] = pid
        else:
            pid_file.unlink(missing_ok=True)
    return alive


def start_process(settings: Settings, name: str, args: list[str], env: dict[str, str] | None = None) -> int:
    """Start ``usl ARGS`` detached (umask 077); return its pid."""
    logs = _home_dir(settings, "logs")
    descriptor = os.open(logs / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    cmd = [sys.executable, "-m", "deploy.cli", *args]
    with os.fdopen(descriptor, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, **(env or {})},
                                umask=PRIVATE_UMASK)
    (_run_dir(settings) / f"{name}.pid").write_text(json.dumps(process_record(proc.pid, cmd)))
    return proc.pid


def stop_process(pid: int, *, grace_seconds: float = 20.0, resume: bool = False) -> None:
    """Stop ``pid`` with its process group when it leads one (what :func:`start_process`
    starts), else alone: a ``usl up`` in the foreground shares the group of whatever ran it.
    ``resume``: SIGCONT after SIGTERM (:func:`deploy.process.terminate`), for a process that
    may be stopped."""
    try:
        leads = os.getpgid(pid) == pid
    except ProcessLookupError:
        return
    terminate(pid, grace_seconds=grace_seconds, group=leads, resume=resume)


def follow_paths(settings: Settings) -> list[str]:
    """The transcript paths ``USL_FOLLOW`` names (colon-separated, ``~`` expanded, absolute
    against the current directory): what the follower of ``usl up`` follows, and what a later
    ``usl up`` from another directory compares USL_FOLLOW with."""
    return [os.path.abspath(Path(p).expanduser()) for p in settings.follow.split(":") if p.strip()]


def followed_paths(settings: Settings) -> list[str]:
    """The paths the follower of the running stack follows, read from its pid file (the
    arguments it was started with); none when the stack runs no follower."""
    pid_file = Path(settings.home).resolve() / "run" / "follow.pid"
    try:
        cmd = json.loads(pid_file.read_text())["cmd"]
        return [str(arg) for arg in cmd[cmd.index("--follow") + 1:]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def sink_children(settings: Settings) -> dict[str, list[str]]:
    """The sink processes of ``usl up`` (name → usl arguments): one sink of every kind, or with
    ``USL_SINK_SHARDS=N`` > 1, N shard processes, shard I of every kind in process I (the
    planner reads every kind sharded: :data:`planner.readers.SHARDABLE_KINDS`)."""
    count = settings.sink_shards
    if count == 1:
        return {"sinks": ["sink"]}
    # Imported here: the sinks package loads its generation store, which `usl status` (that
    # imports this module to tell whether a stack runs) does not need.
    from sinks.kinds import ALL_KINDS

    kinds = ",".join(ALL_KINDS)
    return {f"sinks-shard-{index}": ["sink", "--kind", kinds, "--shard", f"{index}/{count}"]
            for index in range(count)}


#: The usl commands that serve /metrics on USL_METRICS_PORT (the API serves it on its own port):
#: a worker, a sink and the follower of USL_FOLLOW (`ingest --follow`).
_METRICS_COMMANDS = ("worker", "sink", "ingest")
_METRICS_HOST = "127.0.0.1"  # streams.metrics.start_metrics_server's


def metrics_ports(settings: Settings) -> dict[str, int]:
    """Name → the ``/metrics`` port the supervisor gives that stack process (empty before the
    first ``usl up``)."""
    try:
        recorded = json.loads((_run_dir(settings) / "metrics-ports.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(recorded, dict):
        return {}
    return {str(name): port for name, port in recorded.items() if isinstance(port, int) and 0 < port < 65536}


def _port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now (with SO_REUSEADDR, as the metrics server
    binds: connections of the previous process in TIME_WAIT do not hold the port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((_METRICS_HOST, port))
        except OSError:
            return False
    return True


def _any_free_port(taken: set[int]) -> int:
    # free_port's, not the kernel's pick for port 0: that one is in the ephemeral range, where a
    # client connection can hold it by the time the child binds it, or when the stack restarts
    # and wants the recorded port again.
    while True:
        port = free_port()
        if port not in taken:
            return port


def _choose_metrics_ports(settings: Settings, children: dict[str, list[str]]) -> dict[str, int]:
    """The metrics port of every child that serves one: the port recorded for it (by an earlier
    ``usl up``) while free; else, with ``USL_METRICS_PORT`` set, that port for the first such
    child and the ports after it for the next; else a free port. Recorded before any starts."""
    recorded = metrics_ports(settings)
    ports: dict[str, int] = {}
    names = [name for name, args in children.items() if args and args[0] in _METRICS_COMMANDS]
    for offset, name in enumerate(names):
        wanted = [recorded[name]] if name in recorded else []
        if settings.metrics_port:
            wanted.insert(0, settings.metrics_port + offset)
        free = [port for port in wanted if port not in ports.values() and _port_free(port)]
        ports[name] = free[0] if free else _any_free_port(set(ports.values()))
        if wanted and ports[name] != wanted[0]:
            print(f"{name}: metrics port {wanted[0]} is taken; using {ports[name]}", flush=True)
    _record_metrics_ports(settings, ports)
    return ports


def _record_metrics_ports(settings: Settings, ports: dict[str, int]) -> None:
    path = _run_dir(settings) / "metrics-ports.json"
    partial = path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(ports, sort_keys=True))
    os.replace(partial, path)  # `usl up --detach` and `usl status` read it: never half written


def supervise(settings: Settings, children: dict[str, list[str]], env: dict[str, str], *,
              health: Mapping[str, str] | None = None) -> None:
    """Run ``children`` (name → usl arguments) and restart any that exits or hangs, until
    SIGTERM/SIGINT.

    Restarts back off (1 s doubling to 60 s) so a process that cannot start does not spin;
    a process that ran for a while before exiting is restarted after 1 s again (the back-off
    is for crash loops, not for the occasional crash). Every step downstream is idempotent,
    so a restarted worker or sink resumes without loss.

    A child is hung when it stops answering HTTP (:mod:`deploy.liveness`): on its ``/metrics``
    port (workers, sinks, the follower) or, for a child named in ``health`` (name → URL, the
    API's ``/healthz``), there. It is then stopped (SIGTERM and SIGCONT, SIGKILL after 20 s;
    the loop waits for that) and restarted as if it had exited.
    """
    stop = stop_signals()
    # `usl down` finds the supervisor by this file and stops it first; a foreground `usl up`
    # that nothing recorded went on restarting the processes `usl down` had stopped.
    # (With --detach the parent wrote this file and polls it: replaced whole, never seen half.)
    own = _run_dir(settings) / "supervisor.pid"
    partial = own.with_suffix(".pid.tmp")
    partial.write_text(json.dumps(process_record(os.getpid(), sys.argv)))
    os.replace(partial, own)
    ports = _choose_metrics_ports(settings, children)

    def start(name: str) -> int:
        if name not in ports:
            return start_process(settings, name, children[name], env)
        if not _port_free(ports[name]):  # something else took it while the process was down
            taken, ports[name] = ports[name], _any_free_port(set(ports.values()))
            print(f"{name}: metrics port {taken} is taken; {name} serves /metrics on {ports[name]} from now "
                  "on (update the scrape configuration)", flush=True)
            _record_metrics_ports(settings, ports)
        print(f"{name}: metrics on http://{_METRICS_HOST}:{ports[name]}/metrics", flush=True)
        return start_process(settings, name, children[name], {**env, "USL_METRICS_PORT": str(ports[name])})

    def probe_url(name: str) -> str | None:
        if health and name in health:
            return health[name]
        return f"http://{_METRICS_HOST}:{ports[name]}/metrics" if name in ports else None

    pids = {name: start(name) for name in children}
    started = dict.fromkeys(children, time.monotonic())
    backoff = dict.fromkeys(children, 1.0)
    next_start: dict[str, float] = {}
    killed: set[str] = set()
    watchdog = Watchdog(settings, len(children))
    try:
        while not stop.is_set():
            time.sleep(0.5)
            now = time.monotonic()
            for name in children:
                if name in next_start:
                    if now >= next_start[name]:
                        del next_start[name]
                        pids[name] = start(name)
                        started[name] = now
                    continue
                try:
                    done, _status = os.waitpid(pids[name], os.WNOHANG)
                except ChildProcessError:
                    done = pids[name]
                if done:
                    if now - started[name] >= _STABLE_SECONDS:
                        backoff[name] = 1.0
                    how = "was killed" if name in killed else "exited"
                    killed.discard(name)
                    print(f"{name} {how}; restarting in {backoff[name]:.0f}s", flush=True)
                    next_start[name] = now + backoff[name]
                    backoff[name] = min(backoff[name] * 2, 60.0)
                    continue
                hung = watchdog.check(name, pids[name], probe_url(name), now)
                if hung is not None and name not in killed:
                    print(f"{name} (pid {pids[name]}) is hung: {hung}; killing it (SIGTERM, then SIGKILL "
                          "after 20s) to restart it", flush=True)
                    killed.add(name)
                    stop_process(pids[name], resume=True)  # the next tick reaps it and restarts it
    finally:
        watchdog.close()
        for name in children:
            if name in pids and name not in next_start:
                stop_process(pids[name])
            (_run_dir(settings) / f"{name}.pid").unlink(missing_ok=True)
        own.unlink(missing_ok=True)


def stop_stack(settings: Settings) -> list[str]:
    """Stop every stack process (the supervisor first, so it restarts nothing); return the
    names stopped."""
    stopped = []
    for name, pid in sorted(running(settings).items(), key=lambda item: item[0] != "supervisor"):
        stop_process(pid)
        (_run_dir(settings) / f"{name}.pid").unlink(missing_ok=True)
        stopped.append(name)
    return stopped
