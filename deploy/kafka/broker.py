"""The local single-node Apache Kafka broker (KRaft) that the project starts by itself.

With no ``KAFKA_BOOTSTRAP_SERVERS``, ``usl up``, the test fixtures and ``.ci/run`` call
:func:`ensure_broker`: it resolves the official broker jars from Maven Central with Maven
(``pom.xml`` beside this file, ``dependency:copy-dependencies``), caches them outside the
repository, formats KRaft storage under ``$USL_HOME/kafka`` on first use, starts the JVM on free
loopback ports, and waits until the broker answers. :func:`stop_broker` stops it cleanly
(SIGTERM, then SIGKILL after a grace period), and only while the pid in ``broker.json`` is still
the broker it started (:func:`deploy.process.is_same_process`).

The broker runs with umask 077 and its state directory is 0700: its segments hold raw events,
secrets included, and are readable by the owner only. The KRaft cluster id is made as Kafka's
own ``Uuid.randomUuid`` makes one (:func:`new_cluster_id`) and passed as ``--cluster-id=ID``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.jars import fetch_jars_once, free_port, port_open
from deploy.process import (
    PRIVATE_UMASK,
    identity,
    is_same_process,
    pid_alive,
    private_dir,
    process_record,
    terminate,
)
from streams.exceptions import BrokerError
from streams.settings import Settings

__all__ = [
    "BrokerInfo",
    "ensure_broker",
    "ensure_jars",
    "local_broker_status",
    "new_cluster_id",
    "pid_alive",
    "stop_broker",
]

_HERE = Path(__file__).resolve().parent
_START_TIMEOUT_SECONDS = 90.0


@dataclass(frozen=True)
class BrokerInfo:
    """A running local broker, as recorded in ``$USL_HOME/kafka/broker.json``."""

    pid: int
    bootstrap: str
    controller_port: int
    data_dir: str


def _state_dir(settings: Settings) -> Path:
    return Path(settings.home).resolve() / "kafka"


def _jar_dir(settings: Settings) -> Path:
    return Path(settings.kafka_cache).expanduser() / f"kafka-{settings.kafka_version}" / "libs"


def ensure_jars(settings: Settings) -> Path:
    """Resolve the broker jars with Maven once; later calls reuse the cache."""
    return fetch_jars_once(_HERE / "pom.xml", _jar_dir(settings), properties={"kafka.version": settings.kafka_version},
                           what=f"Apache Kafka {settings.kafka_version}", error=BrokerError,
                           hint="set KAFKA_BOOTSTRAP_SERVERS")


def new_cluster_id(random_bytes: Callable[[int], bytes] = os.urandom) -> str:
    """A KRaft cluster id as Kafka's ``Uuid.randomUuid`` makes one: 16 random bytes in URL-safe
    base64 without padding, drawn again while the text starts with ``-`` (``kafka-storage``
    would read it as an option: about one id in 64) or the id is a reserved one (all zero, or
    zero but the last bit)."""
    while True:
        raw = random_bytes(16)
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
        if not text.startswith("-") and int.from_bytes(raw, "big") > 1:
            return text


def _format_command(java_opts: list[str], classpath: str, cluster_id: str, props: Path) -> list[str]:
    # --cluster-id=ID keeps the id one argument whatever it starts with.
    return ["java", *java_opts, "-cp", classpath, "kafka.tools.StorageTool", "format",
            f"--cluster-id={cluster_id}", "-c", str(props), "--ignore-formatted"]


def _is_our_broker(state: dict[str, Any]) -> bool:
    """Whether the pid in ``broker.json`` is still the broker it names (see deploy.process)."""
    pid = int(state.get("pid") or 0)
    if "cmd" in state or "identity" in state:
        return is_same_process(pid, state)
    # broker.json of an earlier version records the pid only: trust it only while that pid
    # runs a Kafka broker.
    now = identity(pid)
    return pid_alive(pid) and (now is None or "kafka.Kafka" in now["cmdline"])


def _read_state(settings: Settings) -> dict | None:
    path = _state_dir(settings) / "broker.json"
    if not path.exists():
        return None
    try:
        state: dict = json.loads(path.read_text())
        return state
    except (OSError, ValueError):
        return None


def local_broker_status(settings: Settings) -> BrokerInfo | None:
    """The local broker if it is running, else None."""
    state = _read_state(settings)
    if not state or not state.get("pid") or not _is_our_broker(state):
        return None
    port = int(state["bootstrap"].rsplit(":", 1)[1])
    if not port_open(port):
        return None
    return BrokerInfo(int(state["pid"]), state["bootstrap"], int(state["controllerPort"]), state["dataDir"])


def _server_properties(data_dir: Path, port: int, controller_port: int) -> str:
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={data_dir}",
        "num.partitions=1",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=8",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=true",
        # A single local node: nothing to gain from waiting on log flushes or long retention checks.
        "log.retention.check.interval.ms=300000",
        "log.segment.bytes=134217728",
        "",
    ])


def revive_broker(settings: Settings) -> str | None:
    """For ``usl up`` over a running stack: start the local broker again when it stopped (the
    supervisor restarts the stack's processes, not the broker), at the address those processes
    were given; return it, or None when there is nothing to revive (a configured cluster, no
    local broker recorded, or it answers). A broker that cannot come back there (its process
    runs but does not answer, or another program took its port) is a BrokerError naming what to do."""
    state = _read_state(settings)
    if settings.bootstrap_servers or not state or local_broker_status(settings) is not None:
        return None
    bootstrap = str(state.get("bootstrap", ""))
    restart = "stop the stack with `usl down`, then start it with `usl up --detach`"
    if _is_our_broker(state):
        raise BrokerError(f"the local Kafka broker (pid {state.get('pid')}) runs but does not answer on {bootstrap}; "
                          f"{restart} (its log: {_state_dir(settings) / 'broker.log'})")
    if port_open(int(bootstrap.rsplit(":", 1)[1] or 0)):
        raise BrokerError(f"the local Kafka broker has stopped and another program listens on its address "
                          f"{bootstrap}, where the running stack looks for it; {restart}")
    started = _start(settings)  # reuses the recorded ports when free, as they are
    if started.bootstrap != bootstrap:  # taken between the check and the start
        raise BrokerError(f"the local Kafka broker had stopped and could start again only at {started.bootstrap}, "
                          f"not {bootstrap}, where the running stack looks for it; {restart}")
    return started.bootstrap


def ensure_broker(settings: Settings) -> str:
    """Bootstrap servers to use: the configured cluster, or the local broker (started if needed)."""
    if settings.bootstrap_servers:
        return settings.bootstrap_servers
    running = local_broker_status(settings)
    if running:
        return running.bootstrap
    return _start(settings).bootstrap


def _start(settings: Settings) -> BrokerInfo:
    if shutil.which("java") is None:
        raise BrokerError("Java 17+ is needed to run the local Kafka broker; install a JDK or set KAFKA_BOOTSTRAP_SERVERS")
    libs = ensure_jars(settings)
    private_dir(Path(settings.home).resolve())
    state_dir = private_dir(_state_dir(settings))
    data_dir = private_dir(state_dir / "data")
    previous = _read_state(settings) or {}
    # Reuse the previous ports when free, so a restarted broker keeps its address.
    port = int(previous.get("bootstrap", ":0").rsplit(":", 1)[1] or 0)
    controller_port = int(previous.get("controllerPort", 0))
    if not port or port_open(port):
        port = free_port()
    if not controller_port or port_open(controller_port) or controller_port == port:
        controller_port = free_port()
        while controller_port == port:
            controller_port = free_port()
    props = state_dir / "server.properties"
    props.write_text(_server_properties(data_dir, port, controller_port))
    classpath = f"{libs}/*"
    java_opts = [
        "-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=50",
        f"-Dlog4j2.configurationFile={_HERE / 'log4j2.properties'}",
        "-Djava.awt.headless=true",
    ]
    if not (data_dir / "meta.properties").exists():
        fmt = subprocess.run(_format_command(java_opts, classpath, new_cluster_id(), props),
                             capture_output=True, text=True, check=False, umask=PRIVATE_UMASK)
        if fmt.returncode != 0:
            raise BrokerError(f"formatting KRaft storage failed:\n{(fmt.stdout + fmt.stderr)[-2000:]}")
    log = os.fdopen(os.open(state_dir / "broker.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    command = ["java", *java_opts, "-cp", classpath, "kafka.Kafka", str(props)]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, umask=PRIVATE_UMASK)
    log.close()
    bootstrap = f"127.0.0.1:{port}"
    info = BrokerInfo(proc.pid, bootstrap, controller_port, str(data_dir))
    (state_dir / "broker.json").write_text(json.dumps(
        {**process_record(proc.pid, command), "bootstrap": bootstrap,
         "controllerPort": controller_port, "dataDir": str(data_dir)}
    ))
    _wait_ready(proc, bootstrap, state_dir / "broker.log")
    return info


def _wait_ready(proc: subprocess.Popen[bytes], bootstrap: str, log_path: Path) -> None:
    from kafka import KafkaAdminClient

    import streams.kafka_compat  # noqa: F401  (keeps kafka-python's response classes alive)

    deadline = time.monotonic() + _START_TIMEOUT_SECONDS
    port = int(bootstrap.rsplit(":", 1)[1])
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise BrokerError(f"the local Kafka broker exited with code {proc.returncode}:\n{tail}")
        if port_open(port):
            try:
                admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
                admin.list_topics()
                admin.close()
                return
            except Exception as exc:  # the broker may accept connections before it serves metadata
                last_error = exc
        time.sleep(0.3)
    raise BrokerError(f"the local Kafka broker did not become ready in {_START_TIMEOUT_SECONDS:.0f}s: {last_error}")


def stop_broker(settings: Settings, *, grace_seconds: float = 30.0) -> bool:
    """Stop the local broker cleanly; True if one was running."""
    state = _read_state(settings)
    if not state or not _is_our_broker(state):
        return False  # a pid the system gave to another program since is never signalled
    terminate(int(state["pid"]), grace_seconds=grace_seconds)
    return True
