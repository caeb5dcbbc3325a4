"""Local processes the project starts and later stops: private files, and pid files that know
which process they name.

- Every process of the local stack (the broker, the supervisor, workers, sinks, the API) starts
  with :data:`PRIVATE_UMASK`, so what it creates under ``$USL_HOME`` -- L1 segments holding raw
  secrets, index files, logs -- is readable by its owner only (0600 files, 0700 directories),
  whatever the shell's umask. :func:`private_dir` makes ``$USL_HOME`` itself 0700.
- Every process of the ``usl`` command keeps at most :data:`MALLOC_ARENAS` glibc malloc arenas
  (:func:`cap_malloc_arenas`, unless ``MALLOC_ARENA_MAX`` is set).
- A pid file records, besides the pid, the command line and :func:`identity` of the process
  (boot id and start time). :func:`is_same_process` holds only while that pid still runs that
  process, so ``usl down`` never signals a pid the system has since given to another program
  (after a reboot, or after the process died and pids wrapped).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["MALLOC_ARENAS", "PRIVATE_UMASK", "cap_malloc_arenas", "identity", "is_same_process",
           "pid_alive", "private_dir", "process_record"]

PRIVATE_UMASK = 0o077
MALLOC_ARENAS = 2
"""glibc malloc arenas a process of the stack keeps. glibc gives threads up to eight arenas
per core, and each arena keeps the high-water mark of what its threads held: the planner API
answers from a pool of threads, and while index generations rolled every 2 s its 16 arenas
held 150-160 MB that malloc_trim could give back (against ~80 MB in use), one more arena
filling every few minutes; the sinks' held 260 MB (44 MB in use). With two, the API's stayed
at ~125 MB and the sinks' at ~95 MB (docs/operations.md, "Memory")."""
_M_ARENA_MAX = -8  # glibc's malloc.h
_PROC = Path("/proc")


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) as a directory only its owner may enter; an
    existing directory keeps the mode its owner gave it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def cap_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Make glibc's malloc keep at most ``arenas`` arenas in this process; False where it did
    not: ``MALLOC_ARENA_MAX`` is set (glibc applied it at start), or the C library is not
    glibc. Call it before the process starts threads: glibc fixes its own limit once a ninth
    arena exists."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return False  # not glibc: mallopt's options may mean other things, or nothing
    return bool(ctypes.CDLL(None).mallopt(_M_ARENA_MAX, arenas))


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); ask /proc whether it is really running.
    stat = _PROC / str(pid) / "stat"
    try:
        return stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def identity(pid: int) -> dict[str, Any] | None:
    """``{"bootId", "startTicks", "cmdline"}`` of a running ``pid`` from /proc, or None (the pid
    is gone, or the system has no /proc). Start ticks (since boot) and the boot id together name
    one process for the life of the machine; a reused pid has another start time."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
        # Fields after "(comm)": state is field 3, starttime field 22.
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        cmdline = (_PROC / str(pid) / "cmdline").read_bytes()
        for _ in range(50):
            # Just after exec (Popen has returned) the kernel may not show the new command line
            # yet: read as empty. A process we record always has one, so wait for it briefly.
            if cmdline:
                break
            time.sleep(0.01)
            cmdline = (_PROC / str(pid) / "cmdline").read_bytes()
        boot_id = (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except (OSError, ValueError, IndexError):
        return None
    parts = [part.decode("utf-8", "replace") for part in cmdline.split(b"\0") if part]
    return {"bootId": boot_id, "startTicks": start_ticks, "cmdline": parts}


def process_record(pid: int, cmd: Sequence[str]) -> dict[str, Any]:
    """What a pid file holds for a process just started with ``cmd``."""
    return {"pid": pid, "cmd": list(cmd), "identity": identity(pid)}


def is_same_process(pid: int, record: Mapping[str, Any]) -> bool:
    """Whether ``pid`` still runs the process ``record`` (a pid file's content) describes.

    With /proc: its boot id and start time must equal the recorded ones (and, when the record
    has them, its command line). Without /proc, or for a record written before identities were
    kept, the command line must equal the recorded ``cmd``. A record with neither is never
    trusted: nothing proves the pid is still ours.
    """
    if not pid_alive(pid):
        return False
    now = identity(pid)
    recorded = record.get("identity")
    command = record.get("cmd")
    if now is not None and isinstance(recorded, Mapping):
        return (recorded.get("bootId"), recorded.get("startTicks")) == (now["bootId"], now["startTicks"]) \
            and list(recorded.get("cmdline") or now["cmdline"]) == now["cmdline"]
    if not isinstance(command, list) or not command:
        return False
    if now is not None:
        return [str(part) for part in command] == now["cmdline"]
    shown = _ps_command(pid)
    return shown is not None and shown == " ".join(str(part) for part in command)


def _ps_command(pid: int) -> str | None:
    """The command line ``ps`` shows for ``pid`` (systems without /proc), or None."""
    try:
        done = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True,
                              text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def terminate(pid: int, *, grace_seconds: float, group: bool = False, resume: bool = False) -> None:
    """SIGTERM ``pid`` (its whole process group with ``group``), reap it if it is our child,
    and SIGKILL it if it is still alive after ``grace_seconds``. A process already gone is fine.
    With ``resume``, SIGCONT follows the SIGTERM: a stopped process acts on SIGTERM only once it
    runs again, and then shuts down cleanly instead of waiting for SIGKILL."""
    send = os.killpg if group else os.kill
    try:
        send(pid, signal.SIGTERM)
        if resume:
            send(pid, signal.SIGCONT)
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
            send(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_signals() -> threading.Event:
    """An event that SIGTERM and SIGINT set (handlers installed now, from the main thread):
    a long-running command polls it to stop cleanly."""
    stop = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
