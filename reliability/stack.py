"""The stack the fault suite breaks: its own broker, the supervised processes, and the disks.

Each index kind's directory (``$USL_HOME/indexes/default/<kind>``) is a small tmpfs of its
own when ``mount`` is permitted (root with CAP_SYS_ADMIN), so filling it with a ballast file
gives the sink real ENOSPC. Where mounting is refused, a disk fault is an RLIMIT_FSIZE of 0 on
the sink process (Python ignores SIGXFSZ, so every write that extends a file fails with EFBIG);
log lines the sink writes meanwhile are lost then, its log being a file too.

With ``object_store`` on, the suite also starts its own S3Proxy (:mod:`deploy.s3proxy.server`,
as it starts its own broker) and every sink publishes its commits to ``s3://usl-faults/rel``
there; the store-unavailable fault stops and restarts it on the same address.

With ``sink_shards`` N > 1 the sinks are the processes ``usl up`` runs with
``USL_SINK_SHARDS=N`` (:func:`deploy.stack.sink_children`: N shard processes, shard I of every
kind in process I, ``usl sink --kind ... --shard I/N``); otherwise each
kind has a process of its own (``sink-KIND``), so a fault can hit one kind alone.
:func:`sink_layout` reads which process runs which kind (and shard) from the children's
arguments, so the suite follows whatever ``usl up`` runs.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from deploy.kafka.broker import ensure_broker, pid_alive, stop_broker
from deploy.s3proxy.server import S3ProxyInfo, ensure_s3proxy, stop_s3proxy
from deploy.stack import running, sink_children
from deploy.testing import free_port, settings_env
from sinks.service import ALL_KINDS
from sinks.shards import parse_shard
from streams.settings import Settings
from streams.topics import ensure_topics

__all__ = ["SinkProcess", "SuiteStack", "sink_layout"]

_BALLAST = ".ballast"
_STORE_BUCKET = "usl-faults"
_STORE_PREFIX = "rel"


@dataclass(frozen=True)
class SinkProcess:
    """One supervised child that runs a kind's sink: its name (pid and log file) and the shard
    of the kind it writes (``shard-I-of-N``; None for the unsharded layout)."""

    name: str
    shard: str | None = None


def sink_layout(children: Mapping[str, Sequence[str]]) -> dict[str, list[SinkProcess]]:
    """index kind → the children that write it, from their ``usl sink`` arguments (``--kind``
    defaults to every kind; ``--shard I/N`` with N > 1 names a shard), ordered by name."""
    layout: dict[str, list[SinkProcess]] = {}
    for name, args in sorted(children.items()):
        if not args or args[0] != "sink":
            continue
        options = dict(zip(args[1::2], args[2::2], strict=False))
        kinds = [k.strip() for k in options.get("--kind", ",".join(ALL_KINDS)).split(",") if k.strip()]
        shard = parse_shard(options.get("--shard"))
        for kind in kinds:
            layout.setdefault(kind, []).append(SinkProcess(name, None if shard is None else shard.name))
    return layout


class SuiteStack:
    """Broker, supervisor and children of one suite run, all under ``home``."""

    def __init__(self, home: Path, *, tmpfs_mb: int = 256, embedder: str = "hash:64",
                 object_store: bool = False, sink_shards: int = 1) -> None:
        self.home = Path(home).resolve()
        self.home.mkdir(parents=True, exist_ok=True)
        self.broker_settings = Settings.from_env({}, home=self.home / "broker")
        self.object_store = object_store
        self.sink_shards = sink_shards
        self.store_settings = Settings.from_env({}, home=self.home / "s3")
        self.store: S3ProxyInfo | None = None
        self.tmpfs_mb = tmpfs_mb
        self.embedder = embedder
        self.mounts: list[Path] = []
        self.disk_mode = "none"
        self.api_port = free_port()
        self.bootstrap = ""
        self.settings: Settings | None = None
        self._supervisor: subprocess.Popen[bytes] | None = None
        self._limited: dict[int, tuple[int, int]] = {}

    # -- broker --------------------------------------------------------------------------------

    def start_broker(self) -> str:
        self.bootstrap = ensure_broker(self.broker_settings)
        return self.bootstrap

    def stop_broker(self) -> None:
        stop_broker(self.broker_settings)

    def restart_broker(self) -> str:
        """Start the stopped broker again; it must come back on the same address."""
        bootstrap = ensure_broker(self.broker_settings)
        if bootstrap != self.bootstrap:
            raise RuntimeError(f"the broker came back on {bootstrap}, not {self.bootstrap}")
        return bootstrap

    # -- object store ---------------------------------------------------------------------------

    def start_store(self) -> S3ProxyInfo:
        self.store = ensure_s3proxy(self.store_settings)
        return self.store

    def stop_store(self) -> None:
        stop_s3proxy(self.store_settings)

    def restart_store(self) -> S3ProxyInfo:
        """Start the stopped S3Proxy again; it must come back on the same endpoint (the sinks
        keep the one they started with)."""
        assert self.store is not None
        info = ensure_s3proxy(self.store_settings)
        if info.endpoint != self.store.endpoint:
            raise RuntimeError(f"the object store came back on {info.endpoint}, not {self.store.endpoint}")
        self.store = info
        return info

    def store_dir(self) -> Path:
        """Where S3Proxy's filesystem backend keeps the suite's objects (bucket/prefix)."""
        assert self.store is not None
        return Path(self.store.data_dir) / _STORE_BUCKET / _STORE_PREFIX

    # -- the stack -----------------------------------------------------------------------------

    def configure(self) -> Settings:
        store: dict[str, str] = {}
        if self.object_store:
            info = self.store or self.start_store()
            store = {"object_store": f"s3://{_STORE_BUCKET}/{_STORE_PREFIX}", "s3_endpoint": info.endpoint,
                     "s3_access_key": info.access_key, "s3_secret_key": info.secret_key}
        self.settings = Settings.from_env(
            {}, home=self.home / "usl", topic_prefix="rel.", bootstrap_servers=self.bootstrap,
            l1_partitions=2, stream_partitions=2, sink_batch_seconds=0.3, sink_batch_size=200,
            tick_every_seqs=8, idle_gap_seconds=60.0, chunk_tokens=128, chunk_overlap_tokens=24,
            embedder=self.embedder, sink_shards=self.sink_shards, **store,
        )
        ensure_topics(self.bootstrap, self.settings)
        return self.settings

    def index_dir(self, kind: str) -> Path:
        assert self.settings is not None
        return Path(self.settings.home).resolve() / "indexes" / "default" / kind

    def mount_disks(self) -> str:
        """Give each kind's index directory its own tmpfs; the disk-fault mode in use."""
        for kind in ALL_KINDS:
            target = self.index_dir(kind)
            target.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.tmpfs_mb}m,mode=0755",
                                   "tmpfs", str(target)], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                self.unmount_disks()
                self.disk_mode = "rlimit-fsize"
                return self.disk_mode
            self.mounts.append(target)
        self.disk_mode = "tmpfs-enospc"
        return self.disk_mode

    def unmount_disks(self) -> None:
        for target in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
        self.mounts.clear()

    def children(self) -> dict[str, list[str]]:
        kids: dict[str, list[str]] = {"worker": ["worker"]}
        if self.sink_shards > 1:
            assert self.settings is not None
            kids.update(sink_children(self.settings))
        else:
            for kind in ALL_KINDS:
                kids[f"sink-{kind}"] = ["sink", "--kind", kind]
        kids["api"] = ["serve", "--port", str(self.api_port), "--host", "127.0.0.1"]
        return kids

    def start(self) -> None:
        """Start the supervisor, which starts (and restarts) every child."""
        assert self.settings is not None
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = settings_env(self.settings)
        env.pop("USL_METRICS_PORT", None)  # each child picks a free port
        for name in ("USL_OBJECT_STORE", "USL_S3_ENDPOINT", "USL_S3_ACCESS_KEY", "USL_S3_SECRET_KEY"):
            env.pop(name, None)  # only the suite's own store, never the caller's
        if self.settings.object_store:
            env.update({"USL_OBJECT_STORE": self.settings.object_store,
                        "USL_S3_ENDPOINT": str(self.settings.s3_endpoint),
                        "USL_S3_ACCESS_KEY": str(self.settings.s3_access_key),
                        "USL_S3_SECRET_KEY": str(self.settings.s3_secret_key)})
        # faust's consumer group notices a SIGKILLed worker after its session timeout: 10 s
        # here instead of the default 60 s (both are recoveries; this one is quicker to wait for).
        env.setdefault("BROKER_SESSION_TIMEOUT", "10")
        env.setdefault("BROKER_HEARTBEAT_INTERVAL", "1")
        # Every answer with a cursor pins its generations for the cursor's lifetime (default
        # an hour). The querier gets one every fraction of a second while sinks commit every
        # 0.3 s: with the default, the pins alone fill an index disk within minutes.
        env.setdefault("USL_CURSOR_TTL_SECONDS", "60")
        repo = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
        # The worker keeps faust's data directory in its working directory.
        self._supervisor = subprocess.Popen(
            [sys.executable, "-m", "reliability.supervisor", json.dumps(self.children())],
            cwd=self.home, env=env, stdout=(logs / "supervisor.log").open("ab"),
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def sink_layout(self) -> dict[str, list[SinkProcess]]:
        """index kind → the children that write it (see :func:`sink_layout`)."""
        return sink_layout(self.children())

    def sharded_kinds(self) -> dict[str, list[SinkProcess]]:
        """The kinds written by shard processes → those processes (empty when unsharded)."""
        return {kind: procs for kind, procs in self.sink_layout().items() if any(p.shard for p in procs)}

    def sink_process(self, kind: str) -> str:
        """The one child that runs ``kind``'s sink (the unsharded layout)."""
        procs = self.sink_layout()[kind]
        if len(procs) != 1:
            raise RuntimeError(f"{kind} is written by {len(procs)} shard processes, not one sink")
        return procs[0].name

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def pids(self) -> dict[str, int]:
        assert self.settings is not None
        return running(self.settings)

    def wait_running(self, names: list[str] | None = None, *, timeout: float = 120.0,
                     not_pids: dict[str, int] | None = None) -> dict[str, int]:
        """Wait until every named child runs (with a pid other than ``not_pids``'s)."""
        wanted = names or list(self.children())
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if all(n in pids and (not_pids or {}).get(n) != pids[n] for n in wanted):
                return pids
            if self._supervisor is not None and self._supervisor.poll() is not None:
                raise RuntimeError(f"the supervisor exited; see {self.home / 'logs'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"children not running after {timeout:.0f}s: "
                                   f"{sorted(set(wanted) - set(pids))}")
            time.sleep(0.2)

    def signal(self, name: str, sig: int) -> int:
        """Send ``sig`` to the child's process group; its pid."""
        pid = self.pids()[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        return pid

    def log_text(self, name: str) -> str:
        assert self.settings is not None
        path = Path(self.settings.home).resolve() / "logs" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def sink_counter(self, process: str, name: str, **labels: str) -> float | None:
        """Value of counter ``name`` (with ``labels``) on the running sink child ``process``'s
        ``/metrics``; None when the sink has not said where it serves them or does not answer.
        Each sink picks a free port and logs it; the last such line is the running process's."""
        marker = "sink metrics on "
        text = self.log_text(process)
        at = text.rfind(marker)
        if at < 0:
            return None
        url = text[at + len(marker):].split(maxsplit=1)[0]
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = response.read().decode()
        except OSError:
            return None
        family_name = name.removesuffix("_total")
        for family in text_string_to_metric_families(body):
            if family.name != family_name:
                continue
            return sum(sample.value for sample in family.samples if sample.name == name
                       and all(sample.labels.get(k) == v for k, v in labels.items()))
        return 0.0

    # -- disks ---------------------------------------------------------------------------------

    def fill_disk(self, kind: str) -> int:
        """Make writes of ``kind``'s sink fail; bytes of ballast added (0 in rlimit mode).
        Call it again to top the ballast up: whatever the sink frees (an aborted staging
        dir, a collected generation) is taken back at once."""
        if self.disk_mode == "tmpfs-enospc":
            written = 0
            fd = os.open(self.index_dir(kind) / _BALLAST, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                for size in (1 << 20, 1 << 12):
                    block = b"\0" * size
                    while True:
                        try:
                            written += os.write(fd, block)
                        except OSError as exc:
                            if exc.errno != errno.ENOSPC:
                                raise
                            break
            finally:
                os.close(fd)
            return written
        pid = self.pids()[self.sink_process(kind)]
        if pid not in self._limited:
            self._limited[pid] = resource.prlimit(pid, resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
        return 0

    def free_disk(self, kind: str) -> None:
        if self.disk_mode == "tmpfs-enospc":
            (self.index_dir(kind) / _BALLAST).unlink(missing_ok=True)
            return
        for pid, previous in list(self._limited.items()):
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(pid, resource.RLIMIT_FSIZE, previous)
            del self._limited[pid]

    # -- shutdown ------------------------------------------------------------------------------

    def close(self, *, keep_home: bool = False) -> None:
        if self._supervisor is not None and self._supervisor.poll() is None:
            # Continue anything left stopped, so SIGTERM can reach it.
            for pid in self.pids().values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGCONT)
            self._supervisor.send_signal(signal.SIGTERM)
            try:
                self._supervisor.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self._supervisor.kill()
                self._supervisor.wait(timeout=30)
        for pid in self.pids().values() if self.settings is not None else ():
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
        self.stop_broker()
        if self.object_store:
            self.stop_store()
        self.unmount_disks()
        if not keep_home:
            shutil.rmtree(self.home, ignore_errors=True)
