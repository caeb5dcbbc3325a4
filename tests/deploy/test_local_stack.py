"""The local stack's processes: the KRaft cluster id, private files, and pid files that are
checked before anything is signalled (issue 15 items 8 and 9)."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import deploy.kafka.broker as broker
from deploy import stack
from deploy.process import (
    PRIVATE_UMASK,
    identity,
    is_same_process,
    pid_alive,
    private_dir,
    process_record,
)
from streams.settings import Settings
from tests.fuzz.profile import fuzz

# URL-safe base64 of a first byte 0xf8..0xfb starts with "-" (index 62): one id in 64.
DASH_FIRST = bytes([0xF8]) + bytes(range(1, 16))
GOOD = bytes(range(16, 32))


def feeder(*chunks: bytes) -> Any:
    pending = list(chunks)
    return lambda size: pending.pop(0)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The shell umask most users have, which made $USL_HOME 0755 and segments 0644."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process that is not ours to stop: what a recycled pid points at."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


# -- the KRaft cluster id (item 8) -----------------------------------------------------------


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """``usl up`` failed about one start in 64: kafka-storage read "-t -Ab..." as two options."""
    assert base64.urlsafe_b64encode(DASH_FIRST).decode().startswith("-")
    assert broker.new_cluster_id(feeder(DASH_FIRST, GOOD)) == base64.urlsafe_b64encode(GOOD).rstrip(b"=").decode()
    zero, one = bytes(16), bytes(15) + b"\x01"  # Kafka's reserved ids
    assert broker.new_cluster_id(feeder(zero, one, DASH_FIRST, GOOD)) == broker.new_cluster_id(feeder(GOOD))


@fuzz(200)
@given(draws=st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=8))
def test_the_cluster_id_is_the_first_acceptable_draw(draws: list[bytes]) -> None:
    acceptable = [raw for raw in draws if not base64.urlsafe_b64encode(raw).startswith(b"-")
                  and int.from_bytes(raw, "big") > 1]
    if not acceptable:
        draws.append(GOOD)
        acceptable = [GOOD]
    cluster_id = broker.new_cluster_id(feeder(*draws))
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")
    assert base64.urlsafe_b64decode(cluster_id + "==") == acceptable[0]


def test_real_cluster_ids_and_the_format_command() -> None:
    assert not [cid for cid in (broker.new_cluster_id() for _ in range(5000)) if cid.startswith("-")]
    command = broker._format_command(["-Xmx1m"], "libs/*", "-AbCdEfGhIjKlMnOpQrStUv", Path("p"))
    assert "--cluster-id=-AbCdEfGhIjKlMnOpQrStUv" in command and "-t" not in command


def test_kafka_storage_formats_with_an_id_that_starts_with_a_dash(tmp_path: Path) -> None:
    """The real StorageTool takes --cluster-id=ID whatever the id starts with."""
    libs = broker.ensure_jars(Settings.from_env({}, home=tmp_path))
    data = tmp_path / "data"
    props = tmp_path / "server.properties"
    props.write_text(broker._server_properties(data, 19092, 19093))
    command = broker._format_command(["-Xmx256m"], f"{libs}/*", "-AbCdEfGhIjKlMnOpQrStUv", props)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False,
                          umask=PRIVATE_UMASK)
    assert done.returncode == 0, done.stdout + done.stderr
    meta = data / "meta.properties"
    assert "cluster.id=-AbCdEfGhIjKlMnOpQrStUv" in meta.read_text()
    assert mode(meta) & 0o077 == 0


# -- private files (item 9) ------------------------------------------------------------------


def test_private_dir_is_owner_only_under_umask_022(tmp_path: Path, umask_022: None) -> None:
    home = private_dir(tmp_path / "usl-home")
    assert mode(home) == 0o700
    (tmp_path / "shared").mkdir(mode=0o755)
    assert mode(private_dir(tmp_path / "shared")) == 0o755  # an existing directory keeps its mode


def test_stack_processes_start_with_umask_077(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              umask_022: None) -> None:
    """What a stack process creates (index files, L1-derived data, logs) is owner-only."""
    probe = tmp_path / "probe.sh"
    probe.write_text('#!/bin/sh\necho data > "$USL_PROBE_FILE"\necho started\n')
    probe.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(probe))  # the stack runs "$python -m deploy.cli ..."
    settings = Settings.from_env({}, home=tmp_path / "home")
    written = tmp_path / "out" / "segment"
    written.parent.mkdir()
    pid = stack.start_process(settings, "worker-1", ["worker"], {"USL_PROBE_FILE": str(written)})
    home = tmp_path / "home"
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mode(written) == 0o600
    assert (mode(home), mode(home / "logs"), mode(home / "run")) == (0o700, 0o700, 0o700)
    assert mode(home / "logs" / "worker-1.log") == 0o600
    assert (home / "logs" / "worker-1.log").read_text() == "started\n"


def test_the_broker_runs_with_umask_077_in_a_private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          umask_022: None) -> None:
    seen: dict[str, dict[str, Any]] = {}

    def fake_run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen["format"] = {"command": command, **kwargs}
        return subprocess.CompletedProcess(command, 0, "", "")

    class FakePopen:
        def __init__(self, command: list[str], **kwargs: Any) -> None:
            seen["broker"] = {"command": command, **kwargs}
            self.pid = os.getpid()

    monkeypatch.setattr(broker.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(broker, "ensure_jars", lambda settings: tmp_path / "libs")
    monkeypatch.setattr(broker.subprocess, "run", fake_run)
    monkeypatch.setattr(broker.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(broker, "_wait_ready", lambda *args: None)
    settings = Settings.from_env({}, home=tmp_path / "home")
    broker._start(settings)
    assert seen["format"]["umask"] == seen["broker"]["umask"] == 0o077
    assert any(arg.startswith("--cluster-id=") for arg in seen["format"]["command"])
    state = tmp_path / "home" / "kafka"
    assert (mode(tmp_path / "home"), mode(state), mode(state / "data")) == (0o700, 0o700, 0o700)
    assert mode(state / "broker.log") == 0o600
    recorded = json.loads((state / "broker.json").read_text())
    assert recorded["cmd"] == seen["broker"]["command"] and recorded["identity"] == identity(os.getpid())


# -- pid files are checked before a signal (item 9) ------------------------------------------


def test_is_same_process(bystander: subprocess.Popen[bytes]) -> None:
    command = [sys.executable, "-c", "import time; time.sleep(120)"]
    record = process_record(bystander.pid, command)
    assert is_same_process(bystander.pid, record)
    assert record["identity"]["cmdline"] == command
    reused = {**record, "identity": {**record["identity"], "startTicks": record["identity"]["startTicks"] - 1}}
    assert not is_same_process(bystander.pid, reused)
    assert not is_same_process(bystander.pid, {**record, "identity": {**record["identity"], "bootId": "x"}})
    assert is_same_process(bystander.pid, {"pid": bystander.pid, "cmd": command})  # an older pid file
    assert not is_same_process(bystander.pid, {"pid": bystander.pid, "cmd": [sys.executable, "-m", "deploy.cli", "worker"]})
    assert not is_same_process(bystander.pid, {"pid": bystander.pid})
    bystander.kill()
    bystander.wait()
    assert not is_same_process(bystander.pid, record)


@pytest.mark.parametrize("recorded", ["older", "reused"])
def test_usl_down_never_signals_a_recycled_pid(tmp_path: Path, bystander: subprocess.Popen[bytes],
                                               recorded: str) -> None:
    """After a reboot (or a crash and pid wrap) the pid in a pid file may run another program."""
    settings = Settings.from_env({}, home=tmp_path)
    run = tmp_path / "run"
    run.mkdir(parents=True)
    ours = [sys.executable, "-m", "deploy.cli", "worker"]
    if recorded == "older":
        entry: dict[str, Any] = {"pid": bystander.pid, "cmd": ours}
    else:
        entry = process_record(bystander.pid, ours)
        entry["identity"]["startTicks"] -= 5
    (run / "worker-1.pid").write_text(json.dumps(entry))
    assert stack.running(settings) == {}
    assert not (run / "worker-1.pid").exists()
    (run / "worker-1.pid").write_text(json.dumps(entry))
    assert stack.stop_stack(settings) == []
    time.sleep(0.2)
    assert bystander.poll() is None, "a process that was not ours got signalled"


def test_stop_broker_never_signals_a_recycled_pid(tmp_path: Path, bystander: subprocess.Popen[bytes]) -> None:
    settings = Settings.from_env({}, home=tmp_path)
    state = tmp_path / "kafka"
    state.mkdir(parents=True)
    reused = {**process_record(bystander.pid, ["java", "kafka.Kafka", "x"]), "bootstrap": "127.0.0.1:9"}
    reused["identity"]["startTicks"] -= 5
    for entry in ({"pid": bystander.pid, "bootstrap": "127.0.0.1:9"}, reused):  # older, reused
        (state / "broker.json").write_text(json.dumps(entry))
        assert broker.local_broker_status(settings) is None
        assert broker.stop_broker(settings, grace_seconds=1) is False
        assert bystander.poll() is None, "a process that was not the broker got signalled"


def test_usl_up_starts_a_local_s3proxy_when_the_object_store_has_no_endpoint(tmp_path: Path,
                                                                             java_and_maven: None) -> None:
    """USL_OBJECT_STORE without USL_S3_ENDPOINT: the stack's processes get a local S3Proxy's
    endpoint and keys (started once, as the broker is; `usl down` stops it); with an
    endpoint, or without an object store, nothing is started."""
    import boto3
    from botocore.config import Config

    from deploy.cli.stack import _local_object_store_env
    from deploy.s3proxy.server import local_s3proxy_status, stop_s3proxy

    assert _local_object_store_env(Settings.from_env({}, home=tmp_path / "none")) == {}
    given = Settings.from_env({"USL_OBJECT_STORE": "s3://b/p", "USL_S3_ENDPOINT": "http://127.0.0.1:1"},
                              home=tmp_path / "given")
    assert _local_object_store_env(given) == {}

    settings = Settings.from_env({"USL_OBJECT_STORE": "s3://usl-up/p"}, home=tmp_path / "local")
    try:
        env = _local_object_store_env(settings)
        assert set(env) == {"USL_S3_ENDPOINT", "USL_S3_ACCESS_KEY", "USL_S3_SECRET_KEY"}
        assert _local_object_store_env(settings) == env  # the running one, not a second
        client = boto3.client("s3", endpoint_url=env["USL_S3_ENDPOINT"], aws_access_key_id=env["USL_S3_ACCESS_KEY"],
                              aws_secret_access_key=env["USL_S3_SECRET_KEY"], region_name="us-east-1",
                              config=Config(request_checksum_calculation="when_required",
                                            response_checksum_validation="when_required"))
        client.create_bucket(Bucket="usl-up")
        assert "usl-up" in {bucket["Name"] for bucket in client.list_buckets()["Buckets"]}
    finally:
        stop_s3proxy(settings)
    assert local_s3proxy_status(settings) is None


# -- one port, one stack -----------------------------------------------------------------------


def test_usl_up_refuses_a_port_another_server_holds(tmp_path: Path) -> None:
    """A second stack whose API port another stack held started "fine": its own API could not
    bind, and its wait and every later command were answered by the other stack's API."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        home = tmp_path / "second"
        env = {**os.environ, "USL_HOME": str(home), "USL_API_PORT": str(port)}
        env.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # nothing configured: `up` would start a broker
        done = subprocess.run([sys.executable, "-m", "deploy.cli", "up", "--detach"], env=env,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    message = " ".join((done.stdout + done.stderr).split())
    assert f"port {port} is taken" in message and "usl up --port" in message
    assert "Traceback" not in done.stderr
    assert not (home / "kafka" / "broker.json").exists()  # refused before a broker started
    assert not stack.running(Settings.from_env({}, home=home))


_FOREGROUND_UP = """
import json, subprocess, sys
from pathlib import Path
from deploy import stack
from deploy.process import process_record
from streams.settings import Settings

settings = Settings.from_env({}, home=Path(sys.argv[1]))
sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]

def start(settings, name, args, env=None):  # a stand-in stack process, started as start_process does
    proc = subprocess.Popen(sleeper, start_new_session=True)
    (stack._run_dir(settings) / f"{name}.pid").write_text(json.dumps(process_record(proc.pid, sleeper)))
    return proc.pid

stack.start_process = start
stack.supervise(settings, {"worker-1": ["worker"]}, {})
"""


def test_usl_down_stops_a_foreground_usl_up_before_it_restarts_anything(tmp_path: Path) -> None:
    """`usl up` without --detach supervises in the foreground, in the process group of whatever
    ran it. `usl down` must stop it first (else it restarts what `usl down` stops) and only it,
    not its group: here a shell leads the group, so signalling the group by the supervisor's
    pid would reach nothing and leave it running."""
    settings = Settings.from_env({}, home=tmp_path)
    script = tmp_path / "up.py"
    script.write_text(_FOREGROUND_UP)
    shell = subprocess.Popen(["bash", "-c", f'"{sys.executable}" "{script}" "{tmp_path}"; true'],
                             start_new_session=True, cwd=Path(__file__).resolve().parents[2])
    try:
        deadline = time.monotonic() + 30
        while set(stack.running(settings)) != {"supervisor", "worker-1"} and time.monotonic() < deadline:
            time.sleep(0.1)
        before = stack.running(settings)
        assert set(before) == {"supervisor", "worker-1"} and os.getpgid(before["supervisor"]) == shell.pid
        assert sorted(stack.stop_stack(settings)) == ["supervisor", "worker-1"]
        time.sleep(2.5)  # longer than the supervisor's restart back-off
        assert stack.running(settings) == {} and not any(pid_alive(pid) for pid in before.values())
        assert shell.wait(timeout=10) == 0  # the shell that ran it was not signalled
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, 9)
            shell.wait()
