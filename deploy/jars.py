"""Java servers the project starts itself (the Kafka broker, S3Proxy): their jars, fetched from
Maven Central once into a cache, and the local ports they listen on."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["fetch_jars_once", "free_port", "port_open"]


def fetch_jars_once(pom: Path, libs: Path, *, properties: dict[str, str], what: str,
                    error: type[Exception], hint: str) -> Path:
    """The runtime jars of ``pom`` in ``libs``, resolved with Maven the first time (``what`` names
    them in errors; ``hint`` says how to do without Maven). A ``.complete`` marker says a fetch
    finished; later calls only check it."""
    marker = libs / ".complete"
    if marker.exists():
        return libs
    libs.mkdir(parents=True, exist_ok=True)
    # Several processes may start a first server at once (parallel test workers): one fetches
    # while the others wait, so none starts Java over half-copied jars.
    with open(libs.parent / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return libs
        if shutil.which("mvn") is None:
            raise error(f"Maven (mvn) is needed once to fetch the {what} jars; install it or {hint}")
        cmd = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
               f"-DoutputDirectory={libs}", "-DincludeScope=runtime",
               *(f"-D{name}={value}" for name, value in properties.items())]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr)[-2000:]
            raise error(f"could not fetch the {what} jars with Maven:\n{tail}")
        marker.write_text(" ".join(properties.values()))
        return libs


_PORT_HELD_SECONDS = 600.0
"""How long a port :func:`free_port` handed out stays out of its hands (in every process of
this user): time enough for whoever asked to start its server on it."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing uses right now, for a server started soon after.

    Not the kernel's pick for port 0: that comes from the ephemeral range, the range outgoing
    connections take their source ports from. A server started seconds later on such a port can
    find it taken by a client's connection (a busy test run holds hundreds to its brokers),
    fail to bind and be restarted until that connection closes; and two processes asking at
    once can be handed the same port. So the port is drawn below the ephemeral range, and each
    one handed out is held back for ``_PORT_HELD_SECONDS`` across processes (a lock file and a
    marker per port in a directory of this user's under the temp directory; where there is
    none to write, the kernel picks)."""
    low = _ephemeral_low()
    first = max(10_000, low - 12_000)
    if low - first < 1_000:  # an unusual kernel range: leave the choice to the kernel
        return _kernel_port()
    held = Path(tempfile.gettempdir()) / f"usl-ports-{os.getuid()}"
    try:
        held.mkdir(mode=0o700, exist_ok=True)
        found = os.lstat(held)
        # One another user made (or a symlink) is no hold of ours: they could keep its lock
        # taken, and every start would wait on it for ever.
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o022:
            return _kernel_port()
        lock = open(held / ".lock", "w")
    except OSError:  # no temp directory to write in: the kernel's pick, as before the holds
        return _kernel_port()
    draw = random.Random()
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now = time.time()
        for _ in range(200):
            port = draw.randrange(first, low)
            marker = held / str(port)
            with contextlib.suppress(FileNotFoundError):
                if now - marker.stat().st_mtime < _PORT_HELD_SECONDS:
                    continue
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            marker.touch()
            os.utime(marker, (now, now))
            return port
    return _kernel_port()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _kernel_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on ``host``:``port`` (a wildcard host: loopback)."""
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except OSError:
        return False  # a name that does not resolve: nothing listens there for us
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(address) == 0
