"""Java servers the project starts itself (the Kafka broker, S3Proxy): their jars, fetched from
Maven Central once into a cache, and the local ports they listen on."""

from __future__ import annotations

import fcntl
import shutil
import socket
import subprocess
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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
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
