"""Liveness of the processes ``usl up`` supervises: a process that hangs is killed and restarted.

The supervisor (:func:`deploy.stack.supervise`) restarts a process that exits. One that hangs (a
deadlock, a stopped process, an event loop stuck in a call that never returns) keeps its pid
and stays hung: a hung API answered nothing until someone noticed. So each process that serves
HTTP -- the API on its port (``/healthz``), every worker, sink and follower on its ``/metrics``
port -- is probed every ``USL_LIVENESS_PROBE_SECONDS``. Any HTTP answer counts, whatever its
status: the question is whether the process answers at all, not whether it is ready. A process
is hung once its last ``USL_LIVENESS_FAILURES`` probes failed in a row *and* it has answered
nothing for ``USL_LIVENESS_GRACE_SECONDS`` (counted from its start until it first answers: a
starting process gets the whole grace to come up). Both must hold: a burst of quick failures is not two minutes of
silence, and a long silence seen by one or two probes is too little evidence. The defaults
(20 s, 6, 120 s) are those of the Kubernetes probes in ``deploy/k8s`` and outlast a full garbage
collection or a large merge many times over.

:class:`Liveness` is the rule for one process, on a clock the caller passes; :class:`Watchdog`
runs the probes in threads, so a probe that waits for its timeout never holds the supervisor.
"""

from __future__ import annotations

import http.client
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from streams.settings import Settings

__all__ = ["PROBE_TIMEOUT_SECONDS", "Liveness", "Watchdog", "answers"]

PROBE_TIMEOUT_SECONDS = 5.0
"""Longest one probe waits for an HTTP answer (the probe interval, when that is shorter)."""


def answers(url: str, timeout_seconds: float) -> bool:
    """Whether an HTTP server answers ``GET url`` within ``timeout_seconds`` (any status).

    A stopped or hung process still has its listening socket, and the kernel completes the TCP
    handshake for it: only a response proves the process runs. No proxy is consulted."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_seconds)
    try:
        connection.request("GET", parts.path or "/")
        connection.getresponse().close()
    except (OSError, http.client.HTTPException):  # refused, reset, timed out, not HTTP
        return False
    finally:
        connection.close()
    return True


@dataclass
class Liveness:
    """The probes of one process (one pid): failures in a row and when it last answered."""

    last_answer: float
    """When the process last answered a probe; its start until it first does."""
    failures: int = 0

    def record(self, answered: bool, now: float) -> None:
        if answered:
            self.failures = 0
            self.last_answer = now
        else:
            self.failures += 1

    def hung(self, now: float, *, failures: int, grace_seconds: float) -> bool:
        """``failures`` probes in a row failed and nothing answered for ``grace_seconds``
        (``failures`` 0: never)."""
        return failures > 0 and self.failures >= failures and now - self.last_answer >= grace_seconds


@dataclass
class _Watched:
    pid: int
    liveness: Liveness
    next_probe: float
    probe: Future[bool] | None = None


class Watchdog:
    """Probes the supervised processes and says which one is hung.

    :meth:`check` is called on every tick of the supervisor's loop for each running process: it
    starts a probe when one is due (in a thread of its own), records the answer of one that has
    finished, and returns why the process is hung, or None. A new pid under the same name (a
    restart) starts afresh.
    """

    def __init__(self, settings: Settings, processes: int, *,
                 probe: Callable[[str, float], bool] = answers) -> None:
        self.interval_seconds = settings.liveness_probe_seconds
        self.failures = settings.liveness_failures
        self.grace_seconds = settings.liveness_grace_seconds
        self.timeout_seconds = min(PROBE_TIMEOUT_SECONDS, self.interval_seconds)
        self._probe = probe
        self._pool = ThreadPoolExecutor(max_workers=max(1, processes), thread_name_prefix="usl-liveness")
        self._watched: dict[str, _Watched] = {}

    def check(self, name: str, pid: int, url: str | None, now: float) -> str | None:
        """Why ``name`` (running as ``pid``, answering on ``url``) must be killed as hung, or
        None (also when it serves no HTTP or the check is off)."""
        if url is None or self.failures == 0:
            return None
        watched = self._watched.get(name)
        if watched is None or watched.pid != pid:
            watched = self._watched[name] = _Watched(pid, Liveness(last_answer=now), next_probe=now)
        if watched.probe is not None and watched.probe.done():
            watched.liveness.record(watched.probe.result(), now)
            watched.probe = None
        if watched.probe is None and now >= watched.next_probe:
            watched.probe = self._pool.submit(self._probe, url, self.timeout_seconds)
            watched.next_probe = now + self.interval_seconds
        liveness = watched.liveness
        if not liveness.hung(now, failures=self.failures, grace_seconds=self.grace_seconds):
            return None
        return (f"no answer from {url} for {now - liveness.last_answer:.0f}s "
                f"({liveness.failures} probes in a row)")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
