"""The local S3-compatible server (S3Proxy) the project starts by itself, as it starts Kafka.

With ``USL_OBJECT_STORE`` set and no ``USL_S3_ENDPOINT``, and in the test session,
:func:`ensure_s3proxy` resolves S3Proxy (Apache-2.0, ``org.gaul:s3proxy``) from Maven Central
with Maven once (``pom.xml`` beside this file, ``dependency:copy-dependencies``; the jars are
cached outside the repository, beside the Kafka jars under ``$USL_KAFKA_CACHE``), writes its
properties under ``$USL_HOME/s3proxy`` (the ``filesystem`` jclouds provider with its base
directory there, AWS v2/v4 signatures with credentials generated on first start and kept in a
0600 file), starts ``java -cp "libs/*" org.gaul.s3proxy.Main --properties FILE`` on a free
loopback port and waits until it answers. :func:`stop_s3proxy` stops it cleanly (SIGTERM, then
SIGKILL after a grace period), and only while the pid in ``s3proxy.json`` is still the server
it started. :func:`running_s3proxy` is the context-managed form the tests use.

Nothing downloads at run time except that one Maven fetch, exactly as for the broker.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.jars import fetch_jars_once, free_port, port_open
from deploy.process import PRIVATE_UMASK, is_same_process, private_dir, process_record, terminate
from sinks.objectstore.exceptions import ObjectStoreUnavailableError
from streams.settings import Settings

__all__ = [
    "S3PROXY_VERSION",
    "S3ProxyInfo",
    "ensure_s3proxy",
    "ensure_s3proxy_jars",
    "local_s3proxy_status",
    "running_s3proxy",
    "stop_s3proxy",
]

S3PROXY_VERSION = "2.6.0"
_HERE = Path(__file__).resolve().parent
_START_TIMEOUT_SECONDS = 60.0
_STATE_FILE = "s3proxy.json"
_CREDENTIALS_FILE = "credentials.json"


@dataclass(frozen=True)
class S3ProxyInfo:
    """A running local S3Proxy: its endpoint, credentials and where it keeps the buckets."""

    pid: int
    endpoint: str
    access_key: str
    secret_key: str
    data_dir: str

    def __repr__(self) -> str:  # the secret key never reaches a log line or a traceback
        return f"S3ProxyInfo(pid={self.pid}, endpoint={self.endpoint!r}, data_dir={self.data_dir!r})"


def _state_dir(settings: Settings) -> Path:
    return Path(settings.home).resolve() / "s3proxy"


def ensure_s3proxy_jars(settings: Settings) -> Path:
    """Resolve the S3Proxy jars with Maven once (132 jars, 43 MB); later calls reuse the cache."""
    libs = Path(settings.kafka_cache).expanduser() / f"s3proxy-{S3PROXY_VERSION}" / "libs"
    return fetch_jars_once(_HERE / "pom.xml", libs, properties={"s3proxy.version": S3PROXY_VERSION},
                           what=f"S3Proxy {S3PROXY_VERSION}", error=ObjectStoreUnavailableError,
                           hint="set USL_S3_ENDPOINT")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _credentials(state_dir: Path) -> tuple[str, str]:
    """The local server's access key and secret key, generated on first start (0600 file)."""
    path = state_dir / _CREDENTIALS_FILE
    stored = _read_json(path)
    if stored and stored.get("accessKey") and stored.get("secretKey"):
        return str(stored["accessKey"]), str(stored["secretKey"])
    access_key, secret_key = f"usl-{secrets.token_hex(8)}", secrets.token_urlsafe(30)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"accessKey": access_key, "secretKey": secret_key}, out)
    return access_key, secret_key


def _properties(endpoint: str, access_key: str, secret_key: str, data_dir: Path) -> str:
    return "\n".join([
        f"s3proxy.endpoint={endpoint}",
        "s3proxy.authorization=aws-v2-or-v4",
        f"s3proxy.identity={access_key}",
        f"s3proxy.credential={secret_key}",
        "jclouds.provider=filesystem",
        f"jclouds.filesystem.basedir={data_dir}",
        "",
    ])


