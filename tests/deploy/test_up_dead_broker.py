"""``usl up --detach`` over a running stack whose local broker died said "already running"
(exit 0) while every command answered broker_unavailable, whose hint ("retry once the broker is
back") would be waited on for ever: the supervisor restarts the stack's processes, never the
broker. It now starts the broker again at the address the stack's processes were given, or says
in one line (exit 2) why it cannot."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from deploy.jars import free_port
from deploy.kafka import broker
from deploy.process import process_record
from streams.exceptions import BrokerError
from streams.settings import Settings


def _settings(home: Path, **overrides: Any) -> Settings:
    return Settings.from_env({}, home=home, **overrides)


def _record_broker(home: Path, pid: int, cmd: list[str], port: int) -> None:
    state = home / "kafka"
    state.mkdir(parents=True, exist_ok=True)
    (state / "broker.json").write_text(json.dumps({**process_record(pid, cmd), "bootstrap": f"127.0.0.1:{port}",
                                                   "controllerPort": port + 1, "dataDir": str(state / "data")}))


def _gone_pid() -> tuple[int, list[str]]:
    cmd = [sys.executable, "-c", "pass"]
    proc = subprocess.Popen(cmd)
    proc.wait()
    return proc.pid, cmd


def test_a_dead_broker_is_started_again_at_its_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    _record_broker(tmp_path, *_gone_pid(), port)
    started: list[str] = []

    def start(settings: Settings) -> broker.BrokerInfo:
        started.append(settings.home)
        return broker.BrokerInfo(4242, f"127.0.0.1:{port}", port + 1, "data")

    monkeypatch.setattr(broker, "_start", start)
    assert broker.revive_broker(_settings(tmp_path)) == f"127.0.0.1:{port}" and len(started) == 1
    # A configured cluster is not ours to start; nothing recorded, nothing to revive.
    assert broker.revive_broker(_settings(tmp_path, bootstrap_servers="kafka:9092")) is None
    assert broker.revive_broker(_settings(tmp_path / "elsewhere")) is None
    assert len(started) == 1


def test_a_broker_that_cannot_come_back_where_the_stack_looks_is_an_error(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker, "_start", lambda settings: pytest.fail("no broker may start"))
    with socket.socket() as taken:  # another program took the broker's port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        _record_broker(tmp_path, *_gone_pid(), int(taken.getsockname()[1]))
        with pytest.raises(BrokerError, match=r"another program listens on its address .* `usl down`"):
            broker.revive_broker(_settings(tmp_path))
    # Its process still runs but does not answer (hung): a second broker would fight it for the data.
    cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
    hung = subprocess.Popen(cmd)
    try:
        _record_broker(tmp_path, hung.pid, cmd, free_port())
        with pytest.raises(BrokerError, match=rf"\(pid {hung.pid}\) runs but does not answer"):
            broker.revive_broker(_settings(tmp_path))
    finally:
        hung.kill()
        hung.wait()


def test_usl_up_over_a_running_stack_starts_its_dead_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy import stack
    from deploy.cli import build_app

    monkeypatch.setenv("USL_HOME", str(tmp_path))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setattr(stack, "running", lambda settings: {"api": 11, "supervisor": 12, "worker-1": 13})
    revived: list[str | None] = ["127.0.0.1:9999"]
    monkeypatch.setattr(broker, "revive_broker", lambda settings: revived[0])
    result = CliRunner().invoke(build_app(), ["up", "--detach"])
    assert result.exit_code == 0, result.output
    assert "the local Kafka broker had stopped: started it again at 127.0.0.1:9999" in result.output
    assert "already running" not in result.output
    revived[0] = None
    result = CliRunner().invoke(build_app(), ["up", "--detach"])
    assert result.exit_code == 0 and "already running: api, supervisor, worker-1" in result.output


def test_broker_unavailable_from_the_local_stack_says_how_to_start_its_broker(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy.cli._api import _broker_gone
    from planner.client import APIError

    def answer() -> APIError:
        return APIError(503, "broker_unavailable", "the Kafka cluster does not answer",
                        hint="Retry once the broker is back; `usl status` answers again then.")

    monkeypatch.setattr(broker, "local_broker_status", lambda settings: None)
    assert "`usl up --detach` starts it again" in (_broker_gone(_settings(tmp_path), answer(), False).hint or "")
    # A cluster the user runs, or an API the user named: theirs to bring back.
    for settings, named in ((_settings(tmp_path, bootstrap_servers="kafka:9092"), False), (_settings(tmp_path), True)):
        assert (_broker_gone(settings, answer(), named).hint or "").startswith("Retry once")


def test_processes_left_without_their_supervisor_are_started_again_under_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the supervisor killed, `usl up --detach` said "already running" (exit 0) over
    processes nothing restarted any more. It stops them and starts the stack again."""
    import deploy.jars
    import deploy.stack
    from deploy.cli import app

    alive = {"api": 101, "sinks": 102, "worker-1": 103}
    stopped: list[list[str]] = []

    def stop_stack(settings: Settings) -> list[str]:
        stopped.append(sorted(alive))
        names = sorted(alive)
        alive.clear()
        return names

    monkeypatch.setattr(deploy.stack, "running", lambda settings: dict(alive))
    monkeypatch.setattr(deploy.stack, "stop_stack", stop_stack)
    # The start that follows stops at its first check (the port is taken): far enough here.
    monkeypatch.setattr(deploy.jars, "port_open", lambda port, host: True)
    monkeypatch.setenv("USL_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["up", "--detach", "--port", str(free_port())])
    assert stopped == [["api", "sinks", "worker-1"]], result.output
    assert "supervisor had stopped" in result.output and "already running" not in result.output
    assert "is taken" in str(result.exception)  # the start went on past the old processes


@pytest.mark.parametrize(("followed", "said"), [
    (None, "but the running stack follows no transcripts: it takes USL_FOLLOW when it starts"),
    (["/a"], "but the running stack follows /a: it takes USL_FOLLOW when it starts"),
    (["/a", "/b"], None),
], ids=["no follower", "another path", "the same paths"])
def test_usl_up_over_a_running_stack_says_when_usl_follow_is_not_what_it_follows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, followed: list[str] | None, said: str | None) -> None:
    """README: `export USL_FOLLOW=...; usl up --detach`. Over a stack already up (started
    without it) that said "already running" and exit 0, and nothing followed the transcripts:
    the follower's paths are the supervisor's, fixed when it started."""
    from deploy import stack
    from deploy.cli import build_app

    monkeypatch.setenv("USL_HOME", str(tmp_path))
    monkeypatch.setenv("USL_FOLLOW", "/a:/b")
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    alive = {"api": 11, "supervisor": 12, "worker-1": 13}
    if followed is not None:  # the pid file the supervisor writes for its follower (start_process)
        (tmp_path / "run").mkdir()
        cmd = [sys.executable, "-m", "deploy.cli", "ingest", "--follow", *followed]
        (tmp_path / "run" / "follow.pid").write_text(json.dumps(process_record(14, cmd)))
        alive["follow"] = 14
    monkeypatch.setattr(stack, "running", lambda settings: dict(alive))
    monkeypatch.setattr(broker, "revive_broker", lambda settings: None)
    result = CliRunner().invoke(build_app(), ["up", "--detach"])
    assert result.exit_code == 0 and "already running" in result.output, result.output
    if said is None:
        assert "USL_FOLLOW" not in result.output
    else:
        assert "USL_FOLLOW names /a, /b, " + said in " ".join(result.output.split())
        assert "run `usl down`, then `usl up --detach` again to follow them" in " ".join(result.output.split())


