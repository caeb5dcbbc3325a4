"""Lag and watermark history kept by the planner API: ``GET /v1/status/history``.

The search page draws each index's lag over time. Kept in the page, that history was lost on
every reload; kept here, in the API process, a reload (or a second viewer) sees the last
minutes at once. A daemon thread samples the status report every ``every`` seconds (the same
cached report ``GET /v1/status`` answers with) and keeps the last ``keep`` samples: per log,
the committed L1 seq and, per index kind, generation, built-through seq and lag. The history
lives as long as the process; it is a view for people, not a record (Prometheus keeps that:
``usl_index_lag_seqs``, ``usl_watermark_seq``).

The thread starts with the first request, so an API nobody looks at samples nothing.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["StatusHistory", "endpoint", "sample_of"]

log = logging.getLogger("usl.api")

SAMPLE_SECONDS = 2.0
KEEP_SAMPLES = 900  # 30 minutes at one sample every 2 s


def sample_of(report: dict[str, Any], *, at: float) -> dict[str, Any]:
    """The part of a status report the history keeps, stamped ``at`` (seconds since the epoch)."""
    logs: dict[str, Any] = {}
    for log_id, entry in (report.get("logs") or {}).items():
        logs[log_id] = {
            "l1CommittedSeq": entry.get("l1CommittedSeq"),
            "indexes": {kind: {"generationId": index.get("generationId"),
                               "builtThroughSeq": index.get("builtThroughSeq"),
                               "lagSeqs": index.get("lagSeqs")}
                        for kind, index in (entry.get("indexes") or {}).items()},
        }
    return {"t": round(at, 3), "logs": logs}


class StatusHistory:
    """The last ``keep`` samples of ``collect()`` taken every ``every`` seconds."""

    def __init__(self, collect: Callable[[], dict[str, Any]], *, every: float = SAMPLE_SECONDS,
                 keep: int = KEEP_SAMPLES, clock: Callable[[], float] = time.time) -> None:
        self.collect, self.every, self.clock = collect, every, clock
        self.samples: deque[dict[str, Any]] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def sample(self) -> None:
        """Take one sample now (a failure to collect is logged and skipped)."""
        try:
            report = self.collect()
        except Exception as exc:  # the broker may be away for a while; the history waits
            log.warning("status history: no sample: %s", exc)
            return
        with self._lock:
            self.samples.append(sample_of(report, at=self.clock()))

    def start(self) -> None:
        """Start sampling in the background (once)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="usl-status-history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (the server shuts down); a later :meth:`start` samples again."""
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout=30)
        self._stop.clear()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every)

    def view(self, log_id: str | None = None, *, since: float | None = None) -> dict[str, Any]:
        """The samples (of one log, after ``since``), oldest first."""
        with self._lock:
            samples = list(self.samples)
        if since is not None:
            samples = [s for s in samples if s["t"] > since]
        if log_id is not None:
            samples = [{"t": s["t"], "logs": {log_id: s["logs"][log_id]} if log_id in s["logs"] else {}}
                       for s in samples]
        return {"everySeconds": self.every, "keep": self.samples.maxlen, "samples": samples}


def endpoint(principal_of: Callable[[Any], Any], collect: Callable[[str | None], dict[str, Any]],
             history: StatusHistory) -> Any:
    """The ``GET /v1/status/history[?log=L&since=T]`` handler of :func:`planner.api.create_app`;
    it needs what ``GET /v1/status`` needs (a key, where keys are enforced). ``history`` samples
    from the first request on; the app stops it when it shuts down."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    from planner.exceptions import QueryError
    from planner.request import log_param, query_params

    async def handle(request: Any) -> Any:
        principal_of(request)
        history.start()
        params = query_params(request.query_params.multi_items(), ("log", "since"))
        since: float | None = None
        if "since" in params:
            try:
                since = float(params["since"])
            except ValueError:
                since = math.nan
            if not math.isfinite(since):  # nan and inf parse, and matched nothing
                raise QueryError("since must be a time in seconds since the epoch, "
                                 f"not {params['since'][:32]!r}",
                                 hint="Send the t of the last sample you hold, e.g. since=1796570000.5.")
        log_id = log_param(params.get("log"))
        if not history.samples:
            await run_in_threadpool(history.sample)
        if log_id is not None and not any(log_id in sample["logs"] for sample in history.samples):
            # A log no sample holds may not exist: /v1/status's own answer (404) for one that
            # does not, where an empty history read as a log with nothing to show.
            await run_in_threadpool(collect, log_id)
        return JSONResponse(history.view(log_id, since=since))

    return handle