def local_s3proxy_status(settings: Settings) -> S3ProxyInfo | None:
    """The local S3Proxy if it is running (and still the process it started), else None."""
    state_dir = _state_dir(settings)
    state = _read_json(state_dir / _STATE_FILE)
    if not state or not is_same_process(int(state.get("pid") or 0), state):
        return None
    port = int(str(state["endpoint"]).rsplit(":", 1)[1])
    if not port_open(port):
        return None
    access_key, secret_key = _credentials(state_dir)
    return S3ProxyInfo(int(state["pid"]), str(state["endpoint"]), access_key, secret_key, str(state["dataDir"]))


def ensure_s3proxy(settings: Settings) -> S3ProxyInfo:
    """The local S3Proxy, started if it is not running."""
    return local_s3proxy_status(settings) or _start(settings)


def _start(settings: Settings) -> S3ProxyInfo:
    if shutil.which("java") is None:
        raise ObjectStoreUnavailableError("Java 17+ is needed to run the local S3Proxy; install a JDK or set USL_S3_ENDPOINT")
    libs = ensure_s3proxy_jars(settings)
    private_dir(Path(settings.home).resolve())
    state_dir = private_dir(_state_dir(settings))
    data_dir = private_dir(state_dir / "data")
    previous = _read_json(state_dir / _STATE_FILE) or {}
    # A restarted server keeps its address when the port is still free, so clients keep working.
    port = int(str(previous.get("endpoint", ":0")).rsplit(":", 1)[1] or 0)
    if not port or port_open(port):
        port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    access_key, secret_key = _credentials(state_dir)
    props = state_dir / "s3proxy.properties"
    fd = os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(_properties(endpoint, access_key, secret_key, data_dir))
    command = ["java", "-Xms64m", "-Xmx256m", "-Djava.awt.headless=true",
               f"-Dlogback.configurationFile={_HERE / 'logback.xml'}",
               "-cp", f"{libs}/*", "org.gaul.s3proxy.Main", "--properties", str(props)]
    log = os.fdopen(os.open(state_dir / "s3proxy.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, umask=PRIVATE_UMASK)
    log.close()
    (state_dir / _STATE_FILE).write_text(json.dumps(
        {**process_record(proc.pid, command), "endpoint": endpoint, "dataDir": str(data_dir)}))
    _wait_ready(proc, endpoint, state_dir / "s3proxy.log")
    return S3ProxyInfo(proc.pid, endpoint, access_key, secret_key, str(data_dir))


def _wait_ready(proc: subprocess.Popen[bytes], endpoint: str, log_path: Path) -> None:
    """Until the server answers HTTP (an unsigned request is refused with 403: it is up)."""
    deadline = time.monotonic() + _START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise ObjectStoreUnavailableError(f"the local S3Proxy exited with code {proc.returncode}:\n{tail}")
        try:
            urllib.request.urlopen(endpoint + "/", timeout=2).close()
            return
        except urllib.error.HTTPError:
            return
        except (OSError, urllib.error.URLError):
            time.sleep(0.2)
    raise ObjectStoreUnavailableError(f"the local S3Proxy did not answer on {endpoint} in {_START_TIMEOUT_SECONDS:.0f}s")


def stop_s3proxy(settings: Settings, *, grace_seconds: float = 15.0) -> bool:
    """Stop the local S3Proxy cleanly; True if one was running. Its buckets stay on disk."""
    state = _read_json(_state_dir(settings) / _STATE_FILE)
    if not state or not is_same_process(int(state.get("pid") or 0), state):
        return False  # a pid the system gave to another program since is never signalled
    terminate(int(state["pid"]), grace_seconds=grace_seconds)
    return True


@contextmanager
def running_s3proxy(settings: Settings) -> Iterator[S3ProxyInfo]:
    """A local S3Proxy for the duration of the block (started if needed, stopped after)."""
    info = ensure_s3proxy(settings)
    try:
        yield info
    finally:
        stop_s3proxy(settings)