def test_usl_up_over_a_running_stack_says_where_its_api_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`usl up --detach --port N` over a stack whose API is on another port said "already
    running" (exit 0), and nothing answered on N."""
    import os

    from deploy import stack
    from deploy.cli import build_app

    monkeypatch.setenv("USL_HOME", str(tmp_path))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("USL_API_URL", raising=False)
    monkeypatch.delenv("USL_FOLLOW", raising=False)
    (tmp_path / "run").mkdir()
    cmd = [sys.executable, "-m", "deploy.cli", "serve", "--port", "8771", "--host", "127.0.0.1"]
    (tmp_path / "run" / "api.pid").write_text(json.dumps(process_record(os.getpid(), cmd)))  # a pid that runs
    monkeypatch.setattr(stack, "running", lambda settings: {"api": 11, "supervisor": 12, "worker-1": 13})
    monkeypatch.setattr(broker, "revive_broker", lambda settings: None)
    moved = CliRunner().invoke(build_app(), ["up", "--detach", "--port", "8772"])
    said = " ".join(moved.output.split())
    assert moved.exit_code == 0 and "already running" in said, moved.output
    assert "its API is on http://127.0.0.1:8771, not port 8772" in said and "`usl up --detach --port 8772`" in said
    same = CliRunner().invoke(build_app(), ["up", "--detach", "--port", "8771"])
    assert same.exit_code == 0 and "its API is on" not in same.output, same.output


def test_usl_up_over_a_running_stack_asked_no_port_says_nothing_of_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With neither --port nor USL_API_PORT, `usl up --detach` over a stack started with
    `--port 8771` asked for no port: telling it to `usl down` and move the API to the default
    8765 was a false alarm (every command finds the running API through its pid file)."""
    import os

    from deploy import stack
    from deploy.cli import build_app

    monkeypatch.setenv("USL_HOME", str(tmp_path))
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "USL_API_URL", "USL_FOLLOW", "USL_API_PORT"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "run").mkdir()
    cmd = [sys.executable, "-m", "deploy.cli", "serve", "--port", "8771", "--host", "127.0.0.1"]
    (tmp_path / "run" / "api.pid").write_text(json.dumps(process_record(os.getpid(), cmd)))
    monkeypatch.setattr(stack, "running", lambda settings: {"api": 11, "supervisor": 12, "worker-1": 13})
    monkeypatch.setattr(broker, "revive_broker", lambda settings: None)
    result = CliRunner().invoke(build_app(), ["up", "--detach"])
    assert result.exit_code == 0 and "already running" in result.output, result.output
    assert "its API is on" not in result.output, result.output


@pytest.mark.parametrize(("asked", "followed"), [
    ("sessions", ["{cwd}/sessions"]),
    ("{cwd}/b:{cwd}/a", ["{cwd}/a", "{cwd}/b"]),
    ("{cwd}/a/", ["{cwd}/a"]),
], ids=["relative", "another order", "trailing slash"])
def test_usl_up_over_a_running_stack_reads_usl_follow_as_the_paths_it_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: str, followed: list[str]) -> None:
    """USL_FOLLOW=sessions (relative to where `usl up` runs) or the same paths in another order
    name what the running stack follows: "USL_FOLLOW names ..., but the running stack follows
    ..." with `usl down` to fix it was a false alarm."""
    from deploy import stack
    from deploy.cli import build_app

    home, cwd = tmp_path / "home", tmp_path / "work"
    (home / "run").mkdir(parents=True)
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("USL_HOME", str(home))
    monkeypatch.setenv("USL_FOLLOW", asked.format(cwd=cwd))
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "USL_API_URL", "USL_API_PORT"):
        monkeypatch.delenv(name, raising=False)
    cmd = [sys.executable, "-m", "deploy.cli", "ingest", "--follow", *(p.format(cwd=cwd) for p in followed)]
    (home / "run" / "follow.pid").write_text(json.dumps(process_record(14, cmd)))
    monkeypatch.setattr(stack, "running", lambda settings: {"api": 11, "supervisor": 12, "worker-1": 13, "follow": 14})
    monkeypatch.setattr(broker, "revive_broker", lambda settings: None)
    result = CliRunner().invoke(build_app(), ["up", "--detach"])
    assert result.exit_code == 0 and "already running" in result.output, result.output
    assert "USL_FOLLOW" not in result.output, result.output


def test_usl_up_gives_its_follower_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower's paths are what a later `usl up` compares USL_FOLLOW with, from any
    directory: a relative USL_FOLLOW is made absolute against where the stack starts."""
    monkeypatch.chdir(tmp_path)
    paths = stack_follow_paths(_settings(tmp_path / "home", follow="sessions:~/x"))
    assert paths == [str(tmp_path / "sessions"), str(Path("~/x").expanduser())]


def stack_follow_paths(settings: Settings) -> list[str]:
    from deploy.stack import follow_paths

    return follow_paths(settings)
